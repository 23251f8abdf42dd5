//! Documents, their chunks and revisions' reader text, as the index and the previews read
//! them; and the library-wide counts.

use std::path::Path;

use rusqlite::{params, OptionalExtension};

use super::{path_to_bytes, ChunkRecord, DocumentRecord, DocumentState, Store};
use crate::error::{Error, Result};
use crate::ids::{ChunkId, DocumentId, RevisionId, SourceId};

impl Store {
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
            ocr: self.ocr_counts()?,
        })
    }
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
    /// Pages read by OCR, and waiting for it.
    pub ocr: super::OcrCounts,
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

const DOCUMENT_SELECT: &str = "SELECT d.id, d.source_id, col.name, d.path, d.size, d.mtime_ns,
    d.content_hash, d.status, d.reason, d.last_error, d.warning, d.title, d.format,
    d.current_revision_id, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id), d.updated_at
    FROM documents d JOIN sources s ON s.id = d.source_id JOIN collections col ON col.id = s.collection_id";

const CHUNK_SELECT: &str = "SELECT c.id, c.document_id, c.revision_id, c.ordinal, c.text,
    c.heading_path, c.page, c.line_start, c.line_end, c.byte_start, c.byte_end, c.token_count,
    d.path, d.title, col.name, d.mtime_ns, c.ocr_confidence
    FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sources s ON s.id = d.source_id
    JOIN collections col ON col.id = s.collection_id";
