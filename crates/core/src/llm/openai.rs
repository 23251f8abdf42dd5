//! OpenAI-compatible HTTP backends (and Ollama's native `/api/chat`).
//!
//! [`OpenAiBackend`] speaks one of two [`Dialect`]s over blocking HTTP (ureq):
//!
//! - [`Dialect::OpenAi`]: `POST {base}/chat/completions` with `stream: true`, read as
//!   server-sent events. This covers llama-server, vLLM, LM Studio, Ollama's `/v1` and hosted
//!   endpoints. The parser is lenient because these servers differ in the details (`data:` with
//!   or without a space, CRLF, comments, tool-call arguments as an object instead of a string, a
//!   plain JSON reply when `stream` is ignored).
//! - [`Dialect::OllamaNative`]: `POST {root}/api/chat`, read as newline-delimited JSON.
//!
//! Servers that cannot call tools (llama-server without `--jinja`, Ollama models without a tool
//! template) refuse a request that has `tools`. The backend then switches itself to a no-tools
//! mode for good, says so with a [`StreamEvent::Notice`] and retries without them, so a chat
//! still gets an answer.
//!
//! ```no_run
//! use quarry_core::llm::openai::{OpenAiBackend, OpenAiConfig};
//! use quarry_core::llm::{ChatBackend, ChatMessage, ChatRequest, StreamEvent};
//!
//! let backend = OpenAiBackend::new(OpenAiConfig::openai("http://127.0.0.1:8080/v1", "local"))?;
//! let request = ChatRequest::new(vec![ChatMessage::user("Say hello.")]);
//! let answer = backend.chat(&request, &mut |event| {
//!     if let StreamEvent::Token(text) = event {
//!         print!("{text}");
//!     }
//! })?;
//! println!("\n{} tokens", answer.usage.completion_tokens);
//! # Ok::<_, quarry_core::Error>(())
//! ```

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{
    BackendInfo, Cancel, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Constraint, Role,
    StreamEvent, ToolCallAssembler, Usage, CANCELLED,
};
use crate::{Error, Result};

/// How long to wait for a connection, the response head or the next piece of a stream, unless
/// configured otherwise. Generous: a CPU server may read a long prompt before it answers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Error bodies are read up to this size; longer ones are cut (they are shown cut anyway).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// Server error messages are cut to this many characters before they reach the user.
const MAX_ERROR_CHARS: usize = 300;

/// Lower-case phrases with which servers refuse `tools`: llama-server without `--jinja`,
/// Ollama for models without a tool template, and a few proxies and hosted APIs.
const TOOLS_REFUSALS: &[&str] = &[
    "tools param requires",
    "does not support tools",
    "does not support tool",
    "tool use is not supported",
    "tools are not supported",
    "tools is not supported",
    "tool calling is not supported",
    "tool calls are not supported",
    "function calling is not supported",
    "tool_choice is not supported",
];

/// Which wire protocol a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST {base}/chat/completions` with server-sent events: llama-server, vLLM, LM Studio,
    /// Ollama's `/v1`, hosted APIs.
    OpenAi,
    /// Ollama's native `POST {root}/api/chat` with newline-delimited JSON.
    OllamaNative,
}

/// Where an HTTP backend is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// For [`Dialect::OpenAi`] the API base, e.g. `http://127.0.0.1:8080/v1`; for
    /// [`Dialect::OllamaNative`] the server root, e.g. `http://127.0.0.1:11434` (a trailing
    /// `/v1` or `/api` is ignored).
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// The wire protocol.
    pub dialect: Dialect,
    /// Longest wait to connect, for the response head, or for the next piece of a stream; not
    /// a cap on a whole generation (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    /// Send [`Constraint::Grammar`] as a `grammar` field (llama.cpp's server honours it; other
    /// servers may refuse unknown fields, so it is off unless asked for).
    pub grammar: bool,
}

