//! Running a pipeline, and test runs of single tools, with a trace of every stage.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

use super::host::{
    admit_returned_refs, call_code_tool, candidate_json, CtxCall, ToolCallReport, ToolEnvironment,
};
use super::{check, resolve, ReadinessProblem, ResolvedPipeline, Severity};
use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::evidence::{EvidenceLedger, EvidenceSession};
use crate::retrieve::{SearchRequest, StageTrace, WeightedQuery};
use crate::tools::{ToolDefinition, ToolType};
use crate::Library;

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
    library: &Library,
    principal: &Principal,
    conversation: Option<&str>,
) -> Result<EvidenceSession> {
    let key = library.evidence_key()?;
    match conversation {
        Some(id) => EvidenceSession::in_conversation(key, principal.clone(), id),
        None => EvidenceSession::new(key, principal.clone()),
    }
}

/// What one stage (or one tool in it) did.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// `query`, `retrieval`, `chunk` or `evidence`.
    pub stage: &'static str,
    /// The tool, where one ran.
    pub tool: Option<String>,
    /// What went in.
    pub input: Value,
    /// What came out.
    pub output: Value,
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
            output: call.output,
            took_us: call.took_us,
            ctx_calls: call.ctx_calls,
            logs: call.logs,
            search_trace: Vec::new(),
            detail,
        }
    }
}

fn us(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

fn environment<'a>(
    library: &'a Library,
    session: &'a EvidenceSession,
    resolved: &'a ResolvedPipeline,
) -> ToolEnvironment<'a> {
    let p = &resolved.pipeline;
    ToolEnvironment {
        library,
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
) -> Result<(StageReport, Vec<Value>)> {
    let t = Instant::now();
    let mut request = SearchRequest::new(query);
    request.settings = tool.retrieval_settings()?;
    request.variants = variants.to_vec();
    request.collections = env.collections.clone();
    request.scope = Some(env.session.principal.scope.clone());
    let results = env.library.search(&request)?;
    let ids: Vec<i64> = results.hits.iter().map(|h| h.chunk_id).collect();
    let chunks: HashMap<i64, crate::ChunkRecord> = env
        .library
        .store()
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
        candidates.push(candidate_json(
            env.session,
            chunk,
            hit.rank,
            hit.score,
            &hit.snippet.text,
        ));
        scored.push(json!({
            "rank": hit.rank,
            "score": hit.score,
            "scores": hit.scores,
            "title": hit.title,
            "path": hit.path.display().to_string(),
            "collection": hit.collection,
        }));
    }
    let report = StageReport {
        stage: "retrieval",
        tool: Some(tool.slug.clone()),
        input: json!({"query": query, "variants": variants, "settings": tool.settings}),
        output: json!({"candidates": scored}),
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
        if dropped > 0 {
            format!("; {dropped} over the limit of {bound} dropped")
        } else {
            String::new()
        }
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
    candidates: &[Value],
    ledger: &mut EvidenceLedger,
) -> Result<(StageReport, Vec<Value>)> {
    let input = json!({
        "query": query,
        "candidates": candidates.iter().map(|c| json!({
            "evidence_ref": c["evidence_ref"],
            "source_ref": c["source_ref"],
            "score": c["score"],
            "rank": c["rank"],
            "title": c["title"],
            "snippet": c["snippet"],
        })).collect::<Vec<_>>(),
    });
    let report = call_code_tool(env, tool, &input)?;
    let by_ref: HashMap<&str, &Value> = candidates
        .iter()
        .filter_map(|c| Some((c["evidence_ref"].as_str()?, c)))
        .collect();
    let mut kept = Vec::new();
    let mut kept_chunks = std::collections::HashSet::new();
    let mut refused = 0;
    for item in report.output["chunks"].as_array().into_iter().flatten() {
        let reference = item["evidence_ref"].as_str().unwrap_or_default();
        match env
            .session
            .revalidate_chunk(env.library.store(), reference, None, &tool.slug)
        {
            // A chunk returned twice counts once against the evidence budget.
            Ok(entry) if !kept_chunks.insert(entry.chunk_id) => {}
            Ok(entry) => kept.push(match by_ref.get(reference) {
                Some(candidate) => (*candidate).clone(),
                // Issued to this run by a ctx fetch the tool declared: a candidate without a score.
                None => candidate_json(env.session, &entry_chunk(env, entry.chunk_id)?, 0, 0.0, ""),
            }),
            Err(e) => {
                refused += 1;
                ledger.reject(reference, &tool.slug, e.to_string());
            }
        }
    }
    let detail = format!(
        "{} of {} candidate(s) kept{}",
        kept.len(),
        candidates.len(),
        if refused > 0 {
            format!("; {refused} reference(s) refused")
        } else {
            String::new()
        }
    );
    Ok((
        StageReport::of_call("chunk", tool, input, report, detail),
        kept,
    ))
}

