//! Pipelines: Query stage → Retrieval stage → Chunk stage, with drafts and saved versions.
//!
//! A pipeline names its tools by slug. The draft follows the live tool definitions; saving a
//! pipeline snapshots every tool it uses into a new immutable version, and runs use the newest
//! saved version unless asked for the draft. So saving a tool changes the definition, not a
//! saved pipeline's behaviour, until the pipeline is saved again (the tool manual's rule).
//!
//! Readiness problems (no default retrieval tool, a missing or mistyped tool, no Python for
//! code tools, a missing model) are listed by `check` before anything runs; a run refuses
//! to start while a blocking one remains. Every run returns a trace of every stage.

mod candidate;
mod host;
mod issued;
mod reading;
pub mod run;
mod seeds;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::{Principal, PrincipalKind};
use crate::error::{Error, Result};
use crate::json_diff::{diff_json, ConfigChange};
use crate::models::Models;
use crate::names::{Name, NameKind};
use crate::retrieve::{RetrievalSettings, SearchMode};
use crate::store::{now_unix, Collection, Store, Tx};
use crate::tools::{
    self, Executor, NetworkIsolation, ToolDefinition, ToolType, UNCONFINED_SETTING,
};
pub use candidate::ScoredCandidate;
pub use host::{call_code_tool, CtxCall, ToolCallReport, ToolEnvironment, MAX_NEIGHBOR_RADIUS};
pub use issued::withheld_note;
pub use run::{
    call_action, run, run_resolved, ActionCall, PipelineRun, RunOptions, StageOutput, StageReport,
    TestInput, ToolTestReport,
};
pub(crate) use seeds::{amendment_authors, install_seeds, latest_revision as seeds_revision};

/// The seeded pipeline's name.
pub const DEFAULT_PIPELINE: &str = "default";

/// What limits a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Budget {
    /// Most query streams after the Query stage (each tool's own maximum applies too).
    pub max_query_variants: usize,
    /// Most chunks admitted to the evidence ledger.
    pub max_evidence: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_query_variants: 4,
            max_evidence: 50,
        }
    }
}

/// Which tools a pipeline runs, in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct PipelineDefinition {
    /// Query tools, run in this order.
    #[serde(default)]
    pub query_tools: Vec<String>,
    /// The default retrieval tool (required for a ready pipeline).
    #[serde(default)]
    pub retrieval: Option<String>,
    /// Extra retrieval tools code tools may name in `ctx.search(..., retrieval=...)`.
    #[serde(default)]
    pub retrieval_capabilities: Vec<String>,
    /// Chunk tools, run in this order.
    #[serde(default)]
    pub chunk_tools: Vec<String>,
    /// Collections searched (empty: every collection the caller may read).
    #[serde(default)]
    pub collections: Vec<String>,
    /// Limits.
    #[serde(default)]
    pub budget: Budget,
}

impl PipelineDefinition {
    /// Every tool slug it names, with the stage and the type it must have.
    pub fn tool_slots(&self) -> Vec<(&'static str, &str, ToolType)> {
        let mut slots = Vec::new();
        for slug in &self.query_tools {
            slots.push(("query_tools", slug.as_str(), ToolType::Query));
        }
        if let Some(slug) = &self.retrieval {
            slots.push(("retrieval", slug.as_str(), ToolType::Retrieval));
        }
        for slug in &self.retrieval_capabilities {
            slots.push(("retrieval_capabilities", slug.as_str(), ToolType::Retrieval));
        }
        for slug in &self.chunk_tools {
            slots.push(("chunk_tools", slug.as_str(), ToolType::Chunk));
        }
        slots
    }

    fn uses(&self, slug: &str) -> bool {
        self.tool_slots().iter().any(|(_, s, _)| *s == slug)
    }
}

/// A saved, immutable version: the definition and a snapshot of every tool it uses.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct SavedPipeline {
    /// 1, 2, …
    pub version: i64,
    /// The pipeline as saved.
    pub pipeline: PipelineDefinition,
    /// Its tools as they were when saved.
    pub tools: BTreeMap<String, ToolDefinition>,
    /// Who saved it.
    pub saved_by: String,
    /// Unix seconds.
    pub saved_at: i64,
}

