//! The HTTP LLM backends: recorded streams replayed by a loopback server, then a real
//! llama-server (built by `scripts/llama-server.sh`) running SmolLM2.

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quarry_core::llm::openai::{Dialect, OpenAiBackend, OpenAiConfig};
use quarry_core::llm::{
    ChatBackend, ChatMessage, ChatRequest, ChatResponse, Constraint, StreamEvent, ToolCall,
    ToolSpec,
};
use quarry_core::Error;
use serde_json::{json, Value};

use common::http;

// ---------------------------------------------------------------------------------------------
// A loopback server replaying canned answers
// ---------------------------------------------------------------------------------------------

/// One request as the server saw it, its body read as JSON.
#[derive(Debug, Clone)]
struct Recorded {
    request: http::Request,
    body: Value,
}

impl std::ops::Deref for Recorded {
    type Target = http::Request;
    fn deref(&self) -> &http::Request {
        &self.request
    }
}

/// A canned answer; `chunks` are sent as separate HTTP chunks, as a streaming server would.
struct Canned {
    status: u16,
    content_type: &'static str,
    chunks: Vec<String>,
}

fn sse(events: &[&str]) -> Canned {
    Canned {
        status: 200,
        content_type: "text/event-stream",
        chunks: events.iter().map(|e| format!("data: {e}\n\n")).collect(),
    }
}

fn raw(status: u16, content_type: &'static str, body: &str) -> Canned {
    Canned {
        status,
        content_type,
        chunks: vec![body.to_string()],
    }
}

fn ndjson(lines: &[Value]) -> Canned {
    Canned {
        status: 200,
        content_type: "application/x-ndjson",
        chunks: lines.iter().map(|l| format!("{l}\n")).collect(),
    }
}

/// Answers one connection per canned answer, in order, and records each request.
struct MockServer {
    origin: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl MockServer {
    fn start(answers: Vec<Canned>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        // Detached: a failing test must not hang on a join while the server waits.
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                if let Some(request) = read_request(&stream) {
                    seen.lock().unwrap().push(request);
                }
                let _ = write_answer(stream, &answer);
            }
        });
        MockServer { origin, requests }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    fn openai(&self) -> OpenAiBackend {
        OpenAiBackend::new(OpenAiConfig::openai(
            format!("{}/v1", self.origin),
            "test-model",
        ))
        .unwrap()
    }

    fn ollama(&self) -> OpenAiBackend {
        OpenAiBackend::new(OpenAiConfig::ollama(&self.origin, "llama3.2")).unwrap()
    }
}

fn read_request(stream: &TcpStream) -> Option<Recorded> {
    let request = http::read_request(stream)?;
    let body = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    Some(Recorded { request, body })
}

fn write_answer(mut stream: TcpStream, answer: &Canned) -> std::io::Result<()> {
    let reason = match answer.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Error",
    };
    write!(
        stream,
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        answer.status, answer.content_type
    )?;
    for chunk in &answer.chunks {
        write!(stream, "{:x}\r\n{chunk}\r\n", chunk.len())?;
        stream.flush()?;
    }
    write!(stream, "0\r\n\r\n")?;
    stream.flush()
}

/// Events as comparable strings: `T:text`, `C<i>:name|args`, `N:notice`.
fn chat(backend: &OpenAiBackend, request: &ChatRequest) -> (ChatResponse, Vec<String>) {
    let mut events = Vec::new();
    let response = backend
        .chat(request, &mut |e| {
            events.push(match e {
                StreamEvent::Token(t) => format!("T:{t}"),
                StreamEvent::ToolCallDelta {
                    index,
                    name,
                    arguments,
                } => format!("C{index}:{}|{arguments}", name.unwrap_or("")),
                StreamEvent::Notice(n) => format!("N:{n}"),
            })
        })
        .unwrap_or_else(|e| panic!("chat failed: {e}"));
    (response, events)
}

fn chat_error(backend: &OpenAiBackend, request: &ChatRequest) -> String {
    match backend.chat(request, &mut |_| {}) {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e @ Error::LlmFailed { .. }) => e.to_string(),
        Err(e) => panic!("expected LlmFailed, got {e:?}"),
    }
}

