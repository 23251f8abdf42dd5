//! The engine as the app holds it: one library handle for the UI's reads and small writes,
//! two more opened on first use for work that holds one for seconds (a chat turn; a tool test
//! or tester run, which may start a Python worker), and one indexer thread that scans and
//! watches every source with its own handle (the library's writer). Pausing stops that
//! thread; resuming starts it again with a full scan, which catches whatever changed meanwhile.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quarry_core::{
    DocumentId, DocumentStatus, Error, IndexOptions, Library, SourceId, WatchEvent, WatchOptions,
    WatchRequests,
};

use crate::activity::{Activity, ActivityState, Effects, IndexerState};
use crate::error::CommandError;

/// What the engine tells the UI; the shell turns each into a Tauri event.
pub enum Notice {
    Activity(Activity),
    SourcesChanged,
    IndexChanged,
}

pub type Notify = Arc<dyn Fn(Notice) + Send + Sync>;

/// Progress is sent at most this often (milestones at once).
const ACTIVITY_INTERVAL: Duration = Duration::from_millis(150);
/// Searches are re-run at most this often while a big scan commits.
const INDEX_CHANGED_INTERVAL: Duration = Duration::from_millis(700);

pub struct Engine {
    data_dir: PathBuf,
    library: Mutex<Library>,
    /// The assistant's own handle, opened on the first question: a turn holds it for seconds,
    /// and the other views keep theirs meanwhile.
    chat: LazyLibrary,
    /// The Tools and Pipelines views' handle for tool tests and tester runs: a cold Python
    /// worker takes seconds to start, and search must not wait for it.
    workbench: LazyLibrary,
    activity: Arc<Mutex<Throttled>>,
    requests: WatchRequests,
    indexer: Mutex<Option<Indexer>>,
    notify: Notify,
}

/// A library handle of its own, opened on first use; one user at a time.
#[derive(Default)]
struct LazyLibrary(Mutex<Option<Library>>);

impl LazyLibrary {
    fn get(&self, data_dir: &Path) -> quarry_core::Result<SideHandle<'_>> {
        let mut handle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if handle.is_none() {
            *handle = Some(Library::open(data_dir)?);
        }
        Ok(SideHandle(handle))
    }
}

/// A [`LazyLibrary`]'s handle, held for one piece of work.
pub struct SideHandle<'a>(MutexGuard<'a, Option<Library>>);

impl std::ops::Deref for SideHandle<'_> {
    type Target = Library;

    fn deref(&self) -> &Library {
        self.0.as_ref().expect("opened by LazyLibrary::get")
    }
}

struct Indexer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// The activity with the times it was last sent.
struct Throttled {
    state: ActivityState,
    activity_sent: Option<Instant>,
    index_changed_sent: Option<Instant>,
}

impl Engine {
    pub fn open(data_dir: &Path, notify: Notify) -> quarry_core::Result<Engine> {
        let library = Library::open(data_dir)?;
        let mut state = ActivityState::default();
        let ids: Vec<SourceId> = library.sources()?.iter().map(|s| s.id).collect();
        state.sync_sources(&ids);
        Ok(Engine {
            data_dir: data_dir.to_path_buf(),
            library: Mutex::new(library),
            chat: LazyLibrary::default(),
            workbench: LazyLibrary::default(),
            activity: Arc::new(Mutex::new(Throttled {
                state,
                activity_sent: None,
                index_changed_sent: None,
            })),
            requests: WatchRequests::default(),
            indexer: Mutex::new(None),
            notify,
        })
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The UI's library handle (reads, adding and removing sources).
    pub fn library(&self) -> MutexGuard<'_, Library> {
        self.library.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The assistant's handle (one turn at a time: a second question waits for the first).
    pub fn chat_library(&self) -> quarry_core::Result<SideHandle<'_>> {
        self.chat.get(&self.data_dir)
    }

