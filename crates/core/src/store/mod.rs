//! SQLite storage: the library's source of truth.
//!
//! Invariants:
//! - Ids are `INTEGER PRIMARY KEY AUTOINCREMENT`, never reused, so a stale full-text hit can
//!   never point at a newer chunk.
//! - Every change to `chunks` writes a row to `fulltext_outbox` in the same transaction; the
//!   full-text index is fed only from that outbox (see [`crate::fulltext`]).
//! - Paths are stored as raw OS bytes (`path`) plus a lossy display form (`path_display`), so
//!   file names that are not UTF-8, or contain newlines, round-trip exactly.
//! - WAL mode: any number of readers search while one writer commits.

mod audit;
mod conversations;
mod keys;
mod migrations;
mod orchestrator;
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
    chat_evidence_for_chunk, insert_chat_evidence, mark_conversation_qualified,
    next_chat_evidence_number,
};
pub(crate) use keys::{ApiKeyRow, NewApiKeyRow};
pub(crate) use orchestrator::{
    insert_orchestrator_revision, next_orchestrator_revision, orchestrator_config_in,
};
pub(crate) use pipelines::{
    insert_pipeline, insert_pipeline_version, latest_pipeline_versions, next_pipeline_version,
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
pub use vectors::{dot, EmbeddingCoverage, PendingChunk, VectorTable};

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::error::{Error, Result};
use crate::ids::{ChunkId, CollectionId, DocumentId, RevisionId, SourceId};

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

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)?;
        // A second writer waits for the first rather than failing at once; readers never wait
        // in WAL mode.
        conn.busy_timeout(Duration::from_secs(30))?;
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
    pub(crate) fn write(&self) -> Result<Transaction<'_>> {
        Ok(Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?)
    }

    // ---- collections -------------------------------------------------------------------

    /// Creates a collection whose vectors will come from `embedding_model`.
    pub fn create_collection(
        &mut self,
        name: &str,
        sensitivity: &str,
        language: &str,
        embedding_model: &str,
    ) -> Result<Collection> {
        validate_collection_name(name)?;
        if self.collection_by_name(name)?.is_some() {
            return Err(Error::CollectionExists(name.to_string()));
        }
        self.conn.execute(
            "INSERT INTO collections(name, sensitivity, language, created_at, embedding_model)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![name, sensitivity, language, now_unix(), embedding_model],
        )?;
        self.collection_by_name(name)?
            .ok_or_else(|| Error::Internal("collection vanished after insert".into()))
    }

    /// All collections, by name.
    pub fn collections(&self) -> Result<Vec<Collection>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {} FROM collections ORDER BY name",
            Collection::COLUMNS
        ))?;
        let rows = stmt.query_map([], Collection::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The collection with this name, if any.
    pub fn collection_by_name(&self, name: &str) -> Result<Option<Collection>> {
        Ok(self
            .conn
            .query_row(
                &format!(
                    "SELECT {} FROM collections WHERE name = ?1",
                    Collection::COLUMNS
                ),
                [name],
                Collection::from_row,
            )
            .optional()?)
    }

    /// Deletes a collection with its sources, documents and chunks (queued for full-text removal).
    pub fn delete_collection(&mut self, name: &str) -> Result<Collection> {
        let collection = self
            .collection_by_name(name)?
            .ok_or_else(|| Error::CollectionNotFound(name.to_string()))?;
        let tx = self.write()?;
        tx.execute(
            "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
             SELECT 'delete', c.id, c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id
             JOIN sources s ON s.id = d.source_id WHERE s.collection_id = ?1",
            [collection.id],
        )?;
        tx.execute("DELETE FROM collections WHERE id = ?1", [collection.id])?;
        tx.commit()?;
        Ok(collection)
    }

    // ---- sources -----------------------------------------------------------------------

    /// Adds a folder to a collection.
    pub fn create_source(
        &mut self,
        collection: &Collection,
        root: &Path,
        include: &[String],
        exclude: &[String],
    ) -> Result<Source> {
        let bytes = path_to_bytes(root);
        let exists: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM sources WHERE collection_id = ?1 AND root = ?2",
                params![collection.id, bytes],
                |r| r.get(0),
            )
            .optional()?;
        if exists.is_some() {
            return Err(Error::SourceExists {
                path: root.to_path_buf(),
                collection: collection.name.clone(),
            });
        }
        self.conn.execute(
            "INSERT INTO sources(collection_id, root, root_display, include_globs, exclude_globs, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                collection.id,
                bytes,
                root.to_string_lossy(),
                serde_json::to_string(include).expect("a list of strings serialises"),
                serde_json::to_string(exclude).expect("a list of strings serialises"),
                now_unix()
            ],
        )?;
        let id = SourceId(self.conn.last_insert_rowid());
        self.source(id)
    }

    /// Whether a source follows symbolic links whose target leaves its folder.
    pub fn set_source_follow_links(&self, id: SourceId, follow: bool) -> Result<Source> {
        let n = self.conn.execute(
            "UPDATE sources SET follow_links = ?2 WHERE id = ?1",
            params![id, follow],
        )?;
        if n == 0 {
            return Err(Error::SourceNotFound(id.to_string()));
        }
        self.source(id)
    }

    /// All sources with their collection's name.
    pub fn sources(&self) -> Result<Vec<Source>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SOURCE_SELECT} ORDER BY s.id"))?;
        let rows = stmt.query_map([], Source::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every source's folder, without the document counts `sources` adds (a scan asks for
    /// these on every change).
    pub(crate) fn source_roots(&self) -> Result<Vec<(SourceId, PathBuf)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, root FROM sources ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, bytes_to_path(&r.get::<_, Vec<u8>>(1)?)))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One source by id.
    pub fn source(&self, id: SourceId) -> Result<Source> {
        self.conn
            .query_row(
                &format!("{SOURCE_SELECT} WHERE s.id = ?1"),
                [id],
                Source::from_row,
            )
            .optional()?
            .ok_or_else(|| Error::SourceNotFound(id.to_string()))
    }

    /// Deletes a source with its documents and chunks (queued for full-text removal).
    pub fn delete_source(&mut self, id: SourceId) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
             SELECT 'delete', c.id, c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE d.source_id = ?1",
            [id],
        )?;
        let n = tx.execute("DELETE FROM sources WHERE id = ?1", [id])?;
        if n == 0 {
            return Err(Error::SourceNotFound(id.to_string()));
        }
        tx.commit()?;
        Ok(())
    }

    /// Records whether a source's folder is reachable.
    pub(crate) fn set_source_status(
        &self,
        id: SourceId,
        status: SourceStatus,
        error: Option<&str>,
    ) -> Result<()> {
        self.conn.execute(
            "UPDATE sources SET status = ?2, last_error = ?3, last_scan_at = ?4 WHERE id = ?1",
            params![id, status.as_str(), error, now_unix()],
        )?;
        Ok(())
    }

    // ---- documents ---------------------------------------------------------------------

    /// What the index knows of the documents of a source at `scope` or below it, for change
    /// detection. A range scan on the path index: a watcher event in a large source does not
    /// read every row of the source.
    pub(crate) fn document_states(
        &self,
        source_id: SourceId,
        scope: &Path,
    ) -> Result<Vec<DocumentState>> {
        let exact = path_to_bytes(scope);
        let mut below = exact.clone();
        if below.last() != Some(&b'/') {
            below.push(b'/');
        }
        // Every path below `scope` starts with `scope/` and sorts before `scope0` ('0' follows '/').
        let mut upper = below.clone();
        *upper.last_mut().expect("not empty") = b'0';
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, path, size, mtime_ns, content_hash, status, inode,
             EXISTS(SELECT 1 FROM revision_texts t WHERE t.revision_id = current_revision_id)
             FROM documents WHERE source_id = ?1 AND (path = ?2 OR (path >= ?3 AND path < ?4))",
        )?;
        let rows = stmt.query_map(
            params![source_id, exact, below, upper],
            DocumentState::from_row,
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every document at this path, one per collection whose source holds it, oldest first.
    pub fn documents_by_path(&self, path: &Path) -> Result<Vec<DocumentRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{DOCUMENT_SELECT} WHERE d.path = ?1 ORDER BY d.id"
        ))?;
        let rows = stmt.query_map([path_to_bytes(path)], DocumentRecord::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The document with this id, if it is still in the index.
    pub fn document_by_id(&self, id: DocumentId) -> Result<Option<DocumentRecord>> {
        Ok(self
            .conn
            .query_row(
                &format!("{DOCUMENT_SELECT} WHERE d.id = ?1"),
                [id],
                DocumentRecord::from_row,
            )
            .optional()?)
    }

    /// Every document of one source, by path: what a check of the index against its folder
    /// compares.
    pub fn documents_of_source(&self, source_id: SourceId) -> Result<Vec<DocumentRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{DOCUMENT_SELECT} WHERE d.source_id = ?1 ORDER BY d.path"
        ))?;
        let rows = stmt.query_map([source_id], DocumentRecord::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Documents that failed, and indexed ones with a warning, newest first: what the user may
    /// want to act on (`quarry status`'s "recent problems").
    pub fn problem_documents(&self, limit: usize) -> Result<Vec<DocumentRecord>> {
        self.documents_where(
            "(d.status = 'failed' OR (d.status = 'indexed' AND d.warning IS NOT NULL))",
            None,
            limit,
        )
    }

    /// Documents skipped by design (binary, hidden, empty, too large…), newest first.
    pub fn skipped_documents(&self, limit: usize) -> Result<Vec<DocumentRecord>> {
        self.documents_where("d.status = 'skipped'", None, limit)
    }

    /// Every document of one source (`None`: all) that is not cleanly indexed: skipped, failed,
    /// or indexed with a warning, newest first (the desktop Library view's list).
    pub fn problem_documents_in(
        &self,
        source_id: Option<SourceId>,
        limit: usize,
    ) -> Result<Vec<DocumentRecord>> {
        self.documents_where(
            "(d.status != 'indexed' OR d.warning IS NOT NULL)",
            source_id,
            limit,
        )
    }

    /// Documents matching `condition` (a fixed SQL expression over `d`), newest first.
    fn documents_where(
        &self,
        condition: &'static str,
        source_id: Option<SourceId>,
        limit: usize,
    ) -> Result<Vec<DocumentRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{DOCUMENT_SELECT} WHERE {condition}
               AND (?2 IS NULL OR d.source_id = ?2)
             ORDER BY d.updated_at DESC, d.id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map(
            rusqlite::params![limit as i64, source_id],
            DocumentRecord::from_row,
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The current chunks of a document, in order.
    pub fn chunks_of_document(&self, document_id: DocumentId) -> Result<Vec<ChunkRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{CHUNK_SELECT} WHERE c.document_id = ?1 ORDER BY c.ordinal"
        ))?;
        let rows = stmt.query_map([document_id], ChunkRecord::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Chunks of one revision of a document from ordinal `start` on, at most `limit`, in order.
    pub(crate) fn chunks_of_revision_from(
        &self,
        document_id: DocumentId,
        revision_id: RevisionId,
        start: i64,
        limit: i64,
    ) -> Result<Vec<ChunkRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{CHUNK_SELECT} WHERE c.document_id = ?1 AND c.revision_id = ?2 AND c.ordinal >= ?3
             ORDER BY c.ordinal LIMIT ?4"
        ))?;
        let rows = stmt.query_map(
            params![document_id, revision_id, start, limit],
            ChunkRecord::from_row,
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A revision's reader text, when it was kept (revisions indexed before Quarry kept them
    /// have none).
    pub(crate) fn reader_text(&self, revision_id: RevisionId) -> Result<Option<String>> {
        let row: Option<(i64, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT text_len, zstd FROM revision_texts WHERE revision_id = ?1",
                [revision_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((len, compressed)) = row else {
            return Ok(None);
        };
        let broken = |why: String| Error::Internal(format!("revision {revision_id}'s text: {why}"));
        let bytes = zstd::bulk::decompress(&compressed, len.max(0) as usize)
            .map_err(|e| broken(e.to_string()))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| broken(e.to_string()))
    }

    /// Chunks of one revision whose reader-text range overlaps `start..end`, in order, at most
    /// `limit`.
    pub(crate) fn chunks_in_reader_range(
        &self,
        document_id: DocumentId,
        revision_id: RevisionId,
        (start, end): (u64, u64),
        limit: i64,
    ) -> Result<Vec<ChunkRecord>> {
        let mut stmt = self.conn.prepare(&format!(
            "{CHUNK_SELECT} WHERE c.document_id = ?1 AND c.revision_id = ?2
             AND c.reader_start < ?4 AND c.reader_end > ?3 ORDER BY c.ordinal LIMIT ?5"
        ))?;
        let rows = stmt.query_map(
            params![document_id, revision_id, start as i64, end as i64, limit],
            ChunkRecord::from_row,
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Chunks by id (missing ids are left out: they were deleted since).
    pub fn chunks_by_id(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>> {
        // Not `prepare_cached`: see `fulltext_rows`.
        let mut stmt = self
            .conn
            .prepare(&format!("{CHUNK_SELECT} WHERE c.id = ?1"))?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(c) = stmt.query_row([id], ChunkRecord::from_row).optional()? {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// Counts for `quarry status`.
    pub fn stats(&self) -> Result<Stats> {
        let one = |sql: &str| -> Result<i64> { Ok(self.conn.query_row(sql, [], |r| r.get(0))?) };
        let mut by_reason = Vec::new();
        {
            let mut stmt = self.conn.prepare(
                "SELECT status, COALESCE(reason, ''), COUNT(*) FROM documents
                 WHERE status != 'indexed' GROUP BY 1, 2 ORDER BY 3 DESC",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(ReasonCount {
                    status: r.get(0)?,
                    reason: r.get(1)?,
                    count: r.get(2)?,
                })
            })?;
            for row in rows {
                by_reason.push(row?);
            }
        }
        Ok(Stats {
            collections: one("SELECT COUNT(*) FROM collections")?,
            sources: one("SELECT COUNT(*) FROM sources")?,
            documents_indexed: one("SELECT COUNT(*) FROM documents WHERE status = 'indexed'")?,
            documents_skipped: one("SELECT COUNT(*) FROM documents WHERE status = 'skipped'")?,
            documents_failed: one("SELECT COUNT(*) FROM documents WHERE status = 'failed'")?,
            documents_with_warnings: one(
                "SELECT COUNT(*) FROM documents WHERE warning IS NOT NULL",
            )?,
            chunks: one("SELECT COUNT(*) FROM chunks")?,
            chunks_repeated: one("SELECT COUNT(*) FROM chunks WHERE repeated = 1")?,
            extracted_bytes: one("SELECT COALESCE(SUM(r.extracted_bytes), 0) FROM documents d
                 JOIN revisions r ON r.id = d.current_revision_id")?,
            outbox_pending: one("SELECT COUNT(*) FROM fulltext_outbox")?,
            not_indexed_by_reason: by_reason,
        })
    }

    // ---- outbox ------------------------------------------------------------------------

    /// The highest outbox sequence ever issued (0 if none). AUTOINCREMENT keeps it monotonic
    /// even after rows are pruned.
    pub(crate) fn outbox_max_seq(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'fulltext_outbox'",
                [],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    /// Outbox rows after `after_seq`, oldest first.
    pub(crate) fn outbox_after(&self, after_seq: i64, limit: usize) -> Result<Vec<OutboxEntry>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, op, chunk_id, document_id FROM fulltext_outbox
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after_seq, limit as i64], |r| {
            Ok(OutboxEntry {
                seq: r.get(0)?,
                upsert: r.get::<_, String>(1)? == "upsert",
                chunk_id: r.get(2)?,
                document_id: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Drops outbox rows the full-text index has durably applied.
    pub(crate) fn outbox_prune(&self, through_seq: i64) -> Result<()> {
        self.conn
            .execute("DELETE FROM fulltext_outbox WHERE seq <= ?1", [through_seq])?;
        self.set_meta("fulltext_pruned_through", &through_seq.to_string())
    }

    /// The lowest sequence the outbox can still replay from.
    pub(crate) fn outbox_pruned_through(&self) -> Result<i64> {
        Ok(self
            .meta("fulltext_pruned_through")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Calls `each` with everything the full-text index needs for each chunk of `ids` that
    /// still exists.
    ///
    /// One statement serves the whole list. A statement from `prepare_cached` has its bindings
    /// cleared when it goes back to the cache, and SQLite (built with STAT4) then re-plans this
    /// join on the next use: that re-preparation was a sixth of the indexing CPU time.
    pub(crate) fn fulltext_rows(
        &self,
        ids: impl IntoIterator<Item = ChunkId>,
        mut each: impl FnMut(FulltextRow) -> Result<()>,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT c.id, d.id, col.id, col.language, COALESCE(d.title, ''), c.heading_path, c.text
             FROM chunks c JOIN documents d ON d.id = c.document_id
             JOIN sources s ON s.id = d.source_id JOIN collections col ON col.id = s.collection_id
             WHERE c.id = ?1 AND c.repeated = 0",
        )?;
        for id in ids {
            let row = stmt
                .query_row([id], |r| {
                    Ok(FulltextRow {
                        chunk_id: r.get(0)?,
                        document_id: r.get(1)?,
                        collection_id: r.get(2)?,
                        language: r.get(3)?,
                        title: r.get(4)?,
                        heading_path: r.get(5)?,
                        text: r.get(6)?,
                    })
                })
                .optional()?;
            if let Some(row) = row {
                each(row)?;
            }
        }
        Ok(())
    }

    /// Each of these documents that has chunks, whole: its title, then its chunks' text in
    /// order (repeated copies too: a page is ranked by all it says, as plain document BM25
    /// ranks it).
    pub(crate) fn page_rows(
        &self,
        documents: impl IntoIterator<Item = DocumentId>,
        mut each: impl FnMut(PageRow) -> Result<()>,
    ) -> Result<()> {
        let mut head = self.conn.prepare_cached(
            "SELECT col.id, col.language, COALESCE(d.title, '') FROM documents d
             JOIN sources s ON s.id = d.source_id JOIN collections col ON col.id = s.collection_id
             WHERE d.id = ?1",
        )?;
        let mut texts = self
            .conn
            .prepare_cached("SELECT text FROM chunks WHERE document_id = ?1 ORDER BY ordinal")?;
        for document_id in documents {
            let Some((collection_id, language, mut text)) = head
                .query_row([document_id], |r| {
                    Ok((
                        r.get::<_, CollectionId>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })
                .optional()?
            else {
                continue;
            };
            let mut chunks = 0;
            for chunk in texts.query_map([document_id], |r| r.get::<_, String>(0))? {
                text.push('\n');
                text.push_str(&chunk?);
                chunks += 1;
            }
            if chunks > 0 {
                each(PageRow {
                    document_id,
                    collection_id,
                    language,
                    text,
                })?;
            }
        }
        Ok(())
    }

    /// Every document that has chunks, ascending: for rebuilding the full-text index.
    pub(crate) fn documents_with_chunks(&self) -> Result<Vec<DocumentId>> {
        self.ids("SELECT DISTINCT document_id FROM chunks ORDER BY document_id")
    }

    /// The ids of the chunks search holds (every chunk but repeated copies), ascending: for
    /// rebuilding or verifying the full-text index.
    pub fn searchable_chunk_ids(&self) -> Result<Vec<ChunkId>> {
        self.ids("SELECT id FROM chunks WHERE repeated = 0 ORDER BY id")
    }

    /// All chunk ids, ascending, repeated copies included.
    pub fn all_chunk_ids(&self) -> Result<Vec<ChunkId>> {
        self.ids("SELECT id FROM chunks ORDER BY id")
    }

    /// The first column of every row `sql` selects.
    fn ids<T: rusqlite::types::FromSql>(&self, sql: &str) -> Result<Vec<T>> {
        let mut stmt = self.conn.prepare(sql)?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
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

/// One pending change for the full-text index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutboxEntry {
    pub seq: i64,
    pub upsert: bool,
    pub chunk_id: ChunkId,
    /// Absent on rows written before schema v8.
    pub document_id: Option<DocumentId>,
}

/// What the full-text index holds for a whole document: its title and all its chunks' text.
#[derive(Debug, Clone)]
pub(crate) struct PageRow {
    pub document_id: DocumentId,
    pub collection_id: CollectionId,
    pub language: String,
    pub text: String,
}

/// The fields the full-text index holds for a chunk.
#[derive(Debug, Clone)]
pub(crate) struct FulltextRow {
    pub chunk_id: ChunkId,
    pub document_id: DocumentId,
    pub collection_id: CollectionId,
    pub language: String,
    pub title: String,
    pub heading_path: String,
    pub text: String,
}

/// Library-wide counts.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Stats {
    /// Collections.
    pub collections: i64,
    /// Sources (folders).
    pub sources: i64,
    /// Documents searchable now.
    pub documents_indexed: i64,
    /// Files deliberately left out (binary, too large, hidden, empty).
    pub documents_skipped: i64,
    /// Files that could not be read or parsed.
    pub documents_failed: i64,
    /// Indexed documents with a warning (e.g. decoded from a legacy encoding).
    pub documents_with_warnings: i64,
    /// Chunks.
    pub chunks: i64,
    /// Of them, copies of a text repeated across a source's documents, left out of search
    /// (see `quarry index --repeat-documents`).
    pub chunks_repeated: i64,
    /// Bytes of text extracted from the current revisions.
    pub extracted_bytes: i64,
    /// Changes SQLite has that the full-text index has not applied yet.
    pub outbox_pending: i64,
    /// Skipped and failed files grouped by reason.
    pub not_indexed_by_reason: Vec<ReasonCount>,
}

/// How many files share a status and reason.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ReasonCount {
    /// `skipped` or `failed`.
    pub status: String,
    /// Machine reason (`binary`, `too_large`, `parse_error`, ...).
    pub reason: String,
    /// How many files.
    pub count: i64,
}

fn validate_collection_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 64 {
        Some("it is longer than 64 characters")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        Some("use letters, digits, '-', '_' and '.' only")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidCollectionName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

const SOURCE_SELECT: &str = "SELECT s.id, s.collection_id, c.name, s.root, s.include_globs,
    s.exclude_globs, s.status, s.last_error, s.last_scan_at,
    (SELECT COUNT(*) FROM documents d WHERE d.source_id = s.id AND d.status = 'indexed'),
    (SELECT COUNT(*) FROM documents d WHERE d.source_id = s.id AND d.status != 'indexed'),
    s.follow_links
    FROM sources s JOIN collections c ON c.id = s.collection_id";

const DOCUMENT_SELECT: &str = "SELECT d.id, d.source_id, col.name, d.path, d.size, d.mtime_ns,
    d.content_hash, d.status, d.reason, d.last_error, d.warning, d.title, d.format,
    d.current_revision_id, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id), d.updated_at
    FROM documents d JOIN sources s ON s.id = d.source_id JOIN collections col ON col.id = s.collection_id";

pub(crate) const CHUNK_SELECT: &str =
    "SELECT c.id, c.document_id, c.revision_id, c.ordinal, c.text,
    c.heading_path, c.page, c.line_start, c.line_end, c.byte_start, c.byte_end, c.token_count,
    d.path, d.title, col.name, d.mtime_ns
    FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sources s ON s.id = d.source_id
    JOIN collections col ON col.id = s.collection_id";

#[cfg(test)]
mod tests {
    use super::test_support::{collection_with_source, temp_store, write_skipped};
    use super::*;

    #[test]
    fn collection_names_are_validated() {
        assert!(validate_collection_name("notes-2024_a.b").is_ok());
        for bad in ["", "has space", "slash/x", &"x".repeat(65)] {
            let err = validate_collection_name(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_collection_name", "{bad}");
        }
    }

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
