//! Printing: human tables and JSON, and the indexing progress bars.

use std::io::Write;
use std::sync::Mutex;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quarry_core::{
    Collection, ConsistencyReport, DocumentView, EmbedProgress, IndexEvent, IndexProgress,
    SearchResults, Source, StatusReport, WatchEvent,
};
use serde::Serialize;

use crate::terminal::{colour, flatten, one_line, printable, printable_path};

fn json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

pub fn collections(list: &[Collection], as_json: bool) -> Result<()> {
    if as_json {
        return json(&list);
    }
    if list.is_empty() {
        println!("no collections");
    }
    for c in list {
        println!(
            "{:<24} {:<14} {}",
            printable(&c.name),
            printable(&c.sensitivity),
            printable(&c.language)
        );
    }
    Ok(())
}

pub fn sources(list: &[Source], as_json: bool) -> Result<()> {
    if as_json {
        return json(&list);
    }
    if list.is_empty() {
        println!("no sources");
    }
    for s in list {
        println!(
            "{:>3}  {:<16} {:>7} indexed {:>5} not indexed  {}{}",
            s.id,
            printable(&s.collection),
            s.documents_indexed,
            s.documents_not_indexed,
            printable_path(&s.root),
            if s.status == quarry_core::SourceStatus::Missing {
                "  [folder missing]"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Snippet with matches in bold on a terminal, `**marked**` otherwise; on one line, with the
/// document's own control characters escaped (only the bold is ours).
fn highlight(text: &str, ranges: &[(usize, usize)], tty: bool) -> String {
    let (open, close) = if tty {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("**", "**")
    };
    let mut out = String::new();
    let mut at = 0;
    for &(s, e) in ranges {
        let (Some(before), Some(matched)) = (text.get(at..s), text.get(s..e)) else {
            continue;
        };
        out.push_str(&flatten(before));
        out.push_str(open);
        out.push_str(&flatten(matched));
        out.push_str(close);
        at = e;
    }
    out.push_str(&flatten(&text[at..]));
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn hits(results: &SearchResults, as_json: bool, explain: bool) -> Result<()> {
    if as_json {
        return json(results);
    }
    for issue in &results.readiness {
        eprintln!(
            "warning[{}]: {}",
            issue.component,
            printable(&issue.message)
        );
    }
    let tty = colour(&std::io::stdout());
    if results.hits.is_empty() {
        println!("no results ({:.1} ms)", results.took_us as f64 / 1000.0);
        return Ok(());
    }
    for hit in &results.hits {
        let mut location = printable_path(&hit.path);
        if let Some(page) = hit.location.page {
            location.push_str(&format!(" p.{page}"));
        }
        if let Some(line) = hit.location.line_start {
            location.push_str(&format!(":{line}"));
        }
        println!(
            "{:>2}. {}  [{}, score {:.2}]",
            hit.rank,
            printable(hit.title.as_deref().unwrap_or("(untitled)")),
            printable(&hit.collection),
            hit.score
        );
        println!("    {location}");
        if let Some(note) = hit.location.ocr_note() {
            println!("    {note}");
        }
        if !hit.heading_path.is_empty() {
            println!("    § {}", printable(&hit.heading_path));
        }
        println!(
            "    {}",
            highlight(&hit.snippet.text, &hit.snippet.highlights, tty)
        );
        if explain {
            let s = &hit.scores;
            let part = |name: &str, rank: Option<usize>, score: Option<f32>| match (rank, score) {
                (Some(r), Some(v)) => format!("{name} #{r} ({v:.3})"),
                _ => format!("{name} -"),
            };
            let mut line = format!(
                "    [{}, {}, fused {:.4}",
                part("lexical", s.lexical_rank, s.lexical_score),
                part("vector", s.vector_rank, s.similarity),
                s.fused
            );
            if let Some(f) = s.freshness {
                line.push_str(&format!(", freshness ×{f:.3}"));
            }
            if let Some(r) = s.rerank {
                line.push_str(&format!(", rerank {r:.3}"));
            }
            if let Some(n) = s.identifier_matches {
                line.push_str(&format!(", exact identifiers {n}"));
            }
            line.push(']');
            println!("{line}");
        }
    }
    if explain {
        println!("stages ({} mode):", results.mode.as_str());
        for t in &results.trace {
            let variant = t
                .variant
                .map(|v| format!(" [variant {v}]"))
                .unwrap_or_default();
            println!(
                "  {:<9}{variant} {:>5} candidates {:>8.2} ms  {}",
                t.stage,
                t.candidates,
                t.took_us as f64 / 1000.0,
                printable(&t.detail)
            );
        }
    }
    println!(
        "({} results, {:.1} ms)",
        results.hits.len(),
        results.took_us as f64 / 1000.0
    );
    Ok(())
}

pub fn status(report: &StatusReport, as_json: bool) -> Result<()> {
    if as_json {
        return json(report);
    }
    let s = &report.stats;
    println!("library      {}", printable_path(&report.data_dir));
    println!("collections  {}   sources {}", s.collections, s.sources);
    println!(
        "documents    {} indexed, {} skipped, {} failed, {} with warnings",
        s.documents_indexed, s.documents_skipped, s.documents_failed, s.documents_with_warnings
    );
    let repeated = match s.chunks_repeated {
        0 => String::new(),
        n => format!(" ({n} repeated copies left out of search)"),
    };
    println!(
        "chunks       {}{repeated}   text {:.1} MB   on disk {:.1} MB",
        s.chunks,
        s.extracted_bytes as f64 / 1e6,
        report.disk_bytes as f64 / 1e6
    );
    println!(
        "full text    applied through #{}{}",
        report.fulltext_applied_seq,
        if s.outbox_pending > 0 {
            format!(", {} change(s) pending", s.outbox_pending)
        } else {
            String::new()
        }
    );
    let ocr = &s.ocr;
    if ocr.pages_read + ocr.pages_waiting > 0 {
        let low = match ocr.pages_low_confidence {
            0 => String::new(),
            n => format!(" ({n} with low confidence)"),
        };
        println!(
            "OCR          {} page(s) read{low}, {} waiting in {} file(s)",
            ocr.pages_read, ocr.pages_waiting, ocr.documents_waiting
        );
    }
    println!("{}", crate::audit_cmd::describe(&report.audit));
    for e in &report.embeddings {
        println!(
            "vectors      {}: {}/{} chunks with {}{}",
            printable(&e.collection),
            e.embedded,
            e.total,
            printable(
                e.pending_model
                    .as_deref()
                    .or(e.model.as_deref())
                    .unwrap_or("no model")
            ),
            match (&e.pending_model, &e.model) {
                (Some(_), Some(old)) => {
                    format!(" (switching; {} serves meanwhile)", printable(old))
                }
                _ => String::new(),
            }
        );
        if e.shared + e.lexical_only > 0 {
            println!(
                "             {} read by the model, {} share a near-duplicate's vector, {} full text only (no prose)",
                e.embedded - e.shared - e.lexical_only,
                e.shared,
                e.lexical_only
            );
        }
        if e.ahead > 0 {
            println!(
                "             {} more embedded first: their documents were searched or opened",
                e.ahead
            );
        }
        if let Some(secs) = e.eta_secs {
            println!(
                "             about {} left at the last measured rate (`quarry index` fills them in)",
                indicatif::HumanDuration(std::time::Duration::from_secs(secs))
            );
        }
    }
    for source in &report.sources {
        if let Some(err) = &source.last_error {
            println!(
                "source {}     {}: {}",
                source.id,
                printable_path(&source.root),
                printable(err)
            );
        }
    }
    if !s.not_indexed_by_reason.is_empty() {
        println!("not indexed:");
        for r in &s.not_indexed_by_reason {
            println!(
                "  {:>6}  {} ({})",
                r.count,
                printable(&r.reason),
                printable(&r.status)
            );
        }
    }
    if !report.problems.is_empty() {
        println!("recent problems:");
        for d in &report.problems {
            let what = d
                .last_error
                .as_deref()
                .or(d.warning.as_deref())
                .unwrap_or("");
            let label = match d.status {
                quarry_core::DocumentStatus::Indexed => "warning".to_string(),
                _ => d.reason.clone().unwrap_or_default(),
            };
            println!(
                "  {}: {} — {}",
                printable(&label),
                printable_path(&d.path),
                printable(what)
            );
        }
    }
    Ok(())
}

pub fn document(view: &DocumentView, as_json: bool) -> Result<()> {
    if as_json {
        return json(view);
    }
    let d = &view.document;
    println!("path      {}", printable_path(&d.path));
    println!("title     {}", printable(d.title.as_deref().unwrap_or("-")));
    println!(
        "status    {:?}{}",
        d.status,
        d.reason
            .as_ref()
            .map(|r| format!(" ({})", printable(r)))
            .unwrap_or_default()
    );
    if let Some(e) = &d.last_error {
        println!("error     {}", printable(e));
    }
    if let Some(w) = &d.warning {
        println!("warning   {}", printable(w));
    }
    println!(
        "format    {}   size {} bytes   chunks {}",
        printable(d.format.as_deref().unwrap_or("-")),
        d.size.unwrap_or(0),
        d.chunk_count
    );
    println!(
        "hash      {}",
        printable(d.content_hash.as_deref().unwrap_or("-"))
    );
    for c in &view.chunks {
        let lines = match (c.location.line_start, c.location.line_end) {
            (Some(a), Some(b)) => format!("lines {a}-{b}"),
            _ => String::new(),
        };
        let page = c
            .location
            .page
            .map(|p| format!("page {p} "))
            .unwrap_or_default();
        println!(
            "--- chunk {} (#{}, {} tokens) {page}{lines} {}",
            c.ordinal,
            c.id,
            c.token_count,
            printable(&c.heading_path)
        );
        let preview: String = c.text.chars().take(240).collect();
        println!("{}", one_line(&preview));
    }
    Ok(())
}

pub fn check(report: &ConsistencyReport, as_json: bool) -> Result<()> {
    if as_json {
        return json(report);
    }
    println!(
        "sqlite chunks {}  full-text chunks {}  missing {}  stale {}  duplicate paths {}  => {}",
        report.sqlite_chunks,
        report.fulltext_chunks,
        report.missing_from_fulltext.len(),
        report.stale_in_fulltext.len(),
        report.duplicate_paths,
        if report.is_consistent() {
            "consistent"
        } else {
            "INCONSISTENT"
        }
    );
    Ok(())
}

pub fn summary(p: &IndexProgress) {
    eprintln!(
        "indexed {} files ({} unchanged, {} renamed, {} removed, {} skipped, {} failed): {} chunks, {:.1} MB text in {:.1}s ({:.0} files/s, {:.1} MB/s)",
        p.files_indexed,
        p.files_unchanged,
        p.files_renamed,
        p.files_removed,
        p.files_skipped,
        p.files_failed,
        p.chunks_written,
        p.bytes_extracted as f64 / 1e6,
        p.elapsed_ms as f64 / 1000.0,
        p.files_per_sec,
        p.extracted_mb_per_sec
    );
    if p.files_reread_for_text > 0 {
        eprintln!(
            "{} unchanged file(s) were read once more to keep their text for reading (fetch_source_document); this happens once after upgrading",
            p.files_reread_for_text
        );
    }
    if p.files_failed > 0 {
        eprintln!("see `quarry status` for the failed files and why");
    }
}

/// Turns index events into a progress bar or JSON lines.
pub struct ProgressReporter {
    bar: Option<ProgressBar>,
    json: bool,
    lock: Mutex<()>,
}

impl ProgressReporter {
    pub fn new(bar: bool, json: bool) -> Self {
        Self::with_unit(bar, json, "files")
    }

    /// A reporter whose bar counts `unit`s.
    pub fn with_unit(bar: bool, json: bool, unit: &str) -> Self {
        let bar = bar.then(|| {
            let pb = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            pb.set_style(
                ProgressStyle::with_template(&format!(
                    "{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {unit} {{msg}} (eta {{eta}})"
                ))
                .expect("a valid template"),
            );
            pb
        });
        ProgressReporter {
            bar,
            json,
            lock: Mutex::new(()),
        }
    }

    fn print_json<T: Serialize>(&self, value: &T) {
        let _guard = self.lock.lock();
        let mut out = std::io::stdout().lock();
        if serde_json::to_writer(&mut out, value).is_ok() {
            let _ = writeln!(out);
            let _ = out.flush();
        }
    }

    pub fn index_event(&self, event: &IndexEvent) {
        if self.json {
            self.print_json(event);
        }
        let Some(bar) = &self.bar else { return };
        match event {
            IndexEvent::ScanFinished { discovered, .. } => bar.inc_length(*discovered),
            IndexEvent::BatchCommitted { progress } => {
                bar.set_position(progress.files_processed);
                bar.set_message(format!(
                    "{} chunks, {:.1} MB/s, {} failed",
                    progress.chunks_written, progress.extracted_mb_per_sec, progress.files_failed
                ));
            }
            IndexEvent::OcrPage {
                path,
                page,
                progress,
                ..
            } => bar.set_message(format!(
                "OCR page {} of {}, {:.2} pages/s: {} page {page}",
                progress.ocr_pages_done,
                progress.ocr_pages_total,
                progress.ocr_pages_per_sec,
                printable_path(path)
            )),
            IndexEvent::SourceMissing { root, .. } => bar.println(format!(
                "source folder missing: {} (documents kept)",
                printable_path(root)
            )),
            _ => {}
        }
    }

    pub fn embed_event(&self, p: &EmbedProgress) {
        if self.json {
            #[derive(Serialize)]
            struct Line<'a> {
                event: &'static str,
                #[serde(flatten)]
                progress: &'a EmbedProgress,
            }
            self.print_json(&Line {
                event: "embedding",
                progress: p,
            });
            return;
        }
        let Some(bar) = &self.bar else { return };
        bar.set_length(p.total.max(0) as u64);
        bar.set_position(p.embedded.max(0) as u64);
        bar.set_message(format!(
            "embedded in {} with {}{}, {:.1}/s, {:.0} tokens/s, {} shared, {} full text only",
            printable(&p.collection),
            printable(&p.model),
            on_device(p),
            p.chunks_per_sec,
            p.tokens_per_sec,
            p.shared,
            p.lexical_only
        ));
    }

    pub fn watch_event(&self, event: &WatchEvent) {
        if self.json {
            self.print_json(event);
            return;
        }
        match event {
            WatchEvent::Watching { root, .. } => eprintln!("watching {}", printable_path(root)),
            WatchEvent::Degraded { reason, .. } => eprintln!("warning: {}", printable(reason)),
            WatchEvent::Changed { paths } => {
                for p in paths {
                    eprintln!("changed {}", printable_path(p));
                }
            }
            WatchEvent::Index(IndexEvent::FileFailed { path, message, .. }) => {
                eprintln!("failed {}: {}", printable_path(path), printable(message))
            }
            WatchEvent::Embedding(p) if p.done && p.embedded_this_run > 0 => eprintln!(
                "embedded {} chunk(s) of {} with {}{}",
                p.embedded_this_run,
                printable(&p.collection),
                printable(&p.model),
                on_device(p)
            ),
            WatchEvent::EmbeddingUnavailable { code, message } => {
                eprintln!(
                    "warning[{code}]: vectors are not being filled in: {}",
                    printable(message)
                )
            }
            WatchEvent::Embedding(_) | WatchEvent::Index(_) => {}
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Any value as pretty JSON.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// " on CUDA 0", " on CPU", or nothing for a served model.
fn on_device(p: &EmbedProgress) -> String {
    p.device
        .as_deref()
        .map(|d| format!(" on {}", printable(d)))
        .unwrap_or_default()
}
