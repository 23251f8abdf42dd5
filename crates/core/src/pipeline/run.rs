//! Running a pipeline, and test runs of single tools, with a trace of every stage.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

use super::candidate::{Candidate, ChunkToolCandidate, ScoredCandidate};
use super::host::{admit_returned_refs, call_code_tool, CtxCall, ToolCallReport, ToolEnvironment};
use super::issued::{visible_output, withheld_note};
use super::{check, resolve, Budget, ReadinessProblem, ResolvedPipeline, Severity};
use crate::auth::Principal;
use crate::context::EngineContext;
use crate::error::{Error, Result};
use crate::evidence::{EvidenceLedger, EvidenceSession};
use crate::ids::ChunkId;
use crate::retrieve::{SearchRequest, StageTrace, WeightedQuery};
use crate::store::{ChunkRecord, Store};
use crate::tools::{ToolDefinition, ToolType};

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Run the draft with the live tools instead of the newest saved version.
    pub draft: bool,
    /// Earlier turns, given to query tools as `history`.
    pub history: Vec<Value>,
    /// Bind the run's references to this conversation, so later runs and tool calls in the
    /// same conversation (and by the same caller) can page from them. `None`: this run only.
    pub conversation: Option<String>,
    /// A tighter cap on query streams than the pipeline's own (an orchestrator mode's budget).
    pub max_query_variants: Option<usize>,
}

/// The evidence session of a run: its own, or its conversation's.
fn session_for(
    engine: &EngineContext<'_>,
    principal: &Principal,
    conversation: Option<&str>,
) -> Result<EvidenceSession> {
    let key = engine.evidence_key.clone();
    match conversation {
        Some(id) => EvidenceSession::in_conversation(key, principal.clone(), id),
        None => EvidenceSession::new(key, principal.clone()),
    }
}

/// What one stage (or one tool in it) did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct StageReport {
    /// `query`, `retrieval`, `chunk` or `evidence`.
    pub stage: &'static str,
    /// The tool, where one ran.
    pub tool: Option<String>,
    /// What went in.
    pub input: Value,
    /// What came out.
    pub output: StageOutput,
    /// Microseconds.
    pub took_us: u64,
    /// Its ctx operations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ctx_calls: Vec<CtxCall>,
    /// What the tool logged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// The retrieval engine's own stages (lexical, vector, fusion, rerank, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search_trace: Vec<StageTrace>,
    /// Anything worth saying.
    pub detail: String,
}

/// A finished run.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct PipelineRun {
    /// Pipeline name.
    pub pipeline: String,
    /// The saved version run, or `None` for the draft.
    pub version: Option<i64>,
    /// Who ran it.
    pub principal: String,
    /// The query.
    pub query: String,
    /// Every stage, in order.
    pub stages: Vec<StageReport>,
    /// The admitted evidence, best first, and any refused references.
    pub evidence: EvidenceLedger,
    /// Degraded-readiness notes (blocking ones stop the run before it starts).
    pub readiness: Vec<ReadinessProblem>,
    /// Microseconds.
    pub took_us: u64,
}

/// What a stage gave out. As JSON each is what it always was (`--json` prints the same); typed,
/// the window reads the retrieval stage's candidates without parsing them by hand.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
#[serde(untagged)]
pub enum StageOutput {
    /// The retrieval stage: the candidates, best first, with what each engine stage gave them.
    Candidates {
        /// The candidates.
        candidates: Vec<ScoredCandidate>,
    },
    /// A tool's output as it returned it (checked against its schema), or a stage's own counts.
    Json(Value),
}

impl StageOutput {
    /// The output as JSON.
    pub fn to_json(&self) -> Value {
        match self {
            StageOutput::Json(value) => value.clone(),
            candidates => serde_json::to_value(candidates).expect("candidates serialize"),
        }
    }
}

