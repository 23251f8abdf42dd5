//! Keeping a library current: OS file events (batched by path), with periodic rescans where
//! events cannot be had.
//!
//! The watcher only collects changed paths; the indexer does the work ([`index_scope`] with
//! [`ScanScope::Paths`]), so a watched change goes through exactly the code a full scan does. A
//! rename names both paths and is recognised by content hash, without re-extraction.
//!
//! Batching: every path any raw event names is kept until the burst has been quiet for
//! `debounce` (or has waited five times that). Events are not merged: a merging debouncer
//! (notify-debouncer-full) turns "renamed a → b, then b deleted" into "b deleted" alone, and `a`
//! then stayed indexed as a ghost. The scan reads the disk, so the set of paths is all it needs.
//!
//! Reconciling: events can be missed or split (a rename whose halves fall in different
//! batches, a file renamed again before the first event is handled, an overflowed queue). Once
//! a burst is over, the folders that saw events are rescanned by size, mtime and inode (cheap:
//! nothing unchanged is read), so a missed event cannot leave a ghost document or stale text
//! for longer than `reconcile_after`.
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

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use serde::Serialize;

use super::indexer::{index_scope, ScanScope};
use super::ocr::read_queued;
use super::options::IndexOptions;
use super::progress::IndexEvent;
use super::run::Run;
use super::walk::resolves_inside;
use crate::error::{Error, Result};
use crate::fulltext::FullText;
use crate::ids::SourceId;
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
    /// Quiet time after the last change before the folders that saw changes are reconciled
    /// with the index. Default 2 s.
    pub reconcile_after: Duration,
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
            reconcile_after: Duration::from_secs(2),
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
        source_id: SourceId,
        /// Its folder.
        #[serde(serialize_with = "crate::serde_paths::path")]
        root: PathBuf,
    },
    /// A source falls back to periodic rescans.
    Degraded {
        /// Source id.
        source_id: SourceId,
        /// Why.
        reason: String,
    },
    /// Paths changed and were re-indexed.
    Changed {
        /// The paths the OS reported.
        #[serde(serialize_with = "crate::serde_paths::paths")]
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
    let lanes = Lanes {
        store,
        fulltext,
        options: index_options,
    };
    Watcher::new(lanes, options, on_event, stop)?.run()
}

/// What a scan writes to, and how it indexes.
struct Lanes<'a> {
    store: &'a mut Store,
    fulltext: &'a mut FullText,
    options: &'a IndexOptions,
}

/// A watched source.
struct Watched {
    source: Source,
    mode: Mode,
    /// When it was last scanned; `None`: a rescan is due now (the OS reported lost events).
    scanned: Option<Instant>,
    /// Folders that saw changes since the last reconciliation.
    unsettled: BTreeSet<PathBuf>,
}

/// The watch loop's state: the OS watch, the sources it covers, and when each periodic
/// job last ran.
struct Watcher<'a> {
    lanes: Lanes<'a>,
    options: &'a WatchOptions,
    on_event: &'a (dyn Fn(&WatchEvent) + Sync),
    stop: &'a AtomicBool,
    os_watcher: RecommendedWatcher,
    events: mpsc::Receiver<notify::Result<notify::Event>>,
    batch: EventBatch,
    sources: HashMap<SourceId, Watched>,
    sources_loaded: Option<Instant>,
    first_load: bool,
    outbox_checked: Instant,
    /// When the last change was handled, while a reconciliation is pending.
    last_change: Option<Instant>,
    /// The library's data directory, resolved: events about its files are not changes.
    library_dir: Option<PathBuf>,
}

impl<'a> Watcher<'a> {
    fn new(
        lanes: Lanes<'a>,
        options: &'a WatchOptions,
        on_event: &'a (dyn Fn(&WatchEvent) + Sync),
        stop: &'a AtomicBool,
    ) -> Result<Self> {
        let (tx, events) = mpsc::channel();
        let os_watcher = notify::recommended_watcher(move |res| {
            let _ = tx.send(res);
        })
        .map_err(|e| Error::Watch {
            path: PathBuf::new(),
            reason: e.to_string(),
        })?;
        let library_dir = lanes
            .store
            .path()
            .parent()
            .and_then(|dir| dir.canonicalize().ok());
        Ok(Watcher {
            library_dir,
            lanes,
            options,
            on_event,
            stop,
            os_watcher,
            events,
            batch: EventBatch::default(),
            sources: HashMap::new(),
            sources_loaded: None,
            first_load: true,
            outbox_checked: Instant::now(),
            last_change: None,
        })
    }

