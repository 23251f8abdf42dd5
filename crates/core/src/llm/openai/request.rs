//! The request bodies of both dialects: OpenAI's `chat/completions` and Ollama's `/api/chat`,
//! with tools, grammars and sampling, and tool turns flattened to text for servers that cannot
//! take them.

use serde_json::{json, Map, Value};

use super::super::{ChatMessage, ChatRequest, Constraint, Role};
use super::{round3, OpenAiConfig};

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
pub(super) fn openai_body(
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
pub(super) fn ollama_body(
    model: &str,
    request: &ChatRequest,
    with_tools: bool,
    flatten: bool,
) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

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