impl StageReport {
    /// The report of one code-tool call.
    fn of_call(
        stage: &'static str,
        tool: &ToolDefinition,
        input: Value,
        call: ToolCallReport,
        detail: String,
    ) -> StageReport {
        StageReport {
            stage,
            tool: Some(tool.slug.clone()),
            input,
            output: StageOutput::Json(call.output),
            took_us: call.took_us,
            ctx_calls: call.ctx_calls,
            logs: call.logs,
            search_trace: Vec::new(),
            detail,
        }
    }
}

/// `note()` when `count` is not zero, else nothing: a stage's detail names only what happened.
fn unless_none(count: usize, note: impl FnOnce() -> String) -> String {
    if count > 0 {
        note()
    } else {
        String::new()
    }
}

fn us(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

fn environment<'a>(
    engine: EngineContext<'a>,
    session: &'a EvidenceSession,
    resolved: &'a ResolvedPipeline,
) -> ToolEnvironment<'a> {
    let p = &resolved.pipeline;
    ToolEnvironment {
        engine,
        session,
        retrieval: p.retrieval.as_ref().and_then(|s| resolved.tools.get(s)),
        capabilities: p
            .retrieval_capabilities
            .iter()
            .filter_map(|s| resolved.tools.get(s))
            .collect(),
        collections: p.collections.clone(),
    }
}

/// The retrieval stage: the default tool's settings over the query variants, as the caller.
/// Returns the candidates as tools see them, with each one's server-issued score.
fn retrieve_candidates(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    query: &str,
    variants: &[WeightedQuery],
) -> Result<(StageReport, Vec<Candidate>)> {
    let t = Instant::now();
    let mut request = SearchRequest::new(query);
    request.settings = tool.retrieval_settings()?;
    request.variants = variants.to_vec();
    request.collections = env.collections.clone();
    request.scope = Some(env.session.principal.scope.clone());
    let results = env.engine.retrieval.search(&request)?;
    let ids: Vec<ChunkId> = results.hits.iter().map(|h| h.chunk_id).collect();
    let chunks: HashMap<ChunkId, ChunkRecord> = env
        .engine
        .store
        .chunks_by_id(&ids)?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    let mut candidates = Vec::new();
    let mut scored = Vec::new();
    for hit in &results.hits {
        let Some(chunk) = chunks.get(&hit.chunk_id) else {
            continue;
        };
        candidates.push(Candidate::issue(
            env.session,
            chunk,
            hit.rank,
            hit.score,
            &hit.snippet.text,
        ));
        scored.push(ScoredCandidate::from(hit));
    }
    let report = StageReport {
        stage: "retrieval",
        tool: Some(tool.slug.clone()),
        input: json!({"query": query, "variants": variants, "settings": tool.settings}),
        output: StageOutput::Candidates { candidates: scored },
        took_us: us(t),
        ctx_calls: Vec::new(),
        logs: Vec::new(),
        search_trace: results.trace,
        // Readiness (a missing reranker, say) is in the run's notes and the search trace.
        detail: format!(
            "{} candidate(s), {} mode",
            candidates.len(),
            results.mode.as_str()
        ),
    };
    Ok((report, candidates))
}

/// A query tool over the current variants; returns the new variants, bounded.
fn run_query_tool(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    query: &str,
    history: &[Value],
    variants: &[WeightedQuery],
    budget: usize,
) -> Result<(StageReport, Vec<WeightedQuery>)> {
    let input = json!({
        "query": query,
        "history": history,
        "variants": variants.iter().map(|v| json!({"query": v.text, "weight": v.weight})).collect::<Vec<_>>(),
    });
    let report = call_code_tool(env, tool, &input)?;
    let tool_max = tool
        .effective_settings()
        .get("max_query_variants")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |n| n as usize);
    let bound = tool_max.min(budget);
    let produced: Vec<WeightedQuery> = report.output["queries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| {
            Some(WeightedQuery {
                text: q["query"].as_str()?.to_string(),
                weight: q["weight"].as_f64()? as f32,
            })
        })
        .collect();
    let dropped = produced.len().saturating_sub(bound);
    let kept: Vec<WeightedQuery> = produced.into_iter().take(bound).collect();
    let detail = format!(
        "{} stream(s){}",
        kept.len(),
        unless_none(dropped, || format!(
            "; {dropped} over the limit of {bound} dropped"
        ))
    );
    Ok((
        StageReport::of_call("query", tool, input, report, detail),
        kept,
    ))
}

