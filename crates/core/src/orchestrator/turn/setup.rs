//! Setting a turn up (its conversation, revision, mode and gates) and what it persists: the
//! messages, the trace events and the finished result.

use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

use super::citations::Citation;
use super::generation::Answer;
use super::PipelineCalls;
use crate::auth::Principal;
use crate::context::EngineContext;
use crate::evidence::EvidenceSession;
use crate::llm::{Cancel, ChatMessage};
use crate::orchestrator::config::{BackendConfig, Mode, DEFAULT_CONFIG};
use crate::orchestrator::conversation::{
    self, Conversation, EvidenceItem, NewConversation, TraceEvent,
};
use crate::orchestrator::gates::Gates;
use crate::orchestrator::revisions::{self, AppliedRevision};
use crate::{Error, Result};

/// Earlier messages a query tool receives, at most.
pub const QUERY_HISTORY_MESSAGES: usize = 8;
/// Characters of each message a query tool receives, at most.
pub const QUERY_HISTORY_CHARS: usize = 2000;

/// How to run a turn.
#[derive(Clone)]
pub struct ChatOptions {
    /// Who asks.
    pub principal: Principal,
    /// Continue this conversation (`None`: start one).
    pub conversation: Option<String>,
    /// The configuration (`None`: `default`).
    pub config: Option<String>,
    /// The mode for a new conversation (`None`: the configuration's default).
    pub mode: Option<String>,
    /// The collections a new conversation searches (`None`: every one the principal may
    /// read); kept with it, so its later turns search them whatever this says.
    pub collections: Option<Vec<String>>,
    /// Use this backend instead of the mode's, for this turn (recorded in the trace).
    pub backend: Option<BackendConfig>,
    /// Stops the answer where it is (the turn keeps what was written and says so).
    pub cancel: Cancel,
    /// The API key of an OpenAI-compatible backend, held by the caller (never stored or
    /// traced); `None`: the variable the configuration names.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for ChatOptions {
    // By hand, so an API key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatOptions")
            .field("principal", &self.principal)
            .field("conversation", &self.conversation)
            .field("config", &self.config)
            .field("mode", &self.mode)
            .field("collections", &self.collections)
            .field("backend", &self.backend)
            .field("cancel", &self.cancel)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl ChatOptions {
    /// Defaults for `principal`.
    pub fn new(principal: Principal) -> ChatOptions {
        ChatOptions {
            principal,
            conversation: None,
            config: None,
            mode: None,
            collections: None,
            backend: None,
            cancel: Cancel::default(),
            api_key: None,
        }
    }
}

/// Something the UI can show while a turn runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent<'a> {
    /// A piece of the answer.
    Token(&'a str),
    /// A tool is being called.
    ToolInvoke(&'a str),
    /// A tool finished; how many passages it admitted.
    ToolResult {
        /// The tool.
        tool: &'a str,
        /// Passages admitted.
        admitted: usize,
    },
    /// Something the user should know (a fallback, a refused call).
    Notice(&'a str),
    /// The embedded model is being loaded (the first turn after start waits for it).
    Loading {
        /// The model.
        model: &'a str,
        /// Its size on disk.
        bytes: u64,
    },
}

/// A finished turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnResult {
    /// The conversation.
    pub conversation: String,
    /// The turn number.
    pub turn: i64,
    /// Configuration, revision and mode.
    pub config: String,
    /// The applied revision used.
    pub revision: i64,
    /// The mode.
    pub mode: String,
    /// The question.
    pub question: String,
    /// The answer.
    pub answer: String,
    /// Its citations, in order of first use.
    pub citations: Vec<Citation>,
    /// The backend that answered.
    pub backend: String,
    /// How the answer stands on the evidence, in the user's words: `found in 2 passages`,
    /// `not in your documents`.
    pub basis: String,
    /// Fallbacks and refusals the user should see.
    pub notices: Vec<String>,
    /// Passages admitted in this turn.
    pub evidence: Vec<EvidenceItem>,
    /// The turn's events.
    pub trace: Vec<TraceEvent>,
    /// Whether the caller stopped the answer before it was finished.
    pub stopped: bool,
    /// Milliseconds to the first answer token (generation only).
    pub first_token_ms: Option<u64>,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Milliseconds for the turn.
    pub took_ms: u64,
}

/// A running turn: what it was set up with and what it has gathered so far.
pub(super) struct Turn<'a> {
    pub(super) ctx: &'a EngineContext<'a>,
    pub(super) pipelines: &'a dyn PipelineCalls,
    /// The caller, within the collections the conversation keeps to.
    pub(super) principal: Principal,
    pub(super) conversation: Conversation,
    pub(super) revision: AppliedRevision,
    pub(super) mode: Mode,
    pub(super) gates: Gates,
    pub(super) turn: i64,
    pub(super) question: String,
    /// Passages admitted in this turn, in order.
    pub(super) admitted: Vec<EvidenceItem>,
    pub(super) notices: Vec<String>,
    pub(super) tool_calls: usize,
    pub(super) first_token_ms: Option<u64>,
    pub(super) completion_tokens: usize,
    pub(super) cancel: Cancel,
}

impl<'a> Turn<'a> {
    /// Finds or starts the conversation and loads the revision, mode and gates it runs.
    pub(super) fn start(
        ctx: &'a EngineContext<'a>,
        pipelines: &'a dyn PipelineCalls,
        question: &str,
        options: &'a ChatOptions,
    ) -> Result<Turn<'a>> {
        let question = question.trim();
        if question.is_empty() {
            return Err(Error::InvalidSetting {
                field: "question".into(),
                reason: "is empty".into(),
            });
        }
        let conversation = conversation_for(ctx, question, options)?;
        // A running conversation keeps the revision it started with.
        let revision =
            revisions::revision(ctx.store, &conversation.config, Some(conversation.revision))?;
        let mode = revision.config.mode(&conversation.mode)?.clone();
        let gates = Gates::compile(&revision.config.gates)?;
        let turn = conversation::next_turn(ctx.store, &conversation.id)?;
        Ok(Turn {
            ctx,
            pipelines,
            principal: options
                .principal
                .within_collections(conversation.collections.as_deref()),
            conversation,
            revision,
            mode,
            gates,
            turn,
            question: question.to_string(),
            admitted: Vec::new(),
            notices: Vec::new(),
            tool_calls: 0,
            first_token_ms: None,
            completion_tokens: 0,
            cancel: options.cancel.clone(),
        })
    }