fn search_tool() -> ToolSpec {
    ToolSpec {
        name: "knowledge_search".into(),
        description: "Searches the knowledge base.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for"}},
            "required": ["query"],
        }),
    }
}

fn delta(d: Value) -> String {
    json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]}).to_string()
}

fn finish(reason: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
}

fn tool_frag(index: usize, id: Option<&str>, name: Option<&str>, args: Option<&str>) -> String {
    let mut call = json!({"index": index, "function": {}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["type"] = "function".into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    if let Some(args) = args {
        call["function"]["arguments"] = args.into();
    }
    delta(json!({"tool_calls": [call]}))
}

/// A conversation that already went through one tool round.
fn history_with_tool_round() -> Vec<ChatMessage> {
    let call = ToolCall {
        id: "call_7".into(),
        name: "knowledge_search".into(),
        arguments: r#"{"query":"pump pressure"}"#.into(),
    };
    let mut assistant = ChatMessage::assistant("");
    assistant.tool_calls.push(call.clone());
    vec![
        ChatMessage::system("You answer from the knowledge base."),
        ChatMessage::user("What pressure does the pump need?"),
        assistant,
        ChatMessage::tool_result(&call, "[1] The pump runs at 4 bar."),
    ]
}

// ---------------------------------------------------------------------------------------------
// Recorded streams
// ---------------------------------------------------------------------------------------------

#[test]
fn a_plain_answer_streams_tokens_in_order_and_reads_usage() {
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}});
    let server = MockServer::start(vec![sse(&[
        &delta(json!({"role": "assistant", "content": ""})),
        &delta(json!({"content": "The"})),
        &delta(json!({"content": " answer"})),
        &delta(json!({"content": " is"})),
        &delta(json!({"content": " 42."})),
        &finish("stop"),
        &usage.to_string(),
        "[DONE]",
    ])]);
    let backend = server.openai();
    let (response, events) = chat(
        &backend,
        &ChatRequest::new(vec![ChatMessage::user("Answer?")]),
    );
    assert_eq!(events, ["T:The", "T: answer", "T: is", "T: 42."]);
    assert_eq!(response.content, "The answer is 42.");
    assert_eq!(response.finish_reason, "stop");
    assert_eq!(response.usage.prompt_tokens, 12);
    assert_eq!(response.usage.completion_tokens, 4);
    assert!(response.first_token_ms.is_some());
    assert!(response.tool_calls.is_empty() && response.notices.is_empty());

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    let body = &requests[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["temperature"], 0.0);
    assert!(body.get("tools").is_none(), "no tools were offered: {body}");
    assert_eq!(requests[0].header("authorization"), None);
}

#[test]
fn tool_call_fragments_interleaved_by_index_are_joined() {
    let server = MockServer::start(vec![sse(&[
        &tool_frag(0, Some("call_a"), Some("knowledge_search"), None),
        &tool_frag(0, None, None, Some("{\"qu")),
        &tool_frag(1, Some("call_b"), Some("knowledge_search"), Some("")),
        &tool_frag(0, None, None, Some("ery\": \"pu")),
        &tool_frag(1, None, None, Some("{\"query\"")),
        &tool_frag(1, None, None, Some(": \"valves\"}")),
        &tool_frag(0, None, None, Some("mps\"")),
        &tool_frag(0, None, None, Some("}")),
        &finish("tool_calls"),
        "[DONE]",
    ])]);
    let backend = server.openai();
    let mut request = ChatRequest::new(vec![ChatMessage::user("Pumps and valves?")]);
    request.tools = vec![search_tool()];
    let (response, events) = chat(&backend, &request);

    assert_eq!(response.finish_reason, "tool_calls");
    assert_eq!(response.tool_calls.len(), 2);
    let a = &response.tool_calls[0];
    assert_eq!(
        (a.id.as_str(), a.name.as_str()),
        ("call_a", "knowledge_search")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&a.arguments).unwrap(),
        json!({"query": "pumps"})
    );
    let b = &response.tool_calls[1];
    assert_eq!(b.id, "call_b");
    assert_eq!(
        serde_json::from_str::<Value>(&b.arguments).unwrap(),
        json!({"query": "valves"})
    );
    assert_eq!(events.len(), 8);
    assert_eq!(events[0], "C0:knowledge_search|");
    assert_eq!(events[3], "C0:|ery\": \"pu");
    // No content deltas and no usage chunk: the count is of content deltas.
    assert_eq!(response.usage.completion_tokens, 0);
    assert_eq!(response.content, "");
}

