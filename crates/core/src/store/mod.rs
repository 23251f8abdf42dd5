//! SQLite storage: the library's source of truth.
//!
//! Invariants:
//! - Ids are `INTEGER PRIMARY KEY AUTOINCREMENT`, never reused, so a stale full-text hit can
//!   never point at a newer chunk.
//! - Every change to `chunks` writes a row to `fulltext_outbox` in the same transaction; the
//!   full-text index is fed only from that outbox (see `fulltext/`).
//! - Paths are stored as raw OS bytes (`path`) plus a lossy display form (`path_display`), so
//!   file names that are not UTF-8, or contain newlines, round-trip exactly.
//! - WAL mode: any number of readers search while one writer commits.

mod audit;
mod collections;
mod conversations;
mod documents;
mod embed_first;
mod keys;
mod migrations;
mod ocr;
mod orchestrator;
mod outbox;
mod pipelines;
mod records;
mod repeats;
mod sign_index;
mod tools;
mod vectors;
pub(crate) mod writes;

#[cfg(test)]
pub(crate) mod test_support;

pub(crate) use audit::NewAuditRecord;
pub use audit::{AuditFacets, AuditLogSize, AuditQuery, AuditRecord};
pub use conversations::Conversation;
pub(crate) use conversations::{
    chat_evidence_for_chunk, delete_chat_evidence, insert_chat_evidence,
    mark_conversation_qualified, next_chat_evidence_number,
};
pub use documents::{ReasonCount, Stats};
pub(crate) use keys::{ApiKeyRow, NewApiKeyRow};
pub(crate) use ocr::{dequeue_ocr, enqueue_ocr, OcrJob};
pub use ocr::{OcrCounts, LOW_OCR_CONFIDENCE};
pub(crate) use orchestrator::{
    insert_orchestrator_revision, next_orchestrator_revision, orchestrator_config_in,
};
pub(crate) use outbox::{FulltextRow, PageRow};
pub(crate) use pipelines::{
    insert_pipeline, insert_pipeline_version, latest_pipeline_versions, next_pipeline_version,
    LatestPipelineVersion,
};
pub(crate) use records::{bytes_to_path, path_to_bytes, DocumentState};
pub use records::{
    ChunkLocation, ChunkRecord, Collection, DocumentRecord, DocumentStatus, NewChunk, Source,
    SourceStatus,
};
pub use repeats::RepeatChanges;
pub(crate) use repeats::{text_hash, TextCopy};
pub use sign_index::{SharedSignIndex, SignIndex};
pub(crate) use tools::{
    delete_tool, insert_tool, replace_tool_definition, seeded_tool_definition,
    set_derived_seed_definition, tool_definition, tool_type_of,
};
pub use vectors::{dot, EmbeddingCoverage, PendingChunk, VectorKind, VectorTable};

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::error::Result;

/// A write transaction, opened by [`Store::write`]. Code outside `store/` names this type, never
/// the driver's, so the driver stays inside the store (`tests/placement.rs` keeps it so).
pub(crate) type Tx<'conn> = Transaction<'conn>;

/// One open connection to a library's `quarry.db`.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// Seconds since the Unix epoch, as stored in `*_at` columns.
pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// How long a write waits for another connection's: a second writer waits for the first
/// rather than failing at once (readers never wait in WAL mode).
const WRITER_WAIT: Duration = Duration::from_secs(30);

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(WRITER_WAIT)?;
        vectors::register(&conn)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        migrations::migrate(&mut store.conn, path)?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw connection, for `store`'s own files only: every SQL statement lives in `store/`
    /// (a test checks it).
    fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`, so the write lock is taken up front): the
    /// one way any write transaction opens. It takes `&self` because the feature modules hold
    /// the store shared; a nested call cannot silently join the outer transaction, because
    /// SQLite refuses a second `BEGIN` on the connection with an error.
    pub(crate) fn write(&self) -> Result<Tx<'_>> {
        Ok(Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?)
    }

    /// A write transaction for a hint that may be lost (what to embed first), or `None` when
    /// another connection holds the write lock: a search never waits behind the indexer's
    /// batch for it (the next search gives the hint again).
    pub(crate) fn write_if_free(&self) -> Result<Option<Tx<'_>>> {
        self.conn.busy_timeout(Duration::ZERO)?;
        let begun =
            Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Immediate);
        self.conn.busy_timeout(WRITER_WAIT)?;
        match begun {
            Ok(tx) => Ok(Some(tx)),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Runs `read` in one read transaction, so that its queries see one state of the
    /// database whatever another connection commits meanwhile.
    pub(crate) fn snapshot<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        let tx = Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Deferred)?;
        let out = read();
        tx.finish()?;
        out
    }

    pub(crate) fn meta(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }

    pub(crate) fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }

    /// Sets a `meta` value unless one is there already (the first writer wins).
    pub(crate) fn insert_meta_if_absent(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
        Ok(())
    }

    /// Removes a `meta` value.
    pub(crate) fn delete_meta(&self, key: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM meta WHERE key = ?1", [key])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{collection_with_source, temp_store, write_skipped};
    use super::*;

    #[test]
    fn document_states_cover_exactly_a_path_and_what_is_below_it() {
        let (_dir, mut store) = temp_store();
        let source =
            collection_with_source(&mut store, "c", "internal", "test-model", Path::new("/a"));
        let tx = store.write().unwrap();
        for p in [
            "/a/b",
            "/a/b/c.md",
            "/a/b/d/e.md",
            "/a/bc.md",
            "/a/b0",
            "/a/b.md",
        ] {
            write_skipped(&tx, &source, Path::new(p));
        }
        tx.commit().unwrap();
        let mut found: Vec<String> = store
            .document_states(source.id, Path::new("/a/b"))
            .unwrap()
            .into_iter()
            .map(|s| s.path.display().to_string())
            .collect();
        found.sort();
        assert_eq!(found, vec!["/a/b", "/a/b/c.md", "/a/b/d/e.md"]);
        assert_eq!(
            store
                .document_states(source.id, Path::new("/a"))
                .unwrap()
                .len(),
            6
        );
    }

    #[test]
    fn ids_are_never_reused() {
        let (_dir, mut store) = temp_store();
        let a = store
            .create_collection("a", "internal", "english", "test-model")
            .unwrap();
        store.delete_collection("a").unwrap();
        let b = store
            .create_collection("b", "internal", "english", "test-model")
            .unwrap();
        assert!(b.id > a.id);
    }
}
