//! The indexing run: plan what changed, extract on worker threads, write batches on this one.
//!
//! Threading: `threads` workers read, hash, extract and chunk files; the calling thread owns
//! the SQLite connection and the tantivy writer and commits batches. A batch is one SQLite
//! transaction: after a crash, each file is either wholly in its old state or wholly in its new.
//! The full-text index follows through the outbox (see [`crate::fulltext`]).

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::chunk::{chunk_blocks, ChunkOptions};
use super::extract::{extract, ExtractLimits, NotIndexed};
use super::progress::{IndexEvent, IndexProgress};
use super::walk::{walk, FileStat, WalkItem};
use crate::error::{Error, Result};
use crate::fulltext::FullText;
use crate::store::writes::{self, Extraction, FileFacts};
use crate::store::{DocumentState, DocumentStatus, NewChunk, Source, SourceStatus, Store};

/// How an indexing run behaves.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Chunk sizes.
    pub chunk: ChunkOptions,
    /// Files larger than this are skipped with reason `too_large`. Default 64 MiB.
    pub max_file_size: u64,
    /// Extraction threads. Default: the number of cores.
    pub threads: usize,
    /// Re-read files that failed before even if they have not changed. Default false.
    pub retry_failed: bool,
    /// Set to stop a scan early (the desktop app's pause): what was read so far is kept,
    /// and the next scan carries on from there.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Limits on zip containers (DOCX, ODT, EPUB).
    pub(crate) limits: ExtractLimits,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            chunk: ChunkOptions::default(),
            max_file_size: 64 << 20,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            retry_failed: false,
            cancel: None,
            limits: ExtractLimits::default(),
        }
    }
}

impl IndexOptions {
    /// The same options, stopping early once `cancel` is set.
    pub fn with_cancel(mut self, cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }
}

/// Which part of a source to look at.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// The whole folder: a full scan.
    All,
    /// These paths (files or folders, existing or not) only: what the watcher saw change.
    Paths(Vec<PathBuf>),
}

/// State carried across the sources of one run.
pub(crate) struct Run<'a> {
    pub progress: IndexProgress,
    pub started: Instant,
    pub on_event: &'a (dyn Fn(&IndexEvent) + Sync),
    last_fulltext: Option<Instant>,
}

impl<'a> Run<'a> {
    pub(crate) fn new(on_event: &'a (dyn Fn(&IndexEvent) + Sync)) -> Self {
        Run {
            progress: IndexProgress::default(),
            started: Instant::now(),
            on_event,
            last_fulltext: None,
        }
    }

    pub(crate) fn emit(&self, event: IndexEvent) {
        (self.on_event)(&event);
    }