impl OpenAiConfig {
    /// A configuration without an API key and with the default timeout.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        dialect: Dialect,
    ) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dialect,
            timeout: DEFAULT_TIMEOUT,
            grammar: false,
        }
    }

    /// An OpenAI-compatible server at `base_url` (`…/v1`).
    pub fn openai(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig::new(base_url, model, Dialect::OpenAi)
    }

    /// An Ollama server's native API at `base_url` (its root, `http://127.0.0.1:11434`).
    pub fn ollama(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig::new(base_url, model, Dialect::OllamaNative)
    }

    /// The same configuration with an API key.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> OpenAiConfig {
        self.api_key = Some(api_key.into());
        self
    }

    /// The same configuration, sending GBNF grammars (for llama.cpp's server).
    pub fn with_grammar(mut self, grammar: bool) -> OpenAiConfig {
        self.grammar = grammar;
        self
    }

    /// The same configuration with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> OpenAiConfig {
        self.timeout = timeout;
        self
    }
}

/// A chat backend on an HTTP server.
pub struct OpenAiBackend {
    config: OpenAiConfig,
    agent: ureq::Agent,
    /// Set for good once the server refused `tools`: asking again would fail every time.
    no_tools: AtomicBool,
}

/// A failed attempt, before it becomes an [`Error`]: the retry without tools needs to know
/// whether anything was already streamed to the caller.
struct Failure {
    message: String,
    output_started: bool,
}

impl Failure {
    fn early(message: String) -> Failure {
        Failure {
            message,
            output_started: false,
        }
    }
}

impl OpenAiBackend {
    /// A backend for `config`; nothing is sent until the first request.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiBackend> {
        let url = config.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::InvalidSetting {
                field: "base_url".into(),
                reason: format!("`{url}` is not an http:// or https:// URL"),
            });
        }
        if config.model.trim().is_empty() {
            return Err(Error::InvalidSetting {
                field: "model".into(),
                reason: "the model name is empty".into(),
            });
        }
        let timeout = Some(config.timeout);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Error statuses carry the server's explanation in the body; we read it ourselves.
            .http_status_as_error(false)
            .timeout_connect(timeout)
            .timeout_recv_response(timeout)
            .timeout_per_read(timeout)
            .build()
            .into();
        Ok(OpenAiBackend {
            config,
            agent,
            no_tools: AtomicBool::new(false),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The models the server offers (`GET {base}/models`, or Ollama's `GET {root}/api/tags`).
    pub fn list_models(&self) -> Result<Vec<String>> {
        let url = match self.config.dialect {
            Dialect::OpenAi => format!("{}/models", self.base()),
            Dialect::OllamaNative => format!("{}/api/tags", ollama_root(self.base())),
        };
        let failed = |message: String| self.failed(message);
        let mut request = self.agent.get(&url);
        if let Some(key) = &self.config.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = request
            .call()
            .map_err(|e| failed(self.transport_message(&url, &e)))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(16 * 1024 * 1024)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| failed(format!("reading the answer of {url} failed: {e}")))?;
        if status >= 400 {
            return Err(failed(status_message(&url, status, &text)));
        }
        let body: Value = serde_json::from_str(&text).map_err(|e| {
            failed(format!(
                "{url} did not answer with JSON ({e}): {}",
                cut(&text, 200)
            ))
        })?;
        Ok(model_names(&body))
    }

    fn base(&self) -> &str {
        self.config.base_url.trim().trim_end_matches('/')
    }

    fn kind(&self) -> &'static str {
        match self.config.dialect {
            Dialect::OpenAi => "openai",
            Dialect::OllamaNative => "ollama",
        }
    }

    fn failed(&self, message: String) -> Error {
        Error::LlmFailed {
            backend: format!("{} ({} at {})", self.kind(), self.config.model, self.base()),
            message,
        }
    }

    fn transport_message(&self, url: &str, error: &ureq::Error) -> String {
        match error {
            ureq::Error::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                format!("cannot connect to {url}: {e}; is the server running?")
            }
            ureq::Error::ConnectionFailed => {
                format!("cannot connect to {url}; is the server running?")
            }
            ureq::Error::HostNotFound => format!("cannot resolve the host of {url}"),
            ureq::Error::Timeout(t) => format!(
                "{url} did not answer within {} s ({t})",
                self.config.timeout.as_secs()
            ),
            other => format!("request to {url} failed: {other}"),
        }
    }

    /// One request: sends it, streams the answer into `collector`.
    fn attempt(
        &self,
        request: &ChatRequest,
        with_tools: bool,
        collector: &mut Collector<'_, '_>,
    ) -> std::result::Result<(), Failure> {
        // Once tools were refused, earlier tool turns are sent as text too: servers that cannot
        // call tools often cannot render `tool` messages either.
        let flatten = self.no_tools.load(Ordering::Relaxed);
        let (url, body) = match self.config.dialect {
            Dialect::OpenAi => (
                format!("{}/chat/completions", self.base()),
                openai_body(&self.config, request, with_tools, flatten),
            ),
            Dialect::OllamaNative => (
                format!("{}/api/chat", ollama_root(self.base())),
                ollama_body(&self.config.model, request, with_tools, flatten),
            ),
        };
        // ureq's `json` feature is off in this workspace: serialise here.
        let mut post = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            post = post.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = post
            .send(body.to_string())
            .map_err(|e| Failure::early(self.transport_message(&url, &e)))?;
        let status = response.status().as_u16();
        if status >= 400 {
            let text = response
                .body_mut()
                .with_config()
                .limit(MAX_ERROR_BODY)
                .lossy_utf8(true)
                .read_to_string()
                .unwrap_or_default();
            return Err(Failure::early(status_message(&url, status, &text)));
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let result = match self.config.dialect {
            Dialect::OpenAi => read_openai_stream(reader, collector),
            Dialect::OllamaNative => read_ollama_stream(reader, collector),
        };
        result.map_err(|message| Failure {
            message: format!("{url}: {message}"),
            output_started: collector.started(),
        })
    }
}

