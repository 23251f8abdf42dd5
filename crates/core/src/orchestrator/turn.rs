//! One chat turn: evidence first (the orchestrator runs the mode's pipeline or
//! `knowledge_search`, or a capable model calls the tools itself), every tool result revalidated
//! and admitted to the conversation's ledger and passed through the gates before the model sees
//! it, then an answer whose citations must resolve to that ledger.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use regex::Regex;
use serde::Serialize;
use serde_json::{json, Value};

use super::config::{BackendConfig, Mode, ToolChoice};
use super::conversation::{self, Conversation, EvidenceItem, TraceEvent};
use super::extractive;
use super::gates::Gates;
use super::knowledge_search::KnowledgeSearch;
use super::revisions::{self, AppliedRevision};
use crate::auth::Principal;
use crate::evidence::{EvidenceLedger, EvidenceSession, LedgerEntry};
use crate::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use crate::llm::openai::{OpenAiBackend, OpenAiConfig};
use crate::llm::{
    ChatBackend, ChatMessage, ChatRequest, Constraint, StreamEvent, ToolCall, ToolSpec,
};
use crate::pipeline::{self, RunOptions};
use crate::{Error, Library, Result};

/// The pipeline as a tool the model may call.
pub const RUN_PIPELINE: &str = "run_pipeline";

/// How to run a turn.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    /// Who asks.
    pub principal: Principal,
    /// Continue this conversation (`None`: start one).
    pub conversation: Option<String>,
    /// The configuration (`None`: `default`).
    pub config: Option<String>,
    /// The mode for a new conversation (`None`: the configuration's default).
    pub mode: Option<String>,
    /// Use this backend instead of the mode's, for this turn (recorded in the trace).
    pub backend: Option<BackendConfig>,
}

