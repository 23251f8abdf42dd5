//! Row types and their mapping from SQLite rows.

use std::path::{Path, PathBuf};

use rusqlite::Row;
use serde::Serialize;

use crate::ids::{ChunkId, CollectionId, DocumentId, RevisionId, SourceId};

/// Raw OS bytes of a path: lossless for names that are not UTF-8 or contain newlines.
#[cfg(unix)]
pub(crate) fn path_to_bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

/// Inverse of [`path_to_bytes`].
#[cfg(unix)]
pub(crate) fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

#[cfg(not(unix))]
pub(crate) fn path_to_bytes(path: &Path) -> Vec<u8> {
    path.to_string_lossy().into_owned().into_bytes()
}

#[cfg(not(unix))]
pub(crate) fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

/// How many columns a comma-separated list of column names names.
const fn column_count(columns: &str) -> usize {
    let bytes = columns.as_bytes();
    let mut count = 1;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b',' {
            count += 1;
        }
        i += 1;
    }
    count
}

/// A named set of sources: the `namespace` of `knowledge_search`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Collection {
    /// Never reused.
    pub id: CollectionId,
    /// Unique name: letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// Sensitivity label (e.g. `public`, `internal`, `confidential`).
    pub sensitivity: String,
    /// Stemming language of its full text (`english` by default).
    pub language: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The embedding model whose vectors serve its searches (`None`: lexical only).
    pub embedding_model: Option<String>,
    /// A model being switched to: embedded in the background, used once complete.
    pub pending_model: Option<String>,
}

impl Collection {
    /// The columns [`Collection::from_row`] reads, in order.
    pub(crate) const COLUMNS: &'static str =
        "id, name, sensitivity, language, created_at, embedding_model, pending_model";
    /// How many columns [`Collection::COLUMNS`] names.
    pub(crate) const COLUMN_COUNT: usize = column_count(Self::COLUMNS);

    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Collection {
            id: r.get(0)?,
            name: r.get(1)?,
            sensitivity: r.get(2)?,
            language: r.get(3)?,
            created_at: r.get(4)?,
            embedding_model: r.get(5)?,
            pending_model: r.get(6)?,
        })
    }
}

/// Whether a source's folder was reachable at the last scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum SourceStatus {
    /// Scanned normally.
    Ok,
    /// The folder was gone (unmounted drive, deleted): its documents are kept until it returns
    /// or the source is removed.
    Missing,
}

impl SourceStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SourceStatus::Ok => "ok",
            SourceStatus::Missing => "missing",
        }
    }
}

/// A folder indexed into a collection.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Source {
    /// Never reused.
    pub id: SourceId,
    /// Owning collection.
    pub collection_id: CollectionId,
    /// Owning collection's name.
    pub collection: String,
    /// Absolute folder.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub root: PathBuf,
    /// Globs a file must match (relative to `root`); empty means all.
    pub include: Vec<String>,
    /// Globs that exclude a file or folder.
    pub exclude: Vec<String>,
    /// Reachable at the last scan?
    pub status: SourceStatus,
    /// Why not, if not.
    pub last_error: Option<String>,
    /// Unix seconds of the last completed scan.
    pub last_scan_at: Option<i64>,
    /// Documents searchable now.
    pub documents_indexed: i64,
    /// Files skipped or failed.
    pub documents_not_indexed: i64,
    /// Follow symbolic links whose target is outside `root` (never into the library's data
    /// directory or another source's folder). Default false.
    pub follow_links: bool,
    /// Tesseract languages its scans and images are read in (`eng`, `deu`, ...). Default
    /// `["eng"]`.
    pub ocr_languages: Vec<String>,
}

impl Source {
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let id: SourceId = r.get(0)?;
        let root = bytes_to_path(&r.get::<_, Vec<u8>>(3)?);
        // Unreadable globs fail closed: reading them as "none" would index every file of the
        // folder, excluded ones included.
        let globs = |column: usize, name: &str| -> rusqlite::Result<Vec<String>> {
            let text: String = r.get(column)?;
            serde_json::from_str(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    column,
                    rusqlite::types::Type::Text,
                    format!(
                        "source {id} (`{}`) has unreadable {name} {text:?}: {e}; \
                         remove and re-add the source",
                        root.display()
                    )
                    .into(),
                )
            })
        };
        let ocr_languages = globs(12, "OCR languages")?;
        Ok(Source {
            id,
            collection_id: r.get(1)?,
            collection: r.get(2)?,
            include: globs(4, "include globs")?,
            exclude: globs(5, "exclude globs")?,
            root,
            status: if r.get::<_, String>(6)? == "missing" {
                SourceStatus::Missing
            } else {
                SourceStatus::Ok
            },
            last_error: r.get(7)?,
            last_scan_at: r.get(8)?,
            documents_indexed: r.get(9)?,
            documents_not_indexed: r.get(10)?,
            follow_links: r.get(11)?,
            ocr_languages,
        })
    }
}

