//! Tauri commands of the Chat view: conversations (list, open, rename, delete), a turn streamed
//! to the window over a channel with a stop button, the last turn taken back (to regenerate or
//! to edit and resend), each answer's trace, and the assistant's backend checked before it is
//! chosen. Turns run on the engine's chat handle, so a long answer never holds the library the
//! other views use; everything else reads through the UI's handle.

use std::sync::Arc;

use quarry_core::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use quarry_core::llm::{ChatMessage, ChatRequest};
use quarry_core::orchestrator::{
    self, BackendConfig, ChatOptions, Citation, Conversation, TraceEvent, TurnEvent, TurnResult,
    DEFAULT_CONFIG,
};
use quarry_core::{Library, Principal};
use serde::{Deserialize, Serialize};
use tauri::ipc::Channel;

use crate::commands::{blocking, EngineState};
use crate::error::CommandResult;
use crate::secrets;
use crate::settings;
use crate::stops::Stops;

/// A mode of the applied orchestrator configuration, as the mode picker offers it.
#[derive(Serialize, specta::Type)]
pub struct ModeChoice {
    name: String,
    description: String,
    /// Its backend, in words.
    backend: String,
}

/// Whether the assistant's backend can answer, and if not, what fixes it.
#[derive(Serialize, specta::Type)]
pub struct AssistantStatus {
    /// The backend answers come from, in words.
    backend: String,
    /// The chosen backend (`None`: each mode's own).
    chosen: Option<BackendConfig>,
    /// What is wrong with it, when something is.
    problem: Option<String>,
    /// A command that fixes it (installing the model).
    fix: Option<String>,
    /// The embedded model's size on disk, when it is not loaded yet (the first answer waits
    /// for it).
    loading_bytes: Option<u64>,
}

/// What the Chat view opens with.
#[derive(Serialize, specta::Type)]
pub struct ChatOverview {
    conversations: Vec<Conversation>,
    modes: Vec<ModeChoice>,
    default_mode: String,
    /// Collections a conversation may be limited to.
    collections: Vec<String>,
    assistant: AssistantStatus,
}

/// One question and its answer.
#[derive(Serialize, specta::Type)]
pub struct ChatTurn {
    turn: i64,
    question: String,
    answer: String,
    citations: Vec<Citation>,
    /// Fallbacks, refusals and a stop, as the user should read them.
    notices: Vec<String>,
    /// Citations the answer made that were not in the conversation's evidence, removed.
    refused_citations: Vec<String>,
    stopped: bool,
    /// `kind model`, or `extractive`.
    backend: Option<String>,
    /// How the answer stands on the evidence (`found in 2 passages`, `not in your documents`).
    basis: Option<String>,
    first_token_ms: Option<u64>,
    completion_tokens: Option<u64>,
    took_ms: Option<u64>,
}

/// A conversation with its turns.
#[derive(Serialize, specta::Type)]
pub struct ChatConversation {
    conversation: Conversation,
    turns: Vec<ChatTurn>,
}

/// What the window asks.
#[derive(Deserialize, specta::Type)]
pub struct ChatAsk {
    /// The window's id for this turn (its Stop button names it).
    run: String,
    question: String,
    /// Continue this conversation (`None`: start one).
    conversation: Option<String>,
    /// The mode of a new conversation (`None`: the configuration's default).
    mode: Option<String>,
    /// A new conversation searches only these collections (`None`: every one); a running
    /// one keeps to those it began with.
    collections: Option<Vec<String>>,
}

/// What streams to the window while a turn runs.
#[derive(Clone, Serialize, specta::Type)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChatEvent {
    /// The embedded model is loading (the first answer after start).
    Loading { model: String, bytes: u64 },
    /// A piece of the answer.
    Token { text: String },
    /// A tool is being called.
    ToolInvoke { tool: String },
    /// A tool finished, with the passages it admitted.
    ToolResult { tool: String, admitted: u32 },
    /// A fallback, a refused call, a stop.
    Notice { text: String },
}

