//! What one file turned out to need, decided on a worker thread: read, hash, compare with
//! what is stored, and extract and chunk only when the content is new.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use super::chunk::chunk_blocks;
use super::extract::{extract, NotIndexed};
use super::options::IndexOptions;
use super::walk::FileStat;
use crate::ids::DocumentId;
use crate::store::{DocumentState, DocumentStatus, NewChunk};

/// What one file turned out to need.
pub(super) enum Outcome {
    /// Same content, new mtime.
    Touched { doc_id: DocumentId, stat: FileStat },
    /// Same content as a document whose file is gone: a rename.
    Renamed {
        stat: FileStat,
        hash: String,
        from: Vec<DocumentId>,
    },
    /// New content.
    Indexed(IndexedFile),
    /// Not indexed.
    NotIndexed(NotIndexedFile),
}

/// A file with new content, extracted and chunked.
pub(super) struct IndexedFile {
    pub stat: FileStat,
    pub hash: String,
    pub title: String,
    pub format: &'static str,
    pub warning: Option<String>,
    pub extracted_bytes: u64,
    pub chunks: Vec<NewChunk>,
    /// What `fetch_source_document` pages through.
    pub reader_text: String,
}

/// A file skipped or failed, with its reason.
pub(super) struct NotIndexedFile {
    pub stat: FileStat,
    pub status: DocumentStatus,
    pub reason: &'static str,
    pub message: String,
}

impl Outcome {
    pub(super) fn not_indexed(
        stat: FileStat,
        status: DocumentStatus,
        reason: &'static str,
        message: String,
    ) -> Outcome {
        Outcome::NotIndexed(NotIndexedFile {
            stat,
            status,
            reason,
            message,
        })
    }
}

/// Reads, hashes and extracts one file. Runs on a worker thread.
pub(super) fn process_file(
    stat: FileStat,
    prev: Option<&DocumentState>,
    removed_by_hash: &HashMap<String, Vec<DocumentId>>,
    options: &IndexOptions,
) -> Outcome {
    let bytes = match read_limited(&stat.path, options.max_file_size) {
        Ok(b) => b,
        Err(n) => return not_indexed(stat, n),
    };
    if bytes.is_empty() {
        return not_indexed(stat, NotIndexed::skipped("empty", "the file is empty"));
    }
    let hash = blake3::hash(&bytes).to_hex().to_string();
    if let Some(p) = prev {
        if p.status == DocumentStatus::Indexed
            && p.has_reader_text
            && p.content_hash.as_deref() == Some(hash.as_str())
        {
            return Outcome::Touched { doc_id: p.id, stat };
        }
    }
    if prev.is_none() {
        if let Some(from) = removed_by_hash.get(&hash) {
            return Outcome::Renamed {
                stat,
                hash,
                from: from.clone(),
            };
        }
    }
    extract_outcome(stat, hash, bytes, options)
}

fn not_indexed(stat: FileStat, n: NotIndexed) -> Outcome {
    match n {
        NotIndexed::Skipped { reason, message } => {
            Outcome::not_indexed(stat, DocumentStatus::Skipped, reason, message)
        }
        NotIndexed::Failed { reason, message } => {
            Outcome::not_indexed(stat, DocumentStatus::Failed, reason, message)
        }
    }
}

/// Extracts and chunks content already read and hashed, within the per-file bounds: at most
/// `max_chunks_per_file` chunks (the head of the file; the document says what was left out),
/// and at most `file_time_budget` (a file that takes longer is left out with reason `timeout`,
/// so one pathological file never holds up the rest of a folder).
pub(super) fn extract_outcome(
    stat: FileStat,
    hash: String,
    bytes: Vec<u8>,
    options: &IndexOptions,
) -> Outcome {
    let path = stat.path.clone();
    let (limits, chunking, cap) = (options.limits, options.chunk, options.max_chunks_per_file);
    let work = move || {
        let extracted = extract(&path, &bytes, &limits)?;
        let mut chunks = chunk_blocks(&extracted.blocks, &chunking);
        let produced = chunks.len();
        chunks.truncate(cap);
        Ok::<_, NotIndexed>((extracted, chunks, produced))
    };
    let budget = options.file_time_budget;
    let (mut extracted, chunks, produced) = match within(budget, work) {
        Some(Ok(done)) => done,
        Some(Err(n)) => return not_indexed(stat, n),
        None => {
            return Outcome::not_indexed(
                stat,
                DocumentStatus::Failed,
                "timeout",
                format!(
                    "extracting and chunking took longer than {} s, so the file was left out and the rest of the folder indexed",
                    budget.as_secs_f64()
                ),
            )
        }
    };
    if produced > chunks.len() {
        let capped = format!(
            "only the first {} of its {produced} chunks are indexed (a file is capped at {} chunks)",
            chunks.len(),
            cap
        );
        extracted.warning = Some(match extracted.warning.take() {
            Some(w) => format!("{w}; {capped}"),
            None => capped,
        });
    }
    if chunks.is_empty() {
        return Outcome::not_indexed(
            stat,
            DocumentStatus::Skipped,
            "no_text",
            "no indexable text".into(),
        );
    }
    let title = extracted
        .title
        .clone()
        .unwrap_or_else(|| file_name(&stat.path));
    Outcome::Indexed(IndexedFile {
        extracted_bytes: extracted.text_bytes() as u64,
        title,
        format: extracted.format,
        warning: extracted.warning,
        reader_text: extracted.reader_text,
        chunks,
        hash,
        stat,
    })
}

/// Runs `work` on a thread of its own and waits at most `budget` for it; `None` when it took
/// longer. The thread then finishes on its own (Rust cannot stop it) and its answer is dropped;
/// what it holds is bounded by the file size limit.
fn within<T: Send + 'static>(
    budget: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("quarry-extract".into())
        .spawn(move || {
            let _ = tx.send(work());
        });
    match spawned {
        Ok(_) => rx.recv_timeout(budget).ok(),
        // No thread to be had (the process is at its limit): the file waits for the next scan.
        Err(e) => {
            tracing::warn!("cannot start an extraction thread: {e}");
            None
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads a file, refusing to read past `max` bytes (it may have grown since the walk).
fn read_limited(path: &Path, max: u64) -> std::result::Result<Vec<u8>, NotIndexed> {
    let io_failure = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => {
            NotIndexed::failed("vanished", "the file was deleted before it could be read")
        }
        std::io::ErrorKind::PermissionDenied => {
            NotIndexed::failed("unreadable", format!("permission denied: {e}"))
        }
        _ => NotIndexed::failed("unreadable", format!("cannot read: {e}")),
    };
    let file = std::fs::File::open(path).map_err(io_failure)?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(io_failure)?;
    if bytes.len() as u64 > max {
        return Err(NotIndexed::skipped(
            "too_large",
            format!("grew past the {} MiB limit while being read", max >> 20),
        ));
    }
    Ok(bytes)
}
