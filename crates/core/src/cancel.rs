//! A stop button for long work (an answer being generated, a model being downloaded): the
//! caller keeps a clone and presses it; the work checks it at its next step and stops there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared between the caller and the work; cloning shares the same button.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A button not pressed yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Presses it.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether it was pressed.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for work that takes an `AtomicBool` to stop on.
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }
}
