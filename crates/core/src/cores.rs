//! Sharing the machine's cores between the background lanes (embedding, OCR) and the
//! assistant: a lane holds a [`LaneBusy`] while it computes, and the assistant reads its prompt
//! on every core only while no lane does (a lane's threads and the prompt's on the same two
//! cores would each run at half speed, and the lane's progress would stall behind the chat).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Background lanes computing now.
static BUSY_LANES: AtomicUsize = AtomicUsize::new(0);

/// Held by a background lane while it computes; dropping it frees the cores.
#[must_use = "the lane counts as busy only while this is held"]
pub(crate) struct LaneBusy(());

impl LaneBusy {
    /// Marks one lane busy until the guard is dropped.
    pub(crate) fn begin() -> LaneBusy {
        BUSY_LANES.fetch_add(1, Ordering::Relaxed);
        LaneBusy(())
    }
}

impl Drop for LaneBusy {
    fn drop(&mut self) {
        BUSY_LANES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a background lane is computing now.
pub fn lanes_busy() -> bool {
    BUSY_LANES.load(Ordering::Relaxed) > 0
}

/// The cores this process may use.
pub fn all() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Every core but one (long work that should leave the UI and the indexer a core), at least
/// one.
pub fn all_but_one() -> usize {
    all().saturating_sub(1).max(1)
}

/// Threads for a short burst such as reading a prompt: every core while the background lanes
/// are idle, every core but one while one computes.
pub fn for_burst() -> usize {
    if lanes_busy() {
        all_but_one()
    } else {
        all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_lane_leaves_a_core_and_gives_it_back_when_done() {
        // Other tests of the crate run lanes beside this one, so only what a held guard
        // guarantees is asserted.
        let guard = LaneBusy::begin();
        assert!(lanes_busy());
        assert_eq!(for_burst(), all_but_one());
        assert!(all_but_one() >= 1 && all_but_one() <= all());
        drop(guard);
        let second = LaneBusy::begin();
        let third = LaneBusy::begin();
        drop(second);
        assert!(lanes_busy(), "one lane still holds its guard");
        drop(third);
    }
}
