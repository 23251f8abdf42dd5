//! `quarry bench`: end-to-end throughput and latency figures, printed (never asserted).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Subcommand;
use quarry_core::bench::percentile;
use quarry_core::{ChunkId, IndexEvent, IndexOptions, Library, SearchMode, SearchRequest};

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
    /// Search latency (p50/p95/p99) of top-10 queries on an existing library; with `--cold`,
    /// one-shot searches instead, each a fresh `quarry search` process, and where such a
    /// process spends its time
    Search {
        /// Queries to time [default: 500; with --cold, 20 processes]
        #[arg(long)]
        queries: Option<usize>,
        /// lexical, vector or hybrid
        #[arg(long, default_value = "lexical")]
        mode: String,
        /// Time process start → results of one-shot `quarry search` processes
        #[arg(long)]
        cold: bool,
    },
    /// One fresh process's phases of a one-shot search, as JSON (run by `bench search --cold`)
    #[command(hide = true)]
    SearchPhases {
        query: String,
        #[arg(long)]
        mode: String,
    },
    /// KNN latency and recall@10 of sqlite-vec (exact and sign-bit + rescoring) against an
    /// in-memory brute-force scan, on synthetic clustered unit vectors
    Vector {
        /// Vectors
        #[arg(long, default_value_t = 100_000)]
        n: usize,
        /// Dimensions (MiniLM: 384)
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Queries timed per method
        #[arg(long, default_value_t = 100)]
        queries: usize,
        /// Sign-bit candidates rescored exactly (comma-separated to compare)
        #[arg(long, default_value = "100,400,1000", value_delimiter = ',')]
        breadth: Vec<usize>,
    },
    /// Hybrid search latency and memory at scale: index a folder, give every chunk a synthetic
    /// vector (embedding 100k chunks would take an hour here), then time hybrid queries
    /// (query embeddings are real) and report RSS
    Hybrid {
        path: PathBuf,
        /// Queries to time
        #[arg(long, default_value_t = 300)]
        queries: usize,
    },
    /// A whole folder tree as a new user indexes it: full text (files, chunks, time, peak
    /// RSS), then vectors to the end or for `--minutes` (the rest projected at the measured
    /// rate), with what needed the model, what shared a near-duplicate's vector and what stayed
    /// full text only, the embedding phase's peak RSS, and the library's size on disk
    Scale {
        path: PathBuf,
        /// Stop embedding after this many minutes and project the rest [default: to the end]
        #[arg(long)]
        minutes: Option<f64>,
        /// Keep the library here instead of a temporary directory
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// Embedding throughput: the model alone under every run shape the calibration tries
    /// (tokens/s), then the indexer's embedding lane (which adds reading chunks and writing
    /// vectors) on the same chunks with the shape chosen
    Embed {
        /// Folder whose files are indexed and embedded
        path: PathBuf,
        /// Chunks embedded by each method
        #[arg(long, default_value_t = 640)]
        chunks: usize,
    },
    /// Per-call cost of code tools in the Python executor: the first (cold) call, then warm
    /// calls of a no-op chunk tool, the query expansion tool, and an action tool whose
    /// `ctx.search_documents` round-trips to the host (lexical search over `path`)
    Tool {
        /// Folder indexed (full text only) for the ctx round trip
        path: PathBuf,
        /// Warm calls timed per tool
        #[arg(long, default_value_t = 300)]
        calls: usize,
    },
    /// An MCP client's view: `quarry mcp` started over stdio on a fresh library of `path`,
    /// its idle RSS, the first and warm `knowledge_search` calls, beside the same search
    /// through `quarry search` processes and in-process. With `--flood`: over HTTP, a keyed
    /// client's calls before and while other clients make keyless connection attempts and
    /// hold idle connections, and the server's peak RSS
    Mcp {
        /// Folder indexed and embedded
        path: PathBuf,
        /// Warm calls timed
        #[arg(long, default_value_t = 60)]
        calls: usize,
        /// Serve HTTP and flood it while the keyed client calls (issue 38)
        #[arg(long)]
        flood: bool,
        /// With --flood: keyless `initialize` attempts, each on a connection of its own
        #[arg(long, default_value_t = 2000)]
        keyless: usize,
        /// With --flood: connections opened and left idle
        #[arg(long, default_value_t = 1000)]
        idle: usize,
    },
    /// Files crafted against the indexer (nested past any stack, repeated into every cell,
    /// inflating to gigabytes, a named pipe) written into DIR beside an ordinary note, then
    /// indexed: what became of each file, the wall time and the peak RSS
    Hostile {
        /// A new or empty folder to write the files into
        dir: PathBuf,
    },
    /// OCR: pages of known text rendered into DIR (fonts, sizes; clean, turned, grainy, blurred,
    /// a poor copy; PNG and image-only PDF), indexed with one and two OCR workers: word recall by
    /// kind of page, pages/s and peak RSS
    Ocr {
        /// A new or empty folder to write the pages into
        dir: PathBuf,
        /// The BEIR corpus whose abstracts are rendered
        #[arg(long, default_value = "tests/data/cranfield/corpus.jsonl")]
        corpus: PathBuf,
        /// Texts rendered (each under five conditions, two also as PDF)
        #[arg(long, default_value_t = 12)]
        pages: usize,
        /// Resolution PDF pages are rasterised at
        #[arg(long, default_value_t = 300)]
        dpi: u32,
        /// Also time the text lane on this folder, alone and with OCR running beside it
        #[arg(long)]
        text: Option<PathBuf>,
    },
    /// The embedded LLM: load time, RSS with the model loaded, time to first token and
    /// tokens/s by prompt size, then end-to-end chat turns (retrieval + generation) on `path`
    Chat {
        /// Folder indexed and embedded for the chat turns
        path: PathBuf,
        /// Model: an installed model id or a GGUF path [default: the default chat model]
        #[arg(long)]
        model: Option<String>,
        /// Generation runs per prompt size, and chat turns
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Generation threads [default: cores - 1]
        #[arg(long)]
        threads: Option<usize>,
    },
}

