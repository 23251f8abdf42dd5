//! Turns for an outside agent (an MCP client). The client plays the model: it picks tools from
//! the mode's offer and reads their results, and Quarry runs each call exactly as it runs a
//! model's call in a chat: as the caller, through the gates, into the conversation's ledger,
//! under the mode's budgets, recorded in the trace. There is no answer to write, so one call is
//! one turn: the call is stored as the question and what the client was shown as the reply.

use serde::Serialize;
use serde_json::{json, Value};

use super::dispatch::ToolOutcome;
use super::setup::{ChatOptions, Turn};
use super::PipelineCalls;
use crate::auth::Principal;
use crate::context::EngineContext;
use crate::ids::DocumentId;
use crate::llm::{ToolCall, ToolSpec};
use crate::orchestrator::config::DEFAULT_CONFIG;
use crate::orchestrator::conversation::{self, Conversation, EvidenceItem, NewConversation};
use crate::orchestrator::gates::Gates;
use crate::orchestrator::revisions;
use crate::{Error, Result};

/// One tool call of an outside agent, after admission and the gates.
#[derive(Debug, Clone, Serialize)]
pub struct AgentCall {
    /// The turn of the session's conversation this call was.
    pub turn: i64,
    /// What the agent is shown: the tool's output rebuilt from the admitted passages, or the
    /// error.
    pub text: String,
    /// Whether the call failed or was refused.
    pub is_error: bool,
    /// Passages this call admitted to the session's ledger.
    pub admitted: Vec<EvidenceItem>,
}

/// A document an agent may read whole (an MCP resource).
#[derive(Debug, Clone, Serialize)]
pub struct AgentDocument {
    /// Its id.
    pub document_id: DocumentId,
    /// The file.
    pub path: std::path::PathBuf,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// Its collection.
    pub collection: String,
    /// The indexed text, in order, through the session's gates (empty in listings).
    pub text: String,
}

/// The most characters of a client's name kept.
pub const MAX_CLIENT_NAME_CHARS: usize = 80;

/// A client's self-declared name (MCP `clientInfo.name`) as it is stored, in the conversation's
/// title, each `turn.start` event and each audit record: control characters and bidirectional
/// overrides dropped, blank runs folded to one space, at most [`MAX_CLIENT_NAME_CHARS`]
/// characters (`…` ends a cut one), `unnamed client` when nothing is left. Reads at most a
/// few hundred characters of `raw`, however long it is: a client once named itself with 3 MB,
/// stored whole on every call (issue 38).
pub fn client_label(raw: &str) -> String {
    let mut label = String::new();
    let mut count = 0;
    let mut blank = false;
    for c in raw.chars().take(4 * MAX_CLIENT_NAME_CHARS) {
        if c.is_whitespace() {
            blank = !label.is_empty();
            continue;
        }
        if c.is_control() || is_bidi_control(c) {
            continue;
        }
        let needed = usize::from(blank) + 1;
        if count + needed > MAX_CLIENT_NAME_CHARS {
            label.push('…');
            return label;
        }
        if blank {
            label.push(' ');
            blank = false;
        }
        label.push(c);
        count += needed;
    }
    if label.is_empty() {
        return "unnamed client".into();
    }
    label
}

/// Bidirectional embeddings, overrides and isolates, which reorder the text shown around them.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Starts an outside agent's session: a conversation of `principal`, in the newest applied
/// revision of `config` (`None`: `default`), in `mode`. Its id binds the session's evidence
/// references, so they are refused in any other session. `client` is bounded by
/// [`client_label`].
pub fn start_agent_session(
    ctx: &EngineContext<'_>,
    principal: &Principal,
    config: Option<&str>,
    mode: &str,
    client: &str,
) -> Result<Conversation> {
    let config_name = config.unwrap_or(DEFAULT_CONFIG);
    let applied = revisions::revision(ctx.store, config_name, None)?;
    applied.config.mode(mode)?;
    let client = client_label(client);
    conversation::create(
        ctx.store,
        principal,
        NewConversation {
            config: config_name,
            revision: applied.revision,
            mode,
            title: &format!("MCP session of {client}"),
            client: Some(&client),
            collections: None,
        },
    )
}