    pub(super) fn record(&self, kind: &str, detail: Value) -> Result<()> {
        conversation::record(
            self.ctx.store,
            &self.conversation.id,
            self.turn,
            kind,
            detail,
        )
        .map(|_| ())
    }

    pub(super) fn record_start(&self, backend: &BackendConfig, overridden: bool) -> Result<()> {
        self.record(
            "turn.start",
            json!({
                "question": self.question,
                "config": self.conversation.config,
                "revision": self.revision.revision,
                "mode": self.mode.name,
                "backend": backend.describe(),
                "backend_overridden": overridden,
                "principal": self.principal.label,
            }),
        )
    }

    /// Records which model the automatic choice took, and why (`model.chosen`).
    pub(super) fn record_choice(&self, choice: Option<&crate::llm::speed::Choice>) -> Result<()> {
        match choice {
            Some(choice) => self.record(
                "model.chosen",
                json!({"model": choice.model, "why": choice.why}),
            ),
            None => Ok(()),
        }
    }

    pub(super) fn notice(
        &mut self,
        text: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<()> {
        on_event(TurnEvent::Notice(text));
        self.notices.push(text.to_string());
        self.record("notice", json!({ "text": text }))
    }

    /// Earlier turns as messages (answers without their citation lists).
    pub(super) fn history(&self) -> Result<Vec<ChatMessage>> {
        let stored = conversation::messages_of(self.ctx.store, &self.conversation.id)?;
        let start = stored.len().saturating_sub(4);
        Ok(stored[start..]
            .iter()
            .map(|m| {
                if m.role == "user" {
                    ChatMessage::user(m.content.clone())
                } else {
                    ChatMessage::assistant(m.content.clone())
                }
            })
            .collect())
    }

    /// The conversation so far as query tools receive it (the manual: "the resolved query
    /// and the conversation history"): earlier turns' messages, newest last, at most
    /// [`QUERY_HISTORY_MESSAGES`] of them, each cut to [`QUERY_HISTORY_CHARS`] characters.
    pub(super) fn query_history(&self) -> Result<Vec<Value>> {
        let stored = conversation::messages_of(self.ctx.store, &self.conversation.id)?;
        let earlier: Vec<_> = stored.iter().filter(|m| m.turn < self.turn).collect();
        let start = earlier.len().saturating_sub(QUERY_HISTORY_MESSAGES);
        Ok(earlier[start..]
            .iter()
            .map(|m| {
                let content: String = m.content.chars().take(QUERY_HISTORY_CHARS).collect();
                json!({"role": m.role, "content": content})
            })
            .collect())
    }

    pub(super) fn store_question(&self) -> Result<()> {
        conversation::add_message(
            self.ctx.store,
            &self.conversation.id,
            self.turn,
            "user",
            &self.question,
            None,
        )
    }

    /// The caller's evidence session in this conversation: references stay valid across turns.
    pub(super) fn session(&self) -> Result<EvidenceSession> {
        EvidenceSession::in_conversation(
            self.ctx.evidence_key.clone(),
            self.principal.clone(),
            &self.conversation.id,
        )
    }

    /// Stores the answer and records it, then returns the turn with its trace.
    pub(super) fn finish(self, answer: Answer, started: Instant) -> Result<TurnResult> {
        let Answer {
            text,
            citations,
            backend,
        } = answer;
        let citations_json = serde_json::to_value(&citations).expect("citations serialize");
        conversation::add_message(
            self.ctx.store,
            &self.conversation.id,
            self.turn,
            "assistant",
            &text,
            Some(&citations_json),
        )?;
        let basis = basis(&text, &citations);
        self.record(
            "answer",
            json!({"chars": text.chars().count(), "citations": citations.iter().map(|c| c.n).collect::<Vec<_>>(), "backend": backend, "basis": basis}),
        )?;
        let trace = conversation::trace_of(self.ctx.store, &self.conversation.id, Some(self.turn))?;
        Ok(TurnResult {
            conversation: self.conversation.id,
            turn: self.turn,
            config: self.conversation.config,
            revision: self.revision.revision,
            mode: self.mode.name,
            question: self.question,
            answer: text,
            citations,
            backend,
            basis,
            notices: self.notices,
            evidence: self.admitted,
            trace,
            stopped: self.cancel.is_cancelled(),
            first_token_ms: self.first_token_ms,
            completion_tokens: self.completion_tokens,
            took_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// How an answer stands on the evidence, in words the user reads beside it.
fn basis(text: &str, citations: &[Citation]) -> String {
    if crate::orchestrator::is_refusal(text) {
        "not in your documents".into()
    } else {
        match citations.len() {
            0 => "no passage cited".into(),
            1 => "found in 1 passage".into(),
            n => format!("found in {n} passages"),
        }
    }
}

/// The conversation to continue (the caller's own), or a new one in the configuration's
/// newest revision.
fn conversation_for(
    ctx: &EngineContext<'_>,
    question: &str,
    options: &ChatOptions,
) -> Result<Conversation> {
    if let Some(id) = &options.conversation {
        return conversation::get(ctx.store, &options.principal, id);
    }
    let config_name = options.config.as_deref().unwrap_or(DEFAULT_CONFIG);
    let applied = revisions::revision(ctx.store, config_name, None)?;
    let mode = options
        .mode
        .clone()
        .unwrap_or_else(|| applied.config.default_mode.clone());
    applied.config.mode(&mode)?;
    conversation::create(
        ctx.store,
        &options.principal,
        NewConversation {
            config: config_name,
            revision: applied.revision,
            mode: &mode,
            title: question,
            client: None,
            collections: options.collections.as_deref(),
        },
    )
}
