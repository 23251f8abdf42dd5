//! What one file's extraction may spend. A stranger's file decides how deep and how large its
//! content is, so extraction is bounded in time and in output, not only in input bytes:
//! - time: a deadline the extractors' loops check, so an extraction that outlives the file's
//!   budget stops itself instead of running on abandoned (and, under `--watch`, piling up);
//! - output: text bytes relative to the file's size (a 70 KB DOCX that inflates to
//!   20,000 chunks, a CSV whose header is repeated into every cell), past which the rest of
//!   the file is left out and its status says so.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::NotIndexed;

/// Extracted text a file may yield per byte of its own, before the floor and the ceiling.
const TEXT_PER_FILE_BYTE: u64 = 16;
/// Any file may yield this much text, however small.
const TEXT_FLOOR: u64 = 1 << 20;
/// No file yields more: past 20,000 chunks (`max_chunks_per_file`) nothing more is indexed
/// anyway.
const TEXT_CEILING: u64 = 32 << 20;

/// One file's extraction allowance. Lives on the extraction thread.
#[derive(Debug)]
pub(crate) struct Budget {
    deadline: Instant,
    time: Duration,
    max_text: u64,
    used: Cell<u64>,
    capped: Cell<bool>,
}

impl Budget {
    /// The allowance of a file of `file_size` bytes that may take `time`, from now.
    pub(crate) fn new(file_size: u64, time: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + time,
            time,
            max_text: file_size
                .saturating_mul(TEXT_PER_FILE_BYTE)
                .clamp(TEXT_FLOOR, TEXT_CEILING),
            used: Cell::new(0),
            capped: Cell::new(false),
        }
    }

    /// A budget no ordinary test file reaches.
    #[cfg(test)]
    pub(crate) fn unbounded() -> Budget {
        Budget::new(u64::MAX / TEXT_PER_FILE_BYTE, Duration::from_secs(3600))
    }

    /// Fails once the deadline has passed: extractors call it in their loops.
    pub(crate) fn check(&self) -> Result<(), NotIndexed> {
        if Instant::now() < self.deadline {
            return Ok(());
        }
        Err(timeout(self.time))
    }

    /// Counts `bytes` of extracted text; false once the file's allowance is spent, when the
    /// extractor stops producing (what it produced so far is indexed).
    pub(crate) fn admit(&self, bytes: usize) -> bool {
        let used = self.used.get().saturating_add(bytes as u64);
        if used > self.max_text {
            self.capped.set(true);
            return false;
        }
        self.used.set(used);
        true
    }

    /// What the file's status says when its text was cut at the allowance.
    pub(crate) fn cap_note(&self, file_size: u64) -> Option<String> {
        self.capped.get().then(|| {
            format!(
                "only the first {} of its text is indexed: a file of {} yields at most {} of text, so a small file cannot expand without bound",
                human_bytes(self.used.get()),
                human_bytes(file_size),
                human_bytes(self.max_text)
            )
        })
    }
}

/// Why a file that took longer than `time` was left out.
pub(crate) fn timeout(time: Duration) -> NotIndexed {
    NotIndexed::failed(
        "timeout",
        format!(
            "extracting and chunking took longer than {} s, so the file was left out and the rest of the folder indexed",
            time.as_secs_f64()
        ),
    )
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_allowed_relative_to_the_file_between_a_floor_and_a_ceiling() {
        let small = Budget::new(10, Duration::from_secs(1));
        assert!(small.admit(1 << 20));
        assert!(!small.admit(1));
        assert!(small
            .cap_note(10)
            .unwrap()
            .contains("a file of 10 bytes yields at most 1.0 MiB"));
        let large = Budget::new(1 << 30, Duration::from_secs(1));
        assert!(large.admit(32 << 20));
        assert!(!large.admit(1));
        let medium = Budget::new(1 << 20, Duration::from_secs(1));
        assert!(medium.admit(16 << 20));
        assert!(medium.cap_note(1 << 20).is_none());
    }

    #[test]
    fn the_deadline_fails_the_check_with_the_timeout_reason() {
        let budget = Budget::new(1, Duration::ZERO);
        assert!(matches!(
            budget.check(),
            Err(NotIndexed::Failed {
                reason: "timeout",
                ..
            })
        ));
        assert!(Budget::new(1, Duration::from_secs(60)).check().is_ok());
    }
}
