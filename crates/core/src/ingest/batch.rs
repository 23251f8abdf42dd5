//! The indexing run's writing side: outcomes collected from the workers and committed in
//! batches, each one SQLite transaction (a file is wholly in its old state or its new one).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::options::IndexOptions;
use super::outcome::{
    extract_outcome, not_indexed, read_checked, IndexedFile, NotIndexedFile, Outcome,
};
use super::progress::{IndexEvent, IndexProgress};
use super::run::Run;
use super::walk::FileStat;
use crate::error::{Error, Result};
use crate::ids::{DocumentId, SourceId};
use crate::store::writes::{self, Extraction, FileFacts};
use crate::store::{enqueue_ocr, DocumentStatus, Store, Tx};

/// Collects outcomes and commits them in batches.
pub(super) struct BatchWriter<'o> {
    source_id: SourceId,
    /// Removed documents that a rename took over: they are not deleted.
    pub claimed: HashSet<DocumentId>,
    pending: Vec<Outcome>,
    batch_started: Instant,
    batches: u64,
    options: &'o IndexOptions,
}

impl<'o> BatchWriter<'o> {
    /// A writer for `source_id`, starting with `pending` (rows that need no reading).
    pub(super) fn new(
        source_id: SourceId,
        pending: Vec<Outcome>,
        options: &'o IndexOptions,
    ) -> Self {
        BatchWriter {
            source_id,
            claimed: HashSet::new(),
            pending,
            batch_started: Instant::now(),
            batches: 0,
            options,
        }
    }

    pub(super) fn push(&mut self, outcome: Outcome) {
        self.pending.push(outcome);
    }

    /// The first batch is small so the first hits are searchable within a second.
    pub(super) fn due(&self) -> bool {
        let files = if self.batches == 0 { 32 } else { 256 };
        let chunks: usize = self
            .pending
            .iter()
            .map(|o| match o {
                Outcome::Indexed(file) => file.chunks.len(),
                _ => 0,
            })
            .sum();
        self.pending.len() >= files
            || chunks >= 4000
            || self.batch_started.elapsed() >= Duration::from_secs(1)
    }

    /// Writes every pending outcome in one transaction, then reports the failed files and
    /// the progress.
    pub(super) fn flush(&mut self, store: &mut Store, run: &mut Run<'_>) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let outcomes = std::mem::take(&mut self.pending);
        let mut failures = Vec::new();
        let tx = store.write()?;
        for outcome in outcomes {
            let Some(outcome) = self.apply_rename(&tx, outcome, &mut run.progress)? else {
                continue;
            };
            run.progress.files_processed += 1;
            failures.extend(self.write(&tx, outcome, &mut run.progress)?);
        }
        tx.commit()?;
        // A crash here leaves SQLite ahead of tantivy: the outbox replays it on the next open.
        #[cfg(debug_assertions)]
        fail::fail_point!("index_after_sqlite_commit", |_| {
            std::process::abort();
        });
        self.batches += 1;
        self.batch_started = Instant::now();
        for event in failures {
            run.emit(event);
        }
        run.progress.update_rates(run.started.elapsed(), true);
        run.emit(IndexEvent::BatchCommitted {
            progress: run.progress.clone(),
        });
        Ok(())
    }

    /// A rename moves the first removed document of that content not claimed yet, and is
    /// done (`None`). Any other outcome comes back as it was.
    fn apply_rename(
        &mut self,
        tx: &Tx<'_>,
        outcome: Outcome,
        progress: &mut IndexProgress,
    ) -> Result<Option<Outcome>> {
        let (stat, from) = match outcome {
            Outcome::Renamed { stat, from } => (stat, from),
            other => return Ok(Some(other)),
        };
        let Some(&id) = from.iter().find(|id| !self.claimed.contains(id)) else {
            // Another copy already took that document: index this one normally.
            return Ok(Some(self.read_again(stat)));
        };
        let old_path = writes::document_path(tx, id)?;
        writes::move_document(tx, id, &old_path, &facts(&stat))?;
        self.claimed.insert(id);
        progress.files_renamed += 1;
        progress.files_processed += 1;
        Ok(None)
    }

    /// Reads a file again, as the walk saw it (see `outcome::read_checked`).
    fn read_again(&self, stat: FileStat) -> Outcome {
        match read_checked(&stat, self.options.max_file_size) {
            Ok(bytes) => {
                let hash = blake3::hash(&bytes).to_hex().to_string();
                extract_outcome(stat, hash, bytes, self.options)
            }
            Err(n) => not_indexed(stat, n),
        }
    }

    /// Writes one outcome; a failed file comes back as the event to send after the commit.
    fn write(
        &self,
        tx: &Tx<'_>,
        outcome: Outcome,
        progress: &mut IndexProgress,
    ) -> Result<Option<IndexEvent>> {
        match outcome {
            Outcome::Touched { doc_id, stat } => {
                writes::touch_document(tx, doc_id, &facts(&stat))?;
                progress.files_unchanged += 1;
                Ok(None)
            }
            Outcome::Indexed(file) => {
                self.write_indexed(tx, &file, progress)?;
                Ok(None)
            }
            Outcome::NotIndexed(file) => self.write_not_indexed(tx, file, progress),
            Outcome::AwaitingOcr { stat, hash, pages } => {
                let id = writes::write_not_indexed(
                    tx,
                    self.source_id,
                    &facts(&stat),
                    DocumentStatus::Skipped,
                    "ocr_pending",
                    &format!("no text layer: waiting for OCR ({pages} page(s))"),
                )?;
                enqueue_ocr(tx, id, &hash, pages)?;
                progress.files_awaiting_ocr += 1;
                Ok(None)
            }
            Outcome::Renamed { .. } => {
                Err(Error::Internal("rename outcome left unresolved".into()))
            }
        }
    }

    fn write_indexed(
        &self,
        tx: &Tx<'_>,
        file: &IndexedFile,
        progress: &mut IndexProgress,
    ) -> Result<()> {
        let extraction = Extraction {
            content_hash: &file.hash,
            title: &file.title,
            format: file.format,
            warning: file.warning.as_deref(),
            extracted_bytes: file.extracted_bytes as i64,
            reader_text: &file.reader_text,
        };
        let id = writes::write_revision(
            tx,
            self.source_id,
            &facts(&file.stat),
            &extraction,
            &file.chunks,
        )?;
        if file.ocr_pages > 0 {
            enqueue_ocr(tx, id, &file.hash, file.ocr_pages)?;
            progress.files_awaiting_ocr += 1;
        }
        progress.files_indexed += 1;
        progress.chunks_written += file.chunks.len() as u64;
        progress.bytes_extracted += file.extracted_bytes;
        progress.bytes_read += file.stat.size;
        Ok(())
    }

    fn write_not_indexed(
        &self,
        tx: &Tx<'_>,
        file: NotIndexedFile,
        progress: &mut IndexProgress,
    ) -> Result<Option<IndexEvent>> {
        writes::write_not_indexed(
            tx,
            self.source_id,
            &facts(&file.stat),
            file.status,
            file.reason,
            &file.message,
        )?;
        if file.status != DocumentStatus::Failed {
            progress.files_skipped += 1;
            return Ok(None);
        }
        progress.files_failed += 1;
        Ok(Some(IndexEvent::FileFailed {
            path: file.stat.path,
            reason: file.reason.to_string(),
            message: file.message,
        }))
    }
}

pub(super) fn facts(stat: &FileStat) -> FileFacts<'_> {
    FileFacts {
        path: &stat.path,
        size: stat.size as i64,
        mtime_ns: stat.mtime_ns,
        inode: stat.inode,
    }
}