    /// One pass per tick (at most 200 ms of waiting for events) until stopped.
    fn run(mut self) -> Result<()> {
        while !self.stopped() {
            self.reload_sources()?;
            if !self.receive_events(Duration::from_millis(200)) {
                break;
            }
            if let Some((paths, rescan)) = self.batch.take_if_due(self.options.debounce) {
                self.on_changes(paths, rescan)?;
            }
            self.rescan_due()?;
            self.reconcile_due()?;
            self.retry_requested()?;
            self.apply_outbox()?;
        }
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Waits up to `wait` for OS events and takes every one queued: paths into the batch,
    /// errors handled at once. False when the OS watcher is gone.
    fn receive_events(&mut self, wait: Duration) -> bool {
        let mut next = self.events.recv_timeout(wait);
        loop {
            match next {
                Ok(Ok(event)) => self.batch.add(event),
                Ok(Err(error)) => self.on_error(error),
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
            next = self.events.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
            });
        }
    }

    /// Every 2 s: picks up sources added or removed by another process (or the GUI). A new
    /// source (or each at a first start) gets a full scan: it catches what changed while
    /// Quarry was not running.
    fn reload_sources(&mut self) -> Result<()> {
        if self
            .sources_loaded
            .is_some_and(|t| t.elapsed() < Duration::from_secs(2))
        {
            return Ok(());
        }
        self.sources_loaded = Some(Instant::now());
        let current = self.lanes.store.sources()?;
        let ids: BTreeSet<SourceId> = current.iter().map(|s| s.id).collect();
        let os_watcher = &mut self.os_watcher;
        self.sources.retain(|id, w| {
            let keep = ids.contains(id);
            if !keep && w.mode == Mode::Events {
                let _ = os_watcher.unwatch(&w.source.root);
            }
            keep
        });
        for source in current {
            if self.sources.contains_key(&source.id) || self.stopped() {
                continue;
            }
            let mode = start_watching(&mut self.os_watcher, &source, self.options, self.on_event);
            if !self.first_load || self.options.scan_on_start {
                let forward = forward(self.on_event);
                let mut run = Run::new(&forward);
                if self.lanes.scan(&source, &ScanScope::All, &mut run)? {
                    run.finish();
                }
            }
            let scanned = Some(Instant::now());
            self.sources.insert(
                source.id,
                Watched {
                    source,
                    mode,
                    scanned,
                    unsettled: BTreeSet::new(),
                },
            );
        }
        self.first_load = false;
        Ok(())
    }

    /// Re-indexes the paths a burst of OS events names (every source after lost events).
    fn on_changes(&mut self, paths: Vec<PathBuf>, rescan: bool) -> Result<()> {
        let paths = self.without_library_files(paths);
        if paths.is_empty() && !rescan {
            return Ok(());
        }
        let forward = forward(self.on_event);
        let mut run = Run::new(&forward);
        let mut completed = true;
        for w in self.sources.values_mut() {
            let mine = paths_under(&paths, &w.source);
            if mine.is_empty() && !rescan {
                continue;
            }
            let scope = if rescan {
                w.unsettled.clear();
                ScanScope::All
            } else {
                w.unsettled.extend(folders_of(&mine, &w.source));
                self.last_change = Some(Instant::now());
                ScanScope::Paths(mine)
            };
            completed &= self.lanes.scan(&w.source, &scope, &mut run)?;
            w.scanned = Some(Instant::now());
            if !w.source.root.is_dir() {
                w.mode = Mode::Missing;
            }
        }
        if completed {
            run.finish();
        }
        if !paths.is_empty() {
            (self.on_event)(&WatchEvent::Changed { paths });
        }
        Ok(())
    }

    /// Events about the library's own files (reached through a link in a source folder) are
    /// not changes to index: indexing writes those files, so each scan would start the next.
    fn without_library_files(&self, mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
        if let Some(dir) = &self.library_dir {
            paths.retain(|p| !resolves_inside(p, dir));
        }
        paths
    }