fn entry_chunk(env: &ToolEnvironment<'_>, chunk_id: i64) -> Result<crate::ChunkRecord> {
    env.library
        .store()
        .chunks_by_id(&[chunk_id])?
        .pop()
        .ok_or_else(|| Error::EvidenceRejected("the chunk is no longer indexed".into()))
}

/// Runs a pipeline of `library` as `principal`.
pub fn run(
    library: &Library,
    name: &str,
    query: &str,
    principal: &Principal,
    options: &RunOptions,
) -> Result<PipelineRun> {
    let resolved = resolve(library.store(), name, options.draft)?;
    run_resolved(library, &resolved, query, principal, options)
}

/// Runs a resolved pipeline (possibly from another library: `quarry eval --pipeline` runs the
/// user's pipeline over the evaluation corpus) against `library`.
pub fn run_resolved(
    library: &Library,
    resolved: &ResolvedPipeline,
    query: &str,
    principal: &Principal,
    options: &RunOptions,
) -> Result<PipelineRun> {
    let started = Instant::now();
    let name = resolved.name.as_str();
    let problems = check(library, resolved);
    let blocking: Vec<String> = problems
        .iter()
        .filter(|p| p.severity == Severity::Blocking)
        .map(|p| p.message.clone())
        .collect();
    if !blocking.is_empty() {
        return Err(Error::PipelineNotReady {
            pipeline: name.into(),
            problems: blocking,
        });
    }
    let query = query.trim();
    if query.is_empty() {
        return Err(Error::InvalidSetting {
            field: "query".into(),
            reason: "is empty".into(),
        });
    }
    let session = session_for(library, principal, options.conversation.as_deref())?;
    let env = environment(library, &session, resolved);
    let mut budget = resolved.pipeline.budget;
    if let Some(cap) = options.max_query_variants {
        budget.max_query_variants = budget.max_query_variants.min(cap.max(1));
    }
    let mut stages = Vec::new();
    let mut ledger = EvidenceLedger::default();

    let mut variants = vec![WeightedQuery {
        text: query.to_string(),
        weight: 1.0,
    }];
    for slug in &resolved.pipeline.query_tools {
        let tool = &resolved.tools[slug];
        let (report, produced) = run_query_tool(
            &env,
            tool,
            query,
            &options.history,
            &variants,
            budget.max_query_variants,
        )?;
        stages.push(report);
        if produced.is_empty() {
            stages.last_mut().expect("just pushed").detail +=
                "; no streams produced, so the previous ones are kept";
        } else {
            variants = produced;
        }
    }

    let retrieval = env.retrieval.expect("checked: ready pipelines have one");
    let (report, mut candidates) = retrieve_candidates(&env, retrieval, query, &variants)?;
    stages.push(report);

    for slug in &resolved.pipeline.chunk_tools {
        let tool = &resolved.tools[slug];
        let (report, kept) = run_chunk_tool(&env, tool, query, &candidates, &mut ledger)?;
        stages.push(report);
        candidates = kept;
    }

    let t = Instant::now();
    for candidate in candidates.iter().take(budget.max_evidence) {
        let reference = candidate["evidence_ref"].as_str().unwrap_or_default();
        let score = candidate["score"].as_f64().map(|s| s as f32);
        match session.revalidate_chunk(library.store(), reference, score, "pipeline") {
            Ok(entry) => {
                ledger.admit(entry);
            }
            Err(e) => ledger.reject(reference, "pipeline", e.to_string()),
        }
    }
    stages.push(StageReport {
        stage: "evidence",
        tool: None,
        input: json!({"selected": candidates.len()}),
        output: json!({
            "admitted": ledger.entries.len(),
            "rejected": ledger.rejected.len(),
        }),
        took_us: us(t),
        ctx_calls: Vec::new(),
        logs: Vec::new(),
        search_trace: Vec::new(),
        detail: format!(
            "{} chunk(s) admitted to the ledger (budget {}), {} reference(s) refused",
            ledger.entries.len(),
            budget.max_evidence,
            ledger.rejected.len()
        ),
    });
    Ok(PipelineRun {
        pipeline: name.into(),
        version: resolved.version,
        principal: principal.label.clone(),
        query: query.into(),
        stages,
        evidence: ledger,
        readiness: problems,
        took_us: us(started),
    })
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
    /// Admitted and refused references.
    pub evidence: EvidenceLedger,
    /// Microseconds.
    pub took_us: u64,
}

