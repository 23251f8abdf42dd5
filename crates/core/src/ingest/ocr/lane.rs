//! The OCR lane's run over one source's queue: workers read documents page by page, this
//! thread writes each document's recognised text as it comes.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use image::GrayImage;
use pdf_oxide::rendering::{render_page, RenderOptions};
use pdf_oxide::PdfDocument;

use super::engine::{check_languages, OcrSetupError, PageText, Tesseract};
use crate::error::{Error, Result};
use crate::fulltext::FullText;
use crate::ingest::batch::facts;
use crate::ingest::chunk::chunk_blocks;
use crate::ingest::extract::{
    extract_pdf_pages, format_of, paragraphs, pixels, reader, Block, BlockKind, Budget, Extracted,
    Format, NotIndexed, RecognisedPage,
};
use crate::ingest::options::IndexOptions;
use crate::ingest::outcome::{file_name, read_checked, EXTRACT_STACK};
use crate::ingest::progress::IndexEvent;
use crate::ingest::run::Run;
use crate::ingest::walk::FileStat;
use crate::store::writes::{self, Extraction};
use crate::store::{dequeue_ocr, DocumentStatus, NewChunk, OcrJob, Source, Store};

/// Reads the source's documents waiting for OCR, unless the run is paused; a document
/// interrupted by a pause stays queued for the next run.
pub(crate) fn read_queued(
    store: &mut Store,
    fulltext: &mut FullText,
    source: &Source,
    options: &IndexOptions,
    run: &mut Run<'_>,
) -> Result<()> {
    let jobs = store.ocr_jobs(source.id)?;
    if jobs.is_empty() || options.is_cancelled() {
        return Ok(());
    }
    let workers = options.ocr_threads.clamp(1, 8).min(jobs.len());
    let engines = match start_engines(&source.ocr_languages, workers) {
        Ok(engines) => engines,
        Err(setup) => return fail_all(store, source, &jobs, &setup, run),
    };
    let queued: u64 = jobs.iter().map(|j| u64::from(j.pages)).sum();
    run.progress.ocr_pages_total = run.progress.ocr_pages_done + queued;
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| -> Result<()> {
        let (tx, rx) = mpsc::sync_channel::<Message<'_>>(8);
        for mut engine in engines {
            let tx = tx.clone();
            let (jobs, next) = (&jobs, &next);
            // The PDF parser runs here too: the extraction threads' stack (see `outcome`).
            let worker = std::thread::Builder::new()
                .name("quarry-ocr".into())
                .stack_size(EXTRACT_STACK);
            worker
                .spawn_scoped(s, move || loop {
                    if options.is_cancelled() {
                        break;
                    }
                    let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let on_page = |page: u32, text: &PageText| {
                        let _ = tx.send(Message::Page {
                            path: &job.path,
                            page,
                            confidence: text.confidence,
                        });
                    };
                    let busy = crate::cores::LaneBusy::begin();
                    let read = read_document(&mut engine, job, options, &on_page);
                    drop(busy);
                    if tx.send(Message::Document(job, read)).is_err() {
                        break;
                    }
                })
                .map_err(|e| Error::Internal(format!("cannot start an OCR worker: {e}")))?;
        }
        drop(tx);
        let result = (|| -> Result<()> {
            for message in rx.iter() {
                match message {
                    Message::Page {
                        path,
                        page,
                        confidence,
                    } => count_page(run, source, (path, page), confidence, started.elapsed()),
                    Message::Document(job, read) => {
                        write_read(store, source, job, read, run)?;
                        run.sync_fulltext(store, fulltext, false)?;
                    }
                }
            }
            Ok(())
        })();
        if result.is_err() {
            // Stop the workers early: they see the claimed index past the end.
            next.store(usize::MAX / 2, Ordering::Relaxed);
        }
        result
    })?;
    run.sync_fulltext(store, fulltext, true)
}

/// What a worker tells the writing thread.
enum Message<'j> {
    /// A page was read.
    Page {
        path: &'j Path,
        page: u32,
        confidence: u8,
    },
    /// A document is done (or not).
    Document(&'j OcrJob, DocumentRead),
}

