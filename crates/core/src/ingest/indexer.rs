//! The indexing run: plan what changed, extract on worker threads, write batches on this one.
//!
//! Threading: `threads` workers read, hash, extract and chunk files; the calling thread owns
//! the SQLite connection and the tantivy writer and commits batches. A batch is one SQLite
//! transaction: after a crash, each file is either wholly in its old state or wholly in its new.
//! The full-text index follows through the outbox (see [`crate::fulltext`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::batch::BatchWriter;
use super::options::IndexOptions;
use super::outcome::{process_file, Outcome};
use super::progress::{IndexEvent, IndexProgress};
use super::run::Run;
use super::walk::{walk, FileStat, LinkBounds, WalkItem};
use crate::error::Result;
use crate::fulltext::FullText;
use crate::ids::{DocumentId, SourceId};
use crate::store::writes;
use crate::store::{DocumentState, DocumentStatus, Source, SourceStatus, Store};

/// Which part of a source to look at (named apart from [`crate::auth::Scope`], what a
/// caller may read).
#[derive(Debug, Clone)]
pub(crate) enum ScanScope {
    /// The whole folder: a full scan.
    All,
    /// These paths (files or folders, existing or not) only: what the watcher saw change.
    /// Their indexed files are read and hashed even when size, mtime and inode look the same:
    /// an event says something happened, and reading a changed file is cheap.
    Paths(Vec<PathBuf>),
    /// These folders, trusting size, mtime and inode as a full scan does: the watcher's
    /// reconciliation after a burst, which catches what the events missed.
    Folders(Vec<PathBuf>),
}

impl ScanScope {
    /// Whether an indexed file whose size, mtime and inode are unchanged is taken as
    /// unchanged without reading it.
    fn trusts_stat(&self) -> bool {
        !matches!(self, ScanScope::Paths(_))
    }
}

/// Indexes one source (or part of it). The caller holds the library's write lock.
pub(crate) fn index_scope(
    store: &mut Store,
    fulltext: &mut FullText,
    source: &Source,
    scope: &ScanScope,
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<()> {
    if !source.root.is_dir() {
        return mark_missing(store, source, run);
    }
    let scope_paths = scope_paths(source, scope);
    let links = link_bounds(store, source)?;
    let walked = walk_scope(source, &scope_paths, &links, options, run)?;
    let states = stored_states(store, source.id, &scope_paths)?;
    let removed = removed(&states, &walked);
    let plan = plan(
        walked,
        &states,
        scope.trusts_stat(),
        options,
        &mut run.progress,
    );
    let changes_before = run.progress.changes();
    let claimed = read_and_write(store, fulltext, source.id, plan, &removed, options, run)?;
    if options.is_cancelled() {
        // Files not read yet may be the new names of "removed" ones: delete nothing now.
        return run.sync_fulltext(store, fulltext, true);
    }
    delete_gone(store, &removed, &claimed, &mut run.progress)?;
    if run.progress.changes() != changes_before {
        mark_repeats(store, source, options)?;
    }
    if matches!(scope, ScanScope::All) {
        store.set_source_status(source.id, SourceStatus::Ok, None)?;
    }
    run.sync_fulltext(store, fulltext, true)
}

/// Copies of a text repeated across the source's documents leave search (see
/// `store::repeats`).
fn mark_repeats(store: &mut Store, source: &Source, options: &IndexOptions) -> Result<()> {
    let changes = store.mark_repeats(source.id, options.repeat_documents)?;
    if changes.marked + changes.revived > 0 {
        tracing::info!(
            source = %source.root.display(),
            groups = changes.groups,
            marked = changes.marked,
            revived = changes.revived,
            "repeated text"
        );
    }
    Ok(())
}

/// An unmounted drive or a deleted folder: keep what is indexed, say so, wait for it.
fn mark_missing(store: &Store, source: &Source, run: &Run<'_>) -> Result<()> {
    store.set_source_status(
        source.id,
        SourceStatus::Missing,
        Some("the folder is missing; its documents are kept until it returns or the source is removed"),
    )?;
    run.emit(IndexEvent::SourceMissing {
        source_id: source.id,
        root: source.root.clone(),
    });
    Ok(())
}

/// The folders and files of `source` that `scope` covers.
fn scope_paths(source: &Source, scope: &ScanScope) -> Vec<PathBuf> {
    match scope {
        ScanScope::All => vec![source.root.clone()],
        ScanScope::Paths(paths) | ScanScope::Folders(paths) => paths
            .iter()
            .filter(|p| p.starts_with(&source.root))
            .cloned()
            .collect(),
    }
}

/// Where the source's symbolic links may lead: within its folder, or out of it when the source
/// says so, but never into the library's data directory or another source's folder.
fn link_bounds(store: &Store, source: &Source) -> Result<LinkBounds> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let mut forbidden: Vec<PathBuf> = store
        .source_roots()?
        .iter()
        .filter(|(id, _)| *id != source.id)
        .map(|(_, root)| canonical(root))
        .collect();
    if let Some(data_dir) = store.path().parent() {
        forbidden.push(canonical(data_dir));
    }
    Ok(LinkBounds {
        root: canonical(&source.root),
        follow_outside: source.follow_links,
        forbidden,
    })
}

