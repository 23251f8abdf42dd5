//! Repeated text: a chunk whose text appears word for word in many documents of one source
//! (an mdBook's help block on every page, a site's footer, a section every command's manual
//! shares) is searchable and embedded once, in the document with the fewest chunks; its other
//! copies stay in SQLite (the document view still shows them) but are `repeated`: left out of
//! the full-text index's chunks and the vectors. (Page entries keep the whole text: measured,
//! ranking pages by all they say beats ranking them without their shared sections.)
//!
//! Chunks carry `text_hash` (64 bits of blake3 over the trimmed text). Marking runs after an
//! index run that changed a source: every hash held by at least `min_documents` documents of
//! the source keeps one copy; a copy that stops being repeated (its group shrank, or its kept
//! copy went) comes back as a new chunk row, so the embedding lane, whose cursor only moves
//! forward, embeds it.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Transaction};

use super::Store;
use crate::error::Result;
use crate::ids::{ChunkId, CollectionId, DocumentId, SourceId};

/// The hash chunks are grouped by.
pub(crate) fn text_hash(text: &str) -> i64 {
    let digest = blake3::hash(text.trim().as_bytes());
    i64::from_le_bytes(digest.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// A searchable chunk whose text another chunk shares (see [`Store::copies_of`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextCopy {
    pub text_hash: i64,
    pub id: ChunkId,
    pub document_id: DocumentId,
    /// Chunks its document has.
    pub document_chunks: i64,
}

/// What one marking changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RepeatChanges {
    /// Texts repeated in enough documents.
    pub groups: usize,
    /// Copies newly left out of search.
    pub marked: usize,
    /// Copies brought back (as new chunks).
    pub revived: usize,
}

struct Copy {
    id: ChunkId,
    repeated: bool,
    document_chunks: i64,
}

impl Store {
    /// Marks the repeated copies of `source` (see the module doc); `min_documents` 0 turns
    /// marking off and brings every copy back.
    pub(crate) fn mark_repeats(
        &mut self,
        source_id: SourceId,
        min_documents: usize,
    ) -> Result<RepeatChanges> {
        let tx = self.write()?;
        fill_missing_hashes(&tx, source_id)?;
        let groups = repeated_groups(&tx, source_id, min_documents)?;
        let mut changes = RepeatChanges {
            groups: groups.len(),
            ..Default::default()
        };
        let mut mark = Vec::new();
        let mut revive = Vec::new();
        for copies in groups.values() {
            // Keep the copy already kept, if any; else the one in the smallest document.
            let keeper = copies
                .iter()
                .filter(|c| !c.repeated)
                .chain(copies.iter())
                .min_by_key(|c| (c.repeated, c.document_chunks, c.id))
                .expect("a group has copies");
            if keeper.repeated {
                revive.push(keeper.id);
            }
            mark.extend(
                copies
                    .iter()
                    .filter(|c| c.id != keeper.id && !c.repeated)
                    .map(|c| c.id),
            );
        }
        // Copies whose text is no longer repeated enough come back.
        for id in repeated_outside(&tx, source_id, &groups)? {
            revive.push(id);
        }
        changes.marked = mark.len();
        changes.revived = revive.len();
        mark_copies(&tx, &mark)?;
        for id in revive {
            revive_copy(&tx, id)?;
        }
        tx.commit()?;
        Ok(changes)
    }
}

impl Store {
    /// Every searchable chunk (repeated copies left out) of `collections` whose text hashes
    /// to one of `hashes` held by two chunks or more, with its document's size in chunks.
    pub(crate) fn copies_of(
        &self,
        hashes: &[i64],
        collections: &[CollectionId],
    ) -> Result<Vec<TextCopy>> {
        let mut copies = Vec::new();
        // One statement finds the few texts that have copies at all; only those are read.
        for batch in hashes.chunks(500) {
            let placeholders = vec!["?"; batch.len()].join(",");
            let shared: Vec<i64> = {
                let mut stmt = self.conn.prepare_cached(&format!(
                    "SELECT text_hash FROM chunks WHERE text_hash IN ({placeholders})
                     AND repeated = 0 GROUP BY text_hash HAVING COUNT(*) > 1"
                ))?;
                let rows = stmt.query_map(rusqlite::params_from_iter(batch), |r| r.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            for hash in shared {
                copies.extend(self.copies_with_hash(hash, collections)?);
            }
        }
        // Each document's size once (a print-all page holds many of the copies).
        let mut count = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM chunks WHERE document_id = ?1")?;
        let mut sizes: std::collections::HashMap<DocumentId, i64> = Default::default();
        for copy in &mut copies {
            copy.document_chunks = match sizes.get(&copy.document_id) {
                Some(n) => *n,
                None => {
                    let n: i64 = count.query_row([copy.document_id], |r| r.get(0))?;
                    sizes.insert(copy.document_id, n);
                    n
                }
            };
        }
        Ok(copies)
    }

    /// The searchable copies of one text in `collections` (sizes filled in by the caller).
    fn copies_with_hash(&self, hash: i64, collections: &[CollectionId]) -> Result<Vec<TextCopy>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT c.id, c.document_id, s.collection_id
             FROM chunks c JOIN documents d ON d.id = c.document_id
             JOIN sources s ON s.id = d.source_id
             WHERE c.text_hash = ?1 AND c.repeated = 0",
        )?;
        let rows = stmt.query_map([hash], |r| {
            Ok((
                r.get::<_, CollectionId>(2)?,
                TextCopy {
                    text_hash: hash,
                    id: r.get(0)?,
                    document_id: r.get(1)?,
                    document_chunks: 0,
                },
            ))
        })?;
        let mut copies = Vec::new();
        for row in rows {
            let (collection, copy) = row?;
            // A copy in a collection the search does not cover is none of its business.
            if collections.contains(&collection) {
                copies.push(copy);
            }
        }
        Ok(copies)
    }
}

