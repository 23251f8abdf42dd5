//! Reading streamed answers: OpenAI-style server-sent events (leniently: servers differ in
//! the details) and Ollama's newline-delimited JSON, both into one [`Collector`] that emits
//! tokens and assembles tool calls and usage.

use std::io::BufRead;
use std::time::Instant;

use serde_json::{json, Value};

use super::super::{Cancel, ChatResponse, StreamEvent, ToolCallAssembler, Usage, CANCELLED};
use super::{cut, error_value_message, MAX_ERROR_CHARS};

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
pub(super) struct Collector<'e, 'f> {
    pub(super) started: Instant,
    pub(super) on_event: &'e mut (dyn FnMut(StreamEvent<'_>) + 'f),
    pub(super) content: String,
    pub(super) tools: ToolCallAssembler,
    pub(super) finish_reason: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) content_deltas: usize,
    /// Tool calls seen in an Ollama stream (each arrives whole, without an index).
    pub(super) ollama_calls: usize,
    pub(super) first_token_ms: Option<u64>,
    pub(super) cancel: &'e Cancel,
}

impl<'e, 'f> Collector<'e, 'f> {
    pub(super) fn new(
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
    pub(super) fn reset(&mut self) {
        self.content.clear();
        self.tools = ToolCallAssembler::default();
        self.finish_reason = None;
        self.usage = None;
        self.content_deltas = 0;
        self.ollama_calls = 0;
        self.first_token_ms = None;
    }

    pub(super) fn started(&self) -> bool {
        self.first_token_ms.is_some()
    }

    /// Whether the caller stopped the answer: the stream is dropped (which closes the
    /// connection, and the server stops) and what came so far is the answer.
    pub(super) fn stopped(&mut self) -> bool {
        let stopped = self.cancel.is_cancelled();
        if stopped {
            self.finish_reason = Some(CANCELLED.into());
        }
        stopped
    }

    pub(super) fn mark_first(&mut self) {
        if self.first_token_ms.is_none() {
            self.first_token_ms = Some(self.started.elapsed().as_millis() as u64);
        }
    }

    pub(super) fn token(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.mark_first();
        self.content.push_str(text);
        self.content_deltas += 1;
        (self.on_event)(StreamEvent::Token(text));
    }

    pub(super) fn tool_delta(
        &mut self,
        index: usize,
        id: Option<&str>,
        name: Option<&str>,
        arguments: &str,
    ) {
        self.mark_first();
        self.tools.push(index, id, name, arguments);
        (self.on_event)(StreamEvent::ToolCallDelta {
            index,
            name,
            arguments,
        });
    }

    /// One chunk of an OpenAI stream, or a whole non-streamed reply (`message` for `delta`).
    pub(super) fn openai_chunk(&mut self, chunk: &Value) -> std::result::Result<(), String> {
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
    pub(super) fn ollama_chunk(&mut self, chunk: &Value) -> std::result::Result<bool, String> {
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

    pub(super) fn finish(self) -> ChatResponse {
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
            threads: None,
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
pub(super) fn read_openai_stream(
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
pub(super) fn read_ollama_stream(
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
}
