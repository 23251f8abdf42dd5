//! Keeping a library current: OS file events (debounced), with periodic rescans where events
//! cannot be had.
//!
//! The watcher only collects changed paths; the indexer does the work ([`index_scope`] with
//! [`Scope::Paths`]), so a watched change goes through exactly the code a full scan does. A
//! rename arrives as a pair of paths and is recognised by content hash, without re-extraction.
//!
//! Degrading: when the OS refuses more watches (inotify's `max_user_watches`), or events were
//! lost (queue overflow), the source falls back to a full rescan every `rescan_interval`, with
//! a warning, instead of failing. A source whose folder disappears is marked missing (its
//! documents stay), polled, and re-watched when it comes back.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::RecursiveMode;
use notify_debouncer_full::{new_debouncer, DebounceEventResult};
use serde::Serialize;

use super::indexer::{index_scope, IndexOptions, Run, Scope};
use super::progress::IndexEvent;
use crate::error::{Error, Result};
use crate::fulltext::FullText;
use crate::store::{Source, Store};

/// How the watcher behaves.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Quiet time before a burst of events is handled. Default 400 ms.
    pub debounce: Duration,
    /// Full rescan interval for sources without OS events (or all sources when `poll_only`).
    /// Default 30 s.
    pub rescan_interval: Duration,
    /// Never use OS events; rescan every `rescan_interval` (network drives). Default false.
    pub poll_only: bool,
    /// Fully scan the sources present at start (to catch changes made while Quarry was not
    /// running). Default true; off when the caller has just indexed them. Sources added later
    /// are always scanned.
    pub scan_on_start: bool,
    /// Paths to re-read on the next tick, even if unchanged (a failed file's "retry").
    pub requests: WatchRequests,
}

/// A queue of paths the watcher re-indexes on its next tick, failed files included: the
/// desktop app's "retry" goes through the same indexing code as a change.
#[derive(Debug, Clone, Default)]
pub struct WatchRequests(std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>);

impl WatchRequests {
    /// Asks for `path` (a file or folder inside a source) to be indexed again.
    pub fn push(&self, path: PathBuf) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(path);
    }

    fn take(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(400),
            rescan_interval: Duration::from_secs(30),
            poll_only: false,
            scan_on_start: true,
            requests: WatchRequests::default(),
        }
    }
}

/// What the watcher is doing.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    /// A source is watched with OS events.
    Watching {
        /// Source id.
        source_id: i64,
        /// Its folder.
        #[serde(serialize_with = "crate::store::serialize_path")]
        root: PathBuf,
    },
    /// A source falls back to periodic rescans.
    Degraded {
        /// Source id.
        source_id: i64,
        /// Why.
        reason: String,
    },
    /// Paths changed and were re-indexed.
    Changed {
        /// The paths the OS reported.
        #[serde(serialize_with = "crate::store::serialize_paths")]
        paths: Vec<PathBuf>,
    },
    /// The embedding lane's progress.
    Embedding(super::EmbedProgress),
    /// The embedding lane cannot run (model or runtime missing); lexical indexing goes on.
    EmbeddingUnavailable {
        /// Error code.
        code: &'static str,
        /// What is wrong and the command that fixes it.
        message: String,
    },
    /// An indexing event from a rescan or a change (serialised as the event itself).
    #[serde(untagged)]
    Index(IndexEvent),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Events,
    Poll,
    Missing,
}