/// One engine per worker, each with the source's languages loaded.
fn start_engines(
    languages: &[String],
    workers: usize,
) -> std::result::Result<Vec<Tesseract>, OcrSetupError> {
    check_languages(languages)?;
    (0..workers).map(|_| Tesseract::new(languages)).collect()
}

/// What became of one queued document.
enum DocumentRead {
    /// Its text, as the document's new revision.
    Read(Box<ReadFile>),
    /// It could not be read: recorded on the document.
    Failed { stat: FileStat, why: NotIndexed },
    /// The file changed or went away since it was queued: the text lane sees it next.
    Stale,
    /// A pause stopped it: it stays queued.
    Paused,
}

/// A document's recognised text, chunked.
struct ReadFile {
    stat: FileStat,
    hash: String,
    format: &'static str,
    warning: Option<String>,
    extracted_bytes: u64,
    chunks: Vec<NewChunk>,
    reader_text: String,
}

/// Why reading stopped early.
enum Stop {
    Paused,
    Failed(NotIndexed),
}

impl From<NotIndexed> for Stop {
    fn from(why: NotIndexed) -> Self {
        Stop::Failed(why)
    }
}

/// Reads one queued document: the file as it is now, if it is still the content queued.
fn read_document(
    engine: &mut Tesseract,
    job: &OcrJob,
    options: &IndexOptions,
    on_page: &dyn Fn(u32, &PageText),
) -> DocumentRead {
    let Ok(meta) = std::fs::metadata(&job.path) else {
        return DocumentRead::Stale;
    };
    let stat = FileStat::of(&job.path, &meta);
    let Ok(bytes) = read_checked(&stat, options.max_file_size) else {
        return DocumentRead::Stale;
    };
    let hash = blake3::hash(&bytes).to_hex().to_string();
    if hash != job.content_hash {
        return DocumentRead::Stale;
    }
    let mut reading = Reading {
        engine,
        options,
        on_page,
        notes: Vec::new(),
    };
    let recognised = match format_of(&job.path) {
        Format::Image => reading.image(&bytes),
        Format::Pdf => reading.pdf(&bytes),
        _ => return DocumentRead::Stale,
    };
    let notes = std::mem::take(&mut reading.notes);
    match recognised.and_then(|extracted| chunked(extracted, &bytes, options)) {
        Ok((extracted, chunks)) => DocumentRead::Read(Box::new(ReadFile {
            warning: warning(&notes, &extracted.ocr_pages, options),
            extracted_bytes: extracted.text_bytes() as u64,
            format: extracted.format,
            reader_text: extracted.reader_text,
            chunks,
            stat,
            hash,
        })),
        Err(Stop::Paused) => DocumentRead::Paused,
        Err(Stop::Failed(why)) => DocumentRead::Failed { stat, why },
    }
}

/// A document being read: the worker's engine and what its pages gave.
struct Reading<'r> {
    engine: &'r mut Tesseract,
    options: &'r IndexOptions,
    on_page: &'r dyn Fn(u32, &PageText),
    /// What the user should know about single pages ("page 3: cut short after 60 s").
    notes: Vec<String>,
}