impl ChatOptions {
    /// Defaults for `principal`.
    pub fn new(principal: Principal) -> ChatOptions {
        ChatOptions {
            principal,
            conversation: None,
            config: None,
            mode: None,
            backend: None,
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
}

/// A citation: a ledger entry of the conversation, openable.
#[derive(Debug, Clone, Serialize)]
pub struct Citation {
    /// Its number (`[n]` in the answer).
    pub n: i64,
    /// The file.
    #[serde(serialize_with = "crate::store::serialize_path")]
    pub path: std::path::PathBuf,
    /// `path p. N lines a-b`.
    pub locator: String,
    /// Document title.
    pub title: Option<String>,
    /// Collection.
    pub collection: String,
    /// Page.
    pub page: Option<u32>,
    /// First line.
    pub line_start: Option<u32>,
    /// Last line.
    pub line_end: Option<u32>,
    /// The passage (first 300 characters).
    pub snippet: String,
    /// The chunk.
    pub chunk_id: i64,
}

impl Citation {
    fn of(item: &EvidenceItem) -> Citation {
        Citation {
            n: item.n,
            path: item.path.clone(),
            locator: item.locator(),
            title: item.title.clone(),
            collection: item.collection.clone(),
            page: item.location.page,
            line_start: item.location.line_start,
            line_end: item.location.line_end,
            snippet: item.text.chars().take(300).collect(),
            chunk_id: item.chunk_id,
        }
    }
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
    /// Fallbacks and refusals the user should see.
    pub notices: Vec<String>,
    /// Passages admitted in this turn.
    pub evidence: Vec<EvidenceItem>,
    /// The turn's events.
    pub trace: Vec<TraceEvent>,
    /// Milliseconds to the first answer token (generation only).
    pub first_token_ms: Option<u64>,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Milliseconds for the turn.
    pub took_ms: u64,
}

struct Turn<'a> {
    library: &'a Library,
    principal: &'a Principal,
    conversation: Conversation,
    revision: AppliedRevision,
    mode: Mode,
    gates: Gates,
    turn: i64,
    question: String,
    admitted: Vec<EvidenceItem>,
    notices: Vec<String>,
    tool_calls: usize,
    first_token_ms: Option<u64>,
    completion_tokens: usize,
}

/// Runs one turn.
pub fn chat(
    library: &Library,
    question: &str,
    options: &ChatOptions,
    on_event: &mut dyn FnMut(TurnEvent<'_>),
) -> Result<TurnResult> {
    let started = Instant::now();
    let question = question.trim();
    if question.is_empty() {
        return Err(Error::InvalidSetting {
            field: "question".into(),
            reason: "is empty".into(),
        });
    }
    let store = library.store();
    let config_name = options
        .config
        .clone()
        .unwrap_or_else(|| super::config::DEFAULT_CONFIG.to_string());
    let conversation = match &options.conversation {
        Some(id) => conversation::get(store, &options.principal, id)?,
        None => {
            let applied = revisions::revision(store, &config_name, None)?;
            let mode = options
                .mode
                .clone()
                .unwrap_or_else(|| applied.config.default_mode.clone());
            applied.config.mode(&mode)?;
            conversation::create(
                store,
                &options.principal,
                &config_name,
                applied.revision,
                &mode,
                question,
            )?
        }
    };
    // A running conversation keeps the revision it started with.
    let revision = revisions::revision(store, &conversation.config, Some(conversation.revision))?;
    let mode = revision.config.mode(&conversation.mode)?.clone();
    let gates = Gates::compile(&revision.config.gates)?;
    let turn_no = conversation::next_turn(store, &conversation.id)?;
    let mut turn = Turn {
        library,
        principal: &options.principal,
        conversation,
        revision,
        mode,
        gates,
        turn: turn_no,
        question: question.to_string(),
        admitted: Vec::new(),
        notices: Vec::new(),
        tool_calls: 0,
        first_token_ms: None,
        completion_tokens: 0,
    };
    let backend_config = options
        .backend
        .clone()
        .unwrap_or_else(|| turn.mode.backend.clone());
    turn.record(
        "turn.start",
        json!({
            "question": question,
            "config": turn.conversation.config,
            "revision": turn.revision.revision,
            "mode": turn.mode.name,
            "backend": backend_config.describe(),
            "backend_overridden": options.backend.is_some(),
            "principal": turn.principal.label,
        }),
    )?;
    let history = turn.history()?;
    conversation::add_message(
        store,
        &turn.conversation.id,
        turn.turn,
        "user",
        question,
        None,
    )?;

    let backend = match open_backend(library, &backend_config) {
        Ok(b) => b,
        Err(e) => {
            let notice = format!(
                "{} is not available ({e}); answering extractively from the evidence",
                backend_config.describe()
            );
            turn.notice(&notice, on_event)?;
            None
        }
    };
    let backend_label = backend
        .as_ref()
        .map(|b| {
            let info = b.info();
            format!("{} {}", info.kind, info.model)
        })
        .unwrap_or_else(|| "extractive".into());

    let generated = match (&backend, turn.mode.tool_choice) {
        // A server known to refuse tools cannot choose them: the orchestrator does.
        (Some(b), ToolChoice::Model) if b.info().supports_tools => {
            turn.model_led(b.as_ref(), &history, on_event)
        }
        (Some(b), _) => turn
            .gather_evidence(on_event)
            .and_then(|()| turn.grounded_answer(b.as_ref(), &history, on_event)),
        (None, _) => Err(Error::LlmUnavailable("extractive mode".into())),
    };
    // Extractive answers quote documents, whose own brackets must not be read as citations:
    // their citations are known, not parsed.
    let mut quoted: Option<Vec<i64>> = None;
    let (answer, backend_label) = match generated {
        Ok(answer) => (answer, backend_label),
        // The backend failed mid-turn (a server went away, a model did not load): the
        // extractive answer always works.
        Err(e @ (Error::LlmFailed { .. } | Error::LlmUnavailable(_))) => {
            if backend.is_some() {
                let notice = format!("{e}; answering extractively from the evidence");
                turn.notice(&notice, on_event)?;
            }
            if turn.admitted.is_empty() {
                turn.gather_evidence(on_event)?;
            }
            let (text, cited) = extractive::answer(&turn.question, &turn.admitted);
            on_event(TurnEvent::Token(&text));
            quoted = Some(cited);
            (text, "extractive".to_string())
        }
        Err(e) => return Err(e),
    };
    let (answer, citations) = match quoted {
        Some(cited) => {
            let citations = turn
                .admitted
                .iter()
                .filter(|i| cited.contains(&i.n))
                .map(Citation::of)
                .collect();
            (answer, citations)
        }
        None => turn.resolve_citations(&answer)?,
    };
    let citations_json = serde_json::to_value(&citations).expect("json");
    conversation::add_message(
        store,
        &turn.conversation.id,
        turn.turn,
        "assistant",
        &answer,
        Some(&citations_json),
    )?;
    turn.record(
        "answer",
        json!({"chars": answer.chars().count(), "citations": citations.iter().map(|c| c.n).collect::<Vec<_>>(), "backend": backend_label}),
    )?;
    let trace = conversation::trace(store, &turn.conversation.id, Some(turn.turn))?;
    Ok(TurnResult {
        conversation: turn.conversation.id.clone(),
        turn: turn.turn,
        config: turn.conversation.config.clone(),
        revision: turn.revision.revision,
        mode: turn.mode.name.clone(),
        question: turn.question.clone(),
        answer,
        citations,
        backend: backend_label,
        notices: turn.notices.clone(),
        evidence: turn.admitted.clone(),
        trace,
        first_token_ms: turn.first_token_ms,
        completion_tokens: turn.completion_tokens,
        took_ms: started.elapsed().as_millis() as u64,
    })
}

/// Opens the backend a mode names; `None` for extractive.
pub fn open_backend(
    library: &Library,
    config: &BackendConfig,
) -> Result<Option<Arc<dyn ChatBackend>>> {
    Ok(match config {
        BackendConfig::Extractive => None,
        BackendConfig::Embedded { model, threads } => {
            let mut cfg = EmbeddedConfig::named(library.models(), model)?;
            cfg.threads = *threads;
            Some(EmbeddedBackend::shared(cfg)? as Arc<dyn ChatBackend>)
        }
        BackendConfig::Openai {
            base_url,
            model,
            api_key_env,
            grammar,
        } => {
            let mut cfg = OpenAiConfig::openai(base_url, model).with_grammar(*grammar);
            if let Some(key) = api_key_env
                .as_deref()
                .and_then(crate::environment::configured_secret)
            {
                cfg = cfg.with_api_key(key);
            }
            Some(shared_http(cfg)?)
        }
        BackendConfig::Ollama { base_url, model } => {
            Some(shared_http(OpenAiConfig::ollama(base_url, model))?)
        }
    })
}

type HttpBackend = (OpenAiConfig, Arc<OpenAiBackend>);

/// One HTTP backend per configuration for the life of the process, so what it learned (a
/// server that refuses tools) holds for every later turn.
fn shared_http(config: OpenAiConfig) -> Result<Arc<dyn ChatBackend>> {
    static BACKENDS: std::sync::OnceLock<std::sync::Mutex<Vec<HttpBackend>>> =
        std::sync::OnceLock::new();
    let mut backends = BACKENDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, b)) = backends.iter().find(|(c, _)| *c == config) {
        return Ok(b.clone());
    }
    let backend = Arc::new(OpenAiBackend::new(config.clone())?);
    backends.push((config, backend.clone()));
    Ok(backend)
}

