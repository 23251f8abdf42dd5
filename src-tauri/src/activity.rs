//! What the indexer is doing, folded from the engine's watch events into one snapshot the UI
//! renders as is. Pure state: no Tauri here, so the folding is unit-tested.

use std::collections::BTreeMap;

use quarry_core::{EmbedProgress, IndexEvent, IndexProgress, SourceId, WatchEvent};
use serde::Serialize;

use crate::error::CommandError;

/// The indexer as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "snake_case")]
pub enum IndexerState {
    /// Opening the library.
    Starting,
    /// Scanning and watching.
    Running,
    /// Stopped by the user; nothing is read until resumed.
    Paused,
    /// Stopped by an error (`Activity::error` says which).
    Error,
}

/// Where one source stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for its first scan of this session.
    Queued,
    /// Walking its folder.
    Scanning,
    /// Reading files.
    Indexing,
    /// Reading scans and images by OCR (after every source's text).
    Reading,
    /// Current.
    Done,
    /// Its folder is gone; its documents are kept.
    Missing,
}

/// How changes to a source are noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "snake_case")]
pub enum WatchMode {
    /// OS file events.
    Events,
    /// Periodic rescans.
    Poll,
}

/// One source's activity.
#[derive(Debug, Clone, Serialize, specta::Type)]
pub struct SourceActivity {
    pub source_id: SourceId,
    pub phase: Phase,
    pub watch: Option<WatchMode>,
    /// Totals of the latest run over this source.
    pub progress: Option<IndexProgress>,
    pub degraded_reason: Option<String>,
}

/// The last change the watcher indexed.
#[derive(Debug, Clone, Serialize, specta::Type)]
pub struct LastChange {
    pub paths: Vec<String>,
    pub at_ms: u64,
}

/// Everything the UI shows about indexing (the payload of `events::ActivityChanged`).
#[derive(Debug, Clone, Serialize, specta::Type)]
pub struct Activity {
    /// Grows with every change: the UI ignores a snapshot older than the one it shows.
    pub seq: u64,
    pub state: IndexerState,
    /// Why the indexer stopped (state `error`), with core's code (`writer_busy` when another
    /// process indexes this library).
    pub error: Option<CommandError>,
    pub sources: Vec<SourceActivity>,
    pub embedding: Vec<EmbedProgress>,
    pub embedding_unavailable: Option<String>,
    pub last_change: Option<LastChange>,
}

/// What an event changed, so the shell knows which UI events to send.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    /// A phase or state changed: send the activity now, not throttled.
    pub milestone: bool,
    /// Searchable content changed: searches should run again.
    pub index_changed: bool,
    /// Source rows (counts, status) changed: lists should be fetched again.
    pub sources_changed: bool,
}

/// The folded state, with the source the current run is working on.
#[derive(Debug)]
pub struct ActivityState {
    seq: u64,
    state: IndexerState,
    error: Option<CommandError>,
    sources: BTreeMap<SourceId, SourceActivity>,
    embedding: BTreeMap<String, EmbedProgress>,
    embedding_unavailable: Option<String>,
    last_change: Option<LastChange>,
    current_source: Option<SourceId>,
}

impl Default for ActivityState {
    fn default() -> Self {
        ActivityState {
            seq: 0,
            state: IndexerState::Starting,
            error: None,
            sources: BTreeMap::new(),
            embedding: BTreeMap::new(),
            embedding_unavailable: None,
            last_change: None,
            current_source: None,
        }
    }
}

impl ActivityState {
    pub fn snapshot(&self) -> Activity {
        Activity {
            seq: self.seq,
            state: self.state,
            error: self.error.clone(),
            sources: self.sources.values().cloned().collect(),
            embedding: self.embedding.values().cloned().collect(),
            embedding_unavailable: self.embedding_unavailable.clone(),
            last_change: self.last_change.clone(),
        }
    }

    pub fn set_state(&mut self, state: IndexerState, error: Option<CommandError>) {
        self.seq += 1;
        self.state = state;
        self.error = error;
        if state != IndexerState::Running {
            // Nothing is watched while stopped, so nothing is known to be current: every
            // source waits for the full scan that resuming starts.
            self.current_source = None;
            for source in self.sources.values_mut() {
                source.watch = None;
                if source.phase != Phase::Missing {
                    source.phase = Phase::Queued;
                }
            }
        }
    }

    /// Keeps exactly these sources (added or removed elsewhere), new ones queued.
    pub fn sync_sources(&mut self, ids: &[SourceId]) {
        self.seq += 1;
        self.sources.retain(|id, _| ids.contains(id));
        for &id in ids {
            self.sources.entry(id).or_insert_with(|| SourceActivity {
                source_id: id,
                phase: Phase::Queued,
                watch: None,
                progress: None,
                degraded_reason: None,
            });
        }
    }