pub fn run(command: BenchCommand, data_dir: Option<PathBuf>) -> Result<ExitCode> {
    match command {
        BenchCommand::Vector {
            n,
            dim,
            queries,
            breadth,
        } => return vector_bench(n, dim, queries, &breadth),
        BenchCommand::Hybrid { path, queries } => return hybrid_bench(&path, queries),
        BenchCommand::Tool { path, calls } => return tool_bench(&path, calls),
        BenchCommand::Mcp {
            path,
            calls,
            flood: false,
            ..
        } => return crate::bench_mcp::mcp_bench(&path, calls),
        BenchCommand::Mcp {
            path,
            calls,
            keyless,
            idle,
            ..
        } => return crate::bench_mcp::flood_bench(&path, calls, keyless, idle),
        BenchCommand::Chat {
            path,
            model,
            runs,
            threads,
        } => return chat_bench(&path, model.as_deref(), runs.max(1), threads),
        BenchCommand::Embed { path, chunks } => return embed_bench(&path, chunks),
        BenchCommand::Scale {
            path,
            minutes,
            keep,
        } => return crate::bench_scale::scale_bench(&path, minutes, keep.as_deref()),
        BenchCommand::Hostile { dir } => {
            return crate::bench_hostile::hostile_bench(&dir, data_dir.as_deref())
        }
        BenchCommand::Ocr {
            dir,
            corpus,
            pages,
            dpi,
            text,
        } => return crate::bench_ocr::ocr_bench(&dir, &corpus, pages, dpi, text.as_deref()),
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
            search_latency(&library, 300, SearchMode::Lexical)?;
        }
        BenchCommand::Search {
            queries,
            mode,
            cold,
        } => {
            let dir = data_dir.unwrap_or_else(Library::default_data_dir);
            let mode = SearchMode::parse(&mode)?;
            if cold {
                return crate::bench_cold::cold_search_bench(&dir, mode, queries.unwrap_or(20));
            }
            let library = Library::open(&dir)?;
            search_latency(&library, queries.unwrap_or(500), mode)?;
            println!("RSS after search  {} (peak {})", current_rss(), peak_rss());
        }
        BenchCommand::SearchPhases { query, mode } => {
            let dir = data_dir.unwrap_or_else(Library::default_data_dir);
            return crate::bench_cold::search_phases(&dir, &query, SearchMode::parse(&mode)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Queries made of words sampled from indexed chunks (deterministic), timed one by one.
fn search_latency(library: &Library, count: usize, mode: SearchMode) -> Result<()> {
    let stats = library.status()?.stats;
    let queries = sample_queries(library, count)?;
    for q in queries.iter().take(20) {
        library
            .search(&SearchRequest::new(q.as_str()).with_mode(mode))
            .context("warm-up")?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut empty = 0;
    for q in &queries {
        let mut request = SearchRequest::new(q.as_str()).with_mode(mode);
        request.settings.max_per_document = 0;
        let t = Instant::now();
        let r = library.search(&request)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        empty += r.hits.is_empty() as usize;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!(
        "search top-10     {} {} queries over {} chunks: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  ({} without hits)",
        times.len(),
        mode.as_str(),
        stats.chunks,
        pct(0.5),
        pct(0.95),
        pct(0.99),
        empty
    );
    Ok(())
}

/// `count` queries of one to three words sampled from the library's chunks (deterministic, so
/// runs compare).
pub fn sample_queries(library: &Library, count: usize) -> Result<Vec<String>> {
    let stats = library.status()?.stats;
    let ids: Vec<ChunkId> = {
        let step = (stats.chunks.max(1) as usize / 200).max(1);
        (1..=200).map(|i| ChunkId((i * step) as i64)).collect()
    };
    let chunks = library.chunks_by_id(&ids)?;
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
    Ok((0..count.max(1))
        .map(|_| {
            let n = 1 + (next() % 3) as usize;
            (0..n)
                .map(|_| words[(next() % words.len() as u64) as usize].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect())
}

/// A field of /proc/self/status (memory figures), or "-" where there is none.
fn proc_status(field: &str) -> String {
    process_status("self", field)
}

/// A field of a process's /proc status (`process`: a pid, or `self`), or "-".
pub fn process_status(process: &str, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "-".into())
}

/// Resident memory now.
fn current_rss() -> String {
    proc_status("VmRSS:")
}

/// Highest resident memory so far.
pub(crate) fn peak_rss() -> String {
    proc_status("VmHWM:")
}

fn vector_bench(n: usize, dim: usize, queries: usize, breadths: &[usize]) -> Result<ExitCode> {
    quarry_core::bench::vector_search(n, dim, queries, breadths, &mut |line| println!("{line}"))?;
    println!("peak RSS          {}", peak_rss());
    Ok(ExitCode::SUCCESS)
}

/// A throwaway library with `path` indexed (full text only).
fn indexed_library(path: &std::path::Path) -> Result<(tempfile::TempDir, Library)> {
    let temp = tempfile::tempdir()?;
    let mut library = Library::open(temp.path())?;
    library.add_source(path, "bench", &[], &[])?;
    library
        .writer()?
        .index_all(&IndexOptions::default(), &|_| {})?;
    Ok((temp, library))
}

fn embed_bench(path: &std::path::Path, chunks: usize) -> Result<ExitCode> {
    let (_temp, mut library) = indexed_library(path)?;
    let status = library.status()?;
    anyhow::ensure!(
        status.stats.chunks > 0,
        "no chunks indexed from {}",
        path.display()
    );
    quarry_core::bench::embedding_throughput(&mut library, chunks, &mut |line| println!("{line}"))?;
    println!("peak RSS          {}", peak_rss());
    Ok(ExitCode::SUCCESS)
}

fn hybrid_bench(path: &std::path::Path, queries: usize) -> Result<ExitCode> {
    let temp = tempfile::tempdir()?;
    let mut library = Library::open(temp.path())?;
    library.add_source(path, "bench", &[], &[])?;
    let started = Instant::now();
    library
        .writer()?
        .index_all(&IndexOptions::default(), &|_| {})?;
    let chunks = library.status()?.stats.chunks;
    println!(
        "indexed           {chunks} chunks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let vectors = quarry_core::bench::synthetic_vectors(&library)?;
    println!(
        "synthetic vectors {vectors} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(library);
    let library = Library::open(temp.path())?;
    search_latency(&library, queries, SearchMode::Lexical)?;
    search_latency(&library, queries, SearchMode::Hybrid)?;
    println!("RSS after search  {} (peak {})", current_rss(), peak_rss());
    Ok(ExitCode::SUCCESS)
}

fn tool_bench(path: &std::path::Path, calls: usize) -> Result<ExitCode> {
    use quarry_core::evidence::EvidenceSession;
    use serde_json::json;

    let (_temp, library) = indexed_library(path)?;
    let session = EvidenceSession::new(
        library.evidence_key()?,
        quarry_core::Principal::administrator(),
    )?;
    let lexical = library.tool("retrieve-lexical-focused")?;
    let chunk = library.chunks_by_id(&library.chunk_ids()?[..1])?;
    let reference = session.issue_chunk(chunk.first().context("the folder gave no chunks")?);
    let candidates: Vec<_> = (0..10)
        .map(|i| json!({"evidence_ref": reference, "score": 1.0 - i as f64 / 10.0, "rank": i + 1}))
        .collect();
    let cases = [
        (
            "noop_chunk",
            json!({"query": "q", "candidates": candidates}),
        ),
        (
            "expand_multi_query",
            json!({"query": "service the XR-200 pump", "history": [], "variants": []}),
        ),
        (
            "search_documents",
            json!({"query": "cache eviction", "limit": 5}),
        ),
    ];
    library.executor().stop_idle();
    let cold = Instant::now();
    library.call_code_tool(
        &library.tool("noop_chunk")?,
        &cases[0].1,
        &session,
        Some(&lexical),
    )?;
    println!(
        "cold call (starts a Python worker): {:.1} ms",
        cold.elapsed().as_secs_f64() * 1e3
    );
    println!("warm calls ({calls} each):");
    for (slug, input) in &cases {
        let tool = library.tool(slug)?;
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            library.call_code_tool(&tool, input, &session, Some(&lexical))?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
        println!(
            "  {slug:<20} mean {mean:.2} ms  p50 {:.2} ms  p95 {:.2} ms",
            percentile(&mut times, 0.5),
            percentile(&mut times, 0.95)
        );
    }
    println!("network isolation: {:?}", library.executor().check()?);
    Ok(ExitCode::SUCCESS)
}

fn chat_bench(
    path: &std::path::Path,
    model: Option<&str>,
    runs: usize,
    threads: Option<usize>,
) -> Result<ExitCode> {
    use quarry_core::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
    use quarry_core::llm::{ChatBackend, ChatMessage, ChatRequest};
    use quarry_core::orchestrator::{BackendConfig, ChatOptions};

    let (_temp, mut library) = indexed_library(path)?;
    library
        .writer()?
        .embed_pending(&|_| {}, &std::sync::atomic::AtomicBool::new(false))?;
    let model = model
        .map(str::to_string)
        .unwrap_or_else(|| quarry_core::models::default_llm_model().to_string());
    let mut config = EmbeddedConfig::named(library.models(), &model)?;
    config.threads = threads;
    let rss_before = current_rss();
    let started = Instant::now();
    let backend = EmbeddedBackend::shared(config)?;
    let load_ms = started.elapsed().as_millis();
    // A first tiny generation touches the weights (they are memory-mapped).
    backend.chat(
        &ChatRequest::new(vec![ChatMessage::user("Hi")]),
        &mut |_| {},
    )?;
    println!(
        "model             {model} ({:.1} MB)",
        backend.model_bytes() as f64 / 1e6
    );
    println!(
        "threads           {} generation, all cores for the prompt",
        backend.threads()
    );
    println!("load              {load_ms} ms");
    println!(
        "RSS               {rss_before} before load, {} with the model loaded",
        current_rss()
    );

    let passage =
        "The XR-200 pump needs an inlet pressure of 4 bar and a service every 600 hours. ";
    println!("prompt tokens  time to first token (ms)  generation (tokens/s)   [median of {runs}]");
    for repeats in [1usize, 10, 40] {
        let mut ttft = Vec::new();
        let mut rate = Vec::new();
        let mut prompt_tokens = 0;
        for _ in 0..runs {
            let mut request = ChatRequest::new(vec![
                ChatMessage::system("You are a helpful assistant."),
                ChatMessage::user(format!(
                    "{}\nWrite a short paragraph about pump maintenance.",
                    passage.repeat(repeats)
                )),
            ]);
            request.max_tokens = 64;
            let response = backend.chat(&request, &mut |_| {})?;
            prompt_tokens = response.usage.prompt_tokens;
            let first = response.first_token_ms.unwrap_or(response.total_ms) as f64;
            ttft.push(first);
            let gen_ms = (response.total_ms as f64 - first).max(1.0);
            rate.push(response.usage.completion_tokens as f64 * 1000.0 / gen_ms);
        }
        println!(
            "{prompt_tokens:>13}  {:>24.0}  {:>21.1}",
            percentile(&mut ttft, 0.5),
            percentile(&mut rate, 0.5)
        );
    }

    let questions = [
        "What does the documentation say about caching?",
        "How are errors handled?",
        "What is the default configuration?",
    ];
    let mut turn_ms = Vec::new();
    let mut retrieval_ms = Vec::new();
    let mut generation_ms = Vec::new();
    for i in 0..runs {
        let mut options = ChatOptions::new(quarry_core::Principal::administrator());
        options.mode = Some("grounded".into());
        options.backend = Some(BackendConfig::Embedded {
            model: model.clone(),
            threads,
        });
        let result = library.chat(questions[i % questions.len()], &options, &mut |_| {})?;
        turn_ms.push(result.took_ms as f64);
        for event in &result.trace {
            match event.kind.as_str() {
                "tool.result" => retrieval_ms.push(event.detail["took_ms"].as_f64().unwrap_or(0.0)),
                "llm.generate" => {
                    generation_ms.push(event.detail["took_ms"].as_f64().unwrap_or(0.0))
                }
                _ => {}
            }
        }
    }
    println!(
        "chat turn         median {:.0} ms (retrieval {:.0} ms, generation {:.0} ms), grounded mode",
        percentile(&mut turn_ms, 0.5),
        percentile(&mut retrieval_ms, 0.5),
        percentile(&mut generation_ms, 0.5)
    );
    println!("peak RSS          {}", peak_rss());
    Ok(ExitCode::SUCCESS)
}
