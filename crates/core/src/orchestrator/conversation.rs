//! Conversations persisted in the library: their messages, the evidence admitted in them
//! (numbered once per conversation, so `[3]` means the same passage in every turn), and the
//! trace of events (`tool.invoke`, `tool.result`, gate decisions, generation).

use std::path::PathBuf;

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Principal;
use crate::evidence::LedgerEntry;
use crate::store::{now_unix, ChunkLocation, Store};
use crate::{Error, Result};

/// A conversation's header.
#[derive(Debug, Clone, Serialize)]
pub struct Conversation {
    /// Its id.
    pub id: String,
    /// The caller it belongs to (`Principal::id`).
    pub principal: String,
    /// The configuration.
    pub config: String,
    /// The applied revision it started with and keeps.
    pub revision: i64,
    /// The mode.
    pub mode: String,
    /// The first question, cut short.
    pub title: String,
    /// Whether a qualifying pipeline has completed in it (direct tools unlocked).
    pub qualified: bool,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

/// A passage admitted to a conversation's ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceItem {
    /// Its number in the conversation (`[n]` in answers).
    pub n: i64,
    /// Chunk id.
    pub chunk_id: i64,
    /// Document id.
    pub document_id: i64,
    /// Document revision it was admitted from.
    pub revision_id: i64,
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
    /// A reference to its document, for paging.
    pub source_ref: String,
}

