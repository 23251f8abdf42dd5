//! One indexing run's state, carried across its sources: progress, events, and when the
//! full-text index last caught up.

use std::time::{Duration, Instant};

use super::progress::{IndexEvent, IndexProgress};
use crate::error::Result;
use crate::fulltext::FullText;
use crate::store::Store;

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