impl From<TurnEvent<'_>> for ChatEvent {
    fn from(e: TurnEvent<'_>) -> Self {
        match e {
            TurnEvent::Loading { model, bytes } => ChatEvent::Loading {
                model: model.into(),
                bytes,
            },
            TurnEvent::Token(text) => ChatEvent::Token { text: text.into() },
            TurnEvent::ToolInvoke(tool) => ChatEvent::ToolInvoke { tool: tool.into() },
            TurnEvent::ToolResult { tool, admitted } => ChatEvent::ToolResult {
                tool: tool.into(),
                admitted: admitted as u32,
            },
            TurnEvent::Notice(text) => ChatEvent::Notice { text: text.into() },
        }
    }
}

/// One recorded event of a turn, its detail as JSON text.
#[derive(Serialize, specta::Type)]
pub struct ChatTraceEvent {
    /// Milliseconds since the epoch.
    at_ms: i64,
    kind: String,
    detail: String,
}

impl From<TraceEvent> for ChatTraceEvent {
    fn from(e: TraceEvent) -> Self {
        ChatTraceEvent {
            at_ms: e.at_ms,
            kind: e.kind,
            detail: e.detail.to_string(),
        }
    }
}

/// The conversations are the administrator's: the window is the library's owner.
fn owner() -> Principal {
    Principal::administrator()
}

/// The backend answers would come from, whether it can, and what fixes it.
fn assistant_status(library: &Library, chosen: Option<BackendConfig>) -> AssistantStatus {
    let applied = library.orchestrator_revision(DEFAULT_CONFIG, None).ok();
    let effective = chosen.clone().or_else(|| {
        let config = applied.as_ref()?.config.clone();
        let mode = config.mode(&config.default_mode).ok()?.clone();
        Some(mode.backend)
    });
    // `auto` is shown as the model it stands for on this machine now.
    let effective =
        effective.map(|config| quarry_core::orchestrator::resolve_auto(library.models(), config).0);
    let mut status = AssistantStatus {
        backend: effective
            .as_ref()
            .map_or_else(|| "each mode's own".to_string(), BackendConfig::describe),
        chosen,
        problem: None,
        fix: None,
        loading_bytes: None,
    };
    if let Some(BackendConfig::Embedded { model, .. }) = &effective {
        match EmbeddedConfig::named(library.models(), model) {
            Ok(config) if !EmbeddedBackend::is_shared(&config.model_path) => {
                status.loading_bytes = std::fs::metadata(&config.model_path).ok().map(|m| m.len());
            }
            Ok(_) => {}
            Err(e) => {
                status.problem = Some(e.to_string());
                status.fix = Some(quarry_core::models::fix_command(model));
            }
        }
    }
    status
}

#[tauri::command]
#[specta::specta]
pub async fn chat_overview(engine: EngineState<'_>) -> CommandResult<ChatOverview> {
    blocking(&engine, |engine| {
        let chosen = settings::load(engine.data_dir())?.chat_backend;
        let library = engine.library();
        let config = library
            .orchestrator_revision(DEFAULT_CONFIG, None)
            .map(|applied| applied.config)?;
        Ok(ChatOverview {
            conversations: library.conversations(&owner())?,
            modes: config
                .modes
                .iter()
                .map(|m| ModeChoice {
                    name: m.name.clone(),
                    description: m.description.clone(),
                    backend: m.backend.describe(),
                })
                .collect(),
            default_mode: config.default_mode.clone(),
            collections: library.collections()?.into_iter().map(|c| c.name).collect(),
            assistant: assistant_status(&library, chosen),
        })
    })
    .await
}