impl Reading<'_> {
    /// An image: its first frame, one page. Its resolution is Tesseract's own estimate.
    fn image(&mut self, bytes: &[u8]) -> std::result::Result<Extracted, Stop> {
        let gray = pixels::decode_gray(bytes)?;
        let text = self.page(1, &gray, 0).ok_or(Stop::Paused)?;
        let mut blocks = Vec::new();
        push_page_blocks(&mut blocks, 1, &text);
        Ok(Extracted {
            title: None,
            format: "image",
            blocks,
            warning: None,
            reader_text: String::new(),
            ocr_pages: Vec::new(),
        })
    }

    /// A PDF: its text layer where it has one, OCR for the pages without (up to the cap).
    fn pdf(&mut self, bytes: &[u8]) -> std::result::Result<Extracted, Stop> {
        let cap = self.options.max_ocr_pages_per_file;
        let budget = Budget::new(
            bytes.len() as u64,
            self.options.file_time_budget
                + self.options.ocr_page_time_budget * (cap.min(100_000) as u32 + 1),
        );
        let (mut read, mut paused) = (0usize, false);
        let dpi = self.options.ocr_dpi;
        let mut read_scan = |doc: &PdfDocument,
                             page: usize|
         -> std::result::Result<Option<RecognisedPage>, NotIndexed> {
            if paused || read >= cap {
                return Ok(None);
            }
            let number = page as u32 + 1;
            let (gray, effective_dpi) = match rasterise(doc, page, dpi) {
                Ok(raster) => raster,
                Err(e) => {
                    self.notes
                        .push(format!("page {number} could not be rasterised: {e}"));
                    return Ok(None);
                }
            };
            let Some(text) = self.page(number, &gray, effective_dpi) else {
                paused = true;
                return Ok(None);
            };
            read += 1;
            Ok(Some(RecognisedPage {
                text: text.text,
                confidence: text.confidence,
            }))
        };
        let extracted = extract_pdf_pages(bytes, &budget, Some(&mut read_scan))?;
        if paused {
            return Err(Stop::Paused);
        }
        Ok(extracted)
    }

    /// One page through the engine; `None` when a pause stopped it.
    fn page(&mut self, number: u32, gray: &GrayImage, dpi: u32) -> Option<PageText> {
        let options = self.options;
        let text = self
            .engine
            .read_page(gray, dpi, options.ocr_page_time_budget, &|| {
                options.is_cancelled()
            });
        if text.cancelled {
            return None;
        }
        if text.timed_out {
            self.notes.push(format!(
                "page {number} took longer than {} s to read, so only part of its text is indexed",
                options.ocr_page_time_budget.as_secs()
            ));
        }
        (self.on_page)(number, &text);
        Some(text)
    }
}

/// A PDF page as grey pixels at `dpi` (less where the page is so large that the renderer's
/// 16-megapixel bound lowers it), and the resolution it was rendered at.
fn rasterise(
    doc: &PdfDocument,
    page: usize,
    dpi: u32,
) -> std::result::Result<(GrayImage, u32), String> {
    let rendered = render_page(doc, page, &RenderOptions::with_dpi(dpi).as_raw())
        .map_err(|e| e.to_string())?;
    let (width, height) = (rendered.width, rendered.height);
    if u64::from(width) * u64::from(height) > pixels::MAX_PIXELS {
        return Err(format!("{width} × {height} pixels is too large"));
    }
    // Premultiplied RGBA over a white background: alpha is opaque, luma from the colours.
    let gray: Vec<u8> = rendered
        .data
        .chunks_exact(4)
        .map(|p| ((u32::from(p[0]) * 77 + u32::from(p[1]) * 150 + u32::from(p[2]) * 29) >> 8) as u8)
        .collect();
    let image =
        GrayImage::from_raw(width, height, gray).ok_or("the renderer returned too few pixels")?;
    let effective_dpi = doc
        .get_page_media_box(page)
        .ok()
        .map(|(x0, _, x1, _)| (x1 - x0).abs())
        .filter(|points| *points > 1.0)
        .map_or(dpi, |points| (width as f32 * 72.0 / points).round() as u32);
    Ok((image, effective_dpi))
}

/// A page's text as blocks, one per paragraph, with its page and confidence.
fn push_page_blocks(blocks: &mut Vec<Block>, page: u32, text: &PageText) {
    for (start, end) in paragraphs(&text.text) {
        let mut block = Block::new(BlockKind::Text, text.text[start..end].to_string());
        block.page = Some(page);
        block.ocr_confidence = Some(text.confidence);
        blocks.push(block);
    }
}

/// The reader text and chunks of what was read, within the per-file chunk cap.
fn chunked(
    extracted: Extracted,
    bytes: &[u8],
    options: &IndexOptions,
) -> std::result::Result<(Extracted, Vec<NewChunk>), Stop> {
    let extracted = reader::joined(extracted);
    let budget = Budget::new(bytes.len() as u64, options.file_time_budget);
    let mut chunks = chunk_blocks(&extracted.blocks, &options.chunk, &budget)?;
    chunks.truncate(options.max_chunks_per_file);
    Ok((extracted, chunks))
}

