//! What one file turned out to need, decided on a worker thread: read, hash, compare with
//! what is stored, and extract and chunk only when the content is new.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use super::chunk::chunk_blocks;
use super::extract::{extract, timeout, Budget, NotIndexed};
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
        from: Vec<DocumentId>,
    },
    /// New content.
    Indexed(IndexedFile),
    /// New content with no text layer (an image, a scan): it waits for the OCR lane.
    AwaitingOcr {
        stat: FileStat,
        hash: String,
        /// Pages without a text layer.
        pages: u32,
    },
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
    /// Pages with no text layer, which the OCR lane reads next.
    pub ocr_pages: u32,
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
    let bytes = match read_checked(&stat, options.max_file_size) {
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
                from: from.clone(),
            };
        }
    }
    extract_outcome(stat, hash, bytes, options)
}

pub(super) fn not_indexed(stat: FileStat, n: NotIndexed) -> Outcome {
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
/// text in proportion to the file's size (see `extract::Budget`), and at most
/// `file_time_budget` (a file that takes longer is left out with reason `timeout`, so one
/// pathological file never holds up the rest of a folder, and its extraction stops itself).
pub(super) fn extract_outcome(
    stat: FileStat,
    hash: String,
    bytes: Vec<u8>,
    options: &IndexOptions,
) -> Outcome {
    let path = stat.path.clone();
    let (limits, chunking, cap) = (options.limits, options.chunk, options.max_chunks_per_file);
    let budget = Budget::new(bytes.len() as u64, options.file_time_budget);
    let work = move || {
        let extracted = extract(&path, &bytes, &limits, &budget)?;
        let mut chunks = chunk_blocks(&extracted.blocks, &chunking, &budget)?;
        let produced = chunks.len();
        chunks.truncate(cap);
        Ok::<_, NotIndexed>((extracted, chunks, produced))
    };
    let (mut extracted, chunks, produced) = match within(options.file_time_budget, work) {
        Some(Ok(done)) => done,
        Some(Err(n)) => return not_indexed(stat, n),
        None => return not_indexed(stat, timeout(options.file_time_budget)),
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
    let ocr_pages = extracted.ocr_pages.len() as u32;
    if chunks.is_empty() && ocr_pages > 0 {
        return Outcome::AwaitingOcr {
            stat,
            hash,
            pages: ocr_pages,
        };
    }
    if ocr_pages > 0 {
        let note = format!("{ocr_pages} page(s) have no text layer; OCR reads them next");
        extracted.warning = Some(match extracted.warning.take() {
            Some(w) => format!("{w}; {note}"),
            None => note,
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
        ocr_pages,
        chunks,
        hash,
        stat,
    })
}

/// Stack of an extraction thread. No extractor of ours recurses over input nesting, and the
/// parsers we do not own are kept from it (`pdf_scan`), so this is headroom, not a bound: a
/// stack overflow aborts the process and cannot be caught.
pub(super) const EXTRACT_STACK: usize = 64 << 20;

/// Runs `work` on a thread of its own and waits at most `budget` for it; `None` when it took
/// longer. The work checks the same deadline in its loops (`extract::Budget`), so it stops
/// soon after and its answer is dropped.
fn within<T: Send + 'static>(
    budget: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("quarry-extract".into())
        .stack_size(EXTRACT_STACK)
        .spawn(move || {
            let _ = tx.send(work());
        });
    match spawned {
        Ok(thread) => match rx.recv_timeout(budget) {
            Ok(done) => {
                // It has sent its answer and is ending: joined, never detached (see `ABANDONED`).
                let _ = thread.join();
                Some(done)
            }
            Err(_) => {
                abandon(thread);
                None
            }
        },
        // No thread to be had (the process is at its limit): the file waits for the next scan.
        Err(e) => {
            tracing::warn!("cannot start an extraction thread: {e}");
            None
        }
    }
}

/// Extraction threads past their budget, joined once they have stopped. A thread handle is
/// never dropped while its thread may be ending: dropping detaches it, and glibc's
/// `pthread_detach` still reads the thread's descriptor after marking it detached, while the
/// thread, seeing itself detached as it exits, frees its stack; a stack this large is unmapped
/// rather than cached, so that read faulted (a SIGSEGV in `watch_churn`, once in five runs of
/// the suite). Statics are never dropped, so what is left at exit is not detached either.
static ABANDONED: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());

fn abandon(thread: std::thread::JoinHandle<()>) {
    let mut abandoned = ABANDONED.lock().unwrap_or_else(|e| e.into_inner());
    let (stopped, running): (Vec<_>, Vec<_>) = abandoned.drain(..).partition(|t| t.is_finished());
    *abandoned = running;
    abandoned.push(thread);
    drop(abandoned);
    for thread in stopped {
        let _ = thread.join();
    }
}

pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads the file the walk saw, refusing to read past `max` bytes (it may have grown since).
///
/// Between the walk and the read, whoever can write into the folder can swap the file for a
/// symbolic link to any file this user can read (which would then be indexed and searchable
/// for every key on the collection), or for a named pipe (which would block the read for
/// good). So the file is opened without blocking, and read only if the opened descriptor is
/// still a regular file, the one (device and inode) the walk saw.
pub(super) fn read_checked(stat: &FileStat, max: u64) -> std::result::Result<Vec<u8>, NotIndexed> {
    let io_failure = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => {
            NotIndexed::failed("vanished", "the file was deleted before it could be read")
        }
        std::io::ErrorKind::PermissionDenied => {
            NotIndexed::failed("unreadable", format!("permission denied: {e}"))
        }
        _ => NotIndexed::failed("unreadable", format!("cannot read: {e}")),
    };
    let file = open_nonblocking(&stat.path).map_err(io_failure)?;
    let opened = file.metadata().map_err(io_failure)?;
    if !opened.is_file() {
        return Err(NotIndexed::skipped(
            "not_regular_file",
            "not a regular file (FIFO, socket or device): it was replaced after the folder was walked",
        ));
    }
    if !same_file(stat, &opened) {
        return Err(NotIndexed::failed(
            "replaced",
            "the file was replaced (by a link or another file) between the walk and the read, so it was not read; the next scan reads it again",
        ));
    }
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

/// Opens for reading without blocking: a named pipe put in the file's place opens at once
/// (and is then refused) instead of waiting for a writer.
#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// Whether the opened file is the one the walk saw (where the platform says which that is).
#[cfg(unix)]
fn same_file(stat: &FileStat, opened: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    stat.inode.is_none_or(|inode| inode == opened.ino() as i64)
        && stat.device.is_none_or(|device| device == opened.dev())
}

#[cfg(not(unix))]
fn same_file(_stat: &FileStat, _opened: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many short extractions at once, each thread ending just as its answer is taken: the
    /// old code dropped (detached) the handle right then, and under load one run in six of
    /// 90,000 such calls died in `pthread_detach`. Now every handle is joined.
    #[test]
    fn extraction_threads_are_joined_not_detached_as_they_end() {
        std::thread::scope(|scope| {
            for worker in 0..3u64 {
                scope.spawn(move || {
                    for i in 0..2_000u64 {
                        let answer = within(std::time::Duration::from_secs(30), move || worker + i);
                        assert_eq!(answer, Some(worker + i));
                    }
                });
            }
        });
        // One past its budget is kept, and joined once it has stopped: the next one
        // abandoned takes its place.
        let late = |wait: std::sync::mpsc::Receiver<()>| {
            within(std::time::Duration::from_millis(1), move || wait.recv())
        };
        let (release, wait) = std::sync::mpsc::channel::<()>();
        assert!(late(wait).is_none());
        drop(release);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while ABANDONED.lock().unwrap().iter().any(|t| !t.is_finished()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the late thread never stopped"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (release, wait) = std::sync::mpsc::channel::<()>();
        assert!(late(wait).is_none());
        assert_eq!(
            ABANDONED.lock().unwrap().len(),
            1,
            "the stopped one was joined"
        );
        drop(release);
    }
}