#[test]
fn arguments_sent_as_an_object_are_accepted() {
    let call = json!({"index": 0, "id": "c1", "type": "function",
        "function": {"name": "knowledge_search", "arguments": {"query": "boilers", "k": 3}}});
    let server = MockServer::start(vec![sse(&[
        &delta(json!({"tool_calls": [call]})),
        &finish("stop"),
        "[DONE]",
    ])]);
    let mut request = ChatRequest::new(vec![ChatMessage::user("Boilers?")]);
    request.tools = vec![search_tool()];
    let (response, _) = chat(&server.openai(), &request);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&response.tool_calls[0].arguments).unwrap(),
        json!({"query": "boilers", "k": 3})
    );
    // A server that says `stop` after calling tools still reads as a tool turn.
    assert_eq!(response.finish_reason, "tool_calls");
}

#[test]
fn data_without_a_space_comments_and_crlf_are_tolerated() {
    let body = format!(
        ": ping\r\n\r\nevent: message\r\ndata:{}\r\n\r\n: another comment\r\ndata:{}\r\n\r\nid: 3\r\ndata:{}\r\n\r\ndata:[DONE]\r\n\r\n",
        delta(json!({"content": "Hello"})),
        delta(json!({"content": ", world"})),
        finish("length"),
    );
    let server = MockServer::start(vec![raw(200, "text/event-stream", &body)]);
    let (response, events) = chat(
        &server.openai(),
        &ChatRequest::new(vec![ChatMessage::user("Hi")]),
    );
    assert_eq!(events, ["T:Hello", "T:, world"]);
    assert_eq!(response.content, "Hello, world");
    assert_eq!(response.finish_reason, "length");
    assert_eq!(response.usage.completion_tokens, 2);
}

#[test]
fn a_non_streaming_reply_is_accepted() {
    let body = json!({
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Four bar."}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3},
    });
    let server = MockServer::start(vec![raw(200, "application/json", &body.to_string())]);
    let (response, events) = chat(
        &server.openai(),
        &ChatRequest::new(vec![ChatMessage::user("Pressure?")]),
    );
    assert_eq!(events, ["T:Four bar."]);
    assert_eq!(response.content, "Four bar.");
    assert_eq!(response.usage.completion_tokens, 3);
}

#[test]
fn a_jinja_refusal_falls_back_to_no_tools_and_stays_there() {
    let refusal = json!({"error": {"code": 400, "message": "tools param requires --jinja flag",
        "type": "invalid_request_error"}});
    let server = MockServer::start(vec![
        raw(400, "application/json", &refusal.to_string()),
        sse(&[&delta(json!({"content": "Four bar."})), "[DONE]"]),
        sse(&[&delta(json!({"content": "Again."})), "[DONE]"]),
    ]);
    let backend = server.openai();
    assert!(backend.info().supports_tools);
    let mut request = ChatRequest::new(history_with_tool_round());
    request.tools = vec![search_tool()];

    let (response, events) = chat(&backend, &request);
    assert_eq!(response.content, "Four bar.");
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].starts_with("N:") && events[0].contains("without tools"));
    assert!(events[0].contains("tools param requires --jinja flag"));
    assert_eq!(response.notices.len(), 1);
    assert_eq!(events[0], format!("N:{}", response.notices[0]));
    assert!(!backend.info().supports_tools);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].body["tools"].is_array());
    assert!(requests[1].body.get("tools").is_none());
    // The retry sends the tool round as plain text.
    let retried = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(retried.len(), 4);
    assert!(retried.iter().all(|m| m["role"] != "tool"));
    assert!(retried.iter().all(|m| m.get("tool_calls").is_none()));
    assert_eq!(retried[3]["role"], "user");
    assert!(retried[3]["content"]
        .as_str()
        .unwrap()
        .contains("The pump runs at 4 bar."));
    assert!(retried[2]["content"]
        .as_str()
        .unwrap()
        .contains("knowledge_search"));

    // The next call goes straight to the no-tools form, without a second notice.
    let (response, events) = chat(&backend, &request);
    assert_eq!(response.content, "Again.");
    assert_eq!(events, ["T:Again."]);
    assert!(response.notices.is_empty());
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].body.get("tools").is_none());
}