    /// A watch error: the sources it touches are rescanned on the next tick (events may have
    /// been lost), and fall back to polling when the OS refuses more watches.
    fn on_error(&mut self, error: notify::Error) {
        let reason = error.to_string();
        tracing::warn!(%reason, "file watcher error; rescanning");
        for w in self.sources.values_mut() {
            let touched =
                error.paths.is_empty() || error.paths.iter().any(|p| p.starts_with(&w.source.root));
            if !touched {
                continue;
            }
            if matches!(error.kind, notify::ErrorKind::MaxFilesWatch) {
                let _ = self.os_watcher.unwatch(&w.source.root);
                w.mode = Mode::Poll;
                (self.on_event)(&WatchEvent::Degraded {
                    source_id: w.source.id,
                    reason: reason.clone(),
                });
            }
            w.scanned = None;
        }
    }

    /// Full rescans that are due: polled sources, sources whose events were lost, and
    /// missing folders that came back (watched again first).
    fn rescan_due(&mut self) -> Result<()> {
        for w in self.sources.values_mut() {
            let back = w.mode == Mode::Missing && w.source.root.is_dir();
            let due = match w.scanned {
                None => w.mode != Mode::Missing,
                Some(t) => w.mode == Mode::Poll && t.elapsed() >= self.options.rescan_interval,
            };
            if back {
                w.mode =
                    start_watching(&mut self.os_watcher, &w.source, self.options, self.on_event);
            }
            if (back || due) && !self.stop.load(Ordering::Relaxed) {
                let forward = forward(self.on_event);
                let mut run = Run::new(&forward);
                if self.lanes.scan(&w.source, &ScanScope::All, &mut run)? {
                    run.finish();
                }
                w.scanned = Some(Instant::now());
                if !w.source.root.is_dir() {
                    w.mode = Mode::Missing;
                }
            }
        }
        Ok(())
    }

    /// Once changes have been quiet for `reconcile_after`: the folders that saw them, scanned
    /// by size, mtime and inode. Silent unless it finds something the events missed.
    fn reconcile_due(&mut self) -> Result<()> {
        let quiet_for = self.options.reconcile_after;
        if self.last_change.is_none_or(|t| t.elapsed() < quiet_for) || self.stopped() {
            return Ok(());
        }
        self.last_change = None;
        let on_event = self.on_event;
        let forward = forward(on_event);
        // Only a failure is news while scanning; a summary follows if anything was missed.
        let per_file = |e: &IndexEvent| {
            if matches!(e, IndexEvent::FileFailed { .. }) {
                on_event(&WatchEvent::Index(e.clone()));
            }
        };
        for w in self.sources.values_mut() {
            if w.unsettled.is_empty() || w.mode == Mode::Missing {
                continue;
            }
            let folders = outermost(std::mem::take(&mut w.unsettled));
            let mut run = Run::new(&per_file);
            let completed = self
                .lanes
                .scan(&w.source, &ScanScope::Folders(folders), &mut run)?;
            let p = &run.progress;
            let missed = p.files_indexed + p.files_removed + p.files_renamed + p.files_failed;
            if completed && missed > 0 {
                tracing::info!(
                    source = w.source.id.0,
                    missed,
                    "reconciliation found changes the file events missed"
                );
                run.on_event = &forward;
                run.finish();
            }
        }
        Ok(())
    }

    /// The paths the user asked to re-read: failed files are read again even if unchanged.
    fn retry_requested(&mut self) -> Result<()> {
        let requested = self.options.requests.take();
        if requested.is_empty() {
            return Ok(());
        }
        let retry = IndexOptions {
            retry_failed: true,
            ..self.lanes.options.clone()
        };
        let mut lanes = Lanes {
            store: &mut *self.lanes.store,
            fulltext: &mut *self.lanes.fulltext,
            options: &retry,
        };
        let forward = forward(self.on_event);
        let mut run = Run::new(&forward);
        let mut completed = true;
        for w in self.sources.values() {
            let mine = paths_under(&requested, &w.source);
            if !mine.is_empty() {
                completed &= lanes.scan(&w.source, &ScanScope::Paths(mine), &mut run)?;
            }
        }
        if completed {
            run.finish();
        } else if self.stopped() {
            // Paused mid-retry: ask again after resuming (re-reading is harmless).
            for path in requested {
                self.options.requests.push(path);
            }
        }
        Ok(())
    }