/// Where a document stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum DocumentStatus {
    /// Extracted, chunked, searchable.
    Indexed,
    /// Deliberately left out (binary, too large, hidden, empty).
    Skipped,
    /// Could not be read or parsed; earlier chunks, if any, were kept.
    Failed,
}

impl DocumentStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DocumentStatus::Indexed => "indexed",
            DocumentStatus::Skipped => "skipped",
            DocumentStatus::Failed => "failed",
        }
    }

    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "indexed" => DocumentStatus::Indexed,
            "skipped" => DocumentStatus::Skipped,
            _ => DocumentStatus::Failed,
        }
    }
}

/// One file known to the library.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct DocumentRecord {
    /// Never reused.
    pub id: DocumentId,
    /// Owning source.
    pub source_id: SourceId,
    /// Owning collection's name.
    pub collection: String,
    /// Absolute path.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub path: PathBuf,
    /// Bytes on disk at the last scan.
    pub size: Option<i64>,
    /// Modification time (ns since the epoch) at the last scan.
    pub mtime_ns: Option<i64>,
    /// blake3 of the bytes of the indexed revision.
    pub content_hash: Option<String>,
    /// Indexed, skipped or failed.
    pub status: DocumentStatus,
    /// Machine reason for skipped/failed (`binary`, `too_large`, `parse_error`, ...).
    pub reason: Option<String>,
    /// Human message for skipped/failed.
    pub last_error: Option<String>,
    /// Something to know about an indexed file (e.g. its encoding was guessed).
    pub warning: Option<String>,
    /// Title from the document's metadata or first heading, else its file name.
    pub title: Option<String>,
    /// Extractor that read it (`markdown`, `pdf`, ...).
    pub format: Option<String>,
    /// Current revision.
    pub revision_id: Option<RevisionId>,
    /// Current chunks.
    pub chunk_count: i64,
    /// Unix seconds of the last change to this row.
    pub updated_at: i64,
}

impl DocumentRecord {
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(DocumentRecord {
            id: r.get(0)?,
            source_id: r.get(1)?,
            collection: r.get(2)?,
            path: bytes_to_path(&r.get::<_, Vec<u8>>(3)?),
            size: r.get(4)?,
            mtime_ns: r.get(5)?,
            content_hash: r.get(6)?,
            status: DocumentStatus::parse(&r.get::<_, String>(7)?),
            reason: r.get(8)?,
            last_error: r.get(9)?,
            warning: r.get(10)?,
            title: r.get(11)?,
            format: r.get(12)?,
            revision_id: r.get(13)?,
            chunk_count: r.get(14)?,
            updated_at: r.get(15)?,
        })
    }
}

/// Where a chunk came from. Lines are 1-based and inclusive; byte ranges are into the file for
/// text formats and into the extracted text for containers (PDF, DOCX, ...). Pages are 1-based.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ChunkLocation {
    /// PDF page.
    pub page: Option<u32>,
    /// First line.
    pub line_start: Option<u32>,
    /// Last line.
    pub line_end: Option<u32>,
    /// First byte.
    pub byte_start: Option<u64>,
    /// One past the last byte.
    pub byte_end: Option<u64>,
    /// Recognised from the page's pixels by OCR, with Tesseract's mean word confidence (0 to
    /// 100); absent for text the file carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocr_confidence: Option<u8>,
}

impl ChunkLocation {
    /// How a hit or a citation from recognised text is marked: "recognised text (OCR), page
    /// 3", flagged when Tesseract was unsure. `None` for text the file carries.
    pub fn ocr_note(&self) -> Option<String> {
        let confidence = self.ocr_confidence?;
        let mut note = String::from("recognised text (OCR)");
        if let Some(page) = self.page {
            note.push_str(&format!(", page {page}"));
        }
        if confidence < super::LOW_OCR_CONFIDENCE {
            note.push_str(&format!(", low confidence ({confidence}%)"));
        }
        Some(note)
    }
}

/// A chunk about to be written.
#[derive(Debug, Clone)]
pub struct NewChunk {
    /// Text as searched and shown.
    pub text: String,
    /// Headings above it, outermost first, joined with ` › `.
    pub heading_path: String,
    /// Where it came from.
    pub location: ChunkLocation,
    /// Approximate model tokens.
    pub token_count: u32,
    /// Byte range in the revision's reader text (what `fetch_source_document` pages).
    pub reader_span: Option<(u64, u64)>,
}

