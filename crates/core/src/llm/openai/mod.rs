//! OpenAI-compatible HTTP backends (and Ollama's native `/api/chat`).
//!
//! This file holds the backend and its configuration and errors; `request.rs` writes the
//! request bodies of both dialects, `stream.rs` reads their streamed answers.
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

use std::io::BufReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{BackendInfo, ChatBackend, ChatRequest, ChatResponse, StreamEvent};
use crate::{Error, Result};

mod embeddings;
mod request;
mod stream;

pub use embeddings::{EmbeddingsAnswer, EmbeddingsFailure};

use request::{ollama_body, openai_body};
use stream::{read_ollama_stream, read_openai_stream, Collector};

/// How long to wait for a connection, the response head or the next piece of a stream, unless
/// configured otherwise. Generous: a CPU server may read a long prompt before it answers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Error bodies are read up to this size; longer ones are cut (they are shown cut anyway).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// Server error messages are cut to this many characters before they reach the user.
pub(super) const MAX_ERROR_CHARS: usize = 300;

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
    /// Send [`Constraint::Grammar`](super::Constraint::Grammar) as a `grammar` field (llama.cpp's server honours it; other
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

    /// POSTs `body` to `url`, with the API key when there is one.
    fn post_json(
        &self,
        url: &str,
        body: &Value,
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        // ureq's `json` feature is off in this workspace: serialise here.
        let mut post = self
            .agent
            .post(url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            post = post.header("Authorization", format!("Bearer {key}"));
        }
        post.send(body.to_string())
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
        let mut response = self
            .post_json(&url, &body)
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
            device: None,
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

pub(super) fn error_value_message(v: &Value) -> Option<String> {
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
pub(super) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// JSON numbers for f32 settings without float noise (0.7, not 0.699999988079071).
pub(super) fn round3(x: f32) -> f64 {
    (f64::from(x) * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