/// What the document's warning says: pages cut short, pages left unread.
fn warning(notes: &[String], unread: &[u32], options: &IndexOptions) -> Option<String> {
    let mut parts = notes.to_vec();
    if let (Some(first), Some(last)) = (unread.first(), unread.last()) {
        parts.push(format!(
            "{} page(s) without a text layer were not read by OCR (pages {first}–{last}; a file \
             is capped at {} OCR pages)",
            unread.len(),
            options.max_ocr_pages_per_file
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Counts a page read, for the progress the CLI and the Library view show.
fn count_page(
    run: &mut Run<'_>,
    source: &Source,
    (path, page): (&Path, u32),
    confidence: u8,
    elapsed: Duration,
) {
    let progress = &mut run.progress;
    progress.ocr_pages_done += 1;
    if confidence < crate::store::LOW_OCR_CONFIDENCE {
        progress.ocr_pages_low_confidence += 1;
    }
    progress.ocr_pages_total = progress.ocr_pages_total.max(progress.ocr_pages_done);
    progress.ocr_pages_per_sec = progress.ocr_pages_done as f64 / elapsed.as_secs_f64().max(1e-3);
    let left = progress.ocr_pages_total - progress.ocr_pages_done;
    progress.ocr_eta_ms = Some((left as f64 / progress.ocr_pages_per_sec * 1000.0) as u64);
    run.emit(IndexEvent::OcrPage {
        source_id: source.id,
        path: path.to_path_buf(),
        page,
        confidence,
        progress: run.progress.clone(),
    });
}

/// Writes what became of one document, in a transaction of its own.
fn write_read(
    store: &mut Store,
    source: &Source,
    job: &OcrJob,
    read: DocumentRead,
    run: &mut Run<'_>,
) -> Result<()> {
    let tx = store.write()?;
    let mut failure = None;
    match read {
        DocumentRead::Paused => return Ok(()),
        DocumentRead::Stale => dequeue_ocr(&tx, job.document_id)?,
        DocumentRead::Failed { stat, why } => {
            let (reason, message) = match why {
                NotIndexed::Failed { reason, message }
                | NotIndexed::Skipped { reason, message } => (reason, message),
            };
            if job.status == DocumentStatus::Indexed {
                // The text of its other pages stays searchable.
                let note = format!("OCR could not read its scanned pages: {message}");
                writes::set_warning(&tx, job.document_id, &note)?;
                dequeue_ocr(&tx, job.document_id)?;
            } else {
                let file = facts(&stat);
                writes::write_not_indexed(
                    &tx,
                    source.id,
                    &file,
                    DocumentStatus::Failed,
                    reason,
                    &message,
                )?;
            }
            failure = Some(IndexEvent::FileFailed {
                path: job.path.clone(),
                reason: reason.to_string(),
                message,
            });
        }
        DocumentRead::Read(file) => {
            let file_facts = facts(&file.stat);
            if file.chunks.is_empty() {
                writes::write_not_indexed(
                    &tx,
                    source.id,
                    &file_facts,
                    DocumentStatus::Skipped,
                    "no_text",
                    "OCR found no text in it",
                )?;
            } else {
                let title = file_name(&file.stat.path);
                let extraction = Extraction {
                    content_hash: &file.hash,
                    title: &title,
                    format: file.format,
                    warning: file.warning.as_deref(),
                    extracted_bytes: file.extracted_bytes as i64,
                    reader_text: &file.reader_text,
                };
                writes::write_revision(&tx, source.id, &file_facts, &extraction, &file.chunks)?;
                run.progress.chunks_written += file.chunks.len() as u64;
                run.progress.bytes_extracted += file.extracted_bytes;
            }
        }
    }
    tx.commit()?;
    if let Some(event) = failure {
        run.progress.files_failed += 1;
        run.emit(event);
    }
    run.emit(IndexEvent::BatchCommitted {
        progress: run.progress.clone(),
    });
    Ok(())
}

/// Records every queued document as failed for the same reason (no language data).
fn fail_all(
    store: &mut Store,
    source: &Source,
    jobs: &[OcrJob],
    setup: &OcrSetupError,
    run: &mut Run<'_>,
) -> Result<()> {
    for job in jobs {
        let Ok(meta) = std::fs::metadata(&job.path) else {
            continue;
        };
        let stat = FileStat::of(&job.path, &meta);
        let why = NotIndexed::failed(setup.reason, setup.message.clone());
        write_read(store, source, job, DocumentRead::Failed { stat, why }, run)?;
    }
    Ok(())
}