/// A stored chunk with what a hit needs to show it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ChunkRecord {
    /// Never reused; equals the vector rowid and the full-text `chunk_id`.
    pub id: ChunkId,
    /// Owning document.
    pub document_id: DocumentId,
    /// The revision it was cut from.
    pub revision_id: RevisionId,
    /// Position in the document, from 0.
    pub ordinal: i64,
    /// Text.
    pub text: String,
    /// Headings above it.
    pub heading_path: String,
    /// Where it came from.
    pub location: ChunkLocation,
    /// Approximate model tokens.
    pub token_count: i64,
    /// The document's path.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub path: PathBuf,
    /// The document's title.
    pub title: Option<String>,
    /// The collection's name.
    pub collection: String,
    /// The document's modification time (ns).
    pub mtime_ns: Option<i64>,
}

impl ChunkRecord {
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(ChunkRecord {
            id: r.get(0)?,
            document_id: r.get(1)?,
            revision_id: r.get(2)?,
            ordinal: r.get(3)?,
            text: r.get(4)?,
            heading_path: r.get(5)?,
            location: ChunkLocation {
                page: r.get(6)?,
                line_start: r.get(7)?,
                line_end: r.get(8)?,
                byte_start: r.get::<_, Option<i64>>(9)?.map(|v| v as u64),
                byte_end: r.get::<_, Option<i64>>(10)?.map(|v| v as u64),
                ocr_confidence: r.get(16)?,
            },
            token_count: r.get(11)?,
            path: bytes_to_path(&r.get::<_, Vec<u8>>(12)?),
            title: r.get(13)?,
            collection: r.get(14)?,
            mtime_ns: r.get(15)?,
        })
    }
}

/// What change detection needs to know of a stored document.
#[derive(Debug, Clone)]
pub(crate) struct DocumentState {
    pub id: DocumentId,
    pub path: PathBuf,
    pub size: Option<i64>,
    pub mtime_ns: Option<i64>,
    pub content_hash: Option<String>,
    pub status: DocumentStatus,
    /// Unknown (NULL) for rows written before inodes were recorded, or off Unix.
    pub inode: Option<i64>,
    /// Whether its current revision's reader text is kept (revisions indexed before Quarry
    /// kept them are read again once, so `fetch_source_document` can page them).
    pub has_reader_text: bool,
}

impl DocumentState {
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(DocumentState {
            id: r.get(0)?,
            path: bytes_to_path(&r.get::<_, Vec<u8>>(1)?),
            size: r.get(2)?,
            mtime_ns: r.get(3)?,
            content_hash: r.get(4)?,
            status: DocumentStatus::parse(&r.get::<_, String>(5)?),
            inode: r.get(6)?,
            has_reader_text: r.get(7)?,
        })
    }
}

/// What an evidence check needs to know of a document: its current revision and the
/// collection (name and sensitivity) it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct DocumentAccess {
    pub current_revision_id: Option<RevisionId>,
    pub collection: String,
    pub sensitivity: String,
}

impl super::Store {
    /// The current revision and collection of a document, if it is still in the library.
    pub(crate) fn document_access(
        &self,
        document_id: DocumentId,
    ) -> crate::error::Result<Option<DocumentAccess>> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn
            .query_row(
                "SELECT d.current_revision_id, col.name, col.sensitivity FROM documents d
                 JOIN sources s ON s.id = d.source_id JOIN collections col ON col.id = s.collection_id
                 WHERE d.id = ?1",
                [document_id],
                |r| {
                    Ok(DocumentAccess {
                        current_revision_id: r.get(0)?,
                        collection: r.get(1)?,
                        sensitivity: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// How many (source, path) pairs have more than one document row (0 in a sound library).
    pub(crate) fn duplicate_document_paths(&self) -> crate::error::Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM (SELECT 1 FROM documents GROUP BY source_id, path HAVING COUNT(*) > 1)",
            [],
            |r| r.get(0),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognised_text_says_so_and_flags_an_unsure_page() {
        let mut location = ChunkLocation {
            page: Some(3),
            ..ChunkLocation::default()
        };
        assert_eq!(location.ocr_note(), None, "the file's own text");
        location.ocr_confidence = Some(91);
        assert_eq!(
            location.ocr_note().as_deref(),
            Some("recognised text (OCR), page 3")
        );
        location.ocr_confidence = Some(41);
        assert_eq!(
            location.ocr_note().as_deref(),
            Some("recognised text (OCR), page 3, low confidence (41%)")
        );
    }
}