/// Tests a tool as `principal`, in a pipeline's context (its retrieval tools and
/// collections); the live tool definition is used, so an edit can be tried before any pipeline
/// is saved.
pub fn test_tool(
    library: &Library,
    slug: &str,
    input: &TestInput,
    principal: &Principal,
    pipeline: Option<&str>,
    conversation: Option<&str>,
) -> Result<ToolTestReport> {
    let started = Instant::now();
    let tool = crate::tools::get(library.store(), slug)?;
    let context = match pipeline {
        Some(name) => Some(resolve(library.store(), name, true)?),
        None => resolve(library.store(), super::DEFAULT_PIPELINE, true).ok(),
    };
    let mut resolved = context.clone().unwrap_or(ResolvedPipeline {
        name: String::new(),
        version: None,
        pipeline: Default::default(),
        tools: Default::default(),
    });
    if tool.tool_type == ToolType::Retrieval {
        // The tool under test is the retrieval of this test.
        resolved.pipeline.retrieval = Some(tool.slug.clone());
        resolved.tools.insert(tool.slug.clone(), tool.clone());
    }
    let session = session_for(library, principal, conversation)?;
    let env = environment(library, &session, &resolved);
    let mut ledger = EvidenceLedger::default();
    let mut stages = Vec::new();
    let need_query = |what: &str| Error::InvalidSetting {
        field: "input".into(),
        reason: format!("a {what} tool test takes a query (--query)"),
    };
    let output = match (tool.tool_type, input) {
        (ToolType::Retrieval, TestInput::Query(q)) => {
            let (report, candidates) = retrieve_candidates(
                &env,
                &tool,
                q,
                &[WeightedQuery {
                    text: q.clone(),
                    weight: 1.0,
                }],
            )?;
            stages.push(report);
            for c in &candidates {
                let reference = c["evidence_ref"].as_str().unwrap_or_default();
                if let Ok(entry) = session.revalidate_chunk(
                    library.store(),
                    reference,
                    c["score"].as_f64().map(|s| s as f32),
                    &tool.slug,
                ) {
                    ledger.admit(entry);
                }
            }
            json!({"candidates": candidates.iter().map(|c| json!({
                "rank": c["rank"], "score": c["score"], "title": c["title"], "path": c["path"], "snippet": c["snippet"],
            })).collect::<Vec<_>>()})
        }
        (ToolType::Retrieval, TestInput::Json(_)) => return Err(need_query("retrieval")),
        (ToolType::Query, input) => {
            let (q, variants) = match input {
                TestInput::Query(q) => (
                    q.clone(),
                    vec![WeightedQuery {
                        text: q.clone(),
                        weight: 1.0,
                    }],
                ),
                TestInput::Json(v) => (
                    v["query"].as_str().unwrap_or_default().to_string(),
                    serde_json::from_value::<Vec<Value>>(v["variants"].clone())
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|x| {
                            Some(WeightedQuery {
                                text: x["query"].as_str()?.into(),
                                weight: x["weight"].as_f64()? as f32,
                            })
                        })
                        .collect(),
                ),
            };
            let (report, _) = run_query_tool(
                &env,
                &tool,
                &q,
                &[],
                &variants,
                resolved.pipeline.budget.max_query_variants,
            )?;
            let output = report.output.clone();
            stages.push(report);
            output
        }
        (ToolType::Chunk, TestInput::Query(q)) => {
            let retrieval = env.retrieval.ok_or_else(|| Error::InvalidSetting {
                field: "pipeline".into(),
                reason: "testing a chunk tool with a query needs a pipeline context with a default retrieval tool".into(),
            })?;
            let (report, candidates) = retrieve_candidates(
                &env,
                retrieval,
                q,
                &[WeightedQuery {
                    text: q.clone(),
                    weight: 1.0,
                }],
            )?;
            stages.push(report);
            let (report, kept) = run_chunk_tool(&env, &tool, q, &candidates, &mut ledger)?;
            let output = report.output.clone();
            stages.push(report);
            for c in kept {
                let reference = c["evidence_ref"].as_str().unwrap_or_default();
                if let Ok(entry) = session.revalidate_chunk(
                    library.store(),
                    reference,
                    c["score"].as_f64().map(|s| s as f32),
                    &tool.slug,
                ) {
                    ledger.admit(entry);
                }
            }
            output
        }
        (ToolType::Chunk, TestInput::Json(v)) => {
            // Candidates given by hand carry references this run never issued: each is refused.
            let candidates: Vec<Value> = v["candidates"].as_array().cloned().unwrap_or_default();
            let (report, _) = run_chunk_tool(
                &env,
                &tool,
                v["query"].as_str().unwrap_or_default(),
                &candidates,
                &mut ledger,
            )?;
            let output = report.output.clone();
            stages.push(report);
            output
        }
        (ToolType::Action, input) => {
            let value = match input {
                TestInput::Json(v) => v.clone(),
                TestInput::Query(q) => json!({"query": q}),
            };
            let (stage, output) = action_call(&env, &tool, value, &mut ledger)?;
            stages.push(stage);
            output
        }
    };
    Ok(ToolTestReport {
        tool: tool.slug.clone(),
        tool_type: tool.tool_type,
        principal: principal.label.clone(),
        pipeline: context.map(|c| c.name),
        stages,
        output,
        evidence: ledger,
        took_us: us(started),
    })
}