/// A chunk tool over the candidates: every reference it returns is revalidated; refused ones
/// are recorded in `ledger.rejected` and dropped.
fn run_chunk_tool(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    query: &str,
    candidates: &[Candidate],
    ledger: &mut EvidenceLedger,
) -> Result<(StageReport, Vec<Candidate>)> {
    let shown: Vec<ChunkToolCandidate<'_>> =
        candidates.iter().map(Candidate::for_chunk_tool).collect();
    call_chunk_tool(env, tool, query, &shown, candidates, ledger)
}

/// The call behind [`run_chunk_tool`]: the tool is shown `shown`; a reference it returns that
/// one of `issued` carries keeps that candidate, any other (fetched through `ctx`) becomes a
/// candidate without a score.
fn call_chunk_tool<S: Serialize>(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    query: &str,
    shown: &[S],
    issued: &[Candidate],
    ledger: &mut EvidenceLedger,
) -> Result<(StageReport, Vec<Candidate>)> {
    let input = json!({"query": query, "candidates": shown});
    let report = call_code_tool(env, tool, &input)?;
    let by_ref: HashMap<&str, &Candidate> = issued
        .iter()
        .map(|c| (c.evidence_ref.as_str(), c))
        .collect();
    let mut kept = Vec::new();
    let mut kept_chunks = std::collections::HashSet::new();
    let mut refused = 0;
    for item in report.output["chunks"].as_array().into_iter().flatten() {
        let reference = item["evidence_ref"].as_str().unwrap_or_default();
        let Some(entry) =
            env.session
                .revalidate_or_refuse(env.engine.store, reference, None, &tool.slug, ledger)
        else {
            refused += 1;
            continue;
        };
        // A chunk returned twice counts once against the evidence budget.
        if !kept_chunks.insert(entry.chunk_id) {
            continue;
        }
        kept.push(match by_ref.get(reference) {
            Some(candidate) => (*candidate).clone(),
            // Issued to this run by a ctx fetch the tool declared: a candidate without a score.
            None => Candidate::issue(env.session, &entry_chunk(env, entry.chunk_id)?, 0, 0.0, ""),
        });
    }
    let detail = format!(
        "{} of {} candidate(s) kept{}",
        kept.len(),
        shown.len(),
        unless_none(refused, || format!("; {refused} reference(s) refused"))
    );
    Ok((
        StageReport::of_call("chunk", tool, input, report, detail),
        kept,
    ))
}

fn entry_chunk(env: &ToolEnvironment<'_>, chunk_id: ChunkId) -> Result<ChunkRecord> {
    env.engine
        .store
        .chunks_by_id(&[chunk_id])?
        .pop()
        .ok_or_else(|| Error::EvidenceRejected("the chunk is no longer indexed".into()))
}

/// Runs a pipeline of the engine's library as `principal`.
pub fn run(
    engine: &EngineContext<'_>,
    name: &str,
    query: &str,
    principal: &Principal,
    options: &RunOptions,
) -> Result<PipelineRun> {
    let resolved = resolve(engine.store, name, options.draft)?;
    run_resolved(engine, &resolved, query, principal, options)
}