/// A pipeline with its draft and versions.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct PipelineView {
    /// Name.
    pub name: String,
    /// The working definition.
    pub draft: PipelineDefinition,
    /// The newest saved version, which runs use.
    pub saved: Option<SavedPipeline>,
    /// Every saved version number.
    pub versions: Vec<i64>,
    /// Whether the draft differs from the newest saved version.
    pub unsaved_changes: bool,
    /// What saving would change: each field of the definition, and of each tool's live
    /// definition against its snapshot (`tools.<slug>.settings.limit`), that differs.
    pub changes: Vec<ConfigChange>,
}

/// How bad a readiness problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum Severity {
    /// The pipeline cannot run.
    Blocking,
    /// It runs, with less than it was configured for (the trace says what).
    Degraded,
    /// An optional part is not installed (a reranker, which nothing offline can install): it
    /// runs as it would without one, and the Models view says how to add it. Not a warning.
    Optional,
}

/// One readiness problem.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ReadinessProblem {
    /// Blocking or degraded.
    pub severity: Severity,
    /// What it concerns (`retrieval`, a tool slug, `python`, a model id).
    pub component: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// A pipeline resolved to concrete tool definitions (a saved snapshot or the live tools).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResolvedPipeline {
    /// Name.
    pub name: String,
    /// `Some(n)` for saved version n, `None` for the draft.
    pub version: Option<i64>,
    /// The definition.
    pub pipeline: PipelineDefinition,
    /// Tools by slug (missing ones are readiness problems).
    pub tools: BTreeMap<String, ToolDefinition>,
}

impl ResolvedPipeline {
    /// No tools and no collections: the context of a tool tested or called outside any
    /// pipeline.
    pub(crate) fn empty() -> ResolvedPipeline {
        ResolvedPipeline {
            name: String::new(),
            version: None,
            pipeline: Default::default(),
            tools: Default::default(),
        }
    }
}

fn validate_name(name: &str) -> Result<()> {
    Name::parse(NameKind::Pipeline, name).map_err(|bad| Error::InvalidSetting {
        field: "name".into(),
        reason: bad.to_string(),
    })?;
    Ok(())
}

fn parse<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json)
        .map_err(|e| Error::Internal(format!("stored {what} is unreadable: {e}")))
}

fn insert_version(
    tx: &Tx<'_>,
    pipeline_id: i64,
    version: i64,
    pipeline: &PipelineDefinition,
    tools: BTreeMap<String, ToolDefinition>,
    saved_by: &str,
) -> Result<SavedPipeline> {
    let saved = SavedPipeline {
        version,
        pipeline: pipeline.clone(),
        tools,
        saved_by: saved_by.into(),
        saved_at: now_unix(),
    };
    crate::store::insert_pipeline_version(
        tx,
        pipeline_id,
        version,
        &serde_json::to_string(&saved).expect("json"),
        saved_by,
        saved.saved_at,
    )?;
    Ok(saved)
}

/// Every pipeline's name.
pub(crate) fn list(store: &Store) -> Result<Vec<String>> {
    store.pipeline_names()
}

fn pipeline_row(store: &Store, name: &str) -> Result<(i64, PipelineDefinition)> {
    let row = store.pipeline_draft(name)?;
    let (id, draft) = row.ok_or_else(|| Error::PipelineNotFound(name.into()))?;
    Ok((id, parse(&draft, "pipeline")?))
}

fn latest_version(store: &Store, pipeline_id: i64) -> Result<Option<SavedPipeline>> {
    let json = store.latest_pipeline_version(pipeline_id)?;
    json.map(|j| parse(&j, "pipeline version")).transpose()
}

/// A pipeline with its draft and newest saved version.
pub(crate) fn show(store: &Store, name: &str) -> Result<PipelineView> {
    let (id, draft) = pipeline_row(store, name)?;
    let saved = latest_version(store, id)?;
    let versions = store.pipeline_version_numbers(id)?;
    let changes = draft_changes(store, &draft, saved.as_ref());
    let unsaved_changes = saved.is_none() || !changes.is_empty();
    Ok(PipelineView {
        name: name.into(),
        draft,
        saved,
        versions,
        unsaved_changes,
        changes,
    })
}

