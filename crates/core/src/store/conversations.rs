//! Conversations and their messages, evidence and traces.

use rusqlite::{params, OptionalExtension, Transaction};
use serde::Serialize;

use super::Store;
use crate::error::Result;
use crate::ids::ChunkId;

/// A conversation's header.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
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
    /// The outside agent (MCP client, its name bounded) whose session this is; `None`: a
    /// conversation of the window or the CLI.
    pub client: Option<String>,
    /// The collections it searches, picked when it began (`None`: every one the caller may
    /// read); every turn keeps to them.
    pub collections: Option<Vec<String>>,
}

/// A stored chat message, its citations still as JSON text.
#[derive(Debug, Clone)]
pub(crate) struct ChatMessageRow {
    pub turn: i64,
    pub role: String,
    pub content: String,
    pub citations: Option<String>,
}

/// A recorded chat event, its detail still as JSON text.
#[derive(Debug, Clone)]
pub(crate) struct ChatEventRow {
    pub turn: i64,
    pub at_ms: i64,
    pub kind: String,
    pub detail: String,
}

impl Store {
    /// Inserts a new conversation.
    pub(crate) fn insert_conversation(&self, c: &Conversation) -> Result<()> {
        self.conn.execute(
            "INSERT INTO conversations(id, principal, config, revision, mode, title, qualified, created_at, updated_at, client, collections)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                c.id,
                c.principal,
                c.config,
                c.revision,
                c.mode,
                c.title,
                c.qualified,
                c.created_at,
                c.updated_at,
                c.client,
                c.collections
                    .as_ref()
                    .map(|list| serde_json::to_string(list).expect("names are JSON"))
            ],
        )?;
        Ok(())
    }

    /// The conversation `id` of `principal`, if there is one.
    pub(crate) fn conversation(&self, id: &str, principal: &str) -> Result<Option<Conversation>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, principal, config, revision, mode, title, qualified, created_at, updated_at,
                        client, collections
                 FROM conversations WHERE id = ?1 AND principal = ?2",
                params![id, principal],
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
                        client: r.get(9)?,
                        // Written by `insert_conversation` only; unreadable text reads as no
                        // list, which never widens what the caller's own scope allows.
                        collections: r
                            .get::<_, Option<String>>(10)?
                            .and_then(|text| serde_json::from_str(&text).ok()),
                    })
                },
            )
            .optional()?)
    }

    /// The ids of `principal`'s conversations, most recently updated first.
    pub(crate) fn conversation_ids(&self, principal: &str) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT id FROM conversations WHERE principal = ?1 ORDER BY updated_at DESC, id",
        )?;
        let ids = stmt
            .query_map([principal], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ids)
    }

    /// Renames a conversation of `principal`; false when it has none by that id.
    pub(crate) fn rename_conversation(
        &self,
        id: &str,
        principal: &str,
        title: &str,
    ) -> Result<bool> {
        let changed = self.conn.execute(
            "UPDATE conversations SET title = ?3 WHERE id = ?1 AND principal = ?2",
            params![id, principal, title],
        )?;
        Ok(changed > 0)
    }

    /// Deletes a conversation of `principal` with its messages, evidence and events; false
    /// when it has none by that id.
    pub(crate) fn delete_conversation(&self, id: &str, principal: &str) -> Result<bool> {
        let deleted = self.conn.execute(
            "DELETE FROM conversations WHERE id = ?1 AND principal = ?2",
            params![id, principal],
        )?;
        Ok(deleted > 0)
    }

    /// Forgets a conversation's turn `turn` (its messages, the evidence first admitted in it
    /// and its events), in one transaction; the numbers it used are free again.
    pub(crate) fn forget_chat_turn(&self, id: &str, turn: i64) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        for table in ["chat_messages", "chat_evidence", "chat_events"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE conversation_id = ?1 AND turn = ?2"),
                params![id, turn],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The next turn number of a conversation (1 when it has no message yet).
    pub(crate) fn next_chat_turn(&self, conversation_id: &str) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(turn), 0) + 1 FROM chat_messages WHERE conversation_id = ?1",
            [conversation_id],
            |r| r.get(0),
        )?)
    }

    /// Stores a message (`citations` as JSON text) and bumps the conversation's `updated_at`.
    pub(crate) fn insert_chat_message(
        &self,
        conversation_id: &str,
        turn: i64,
        role: &str,
        content: &str,
        citations: Option<String>,
        now: i64,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO chat_messages(conversation_id, turn, role, content, citations, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![conversation_id, turn, role, content, citations, now],
        )?;
        self.conn.execute(
            "UPDATE conversations SET updated_at = ?2 WHERE id = ?1",
            params![conversation_id, now],
        )?;
        Ok(())
    }

    /// The messages of a conversation, in the order they were stored.
    pub(crate) fn chat_messages(&self, conversation_id: &str) -> Result<Vec<ChatMessageRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT turn, role, content, citations FROM chat_messages WHERE conversation_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([conversation_id], |r| {
            Ok(ChatMessageRow {
                turn: r.get(0)?,
                role: r.get(1)?,
                content: r.get(2)?,
                citations: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The JSON of every evidence item of a conversation, by number.
    pub(crate) fn chat_evidence_items(&self, conversation_id: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT item FROM chat_evidence WHERE conversation_id = ?1 ORDER BY n")?;
        let rows = stmt.query_map([conversation_id], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records an event (`detail` as JSON text).
    pub(crate) fn insert_chat_event(
        &self,
        conversation_id: &str,
        turn: i64,
        at_ms: i64,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO chat_events(conversation_id, turn, at_ms, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![conversation_id, turn, at_ms, kind, detail],
        )?;
        Ok(())
    }

    /// The recorded events of a conversation (of one turn, when given), in order.
    pub(crate) fn chat_events(
        &self,
        conversation_id: &str,
        turn: Option<i64>,
    ) -> Result<Vec<ChatEventRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT turn, at_ms, kind, detail FROM chat_events
             WHERE conversation_id = ?1 AND (?2 IS NULL OR turn = ?2) ORDER BY id",
        )?;
        let rows = stmt.query_map(params![conversation_id, turn], |r| {
            Ok(ChatEventRow {
                turn: r.get(0)?,
                at_ms: r.get(1)?,
                kind: r.get(2)?,
                detail: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Marks, in the caller's transaction, that a qualifying pipeline completed in a conversation.
pub(crate) fn mark_conversation_qualified(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.execute("UPDATE conversations SET qualified = 1 WHERE id = ?1", [id])?;
    Ok(())
}

/// The JSON of the evidence item already admitted for `chunk_id` in a conversation, if any.
pub(crate) fn chat_evidence_for_chunk(
    tx: &Transaction<'_>,
    conversation_id: &str,
    chunk_id: ChunkId,
) -> Result<Option<String>> {
    Ok(tx
        .query_row(
            "SELECT item FROM chat_evidence WHERE conversation_id = ?1 AND chunk_id = ?2",
            params![conversation_id, chunk_id],
            |r| r.get(0),
        )
        .optional()?)
}

/// The next evidence number of a conversation (1 when its ledger is empty).
pub(crate) fn next_chat_evidence_number(
    tx: &Transaction<'_>,
    conversation_id: &str,
) -> Result<i64> {
    Ok(tx.query_row(
        "SELECT COALESCE(MAX(n), 0) + 1 FROM chat_evidence WHERE conversation_id = ?1",
        [conversation_id],
        |r| r.get(0),
    )?)
}

/// Deletes evidence item `n` of a conversation's ledger, in the caller's transaction.
pub(crate) fn delete_chat_evidence(
    tx: &Transaction<'_>,
    conversation_id: &str,
    n: i64,
) -> Result<()> {
    tx.execute(
        "DELETE FROM chat_evidence WHERE conversation_id = ?1 AND n = ?2",
        params![conversation_id, n],
    )?;
    Ok(())
}

/// Inserts an evidence item (`item` as JSON text) into a conversation's ledger, in the
/// caller's transaction.
pub(crate) fn insert_chat_evidence(
    tx: &Transaction<'_>,
    conversation_id: &str,
    n: i64,
    chunk_id: ChunkId,
    turn: i64,
    item: &str,
) -> Result<()> {
    tx.execute(
        "INSERT INTO chat_evidence(conversation_id, n, chunk_id, turn, item) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![conversation_id, n, chunk_id, turn, item],
    )?;
    Ok(())
}
