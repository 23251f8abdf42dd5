//! Document writes, each inside the caller's transaction so an indexing batch commits (or
//! vanishes) as a whole. Every chunk insert or delete queues a full-text outbox row.

use std::path::{Path, PathBuf};

use rusqlite::{params, OptionalExtension, Transaction};

use super::{bytes_to_path, now_unix, path_to_bytes, DocumentStatus, NewChunk};
use crate::error::{Error, Result};
use crate::ids::{DocumentId, SourceId};

/// Facts about a file on disk.
#[derive(Debug, Clone)]
pub(crate) struct FileFacts<'a> {
    pub path: &'a Path,
    pub size: i64,
    pub mtime_ns: i64,
    pub inode: Option<i64>,
}

/// What extraction produced, less the chunks.
#[derive(Debug, Clone)]
pub(crate) struct Extraction<'a> {
    pub content_hash: &'a str,
    pub title: &'a str,
    pub format: &'a str,
    pub warning: Option<&'a str>,
    pub extracted_bytes: i64,
    /// The text `fetch_source_document` pages through (see `ingest::extract::reader`).
    pub reader_text: &'a str,
}

fn document_id(
    tx: &Transaction<'_>,
    source_id: SourceId,
    path: &Path,
) -> Result<Option<DocumentId>> {
    Ok(tx
        .query_row(
            "SELECT id FROM documents WHERE source_id = ?1 AND path = ?2",
            params![source_id, path_to_bytes(path)],
            |r| r.get(0),
        )
        .optional()?)
}

/// The stored path of a document. A missing row is a bug in the caller (it read the id in
/// this same transaction), so it is an [`Error::Internal`] naming the id.
pub(crate) fn document_path(tx: &Transaction<'_>, id: DocumentId) -> Result<PathBuf> {
    let bytes: Option<Vec<u8>> = tx
        .query_row("SELECT path FROM documents WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()?;
    bytes
        .map(|b| bytes_to_path(&b))
        .ok_or_else(|| Error::Internal(format!("no document with id {id}")))
}

fn queue_chunk_deletes(tx: &Transaction<'_>, document_id: DocumentId) -> Result<()> {
    queue_outbox_deletes(tx, document_id)?;
    tx.execute("DELETE FROM chunks WHERE document_id = ?1", [document_id])?;
    Ok(())
}

fn queue_outbox_deletes(tx: &Transaction<'_>, document_id: DocumentId) -> Result<()> {
    tx.execute(
        "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
         SELECT 'delete', id, document_id FROM chunks WHERE document_id = ?1",
        [document_id],
    )?;
    Ok(())
}

/// The chunks a new revision replaces: their ids by text, and the title they were embedded
/// under (a vector is of the title and the text).
struct Replaced {
    ids_by_text: std::collections::HashMap<i64, i64>,
    title: String,
    last_id: i64,
}

fn replaced_chunks(tx: &Transaction<'_>, document_id: DocumentId) -> Result<Replaced> {
    let title: Option<String> = tx.query_row(
        "SELECT title FROM documents WHERE id = ?1",
        [document_id],
        |r| r.get(0),
    )?;
    let mut stmt = tx.prepare_cached(
        "SELECT id, text_hash FROM chunks WHERE document_id = ?1 AND repeated = 0 AND text_hash IS NOT NULL",
    )?;
    let ids_by_text = stmt
        .query_map([document_id], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(0)?))
        })?
        .collect::<rusqlite::Result<std::collections::HashMap<_, _>>>()?;
    let last_id: i64 = tx.query_row(
        "SELECT COALESCE(MAX(id), 0) FROM chunks WHERE document_id = ?1",
        [document_id],
        |r| r.get(0),
    )?;
    Ok(Replaced {
        ids_by_text,
        title: title.unwrap_or_default(),
        last_id,
    })
}

