//! The OCR lane's queue: documents with pages that have no text layer (images, scans), each
//! with the content it was queued for. The text lane queues them in the same transaction that
//! writes the document; the OCR lane takes them after the text lane and removes each one in
//! the transaction that writes its recognised text. A document's new revision or removal
//! drops its job (a changed file is queued again by the text lane if it still needs OCR).

use std::path::PathBuf;

use rusqlite::{params, Transaction};

use super::{bytes_to_path, now_unix, DocumentStatus, Store};
use crate::error::Result;
use crate::ids::{DocumentId, SourceId};

/// A document waiting for OCR.
#[derive(Debug, Clone)]
pub(crate) struct OcrJob {
    pub document_id: DocumentId,
    pub path: PathBuf,
    /// The content it was queued for: a file changed since is left to the text lane.
    pub content_hash: String,
    /// Pages with no text layer.
    pub pages: u32,
    /// Whether the document is searchable already (by the text of its other pages).
    pub status: DocumentStatus,
}

/// Pages read by OCR and waiting for it (what `quarry status` shows).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct OcrCounts {
    /// Pages whose text was recognised from their pixels, in current revisions.
    pub pages_read: i64,
    /// Of them, pages Tesseract was unsure of (mean word confidence under 60).
    pub pages_low_confidence: i64,
    /// Pages waiting for the OCR lane.
    pub pages_waiting: i64,
    /// Documents waiting for the OCR lane.
    pub documents_waiting: i64,
}

/// Below this mean word confidence a page is flagged: its text is likely garbled.
pub const LOW_OCR_CONFIDENCE: u8 = 60;

/// Queues (or re-queues) a document for OCR.
pub(crate) fn enqueue_ocr(
    tx: &Transaction<'_>,
    document_id: DocumentId,
    content_hash: &str,
    pages: u32,
) -> Result<()> {
    tx.execute(
        "INSERT INTO ocr_queue(document_id, content_hash, pages, queued_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(document_id) DO UPDATE SET content_hash = ?2, pages = ?3, queued_at = ?4",
        params![document_id, content_hash, pages, now_unix()],
    )?;
    Ok(())
}

/// Takes a document off the queue (done, failed, rewritten or gone).
pub(crate) fn dequeue_ocr(tx: &Transaction<'_>, document_id: DocumentId) -> Result<()> {
    tx.execute(
        "DELETE FROM ocr_queue WHERE document_id = ?1",
        [document_id],
    )?;
    Ok(())
}

impl Store {
    /// The source's documents waiting for OCR, oldest first.
    pub(crate) fn ocr_jobs(&self, source_id: SourceId) -> Result<Vec<OcrJob>> {
        let mut stmt = self.conn.prepare(
            "SELECT q.document_id, d.path, q.content_hash, q.pages, d.status
             FROM ocr_queue q JOIN documents d ON d.id = q.document_id
             WHERE d.source_id = ?1 ORDER BY q.queued_at, q.document_id",
        )?;
        let rows = stmt.query_map([source_id], |r| {
            Ok(OcrJob {
                document_id: r.get(0)?,
                path: bytes_to_path(&r.get::<_, Vec<u8>>(1)?),
                content_hash: r.get(2)?,
                pages: r.get(3)?,
                status: DocumentStatus::parse(&r.get::<_, String>(4)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Pages read by OCR and waiting for it, library-wide.
    pub fn ocr_counts(&self) -> Result<OcrCounts> {
        // A page's chunks share its confidence (a page break ends a chunk).
        let (pages_read, pages_low_confidence) = self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(confidence < ?1), 0) FROM (
                 SELECT MIN(c.ocr_confidence) AS confidence FROM chunks c
                 JOIN documents d ON d.id = c.document_id AND d.current_revision_id = c.revision_id
                 WHERE c.ocr_confidence IS NOT NULL GROUP BY c.document_id, c.page)",
            [LOW_OCR_CONFIDENCE],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let (documents_waiting, pages_waiting) = self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(pages), 0) FROM ocr_queue",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(OcrCounts {
            pages_read,
            pages_low_confidence,
            pages_waiting,
            documents_waiting,
        })
    }
}
