//! Long work the window can stop (an answer being written, a model being downloaded), by the
//! id the window gave it: the Stop or Cancel button names the id, the work checks its
//! [`Cancel`] at its next step.

use std::collections::HashMap;
use std::sync::Mutex;

use quarry_core::cancel::Cancel;

#[derive(Default)]
pub struct Stops(Mutex<HashMap<String, Cancel>>);

impl Stops {
    /// Registers work under `id` and returns the button it checks.
    pub fn start(&self, id: &str) -> Cancel {
        let cancel = Cancel::new();
        self.lock().insert(id.to_string(), cancel.clone());
        cancel
    }

    /// The work under `id` is over.
    pub fn finish(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Stops the work under `id`; false when none runs.
    pub fn stop(&self, id: &str) -> bool {
        self.lock().get(id).map(Cancel::cancel).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cancel>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