#[test]
fn ollama_model_without_tools_falls_back_through_the_native_api() {
    let refusal = json!({"error": "registry.ollama.ai/library/gemma:2b does not support tools"});
    let server = MockServer::start(vec![
        raw(400, "application/json; charset=utf-8", &refusal.to_string()),
        ndjson(&[
            json!({"model": "gemma:2b", "message": {"role": "assistant", "content": "Four"}, "done": false}),
            json!({"model": "gemma:2b", "message": {"role": "assistant", "content": " bar."}, "done": false}),
            json!({"model": "gemma:2b", "message": {"role": "assistant", "content": ""}, "done": true,
                "done_reason": "stop", "prompt_eval_count": 31, "eval_count": 3}),
        ]),
    ]);
    let backend = server.ollama();
    let mut request = ChatRequest::new(history_with_tool_round());
    request.tools = vec![search_tool()];
    let (response, events) = chat(&backend, &request);
    assert_eq!(response.content, "Four bar.");
    assert_eq!(response.notices.len(), 1);
    assert!(response.notices[0].contains("does not support tools"));
    assert_eq!(events[0], format!("N:{}", response.notices[0]));
    assert_eq!(&events[1..], ["T:Four", "T: bar."]);
    assert_eq!(response.usage.prompt_tokens, 31);
    assert_eq!(response.usage.completion_tokens, 3);
    assert!(!backend.info().supports_tools);
    assert_eq!(backend.info().kind, "ollama");
    assert!(!backend.info().supports_grammar);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/api/chat"));
    assert!(requests[0].body["tools"].is_array());
    assert!(requests[1].body.get("tools").is_none());
    let retried = requests[1].body["messages"].as_array().unwrap();
    assert!(retried.iter().all(|m| m["role"] != "tool"));
}

#[test]
fn ollama_native_stream_with_a_tool_call() {
    let server = MockServer::start(vec![ndjson(&[
        json!({"model": "llama3.2", "message": {"role": "assistant", "content": "Let me look."}, "done": false}),
        json!({"model": "llama3.2", "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "knowledge_search", "arguments": {"query": "pump"}}}]},
            "done": false}),
        json!({"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done": true,
            "done_reason": "stop", "prompt_eval_count": 80, "eval_count": 21}),
    ])]);
    let backend = server.ollama();
    let mut request = ChatRequest::new(history_with_tool_round());
    request.tools = vec![search_tool()];
    request.max_tokens = 64;
    request.temperature = 0.7;
    request.constraint = Some(Constraint::JsonSchema(json!({"type": "object"})));
    let (response, events) = chat(&backend, &request);
    assert_eq!(response.content, "Let me look.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "knowledge_search");
    assert_eq!(
        serde_json::from_str::<Value>(&response.tool_calls[0].arguments).unwrap(),
        json!({"query": "pump"})
    );
    assert_eq!(response.finish_reason, "tool_calls");
    assert_eq!(response.usage.completion_tokens, 21);
    assert_eq!(
        events,
        ["T:Let me look.", "C0:knowledge_search|{\"query\":\"pump\"}"]
    );

    let requests = server.requests();
    let body = &requests[0].body;
    assert_eq!(requests[0].path, "/api/chat");
    assert_eq!(body["model"], "llama3.2");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["options"],
        json!({"num_predict": 64, "temperature": 0.7})
    );
    assert_eq!(body["format"], json!({"type": "object"}));
    assert_eq!(body["tools"][0]["function"]["name"], "knowledge_search");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        json!({"query": "pump pressure"})
    );
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_name"], "knowledge_search");
    assert_eq!(messages[3]["content"], "[1] The pump runs at 4 bar.");
}

