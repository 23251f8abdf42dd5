//! Conversations persisted in the library: their messages, the evidence admitted in them
//! (numbered once per conversation, so `[3]` means the same passage in every turn), and the
//! trace of events (`tool.invoke`, `tool.result`, gate decisions, generation).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Principal;
use crate::evidence::LedgerEntry;
use crate::ids::{ChunkId, DocumentId, RevisionId};
pub use crate::store::Conversation;
use crate::store::{self, now_unix, ChunkLocation, Store, Tx};
use crate::{Error, Result};

/// A passage admitted to a conversation's ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceItem {
    /// Its number in the conversation (`[n]` in answers).
    pub n: i64,
    /// Chunk id.
    pub chunk_id: ChunkId,
    /// Document id.
    pub document_id: DocumentId,
    /// Document revision it was admitted from.
    pub revision_id: RevisionId,
    /// The file.
    pub path: PathBuf,
    /// Document title.
    pub title: Option<String>,
    /// Collection.
    pub collection: String,
    /// Headings above it.
    pub heading_path: String,
    /// Page and lines.
    pub location: ChunkLocation,
    /// The passage, as admitted (after the gates).
    pub text: String,
    /// The tool or stage that admitted it.
    pub admitted_by: String,
    /// The turn it was admitted in.
    pub turn: i64,
    /// The reference it was admitted under.
    pub evidence_ref: String,
    /// A reference to its document, for paging (`sourceRef`, the manual's spelling; items
    /// stored before read as `source_ref`).
    #[serde(rename = "sourceRef", alias = "source_ref")]
    pub source_ref: String,
}

impl EvidenceItem {
    /// `path` plus `p. N` / `lines a–b`, and `(recognised text, OCR)` for text read from a
    /// scan's pixels.
    pub fn locator(&self) -> String {
        let mut s = self.path.display().to_string();
        if let Some(p) = self.location.page {
            s.push_str(&format!(" p. {p}"));
        }
        if let (Some(a), Some(b)) = (self.location.line_start, self.location.line_end) {
            s.push_str(&format!(" lines {a}-{b}"));
        }
        if self.location.ocr_confidence.is_some() {
            s.push_str(" (recognised text, OCR)");
        }
        s
    }
}

/// One recorded event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceEvent {
    /// The turn.
    pub turn: i64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// `turn.start`, `tool.invoke`, `tool.result`, `llm.generate`, `answer`, `notice`, …
    pub kind: String,
    /// What happened.
    pub detail: Value,
}

/// A stored message.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    /// The turn.
    pub turn: i64,
    /// `user` or `assistant`.
    pub role: String,
    /// Text.
    pub content: String,
    /// Citations of an answer.
    pub citations: Option<Value>,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What a new conversation starts with.
pub struct NewConversation<'a> {
    /// The configuration.
    pub config: &'a str,
    /// Its applied revision, kept for the conversation's life.
    pub revision: i64,
    /// The mode.
    pub mode: &'a str,
    /// The title (the first question), cut to 80 characters.
    pub title: &'a str,
    /// The outside agent whose session it is (`None`: the window's or the CLI's).
    pub client: Option<&'a str>,
    /// The collections it searches (`None`: every one the caller may read).
    pub collections: Option<&'a [String]>,
}

/// Starts a conversation of `principal`.
pub(crate) fn create(
    store: &Store,
    principal: &Principal,
    new: NewConversation<'_>,
) -> Result<Conversation> {
    let id = format!("c-{}", crate::auth::random_hex(8)?);
    let now = now_unix();
    let conversation = Conversation {
        id,
        principal: principal.id.clone(),
        config: new.config.to_string(),
        revision: new.revision,
        mode: new.mode.to_string(),
        title: new.title.chars().take(80).collect(),
        qualified: false,
        created_at: now,
        updated_at: now,
        client: new.client.map(String::from),
        collections: new.collections.map(<[String]>::to_vec),
    };
    store.insert_conversation(&conversation)?;
    get(store, principal, &conversation.id)
}

/// A conversation of `principal` (another caller's is "not found").
pub(crate) fn get(store: &Store, principal: &Principal, id: &str) -> Result<Conversation> {
    store
        .conversation(id, &principal.id)?
        .ok_or_else(|| Error::ConversationNotFound(id.into()))
}

/// `principal`'s conversations, newest first.
pub(crate) fn list(store: &Store, principal: &Principal) -> Result<Vec<Conversation>> {
    let ids = store.conversation_ids(&principal.id)?;
    ids.iter().map(|id| get(store, principal, id)).collect()
}

/// Renames a conversation of `principal` (the title is trimmed and cut to 80 characters).
pub(crate) fn rename(
    store: &Store,
    principal: &Principal,
    id: &str,
    title: &str,
) -> Result<Conversation> {
    let title: String = title.trim().chars().take(80).collect();
    if title.is_empty() {
        return Err(Error::InvalidSetting {
            field: "title".into(),
            reason: "is empty".into(),
        });
    }
    if !store.rename_conversation(id, &principal.id, &title)? {
        return Err(Error::ConversationNotFound(id.into()));
    }
    get(store, principal, id)
}

/// Deletes a conversation of `principal`, with everything recorded in it.
pub(crate) fn delete(store: &Store, principal: &Principal, id: &str) -> Result<()> {
    if !store.delete_conversation(id, &principal.id)? {
        return Err(Error::ConversationNotFound(id.into()));
    }
    Ok(())
}