/// Runs until `stop` is set. The caller holds the library's write lock.
pub(crate) fn watch(
    store: &mut Store,
    fulltext: &mut FullText,
    index_options: &IndexOptions,
    options: &WatchOptions,
    on_event: &(dyn Fn(&WatchEvent) + Sync),
    stop: &AtomicBool,
) -> Result<()> {
    let (tx, rx) = mpsc::channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(options.debounce, None, move |res| {
        let _ = tx.send(res);
    })
    .map_err(|e| crate::error::Error::Watch {
        path: PathBuf::new(),
        reason: e.to_string(),
    })?;
    let forward = |e: &IndexEvent| on_event(&WatchEvent::Index(e.clone()));
    // Per source: its row, how it is watched, and when it was last scanned (`None`: a rescan
    // is due now, e.g. after the OS reported lost events).
    let mut sources: HashMap<i64, (Source, Mode, Option<Instant>)> = HashMap::new();
    let mut last_source_reload: Option<Instant> = None;
    let mut first_load = true;
    let mut last_sync = Instant::now();

    while !stop.load(Ordering::Relaxed) {
        // Sources added or removed by another process (or the GUI) are picked up here.
        if last_source_reload.is_none_or(|t| t.elapsed() >= Duration::from_secs(2)) {
            last_source_reload = Some(Instant::now());
            let current = store.sources()?;
            let ids: BTreeSet<i64> = current.iter().map(|s| s.id).collect();
            sources.retain(|id, (source, mode, _)| {
                let keep = ids.contains(id);
                if !keep && *mode == Mode::Events {
                    let _ = debouncer.unwatch(&source.root);
                }
                keep
            });
            for source in current {
                if sources.contains_key(&source.id) || stop.load(Ordering::Relaxed) {
                    continue;
                }
                let mode = start_watching(&mut debouncer, &source, options, on_event);
                // A new source (or a first start) gets a full scan: it catches what changed
                // while Quarry was not running.
                if first_load && !options.scan_on_start {
                    sources.insert(source.id, (source, mode, Some(Instant::now())));
                    continue;
                }
                let mut run = Run::new(&forward);
                if scan(
                    store,
                    fulltext,
                    &source,
                    &Scope::All,
                    index_options,
                    &mut run,
                )? {
                    run.finish();
                }
                sources.insert(source.id, (source, mode, Some(Instant::now())));
            }
            first_load = false;
        }

        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(events)) => {
                let rescan = events.iter().any(|e| e.need_rescan());
                // Reads are not changes, and our own scans read: counting them would make
                // every scan trigger the next one.
                let paths: BTreeSet<PathBuf> = events
                    .iter()
                    .filter(|e| !matches!(e.kind, notify::EventKind::Access(_)))
                    .flat_map(|e| e.paths.iter().cloned())
                    .collect();
                let paths: Vec<PathBuf> = paths.into_iter().collect();
                let mut run = Run::new(&forward);
                let mut completed = true;
                for (source, mode, last) in sources.values_mut() {
                    let mine = paths_under(&paths, source);
                    if mine.is_empty() && !rescan {
                        continue;
                    }
                    let scope = if rescan {
                        Scope::All
                    } else {
                        Scope::Paths(mine)
                    };
                    completed &= scan(store, fulltext, source, &scope, index_options, &mut run)?;
                    *last = Some(Instant::now());
                    if !source.root.is_dir() {
                        *mode = Mode::Missing;
                    }
                }
                if completed {
                    run.finish();
                }
                if !paths.is_empty() {
                    on_event(&WatchEvent::Changed { paths });
                }
            }
            Ok(Err(errors)) => {
                for error in errors {
                    let reason = error.to_string();
                    tracing::warn!(%reason, "file watcher error; rescanning");
                    for (source, mode, last) in sources.values_mut() {
                        if error.paths.is_empty()
                            || error.paths.iter().any(|p| p.starts_with(&source.root))
                        {
                            if matches!(error.kind, notify::ErrorKind::MaxFilesWatch) {
                                let _ = debouncer.unwatch(&source.root);
                                *mode = Mode::Poll;
                                on_event(&WatchEvent::Degraded {
                                    source_id: source.id,
                                    reason: reason.clone(),
                                });
                            }
                            // Events may have been lost: rescan on the next tick.
                            *last = None;
                        }
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }

        // Periodic work: polled sources, missing folders coming back, and outbox rows
        // written by other processes (a source removed from the CLI while we watch).
        for (source, mode, last) in sources.values_mut() {
            let back = *mode == Mode::Missing && source.root.is_dir();
            let due = match last {
                None => *mode != Mode::Missing,
                Some(t) => *mode == Mode::Poll && t.elapsed() >= options.rescan_interval,
            };
            if back {
                *mode = start_watching(&mut debouncer, source, options, on_event);
            }
            if (back || due) && !stop.load(Ordering::Relaxed) {
                let mut run = Run::new(&forward);
                if scan(
                    store,
                    fulltext,
                    source,
                    &Scope::All,
                    index_options,
                    &mut run,
                )? {
                    run.finish();
                }
                *last = Some(Instant::now());
                if !source.root.is_dir() {
                    *mode = Mode::Missing;
                }
            }
        }
        let requested = options.requests.take();
        if !requested.is_empty() {
            // Asked for by the user: failed files are read again even if unchanged.
            let retry = IndexOptions {
                retry_failed: true,
                ..index_options.clone()
            };
            let mut run = Run::new(&forward);
            let mut completed = true;
            for (source, _, _) in sources.values() {
                let mine = paths_under(&requested, source);
                if !mine.is_empty() {
                    completed &= scan(
                        store,
                        fulltext,
                        source,
                        &Scope::Paths(mine),
                        &retry,
                        &mut run,
                    )?;
                }
            }
            if completed {
                run.finish();
            } else if stop.load(Ordering::Relaxed) {
                // Paused mid-retry: ask again after resuming (re-reading is harmless).
                for path in requested {
                    options.requests.push(path);
                }
            }
        }
        if last_sync.elapsed() >= Duration::from_secs(2) {
            last_sync = Instant::now();
            let mut run = Run::new(&forward);
            if store.outbox_max_seq()? > fulltext.applied_seq()? {
                run.sync_fulltext(store, fulltext, true)?;
            }
        }
    }
    Ok(())
}

/// Indexes `scope` of `source`; false when the scan did not complete: cancelled, or the
/// source was removed meanwhile (by the app or another process). A removed source is not an
/// error: its rows are gone, so the scan's writes fail, and the next reload drops it.
fn scan(
    store: &mut Store,
    fulltext: &mut FullText,
    source: &Source,
    scope: &Scope,
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<bool> {
    match index_scope(store, fulltext, source, scope, options, run) {
        Ok(()) => Ok(!options.is_cancelled()),
        Err(e) if matches!(store.source(source.id), Err(Error::SourceNotFound(_))) => {
            tracing::info!(source = source.id, error = %e, "source removed during its scan");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The paths inside `source`'s folder.
fn paths_under(paths: &[PathBuf], source: &Source) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.starts_with(&source.root))
        .cloned()
        .collect()
}

fn start_watching<W: notify::Watcher, C: notify_debouncer_full::FileIdCache>(
    debouncer: &mut notify_debouncer_full::Debouncer<W, C>,
    source: &Source,
    options: &WatchOptions,
    on_event: &(dyn Fn(&WatchEvent) + Sync),
) -> Mode {
    if !source.root.is_dir() {
        return Mode::Missing;
    }
    if options.poll_only {
        on_event(&WatchEvent::Degraded {
            source_id: source.id,
            reason: "polling requested".into(),
        });
        return Mode::Poll;
    }
    match debouncer.watch(&source.root, RecursiveMode::Recursive) {
        Ok(()) => {
            on_event(&WatchEvent::Watching {
                source_id: source.id,
                root: source.root.clone(),
            });
            Mode::Events
        }
        Err(error) => {
            let _ = debouncer.unwatch(&source.root);
            let reason = degrade_reason(&error);
            tracing::warn!(root = %source.root.display(), %reason, "falling back to periodic rescans");
            on_event(&WatchEvent::Degraded {
                source_id: source.id,
                reason,
            });
            Mode::Poll
        }
    }
}

/// The message shown when OS events are not available for a folder.
pub(crate) fn degrade_reason(error: &notify::Error) -> String {
    match error.kind {
        notify::ErrorKind::MaxFilesWatch => format!(
            "the OS file-watch limit is reached ({error}); rescanning periodically instead. \
             Raise fs.inotify.max_user_watches to get instant updates"
        ),
        _ => format!("cannot watch for changes ({error}); rescanning periodically instead"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_limit_message_says_what_to_do() {
        let error = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        let reason = degrade_reason(&error);
        assert!(reason.contains("max_user_watches"), "{reason}");
        assert!(reason.contains("rescanning periodically"));
    }
}