impl ChatBackend for OpenAiBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: self.kind(),
            model: self.config.model.clone(),
            location: self.base().to_string(),
            supports_tools: !self.no_tools.load(Ordering::Relaxed),
            // llama-server honours `grammar`; other OpenAI servers may ignore it, so a hint.
            supports_grammar: self.config.dialect == Dialect::OpenAi && self.config.grammar,
        }
    }

    fn chat(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<ChatResponse> {
        let started = Instant::now();
        let mut notices = Vec::new();
        let with_tools = !request.tools.is_empty() && !self.no_tools.load(Ordering::Relaxed);
        let mut collector = Collector::new(started, &request.cancel, on_event);
        let mut outcome = self.attempt(request, with_tools, &mut collector);
        if let Err(failure) = &outcome {
            if with_tools && !failure.output_started && is_tools_refusal(&failure.message) {
                self.no_tools.store(true, Ordering::Relaxed);
                let reason = failure
                    .message
                    .split_once(": ")
                    .map_or(failure.message.as_str(), |(_, r)| r);
                let notice = format!(
                    "{} model `{}` cannot call tools, answering without tools: {reason}",
                    self.kind(),
                    self.config.model
                );
                tracing::warn!("{notice}");
                (collector.on_event)(StreamEvent::Notice(&notice));
                notices.push(notice);
                collector.reset();
                outcome = self.attempt(request, false, &mut collector);
            }
        }
        outcome.map_err(|f| self.failed(f.message))?;
        let mut response = collector.finish();
        response.notices = notices;
        Ok(response)
    }
}

/// Whether a server's error message says it cannot take `tools`.
fn is_tools_refusal(message: &str) -> bool {
    let message = message.to_lowercase();
    TOOLS_REFUSALS.iter().any(|p| message.contains(p))
}

/// Ollama's root from a base URL that may end in `/v1` or `/api` (people paste either).
fn ollama_root(base: &str) -> &str {
    let base = base.trim_end_matches('/');
    base.strip_suffix("/v1")
        .or_else(|| base.strip_suffix("/api"))
        .unwrap_or(base)
        .trim_end_matches('/')
}

/// Model names from `/models` (`data[].id`) or `/api/tags` (`models[].name`).
fn model_names(body: &Value) -> Vec<String> {
    let list = body
        .get("data")
        .or_else(|| body.get("models"))
        .and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(|m| {
            ["id", "name", "model"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str))
                .or_else(|| m.as_str())
                .map(str::to_string)
        })
        .collect()
}

