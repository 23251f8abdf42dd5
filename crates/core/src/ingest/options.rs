//! How an indexing run behaves.

use std::sync::atomic::Ordering;

use super::chunk::ChunkOptions;
use super::extract::ExtractLimits;

/// How an indexing run behaves.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Chunk sizes.
    pub chunk: ChunkOptions,
    /// Files larger than this are skipped with reason `too_large`. Default 64 MiB.
    pub max_file_size: u64,
    /// Extraction threads. Default: the number of cores.
    pub threads: usize,
    /// Re-read files that failed before even if they have not changed. Default false.
    pub retry_failed: bool,
    /// Set to stop a scan early (the desktop app's pause): what was read so far is kept,
    /// and the next scan carries on from there.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Most chunks indexed from one file: the head of a bigger one is indexed and its document
    /// says how much was left out. Default 20,000 (some 15 MB of prose).
    pub max_chunks_per_file: usize,
    /// Longest one file may take to extract and chunk; a file that takes longer is left out
    /// with reason `timeout`. Default 60 s.
    pub file_time_budget: std::time::Duration,
    /// A chunk whose text is repeated word for word in at least this many documents of a
    /// source (navigation, help blocks, footers, shared sections) is searched and embedded
    /// once, in the smallest of them; 0 indexes every copy. Default 5.
    pub repeat_documents: usize,
    /// OCR workers, each reading one page at a time (Tesseract itself may use a second
    /// thread per page). Default 1: the other core stays with the text and embedding lanes
    /// and the window.
    pub ocr_threads: usize,
    /// Longest one page may take to OCR: past it, the text read so far is kept and the
    /// document's warning says which pages were cut short. Default 60 s.
    pub ocr_page_time_budget: std::time::Duration,
    /// Most pages of one file read by OCR; the rest are listed in its warning. Default 300.
    pub max_ocr_pages_per_file: usize,
    /// Resolution PDF pages are rasterised at for OCR (see the OCR bench). Default 300.
    pub ocr_dpi: u32,
    /// Limits on zip containers (DOCX, ODT, EPUB).
    pub(crate) limits: ExtractLimits,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            chunk: ChunkOptions::default(),
            max_file_size: 64 << 20,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            retry_failed: false,
            cancel: None,
            max_chunks_per_file: 20_000,
            file_time_budget: std::time::Duration::from_secs(60),
            repeat_documents: 5,
            ocr_threads: 1,
            ocr_page_time_budget: std::time::Duration::from_secs(60),
            max_ocr_pages_per_file: 300,
            ocr_dpi: 300,
            limits: ExtractLimits::default(),
        }
    }
}

impl IndexOptions {
    /// The same options, stopping early once `cancel` is set.
    pub fn with_cancel(mut self, cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }
}
