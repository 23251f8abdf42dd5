//! The orchestrator: configurations with drafts and immutable applied revisions, modes
//! (backend, pipeline, direct evidence tools, `knowledge_search`, budgets), the
//! `before:tool.result` gates, conversations persisted in the library, and chat turns whose
//! answers cite entries of the conversation's evidence ledger.
//!
//! A small embedded model is too weak to choose tools, so in `orchestrator` tool-choice modes
//! the orchestrator runs the pipeline (or `knowledge_search`) itself and the model only writes
//! the answer, under a grammar that makes every sentence cite a passage. In `model` modes a
//! capable backend calls the tools round by round. Without any model, the extractive answer
//! quotes the best passages.

pub mod config;
pub mod conversation;
pub mod diff;
mod extractive;
pub mod fit;
pub mod gates;
pub mod knowledge_search;
pub mod revisions;
pub(crate) mod sentences;
mod turn;

pub use crate::json_diff::{diff_json, ConfigChange};
pub use config::{BackendConfig, Budget, Mode, OrchestratorConfig, ToolChoice, DEFAULT_CONFIG};
pub use conversation::{Conversation, EvidenceItem, StoredMessage, TraceEvent};
pub use diff::diff;
pub use gates::{Gate, GateConfig, GateDecision, Gates, Verdict};
pub use knowledge_search::{KnowledgeSearch, KnowledgeSearchConfig};
pub use revisions::{AppliedRevision, RevisionSummary};
pub use turn::{
    agent_call, agent_tools, chat, citation_grammar, cited_documents, client_label, open_backend,
    open_backend_with_key, read_document, resolve_auto, start_agent_session, AgentCall,
    AgentDocument, ChatOptions, Citation, PipelineCalls, TurnEvent, TurnResult,
    MAX_CLIENT_NAME_CHARS, RUN_PIPELINE,
};

/// The answer when retrieval admitted nothing.
pub const NOTHING_FOUND: &str = "I found nothing in your library that answers this.";

/// A grounded answer's refusal: the passages were found, but they do not answer the question.
/// The grammar offers it as the whole answer, so a model that cannot find the fact says so
/// instead of making one up.
pub const NOT_IN_EVIDENCE: &str = "The passages found do not answer this.";

/// Whether `answer` is one of the assistant's refusals.
pub fn is_refusal(answer: &str) -> bool {
    let answer = answer.trim().to_lowercase();
    [NOTHING_FOUND, NOT_IN_EVIDENCE]
        .iter()
        .any(|r| answer.starts_with(&r.to_lowercase()))
}