/// One action-tool call: input checked, the call governed, every reference it returns
/// revalidated and admitted (its text replaced by the ledger's) before anyone sees the output.
fn action_call(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    input: Value,
    ledger: &mut EvidenceLedger,
) -> Result<(StageReport, Value)> {
    let mut report = call_code_tool(env, tool, &input)?;
    let before = (ledger.entries.len(), ledger.rejected.len());
    admit_returned_refs(env, &tool.slug, &mut report.output, ledger);
    let output = report.output.clone();
    let detail = format!(
        "{} reference(s) admitted, {} refused",
        ledger.entries.len() - before.0,
        ledger.rejected.len() - before.1
    );
    Ok((
        StageReport::of_call("action", tool, input, report, detail),
        output,
    ))
}

/// A direct evidence tool called by the orchestrator.
#[derive(Debug, Clone, Serialize)]
pub struct ActionCall {
    /// The call as a trace stage.
    pub stage: StageReport,
    /// The tool's output, with admitted text.
    pub output: Value,
    /// Admitted and refused references.
    pub evidence: EvidenceLedger,
}

/// Calls an action tool (a snapshot from an applied orchestrator revision) as `principal` in
/// `conversation`, with the retrieval tools and collections of `pipeline` as its context.
pub fn call_action(
    library: &Library,
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
    let empty = ResolvedPipeline {
        name: String::new(),
        version: None,
        pipeline: Default::default(),
        tools: Default::default(),
    };
    let resolved = pipeline.unwrap_or(&empty);
    let session = session_for(library, principal, Some(conversation))?;
    let env = environment(library, &session, resolved);
    let mut evidence = EvidenceLedger::default();
    let (stage, output) = action_call(&env, tool, input.clone(), &mut evidence)?;
    Ok(ActionCall {
        stage,
        output,
        evidence,
    })
}