#[test]
fn an_unauthorized_answer_surfaces_the_servers_message() {
    let body = json!({"error": {"message": "Incorrect API key provided: sk-wrong.",
        "type": "invalid_request_error", "code": "invalid_api_key"}});
    let server = MockServer::start(vec![raw(401, "application/json", &body.to_string())]);
    let backend = OpenAiBackend::new(
        OpenAiConfig::openai(format!("{}/v1", server.origin), "gpt-4o-mini")
            .with_api_key("sk-wrong"),
    )
    .unwrap();
    let mut request = ChatRequest::new(vec![ChatMessage::user("Hi")]);
    request.tools = vec![search_tool()];
    let message = chat_error(&backend, &request);
    assert!(message.contains("401"), "{message}");
    assert!(message.contains("Incorrect API key provided"), "{message}");
    // Not a tools refusal: the backend keeps offering tools.
    assert!(backend.info().supports_tools);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_connection_names_the_url() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let backend = OpenAiBackend::new(
        OpenAiConfig::openai(format!("http://127.0.0.1:{port}/v1"), "m")
            .with_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let message = chat_error(&backend, &ChatRequest::new(vec![ChatMessage::user("Hi")]));
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions")),
        "{message}"
    );
    assert!(message.contains("cannot connect"), "{message}");
    let listed = backend.list_models().unwrap_err().to_string();
    assert!(
        listed.contains(&format!("http://127.0.0.1:{port}/v1/models")),
        "{listed}"
    );
}

#[test]
fn a_base_url_that_is_not_http_is_refused() {
    let err = OpenAiBackend::new(OpenAiConfig::openai("localhost:8080/v1", "m"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("base_url"), "{err}");
}

#[test]
fn list_models_from_an_openai_server() {
    let body = json!({"object": "list", "data": [
        {"id": "smollm2", "object": "model", "owned_by": "llamacpp"},
        {"id": "qwen2.5-0.5b", "object": "model"},
    ]});
    let server = MockServer::start(vec![raw(200, "application/json", &body.to_string())]);
    let backend = OpenAiBackend::new(
        OpenAiConfig::openai(format!("{}/v1/", server.origin), "smollm2").with_api_key("k"),
    )
    .unwrap();
    assert_eq!(backend.list_models().unwrap(), ["smollm2", "qwen2.5-0.5b"]);
    let requests = server.requests();
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].path, "/v1/models");
    assert_eq!(requests[0].header("authorization"), Some("Bearer k"));
}

#[test]
fn list_models_from_ollama() {
    let body = json!({"models": [
        {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189},
        {"name": "gemma:2b", "model": "gemma:2b"},
    ]});
    let server = MockServer::start(vec![raw(200, "application/json", &body.to_string())]);
    // A pasted `/v1` suffix is forgiven.
    let backend =
        OpenAiBackend::new(OpenAiConfig::ollama(format!("{}/v1", server.origin), "x")).unwrap();
    assert_eq!(
        backend.list_models().unwrap(),
        ["llama3.2:latest", "gemma:2b"]
    );
    assert_eq!(server.requests()[0].path, "/api/tags");
}

#[test]
fn the_request_body_has_the_openai_shape() {
    let server = MockServer::start(vec![
        sse(&[&delta(json!({"content": "ok"})), "[DONE]"]),
        sse(&[&delta(json!({"content": "ok"})), "[DONE]"]),
    ]);
    let backend = OpenAiBackend::new(OpenAiConfig {
        base_url: format!("{}/v1", server.origin),
        model: "local".into(),
        api_key: Some("secret-key".into()),
        dialect: Dialect::OpenAi,
        timeout: Duration::from_secs(30),
        grammar: true,
    })
    .unwrap();
    let mut request = ChatRequest::new(history_with_tool_round());
    request.tools = vec![search_tool()];
    request.max_tokens = 100;
    request.temperature = 0.2;
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    request.constraint = Some(Constraint::JsonSchema(schema.clone()));
    request.require_tool = true;
    chat(&backend, &request);
    request.tools.clear();
    request.constraint = Some(Constraint::Grammar("root ::= \"yes\" | \"no\"".into()));
    chat(&backend, &request);

    let requests = server.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer secret-key")
    );
    assert!(requests[0]
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let body = &requests[0].body;
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["temperature"], 0.2);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You answer from the knowledge base."})
    );
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
            "function": {"name": "knowledge_search", "arguments": "{\"query\":\"pump pressure\"}"}}]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_7", "content": "[1] The pump runs at 4 bar."})
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "knowledge_search",
            "description": "Searches the knowledge base.", "parameters": search_tool().parameters}}])
    );
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": true}})
    );
    assert!(body.get("grammar").is_none());
    assert_eq!(body["tool_choice"], "required");

    let body = &requests[1].body;
    assert!(body.get("tools").is_none());
    assert!(body.get("response_format").is_none());
    assert_eq!(body["grammar"], "root ::= \"yes\" | \"no\"");
    // Tool turns stay structured when the server was never found lacking tools.
    assert_eq!(body["messages"][3]["role"], "tool");
    assert!(backend.info().supports_grammar);
}