/// Runs a resolved pipeline (possibly from another library: `quarry eval --pipeline` runs the
/// user's pipeline over the evaluation corpus) against the engine's library.
pub fn run_resolved(
    engine: &EngineContext<'_>,
    resolved: &ResolvedPipeline,
    query: &str,
    principal: &Principal,
    options: &RunOptions,
) -> Result<PipelineRun> {
    let started = Instant::now();
    let readiness = ready_to_run(engine, resolved, principal)?;
    let query = non_empty(query)?;
    let session = session_for(engine, principal, options.conversation.as_deref())?;
    let scope = narrow_to_caller(engine.store, resolved, principal)?;
    let resolved = &scope.pipeline;
    let env = environment(*engine, &session, resolved);
    let budget = run_budget(resolved, options);
    let mut stages = Vec::new();
    let mut ledger = EvidenceLedger::default();

    let variants = query_stage(&env, resolved, query, options, budget, &mut stages)?;
    let retrieval = env.retrieval.expect("checked: ready pipelines have one");
    let (mut report, candidates) = if scope.none_readable {
        (nothing_readable(retrieval, query, &variants), Vec::new())
    } else {
        retrieve_candidates(&env, retrieval, query, &variants)?
    };
    if scope.left_out > 0 {
        report.detail += &format!(
            "; narrowed to the caller's collections: {} of the pipeline's {} left out",
            scope.left_out, scope.named
        );
    }
    stages.push(report);
    let candidates = chunk_stage(&env, resolved, query, candidates, &mut ledger, &mut stages)?;
    stages.push(evidence_stage(
        &session,
        engine.store,
        &candidates,
        budget.max_evidence,
        &mut ledger,
    ));
    Ok(PipelineRun {
        pipeline: resolved.name.clone(),
        version: resolved.version,
        principal: principal.label.clone(),
        query: query.into(),
        stages,
        evidence: ledger,
        readiness,
        took_us: us(started),
    })
}

/// A pipeline narrowed to the collections its caller may read (the manual: a pipeline's
/// collections are narrowed to the caller's, never an error).
struct CallerScope<'a> {
    /// The pipeline itself unless something was left out.
    pipeline: Cow<'a, ResolvedPipeline>,
    /// Collections the pipeline names.
    named: usize,
    /// How many of them the caller may not read.
    left_out: usize,
    /// It names collections and the caller may read none of them: nothing to search.
    none_readable: bool,
}

fn narrow_to_caller<'a>(
    store: &Store,
    resolved: &'a ResolvedPipeline,
    principal: &Principal,
) -> Result<CallerScope<'a>> {
    let named = resolved.pipeline.collections.len();
    let whole = |left_out, none_readable| CallerScope {
        pipeline: Cow::Borrowed(resolved),
        named,
        left_out,
        none_readable,
    };
    if named == 0 {
        return Ok(whole(0, false));
    }
    let collections = store.collections()?;
    let readable = |name: &String| {
        // A collection that does not exist stays: readiness and search name it.
        collections
            .iter()
            .find(|c| &c.name == name)
            .is_none_or(|c| principal.scope.allows(c))
    };
    let kept: Vec<String> = resolved
        .pipeline
        .collections
        .iter()
        .filter(|n| readable(n))
        .cloned()
        .collect();
    let left_out = named - kept.len();
    // With none readable the names stay, so a code tool's ctx.search finds nothing rather
    // than every collection (an empty list means all of them).
    if left_out == 0 || kept.is_empty() {
        return Ok(whole(left_out, kept.is_empty()));
    }
    let mut narrowed = resolved.clone();
    narrowed.pipeline.collections = kept;
    Ok(CallerScope {
        pipeline: Cow::Owned(narrowed),
        named,
        left_out,
        none_readable: false,
    })
}