/// Takes back the last turn of a conversation of `principal` (its question, answer, evidence
/// and events) and returns its question, so it can be asked again or edited and resent.
pub(crate) fn take_back_last_turn(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<String> {
    get(store, principal, id)?;
    let last = store.next_chat_turn(id)? - 1;
    let question = messages_of(store, id)?
        .into_iter()
        .find(|m| m.turn == last && m.role == "user")
        .map(|m| m.content)
        .ok_or_else(|| Error::InvalidSetting {
            field: "conversation".into(),
            reason: format!("`{id}` has no question to take back"),
        })?;
    store.forget_chat_turn(id, last)?;
    Ok(question)
}

/// Marks, in the caller's transaction, that a qualifying pipeline completed.
pub(crate) fn mark_qualified(tx: &Tx<'_>, id: &str) -> Result<()> {
    store::mark_conversation_qualified(tx, id)
}

/// The next turn number.
pub(crate) fn next_turn(store: &Store, id: &str) -> Result<i64> {
    store.next_chat_turn(id)
}

/// Stores a message.
pub(crate) fn add_message(
    store: &Store,
    id: &str,
    turn: i64,
    role: &str,
    content: &str,
    citations: Option<&Value>,
) -> Result<()> {
    store.insert_chat_message(
        id,
        turn,
        role,
        content,
        citations.map(|c| c.to_string()),
        now_unix(),
    )
}

/// The messages of a conversation of `principal`, in order (another caller's is "not found",
/// as in [`get`]).
pub(crate) fn messages(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Vec<StoredMessage>> {
    get(store, principal, id)?;
    messages_of(store, id)
}

/// The messages of a conversation whose owner was checked already.
pub(crate) fn messages_of(store: &Store, id: &str) -> Result<Vec<StoredMessage>> {
    Ok(store
        .chat_messages(id)?
        .into_iter()
        .map(|r| StoredMessage {
            turn: r.turn,
            role: r.role,
            content: r.content,
            citations: r.citations.and_then(|c| serde_json::from_str(&c).ok()),
        })
        .collect())
}

/// Admits a ledger entry to the conversation (once per chunk), in the caller's transaction,
/// and returns its item with its number; `text` is what the model is shown (the entry's text
/// after the gates).
pub(crate) fn admit(
    tx: &Tx<'_>,
    id: &str,
    turn: i64,
    entry: &LedgerEntry,
    text: &str,
) -> Result<EvidenceItem> {
    if let Some(existing) = store::chat_evidence_for_chunk(tx, id, entry.chunk_id)? {
        return parse_item(&existing);
    }
    let n = store::next_chat_evidence_number(tx, id)?;
    let item = EvidenceItem {
        n,
        chunk_id: entry.chunk_id,
        document_id: entry.document_id,
        revision_id: entry.revision_id,
        path: entry.path.clone(),
        title: entry.title.clone(),
        collection: entry.collection.clone(),
        heading_path: entry.heading_path.clone(),
        location: entry.location.clone(),
        text: text.to_string(),
        admitted_by: entry.admitted_by.clone(),
        turn,
        evidence_ref: entry.evidence_ref.clone(),
        source_ref: entry.source_ref.clone(),
    };
    store::insert_chat_evidence(
        tx,
        id,
        n,
        entry.chunk_id,
        turn,
        &serde_json::to_string(&item).expect("json"),
    )?;
    Ok(item)
}

/// Takes passage `n` back out of a conversation's ledger, in the caller's transaction (a
/// result admitted it, but the text its reader got left it out).
pub(crate) fn withdraw(tx: &Tx<'_>, id: &str, n: i64) -> Result<()> {
    store::delete_chat_evidence(tx, id, n)
}

fn parse_item(text: &str) -> Result<EvidenceItem> {
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("bad evidence item: {e}")))
}

/// The ledger of a conversation of `principal`, by number (another caller's is "not found",
/// as in [`get`]).
pub(crate) fn evidence(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Vec<EvidenceItem>> {
    get(store, principal, id)?;
    evidence_of(store, id)
}

/// The ledger of a conversation whose owner was checked already.
pub(crate) fn evidence_of(store: &Store, id: &str) -> Result<Vec<EvidenceItem>> {
    store
        .chat_evidence_items(id)?
        .iter()
        .map(|i| parse_item(i))
        .collect()
}

/// Records an event.
pub(crate) fn record(
    store: &Store,
    id: &str,
    turn: i64,
    kind: &str,
    detail: Value,
) -> Result<TraceEvent> {
    let event = TraceEvent {
        turn,
        at_ms: now_ms(),
        kind: kind.into(),
        detail,
    };
    store.insert_chat_event(id, turn, event.at_ms, kind, &event.detail.to_string())?;
    Ok(event)
}

/// The recorded events of a conversation of `principal` (of one turn, when given); another
/// caller's is "not found", as in [`get`].
pub(crate) fn trace(
    store: &Store,
    principal: &Principal,
    id: &str,
    turn: Option<i64>,
) -> Result<Vec<TraceEvent>> {
    get(store, principal, id)?;
    trace_of(store, id, turn)
}

/// The events of a conversation whose owner was checked already.
pub(crate) fn trace_of(store: &Store, id: &str, turn: Option<i64>) -> Result<Vec<TraceEvent>> {
    Ok(store
        .chat_events(id, turn)?
        .into_iter()
        .map(|r| TraceEvent {
            turn: r.turn,
            at_ms: r.at_ms,
            kind: r.kind,
            detail: serde_json::from_str(&r.detail).unwrap_or(Value::Null),
        })
        .collect())
}