#[test]
fn an_error_event_in_the_stream_fails_the_chat() {
    let server = MockServer::start(vec![sse(&[
        r#"{"error":{"code":500,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
    ])]);
    let message = chat_error(
        &server.openai(),
        &ChatRequest::new(vec![ChatMessage::user("Hi")]),
    );
    assert!(
        message.contains("exceeds the available context size"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// A real llama-server
// ---------------------------------------------------------------------------------------------

/// The chat model the server tests run: `QUARRY_TEST_GGUF`, else SmolLM2 from the models cache.
fn smollm2_gguf() -> PathBuf {
    std::env::var_os("QUARRY_TEST_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            workspace_root().join("models/cache/smollm2-135m-instruct-q4_1/model.gguf")
        })
}

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A running llama-server, killed when dropped.
struct LlamaServer {
    child: Child,
    base_url: String,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LlamaServer {
    fn stderr(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Starts the server on a free port and waits until `/health` says it is ready.
    fn start() -> LlamaServer {
        LlamaServer::start_with(true)
    }

    /// [`LlamaServer::start`], with the Jinja chat templates (and so tool calling) on or off.
    fn start_with(jinja: bool) -> LlamaServer {
        let jinja = if jinja { "--jinja" } else { "--no-jinja" };
        LlamaServer::launch(&smollm2_gguf(), &[jinja])
    }

    /// SmolLM2 serving embeddings (mean of its last layer), as `llama-server --embedding`.
    fn start_embedding() -> LlamaServer {
        LlamaServer::launch(&smollm2_gguf(), &["--embedding", "--pooling", "mean"])
    }

    /// `model` served with `extra` arguments, on a free port, once `/health` says it is ready.
    fn launch(model: &Path, extra: &[&str]) -> LlamaServer {
        let binary = std::env::var_os("QUARRY_LLAMA_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/llama-server/bin/llama-server"));
        assert!(
            binary.is_file(),
            "llama-server is missing at {}: run `bash scripts/llama-server.sh` (or set QUARRY_LLAMA_SERVER)",
            binary.display()
        );
        assert!(
            model.is_file(),
            "the GGUF is missing at {}: run `bash scripts/provision.sh target/debug/quarry` \
             (or set QUARRY_TEST_GGUF to a GGUF file)",
            model.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let stderr_path = dir.path().join("llama-server.log");
        let log = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("-m")
            .arg(model)
            .args(["--alias", "smollm2", "-c", "2048", "-np", "1"])
            .args(extra)
            .args(["-t", "1", "--no-webui"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut server = LlamaServer {
            child,
            base_url: format!("http://127.0.0.1:{port}/v1"),
            stderr_path,
            _dir: dir,
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!(
                    "llama-server exited ({status}) before it was ready:\n{}",
                    server.stderr()
                );
            }
            let health = format!("http://127.0.0.1:{port}/health");
            if let Ok(r) = agent.get(&health).call() {
                if r.status() == 200 {
                    return server;
                }
            }
            assert!(
                Instant::now() < deadline,
                "llama-server was not ready within 120 s:\n{}",
                server.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn backend(&self) -> OpenAiBackend {
        OpenAiBackend::new(
            OpenAiConfig::openai(&self.base_url, "smollm2").with_timeout(Duration::from_secs(120)),
        )
        .unwrap()
    }

    fn chat(&self, request: &ChatRequest) -> (ChatResponse, Vec<String>) {
        let mut events = Vec::new();
        let response = self
            .backend()
            .chat(request, &mut |e| {
                events.push(match e {
                    StreamEvent::Token(t) => format!("T:{t}"),
                    StreamEvent::ToolCallDelta { index, .. } => format!("C{index}"),
                    StreamEvent::Notice(n) => format!("N:{n}"),
                })
            })
            .unwrap_or_else(|e| panic!("chat failed: {e}\nserver log:\n{}", self.stderr()));
        (response, events)
    }
}

#[test]
fn llama_server_lists_its_model() {
    let server = LlamaServer::start();
    let models = server.backend().list_models().unwrap();
    assert!(models.iter().any(|m| m == "smollm2"), "{models:?}");
}

#[test]
fn llama_server_streams_an_answer() {
    let server = LlamaServer::start();
    let mut request = ChatRequest::new(vec![
        ChatMessage::system("You are a helpful assistant."),
        ChatMessage::user("What is the capital of France?"),
    ]);
    request.max_tokens = 48;
    let (response, events) = server.chat(&request);
    assert!(!response.content.trim().is_empty(), "{response:?}");
    let tokens: Vec<&String> = events.iter().filter(|e| e.starts_with("T:")).collect();
    assert!(tokens.len() > 1, "not streamed: {events:?}");
    let joined: String = tokens.iter().map(|t| &t[2..]).collect();
    assert_eq!(joined, response.content);
    assert!(response.usage.prompt_tokens > 0, "{:?}", response.usage);
    assert!(response.usage.completion_tokens > 0, "{:?}", response.usage);
    assert!(response.first_token_ms.is_some());
    assert!(
        ["stop", "length"].contains(&response.finish_reason.as_str()),
        "{}",
        response.finish_reason
    );
}

#[test]
fn llama_server_takes_a_request_with_a_tool() {
    let server = LlamaServer::start();
    let mut request = ChatRequest::new(vec![
        ChatMessage::system("Use knowledge_search to look things up."),
        ChatMessage::user("Search the knowledge base for pump maintenance."),
    ]);
    request.tools = vec![search_tool()];
    request.max_tokens = 96;
    let (response, events) = server.chat(&request);
    assert!(response.notices.is_empty(), "{:?}", response.notices);
    assert!(
        !response.tool_calls.is_empty() || !response.content.trim().is_empty(),
        "neither a tool call nor text: {response:?} {events:?}"
    );
    for call in &response.tool_calls {
        assert_eq!(call.name, "knowledge_search");
        serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {}", call.arguments));
    }
}

#[test]
fn llama_server_follows_a_json_schema() {
    let server = LlamaServer::start();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "confident": {"type": "boolean"},
        },
        "required": ["city", "confident"],
        "additionalProperties": false,
    });
    let mut request = ChatRequest::new(vec![ChatMessage::user(
        "What is the capital of France? Answer in JSON.",
    )]);
    request.max_tokens = 128;
    request.constraint = Some(Constraint::JsonSchema(schema));
    let (response, _) = server.chat(&request);
    let answer: Value = serde_json::from_str(&response.content)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", response.content));
    let object = answer.as_object().expect("an object");
    assert_eq!(object.len(), 2, "{answer}");
    assert!(answer["city"]
        .as_str()
        .is_some_and(|c| c.chars().count() <= 40));
    assert!(answer["confident"].is_boolean(), "{answer}");
}

#[test]
fn llama_server_without_jinja_answers_without_tools() {
    let server = LlamaServer::start_with(false);
    let backend = server.backend();
    let mut request = ChatRequest::new(history_with_tool_round());
    request.tools = vec![search_tool()];
    request.max_tokens = 32;
    let mut notices = Vec::new();
    let response = backend
        .chat(&request, &mut |e| {
            if let StreamEvent::Notice(n) = e {
                notices.push(n.to_string());
            }
        })
        .unwrap_or_else(|e| panic!("chat failed: {e}\nserver log:\n{}", server.stderr()));
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("--jinja"), "{}", notices[0]);
    assert_eq!(response.notices, notices);
    assert!(!response.content.trim().is_empty(), "{response:?}");
    assert!(!backend.info().supports_tools);
}

// ---------------------------------------------------------------------------------------------
// A collection embedded by a real llama-server
// ---------------------------------------------------------------------------------------------

#[test]
fn llama_server_embeds_a_collection_that_then_answers_by_meaning() {
    use quarry_core::models::{Models, ServedApi, ServedModel};
    use quarry_core::{IndexOptions, Library, LibraryOptions, SearchMode, SearchRequest};

    let index_and_embed = |library: &mut Library| -> quarry_core::Result<u64> {
        library
            .writer()?
            .index_all(&IndexOptions::default(), &|_| {})?;
        library
            .writer()?
            .embed_pending(&|_| {}, &std::sync::atomic::AtomicBool::new(false))
    };
    let server = LlamaServer::start_embedding();
    let data = tempfile::tempdir().unwrap();
    let models = Models::at(vec![data.path().join("models")]);
    std::fs::create_dir_all(models.install_dir()).unwrap();
    let served = ServedModel {
        url: server.base_url.clone(),
        api: ServedApi::Openai,
        model: "smollm2".into(),
        api_key_env: None,
        batch: 2,
        concurrency: 2,
        probe: Vec::new(),
    };
    let added = quarry_core::register_served(&models, "smollm2-served", served)
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", server.stderr()));
    assert_eq!(added.dimension, Some(576), "SmolLM2-135M's hidden size");

    let docs = data.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let pages = [
        ("bread.md", "# Sourdough\n\nMix flour, water and salt with the starter, let the dough rise overnight, then bake the bread in a hot oven until the crust is brown."),
        ("gearbox.md", "# Gearbox\n\nThe car's gearbox oil is drained and replaced every sixty thousand kilometres; check the clutch and the gear selector at the same service."),
        ("taxes.md", "# Taxes\n\nFile the income tax return each April with the salary statements, the bank interest and the receipts for deductible expenses."),
    ];
    for (name, text) in pages {
        std::fs::write(docs.join(name), text).unwrap();
    }
    let options = LibraryOptions {
        models: Some(models.clone()),
        ..LibraryOptions::default()
    };
    let mut library = Library::open_with(&data.path().join("library"), options).unwrap();
    library.add_source(&docs, "notes", &[], &[]).unwrap();
    library
        .use_embedding_model("notes", "smollm2-served")
        .unwrap();
    index_and_embed(&mut library)
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", server.stderr()));
    let coverage = library.embedding_coverage().unwrap();
    assert_eq!(coverage[0].model.as_deref(), Some("smollm2-served"));
    assert!(
        coverage[0].total >= 3 && coverage[0].embedded == coverage[0].total,
        "{coverage:?}"
    );

    let mut request = SearchRequest::new("how to bake sourdough bread from flour and a starter");
    request.settings.mode = SearchMode::Vector;
    let results = library.search(&request).unwrap();
    assert!(
        results.hits[0].path.ends_with("bread.md"),
        "{:?}",
        results.hits.iter().map(|h| &h.path).collect::<Vec<_>>()
    );

    // The same URL now serving another model: its vectors must not join SmolLM2's.
    let qwen = workspace_root().join("models/cache/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf");
    let other = LlamaServer::launch(&qwen, &["--embedding", "--pooling", "mean"]);
    let record = models
        .find("smollm2-served")
        .unwrap()
        .dir
        .join("quarry-model.json");
    let text = std::fs::read_to_string(&record).unwrap();
    std::fs::write(&record, text.replace(&server.base_url, &other.base_url)).unwrap();
    let options = LibraryOptions {
        models: Some(models),
        ..LibraryOptions::default()
    };
    let mut reopened = Library::open_with(&data.path().join("library"), options).unwrap();
    std::fs::write(
        docs.join("more.md"),
        "# Bicycles\n\nOil the chain of the bicycle every month.",
    )
    .unwrap();
    let err = index_and_embed(&mut reopened).unwrap_err().to_string();
    assert!(err.contains("another model"), "{err}");
}
