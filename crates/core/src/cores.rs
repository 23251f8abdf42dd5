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

/// How much lower than the app's own threads background work runs (the `nice` value added):
/// at 10 the scheduler gives a thread of the window or the assistant about nine times the
/// share of a busy background thread, so indexing a large tree keeps the window answering.
pub const BACKGROUND_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority by [`BACKGROUND_NICENESS`]; the threads it
/// starts afterwards (the indexer's workers, the embedding and OCR lanes, ONNX Runtime's
/// pools made there) inherit it. Returns the thread's niceness after, or the OS's refusal.
pub fn run_in_background() -> std::io::Result<i32> {
    // SAFETY: gettid and getpriority/setpriority only read or set this thread's own
    // scheduling attributes (Linux treats PRIO_PROCESS with a thread id as that thread).
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let lowered = (now + BACKGROUND_NICENESS).min(19);
        if libc::setpriority(libc::PRIO_PROCESS, tid, lowered) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(lowered)
    }
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

    /// This thread's niceness, as the scheduler holds it.
    fn niceness() -> i32 {
        // SAFETY: reads the calling thread's own priority.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn background_work_runs_below_the_app_and_what_it_starts_inherits_that() {
        let app = niceness();
        let (lowered, seen, started) = std::thread::spawn(|| {
            let lowered = run_in_background().unwrap();
            let started = std::thread::spawn(niceness).join().unwrap();
            (lowered, niceness(), started)
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (app + BACKGROUND_NICENESS).min(19));
        assert_eq!((seen, started), (lowered, lowered));
        assert_eq!(niceness(), app, "the calling thread alone is lowered");
    }
}