/// `"{url} answered {status}: {server's message}"`.
fn status_message(url: &str, status: u16, body: &str) -> String {
    let detail = parse_error_body(body);
    let hint = match status {
        401 | 403 => " (check the API key)",
        404 => " (check the base URL and the model name)",
        _ => "",
    };
    if detail.is_empty() {
        format!("{url} answered HTTP {status}{hint}")
    } else {
        format!("{url} answered HTTP {status}{hint}: {detail}")
    }
}

/// The message in an error body: `{"error":{"message":…}}`, `{"error":"…"}`,
/// `{"message":…}`, `{"detail":…}` or the text itself, on one line and cut to
/// [`MAX_ERROR_CHARS`].
fn parse_error_body(body: &str) -> String {
    let text = match serde_json::from_str::<Value>(body.trim()) {
        Ok(v) => error_value_message(&v).unwrap_or_else(|| body.to_string()),
        Err(_) => body.to_string(),
    };
    cut(
        &text.split_whitespace().collect::<Vec<_>>().join(" "),
        MAX_ERROR_CHARS,
    )
}

fn error_value_message(v: &Value) -> Option<String> {
    let error = v.get("error").unwrap_or(v);
    if let Some(s) = error.as_str() {
        return Some(s.to_string());
    }
    ["message", "detail", "msg"]
        .iter()
        .find_map(|k| error.get(*k))
        .map(|m| match m {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .or_else(|| v.get("error").map(Value::to_string))
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// JSON numbers for f32 settings without float noise (0.7, not 0.699999988079071).
fn round3(x: f32) -> f64 {
    (f64::from(x) * 1000.0).round() / 1000.0
}

fn tools_json(request: &ChatRequest) -> Value {
    Value::Array(
        request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect(),
    )
}

/// A tool turn as text, for servers that cannot take `tool` messages.
fn flattened(m: &ChatMessage) -> Option<(Role, String)> {
    match m.role {
        Role::Tool => {
            let name = m.name.as_deref().unwrap_or("tool");
            Some((Role::User, format!("Result of `{name}`:\n{}", m.content)))
        }
        Role::Assistant if !m.tool_calls.is_empty() => {
            let mut text = m.content.clone();
            for call in &m.tool_calls {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&format!("(called `{}` with {})", call.name, call.arguments));
            }
            Some((Role::Assistant, text))
        }
        _ => None,
    }
}

/// `m` in a server's form: as text when `flatten` asks for it and it is a tool turn, else
/// as `native` writes it, else as a plain role and content.
fn message_json(
    m: &ChatMessage,
    flatten: bool,
    native: fn(&ChatMessage) -> Option<Value>,
) -> Value {
    if flatten {
        if let Some((role, content)) = flattened(m) {
            return json!({"role": role.as_str(), "content": content});
        }
    }
    native(m).unwrap_or_else(|| json!({"role": m.role.as_str(), "content": m.content}))
}

/// What both bodies start with: the model, the messages in the server's form, and the tools
/// when they are sent.
fn body_start(
    model: &str,
    request: &ChatRequest,
    with_tools: bool,
    message: impl Fn(&ChatMessage) -> Value,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "messages".into(),
        request.messages.iter().map(message).collect(),
    );
    if with_tools && !request.tools.is_empty() {
        body.insert("tools".into(), tools_json(request));
    }
    body
}

fn openai_message(m: &ChatMessage, flatten: bool) -> Value {
    message_json(m, flatten, |m| match m.role {
        Role::Tool => Some(json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        })),
        Role::Assistant if !m.tool_calls.is_empty() => Some(json!({
            "role": "assistant",
            // OpenAI's documented form for a turn that only calls tools.
            "content": if m.content.is_empty() { Value::Null } else { Value::from(m.content.as_str()) },
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })).collect::<Vec<_>>(),
        })),
        _ => None,
    })
}