    /// The handle tool tests and tester runs use (one at a time), so the UI's stays free.
    pub fn workbench_library(&self) -> quarry_core::Result<SideHandle<'_>> {
        self.workbench.get(&self.data_dir)
    }

    pub fn activity(&self) -> Activity {
        lock(&self.activity).state.snapshot()
    }

    /// Starts the indexer thread unless it runs.
    pub fn start_indexing(&self) {
        let mut indexer = self.indexer.lock().unwrap_or_else(|e| e.into_inner());
        if indexer.as_ref().is_some_and(|i| !i.thread.is_finished()) {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        self.set_state(IndexerState::Starting, None);
        let thread = {
            let (data_dir, stop) = (self.data_dir.clone(), stop.clone());
            let (activity, notify, requests) = (
                self.activity.clone(),
                self.notify.clone(),
                self.requests.clone(),
            );
            std::thread::Builder::new()
                .name("quarry-indexer".into())
                .spawn(move || {
                    // Below the window's threads: on two cores a whole-tree run otherwise
                    // starves the page (see `cores::run_in_background`).
                    if let Err(e) = quarry_core::cores::run_in_background() {
                        tracing::warn!("the indexer runs at the window's priority: {e}");
                    }
                    let result = run_indexer(&data_dir, &stop, &activity, &notify, requests);
                    let (state, error) = match result {
                        Ok(()) => (IndexerState::Paused, None),
                        Err(e) => {
                            tracing::error!(error = %e, "the indexer stopped");
                            (IndexerState::Error, Some(indexer_error(e)))
                        }
                    };
                    let mut a = lock(&activity);
                    a.state.set_state(state, error);
                    notify(Notice::Activity(a.state.snapshot()));
                })
                .expect("spawn the indexer thread")
        };
        *indexer = Some(Indexer { stop, thread });
    }

    /// Stops the indexer thread and waits for it (a file being read is finished first).
    pub fn pause_indexing(&self) {
        // Joined under the lock, so a resume meanwhile waits for this thread to be gone
        // (the thread itself only ever locks the activity).
        let mut indexer = self.indexer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = indexer.take() {
            running.stop.store(true, Ordering::Relaxed);
            let _ = running.thread.join();
        }
        self.set_state(IndexerState::Paused, None);
    }

    /// Queues a document's file to be read again, even if it failed and is unchanged. The
    /// document is named by id: a path can belong to two collections' sources.
    pub fn retry(&self, document_id: DocumentId) -> quarry_core::Result<()> {
        let document = self
            .library()
            .document_by_id(document_id)?
            .ok_or_else(|| Error::DocumentNotFound(format!("document #{document_id}").into()))?;
        if document.status == DocumentStatus::Indexed {
            tracing::info!(path = %document.path.display(), "re-reading an indexed file on request");
        }
        self.requests.push(document.path);
        Ok(())
    }

    /// Re-reads the sources after one was added or removed here.
    pub fn sources_edited(&self) -> quarry_core::Result<()> {
        let ids: Vec<SourceId> = self.library().sources()?.iter().map(|s| s.id).collect();
        {
            // Sent under the lock, so snapshots leave in the order they were taken.
            let mut a = lock(&self.activity);
            a.state.sync_sources(&ids);
            (self.notify)(Notice::Activity(a.state.snapshot()));
        }
        (self.notify)(Notice::SourcesChanged);
        (self.notify)(Notice::IndexChanged);
        Ok(())
    }

    fn set_state(&self, state: IndexerState, error: Option<CommandError>) {
        let mut a = lock(&self.activity);
        a.state.set_state(state, error);
        (self.notify)(Notice::Activity(a.state.snapshot()));
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.pause_indexing();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The indexer thread: its own library handle, the writer lock, then the watcher until
/// `stop`. Another process writing (`quarry index --watch`) is reported, not waited for.
fn run_indexer(
    data_dir: &Path,
    stop: &Arc<AtomicBool>,
    activity: &Arc<Mutex<Throttled>>,
    notify: &Notify,
    requests: WatchRequests,
) -> quarry_core::Result<()> {
    let mut library = Library::open(data_dir)?;
    let mut writer = library.writer()?;
    {
        let mut a = lock(activity);
        a.state.set_state(IndexerState::Running, None);
        notify(Notice::Activity(a.state.snapshot()));
    }
    let index_options = IndexOptions::default().with_cancel(stop.clone());
    let watch_options = WatchOptions {
        requests,
        ..WatchOptions::default()
    };
    let on_event = |event: &WatchEvent| fold_event(activity, notify, event);
    writer.watch(&index_options, &watch_options, &on_event, stop)
}

/// What the UI shows when the indexer stops: core's code and kind, and for another process
/// holding the lock (`writer_busy`), what still works and how to carry on.
fn indexer_error(e: Error) -> CommandError {
    let mut error = CommandError::from(e);
    if error.code == "writer_busy" {
        error.message = format!(
            "{}. Searches work, and indexing resumes here once it stops (press Resume)",
            error.message.trim_end_matches(['.', ';'])
        );
    }
    error
}

/// Folds an event into the activity and sends what changed, throttled.
fn fold_event(activity: &Mutex<Throttled>, notify: &Notify, event: &WatchEvent) {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut a = lock(activity);
    let effects: Effects = a.state.apply(event, now_ms);
    let due =
        |sent: Option<Instant>, interval: Duration| sent.is_none_or(|t| t.elapsed() >= interval);
    if effects.milestone || due(a.activity_sent, ACTIVITY_INTERVAL) {
        a.activity_sent = Some(Instant::now());
        notify(Notice::Activity(a.state.snapshot()));
    }
    if effects.sources_changed && effects.milestone {
        notify(Notice::SourcesChanged);
    }
    // A finished run always refreshes searches; commits during a long run, now and then.
    if effects.index_changed
        && (effects.milestone || due(a.index_changed_sent, INDEX_CHANGED_INTERVAL))
    {
        a.index_changed_sent = Some(Instant::now());
        notify(Notice::IndexChanged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_indexing_keeps_the_writer_busy_code() {
        let error = indexer_error(Error::WriterBusy {
            data_dir: "/lib".into(),
            holder: "pid 7 (quarry index --watch)".into(),
        });
        assert_eq!(error.code, "writer_busy");
        assert_eq!(error.kind, quarry_core::ErrorKind::Unavailable);
        assert!(error.message.contains("pid 7"), "{}", error.message);
        assert!(error.message.contains("press Resume"), "{}", error.message);
    }

    #[test]
    fn search_goes_on_while_a_tool_test_holds_its_handle() {
        let data = tempfile::tempdir().unwrap();
        let engine = Engine::open(data.path(), Arc::new(|_| {})).unwrap();
        // A tool test (or tester run) in progress: it holds the workbench handle, as a cold
        // Python worker would for seconds.
        let testing = engine.workbench_library().unwrap();
        let (done, searched) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let request = quarry_core::SearchRequest::new("anything");
                let results = engine.library().search(&request).map(|r| r.hits.len());
                done.send(results).unwrap();
            });
            // Once the UI's handle served the search, the test lets go (a search that waited
            // for the test would never be answered: the deadline only ends such a hang).
            let answer = searched.recv_timeout(Duration::from_secs(60));
            drop(testing);
            assert_eq!(answer.expect("search answered during the test").unwrap(), 0);
        });
        // The chat's handle is another again.
        let _chat = engine.chat_library().unwrap();
        let _workbench = engine.workbench_library().unwrap();
    }
}
