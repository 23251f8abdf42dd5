//! `quarry bench`: end-to-end throughput and latency figures, printed (never asserted).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Subcommand;
use quarry_core::{IndexEvent, IndexOptions, Library, SearchMode, SearchRequest};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Index a folder into a fresh library and print files/s, MB/s, chunks/s and time to the
    /// first searchable hit; then measure search latency on the result
    Index {
        path: PathBuf,
        /// Keep the library here instead of a temporary directory
        #[arg(long)]
        keep: Option<PathBuf>,
        /// Extraction threads [default: cores]
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Search latency (p50/p95/p99) of top-10 BM25 queries on an existing library
    Search {
        /// Queries to time
        #[arg(long, default_value_t = 500)]
        queries: usize,
    },
}

pub fn run(command: BenchCommand, data_dir: Option<PathBuf>) -> Result<ExitCode> {
    match command {
        BenchCommand::Index {
            path,
            keep,
            threads,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = keep.unwrap_or_else(|| temp.path().to_path_buf());
            let mut library = Library::open(&dir)?;
            library.add_source(&path, "bench", &[], &[])?;
            let mut options = IndexOptions::default();
            if let Some(t) = threads {
                options.threads = t;
            }
            let first_searchable: Mutex<Option<u64>> = Mutex::new(None);
            let started = Instant::now();
            let progress = library.writer()?.index_all(&options, &|event| {
                if let IndexEvent::FulltextCommitted { .. } = event {
                    let mut first = first_searchable.lock().expect("not poisoned");
                    first.get_or_insert(started.elapsed().as_millis() as u64);
                }
            })?;
            let secs = started.elapsed().as_secs_f64();
            let status = library.status()?;
            println!("corpus            {}", path.display());
            println!(
                "files             {} indexed, {} skipped, {} failed",
                progress.files_indexed, progress.files_skipped, progress.files_failed
            );
            println!(
                "read              {:.1} MB",
                progress.bytes_read as f64 / 1e6
            );
            println!(
                "extracted text    {:.1} MB",
                progress.bytes_extracted as f64 / 1e6
            );
            println!("chunks            {}", progress.chunks_written);
            println!("wall time         {secs:.2} s");
            println!(
                "files/s           {:.0}",
                progress.files_indexed as f64 / secs
            );
            println!(
                "MB/s (extracted)  {:.2}",
                progress.bytes_extracted as f64 / 1e6 / secs
            );
            println!(
                "MB/s (read)       {:.2}",
                progress.bytes_read as f64 / 1e6 / secs
            );
            println!(
                "chunks/s          {:.0}",
                progress.chunks_written as f64 / secs
            );
            println!(
                "first searchable  {} ms",
                first_searchable
                    .lock()
                    .expect("not poisoned")
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into())
            );
            println!("library on disk   {:.1} MB", status.disk_bytes as f64 / 1e6);
            println!("peak RSS          {}", peak_rss());
            search_latency(&library, 300)?;
        }
        BenchCommand::Search { queries } => {
            let dir = data_dir.unwrap_or_else(Library::default_data_dir);
            let library = Library::open(&dir)?;
            search_latency(&library, queries)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Queries made of words sampled from indexed chunks (deterministic), timed one by one.
fn search_latency(library: &Library, count: usize) -> Result<()> {
    let stats = library.status()?.stats;
    let ids: Vec<i64> = {
        let step = (stats.chunks.max(1) as usize / 200).max(1);
        (1..=200).map(|i| (i * step) as i64).collect()
    };
    let chunks = library.store().chunks_by_id(&ids)?;
    let words: Vec<String> = chunks
        .iter()
        .flat_map(|c| {
            c.text
                .split(|ch: char| !ch.is_alphanumeric())
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .filter(|w| w.len() >= 5 && w.len() <= 14 && w.chars().all(|c| c.is_ascii_alphabetic()))
        .collect();
    anyhow::ensure!(
        !words.is_empty(),
        "the library has no text to sample queries from"
    );
    let mut seed = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let queries: Vec<String> = (0..count.max(1))
        .map(|_| {
            let n = 1 + (next() % 3) as usize;
            (0..n)
                .map(|_| words[(next() % words.len() as u64) as usize].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    for q in queries.iter().take(20) {
        library
            .search(&SearchRequest::new(q.as_str()).with_mode(SearchMode::Lexical))
            .context("warm-up")?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut empty = 0;
    for q in &queries {
        let mut request = SearchRequest::new(q.as_str()).with_mode(SearchMode::Lexical);
        request.settings.max_per_document = 0;
        let t = Instant::now();
        let r = library.search(&request)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        empty += r.hits.is_empty() as usize;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!(
        "search top-10     {} queries over {} chunks: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  ({} without hits)",
        times.len(),
        stats.chunks,
        pct(0.5),
        pct(0.95),
        pct(0.99),
        empty
    );
    Ok(())
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l[6..].trim().to_string())
        })
        .unwrap_or_else(|| "-".into())
}
