//! What the full-text index is fed from: the outbox of chunk changes (read in order, pruned
//! once applied), the rows a chunk or a whole page is indexed with, and the ids a rebuild
//! walks.

use rusqlite::{params, OptionalExtension};

use super::Store;
use crate::error::Result;
use crate::ids::{ChunkId, CollectionId, DocumentId};

impl Store {
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
