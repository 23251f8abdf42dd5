//! The events the shell sends the window, typed: tauri-specta exports each one with its
//! payload into `ui/src/lib/bindings.ts` (`events.activityChanged.listen(…)`), so neither side
//! spells an event name or mirrors a payload by hand.

use serde::Serialize;
use specta::Type;
use tauri_specta::Event;

use crate::activity::Activity;

/// Indexing activity changed: what the Library view and the status bar show.
#[derive(Debug, Clone, Serialize, Type)]
pub struct ActivityChanged(pub Activity);

/// Sources were added, removed or rescanned: the lists are stale.
#[derive(Debug, Clone, Serialize, Type)]
pub struct SourcesChanged;

/// Indexed content changed (a scan or a watched edit finished): a search on screen is stale.
#[derive(Debug, Clone, Serialize, Type)]
pub struct IndexChanged;

// What the crate's `Event` derive writes, by hand: its macro crate is one more dependency for
// three constants.
impl Event for ActivityChanged {
    const NAME: &'static str = "activity-changed";
}

impl Event for SourcesChanged {
    const NAME: &'static str = "sources-changed";
}

impl Event for IndexChanged {
    const NAME: &'static str = "index-changed";
}