/// The fields saving `draft` (with the live tools) would change against `saved`.
fn draft_changes(
    store: &Store,
    draft: &PipelineDefinition,
    saved: Option<&SavedPipeline>,
) -> Vec<ConfigChange> {
    let live_tools: BTreeMap<String, Value> = draft
        .tool_slots()
        .iter()
        .filter_map(|(_, slug, _)| {
            let tool = tools::get(store, slug).ok()?;
            Some((slug.to_string(), serde_json::to_value(tool).expect("json")))
        })
        .collect();
    let after = json!({"pipeline": draft, "tools": live_tools});
    let before = match saved {
        Some(s) => json!({"pipeline": s.pipeline, "tools": s.tools}),
        None => json!({}),
    };
    diff_json(&before, &after)
}

fn check_structure(name: &str, pipeline: &PipelineDefinition) -> Result<()> {
    if pipeline.budget.max_query_variants == 0 || pipeline.budget.max_query_variants > 32 {
        return Err(Error::InvalidSetting {
            field: "budget.max_query_variants".into(),
            reason: "must be 1 to 32".into(),
        });
    }
    if pipeline.budget.max_evidence == 0 || pipeline.budget.max_evidence > 1000 {
        return Err(Error::InvalidSetting {
            field: "budget.max_evidence".into(),
            reason: "must be 1 to 1000".into(),
        });
    }
    let _ = name;
    Ok(())
}

/// Creates a pipeline (a draft; save it to put it into service).
pub(crate) fn create(store: &Store, name: &str, pipeline: &PipelineDefinition) -> Result<()> {
    validate_name(name)?;
    check_structure(name, pipeline)?;
    let inserted = store.create_pipeline(name, &serde_json::to_string(pipeline).expect("json"))?;
    if !inserted {
        return Err(Error::PipelineExists(name.into()));
    }
    Ok(())
}

/// Replaces a pipeline's draft. Runs keep using the saved version until it is saved.
pub(crate) fn edit(store: &Store, name: &str, pipeline: &PipelineDefinition) -> Result<()> {
    pipeline_row(store, name)?;
    check_structure(name, pipeline)?;
    store.set_pipeline_draft(name, &serde_json::to_string(pipeline).expect("json"))
}

/// Saves the draft as a new version, snapshotting its tools. Refused while the draft names a
/// missing or mistyped tool or has no default retrieval tool.
pub(crate) fn save(store: &Store, name: &str, saved_by: &str) -> Result<SavedPipeline> {
    // Draft and tools are read inside the write transaction, so the snapshot is consistent.
    let tx = store.write()?;
    let (id, draft) = pipeline_row(store, name)?;
    let resolved = resolve_live(store, name, &draft)?;
    let structural: Vec<String> = structural_problems(&resolved)
        .into_iter()
        .map(|p| p.message)
        .collect();
    if !structural.is_empty() {
        return Err(Error::PipelineNotReady {
            pipeline: name.into(),
            problems: structural,
        });
    }
    let next = crate::store::next_pipeline_version(&tx, id)?;
    let saved = insert_version(&tx, id, next, &draft, resolved.tools, saved_by)?;
    tx.commit()?;
    Ok(saved)
}

/// Deletes a pipeline and its versions.
pub(crate) fn delete(store: &Store, name: &str) -> Result<()> {
    pipeline_row(store, name)?;
    store.delete_pipeline(name)
}

/// The pipelines whose draft or newest saved version use a tool.
pub(crate) fn pipelines_using(store: &Store, slug: &str) -> Result<Vec<String>> {
    let mut users = Vec::new();
    for name in list(store)? {
        let (id, draft) = pipeline_row(store, &name)?;
        let saved_uses = latest_version(store, id)?.is_some_and(|s| s.pipeline.uses(slug));
        if draft.uses(slug) || saved_uses {
            users.push(name);
        }
    }
    Ok(users)
}