/// The tools the session's mode offers `principal`: the pipeline, `knowledge_search` (told
/// only the collections the caller may read) and the direct evidence tools, after the gates'
/// tool filter.
pub fn agent_tools(
    ctx: &EngineContext<'_>,
    pipelines: &dyn PipelineCalls,
    principal: &Principal,
    conversation: &str,
) -> Result<Vec<ToolSpec>> {
    let options = session_options(principal, conversation);
    let turn = Turn::start(ctx, pipelines, "tools/list", &options)?;
    turn.tools_on_offer(true)
}

/// Calls one tool for the agent, as one turn of the session's conversation; `client` is
/// recorded bounded by [`client_label`].
pub fn agent_call(
    ctx: &EngineContext<'_>,
    pipelines: &dyn PipelineCalls,
    principal: &Principal,
    conversation: &str,
    client: &str,
    tool: &str,
    arguments: &Value,
) -> Result<AgentCall> {
    let options = session_options(principal, conversation);
    let client = client_label(client);
    let question = format!("{tool} {arguments}");
    let mut turn = Turn::start(ctx, pipelines, &question, &options)?;
    turn.record(
        "turn.start",
        json!({
            "question": turn.question,
            "config": turn.conversation.config,
            "revision": turn.revision.revision,
            "mode": turn.mode.name,
            "client": client,
            "via": "mcp",
            "principal": principal.label,
        }),
    )?;
    turn.store_question()?;
    let offered = turn.tools_on_offer(true)?;
    let call = ToolCall {
        id: format!("mcp-{}", turn.turn),
        name: tool.to_string(),
        arguments: arguments.to_string(),
    };
    let ToolOutcome { text, is_error } =
        turn.checked_tool_call(&call, &offered, "mcp", &mut |_| {})?;
    let is_search = turn
        .mode
        .knowledge_search
        .as_ref()
        .is_some_and(|ks| ks.tool_name == tool);
    let text = if is_search && !is_error {
        with_references(&text, &turn.admitted)
    } else {
        text
    };
    conversation::add_message(
        ctx.store,
        &turn.conversation.id,
        turn.turn,
        "assistant",
        &text,
        None,
    )?;
    Ok(AgentCall {
        turn: turn.turn,
        text,
        is_error,
        admitted: turn.admitted,
    })
}

/// The documents cited in the session so far (each once, in order of first admission).
pub fn cited_documents(
    ctx: &EngineContext<'_>,
    principal: &Principal,
    conversation: &str,
) -> Result<Vec<AgentDocument>> {
    let mut documents: Vec<AgentDocument> = Vec::new();
    for item in conversation::evidence(ctx.store, principal, conversation)? {
        if documents.iter().all(|d| d.document_id != item.document_id) {
            documents.push(AgentDocument {
                document_id: item.document_id,
                path: item.path,
                title: item.title,
                collection: item.collection,
                text: String::new(),
            });
        }
    }
    Ok(documents)
}

/// A whole document for the agent: only one cited in the session so far and within the
/// caller's scope (anything else reads as not found, so its existence is not disclosed), its
/// current chunks joined without their overlaps, through the session's gates (secrets
/// redacted, length bounded as for a tool result). Resources are what the session's evidence
/// led to, as the listing says, not a way around retrieval to any document in scope.
pub fn read_document(
    ctx: &EngineContext<'_>,
    principal: &Principal,
    conversation: &str,
    document_id: DocumentId,
) -> Result<AgentDocument> {
    let session = conversation::get(ctx.store, principal, conversation)?;
    let not_found = || Error::DocumentNotFound(format!("quarry://doc/{document_id}").into());
    let cited = conversation::evidence(ctx.store, principal, conversation)?
        .iter()
        .any(|item| item.document_id == document_id);
    if !cited {
        return Err(not_found());
    }
    let access = ctx
        .store
        .document_access(document_id)?
        .ok_or_else(not_found)?;
    if !principal
        .scope
        .allows_named(&access.collection, &access.sensitivity)
    {
        return Err(not_found());
    }
    let record = ctx
        .store
        .document_by_id(document_id)?
        .ok_or_else(not_found)?;
    let chunks = ctx.store.chunks_of_document(document_id)?;
    let revision = revisions::revision(ctx.store, &session.config, Some(session.revision))?;
    let gates = Gates::compile(&revision.config.gates)?;
    let gated = gates.before_tool_result(&join_without_overlap(
        chunks.iter().map(|c| c.text.as_str()),
    ));
    if gated.vetoed {
        return Err(Error::EvidenceRejected(format!(
            "the gates withheld quarry://doc/{document_id}"
        )));
    }
    Ok(AgentDocument {
        document_id,
        path: record.path,
        title: record.title,
        collection: access.collection,
        text: gated.text,
    })
}