    /// Every 2 s: applies outbox rows written by other processes (a source removed from the
    /// CLI while we watch) to the full-text index.
    fn apply_outbox(&mut self) -> Result<()> {
        if self.outbox_checked.elapsed() < Duration::from_secs(2) {
            return Ok(());
        }
        self.outbox_checked = Instant::now();
        let forward = forward(self.on_event);
        let mut run = Run::new(&forward);
        let Lanes {
            store, fulltext, ..
        } = &mut self.lanes;
        if store.outbox_max_seq()? > fulltext.applied_seq()? {
            run.sync_fulltext(store, fulltext, true)?;
        }
        Ok(())
    }
}

/// Index events, passed on as watch events.
fn forward<'e>(on_event: &'e (dyn Fn(&WatchEvent) + Sync)) -> impl Fn(&IndexEvent) + Sync + 'e {
    move |e: &IndexEvent| on_event(&WatchEvent::Index(e.clone()))
}

impl Lanes<'_> {
    /// Indexes `scope` of `source`; false when the scan did not complete: cancelled, or the
    /// source was removed meanwhile (by the app or another process). A removed source is not
    /// an error: its rows are gone, so the scan's writes fail, and the next reload drops it.
    fn scan(&mut self, source: &Source, scope: &ScanScope, run: &mut Run<'_>) -> Result<bool> {
        let (store, fulltext, options) = (&mut *self.store, &mut *self.fulltext, self.options);
        let scanned = index_scope(store, fulltext, source, scope, options, run)
            .and_then(|()| read_queued(store, fulltext, source, options, run));
        match scanned {
            Ok(()) => Ok(!options.is_cancelled()),
            Err(e) if matches!(store.source(source.id), Err(Error::SourceNotFound(_))) => {
                tracing::info!(source = source.id.0, error = %e, "source removed during its scan");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// The folders holding `paths` (inside the source's folder).
fn folders_of<'p>(paths: &'p [PathBuf], source: &'p Source) -> impl Iterator<Item = PathBuf> + 'p {
    paths.iter().map(|p| match p.parent() {
        Some(parent) if parent.starts_with(&source.root) => parent.to_path_buf(),
        _ => source.root.clone(),
    })
}

/// `folders` without those inside another of them (a folder scan covers its subfolders).
fn outermost(folders: BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = Vec::new();
    // Sorted, a folder comes before everything inside it.
    for folder in folders {
        if !kept.iter().any(|k| folder.starts_with(k)) {
            kept.push(folder);
        }
    }
    kept
}

/// The paths inside `source`'s folder.
fn paths_under(paths: &[PathBuf], source: &Source) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.starts_with(&source.root))
        .cloned()
        .collect()
}

fn start_watching(
    os_watcher: &mut RecommendedWatcher,
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
    match os_watcher.watch(&source.root, RecursiveMode::Recursive) {
        Ok(()) => {
            on_event(&WatchEvent::Watching {
                source_id: source.id,
                root: source.root.clone(),
            });
            Mode::Events
        }
        Err(error) => {
            let _ = os_watcher.unwatch(&source.root);
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

/// The paths raw OS events named since the last batch was taken, and whether the OS said
/// events were lost (then every source is rescanned).
#[derive(Default)]
struct EventBatch {
    paths: BTreeSet<PathBuf>,
    rescan: bool,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl EventBatch {
    fn add(&mut self, event: notify::Event) {
        let rescan = event.need_rescan();
        // Reads are not changes, and our own scans read: counting them would make every scan
        // trigger the next one.
        let paths = if matches!(event.kind, notify::EventKind::Access(_)) {
            Vec::new()
        } else {
            event.paths
        };
        if paths.is_empty() && !rescan {
            return;
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.rescan |= rescan;
        self.paths.extend(paths);
    }

    /// The paths and the rescan flag once the burst has been quiet for `debounce`, or has
    /// waited five times that (a folder that never stops changing is still indexed).
    fn take_if_due(&mut self, debounce: Duration) -> Option<(Vec<PathBuf>, bool)> {
        let (first, last) = (self.first?, self.last?);
        if last.elapsed() < debounce && first.elapsed() < debounce * 5 {
            return None;
        }
        let batch = std::mem::take(self);
        Some((batch.paths.into_iter().collect(), batch.rescan))
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
    use std::sync::Mutex;

    use notify::event::{AccessKind, EventKind, ModifyKind, RemoveKind, RenameMode};
    use notify::Event;

    use super::*;
    use crate::store::test_support::{collection_with_source, temp_store};

    #[test]
    fn a_batch_keeps_every_path_a_rename_then_delete_named() {
        let (a, b) = (PathBuf::from("/n/a.md"), PathBuf::from("/n/b.md"));
        let mut batch = EventBatch::default();
        batch.add(
            Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::Both)))
                .add_path(a.clone())
                .add_path(b.clone()),
        );
        batch.add(Event::new(EventKind::Remove(RemoveKind::File)).add_path(b.clone()));
        batch.add(Event::new(EventKind::Access(AccessKind::Any)).add_path("/n/read.md".into()));
        assert!(
            batch.take_if_due(Duration::from_secs(60)).is_none(),
            "not quiet yet"
        );
        let (paths, rescan) = batch.take_if_due(Duration::ZERO).unwrap();
        assert_eq!(
            paths,
            [a, b],
            "the rename's source stays, reads are not changes"
        );
        assert!(!rescan);
        assert!(batch.take_if_due(Duration::ZERO).is_none(), "taken once");
    }

    #[test]
    fn reconciliation_removes_a_document_whose_event_was_missed_and_says_so() {
        let docs = tempfile::tempdir().unwrap();
        let root = docs.path().canonicalize().unwrap();
        std::fs::write(root.join("kept.md"), "# Kept\n\nStill here.").unwrap();
        std::fs::write(root.join("ghost.md"), "# Ghost\n\nGone without a word.").unwrap();
        let (data, mut store) = temp_store();
        let source = collection_with_source(&mut store, "c", "internal", "m", &root);
        let mut fulltext = FullText::open(&data.path().join("fulltext")).unwrap();
        fulltext.start_writing().unwrap();
        let index_options = IndexOptions::default();
        let mut lanes = Lanes {
            store: &mut store,
            fulltext: &mut fulltext,
            options: &index_options,
        };
        assert!(lanes
            .scan(&source, &ScanScope::All, &mut Run::new(&|_| {}))
            .unwrap());
        // Deleted while no event reached the watcher.
        std::fs::remove_file(root.join("ghost.md")).unwrap();

        let events = Mutex::new(Vec::new());
        let on_event = |e: &WatchEvent| {
            events
                .lock()
                .unwrap()
                .push(serde_json::to_value(e).unwrap())
        };
        let (options, stop) = (WatchOptions::default(), AtomicBool::new(false));
        let mut watcher = Watcher::new(lanes, &options, &on_event, &stop).unwrap();
        watcher.sources.insert(
            source.id,
            Watched {
                source: source.clone(),
                mode: Mode::Events,
                scanned: Some(Instant::now()),
                unsettled: BTreeSet::from([root.clone()]),
            },
        );
        // A change elsewhere in the folder, a moment ago: not quiet long enough yet.
        watcher.last_change = Some(Instant::now());
        watcher.reconcile_due().unwrap();
        assert!(events.lock().unwrap().is_empty());
        watcher.last_change = Instant::now().checked_sub(options.reconcile_after);
        watcher.reconcile_due().unwrap();
        drop(watcher);

        assert!(store
            .documents_by_path(&root.join("ghost.md"))
            .unwrap()
            .is_empty());
        assert_eq!(
            store
                .documents_by_path(&root.join("kept.md"))
                .unwrap()
                .len(),
            1
        );
        let events = events.into_inner().unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["event"], "finished");
        assert_eq!(events[0]["progress"]["files_removed"], 1);
    }

    #[test]
    fn watch_limit_message_says_what_to_do() {
        let error = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        let reason = degrade_reason(&error);
        assert!(reason.contains("max_user_watches"), "{reason}");
        assert!(reason.contains("rescanning periodically"));
    }
}