    /// Applies the outbox to tantivy: after the first batch (time to first hit), then at
    /// most every 2 s, and always when `force`.
    pub(crate) fn sync_fulltext(
        &mut self,
        store: &Store,
        fulltext: &mut FullText,
        force: bool,
    ) -> Result<()> {
        let due = self
            .last_fulltext
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if force || due {
            let seq = fulltext.sync(store)?;
            self.last_fulltext = Some(Instant::now());
            self.emit(IndexEvent::FulltextCommitted {
                seq,
                elapsed_ms: self.started.elapsed().as_millis() as u64,
            });
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self) {
        self.progress.update_rates(self.started.elapsed(), true);
        self.progress.eta_ms = Some(0);
        self.emit(IndexEvent::Finished {
            progress: self.progress.clone(),
        });
    }
}

/// What one file turned out to need.
enum Outcome {
    /// Same content, new mtime.
    Touched { doc_id: i64, stat: FileStat },
    /// Same content as a document whose file is gone: a rename.
    Renamed {
        stat: FileStat,
        hash: String,
        from: Vec<i64>,
    },
    /// New content.
    Indexed {
        stat: FileStat,
        hash: String,
        title: String,
        format: &'static str,
        warning: Option<String>,
        extracted_bytes: u64,
        chunks: Vec<NewChunk>,
    },
    /// Not indexed.
    NotIndexed {
        stat: FileStat,
        status: DocumentStatus,
        reason: &'static str,
        message: String,
    },
}

/// Indexes one source (or part of it). The caller holds the library's write lock.
pub(crate) fn index_scope(
    store: &mut Store,
    fulltext: &mut FullText,
    source: &Source,
    scope: &Scope,
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<()> {
    if !source.root.is_dir() {
        // An unmounted drive or a deleted folder: keep what is indexed, say so, wait for it.
        store.set_source_status(
            source.id,
            SourceStatus::Missing,
            Some("the folder is missing; its documents are kept until it returns or the source is removed"),
        )?;
        run.emit(IndexEvent::SourceMissing {
            source_id: source.id,
            root: source.root.clone(),
        });
        return Ok(());
    }
    run.emit(IndexEvent::ScanStarted {
        source_id: source.id,
        root: source.root.clone(),
    });
    let scope_paths: Vec<PathBuf> = match scope {
        Scope::All => vec![source.root.clone()],
        Scope::Paths(paths) => paths
            .iter()
            .filter(|p| p.starts_with(&source.root))
            .cloned()
            .collect(),
    };
    let walked = walk(
        &source.root,
        &scope_paths,
        &source.include,
        &source.exclude,
        options.max_file_size,
    )?;
    // Tests delete files here to check what happens to a file that vanishes after the walk.
    fail::fail_point!("index_after_walk");
    run.progress.files_discovered += walked.len() as u64;
    run.emit(IndexEvent::ScanFinished {
        source_id: source.id,
        discovered: walked.len() as u64,
    });

    let mut states: HashMap<PathBuf, DocumentState> = HashMap::new();
    for scope_path in &scope_paths {
        for state in store.document_states(source.id, scope_path)? {
            states.insert(state.path.clone(), state);
        }
    }
    let walked_paths: HashSet<&Path> = walked.iter().map(|w| w.path()).collect();
    let removed: Vec<&DocumentState> = states
        .values()
        .filter(|s| !walked_paths.contains(s.path.as_path()))
        .collect();
    let mut removed_by_hash: HashMap<String, Vec<i64>> = HashMap::new();
    for doc in &removed {
        if let (DocumentStatus::Indexed, Some(hash)) = (doc.status, &doc.content_hash) {
            removed_by_hash
                .entry(hash.clone())
                .or_default()
                .push(doc.id);
        }
    }

    // Plan: what needs reading, what only needs a row.
    let mut work: Vec<(FileStat, Option<DocumentState>)> = Vec::new();
    let mut rows: Vec<Outcome> = Vec::new();
    for item in walked {
        let prev = states.get(item.path());
        match item {
            WalkItem::File(stat) => {
                let unchanged = prev.is_some_and(|p| {
                    p.size == Some(stat.size as i64)
                        && p.mtime_ns == Some(stat.mtime_ns)
                        && (p.status != DocumentStatus::Failed || !options.retry_failed)
                });
                if unchanged {
                    run.progress.files_processed += 1;
                    run.progress.files_unchanged += 1;
                } else {
                    work.push((stat, prev.cloned()));
                }
            }
            WalkItem::Skipped {
                stat,
                reason,
                message,
            } => {
                if prev.is_some_and(|p| {
                    p.status == DocumentStatus::Skipped && p.size == Some(stat.size as i64)
                }) {
                    run.progress.files_processed += 1;
                    run.progress.files_skipped += 1;
                } else {
                    rows.push(Outcome::NotIndexed {
                        stat,
                        status: DocumentStatus::Skipped,
                        reason,
                        message,
                    });
                }
            }
            WalkItem::Failed {
                path,
                reason,
                message,
            } => {
                rows.push(Outcome::NotIndexed {
                    stat: FileStat {
                        path,
                        size: 0,
                        mtime_ns: 0,
                    },
                    status: DocumentStatus::Failed,
                    reason,
                    message,
                });
            }
        }
    }

    let mut writer = BatchWriter {
        source_id: source.id,
        claimed: HashSet::new(),
        pending: rows,
        batch_started: Instant::now(),
        batches: 0,
        options,
    };
    let next = AtomicUsize::new(0);
    let threads = options.threads.clamp(1, 16).min(work.len().max(1));
    std::thread::scope(|s| -> Result<()> {
        let (tx, rx) = mpsc::sync_channel::<Outcome>(64);
        for _ in 0..threads {
            let tx = tx.clone();
            let (work, next, removed_by_hash) = (&work, &next, &removed_by_hash);
            s.spawn(move || loop {
                if options.is_cancelled() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((stat, prev)) = work.get(i) else {
                    break;
                };
                let outcome = process_file(stat.clone(), prev.as_ref(), removed_by_hash, options);
                if tx.send(outcome).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let result = (|| -> Result<()> {
            for outcome in rx.iter() {
                writer.pending.push(outcome);
                if writer.due() {
                    writer.flush(store, run)?;
                    run.sync_fulltext(store, fulltext, false)?;
                }
            }
            writer.flush(store, run)
        })();
        if result.is_err() {
            // Stop the workers early: they see the claimed index past the end.
            next.store(usize::MAX / 2, Ordering::Relaxed);
        }
        result
    })?;

    if options.is_cancelled() {
        // Files not read yet may be the new names of "removed" ones: delete nothing now.
        run.sync_fulltext(store, fulltext, true)?;
        return Ok(());
    }
    // Whatever was not claimed by a rename is gone.
    let gone: Vec<i64> = removed
        .iter()
        .map(|d| d.id)
        .filter(|id| !writer.claimed.contains(id))
        .collect();
    if !gone.is_empty() {
        let tx = store.write()?;
        for id in &gone {
            writes::delete_document(&tx, *id)?;
        }
        tx.commit()?;
        run.progress.files_removed += gone.len() as u64;
    }
    if matches!(scope, Scope::All) {
        store.set_source_status(source.id, SourceStatus::Ok, None)?;
    }
    run.sync_fulltext(store, fulltext, true)?;
    Ok(())
}

/// Reads, hashes and extracts one file. Runs on a worker thread.
fn process_file(
    stat: FileStat,
    prev: Option<&DocumentState>,
    removed_by_hash: &HashMap<String, Vec<i64>>,
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
        if p.status == DocumentStatus::Indexed && p.content_hash.as_deref() == Some(hash.as_str()) {
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
    extract_outcome(stat, hash, &bytes, options)
}

fn not_indexed(stat: FileStat, n: NotIndexed) -> Outcome {
    match n {
        NotIndexed::Skipped { reason, message } => Outcome::NotIndexed {
            stat,
            status: DocumentStatus::Skipped,
            reason,
            message,
        },
        NotIndexed::Failed { reason, message } => Outcome::NotIndexed {
            stat,
            status: DocumentStatus::Failed,
            reason,
            message,
        },
    }
}

fn extract_outcome(stat: FileStat, hash: String, bytes: &[u8], options: &IndexOptions) -> Outcome {
    let extracted = match extract(&stat.path, bytes, &options.limits) {
        Ok(e) => e,
        Err(n) => return not_indexed(stat, n),
    };
    let chunks = chunk_blocks(&extracted.blocks, &options.chunk);
    if chunks.is_empty() {
        return Outcome::NotIndexed {
            stat,
            status: DocumentStatus::Skipped,
            reason: "no_text",
            message: "no indexable text".into(),
        };
    }
    let title = extracted
        .title
        .clone()
        .unwrap_or_else(|| file_name(&stat.path));
    Outcome::Indexed {
        extracted_bytes: extracted.text_bytes() as u64,
        title,
        format: extracted.format,
        warning: extracted.warning,
        chunks,
        hash,
        stat,
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

/// Collects outcomes and commits them in batches.
struct BatchWriter<'o> {
    source_id: i64,
    claimed: HashSet<i64>,
    pending: Vec<Outcome>,
    batch_started: Instant,
    batches: u64,
    options: &'o IndexOptions,
}

impl BatchWriter<'_> {
    /// The first batch is small so the first hits are searchable within a second.
    fn due(&self) -> bool {
        let files = if self.batches == 0 { 32 } else { 256 };
        let chunks: usize = self
            .pending
            .iter()
            .map(|o| match o {
                Outcome::Indexed { chunks, .. } => chunks.len(),
                _ => 0,
            })
            .sum();
        self.pending.len() >= files
            || chunks >= 4000
            || self.batch_started.elapsed() >= Duration::from_secs(1)
    }

    fn flush(&mut self, store: &mut Store, run: &mut Run<'_>) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let outcomes = std::mem::take(&mut self.pending);
        let mut failures = Vec::new();
        let tx = store.write()?;
        for outcome in outcomes {
            let outcome = match outcome {
                Outcome::Renamed { stat, hash, from } => {
                    match from.iter().find(|id| !self.claimed.contains(id)) {
                        Some(&id) => {
                            let old_path = writes::document_path(&tx, id)?;
                            writes::move_document(
                                &tx,
                                id,
                                &old_path,
                                &FileFacts {
                                    path: &stat.path,
                                    size: stat.size as i64,
                                    mtime_ns: stat.mtime_ns,
                                },
                            )?;
                            self.claimed.insert(id);
                            run.progress.files_renamed += 1;
                            run.progress.files_processed += 1;
                            continue;
                        }
                        // Another copy already took that document: index this one normally.
                        None => match std::fs::read(&stat.path) {
                            Ok(bytes) => extract_outcome(stat, hash, &bytes, self.options),
                            Err(e) => Outcome::NotIndexed {
                                stat,
                                status: DocumentStatus::Failed,
                                reason: "unreadable",
                                message: format!("cannot read: {e}"),
                            },
                        },
                    }
                }
                other => other,
            };
            run.progress.files_processed += 1;
            match outcome {
                Outcome::Touched { doc_id, stat } => {
                    writes::touch_document(&tx, doc_id, stat.size as i64, stat.mtime_ns)?;
                    run.progress.files_unchanged += 1;
                }
                Outcome::Indexed {
                    stat,
                    hash,
                    title,
                    format,
                    warning,
                    extracted_bytes,
                    chunks,
                } => {
                    writes::write_revision(
                        &tx,
                        self.source_id,
                        &FileFacts {
                            path: &stat.path,
                            size: stat.size as i64,
                            mtime_ns: stat.mtime_ns,
                        },
                        &Extraction {
                            content_hash: &hash,
                            title: &title,
                            format,
                            warning: warning.as_deref(),
                            extracted_bytes: extracted_bytes as i64,
                        },
                        &chunks,
                    )?;
                    run.progress.files_indexed += 1;
                    run.progress.chunks_written += chunks.len() as u64;
                    run.progress.bytes_extracted += extracted_bytes;
                    run.progress.bytes_read += stat.size;
                }
                Outcome::NotIndexed {
                    stat,
                    status,
                    reason,
                    message,
                } => {
                    writes::write_not_indexed(
                        &tx,
                        self.source_id,
                        &FileFacts {
                            path: &stat.path,
                            size: stat.size as i64,
                            mtime_ns: stat.mtime_ns,
                        },
                        status,
                        reason,
                        &message,
                    )?;
                    if status == DocumentStatus::Failed {
                        run.progress.files_failed += 1;
                        failures.push(IndexEvent::FileFailed {
                            path: stat.path,
                            reason: reason.to_string(),
                            message,
                        });
                    } else {
                        run.progress.files_skipped += 1;
                    }
                }
                Outcome::Renamed { .. } => {
                    return Err(Error::Internal("rename outcome left unresolved".into()))
                }
            }
        }
        tx.commit()?;
        // A crash here leaves SQLite ahead of tantivy: the outbox replays it on the next open.
        fail::fail_point!("index_after_sqlite_commit", |_| {
            std::process::abort();
        });
        self.batches += 1;
        self.batch_started = Instant::now();
        for event in failures {
            run.emit(event);
        }
        run.progress.update_rates(run.started.elapsed(), true);
        run.emit(IndexEvent::BatchCommitted {
            progress: run.progress.clone(),
        });
        Ok(())
    }
}
