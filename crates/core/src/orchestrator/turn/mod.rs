//! One chat turn: evidence first (the orchestrator runs the mode's pipeline or
//! `knowledge_search`, or a capable model calls the tools itself), every tool result revalidated
//! and admitted to the conversation's ledger and passed through the gates before the model sees
//! it, then an answer whose citations must resolve to that ledger.
//!
//! The turn runs in an [`EngineContext`] and reaches pipelines through [`PipelineCalls`], so it
//! never sees the whole library and a test can run it over a bare [`crate::store::Store`].
//!
//! - `setup`: the conversation, revision, mode and gates of a turn, and what it persists;
//! - `dispatch`: which tools are offered, and the calls themselves;
//! - `admission`: a tool's result through the gates into the ledger, and what the model sees;
//! - `generation`: the model-led and extractive answers, and the fallback between them;
//! - `grounded`: the grounded answer, a driver over `selection` (the sentences a model reads,
//!   and whether the evidence answers at all), the draft, and `grounding` (the answer check);
//! - `citations`: citations resolved against the ledger;
//! - `agent`: turns for an outside agent (an MCP client), which picks the tools itself.

mod admission;
mod agent;
mod backend;
mod citations;
mod copies;
mod dispatch;
mod generation;
mod grounded;
mod grounding;
mod selection;
mod setup;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::config::BackendConfig;
use crate::auth::Principal;
use crate::context::EngineContext;
use crate::llm::ChatBackend;
use crate::pipeline::{ActionCall, PipelineRun, ResolvedPipeline, RunOptions};
use crate::tools::ToolDefinition;
use crate::Result;

pub use agent::{
    agent_call, agent_tools, cited_documents, client_label, read_document, start_agent_session,
    AgentCall, AgentDocument, MAX_CLIENT_NAME_CHARS,
};
pub use backend::{open_backend, open_backend_with_key, resolve_auto};
pub use citations::Citation;
pub use grounded::citation_grammar;
pub use setup::{ChatOptions, TurnEvent, TurnResult};

use setup::Turn;

/// The pipeline as a tool the model may call.
pub const RUN_PIPELINE: &str = "run_pipeline";

/// The pipeline calls a turn makes, as the caller: the mode's pipeline, and a direct evidence
/// tool with that pipeline as its context. The library answers them through
/// [`crate::pipeline`]; a test answers them with canned ledgers.
pub trait PipelineCalls {
    /// Runs a resolved pipeline (a revision's snapshot) as `principal`.
    fn run_pipeline(
        &self,
        pipeline: &ResolvedPipeline,
        query: &str,
        principal: &Principal,
        options: &RunOptions,
    ) -> Result<PipelineRun>;

    /// Calls an action tool (a revision's snapshot) as `principal` in `conversation`.
    fn call_action(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        principal: &Principal,
        pipeline: Option<&ResolvedPipeline>,
        conversation: &str,
    ) -> Result<ActionCall>;
}

/// Opens the backend a mode (or the caller's override) names; `None` answers extractively.
type OpenBackend<'a> = dyn Fn(&BackendConfig) -> Result<Option<Arc<dyn ChatBackend>>> + 'a;

/// Runs one turn.
pub fn chat(
    ctx: &EngineContext<'_>,
    pipelines: &dyn PipelineCalls,
    question: &str,
    options: &ChatOptions,
    on_event: &mut dyn FnMut(TurnEvent<'_>),
) -> Result<TurnResult> {
    let open = |config: &BackendConfig| {
        open_backend_with_key(ctx.models, config, options.api_key.as_deref())
    };
    run(ctx, pipelines, question, options, &open, on_event)
}

/// The turn's stages in order; `open` is the only way a backend comes in, so a test can hand
/// in a scripted one.
fn run(
    ctx: &EngineContext<'_>,
    pipelines: &dyn PipelineCalls,
    question: &str,
    options: &ChatOptions,
    open: &OpenBackend<'_>,
    on_event: &mut dyn FnMut(TurnEvent<'_>),
) -> Result<TurnResult> {
    let started = Instant::now();
    let mut turn = Turn::start(ctx, pipelines, question, options)?;
    let backend_config = options
        .backend
        .clone()
        .unwrap_or_else(|| turn.mode.backend.clone());
    let (backend_config, chosen) = backend::resolve_auto(ctx.models, backend_config);
    turn.record_start(&backend_config, options.backend.is_some())?;
    turn.record_choice(chosen.as_ref())?;
    let history = turn.history()?;
    turn.store_question()?;
    let backend = turn.open_backend_or_notice(open, &backend_config, on_event)?;
    let answer = turn.answer(backend.as_deref(), &history, on_event)?;
    turn.finish(answer, started)
}