    /// The entry of a source the watcher has started on (a source added by another process
    /// appears here first).
    fn started(&mut self, id: SourceId) -> &mut SourceActivity {
        self.sources.entry(id).or_insert_with(|| SourceActivity {
            source_id: id,
            phase: Phase::Queued,
            watch: None,
            progress: None,
            degraded_reason: None,
        })
    }

    /// Folds one watch event in.
    pub fn apply(&mut self, event: &WatchEvent, now_ms: u64) -> Effects {
        self.seq += 1;
        let mut effects = Effects::default();
        match event {
            WatchEvent::Watching { source_id, .. } => {
                let s = self.started(*source_id);
                s.watch = Some(WatchMode::Events);
                s.degraded_reason = None;
                effects.milestone = true;
            }
            WatchEvent::Degraded { source_id, reason } => {
                let s = self.started(*source_id);
                s.watch = Some(WatchMode::Poll);
                s.degraded_reason = Some(reason.clone());
                effects.milestone = true;
            }
            WatchEvent::Changed { paths } => {
                self.last_change = Some(LastChange {
                    paths: paths.iter().map(|p| p.display().to_string()).collect(),
                    at_ms: now_ms,
                });
                effects.milestone = true;
                effects.index_changed = true;
                effects.sources_changed = true;
            }
            WatchEvent::Embedding(progress) => {
                self.embedding_unavailable = None;
                effects.milestone = progress.done;
                // Vector search sees new vectors as they land.
                effects.index_changed = progress.done;
                self.embedding
                    .insert(progress.collection.clone(), progress.clone());
            }
            WatchEvent::EmbeddingUnavailable { message, .. } => {
                self.embedding_unavailable = Some(message.clone());
                effects.milestone = true;
            }
            WatchEvent::Index(event) => self.apply_index(event, &mut effects),
        }
        effects
    }

    fn apply_index(&mut self, event: &IndexEvent, effects: &mut Effects) {
        match event {
            IndexEvent::ScanStarted { source_id, .. } => {
                self.current_source = Some(*source_id);
                let s = self.started(*source_id);
                s.phase = Phase::Scanning;
                s.progress = None;
                effects.milestone = true;
            }
            IndexEvent::ScanFinished { source_id, .. } => {
                if let Some(s) = self.sources.get_mut(source_id) {
                    s.phase = Phase::Indexing;
                }
                effects.milestone = true;
            }
            IndexEvent::SourceMissing { source_id, .. } => {
                self.started(*source_id).phase = Phase::Missing;
                effects.milestone = true;
                effects.sources_changed = true;
            }
            IndexEvent::FileFailed { .. } => effects.sources_changed = true,
            IndexEvent::BatchCommitted { progress } => {
                if let Some(s) = self.current_source.and_then(|id| self.sources.get_mut(&id)) {
                    s.progress = Some(progress.clone());
                }
            }
            IndexEvent::OcrPage {
                source_id,
                progress,
                ..
            } => {
                let s = self.started(*source_id);
                if s.phase != Phase::Reading {
                    s.phase = Phase::Reading;
                    effects.milestone = true;
                }
                s.progress = Some(progress.clone());
            }
            IndexEvent::FulltextCommitted { .. } => effects.index_changed = true,
            IndexEvent::Finished { progress } => {
                if let Some(s) = self
                    .current_source
                    .take()
                    .and_then(|id| self.sources.get_mut(&id))
                {
                    s.progress = Some(progress.clone());
                }
                for s in self.sources.values_mut() {
                    if matches!(s.phase, Phase::Scanning | Phase::Indexing | Phase::Reading) {
                        s.phase = Phase::Done;
                    }
                }
                effects.milestone = true;
                effects.index_changed = true;
                effects.sources_changed = true;
            }
        }
    }