/// The retrieval stage of a caller who may read none of the pipeline's collections.
fn nothing_readable(tool: &ToolDefinition, query: &str, variants: &[WeightedQuery]) -> StageReport {
    StageReport {
        stage: "retrieval",
        tool: Some(tool.slug.clone()),
        input: json!({"query": query, "variants": variants, "settings": tool.settings}),
        output: StageOutput::Candidates {
            candidates: Vec::new(),
        },
        took_us: 0,
        ctx_calls: Vec::new(),
        logs: Vec::new(),
        search_trace: Vec::new(),
        detail: "0 candidate(s): the caller may read none of the pipeline's collections".into(),
    }
}

/// The readiness notes of a pipeline that may run; an error naming every blocking problem
/// otherwise.
fn ready_to_run(
    engine: &EngineContext<'_>,
    resolved: &ResolvedPipeline,
    principal: &Principal,
) -> Result<Vec<ReadinessProblem>> {
    let problems = check(
        engine.store,
        engine.models,
        engine.executor,
        resolved,
        principal,
    );
    let blocking: Vec<String> = problems
        .iter()
        .filter(|p| p.severity == Severity::Blocking)
        .map(|p| p.message.clone())
        .collect();
    if !blocking.is_empty() {
        return Err(Error::PipelineNotReady {
            pipeline: resolved.name.clone(),
            problems: blocking,
        });
    }
    Ok(problems)
}

fn non_empty(query: &str) -> Result<&str> {
    let query = query.trim();
    if query.is_empty() {
        return Err(Error::InvalidSetting {
            field: "query".into(),
            reason: "is empty".into(),
        });
    }
    Ok(query)
}

/// The pipeline's budget, under the caller's tighter cap on query streams.
fn run_budget(resolved: &ResolvedPipeline, options: &RunOptions) -> Budget {
    let mut budget = resolved.pipeline.budget;
    if let Some(cap) = options.max_query_variants {
        budget.max_query_variants = budget.max_query_variants.min(cap.max(1));
    }
    budget
}

fn single_variant(query: &str) -> Vec<WeightedQuery> {
    vec![WeightedQuery {
        text: query.to_string(),
        weight: 1.0,
    }]
}

/// The Query stage: each query tool in order over the previous tool's streams (a tool that
/// produces none keeps the previous ones).
fn query_stage(
    env: &ToolEnvironment<'_>,
    resolved: &ResolvedPipeline,
    query: &str,
    options: &RunOptions,
    budget: Budget,
    stages: &mut Vec<StageReport>,
) -> Result<Vec<WeightedQuery>> {
    let mut variants = single_variant(query);
    for slug in &resolved.pipeline.query_tools {
        let tool = &resolved.tools[slug];
        let (mut report, produced) = run_query_tool(
            env,
            tool,
            query,
            &options.history,
            &variants,
            budget.max_query_variants,
        )?;
        if produced.is_empty() {
            report.detail += "; no streams produced, so the previous ones are kept";
        } else {
            variants = produced;
        }
        stages.push(report);
    }
    Ok(variants)
}

/// The Chunk stage: each chunk tool in order over the previous tool's selection.
fn chunk_stage(
    env: &ToolEnvironment<'_>,
    resolved: &ResolvedPipeline,
    query: &str,
    mut candidates: Vec<Candidate>,
    ledger: &mut EvidenceLedger,
    stages: &mut Vec<StageReport>,
) -> Result<Vec<Candidate>> {
    for slug in &resolved.pipeline.chunk_tools {
        let tool = &resolved.tools[slug];
        let (report, kept) = run_chunk_tool(env, tool, query, &candidates, ledger)?;
        stages.push(report);
        candidates = kept;
    }
    Ok(candidates)
}

