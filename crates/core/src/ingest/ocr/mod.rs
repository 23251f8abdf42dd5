//! On-device OCR: images and PDF pages without a text layer, read by Tesseract in a lane of
//! their own after the text lane (so lexical search of everything else never waits for it).
//!
//! The text lane lists such files in the OCR queue (`store::ocr`); [`read_queued`] takes the
//! source's queue, reads each document on `ocr_threads` workers (one page at a time per
//! worker, each page within `ocr_page_time_budget`), and writes the recognised text as the
//! document's new revision, each chunk carrying its page and Tesseract's confidence.

mod engine;
mod lane;

pub use engine::{check_languages, OcrSetupError};
pub(crate) use lane::read_queued;