/// Deletes a tool that no pipeline uses. (Here, not in `tools`, because only pipelines know
/// who uses a tool.)
pub(crate) fn delete_tool(store: &Store, slug: &str) -> Result<()> {
    // The check and the delete in one write transaction: no pipeline can start using the
    // tool in between.
    let tx = store.write()?;
    tools::get(store, slug)?;
    let users = pipelines_using(store, slug)?;
    if !users.is_empty() {
        return Err(Error::ToolInUse {
            tool: slug.into(),
            pipelines: users,
        });
    }
    crate::store::delete_tool(&tx, slug)?;
    tx.commit()?;
    Ok(())
}

fn resolve_live(
    store: &Store,
    name: &str,
    pipeline: &PipelineDefinition,
) -> Result<ResolvedPipeline> {
    let mut found = BTreeMap::new();
    for (_, slug, _) in pipeline.tool_slots() {
        match tools::get(store, slug) {
            Ok(tool) => {
                found.insert(slug.to_string(), tool);
            }
            Err(Error::ToolNotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ResolvedPipeline {
        name: name.into(),
        version: None,
        pipeline: pipeline.clone(),
        tools: found,
    })
}

/// The pipeline to run: the newest saved version, or the draft with the live tools.
pub(crate) fn resolve(store: &Store, name: &str, draft: bool) -> Result<ResolvedPipeline> {
    let (id, definition) = pipeline_row(store, name)?;
    if draft {
        return resolve_live(store, name, &definition);
    }
    match latest_version(store, id)? {
        Some(saved) => Ok(ResolvedPipeline {
            name: name.into(),
            version: Some(saved.version),
            pipeline: saved.pipeline,
            tools: saved.tools,
        }),
        None => Err(Error::PipelineNotReady {
            pipeline: name.into(),
            problems: vec![format!(
                "it has never been saved (run `quarry pipeline save {name}`, or run the draft with --draft)"
            )],
        }),
    }
}

fn structural_problems(resolved: &ResolvedPipeline) -> Vec<ReadinessProblem> {
    let blocking = |component: &str, message: String| ReadinessProblem {
        severity: Severity::Blocking,
        component: component.into(),
        message,
    };
    let mut problems = Vec::new();
    if resolved.pipeline.retrieval.is_none() {
        problems.push(blocking(
            "retrieval",
            "no default retrieval tool: every ready pipeline needs one".into(),
        ));
    }
    for (stage, slug, wanted) in resolved.pipeline.tool_slots() {
        match resolved.tools.get(slug) {
            None => problems.push(blocking(
                slug,
                format!("`{stage}` names tool `{slug}`, which does not exist"),
            )),
            Some(tool) if tool.tool_type != wanted => problems.push(blocking(
                slug,
                format!(
                    "`{stage}` needs a {} tool, but `{slug}` is a {} tool",
                    wanted.as_str(),
                    tool.tool_type.as_str()
                ),
            )),
            Some(_) => {}
        }
    }
    problems
}

/// Everything that keeps a pipeline from running as configured for `principal`, blocking
/// problems first: its structure, its collections, Python and the sandbox for code tools
/// (where the OS cannot confine them, only the administrator may run them), and the models
/// its retrieval tools use.
pub(crate) fn check(
    store: &Store,
    models: &Models,
    executor: &Executor,
    resolved: &ResolvedPipeline,
    principal: &Principal,
) -> Vec<ReadinessProblem> {
    let collections = store.collections().unwrap_or_default();
    let mut problems = structural_problems(resolved);
    problems.extend(collection_problems(&collections, resolved));
    let mut python_checked = false;
    for (_, slug, _) in resolved.pipeline.tool_slots() {
        let Some(tool) = resolved.tools.get(slug) else {
            continue;
        };
        if tool.tool_type.is_code() {
            if !python_checked {
                python_checked = true;
                problems.extend(python_problem(
                    executor,
                    principal.kind == PrincipalKind::Administrator,
                ));
            }
            problems.extend(code_tool_problems(slug, tool));
            continue;
        }
        match tool.retrieval_settings() {
            Err(e) => problems.push(ReadinessProblem {
                severity: Severity::Blocking,
                component: slug.into(),
                message: e.to_string(),
            }),
            Ok(settings) => problems.extend(model_problems(&collections, models, slug, &settings)),
        }
    }
    problems.sort_by_key(|p| p.severity != Severity::Blocking);
    // One note per missing model, however many tools use it.
    let mut seen = std::collections::HashSet::new();
    problems.retain(|p| p.severity == Severity::Blocking || seen.insert(p.component.clone()));
    problems
}

fn collection_problems(
    collections: &[Collection],
    resolved: &ResolvedPipeline,
) -> Vec<ReadinessProblem> {
    resolved
        .pipeline
        .collections
        .iter()
        .filter(|name| !collections.iter().any(|c| &c.name == *name))
        .map(|name| ReadinessProblem {
            severity: Severity::Blocking,
            component: name.clone(),
            message: format!("the pipeline searches collection `{name}`, which does not exist"),
        })
        .collect()
}

/// No Python blocks code tools, and so does a system that cannot confine them, for anyone
/// but an administrator who allowed it; a weaker sandbox than bubblewrap degrades them.
fn python_problem(executor: &Executor, administrator: bool) -> Option<ReadinessProblem> {
    let confinement = match executor.confinement() {
        Err(e) => {
            return Some(ReadinessProblem {
                severity: Severity::Blocking,
                component: "python".into(),
                message: e.to_string(),
            })
        }
        Ok(confinement) => confinement,
    };
    let sandbox = |severity, message| {
        Some(ReadinessProblem {
            severity,
            component: "sandbox".into(),
            message,
        })
    };
    if let Err(refused) = executor.may_run(&confinement, administrator) {
        return sandbox(Severity::Blocking, refused.to_string());
    }
    if !confinement.os_isolated() {
        return sandbox(
            Severity::Degraded,
            format!(
                "code tools run without isolation by the operating system ({}), for the \
                 administrator only ({UNCONFINED_SETTING})",
                confinement.missing()
            ),
        );
    }
    match confinement.network {
        NetworkIsolation::Sandbox => None,
        weaker => sandbox(
            Severity::Degraded,
            format!(
                "code tools run with weaker isolation ({weaker:?}): install bubblewrap \
                 (`bwrap`) for the full sandbox"
            ),
        ),
    }
}

fn code_tool_problems(slug: &str, tool: &ToolDefinition) -> Vec<ReadinessProblem> {
    let mut problems = Vec::new();
    if tool.derived.is_none() {
        problems.push(ReadinessProblem {
            severity: Severity::Blocking,
            component: slug.into(),
            message: format!("tool `{slug}` has not been validated (it was saved without Python)"),
        });
    }
    if tool.uses_llm() && tool.model.is_none() {
        problems.push(ReadinessProblem {
            severity: Severity::Blocking,
            component: slug.into(),
            message: format!("tool `{slug}` calls ctx.llm but no model is chosen"),
        });
    }
    problems
}

fn model_problems(
    collections: &[Collection],
    models: &Models,
    slug: &str,
    settings: &RetrievalSettings,
) -> Vec<ReadinessProblem> {
    let mut problems = Vec::new();
    if settings.mode.uses_vector() {
        for model in collections
            .iter()
            .filter_map(|c| c.embedding_model.as_ref())
        {
            if let Err(e) = models.find(model) {
                problems.push(ReadinessProblem {
                    severity: if settings.mode == SearchMode::Vector {
                        Severity::Blocking
                    } else {
                        Severity::Degraded
                    },
                    component: model.clone(),
                    message: format!("`{slug}` searches vectors, but {e}"),
                });
            }
        }
    }
    if let Some(rerank) = &settings.rerank {
        if let Err(e) = models.find(&rerank.model) {
            problems.push(ReadinessProblem {
                severity: Severity::Optional,
                component: rerank.model.clone(),
                message: format!("`{slug}` reranks with `{}`, which is not usable here ({e}); results are not reranked until it is installed", rerank.model),
            });
        }
    }
    problems.dedup_by(|a, b| a.component == b.component);
    problems
}