/// A conversation's turns from its stored messages.
fn turns_of(library: &Library, id: &str) -> quarry_core::Result<Vec<ChatTurn>> {
    let mut turns: Vec<ChatTurn> = Vec::new();
    for message in library.conversation_messages(&owner(), id)? {
        if message.role == "user" {
            turns.push(ChatTurn {
                turn: message.turn,
                question: message.content,
                answer: String::new(),
                citations: Vec::new(),
                notices: Vec::new(),
                refused_citations: Vec::new(),
                stopped: false,
                backend: None,
                basis: None,
                first_token_ms: None,
                completion_tokens: None,
                took_ms: None,
            });
        } else if let Some(turn) = turns.last_mut().filter(|t| t.turn == message.turn) {
            turn.answer = message.content;
            turn.citations = message
                .citations
                .and_then(|c| serde_json::from_value(c).ok())
                .unwrap_or_default();
        }
    }
    // What the trace knows of each turn: its notices (a stop among them) and its backend.
    for event in library.conversation_trace(&owner(), id, None)? {
        let Some(turn) = turns.iter_mut().find(|t| t.turn == event.turn) else {
            continue;
        };
        match event.kind.as_str() {
            "notice" => {
                let text = event.detail["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                turn.stopped |= text.starts_with("stopped");
                turn.notices.push(text);
            }
            "answer" => {
                turn.backend = event.detail["backend"].as_str().map(String::from);
                turn.basis = event.detail["basis"].as_str().map(String::from);
            }
            "citation.rejected" => {
                let refused = event.detail["citations"].as_array().into_iter().flatten();
                turn.refused_citations
                    .extend(refused.map(|c| match c.as_str() {
                        Some(text) => text.to_string(),
                        None => c.to_string(),
                    }));
            }
            _ => {}
        }
    }
    Ok(turns)
}

#[tauri::command]
#[specta::specta]
pub async fn chat_conversation(
    engine: EngineState<'_>,
    id: String,
) -> CommandResult<ChatConversation> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        Ok(ChatConversation {
            conversation: library.conversation(&owner(), &id)?,
            turns: turns_of(&library, &id)?,
        })
    })
    .await
}

/// A turn as stored, with the timings only the finished turn knows.
fn with_timings(mut turn: ChatTurn, result: &TurnResult) -> ChatTurn {
    turn.first_token_ms = result.first_token_ms;
    turn.completion_tokens = Some(result.completion_tokens as u64);
    turn.took_ms = Some(result.took_ms);
    turn
}

/// Asks a question; the answer streams to `events` and the finished turn is returned.
#[tauri::command]
#[specta::specta]
pub async fn chat_send(
    engine: EngineState<'_>,
    running: tauri::State<'_, Arc<Stops>>,
    ask: ChatAsk,
    events: Channel<ChatEvent>,
) -> CommandResult<ChatConversation> {
    let running = Arc::clone(&running);
    blocking(&engine, move |engine| {
        let mut options = ChatOptions::new(owner());
        options.conversation = ask.conversation;
        options.mode = ask.mode;
        // Kept with a new conversation; a running one keeps to its own.
        options.collections = ask.collections;
        options.backend = settings::load(engine.data_dir())?.chat_backend;
        options.api_key = options
            .backend
            .as_ref()
            .and_then(|b| kept_key(engine.data_dir(), b));
        options.cancel = running.start(&ask.run);
        let result = engine.chat_library().and_then(|library| {
            library.chat(&ask.question, &options, &mut |e| {
                // A window that went away stops listening; the turn still finishes and is kept.
                let _ = events.send(ChatEvent::from(e));
            })
        });
        running.finish(&ask.run);
        let result = result?;
        let library = engine.library();
        let conversation = library.conversation(&owner(), &result.conversation)?;
        let mut turns = turns_of(&library, &result.conversation)?;
        if let Some(last) = turns.pop() {
            turns.push(with_timings(last, &result));
        }
        Ok(ChatConversation {
            conversation,
            turns,
        })
    })
    .await
}