/// The evidence stage: the best candidates, up to the budget, revalidated and admitted.
fn evidence_stage(
    session: &EvidenceSession,
    store: &Store,
    candidates: &[Candidate],
    max_evidence: usize,
    ledger: &mut EvidenceLedger,
) -> StageReport {
    let t = Instant::now();
    for candidate in candidates.iter().take(max_evidence) {
        session.admit_chunk(
            store,
            &candidate.evidence_ref,
            candidate.json_score(),
            "pipeline",
            ledger,
        );
    }
    StageReport {
        stage: "evidence",
        tool: None,
        input: json!({"selected": candidates.len()}),
        output: StageOutput::Json(json!({
            "admitted": ledger.entries.len(),
            "rejected": ledger.rejected.len(),
        })),
        took_us: us(t),
        ctx_calls: Vec::new(),
        logs: Vec::new(),
        search_trace: Vec::new(),
        detail: format!(
            "{} chunk(s) admitted to the ledger (budget {}), {} reference(s) refused",
            ledger.entries.len(),
            max_evidence,
            ledger.rejected.len()
        ),
    }
}

/// What a tool test takes.
#[derive(Debug, Clone)]
pub enum TestInput {
    /// A query (retrieval, query and chunk tools).
    Query(String),
    /// JSON input (code tools).
    Json(Value),
}

/// A finished tool test.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolTestReport {
    /// The tool.
    pub tool: String,
    /// Its type.
    pub tool_type: ToolType,
    /// Who ran it.
    pub principal: String,
    /// The pipeline context.
    pub pipeline: Option<String>,
    /// Stages run (a chunk tool tested with a query runs retrieval first).
    pub stages: Vec<StageReport>,
    /// The tool's output.
    pub output: Value,
    /// Admitted references, and refused ones with the reason (`evidence.rejected`).
    pub evidence: EvidenceLedger,
    /// Microseconds.
    pub took_us: u64,
    /// The audit record this test wrote (set by `Library::test_tool`, which writes it).
    pub audit_id: Option<i64>,
}

/// Tests a tool as `principal`, in a pipeline's context (its retrieval tools and
/// collections); the live tool definition is used, so an edit can be tried before any pipeline
/// is saved.
pub fn test_tool(
    engine: &EngineContext<'_>,
    slug: &str,
    input: &TestInput,
    principal: &Principal,
    pipeline: Option<&str>,
    conversation: Option<&str>,
) -> Result<ToolTestReport> {
    let started = Instant::now();
    let tool = crate::tools::get(engine.store, slug)?;
    let context = test_context(engine.store, pipeline)?;
    let resolved = context_with_tool(context.as_ref(), &tool);
    let session = session_for(engine, principal, conversation)?;
    let mut test = ToolTest {
        env: environment(*engine, &session, &resolved),
        tool: &tool,
        stages: Vec::new(),
        ledger: EvidenceLedger::default(),
    };
    let output = match (tool.tool_type, input) {
        (ToolType::Retrieval, TestInput::Query(q)) => test.retrieval(q)?,
        (ToolType::Retrieval, TestInput::Json(_)) => return Err(needs_query("retrieval")),
        (ToolType::Query, input) => {
            test.query(input, resolved.pipeline.budget.max_query_variants)?
        }
        (ToolType::Chunk, TestInput::Query(q)) => test.chunk_after_retrieval(q)?,
        (ToolType::Chunk, TestInput::Json(v)) => test.chunk_on_candidates(v)?,
        (ToolType::Action, input) => test.action(input)?,
    };
    let ToolTest { stages, ledger, .. } = test;
    Ok(ToolTestReport {
        tool: tool.slug.clone(),
        tool_type: tool.tool_type,
        principal: principal.label.clone(),
        pipeline: context.map(|c| c.name),
        stages,
        output,
        evidence: ledger,
        took_us: us(started),
        audit_id: None,
    })
}

/// The pipeline a test runs in: the one named, else the default pipeline's draft if there is
/// one.
fn test_context(store: &Store, pipeline: Option<&str>) -> Result<Option<ResolvedPipeline>> {
    Ok(match pipeline {
        Some(name) => Some(resolve(store, name, true)?),
        None => resolve(store, super::DEFAULT_PIPELINE, true).ok(),
    })
}