/// Writes a new revision of a document: old chunks go, new ones come, in this transaction. A new
/// chunk whose text (and the document's title) is unchanged keeps the old chunk's vectors, so
/// an edit re-embeds only what it changed.
pub(crate) fn write_revision(
    tx: &Transaction<'_>,
    source_id: SourceId,
    file: &FileFacts<'_>,
    extraction: &Extraction<'_>,
    chunks: &[NewChunk],
) -> Result<DocumentId> {
    let now = now_unix();
    let mut replaced = None;
    let doc_id = match document_id(tx, source_id, file.path)? {
        Some(id) => {
            replaced = Some(replaced_chunks(tx, id)?);
            queue_outbox_deletes(tx, id)?;
            tx.execute(
                "UPDATE documents SET size = ?2, mtime_ns = ?3, content_hash = ?4,
                 status = 'indexed', reason = NULL, last_error = NULL, warning = ?5, title = ?6,
                 format = ?7, updated_at = ?8, inode = ?9 WHERE id = ?1",
                params![
                    id,
                    file.size,
                    file.mtime_ns,
                    extraction.content_hash,
                    extraction.warning,
                    extraction.title,
                    extraction.format,
                    now,
                    file.inode
                ],
            )?;
            id
        }
        None => {
            tx.execute(
                "INSERT INTO documents(source_id, path, path_display, size, mtime_ns, content_hash,
                 status, warning, title, format, updated_at, inode)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'indexed', ?7, ?8, ?9, ?10, ?11)",
                params![
                    source_id,
                    path_to_bytes(file.path),
                    file.path.to_string_lossy(),
                    file.size,
                    file.mtime_ns,
                    extraction.content_hash,
                    extraction.warning,
                    extraction.title,
                    extraction.format,
                    now,
                    file.inode
                ],
            )?;
            DocumentId(tx.last_insert_rowid())
        }
    };
    tx.execute(
        "INSERT INTO revisions(document_id, content_hash, size, mtime_ns, extracted_bytes, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            doc_id,
            extraction.content_hash,
            file.size,
            file.mtime_ns,
            extraction.extracted_bytes,
            now
        ],
    )?;
    let revision_id = tx.last_insert_rowid();
    tx.execute(
        "UPDATE documents SET current_revision_id = ?2 WHERE id = ?1",
        params![doc_id, revision_id],
    )?;
    // A job queued for the content this revision replaces is stale.
    super::dequeue_ocr(tx, doc_id)?;
    write_reader_text(tx, doc_id, revision_id, extraction.reader_text)?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO chunks(document_id, revision_id, ordinal, text, heading_path, page,
         line_start, line_end, byte_start, byte_end, token_count, text_hash,
         reader_start, reader_end, ocr_confidence)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?;
    let mut outbox = tx.prepare_cached(
        "INSERT INTO fulltext_outbox(op, chunk_id, document_id) VALUES ('upsert', ?1, ?2)",
    )?;
    // (old chunk, new chunk) with the same text.
    let mut unchanged: Vec<(i64, i64)> = Vec::new();
    for (ordinal, chunk) in chunks.iter().enumerate() {
        let loc = &chunk.location;
        insert.execute(params![
            doc_id,
            revision_id,
            ordinal as i64,
            chunk.text,
            chunk.heading_path,
            loc.page,
            loc.line_start,
            loc.line_end,
            loc.byte_start.map(|v| v as i64),
            loc.byte_end.map(|v| v as i64),
            chunk.token_count,
            super::text_hash(&chunk.text),
            chunk.reader_span.map(|r| r.0 as i64),
            chunk.reader_span.map(|r| r.1 as i64),
            loc.ocr_confidence,
        ])?;
        let new_id = tx.last_insert_rowid();
        outbox.execute(params![new_id, doc_id])?;
        if let Some(old) = replaced
            .as_ref()
            .filter(|r| r.title == extraction.title)
            .and_then(|r| r.ids_by_text.get(&super::text_hash(&chunk.text)))
        {
            unchanged.push((*old, new_id));
        }
    }
    if let Some(replaced) = replaced {
        // Before the old chunks go: their delete trigger takes their vectors with them.
        super::vectors::carry_vectors_over(tx, &unchanged)?;
        tx.execute(
            "DELETE FROM chunks WHERE document_id = ?1 AND id <= ?2",
            params![doc_id, replaced.last_id],
        )?;
    }
    Ok(doc_id)
}

/// Keeps the new revision's reader text, compressed, and only that: older revisions' texts go
/// (their references are stale, so nothing may read them).
fn write_reader_text(
    tx: &Transaction<'_>,
    doc_id: DocumentId,
    revision_id: i64,
    text: &str,
) -> Result<()> {
    tx.execute(
        "DELETE FROM revision_texts WHERE document_id = ?1",
        [doc_id],
    )?;
    let compressed = zstd::bulk::compress(text.as_bytes(), 3)
        .map_err(|e| Error::Internal(format!("compressing a revision's text: {e}")))?;
    tx.execute(
        "INSERT INTO revision_texts(revision_id, document_id, text_len, zstd) VALUES (?1, ?2, ?3, ?4)",
        params![revision_id, doc_id, text.len() as i64, compressed],
    )?;
    Ok(())
}