    #[cfg(test)]
    fn phase_of(&self, id: SourceId) -> Option<Phase> {
        self.sources.get(&id).map(|s| s.phase)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn progress(processed: u64, discovered: u64) -> IndexProgress {
        IndexProgress {
            files_processed: processed,
            files_discovered: discovered,
            ..IndexProgress::default()
        }
    }

    #[test]
    fn a_scan_moves_a_source_from_queued_through_indexing_to_done() {
        let mut state = ActivityState::default();
        state.set_state(IndexerState::Running, None);
        state.sync_sources(&[SourceId(7)]);
        assert_eq!(state.phase_of(SourceId(7)), Some(Phase::Queued));

        let root = PathBuf::from("/docs");
        let started = state.apply(
            &WatchEvent::Index(IndexEvent::ScanStarted {
                source_id: SourceId(7),
                root: root.clone(),
            }),
            0,
        );
        assert!(started.milestone);
        assert_eq!(state.phase_of(SourceId(7)), Some(Phase::Scanning));
        state.apply(
            &WatchEvent::Index(IndexEvent::ScanFinished {
                source_id: SourceId(7),
                discovered: 10,
            }),
            0,
        );
        assert_eq!(state.phase_of(SourceId(7)), Some(Phase::Indexing));
        let batch = state.apply(
            &WatchEvent::Index(IndexEvent::BatchCommitted {
                progress: progress(4, 10),
            }),
            0,
        );
        assert!(!batch.milestone, "batches are throttled");
        let snapshot = state.snapshot();
        assert_eq!(
            snapshot.sources[0]
                .progress
                .as_ref()
                .unwrap()
                .files_processed,
            4
        );

        let finished = state.apply(
            &WatchEvent::Index(IndexEvent::Finished {
                progress: progress(10, 10),
            }),
            0,
        );
        assert_eq!(
            finished,
            Effects {
                milestone: true,
                index_changed: true,
                sources_changed: true
            }
        );
        assert_eq!(state.phase_of(SourceId(7)), Some(Phase::Done));
        let json = serde_json::to_value(state.snapshot()).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(json["sources"][0]["phase"], "done");
        assert_eq!(json["sources"][0]["progress"]["files_processed"], 10);
    }

    #[test]
    fn pausing_requeues_every_source_and_forgets_watches() {
        let mut state = ActivityState::default();
        state.set_state(IndexerState::Running, None);
        state.apply(
            &WatchEvent::Watching {
                source_id: SourceId(1),
                root: PathBuf::from("/a"),
            },
            0,
        );
        state.apply(
            &WatchEvent::Index(IndexEvent::ScanStarted {
                source_id: SourceId(1),
                root: PathBuf::from("/a"),
            }),
            0,
        );
        state.sync_sources(&[SourceId(1), SourceId(2)]);
        state.apply(
            &WatchEvent::Index(IndexEvent::Finished {
                progress: IndexProgress::default(),
            }),
            0,
        );
        assert_eq!(state.phase_of(SourceId(1)), Some(Phase::Done));
        let before = state.snapshot().seq;
        state.set_state(IndexerState::Paused, None);
        assert!(
            state.snapshot().seq > before,
            "every change is a newer snapshot"
        );
        let json = serde_json::to_value(state.snapshot()).unwrap();
        assert_eq!(json["state"], "paused");
        assert_eq!(
            json["sources"][0]["phase"], "queued",
            "done is not known while paused"
        );
        assert_eq!(json["sources"][0]["watch"], serde_json::Value::Null);
    }

    #[test]
    fn removed_sources_leave_the_activity_and_changes_are_remembered() {
        let mut state = ActivityState::default();
        state.sync_sources(&[SourceId(1), SourceId(2)]);
        state.sync_sources(&[SourceId(2)]);
        assert_eq!(state.phase_of(SourceId(1)), None);
        // The rest of a removed source's scan does not bring it back.
        state.current_source = Some(SourceId(1));
        state.apply(
            &WatchEvent::Index(IndexEvent::BatchCommitted {
                progress: IndexProgress::default(),
            }),
            0,
        );
        state.apply(
            &WatchEvent::Index(IndexEvent::ScanFinished {
                source_id: SourceId(1),
                discovered: 3,
            }),
            0,
        );
        assert_eq!(state.phase_of(SourceId(1)), None);
        let effects = state.apply(
            &WatchEvent::Changed {
                paths: vec![PathBuf::from("/a/b.md")],
            },
            42,
        );
        assert!(effects.index_changed);
        let change = state.snapshot().last_change.unwrap();
        assert_eq!(change.paths, vec!["/a/b.md".to_string()]);
        assert_eq!(change.at_ms, 42);
    }

    #[test]
    fn a_missing_model_is_reported_until_vectors_flow_again() {
        let mut state = ActivityState::default();
        state.apply(
            &WatchEvent::EmbeddingUnavailable {
                code: "model_missing",
                message: "install it: quarry models fetch --defaults".into(),
            },
            0,
        );
        assert!(state.snapshot().embedding_unavailable.is_some());
        state.apply(
            &WatchEvent::Embedding(EmbedProgress {
                collection: "docs".into(),
                model: "m".into(),
                device: Some("CPU".into()),
                embedded: 5,
                total: 5,
                embedded_this_run: 5,
                chunks_per_sec: 10.0,
                tokens_this_run: 500,
                model_tokens_this_run: 500,
                tokens_per_sec: 1000.0,
                shared: 0,
                lexical_only: 0,
                eta_ms: Some(0),
                done: true,
            }),
            0,
        );
        let snapshot = state.snapshot();
        assert!(snapshot.embedding_unavailable.is_none());
        assert_eq!(snapshot.embedding[0].embedded, 5);
    }
}