/// The test's context, with a retrieval tool under test as its retrieval.
fn context_with_tool(
    context: Option<&ResolvedPipeline>,
    tool: &ToolDefinition,
) -> ResolvedPipeline {
    let mut resolved = context.cloned().unwrap_or_else(ResolvedPipeline::empty);
    if tool.tool_type == ToolType::Retrieval {
        resolved.pipeline.retrieval = Some(tool.slug.clone());
        resolved.tools.insert(tool.slug.clone(), tool.clone());
    }
    resolved
}

fn needs_query(what: &str) -> Error {
    Error::InvalidSetting {
        field: "input".into(),
        reason: format!("a {what} tool test takes a query (--query)"),
    }
}

/// One tool test in progress: one method per kind of test, each adding its stages.
struct ToolTest<'a> {
    env: ToolEnvironment<'a>,
    tool: &'a ToolDefinition,
    stages: Vec<StageReport>,
    ledger: EvidenceLedger,
}

impl ToolTest<'_> {
    /// Admits candidates as the tool under test; refused ones are listed with their reason.
    fn admit(&mut self, candidates: &[Candidate]) {
        for c in candidates {
            self.env.session.admit_chunk(
                self.env.engine.store,
                &c.evidence_ref,
                c.json_score(),
                &self.tool.slug,
                &mut self.ledger,
            );
        }
    }

    fn retrieval(&mut self, query: &str) -> Result<Value> {
        let (report, candidates) =
            retrieve_candidates(&self.env, self.tool, query, &single_variant(query))?;
        self.stages.push(report);
        self.admit(&candidates);
        let shown: Vec<_> = candidates
            .iter()
            .map(Candidate::for_retrieval_test)
            .collect();
        Ok(json!({ "candidates": shown }))
    }

    fn query(&mut self, input: &TestInput, budget: usize) -> Result<Value> {
        let (query, variants, history) = match input {
            TestInput::Query(q) => (q.clone(), single_variant(q), Vec::new()),
            TestInput::Json(v) => (
                v["query"].as_str().unwrap_or_default().to_string(),
                given_variants(&v["variants"]),
                // The conversation so far, as a chat turn would give it (newest last).
                v["history"].as_array().cloned().unwrap_or_default(),
            ),
        };
        let (report, _) =
            run_query_tool(&self.env, self.tool, &query, &history, &variants, budget)?;
        let output = report.output.to_json();
        self.stages.push(report);
        Ok(output)
    }

    /// A chunk tool over what the context's retrieval finds for `query`.
    fn chunk_after_retrieval(&mut self, query: &str) -> Result<Value> {
        let retrieval = self.env.retrieval.ok_or_else(|| Error::InvalidSetting {
            field: "pipeline".into(),
            reason: "testing a chunk tool with a query needs a pipeline context with a default retrieval tool".into(),
        })?;
        let (report, candidates) =
            retrieve_candidates(&self.env, retrieval, query, &single_variant(query))?;
        self.stages.push(report);
        let (report, kept) =
            run_chunk_tool(&self.env, self.tool, query, &candidates, &mut self.ledger)?;
        let output = report.output.to_json();
        self.stages.push(report);
        self.admit(&kept);
        Ok(output)
    }

    /// A chunk tool over candidates given by hand: they carry references this run never
    /// issued, so each is refused.
    fn chunk_on_candidates(&mut self, input: &Value) -> Result<Value> {
        let given = input["candidates"].as_array().cloned().unwrap_or_default();
        // Shown to the tool as given (any JSON), limited to the keys a chunk tool sees.
        let shown: Vec<Value> = given
            .iter()
            .map(|c| {
                json!({
                    "evidence_ref": c["evidence_ref"],
                    "source_ref": c.get("sourceRef").unwrap_or(&c["source_ref"]),
                    "score": c["score"],
                    "rank": c["rank"],
                    "title": c["title"],
                    "snippet": c["snippet"],
                })
            })
            .collect();
        let query = input["query"].as_str().unwrap_or_default();
        let (report, _) =
            call_chunk_tool(&self.env, self.tool, query, &shown, &[], &mut self.ledger)?;
        let output = report.output.to_json();
        self.stages.push(report);
        Ok(output)
    }

    fn action(&mut self, input: &TestInput) -> Result<Value> {
        let value = match input {
            TestInput::Json(v) => v.clone(),
            TestInput::Query(q) => json!({"query": q}),
        };
        // The tester shows the output with the admitted passages beside its references, and
        // every field the tool wrote; the stage's detail names what a model would not see.
        let (stage, _, _) = action_call(&self.env, self.tool, value, &mut self.ledger)?;
        let output = stage.output.to_json();
        self.stages.push(stage);
        Ok(output)
    }
}