/// What a tool returned, after admission and the gates.
struct ToolOutcome {
    /// What the model sees.
    text: String,
    is_error: bool,
}

/// How a tool's result is shown to the model.
#[derive(Default)]
enum Shape {
    /// Numbered passages (`run_pipeline`).
    #[default]
    Evidence,
    /// An action tool's output, rewritten around its references.
    Output(Value),
    /// The `knowledge_search` manual's JSON.
    KnowledgeSearch(Value),
}

/// A tool call's result before admission.
#[derive(Default)]
struct RawResult {
    /// Passages revalidated by the host, and refused references.
    ledger: EvidenceLedger,
    shape: Shape,
    is_error: bool,
    /// The model-visible text of an error.
    error_text: String,
    warnings: Vec<String>,
    /// A completed pipeline run: unlocks the direct tools when it admits evidence.
    qualifies: bool,
}

impl RawResult {
    fn error(text: String) -> RawResult {
        RawResult {
            is_error: true,
            error_text: text,
            ..RawResult::default()
        }
    }
}

impl Turn<'_> {
    fn record(&self, kind: &str, detail: Value) -> Result<()> {
        conversation::record(
            self.library.store(),
            &self.conversation.id,
            self.turn,
            kind,
            detail,
        )
        .map(|_| ())
    }

    fn notice(&mut self, text: &str, on_event: &mut dyn FnMut(TurnEvent<'_>)) -> Result<()> {
        on_event(TurnEvent::Notice(text));
        self.notices.push(text.to_string());
        self.record("notice", json!({ "text": text }))
    }

    /// Earlier turns as messages (answers without their citation lists).
    fn history(&self) -> Result<Vec<ChatMessage>> {
        let stored = conversation::messages(self.library.store(), &self.conversation.id)?;
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

    fn session(&self) -> Result<EvidenceSession> {
        EvidenceSession::in_conversation(
            self.library.evidence_key()?,
            self.principal.clone(),
            &self.conversation.id,
        )
    }

    /// Calls one tool by name: the pipeline, `knowledge_search`, or a direct evidence tool.
    ///
    /// Three phases: the call itself (as the caller, references revalidated by the host); then,
    /// in one transaction, each returned passage through the gates and into the conversation's
    /// ledger, and the text the model will see built from the admitted passages; then the
    /// `before:tool.result` gates over that whole text. A veto rolls the admission back, so a
    /// withheld result neither enters the ledger nor qualifies the conversation.
    fn call_tool(
        &mut self,
        name: &str,
        arguments: &Value,
        by: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<ToolOutcome> {
        let started = Instant::now();
        self.tool_calls += 1;
        self.record(
            "tool.invoke",
            json!({"tool": name, "arguments": arguments, "by": by}),
        )?;
        on_event(TurnEvent::ToolInvoke(name));
        let filter = self.gates.allows_tool(&self.mode.profile, name);
        let raw = if filter.decision == "veto" {
            RawResult::error(format!("Error: {}", filter.reason))
        } else {
            self.invoke(name, arguments)?
        };
        let mut gate_decisions = vec![filter];

        // Admission, undone on a veto.
        let store = self.library.store();
        let tx = store.write()?;
        let admitted_before = self.admitted.len();
        let qualified_before = self.conversation.qualified;
        let mut items = Vec::new();
        for entry in &raw.ledger.entries {
            let gated = self.gates.before_tool_result(&entry.text);
            gate_decisions.extend(gated.decisions.into_iter().filter(|d| d.decision != "pass"));
            if gated.vetoed {
                continue;
            }
            let item =
                conversation::admit(&tx, &self.conversation.id, self.turn, entry, &gated.text)?;
            if !self.admitted.iter().any(|a| a.n == item.n) {
                self.admitted.push(item.clone());
            }
            items.push(item);
        }
        let text = match &raw.shape {
            _ if raw.is_error => raw.error_text.clone(),
            Shape::Evidence => json!({
                "evidence": items.iter().map(evidence_json).collect::<Vec<_>>()
            })
            .to_string(),
            Shape::Output(output) => {
                let mut output = output.clone();
                rewrite_around_refs(&mut output, &raw.ledger.entries, &items);
                output.to_string()
            }
            Shape::KnowledgeSearch(output) => {
                // The manual's JSON, each content as admitted (after the gates); results whose
                // passage was withheld are dropped.
                let mut output = output.clone();
                if let Some(results) = output["results"].as_array_mut() {
                    let kept: Vec<Value> = results
                        .iter()
                        .zip(&raw.ledger.entries)
                        .filter_map(|(r, entry)| {
                            let item = items.iter().find(|i| i.chunk_id == entry.chunk_id)?;
                            let mut r = r.clone();
                            r["content"] = json!(item.text);
                            Some(r)
                        })
                        .collect();
                    *results = kept;
                    for (rank, r) in results.iter_mut().enumerate() {
                        r["rank"] = json!(rank + 1);
                    }
                }
                output.to_string()
            }
        };
        // Evidence shown to the model stays within the mode's budget.
        let budget_chars = self.mode.budget.evidence_tokens * 4;
        let text = if text.chars().count() > budget_chars && !raw.is_error {
            text.chars().take(budget_chars).collect::<String>() + " …[cut to the evidence budget]"
        } else {
            text
        };
        let gated = self.gates.before_tool_result(&text);
        gate_decisions.extend(gated.decisions.iter().cloned());
        if gated.vetoed {
            tx.rollback()?;
            self.admitted.truncate(admitted_before);
            items.clear();
        } else {
            if raw.qualifies && !items.is_empty() && !self.conversation.qualified {
                conversation::mark_qualified(&tx, &self.conversation.id)?;
                self.conversation.qualified = true;
            }
            tx.commit()?;
        }
        if gated.vetoed {
            self.conversation.qualified = qualified_before;
        }
        let is_error = raw.is_error || gated.vetoed;
        self.record(
            "tool.result",
            json!({
                "tool": name,
                "by": by,
                "took_ms": started.elapsed().as_millis() as u64,
                "is_error": is_error,
                "vetoed": gated.vetoed,
                "admitted": items.iter().map(|i| i.n).collect::<Vec<_>>(),
                "rejected": raw.ledger.rejected.iter().map(|r| json!({"reference": r.reference, "reason": r.reason})).collect::<Vec<_>>(),
                "warnings": raw.warnings,
                "gates": gate_decisions,
                "chars": gated.text.chars().count(),
                "error": if is_error { Some(gated.text.clone()) } else { None },
            }),
        )?;
        on_event(TurnEvent::ToolResult {
            tool: name,
            admitted: items.len(),
        });
        Ok(ToolOutcome {
            text: gated.text,
            is_error,
        })
    }

    /// The call itself, as the caller: nothing is admitted here.
    fn invoke(&self, name: &str, arguments: &Value) -> Result<RawResult> {
        let ks = self
            .mode
            .knowledge_search
            .clone()
            .map(KnowledgeSearch::boot)
            .transpose()?;
        if name == RUN_PIPELINE && self.mode.pipeline.is_some() {
            let query = arguments["query"]
                .as_str()
                .unwrap_or_default()
                .trim()
                .to_string();
            if query.is_empty() {
                return Ok(RawResult::error(
                    "Error: \"query argument required\"".into(),
                ));
            }
            let pipeline_name = self.mode.pipeline.as_deref().expect("checked");
            // The pipeline as it was when the revision was applied.
            let Some(resolved) = self.revision.pipelines.get(pipeline_name) else {
                return Ok(RawResult::error(format!(
                    "Error: pipeline `{pipeline_name}` is not part of revision {} (apply the configuration again)",
                    self.revision.revision
                )));
            };
            let options = RunOptions {
                conversation: Some(self.conversation.id.clone()),
                max_query_variants: Some(self.mode.budget.query_variants),
                ..Default::default()
            };
            return Ok(
                match self.library.evidence_key().and_then(|key| {
                    let engine = self.library.engine_context(&key);
                    pipeline::run_resolved(&engine, resolved, &query, self.principal, &options)
                }) {
                    Ok(run) => RawResult {
                        ledger: run.evidence,
                        shape: Shape::Evidence,
                        qualifies: true,
                        ..RawResult::default()
                    },
                    Err(e) => RawResult::error(format!("Error: {e}")),
                },
            );
        }
        if let Some(ks) = ks.filter(|k| k.name() == name) {
            let outcome = ks.call(self.library, &self.session()?, arguments);
            if outcome.is_error {
                let mut raw = RawResult::error(outcome.text);
                raw.warnings = outcome.warnings;
                return Ok(raw);
            }
            let mut ledger = EvidenceLedger::default();
            for e in outcome.entries {
                ledger.entries.push(e);
            }
            return Ok(RawResult {
                ledger,
                shape: Shape::KnowledgeSearch(outcome.output),
                warnings: outcome.warnings,
                ..RawResult::default()
            });
        }
        let tool = self
            .mode
            .direct_tools
            .iter()
            .any(|t| t == name)
            .then(|| self.revision.tools.get(name))
            .flatten();
        let Some(tool) = tool else {
            return Ok(RawResult::error(format!(
                "Error: there is no tool `{name}`"
            )));
        };
        if !self.conversation.qualified {
            return Ok(RawResult::error(format!(
                "Error: `{name}` is available only after a qualifying pipeline has completed in this conversation"
            )));
        }
        let resolved = self
            .mode
            .pipeline
            .as_deref()
            .and_then(|p| self.revision.pipelines.get(p));
        Ok(
            match self.library.evidence_key().and_then(|key| {
                let engine = self.library.engine_context(&key);
                pipeline::call_action(
                    &engine,
                    tool,
                    arguments,
                    self.principal,
                    resolved,
                    &self.conversation.id,
                )
            }) {
                Ok(call) => RawResult {
                    ledger: call.evidence,
                    shape: Shape::Output(call.output),
                    ..RawResult::default()
                },
                Err(e) => RawResult::error(format!("Error: {e}")),
            },
        )
    }

    /// The orchestrator finds evidence itself: the mode's pipeline, else `knowledge_search`.
    fn gather_evidence(&mut self, on_event: &mut dyn FnMut(TurnEvent<'_>)) -> Result<()> {
        let question = self.question.clone();
        let args = json!({ "query": question });
        let name = match (&self.mode.pipeline, &self.mode.knowledge_search) {
            (Some(_), _) => RUN_PIPELINE.to_string(),
            (None, Some(ks)) => ks.tool_name.clone(),
            (None, None) => return Ok(()),
        };
        let outcome = self.call_tool(&name, &args, "orchestrator", on_event)?;
        // A failed search must not read as "nothing found".
        if outcome.is_error {
            self.notice(
                &format!(
                    "{name} failed, so the answer has no evidence: {}",
                    outcome.text
                ),
                on_event,
            )?;
        }
        Ok(())
    }

    /// The evidence block shown to the model, within the mode's token budget.
    fn evidence_block(&self) -> (String, Vec<i64>) {
        let budget_chars = self.mode.budget.evidence_tokens * 4;
        let mut used = 0;
        let mut text = String::new();
        let mut shown = Vec::new();
        for item in &self.admitted {
            let room = budget_chars.saturating_sub(used);
            if room < 80 {
                break;
            }
            let passage: String = item.text.chars().take(room.min(1200)).collect();
            // The source's name, not its path: small models copy whatever they are shown.
            let name = item
                .title
                .clone()
                .or_else(|| {
                    item.path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                })
                .unwrap_or_default();
            let line = format!("[{}] {name}: {}\n", item.n, passage.replace('\n', " "));
            used += line.chars().count();
            text.push_str(&line);
            shown.push(item.n);
        }
        (text, shown)
    }

    /// A small model writes the answer from the admitted evidence, under a grammar that makes
    /// every sentence end with a citation of a shown passage.
    fn grounded_answer(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        let (evidence, shown) = self.evidence_block();
        if shown.is_empty() {
            let text = "I found nothing in your library that answers this.".to_string();
            on_event(TurnEvent::Token(&text));
            return Ok(text);
        }
        let mut messages = vec![ChatMessage::system(
            self.revision.config.system_prompt.clone(),
        )];
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(format!(
            "Evidence:\n{evidence}\nQuestion: {}\nAnswer the question in one to three full sentences using the evidence. End each sentence with the number of the evidence it comes from, like [{}].",
            self.question, shown[0]
        )));
        let mut request = ChatRequest::new(messages);
        request.max_tokens = self.mode.budget.answer_tokens;
        if backend.info().supports_grammar {
            // Sentences sized so that three of them fit the answer budget (about 4
            // characters a token): the grammar's last citation is never cut off.
            let sentence_chars = (self.mode.budget.answer_tokens * 4 / 3).saturating_sub(12);
            request.constraint = Some(Constraint::Grammar(citation_grammar(
                &shown,
                sentence_chars.clamp(40, 240),
            )));
        }
        let response = self.generate(backend, &request, 1, on_event)?;
        let mut answer = response.content;
        if response.finish_reason == "length" {
            // Cut off by the token budget: drop the trailing fragment that has no citation,
            // unless nothing worth keeping comes before it.
            if let Some(end) = answer.rfind(']') {
                let words = answer[..end].chars().filter(|c| c.is_alphabetic()).count();
                if words >= 20 {
                    answer.truncate(end + 1);
                }
            }
        }
        Ok(answer)
    }

    fn generate(
        &mut self,
        backend: &dyn ChatBackend,
        request: &ChatRequest,
        round: usize,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<crate::llm::ChatResponse> {
        let started = Instant::now();
        let mut forward = |e: StreamEvent<'_>| {
            if let StreamEvent::Token(t) = e {
                on_event(TurnEvent::Token(t));
            }
        };
        let response = backend.chat(request, &mut forward)?;
        for n in &response.notices {
            self.notice(n, &mut |_| {})?;
        }
        if self.first_token_ms.is_none() {
            self.first_token_ms = response.first_token_ms;
        }
        self.completion_tokens += response.usage.completion_tokens;
        self.record(
            "llm.generate",
            json!({
                "round": round,
                "backend": backend.info(),
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
                "first_token_ms": response.first_token_ms,
                "took_ms": started.elapsed().as_millis() as u64,
                "finish_reason": response.finish_reason,
                "tool_calls": response.tool_calls.iter().map(|c| json!({"name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
                "constrained": request.constraint.is_some() || !request.tools.is_empty(),
            }),
        )?;
        Ok(response)
    }

    /// The tools offered this round. A `knowledge_search` that cannot boot fails the turn: the
    /// model must not silently lose its search tool.
    fn offered_tools(&self) -> Result<Vec<ToolSpec>> {
        let mut tools = Vec::new();
        if self.mode.pipeline.is_some() {
            tools.push(ToolSpec {
                name: RUN_PIPELINE.into(),
                description: "Search the user's documents with the configured retrieval pipeline. Returns numbered evidence passages with their source and references for paging.".into(),
                parameters: json!({"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}}, "required": ["query"], "additionalProperties": false}),
            });
        }
        if let Some(ks) = &self.mode.knowledge_search {
            let mut spec = KnowledgeSearch::boot(ks.clone())?.tool_spec();
            // The model is told only the collections this caller may read.
            let readable: Vec<String> = self
                .library
                .collections()?
                .into_iter()
                .filter(|c| self.principal.scope.allows(c))
                .map(|c| c.name)
                .collect();
            if let Some(names) =
                spec.parameters["properties"]["namespaces"]["items"]["enum"].as_array_mut()
            {
                names.retain(|n| n.as_str().is_some_and(|n| readable.iter().any(|r| r == n)));
                if names.is_empty() {
                    if let Some(p) = spec.parameters["properties"].as_object_mut() {
                        p.remove("namespaces");
                    }
                }
            }
            tools.push(spec);
        }
        if self.conversation.qualified {
            for slug in &self.mode.direct_tools {
                if let Some(tool) = self.revision.tools.get(slug) {
                    let parameters = tool
                        .derived
                        .as_ref()
                        .and_then(|d| d.input_schema.clone())
                        .unwrap_or(json!({"type": "object"}));
                    tools.push(ToolSpec {
                        name: slug.clone(),
                        description: tool.description.clone(),
                        parameters,
                    });
                }
            }
        }
        tools.retain(|t| self.gates.allows_tool(&self.mode.profile, &t.name).decision == "pass");
        Ok(tools)
    }

    /// A capable model chooses the tools, round by round, within the budgets.
    fn model_led(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        let mut messages = vec![ChatMessage::system(format!(
            "{}\nUse the tools to find evidence before answering. Tool results number each passage like [3]; cite those numbers (or the file path in brackets).",
            self.revision.config.system_prompt
        ))];
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(self.question.clone()));
        let budget = self.mode.budget;
        for round in 1..=budget.rounds {
            let tools = self.offered_tools()?;
            let mut request = ChatRequest::new(messages.clone());
            request.max_tokens = budget.answer_tokens;
            request.tools = tools;
            let response = self.generate(backend, &request, round, on_event)?;
            if !request.tools.is_empty() && !backend.info().supports_tools {
                // The server just refused tools and answered without them: that answer has no
                // evidence behind it, so retrieve and ask again the grounded way.
                self.gather_evidence(on_event)?;
                return self.grounded_answer(backend, history, on_event);
            }
            if response.tool_calls.is_empty() {
                return Ok(response.content);
            }
            let mut assistant = ChatMessage::assistant(response.content.clone());
            assistant.tool_calls = response.tool_calls.clone();
            messages.push(assistant);
            for call in &response.tool_calls {
                let text = self.model_tool_call(call, &request.tools, on_event)?;
                messages.push(ChatMessage::tool_result(call, text));
            }
        }
        // Budget spent: one last round without tools.
        messages.push(ChatMessage::user(
            "The tool budget is spent. Answer now from the evidence above, citing it.".to_string(),
        ));
        let mut request = ChatRequest::new(messages);
        request.max_tokens = budget.answer_tokens;
        let response = self.generate(backend, &request, budget.rounds + 1, on_event)?;
        Ok(response.content)
    }

    fn model_tool_call(
        &mut self,
        call: &ToolCall,
        offered: &[ToolSpec],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        // Refused before the call: recorded as an invocation and its result all the same.
        let refuse = |turn: &mut Self, text: String| -> Result<String> {
            turn.record(
                "tool.invoke",
                json!({"tool": call.name, "arguments": call.arguments, "by": "model"}),
            )?;
            turn.record(
                "tool.result",
                json!({"tool": call.name, "by": "model", "took_ms": 0, "is_error": true,
                       "vetoed": false, "error": text, "admitted": [], "rejected": [],
                       "warnings": [], "gates": []}),
            )?;
            Ok(text)
        };
        if self.tool_calls >= self.mode.budget.tool_calls {
            return refuse(
                self,
                "Error: the tool-call budget of this turn is spent".into(),
            );
        }
        let arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => {
                return refuse(self, format!("Error: the arguments are not JSON: {e}"));
            }
        };
        // Calls to tools not offered this round (e.g. a direct tool before a qualifying
        // pipeline) still go through call_tool, which refuses them with the reason.
        if let Some(spec) = offered.iter().find(|t| t.name == call.name) {
            if let Err(e) = crate::tools::schema::validate(&arguments, &spec.parameters) {
                return refuse(self, format!("Error: invalid arguments: {e}"));
            }
        }
        let outcome = self.call_tool(&call.name, &arguments, "model", on_event)?;
        Ok(outcome.text)
    }

    /// Keeps the citations that resolve to this conversation's ledger (by number or by file
    /// path), removes the others from the text, and records them.
    fn resolve_citations(&mut self, answer: &str) -> Result<(String, Vec<Citation>)> {
        let ledger = conversation::evidence(self.library.store(), &self.conversation.id)?;
        let marker = Regex::new(r"\[([^\[\]\n]{1,200})\]").expect("a valid regex");
        let mut cited: Vec<i64> = Vec::new();
        let mut refused: BTreeSet<String> = BTreeSet::new();
        let cleaned = marker.replace_all(answer, |caps: &regex::Captures<'_>| {
            let inner = caps[1].trim();
            let found = match inner.parse::<i64>() {
                Ok(n) => ledger.iter().find(|i| i.n == n),
                Err(_) => ledger.iter().find(|i| {
                    let path = i.path.display().to_string();
                    !inner.is_empty() && (path == inner || path.ends_with(&format!("/{inner}")))
                }),
            };
            match found {
                Some(item) => {
                    if !cited.contains(&item.n) {
                        cited.push(item.n);
                    }
                    format!("[{}]", item.n)
                }
                None if inner.parse::<i64>().is_ok()
                    || inner.contains('/')
                    || inner.contains('.') =>
                {
                    refused.insert(inner.to_string());
                    String::new()
                }
                None => caps[0].to_string(),
            }
        });
        if !refused.is_empty() {
            self.record(
                "citation.rejected",
                json!({"citations": refused, "reason": "not an entry of this conversation's evidence ledger"}),
            )?;
        }
        let citations = cited
            .iter()
            .filter_map(|n| ledger.iter().find(|i| i.n == *n))
            .map(Citation::of)
            .collect();
        Ok((cleaned.trim().to_string(), citations))
    }
}

/// A passage as a tool result shows it to the model.
fn evidence_json(item: &EvidenceItem) -> Value {
    json!({
        "cite": format!("[{}]", item.n),
        "source": item.locator(),
        "content": item.text,
        "evidence_ref": item.evidence_ref,
        "source_ref": item.source_ref,
    })
}

/// Rewrites an action tool's output around its references: beside every `evidence_ref` (or
/// `evidence_refs`), `text` becomes the admitted passages' text (after the gates) and `cite`
/// their numbers; a reference that was refused or withheld gets no text. The tool's own words
/// never stand in for evidence.
fn rewrite_around_refs(value: &mut Value, entries: &[LedgerEntry], items: &[EvidenceItem]) {
    let item_of = |reference: &str| {
        let chunk = entries
            .iter()
            .find(|e| e.evidence_ref == reference)?
            .chunk_id;
        items.iter().find(|i| i.chunk_id == chunk)
    };
    match value {
        Value::Object(map) => {
            let mut refs: Vec<String> = Vec::new();
            if let Some(r) = map.get("evidence_ref").and_then(Value::as_str) {
                refs.push(r.to_string());
            }
            if let Some(list) = map.get("evidence_refs").and_then(Value::as_array) {
                refs.extend(list.iter().filter_map(|r| r.as_str().map(str::to_string)));
            }
            if !refs.is_empty() {
                let admitted: Vec<&EvidenceItem> = refs.iter().filter_map(|r| item_of(r)).collect();
                let texts: Vec<&str> = admitted.iter().map(|i| i.text.as_str()).collect();
                let cites: Vec<String> = admitted.iter().map(|i| format!("[{}]", i.n)).collect();
                map.insert("text".into(), json!(texts.join("\n")));
                map.insert("cite".into(), json!(cites.join("")));
            }
            for (key, v) in map.iter_mut() {
                if key != "text" {
                    rewrite_around_refs(v, entries, items);
                }
            }
        }
        Value::Array(list) => list
            .iter_mut()
            .for_each(|v| rewrite_around_refs(v, entries, items)),
        _ => {}
    }
}

/// A GBNF grammar for one to three sentences, each ending with a citation of a shown passage.
/// The sentence text cannot hold a full stop, so the model ends a sentence where it means to
/// (decimals are the price) instead of being cut off mid-word at the length limit.
pub fn citation_grammar(shown: &[i64], sentence_chars: usize) -> String {
    let numbers = shown
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(" | ");
    format!(
        "root ::= sentence (\" \" sentence){{0,2}}\n\
         sentence ::= [A-Z0-9] [^\\[\\]\\n.]{{20,{sentence_chars}}} \". [\" num \"]\"\n\
         num ::= {numbers}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_citation_grammar_names_only_shown_passages() {
        let g = citation_grammar(&[2, 5], 200);
        assert!(g.contains("{20,200}"), "{g}");
        assert!(g.contains("num ::= \"2\" | \"5\""), "{g}");
        assert!(g.starts_with("root ::= sentence"));
    }
}
