//! Keeping a library current: OS file events (debounced), with periodic rescans where events
//! cannot be had.
//!
//! The watcher only collects changed paths; the indexer does the work ([`index_scope`] with
//! [`ScanScope::Paths`]), so a watched change goes through exactly the code a full scan does. A
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

use notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{
    new_debouncer, DebounceEventResult, DebouncedEvent, Debouncer, RecommendedCache,
};
use serde::Serialize;

use super::indexer::{index_scope, ScanScope};
use super::options::IndexOptions;
use super::progress::IndexEvent;
use super::run::Run;
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
        source_id: SourceId,
        /// Its folder.
        #[serde(serialize_with = "crate::store::serialize_path")]
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
}

/// The watch loop's state: the OS watch, the sources it covers, and when each periodic
/// job last ran.
struct Watcher<'a> {
    lanes: Lanes<'a>,
    options: &'a WatchOptions,
    on_event: &'a (dyn Fn(&WatchEvent) + Sync),
    stop: &'a AtomicBool,
    debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    events: mpsc::Receiver<DebounceEventResult>,
    sources: HashMap<SourceId, Watched>,
    sources_loaded: Option<Instant>,
    first_load: bool,
    outbox_checked: Instant,
}

impl<'a> Watcher<'a> {
    fn new(
        lanes: Lanes<'a>,
        options: &'a WatchOptions,
        on_event: &'a (dyn Fn(&WatchEvent) + Sync),
        stop: &'a AtomicBool,
    ) -> Result<Self> {
        let (tx, events) = mpsc::channel::<DebounceEventResult>();
        let debouncer = new_debouncer(options.debounce, None, move |res| {
            let _ = tx.send(res);
        })
        .map_err(|e| Error::Watch {
            path: PathBuf::new(),
            reason: e.to_string(),
        })?;
        Ok(Watcher {
            lanes,
            options,
            on_event,
            stop,
            debouncer,
            events,
            sources: HashMap::new(),
            sources_loaded: None,
            first_load: true,
            outbox_checked: Instant::now(),
        })
    }

    /// One pass per tick (at most 200 ms of waiting for events) until stopped.
    fn run(mut self) -> Result<()> {
        while !self.stopped() {
            self.reload_sources()?;
            match self.events.recv_timeout(Duration::from_millis(200)) {
                Ok(Ok(events)) => self.on_changes(&events)?,
                Ok(Err(errors)) => self.on_errors(errors),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            self.rescan_due()?;
            self.retry_requested()?;
            self.apply_outbox()?;
        }
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
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
        let debouncer = &mut self.debouncer;
        self.sources.retain(|id, w| {
            let keep = ids.contains(id);
            if !keep && w.mode == Mode::Events {
                let _ = debouncer.unwatch(&w.source.root);
            }
            keep
        });
        for source in current {
            if self.sources.contains_key(&source.id) || self.stopped() {
                continue;
            }
            let mode = start_watching(&mut self.debouncer, &source, self.options, self.on_event);
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
                },
            );
        }
        self.first_load = false;
        Ok(())
    }

    /// Re-indexes the paths a burst of OS events names (every source after lost events).
    fn on_changes(&mut self, events: &[DebouncedEvent]) -> Result<()> {
        let rescan = events.iter().any(|e| e.need_rescan());
        // Reads are not changes, and our own scans read: counting them would make every
        // scan trigger the next one.
        let paths: BTreeSet<PathBuf> = events
            .iter()
            .filter(|e| !matches!(e.kind, notify::EventKind::Access(_)))
            .flat_map(|e| e.paths.iter().cloned())
            .collect();
        let paths: Vec<PathBuf> = paths.into_iter().collect();
        let forward = forward(self.on_event);
        let mut run = Run::new(&forward);
        let mut completed = true;
        for w in self.sources.values_mut() {
            let mine = paths_under(&paths, &w.source);
            if mine.is_empty() && !rescan {
                continue;
            }
            let scope = if rescan {
                ScanScope::All
            } else {
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

    /// Watch errors: the sources they touch are rescanned on the next tick (events may have
    /// been lost), and fall back to polling when the OS refuses more watches.
    fn on_errors(&mut self, errors: Vec<notify::Error>) {
        for error in errors {
            let reason = error.to_string();
            tracing::warn!(%reason, "file watcher error; rescanning");
            for w in self.sources.values_mut() {
                let touched = error.paths.is_empty()
                    || error.paths.iter().any(|p| p.starts_with(&w.source.root));
                if !touched {
                    continue;
                }
                if matches!(error.kind, notify::ErrorKind::MaxFilesWatch) {
                    let _ = self.debouncer.unwatch(&w.source.root);
                    w.mode = Mode::Poll;
                    (self.on_event)(&WatchEvent::Degraded {
                        source_id: w.source.id,
                        reason: reason.clone(),
                    });
                }
                w.scanned = None;
            }
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
                    start_watching(&mut self.debouncer, &w.source, self.options, self.on_event);
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
        match index_scope(store, fulltext, source, scope, options, run) {
            Ok(()) => Ok(!options.is_cancelled()),
            Err(e) if matches!(store.source(source.id), Err(Error::SourceNotFound(_))) => {
                tracing::info!(source = source.id.0, error = %e, "source removed during its scan");
                Ok(false)
            }
            Err(e) => Err(e),
        }
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