/// `knowledge_search`'s JSON with each result's `evidence_ref` and `sourceRef` added after
/// the manual's fields: a model in a chat cites by number, but an outside agent needs the
/// references to page a document with the fetch tools. The results are the admitted passages,
/// in order (admission drops withheld ones and ranks the rest again).
fn with_references(text: &str, admitted: &[EvidenceItem]) -> String {
    let Ok(mut output) = serde_json::from_str::<Value>(text) else {
        return text.to_string();
    };
    if let Some(results) = output["results"].as_array_mut() {
        for (result, item) in results.iter_mut().zip(admitted) {
            if let Some(fields) = result.as_object_mut() {
                fields.insert("evidence_ref".into(), json!(item.evidence_ref));
                fields.insert("sourceRef".into(), json!(item.source_ref));
            }
        }
    }
    output.to_string()
}

fn session_options(principal: &Principal, conversation: &str) -> ChatOptions {
    ChatOptions {
        conversation: Some(conversation.to_string()),
        ..ChatOptions::new(principal.clone())
    }
}

/// Chunks in order, each one's leading overlap with the one before dropped (chunks repeat the
/// trailing blocks of their predecessor), blank-line separated.
fn join_without_overlap<'a>(chunks: impl IntoIterator<Item = &'a str>) -> String {
    // Shorter shared text is coincidence, not overlap.
    const MIN_OVERLAP: usize = 16;
    let mut text = String::new();
    let mut previous: &str = "";
    for chunk in chunks {
        let overlap = previous
            .char_indices()
            .map(|(i, _)| &previous[i..])
            .find(|tail| tail.len() >= MIN_OVERLAP && chunk.starts_with(tail))
            .map_or(0, str::len);
        let fresh = chunk[overlap..].trim_start();
        if !fresh.is_empty() {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(fresh);
        }
        previous = chunk;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_chunks_join_once() {
        let chunks = [
            "First paragraph here.\n\nSecond paragraph, repeated below.",
            "Second paragraph, repeated below.\n\nThird paragraph.",
            "An unrelated start.",
        ];
        assert_eq!(
            join_without_overlap(chunks),
            "First paragraph here.\n\nSecond paragraph, repeated below.\n\nThird paragraph.\n\nAn unrelated start."
        );
    }

    #[test]
    fn a_client_name_is_bounded_and_printable() {
        assert_eq!(client_label("claude-desktop"), "claude-desktop");
        assert_eq!(
            client_label("  \u{1b}[2Jbad\u{202e}\tname \u{7}"),
            "[2Jbad name"
        );
        assert_eq!(client_label("\u{0}\n "), "unnamed client");
        let long = client_label(&"x".repeat(3_000_000));
        assert_eq!(long.chars().count(), MAX_CLIENT_NAME_CHARS + 1);
        assert!(long.ends_with('…'));
        assert_eq!(client_label(&long), long, "bounding twice changes nothing");
    }

    #[test]
    fn a_short_coincidence_is_not_an_overlap() {
        assert_eq!(
            join_without_overlap(["ends with a", "a begins here"]),
            "ends with a\n\na begins here"
        );
    }
}