/// Chunks written before schema v8 get their hash.
fn fill_missing_hashes(tx: &Transaction<'_>, source_id: SourceId) -> Result<()> {
    let missing: Vec<(i64, String)> = {
        let mut stmt = tx.prepare(
            "SELECT c.id, c.text FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE d.source_id = ?1 AND c.text_hash IS NULL",
        )?;
        let rows = stmt.query_map([source_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut update = tx.prepare_cached("UPDATE chunks SET text_hash = ?2 WHERE id = ?1")?;
    for (id, text) in missing {
        update.execute(params![id, text_hash(&text)])?;
    }
    Ok(())
}

/// Every text held by at least `min_documents` documents of the source, with its copies.
fn repeated_groups(
    tx: &Transaction<'_>,
    source_id: SourceId,
    min_documents: usize,
) -> Result<HashMap<i64, Vec<Copy>>> {
    let mut groups: HashMap<i64, Vec<Copy>> = HashMap::new();
    if min_documents == 0 {
        return Ok(groups);
    }
    let mut stmt = tx.prepare(
        "WITH repeated AS (
             SELECT c.text_hash FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE d.source_id = ?1
             GROUP BY c.text_hash HAVING COUNT(DISTINCT c.document_id) >= ?2)
         SELECT c.text_hash, c.id, c.repeated,
                (SELECT COUNT(*) FROM chunks o WHERE o.document_id = c.document_id)
         FROM chunks c JOIN documents d ON d.id = c.document_id
         WHERE d.source_id = ?1 AND c.text_hash IN (SELECT text_hash FROM repeated)",
    )?;
    let rows = stmt.query_map(params![source_id, min_documents as i64], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            Copy {
                id: r.get(1)?,
                repeated: r.get::<_, i64>(2)? != 0,
                document_chunks: r.get(3)?,
            },
        ))
    })?;
    for row in rows {
        let (hash, copy) = row?;
        groups.entry(hash).or_default().push(copy);
    }
    Ok(groups)
}

/// The source's repeated copies whose text is in none of `groups`.
fn repeated_outside(
    tx: &Transaction<'_>,
    source_id: SourceId,
    groups: &HashMap<i64, Vec<Copy>>,
) -> Result<Vec<ChunkId>> {
    let mut stmt = tx.prepare(
        "SELECT c.id, c.text_hash FROM chunks c JOIN documents d ON d.id = c.document_id
         WHERE d.source_id = ?1 AND c.repeated = 1",
    )?;
    let rows = stmt.query_map([source_id], |r| {
        Ok((r.get::<_, ChunkId>(0)?, r.get::<_, i64>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, hash) = row?;
        if !groups.contains_key(&hash) {
            out.push(id);
        }
    }
    Ok(out)
}

/// Leaves copies out of search: flagged, queued for full-text removal, vectors deleted.
fn mark_copies(tx: &Transaction<'_>, copies: &[ChunkId]) -> Result<()> {
    let tables: Vec<String> = {
        let mut stmt = tx.prepare("SELECT table_name FROM vector_tables")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut flag = tx.prepare_cached("UPDATE chunks SET repeated = 1 WHERE id = ?1")?;
    // No document on the row: the page entry keeps the whole text, so it has nothing to
    // refresh.
    let mut outbox =
        tx.prepare_cached("INSERT INTO fulltext_outbox(op, chunk_id) VALUES ('delete', ?1)")?;
    for id in copies {
        flag.execute([id])?;
        outbox.execute([id])?;
        for table in &tables {
            tx.execute(&format!("DELETE FROM {table} WHERE rowid = ?1"), [id])?;
        }
    }
    Ok(())
}

/// Brings a copy back as a new chunk row (a new id, past every embedding cursor), in its
/// place in its document.
fn revive_copy(tx: &Transaction<'_>, id: ChunkId) -> Result<()> {
    let document_id: Option<DocumentId> = tx
        .query_row("SELECT document_id FROM chunks WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()?;
    let Some(document_id) = document_id else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO chunks(document_id, revision_id, ordinal, text, heading_path, page,
         line_start, line_end, byte_start, byte_end, token_count, text_hash, repeated,
         reader_start, reader_end, ocr_confidence)
         SELECT document_id, revision_id, ordinal, text, heading_path, page,
         line_start, line_end, byte_start, byte_end, token_count, text_hash, 0,
         reader_start, reader_end, ocr_confidence
         FROM chunks WHERE id = ?1",
        [id],
    )?;
    let new_id = tx.last_insert_rowid();
    tx.execute("DELETE FROM chunks WHERE id = ?1", [id])?;
    tx.execute(
        "INSERT INTO fulltext_outbox(op, chunk_id, document_id) VALUES ('delete', ?1, ?3),
         ('upsert', ?2, ?3)",
        params![id, new_id, document_id],
    )?;
    Ok(())
}