/// Records a file that was not indexed. A skipped file loses its chunks (it is out of scope
/// now); a failed one keeps the chunks of its last good revision, so a file caught mid-write or
/// corrupted later never makes earlier search results vanish.
pub(crate) fn write_not_indexed(
    tx: &Transaction<'_>,
    source_id: SourceId,
    file: &FileFacts<'_>,
    status: DocumentStatus,
    reason: &str,
    message: &str,
) -> Result<DocumentId> {
    let now = now_unix();
    let id = match document_id(tx, source_id, file.path)? {
        Some(id) => {
            if status == DocumentStatus::Skipped {
                queue_chunk_deletes(tx, id)?;
                tx.execute(
                    "UPDATE documents SET content_hash = NULL, current_revision_id = NULL,
                     title = NULL, format = NULL, warning = NULL WHERE id = ?1",
                    [id],
                )?;
            }
            tx.execute(
                "UPDATE documents SET size = ?2, mtime_ns = ?3, status = ?4, reason = ?5,
                 last_error = ?6, updated_at = ?7, inode = ?8 WHERE id = ?1",
                params![
                    id,
                    file.size,
                    file.mtime_ns,
                    status.as_str(),
                    reason,
                    message,
                    now,
                    file.inode
                ],
            )?;
            id
        }
        None => {
            tx.execute(
                "INSERT INTO documents(source_id, path, path_display, size, mtime_ns, status,
                 reason, last_error, updated_at, inode)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    source_id,
                    path_to_bytes(file.path),
                    file.path.to_string_lossy(),
                    file.size,
                    file.mtime_ns,
                    status.as_str(),
                    reason,
                    message,
                    now,
                    file.inode
                ],
            )?;
            DocumentId(tx.last_insert_rowid())
        }
    };
    // Whatever was queued for OCR belongs to content that is gone or unreadable now.
    super::dequeue_ocr(tx, id)?;
    Ok(id)
}

/// Replaces a document's warning (the OCR lane's note on pages it could not read).
pub(crate) fn set_warning(tx: &Transaction<'_>, id: DocumentId, warning: &str) -> Result<()> {
    tx.execute(
        "UPDATE documents SET warning = ?2 WHERE id = ?1",
        params![id, warning],
    )?;
    Ok(())
}

/// Content unchanged, only size, mtime or inode moved (`touch`, an editor's save by rename).
pub(crate) fn touch_document(
    tx: &Transaction<'_>,
    id: DocumentId,
    file: &FileFacts<'_>,
) -> Result<()> {
    tx.execute(
        "UPDATE documents SET size = ?2, mtime_ns = ?3, updated_at = ?4, inode = ?5 WHERE id = ?1",
        params![id, file.size, file.mtime_ns, now_unix(), file.inode],
    )?;
    Ok(())
}

/// A rename with unchanged content: the document keeps its id, revision and chunks; only the
/// path (and a title derived from the file name) change, and its chunks are re-fed to full text.
pub(crate) fn move_document(
    tx: &Transaction<'_>,
    id: DocumentId,
    from: &Path,
    to: &FileFacts<'_>,
) -> Result<()> {
    let old_name = from.file_name().map(|n| n.to_string_lossy().into_owned());
    let new_name = to
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    tx.execute(
        "UPDATE documents SET path = ?2, path_display = ?3, size = ?4, mtime_ns = ?5,
         title = CASE WHEN title IS ?6 THEN ?7 ELSE title END, updated_at = ?8, inode = ?9
         WHERE id = ?1",
        params![
            id,
            path_to_bytes(to.path),
            to.path.to_string_lossy(),
            to.size,
            to.mtime_ns,
            old_name,
            new_name,
            now_unix(),
            to.inode
        ],
    )?;
    tx.execute(
        "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
         SELECT 'upsert', id, document_id FROM chunks WHERE document_id = ?1",
        [id],
    )?;
    Ok(())
}

/// Removes documents whose files are gone.
pub(crate) fn delete_document(tx: &Transaction<'_>, id: DocumentId) -> Result<()> {
    queue_chunk_deletes(tx, id)?;
    tx.execute("DELETE FROM documents WHERE id = ?1", [id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{collection_with_source, temp_store, write_skipped};

    #[test]
    fn document_path_reads_the_stored_path_and_refuses_a_missing_id() {
        let (_dir, mut store) = temp_store();
        let source =
            collection_with_source(&mut store, "c", "internal", "test-model", Path::new("/a"));
        let tx = store.write().unwrap();
        let path = Path::new("/a/b.md");
        write_skipped(&tx, &source, path);
        let id = document_id(&tx, source.id, path).unwrap().unwrap();
        assert_eq!(document_path(&tx, id).unwrap(), PathBuf::from("/a/b.md"));
        let err = document_path(&tx, DocumentId(id.0 + 1000)).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err:?}");
        assert!(
            err.to_string().contains(&(id.0 + 1000).to_string()),
            "{err}"
        );
    }
}