impl EvidenceItem {
    /// `path` plus `p. N` / `lines a–b`.
    pub fn locator(&self) -> String {
        let mut s = self.path.display().to_string();
        if let Some(p) = self.location.page {
            s.push_str(&format!(" p. {p}"));
        }
        if let (Some(a), Some(b)) = (self.location.line_start, self.location.line_end) {
            s.push_str(&format!(" lines {a}-{b}"));
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

/// Starts a conversation.
pub fn create(
    store: &Store,
    principal: &Principal,
    config: &str,
    revision: i64,
    mode: &str,
    title: &str,
) -> Result<Conversation> {
    let id = format!("c-{}", crate::auth::random_hex(8)?);
    let now = now_unix();
    let title: String = title.chars().take(80).collect();
    store.conn().execute(
        "INSERT INTO conversations(id, principal, config, revision, mode, title, qualified, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?7)",
        params![id, principal.id, config, revision, mode, title, now],
    )?;
    get(store, principal, &id)
}

/// A conversation of `principal` (another caller's is "not found").
pub fn get(store: &Store, principal: &Principal, id: &str) -> Result<Conversation> {
    store
        .conn()
        .query_row(
            "SELECT id, principal, config, revision, mode, title, qualified, created_at, updated_at
             FROM conversations WHERE id = ?1 AND principal = ?2",
            params![id, principal.id],
            |r| {
                Ok(Conversation {
                    id: r.get(0)?,
                    principal: r.get(1)?,
                    config: r.get(2)?,
                    revision: r.get(3)?,
                    mode: r.get(4)?,
                    title: r.get(5)?,
                    qualified: r.get::<_, i64>(6)? != 0,
                    created_at: r.get(7)?,
                    updated_at: r.get(8)?,
                })
            },
        )
        .optional()?
        .ok_or_else(|| Error::ConversationNotFound(id.into()))
}

/// `principal`'s conversations, newest first.
pub fn list(store: &Store, principal: &Principal) -> Result<Vec<Conversation>> {
    let mut stmt = store.conn().prepare(
        "SELECT id FROM conversations WHERE principal = ?1 ORDER BY updated_at DESC, id",
    )?;
    let ids: Vec<String> = stmt
        .query_map([&principal.id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.iter().map(|id| get(store, principal, id)).collect()
}

/// Marks that a qualifying pipeline completed.
pub(crate) fn mark_qualified(store: &Store, id: &str) -> Result<()> {
    store
        .conn()
        .execute("UPDATE conversations SET qualified = 1 WHERE id = ?1", [id])?;
    Ok(())
}

/// The next turn number.
pub(crate) fn next_turn(store: &Store, id: &str) -> Result<i64> {
    Ok(store.conn().query_row(
        "SELECT COALESCE(MAX(turn), 0) + 1 FROM chat_messages WHERE conversation_id = ?1",
        [id],
        |r| r.get(0),
    )?)
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
    let now = now_unix();
    store.conn().execute(
        "INSERT INTO chat_messages(conversation_id, turn, role, content, citations, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            turn,
            role,
            content,
            citations.map(|c| c.to_string()),
            now
        ],
    )?;
    store.conn().execute(
        "UPDATE conversations SET updated_at = ?2 WHERE id = ?1",
        params![id, now],
    )?;
    Ok(())
}

/// The messages of a conversation, in order.
pub fn messages(store: &Store, id: &str) -> Result<Vec<StoredMessage>> {
    let mut stmt = store.conn().prepare(
        "SELECT turn, role, content, citations FROM chat_messages WHERE conversation_id = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(StoredMessage {
            turn: r.get(0)?,
            role: r.get(1)?,
            content: r.get(2)?,
            citations: r
                .get::<_, Option<String>>(3)?
                .and_then(|c| serde_json::from_str(&c).ok()),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Admits a ledger entry to the conversation (once per chunk) and returns its item with its
/// number; `text` is what the model is shown (the entry's text after the gates).
pub(crate) fn admit(
    store: &Store,
    id: &str,
    turn: i64,
    entry: &LedgerEntry,
    text: &str,
) -> Result<EvidenceItem> {
    if let Some(existing) = evidence_for_chunk(store, id, entry.chunk_id)? {
        return Ok(existing);
    }
    let n: i64 = store.conn().query_row(
        "SELECT COALESCE(MAX(n), 0) + 1 FROM chat_evidence WHERE conversation_id = ?1",
        [id],
        |r| r.get(0),
    )?;
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
    store.conn().execute(
        "INSERT INTO chat_evidence(conversation_id, n, chunk_id, turn, item) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, n, entry.chunk_id, turn, serde_json::to_string(&item).expect("json")],
    )?;
    Ok(item)
}

fn evidence_for_chunk(store: &Store, id: &str, chunk_id: i64) -> Result<Option<EvidenceItem>> {
    let item: Option<String> = store
        .conn()
        .query_row(
            "SELECT item FROM chat_evidence WHERE conversation_id = ?1 AND chunk_id = ?2",
            params![id, chunk_id],
            |r| r.get(0),
        )
        .optional()?;
    item.map(|i| parse_item(&i)).transpose()
}

fn parse_item(text: &str) -> Result<EvidenceItem> {
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("bad evidence item: {e}")))
}

/// The conversation's ledger, by number.
pub fn evidence(store: &Store, id: &str) -> Result<Vec<EvidenceItem>> {
    let mut stmt = store
        .conn()
        .prepare("SELECT item FROM chat_evidence WHERE conversation_id = ?1 ORDER BY n")?;
    let rows = stmt.query_map([id], |r| r.get::<_, String>(0))?;
    rows.map(|r| parse_item(&r?)).collect()
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
    store.conn().execute(
        "INSERT INTO chat_events(conversation_id, turn, at_ms, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, turn, event.at_ms, kind, event.detail.to_string()],
    )?;
    Ok(event)
}

/// The recorded events of a conversation (of one turn, when given).
pub fn trace(store: &Store, id: &str, turn: Option<i64>) -> Result<Vec<TraceEvent>> {
    let mut stmt = store.conn().prepare(
        "SELECT turn, at_ms, kind, detail FROM chat_events
         WHERE conversation_id = ?1 AND (?2 IS NULL OR turn = ?2) ORDER BY id",
    )?;
    let rows = stmt.query_map(params![id, turn], |r| {
        Ok(TraceEvent {
            turn: r.get(0)?,
            at_ms: r.get(1)?,
            kind: r.get(2)?,
            detail: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or(Value::Null),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