/// The files under `scope_paths`, as the source's globs, size limit and link bounds see them.
fn walk_scope(
    source: &Source,
    scope_paths: &[PathBuf],
    links: &LinkBounds,
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<Vec<WalkItem>> {
    run.emit(IndexEvent::ScanStarted {
        source_id: source.id,
        root: source.root.clone(),
    });
    let walked = walk(
        &source.root,
        scope_paths,
        &source.include,
        &source.exclude,
        options.max_file_size,
        links,
    )?;
    // Tests delete files here to check what happens to a file that vanishes after the walk.
    #[cfg(debug_assertions)]
    fail::fail_point!("index_after_walk");
    run.progress.files_discovered += walked.len() as u64;
    run.emit(IndexEvent::ScanFinished {
        source_id: source.id,
        discovered: walked.len() as u64,
    });
    Ok(walked)
}

/// What SQLite holds for the documents under `scope_paths`, by path.
fn stored_states(
    store: &Store,
    source_id: SourceId,
    scope_paths: &[PathBuf],
) -> Result<HashMap<PathBuf, DocumentState>> {
    let mut states = HashMap::new();
    for scope_path in scope_paths {
        for state in store.document_states(source_id, scope_path)? {
            states.insert(state.path.clone(), state);
        }
    }
    Ok(states)
}

/// The stored documents the walk did not find: removed, or renamed.
fn removed<'s>(
    states: &'s HashMap<PathBuf, DocumentState>,
    walked: &[WalkItem],
) -> Vec<&'s DocumentState> {
    let walked_paths: HashSet<&Path> = walked.iter().map(|w| w.path()).collect();
    states
        .values()
        .filter(|s| !walked_paths.contains(s.path.as_path()))
        .collect()
}

/// What the walk found, sorted: files that need reading, and rows that need only writing.
struct Plan {
    work: Vec<(FileStat, Option<DocumentState>)>,
    rows: Vec<Outcome>,
}

/// Sorts the walk: unchanged files are only counted, skipped and failed ones become rows,
/// the rest are read. Without `trust_stat`, indexed files are read even when their stat
/// matches (the hash then spares re-extracting unchanged content).
fn plan(
    walked: Vec<WalkItem>,
    states: &HashMap<PathBuf, DocumentState>,
    trust_stat: bool,
    options: &IndexOptions,
    progress: &mut IndexProgress,
) -> Plan {
    let mut plan = Plan {
        work: Vec::new(),
        rows: Vec::new(),
    };
    for item in walked {
        let prev = states.get(item.path());
        match item {
            WalkItem::File(stat) => {
                let same_stat = prev.is_some_and(|p| {
                    p.size == Some(stat.size as i64)
                        && p.mtime_ns == Some(stat.mtime_ns)
                        && (p.inode.is_none() || p.inode == stat.inode)
                });
                let unchanged = same_stat
                    && prev.is_some_and(|p| match p.status {
                        DocumentStatus::Failed => !options.retry_failed,
                        DocumentStatus::Indexed => trust_stat && p.has_reader_text,
                        _ => trust_stat,
                    });
                let for_text = same_stat
                    && trust_stat
                    && prev
                        .is_some_and(|p| p.status == DocumentStatus::Indexed && !p.has_reader_text);
                if unchanged {
                    progress.files_processed += 1;
                    progress.files_unchanged += 1;
                } else {
                    if for_text {
                        progress.files_reread_for_text += 1;
                    }
                    plan.work.push((stat, prev.cloned()));
                }
            }
            WalkItem::Skipped {
                stat,
                reason,
                message,
            } => {
                let still_skipped = prev.is_some_and(|p| {
                    p.status == DocumentStatus::Skipped && p.size == Some(stat.size as i64)
                });
                if still_skipped {
                    progress.files_processed += 1;
                    progress.files_skipped += 1;
                } else {
                    let row = Outcome::not_indexed(stat, DocumentStatus::Skipped, reason, message);
                    plan.rows.push(row);
                }
            }
            WalkItem::Failed {
                path,
                reason,
                message,
            } => {
                let stat = FileStat {
                    path,
                    size: 0,
                    mtime_ns: 0,
                    inode: None,
                    device: None,
                };
                let row = Outcome::not_indexed(stat, DocumentStatus::Failed, reason, message);
                plan.rows.push(row);
            }
        }
    }
    plan
}

/// Reads the planned files on worker threads and writes their outcomes in batches on this
/// one. Returns the removed documents that renames took over.
fn read_and_write(
    store: &mut Store,
    fulltext: &mut FullText,
    source_id: SourceId,
    plan: Plan,
    removed: &[&DocumentState],
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<HashSet<DocumentId>> {
    let removed_by_hash = renamable(removed);
    let Plan { work, rows } = plan;
    let mut writer = BatchWriter::new(source_id, rows, options);
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
                writer.push(outcome);
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
    Ok(writer.claimed)
}

/// The removed documents a new file with the same content would be a rename of, by hash.
fn renamable(removed: &[&DocumentState]) -> HashMap<String, Vec<DocumentId>> {
    let mut by_hash: HashMap<String, Vec<DocumentId>> = HashMap::new();
    for doc in removed {
        if let (DocumentStatus::Indexed, Some(hash)) = (doc.status, &doc.content_hash) {
            by_hash.entry(hash.clone()).or_default().push(doc.id);
        }
    }
    by_hash
}

/// Deletes the removed documents no rename took over: their files are gone.
fn delete_gone(
    store: &mut Store,
    removed: &[&DocumentState],
    claimed: &HashSet<DocumentId>,
    progress: &mut IndexProgress,
) -> Result<()> {
    let gone: Vec<DocumentId> = removed
        .iter()
        .map(|d| d.id)
        .filter(|id| !claimed.contains(id))
        .collect();
    if gone.is_empty() {
        return Ok(());
    }
    let tx = store.write()?;
    for id in &gone {
        writes::delete_document(&tx, *id)?;
    }
    tx.commit()?;
    progress.files_removed += gone.len() as u64;
    Ok(())
}