/// Query streams given as JSON (`[{"query", "weight"}]`); malformed ones are skipped.
fn given_variants(value: &Value) -> Vec<WeightedQuery> {
    serde_json::from_value::<Vec<Value>>(value.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|x| {
            Some(WeightedQuery {
                text: x["query"].as_str()?.into(),
                weight: x["weight"].as_f64()? as f32,
            })
        })
        .collect()
}

/// One action-tool call: input checked, the call governed, every reference it returns
/// revalidated and admitted (its text replaced by the ledger's) before anyone sees the output.
fn action_call(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    input: Value,
    ledger: &mut EvidenceLedger,
) -> Result<(StageReport, Value, Vec<String>)> {
    let mut report = call_code_tool(env, tool, &input)?;
    let before = (ledger.entries.len(), ledger.rejected.len());
    admit_returned_refs(env, &tool.slug, &mut report.output, &report.issued, ledger);
    let (output, withheld) = visible_output(&report.output, &report.issued);
    let mut detail = format!(
        "{} reference(s) admitted, {} refused",
        ledger.entries.len() - before.0,
        ledger.rejected.len() - before.1
    );
    if let Some(note) = withheld_note(&withheld) {
        detail += &format!("; {note}");
    }
    let stage = StageReport::of_call("action", tool, input, report, detail);
    Ok((stage, output, withheld))
}

/// A direct evidence tool called by the orchestrator.
#[derive(Debug, Clone, Serialize)]
pub struct ActionCall {
    /// The call as a trace stage (the output with the admitted passages beside its references,
    /// and every field the tool wrote).
    pub stage: StageReport,
    /// What a model may see of the output: admitted text beside references, and no string or
    /// number the tool made up.
    pub output: Value,
    /// Where the output held strings or numbers the tool made up (dotted paths), withheld.
    pub withheld: Vec<String>,
    /// Admitted and refused references.
    pub evidence: EvidenceLedger,
}

/// Calls an action tool (a snapshot from an applied orchestrator revision) as `principal` in
/// `conversation`, with the retrieval tools and collections of `pipeline` as its context.
pub fn call_action(
    engine: &EngineContext<'_>,
    tool: &ToolDefinition,
    input: &Value,
    principal: &Principal,
    pipeline: Option<&ResolvedPipeline>,
    conversation: &str,
) -> Result<ActionCall> {
    if tool.tool_type != ToolType::Action {
        return Err(Error::InvalidSetting {
            field: "direct_tools".into(),
            reason: format!(
                "`{}` is a {} tool, not an action tool",
                tool.slug,
                tool.tool_type.as_str()
            ),
        });
    }
    let empty = ResolvedPipeline::empty();
    let resolved = pipeline.unwrap_or(&empty);
    let session = session_for(engine, principal, Some(conversation))?;
    let env = environment(*engine, &session, resolved);
    let mut evidence = EvidenceLedger::default();
    let (stage, output, withheld) = action_call(&env, tool, input.clone(), &mut evidence)?;
    Ok(ActionCall {
        stage,
        output,
        withheld,
        evidence,
    })
}
