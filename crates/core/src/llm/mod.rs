//! LLM backends behind one trait: the embedded llama.cpp model (the default, no server) and
//! OpenAI-compatible HTTP servers (Ollama, llama-server, LM Studio, vLLM, hosted endpoints).
//!
//! A backend takes a [`ChatRequest`] (messages, tools, an optional output constraint) and
//! streams [`StreamEvent`]s while it generates, then returns the whole [`ChatResponse`]. Tool
//! calls come back with their arguments as raw JSON text; the orchestrator parses and checks
//! them against the tool's schema, so a lenient server cannot smuggle a bad call through.

pub mod device;
pub mod embedded;
pub mod openai;
pub mod speed;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::cancel::Cancel;
use crate::Result;

/// What finishes a generation the caller stopped ([`ChatResponse::finish_reason`], see
/// [`Cancel`]).
pub const CANCELLED: &str = "cancelled";

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering one tool call.
    Tool,
}

impl Role {
    /// The wire name (`system`, `user`, `assistant`, `tool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// The text (empty for an assistant turn that only calls tools).
    pub content: String,
    /// Tool calls made in an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: the tool's name (Ollama's native API wants it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with text only.
    pub fn new(role: Role, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::Assistant, content)
    }

    /// A tool result answering `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
        }
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model sees.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: Value,
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The server's id for the call (made up when the server gives none).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text, exactly as generated.
    pub arguments: String,
}

/// What the output must look like.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// A GBNF grammar (the embedded backend and llama-server honour it).
    Grammar(String),
    /// A JSON schema: the embedded backend turns it into a grammar, HTTP servers get it as
    /// `response_format`.
    JsonSchema(Value),
}

/// One request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Functions the model may call (empty: none).
    pub tools: Vec<ToolSpec>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f32,
    /// An output constraint, if any.
    pub constraint: Option<Constraint>,
    /// The model must call one of `tools` (OpenAI's `tool_choice: "required"`).
    pub require_tool: bool,
    /// Stops the generation early (see [`Cancel`]).
    pub cancel: Cancel,
}

impl ChatRequest {
    /// A request with default limits (512 tokens, temperature 0).
    pub fn new(messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            messages,
            tools: Vec::new(),
            max_tokens: 512,
            temperature: 0.0,
            constraint: None,
            require_tool: false,
            cancel: Cancel::default(),
        }
    }
}

/// Something that happened while generating.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent<'a> {
    /// A piece of answer text.
    Token(&'a str),
    /// A piece of a tool call (arguments arrive in fragments, joined by `index`).
    ToolCallDelta {
        /// Which call of this turn.
        index: usize,
        /// The tool's name, when this fragment carries it.
        name: Option<&'a str>,
        /// A fragment of the arguments' JSON text.
        arguments: &'a str,
    },
    /// Something the user should see (e.g. "this server cannot call tools").
    Notice(&'a str),
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens whose evaluation was reused from an earlier request (the embedded
    /// backend's cached system prompt).
    #[serde(default)]
    pub cached_prompt_tokens: usize,
}

/// A finished generation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatResponse {
    /// The answer text.
    pub content: String,
    /// Tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// `stop`, `length`, `tool_calls`, [`CANCELLED`], …
    pub finish_reason: String,
    /// Token counts (as reported by the server, or counted here).
    pub usage: Usage,
    /// Milliseconds from the request to the first token or tool-call fragment.
    pub first_token_ms: Option<u64>,
    /// Milliseconds for the whole request.
    pub total_ms: u64,
    /// Notices raised (also streamed as [`StreamEvent::Notice`]).
    pub notices: Vec<String>,
    /// Threads that read the prompt and that generated, where the backend runs here (a
    /// server's own are not known).
    pub threads: Option<ThreadUse>,
}

/// How many threads a request ran on, here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ThreadUse {
    /// Threads that read the prompt.
    pub prompt: usize,
    /// Threads that generated the answer, token by token.
    pub generation: usize,
}

/// What a backend is and can do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendInfo {
    /// `embedded`, `openai` or `ollama`.
    pub kind: &'static str,
    /// The model (id or file name).
    pub model: String,
    /// Where it runs (a file path or a base URL).
    pub location: String,
    /// Whether it accepts `tools` (false once a server has said it cannot).
    pub supports_tools: bool,
    /// Whether it honours [`Constraint::Grammar`].
    pub supports_grammar: bool,
    /// The device it runs on, when it runs here (`Vulkan0 (…)`, `CPU`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// An LLM backend.
pub trait ChatBackend: Send + Sync {
    /// What it is.
    fn info(&self) -> BackendInfo;

    /// Generates one assistant turn, streaming events to `on_event`.
    fn chat(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<ChatResponse>;
}

/// Joins streamed tool-call fragments by their `index` (the OpenAI streaming rule: the first
/// fragment of a call carries its id and name, later ones only argument text).
#[derive(Debug, Default)]
pub struct ToolCallAssembler {
    calls: Vec<(Option<String>, String, String)>,
}

impl ToolCallAssembler {
    /// Adds one fragment.
    pub fn push(&mut self, index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) {
        while self.calls.len() <= index {
            self.calls.push((None, String::new(), String::new()));
        }
        let call = &mut self.calls[index];
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.0 = Some(id.to_string());
        }
        // The name comes whole in the call's first fragment; some servers repeat it later.
        if let Some(name) = name.filter(|s| !s.is_empty()) {
            if call.1.is_empty() {
                call.1.push_str(name);
            }
        }
        call.2.push_str(arguments);
    }

    /// Whether any call was started.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The assembled calls; calls without a name are dropped, ids are made up when missing.
    pub fn finish(self) -> Vec<ToolCall> {
        self.calls
            .into_iter()
            .enumerate()
            .filter(|(_, (_, name, _))| !name.is_empty())
            .map(|(i, (id, name, arguments))| ToolCall {
                id: id.unwrap_or_else(|| format!("call_{i}")),
                name,
                arguments: if arguments.trim().is_empty() {
                    "{}".into()
                } else {
                    arguments
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_join_by_index_in_any_interleaving() {
        let mut a = ToolCallAssembler::default();
        a.push(0, Some("c1"), Some("knowledge_search"), "{\"qu");
        a.push(1, Some("c2"), Some("fetch_neighbors"), "{");
        a.push(0, None, None, "ery\": \"pumps\"}");
        a.push(1, None, Some("fetch_neighbors"), "}");
        let calls = a.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "c1");
        assert_eq!(calls[0].arguments, "{\"query\": \"pumps\"}");
        assert_eq!(calls[1].name, "fetch_neighbors");
        assert_eq!(calls[1].arguments, "{}");
    }
}