/// The `/chat/completions` body.
fn openai_body(
    config: &OpenAiConfig,
    request: &ChatRequest,
    with_tools: bool,
    flatten: bool,
) -> Value {
    let mut body = body_start(&config.model, request, with_tools, |m| {
        openai_message(m, flatten)
    });
    if with_tools && !request.tools.is_empty() && request.require_tool {
        body.insert("tool_choice".into(), "required".into());
    }
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("max_tokens".into(), request.max_tokens.into());
    body.insert("temperature".into(), round3(request.temperature).into());
    match &request.constraint {
        Some(Constraint::JsonSchema(schema)) => {
            body.insert(
                "response_format".into(),
                json!({
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "schema": schema, "strict": true},
                }),
            );
        }
        Some(Constraint::Grammar(grammar)) if config.grammar => {
            body.insert("grammar".into(), grammar.as_str().into());
        }
        Some(Constraint::Grammar(_)) => {}
        None => {}
    }
    Value::Object(body)
}

fn ollama_message(m: &ChatMessage, flatten: bool) -> Value {
    message_json(m, flatten, |m| match m.role {
        // Ollama reads `tool_name` (newer) or `name` (older); unknown fields are ignored.
        Role::Tool => Some(json!({
            "role": "tool",
            "content": m.content,
            "tool_name": m.name,
            "name": m.name,
        })),
        Role::Assistant if !m.tool_calls.is_empty() => Some(json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "function": {
                    "name": c.name,
                    // Ollama wants an object here, not JSON text.
                    "arguments": serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({})),
                },
            })).collect::<Vec<_>>(),
        })),
        _ => None,
    })
}

/// The `/api/chat` body. A grammar cannot be sent: Ollama has no such option.
fn ollama_body(model: &str, request: &ChatRequest, with_tools: bool, flatten: bool) -> Value {
    let mut body = body_start(model, request, with_tools, |m| ollama_message(m, flatten));
    body.insert("stream".into(), true.into());
    body.insert(
        "options".into(),
        json!({
            "num_predict": request.max_tokens,
            "temperature": round3(request.temperature),
        }),
    );
    if let Some(Constraint::JsonSchema(schema)) = &request.constraint {
        body.insert("format".into(), schema.clone());
    }
    Value::Object(body)
}

/// One line of a server-sent-event stream, as far as this client cares.
#[derive(Debug, PartialEq, Eq)]
enum SseLine<'a> {
    /// A `data:` payload.
    Data(&'a str),
    /// `data: [DONE]`: the end.
    Done,
    /// A comment, `event:`/`id:`/`retry:` field or blank line.
    Skip,
}

/// Parses one SSE line; `data:` may or may not be followed by a space, CR is ignored.
fn parse_sse_line(line: &str) -> SseLine<'_> {
    let line = line.trim_end_matches(['\r', '\n']);
    let Some(data) = line.strip_prefix("data:") else {
        return SseLine::Skip;
    };
    match data.trim() {
        "" => SseLine::Skip,
        "[DONE]" => SseLine::Done,
        data => SseLine::Data(data),
    }
}

/// An `error` a server put in its stream, in either dialect, ends the answer.
fn reported_error(chunk: &Value) -> std::result::Result<(), String> {
    match chunk.get("error").filter(|e| !e.is_null()) {
        Some(error) => Err(format!(
            "the server reported an error: {}",
            cut(
                &error_value_message(&json!({ "error": error })).unwrap_or_default(),
                MAX_ERROR_CHARS
            )
        )),
        None => Ok(()),
    }
}

/// Gathers a streamed answer and forwards its pieces to the caller.
struct Collector<'e, 'f> {
    started: Instant,
    on_event: &'e mut (dyn FnMut(StreamEvent<'_>) + 'f),
    content: String,
    tools: ToolCallAssembler,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    content_deltas: usize,
    /// Tool calls seen in an Ollama stream (each arrives whole, without an index).
    ollama_calls: usize,
    first_token_ms: Option<u64>,
    cancel: &'e Cancel,
}