/// Stops a running turn where it is; false when it already finished.
#[tauri::command]
#[specta::specta]
pub async fn chat_stop(running: tauri::State<'_, Arc<Stops>>, run: String) -> CommandResult<bool> {
    Ok(running.stop(&run))
}

#[tauri::command]
#[specta::specta]
pub async fn chat_rename(
    engine: EngineState<'_>,
    id: String,
    title: String,
) -> CommandResult<Conversation> {
    blocking(&engine, move |engine| {
        Ok(engine
            .library()
            .rename_conversation(&owner(), &id, &title)?)
    })
    .await
}

/// Deletes a conversation with everything recorded in it (the view asked first).
#[tauri::command]
#[specta::specta]
pub async fn chat_delete(engine: EngineState<'_>, id: String) -> CommandResult<()> {
    blocking(&engine, move |engine| {
        Ok(engine.library().delete_conversation(&owner(), &id)?)
    })
    .await
}

/// Takes back the last turn of a conversation and returns its question.
#[tauri::command]
#[specta::specta]
pub async fn chat_take_back(engine: EngineState<'_>, id: String) -> CommandResult<String> {
    blocking(&engine, move |engine| {
        Ok(engine.library().take_back_last_turn(&owner(), &id)?)
    })
    .await
}

/// The recorded events of one turn, for its trace drawer.
#[tauri::command]
#[specta::specta]
pub async fn chat_trace(
    engine: EngineState<'_>,
    id: String,
    turn: i64,
) -> CommandResult<Vec<ChatTraceEvent>> {
    blocking(&engine, move |engine| {
        let trace = engine
            .library()
            .conversation_trace(&owner(), &id, Some(turn))?;
        Ok(trace.into_iter().map(ChatTraceEvent::from).collect())
    })
    .await
}

/// Chooses the backend answers come from (`None`: each mode's own), after a test request
/// shows it answers; an OpenAI-compatible server's `api_key`, when given, is kept in the OS
/// keyring (or an owner-only file where there is none), never in the settings. Returns what
/// answered, and where the key is.
#[tauri::command]
#[specta::specta]
pub async fn chat_choose_backend(
    engine: EngineState<'_>,
    backend: Option<BackendConfig>,
    api_key: Option<String>,
) -> CommandResult<String> {
    blocking(&engine, move |engine| {
        let data_dir = engine.data_dir();
        let api_key = api_key.filter(|k| !k.trim().is_empty());
        let mut answered = match &backend {
            Some(config) => {
                let key = api_key.clone().or_else(|| kept_key(data_dir, config));
                test_request(&engine.library(), config, key.as_deref())?
            }
            None => "each mode's own backend".to_string(),
        };
        if let (Some(key), Some(BackendConfig::Openai { base_url, .. })) = (&api_key, &backend) {
            let kept = secrets::store(data_dir, base_url, key.trim())?;
            answered = format!("{answered}; {}", kept.describe());
        }
        let mut chosen = settings::load(data_dir)?;
        chosen.chat_backend = backend;
        settings::save(data_dir, &chosen)?;
        Ok(answered)
    })
    .await
}

/// The API key kept for an OpenAI-compatible backend, if one was.
fn kept_key(data_dir: &std::path::Path, backend: &BackendConfig) -> Option<String> {
    match backend {
        BackendConfig::Openai { base_url, .. } => secrets::load(data_dir, base_url),
        _ => None,
    }
}

/// Asks `config` for one token; an error says why it cannot answer.
fn test_request(
    library: &Library,
    config: &BackendConfig,
    api_key: Option<&str>,
) -> CommandResult<String> {
    let Some(backend) = orchestrator::open_backend_with_key(library.models(), config, api_key)?
    else {
        return Ok("extractive answers (no model)".to_string());
    };
    let mut request = ChatRequest::new(vec![ChatMessage::user("Say OK.")]);
    request.max_tokens = 1;
    backend.chat(&request, &mut |_| {})?;
    let info = backend.info();
    Ok(format!("{} {} answered", info.kind, info.model))
}
