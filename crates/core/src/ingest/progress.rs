//! Indexing progress: a stream of events for the GUI and the CLI's progress bars.

use std::path::PathBuf;
use std::time::Duration;

use crate::ids::SourceId;
use serde::Serialize;

/// Running totals of one indexing run.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct IndexProgress {
    /// Files found by the walk so far.
    pub files_discovered: u64,
    /// Files handled (any outcome).
    pub files_processed: u64,
    /// Files extracted and written as a new revision.
    pub files_indexed: u64,
    /// Files whose content had not changed.
    pub files_unchanged: u64,
    /// Files left out on purpose.
    pub files_skipped: u64,
    /// Files that could not be read or parsed.
    pub files_failed: u64,
    /// Documents removed because their file is gone.
    pub files_removed: u64,
    /// Files recognised as renames (content unchanged, no re-extraction).
    pub files_renamed: u64,
    /// Of the files read, those unchanged since the last scan but read once more to keep
    /// their text for reading (`fetch_source_document`): a library from before Quarry kept it.
    pub files_reread_for_text: u64,
    /// Files with pages that have no text layer, queued for the OCR lane.
    pub files_awaiting_ocr: u64,
    /// Pages the OCR lane has to read in this run (queued now or before).
    pub ocr_pages_total: u64,
    /// Pages it has read.
    pub ocr_pages_done: u64,
    /// Of them, pages Tesseract was unsure of (see `store::LOW_OCR_CONFIDENCE`).
    pub ocr_pages_low_confidence: u64,
    /// OCR rate, pages per second of the OCR lane's own time.
    pub ocr_pages_per_sec: f64,
    /// Estimated time until the OCR lane is done.
    pub ocr_eta_ms: Option<u64>,
    /// Chunks written.
    pub chunks_written: u64,
    /// Bytes of text extracted.
    pub bytes_extracted: u64,
    /// Bytes of files read.
    pub bytes_read: u64,
    /// Since the run started.
    pub elapsed_ms: u64,
    /// Processing rate.
    pub files_per_sec: f64,
    /// Extracted text rate, MB/s.
    pub extracted_mb_per_sec: f64,
    /// Estimated time to finish, once the walk is complete.
    pub eta_ms: Option<u64>,
}

impl IndexProgress {
    /// Counts that move when a run changes what is indexed (files written, left out or
    /// removed), to compare before and after a stage.
    pub(crate) fn changes(&self) -> (u64, u64, u64, u64) {
        (
            self.chunks_written,
            self.files_skipped,
            self.files_failed,
            self.files_removed,
        )
    }
}

impl IndexProgress {
    pub(crate) fn update_rates(&mut self, elapsed: Duration, walk_done: bool) {
        self.elapsed_ms = elapsed.as_millis() as u64;
        let secs = elapsed.as_secs_f64().max(1e-3);
        self.files_per_sec = self.files_processed as f64 / secs;
        self.extracted_mb_per_sec = self.bytes_extracted as f64 / 1e6 / secs;
        self.eta_ms = (walk_done && self.files_per_sec > 0.0).then(|| {
            let left = self.files_discovered.saturating_sub(self.files_processed) as f64;
            (left / self.files_per_sec * 1000.0) as u64
        });
    }
}

/// What happened, as it happened.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum IndexEvent {
    /// A source's walk began.
    ScanStarted {
        /// Source id.
        source_id: SourceId,
        /// Its folder.
        #[serde(serialize_with = "crate::serde_paths::path")]
        root: PathBuf,
    },
    /// A source's walk finished.
    ScanFinished {
        /// Source id.
        source_id: SourceId,
        /// Entries found in scope.
        discovered: u64,
    },
    /// A source's folder is gone; its documents are kept.
    SourceMissing {
        /// Source id.
        source_id: SourceId,
        /// Its folder.
        #[serde(serialize_with = "crate::serde_paths::path")]
        root: PathBuf,
    },
    /// One file could not be indexed.
    FileFailed {
        /// The file.
        #[serde(serialize_with = "crate::serde_paths::path")]
        path: PathBuf,
        /// Machine reason.
        reason: String,
        /// Human message.
        message: String,
    },
    /// The OCR lane read a page.
    OcrPage {
        /// Source id.
        source_id: SourceId,
        /// The file.
        #[serde(serialize_with = "crate::serde_paths::path")]
        path: PathBuf,
        /// 1-based page.
        page: u32,
        /// Tesseract's mean word confidence, 0 to 100.
        confidence: u8,
        /// Totals so far.
        progress: IndexProgress,
    },
    /// A batch was committed to SQLite.
    BatchCommitted {
        /// Totals so far.
        progress: IndexProgress,
    },
    /// The full-text index committed: everything up to `seq` is searchable.
    FulltextCommitted {
        /// Outbox sequence applied.
        seq: i64,
        /// Since the run started.
        elapsed_ms: u64,
    },
    /// The run ended.
    Finished {
        /// Final totals.
        progress: IndexProgress,
    },
}