impl<'e, 'f> Collector<'e, 'f> {
    fn new(
        started: Instant,
        cancel: &'e Cancel,
        on_event: &'e mut (dyn FnMut(StreamEvent<'_>) + 'f),
    ) -> Self {
        Collector {
            started,
            cancel,
            on_event,
            content: String::new(),
            tools: ToolCallAssembler::default(),
            finish_reason: None,
            usage: None,
            content_deltas: 0,
            ollama_calls: 0,
            first_token_ms: None,
        }
    }

    /// Forgets a failed attempt's state (nothing of it was streamed).
    fn reset(&mut self) {
        self.content.clear();
        self.tools = ToolCallAssembler::default();
        self.finish_reason = None;
        self.usage = None;
        self.content_deltas = 0;
        self.ollama_calls = 0;
        self.first_token_ms = None;
    }

    fn started(&self) -> bool {
        self.first_token_ms.is_some()
    }

    /// Whether the caller stopped the answer: the stream is dropped (which closes the
    /// connection, and the server stops) and what came so far is the answer.
    fn stopped(&mut self) -> bool {
        let stopped = self.cancel.is_cancelled();
        if stopped {
            self.finish_reason = Some(CANCELLED.into());
        }
        stopped
    }

    fn mark_first(&mut self) {
        if self.first_token_ms.is_none() {
            self.first_token_ms = Some(self.started.elapsed().as_millis() as u64);
        }
    }

    fn token(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.mark_first();
        self.content.push_str(text);
        self.content_deltas += 1;
        (self.on_event)(StreamEvent::Token(text));
    }

    fn tool_delta(&mut self, index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) {
        self.mark_first();
        self.tools.push(index, id, name, arguments);
        (self.on_event)(StreamEvent::ToolCallDelta {
            index,
            name,
            arguments,
        });
    }

    /// One chunk of an OpenAI stream, or a whole non-streamed reply (`message` for `delta`).
    fn openai_chunk(&mut self, chunk: &Value) -> std::result::Result<(), String> {
        reported_error(chunk)?;
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
            self.usage = Some(Usage {
                prompt_tokens: count("prompt_tokens"),
                completion_tokens: count("completion_tokens"),
                cached_prompt_tokens: 0,
            });
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        // Only the first choice: we never ask for more than one.
        let Some(choice) = choices.and_then(|c| {
            c.iter()
                .find(|ch| ch.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(());
        };
        let delta = choice
            .get("delta")
            .filter(|d| d.is_object())
            .or_else(|| choice.get("message"));
        if let Some(delta) = delta {
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.token(text);
            }
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for (position, call) in calls.into_iter().flatten().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(position, |i| i as usize);
                let id = call.get("id").and_then(Value::as_str);
                let function = call.get("function");
                let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
                let arguments = arguments_text(function.and_then(|f| f.get("arguments")));
                if id.is_some() || name.is_some() || !arguments.is_empty() {
                    self.tool_delta(index, id, name, &arguments);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(())
    }

    /// One line of an Ollama stream; true when it is the last.
    fn ollama_chunk(&mut self, chunk: &Value) -> std::result::Result<bool, String> {
        reported_error(chunk)?;
        if let Some(message) = chunk.get("message") {
            if let Some(text) = message.get("content").and_then(Value::as_str) {
                self.token(text);
            }
            let calls = message.get("tool_calls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                let function = call.get("function");
                let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
                else {
                    continue;
                };
                let arguments = arguments_text(function.and_then(|f| f.get("arguments")));
                let id = call.get("id").and_then(Value::as_str);
                let index = self.ollama_calls;
                self.ollama_calls += 1;
                self.tool_delta(index, id, Some(name), &arguments);
            }
        }
        let done = chunk.get("done").and_then(Value::as_bool).unwrap_or(false);
        if done {
            let count = |k: &str| chunk.get(k).and_then(Value::as_u64);
            if let (Some(p), Some(c)) = (count("prompt_eval_count"), count("eval_count")) {
                self.usage = Some(Usage {
                    prompt_tokens: p as usize,
                    completion_tokens: c as usize,
                    cached_prompt_tokens: 0,
                });
            }
            if let Some(reason) = chunk.get("done_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(done)
    }

    fn finish(self) -> ChatResponse {
        let tool_calls = self.tools.finish();
        let mut finish_reason = self.finish_reason.unwrap_or_default();
        // Some servers say `stop` after tool calls; the caller branches on `tool_calls`.
        if !tool_calls.is_empty() && (finish_reason.is_empty() || finish_reason == "stop") {
            finish_reason = "tool_calls".into();
        } else if finish_reason.is_empty() {
            finish_reason = "stop".into();
        }
        ChatResponse {
            content: self.content,
            tool_calls,
            finish_reason,
            usage: self.usage.unwrap_or(Usage {
                prompt_tokens: 0,
                completion_tokens: self.content_deltas,
                cached_prompt_tokens: 0,
            }),
            first_token_ms: self.first_token_ms,
            total_ms: self.started.elapsed().as_millis() as u64,
            notices: Vec::new(),
        }
    }
}

/// Tool-call arguments as JSON text: most servers send a string, some an object.
fn arguments_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> std::result::Result<bool, String> {
    buf.clear();
    match reader.read_until(b'\n', buf) {
        Ok(n) => Ok(n > 0),
        Err(e) => Err(format!("the stream broke off: {e}")),
    }
}

/// Reads an OpenAI answer: server-sent events, or one JSON object when the server ignored
/// `stream` (told apart by the first non-blank line).
fn read_openai_stream(
    mut reader: impl BufRead,
    collector: &mut Collector<'_, '_>,
) -> std::result::Result<(), String> {
    let mut buf = Vec::new();
    let mut plain_json: Option<String> = None;
    let mut first = true;
    while !collector.stopped() && read_line(&mut reader, &mut buf)? {
        // Lines split on `\n` never cut a UTF-8 sequence.
        let line = String::from_utf8_lossy(&buf);
        if let Some(json) = &mut plain_json {
            json.push_str(&line);
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if std::mem::take(&mut first) && trimmed.starts_with('{') {
            plain_json = Some(line.into_owned());
            continue;
        }
        match parse_sse_line(trimmed) {
            SseLine::Data(data) => {
                let chunk: Value = serde_json::from_str(data).map_err(|e| {
                    format!(
                        "the server sent an event that is not JSON ({e}): {}",
                        cut(data, 200)
                    )
                })?;
                collector.openai_chunk(&chunk)?;
            }
            SseLine::Done => return Ok(()),
            SseLine::Skip => {}
        }
    }
    if let Some(text) = plain_json {
        let reply: Value = serde_json::from_str(text.trim()).map_err(|e| {
            format!(
                "the server's answer is neither events nor JSON ({e}): {}",
                cut(&text, 200)
            )
        })?;
        collector.openai_chunk(&reply)?;
    }
    Ok(())
}

/// Reads an Ollama answer: one JSON object a line, the last with `done: true`.
fn read_ollama_stream(
    mut reader: impl BufRead,
    collector: &mut Collector<'_, '_>,
) -> std::result::Result<(), String> {
    let mut buf = Vec::new();
    while !collector.stopped() && read_line(&mut reader, &mut buf)? {
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let chunk: Value = serde_json::from_str(line).map_err(|e| {
            format!(
                "the server sent a line that is not JSON ({e}): {}",
                cut(line, 200)
            )
        })?;
        if collector.ollama_chunk(&chunk)? {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(
        read: impl FnOnce(&mut Collector<'_, '_>) -> std::result::Result<(), String>,
    ) -> (std::result::Result<ChatResponse, String>, Vec<String>) {
        let mut events = Vec::new();
        let mut on_event = |e: StreamEvent<'_>| events.push(format!("{e:?}"));
        let cancel = Cancel::new();
        let mut collector = Collector::new(Instant::now(), &cancel, &mut on_event);
        let result = read(&mut collector).map(|()| collector.finish());
        (result, events)
    }

    #[test]
    fn sse_lines_are_read_leniently() {
        assert_eq!(
            parse_sse_line("data: {\"a\":1}"),
            SseLine::Data("{\"a\":1}")
        );
        assert_eq!(
            parse_sse_line("data:{\"a\":1}\r\n"),
            SseLine::Data("{\"a\":1}")
        );
        assert_eq!(parse_sse_line("data: [DONE]\r"), SseLine::Done);
        assert_eq!(parse_sse_line("data:[DONE]"), SseLine::Done);
        assert_eq!(parse_sse_line(": keep-alive"), SseLine::Skip);
        assert_eq!(parse_sse_line("event: message"), SseLine::Skip);
        assert_eq!(parse_sse_line(""), SseLine::Skip);
        assert_eq!(parse_sse_line("data: "), SseLine::Skip);
    }

    #[test]
    fn error_bodies_give_the_servers_message() {
        assert_eq!(
            parse_error_body(
                r#"{"error":{"code":400,"message":"tools param requires --jinja flag","type":"invalid_request_error"}}"#
            ),
            "tools param requires --jinja flag"
        );
        assert_eq!(
            parse_error_body(r#"{"error":"model \"x\" not found, try pulling it first"}"#),
            "model \"x\" not found, try pulling it first"
        );
        assert_eq!(parse_error_body(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(parse_error_body("Bad Gateway\n\n"), "Bad Gateway");
        assert_eq!(parse_error_body(""), "");
        let long = parse_error_body(&"é".repeat(1000));
        assert_eq!(long.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn tool_refusals_are_recognised_in_any_case() {
        assert!(is_tools_refusal(
            "x answered HTTP 400: tools param requires --jinja flag"
        ));
        assert!(is_tools_refusal(
            "registry.ollama.ai/library/gemma:2b does not support tools"
        ));
        assert!(is_tools_refusal("Tool use is not supported for this model"));
        assert!(!is_tools_refusal("the model is not loaded"));
    }

    #[test]
    fn ollama_root_drops_api_suffixes() {
        assert_eq!(ollama_root("http://h:11434"), "http://h:11434");
        assert_eq!(ollama_root("http://h:11434/v1/"), "http://h:11434");
        assert_eq!(ollama_root("http://h:11434/api"), "http://h:11434");
    }

    #[test]
    fn stream_chunks_build_content_calls_and_usage() {
        let body = concat!(
            ": comment\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\"}}]}}]}\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":{\"q\":1}}}]},\"finish_reason\":\"stop\"}]}\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n",
            "data: [DONE]\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ignored\"}}]}\n",
        );
        let (result, events) = collect(|c| read_openai_stream(body.as_bytes(), c));
        let response = result.unwrap();
        assert_eq!(response.content, "Hello");
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].arguments, "{\"q\":1}");
        assert_eq!(response.finish_reason, "tool_calls");
        assert_eq!(response.usage.prompt_tokens, 7);
        assert_eq!(events.len(), 4);
    }

    #[test]
    fn a_plain_json_reply_is_accepted() {
        let body = "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\n\"content\":\"Hi\"},\"finish_reason\":\"length\"}]}";
        let (result, _) = collect(|c| read_openai_stream(body.as_bytes(), c));
        let response = result.unwrap();
        assert_eq!(response.content, "Hi");
        assert_eq!(response.finish_reason, "length");
        assert_eq!(response.usage.completion_tokens, 1);
    }

    #[test]
    fn an_error_event_fails_the_stream() {
        let body = "data: {\"error\":{\"message\":\"context too long\"}}\n";
        let (result, _) = collect(|c| read_openai_stream(body.as_bytes(), c));
        assert!(result.unwrap_err().contains("context too long"));
    }

    #[test]
    fn tool_turns_flatten_to_text() {
        let call = crate::llm::ToolCall {
            id: "c1".into(),
            name: "knowledge_search".into(),
            arguments: "{\"query\":\"x\"}".into(),
        };
        let mut assistant = ChatMessage::assistant("");
        assistant.tool_calls.push(call.clone());
        let result = ChatMessage::tool_result(&call, "found");
        let a = openai_message(&assistant, true);
        assert_eq!(a["role"], "assistant");
        assert!(a["content"].as_str().unwrap().contains("knowledge_search"));
        assert!(a.get("tool_calls").is_none());
        let t = openai_message(&result, true);
        assert_eq!(t["role"], "user");
        assert!(t["content"].as_str().unwrap().contains("found"));
        let o = ollama_message(&assistant, false);
        assert_eq!(o["tool_calls"][0]["function"]["arguments"]["query"], "x");
    }
}
