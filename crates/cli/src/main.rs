//! `quarry`: every Quarry capability, headless. A thin adapter over quarry-core: parse
//! arguments, call the engine, print. Exit codes: 0 success, 1 no results, 2 error.

mod audit_cmd;
mod bench;
mod bench_cold;
mod bench_hostile;
mod bench_mcp;
mod bench_ocr;
mod bench_scale;
mod chat_cmd;
mod demo;
mod eval;
mod keys_cmd;
mod mcp;
mod models_cmd;
mod output;
mod pipeline_cmd;
mod principal_arg;
mod terminal;
mod tools_cmd;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use quarry_core::models::Models;
use quarry_core::retrieve::RerankSettings;
use quarry_core::{
    IndexOptions, Library, RetrievalSettings, SearchMode, SearchRequest, WatchOptions,
};

// Indexing allocates many small strings on several threads (tokenizers, chunks); glibc's
// malloc spent about a third of the CPU time in `quarry bench index` on its locks and
// free lists.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "quarry",
    version,
    about = "Local knowledge bases: index folders, search them"
)]
struct Cli {
    /// Library data directory [default: the platform data dir]
    #[arg(long, global = true, env = "QUARRY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// More log lines on stderr: -v progress notes and llama.cpp's warnings, -vv everything
    /// (QUARRY_LOG, a tracing filter, overrides)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Manage collections (named sets of sources)
    #[command(subcommand)]
    Collection(CollectionCommand),
    /// Manage sources (indexed folders)
    #[command(subcommand)]
    Source(SourceCommand),
    /// Index every source; with --watch, keep indexing changes
    Index(IndexArgs),
    /// Search the library
    Search(SearchArgs),
    /// Counts, sources and recent per-file errors
    Status {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Show documents
    #[command(subcommand)]
    Doc(DocCommand),
    /// Check that SQLite and the full-text index agree (and repair with --repair)
    Check {
        /// Rebuild the full-text index from SQLite if they disagree
        #[arg(long)]
        repair: bool,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Index the bundled demo corpus into a throwaway library and run sample searches
    Demo {
        /// Demo corpus folder [default: the bundled seeds/demo]
        #[arg(long)]
        corpus: Option<PathBuf>,
    },
    /// Embedding and reranking models
    #[command(subcommand)]
    Models(models_cmd::ModelsCommand),
    /// Score retrieval on a labelled BEIR-layout set (nDCG@10, Recall@100, MRR@10)
    Eval(eval::EvalArgs),
    /// Benchmarks that print throughput and latency figures
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Tool definitions: query, retrieval, chunk and action tools
    #[command(subcommand)]
    Tools(tools_cmd::ToolsCommand),
    /// Pipelines: Query → Retrieval → Chunk stages, drafts and saved versions
    #[command(subcommand)]
    Pipeline(pipeline_cmd::PipelineCommand),
    /// API keys: personal keys and service keys acting for a user
    #[command(subcommand)]
    Keys(keys_cmd::KeysCommand),
    /// Ask the local assistant: a cited answer from your documents
    Chat(chat_cmd::ChatArgs),
    /// Serve the library to other assistants and editors over the Model Context Protocol
    /// (stdio, or Streamable HTTP on loopback), under a key
    Mcp(mcp::McpArgs),
    /// Orchestrator configurations: drafts, applied revisions, modes, budgets, gates
    #[command(subcommand)]
    Orchestrator(chat_cmd::OrchestratorCommand),
    /// The audit log of tool tests, pipeline runs, orchestrator applies and key changes, newest
    /// first
    Audit(audit_cmd::AuditArgs),
}

#[derive(Subcommand)]
enum CollectionCommand {
    /// Create a collection
    Add {
        name: String,
        /// Sensitivity label
        #[arg(long, default_value = "internal")]
        sensitivity: String,
        /// Stemming language of its text
        #[arg(long, default_value = "english")]
        language: String,
    },
    /// List collections
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a collection and everything indexed in it
    Remove { name: String },
}

#[derive(Subcommand)]
enum SourceCommand {
    /// Add a folder to a collection (the collection is created if needed)
    Add {
        path: PathBuf,
        #[arg(long, short)]
        collection: String,
        /// Only files matching this glob (repeatable)
        #[arg(long)]
        include: Vec<String>,
        /// Leave out files or folders matching this glob (repeatable)
        #[arg(long)]
        exclude: Vec<String>,
        /// Follow symbolic links that lead out of the folder (never into the library's data
        /// directory or another source's folder); by default only links within it are followed
        #[arg(long)]
        follow_links: bool,
        /// Languages its scans and images are read in by OCR, Tesseract codes joined by `+`
        /// (`eng+deu`); each needs its language data (`apt install tesseract-ocr-deu`)
        #[arg(long, default_value = "eng")]
        ocr_languages: String,
    },
    /// Set the languages a source's scans and images are read in by OCR (`eng+deu`); files
    /// already read keep their text until they change
    Ocr { source: String, languages: String },
    /// List sources
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a source (by id or folder); its documents leave the index
    Remove { source: String },
}

#[derive(Subcommand)]
enum DocCommand {
    /// Show a document's state and chunks
    Show {
        path: PathBuf,
        /// The collection, when the file's folder is a source of several
        #[arg(short, long)]
        collection: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ProgressStyle {
    /// Bars on a terminal, a summary otherwise
    Auto,
    /// Always bars
    Bar,
    /// One JSON event per line on stdout
    Json,
    /// Only the summary
    None,
}

#[derive(Args)]
struct IndexArgs {
    /// Keep running and index changes as they happen
    #[arg(long)]
    watch: bool,
    /// With --watch: rescan periodically instead of using OS file events
    #[arg(long)]
    poll: bool,
    /// With --watch: seconds between rescans of polled sources
    #[arg(long, default_value_t = 30)]
    rescan_secs: u64,
    /// Retry files that failed before even if unchanged
    #[arg(long)]
    retry_failed: bool,
    /// Extraction threads [default: cores]
    #[arg(long)]
    threads: Option<usize>,
    /// Most tokens per chunk
    #[arg(long, default_value_t = 200)]
    chunk_tokens: usize,
    /// Tokens shared by consecutive chunks
    #[arg(long, default_value_t = 32)]
    overlap_tokens: usize,
    /// A heading starts a new chunk only once the current one has this many tokens (short
    /// sections pack together)
    #[arg(long, default_value_t = quarry_core::ChunkOptions::default().min_section_tokens)]
    min_section_tokens: usize,
    /// Skip files larger than this many MiB
    #[arg(long, default_value_t = 64)]
    max_file_mb: u64,
    /// Index at most this many chunks of one file (the head of a bigger one; it says so)
    #[arg(long, default_value_t = 20_000)]
    max_chunks_per_file: usize,
    /// Leave out a file that takes longer than this many seconds to extract and chunk
    /// (reason `timeout`), so the rest of the folder is indexed
    #[arg(long, default_value_t = 60.0)]
    file_time_budget: f64,
    /// Search and embed a text repeated in this many documents of a source once (navigation,
    /// help blocks, footers); 0 keeps every copy
    #[arg(long, default_value_t = 5)]
    repeat_documents: usize,
    /// OCR workers, each reading one page of a scan or image at a time
    #[arg(long, default_value_t = 1)]
    ocr_threads: usize,
    /// Longest one page may take to OCR, in seconds (the text read by then is kept)
    #[arg(long, default_value_t = 60.0)]
    ocr_page_time_budget: f64,
    /// Read at most this many pages of one file by OCR (the rest are listed in its warning)
    #[arg(long, default_value_t = 300)]
    max_ocr_pages_per_file: usize,
    /// How to show progress
    #[arg(long, value_enum, default_value_t = ProgressStyle::Auto)]
    progress: ProgressStyle,
    /// Index for full text only; leave embedding for a later run
    #[arg(long)]
    no_embed: bool,
}

impl IndexArgs {
    fn options(&self) -> IndexOptions {
        let mut options = IndexOptions::default();
        options.chunk.max_tokens = self.chunk_tokens;
        options.chunk.overlap_tokens = self.overlap_tokens;
        options.chunk.min_section_tokens = self.min_section_tokens;
        options.max_file_size = self.max_file_mb << 20;
        options.max_chunks_per_file = self.max_chunks_per_file.max(1);
        options.file_time_budget =
            std::time::Duration::from_secs_f64(self.file_time_budget.clamp(0.001, 86_400.0));
        options.retry_failed = self.retry_failed;
        options.repeat_documents = self.repeat_documents;
        options.ocr_threads = self.ocr_threads.max(1);
        options.ocr_page_time_budget =
            std::time::Duration::from_secs_f64(self.ocr_page_time_budget.clamp(0.001, 86_400.0));
        options.max_ocr_pages_per_file = self.max_ocr_pages_per_file;
        if let Some(t) = self.threads {
            options.threads = t;
        }
        options
    }
}

#[derive(Args)]
struct SearchArgs {
    query: String,
    /// Search only this collection (repeatable)
    #[arg(long, short)]
    collection: Vec<String>,
    /// Number of results
    #[arg(long, short = 'n', default_value_t = 10)]
    limit: usize,
    /// Show every matching chunk, not only the best one per file
    #[arg(long)]
    all_chunks: bool,
    /// lexical (BM25), vector (embeddings) or hybrid (both, fused)
    #[arg(long, default_value = "hybrid", value_parser = ["lexical", "vector", "hybrid"])]
    mode: String,
    /// Rerank the best candidates with a cross-encoder [default model: the first installed reranker]
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    rerank: Option<String>,
    /// Deep search: when the first search is unsure (or `always`), the local chat model
    /// judges the best candidates [model: --rerank's, else the default chat model]
    #[arg(long, num_args = 0..=1, default_missing_value = "unsure", value_parser = ["unsure", "always"])]
    deep: Option<String>,
    /// Show every stage's scores and what each stage did
    #[arg(long)]
    explain: bool,
    /// Refuse collections embedded with a model other than this one
    #[arg(long)]
    model: Option<String>,
    /// Retrieval settings as JSON, over the defaults (e.g. '{"fusion":{"method":"rrf","k":60}}')
    #[arg(long)]
    settings: Option<String>,
    #[command(flatten)]
    principal: principal_arg::AsPrincipal,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// A deep search's rerank (`--deep unsure|always`) by the chat model `model`.
pub(crate) fn deep_rerank(when: &str, model: String) -> RerankSettings {
    let mut rerank = RerankSettings::judged_by(model);
    if when == "always" {
        rerank.when = quarry_core::retrieve::RerankWhen::Always;
    }
    rerank
}

/// Builds retrieval settings from `--settings` JSON and the flags.
fn search_settings(args: &SearchArgs, models: &Models) -> Result<RetrievalSettings> {
    let mut settings: RetrievalSettings = match &args.settings {
        Some(json) => {
            serde_json::from_str(json).map_err(|e| anyhow::anyhow!("invalid --settings: {e}"))?
        }
        None => RetrievalSettings::default(),
    };
    settings.mode = SearchMode::parse(&args.mode)?;
    settings.limit = args.limit;
    settings.max_per_document = if args.all_chunks {
        0
    } else {
        settings.max_per_document
    };
    if let Some(when) = &args.deep {
        let model = match args.rerank.as_deref() {
            Some(model) if !model.is_empty() => model.to_string(),
            _ => quarry_core::retrieve::deep_search_model(models)?,
        };
        settings.rerank = Some(deep_rerank(when, model));
    } else if let Some(model) = &args.rerank {
        let model = if model.is_empty() {
            models
                .installed()
                .into_iter()
                .find(|m| m.kind == quarry_core::models::ModelKind::Reranker)
                .map(|m| m.id)
                .unwrap_or_else(|| RerankSettings::default().model)
        } else {
            model.clone()
        };
        let base = settings.rerank.take().unwrap_or_default();
        settings.rerank = Some(RerankSettings {
            model,
            candidates: base.candidates.max(settings.limit),
            ..base
        });
    }
    Ok(settings)
}

/// `quarry search … | head`: writing to a closed pipe ends the process quietly, as it does
/// every other Unix tool, instead of a panic in `println!` (Rust ignores SIGPIPE by default).
#[cfg(unix)]
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: runs first in main, before any thread starts; it restores the default action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// llama.cpp's OpenMP runtime reads `OMP_WAIT_POLICY` once, before `main`: when it is unset,
/// run this binary again with the passive policy (exec replaces the process, same pid).
#[cfg(unix)]
fn with_passive_openmp() {
    use std::os::unix::process::CommandExt;
    let (key, value) = quarry_core::llm::embedded::PASSIVE_OPENMP;
    if std::env::var_os(key).is_some() {
        return;
    }
    if let Ok(exe) = std::env::current_exe() {
        // exec returns only on failure; then carry on with the default policy.
        let _ = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(key, value)
            .exec();
    }
}

/// `QUARRY_LOG` when set, else by `-v`. llama.cpp's own log is kept below warnings by
/// default: its loader warns about quirks of ordinary models on every load, which would land
/// in the middle of `quarry chat`'s answer.
fn log_filter(verbose: u8) -> tracing_subscriber::EnvFilter {
    let llama = quarry_core::llm::embedded::LOG_TARGET;
    tracing_subscriber::EnvFilter::try_from_env("QUARRY_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(match verbose {
            0 => format!("warn,{llama}=error"),
            1 => format!("info,{llama}=warn"),
            _ => "debug".to_string(),
        })
    })
}

fn main() -> ExitCode {
    #[cfg(unix)]
    with_passive_openmp();
    #[cfg(unix)]
    end_quietly_on_a_closed_pipe();
    // Colour only a terminal: a log file or a pipe gets plain text. File names in log lines
    // are escaped like every other output (`terminal::LogWriter`).
    let colour = terminal::colour(&std::io::stderr());
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(cli.verbose))
        .with_writer(terminal::LogWriter { colour })
        .with_ansi(colour)
        .init();
    quarry_core::init_failpoints_from_env();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            match err.downcast_ref::<quarry_core::Error>() {
                // `{err:#}` keeps any context added on the way up (e.g. the file at fault),
                // whose name may carry control characters.
                Some(e) => eprintln!(
                    "error[{}]: {}",
                    e.code(),
                    terminal::printable(&format!("{err:#}"))
                ),
                None => eprintln!("error: {}", terminal::printable(&format!("{err:#}"))),
            }
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let data_dir = cli
        .data_dir
        .clone()
        .unwrap_or_else(Library::default_data_dir);
    match cli.command {
        Command::Demo { corpus } => return demo::run(cli.data_dir, corpus),
        Command::Bench(command) => return bench::run(command, cli.data_dir),
        Command::Eval(args) => return eval::run(&args, &data_dir),
        Command::Models(ref command)
            if models_cmd::run_without_library(command, &Models::discover(&data_dir))? =>
        {
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let mut library = Library::open(&data_dir)?;
    match cli.command {
        Command::Collection(CollectionCommand::Add {
            name,
            sensitivity,
            language,
        }) => {
            let c = library.create_collection(&name, &sensitivity, &language)?;
            println!(
                "created collection {} ({}, {})",
                terminal::printable(&c.name),
                terminal::printable(&c.sensitivity),
                terminal::printable(&c.language)
            );
        }
        Command::Collection(CollectionCommand::List { json }) => {
            output::collections(&library.collections()?, json)?;
        }
        Command::Collection(CollectionCommand::Remove { name }) => {
            library.remove_collection(&name)?;
            println!("removed collection {}", terminal::printable(&name));
        }
        Command::Source(SourceCommand::Add {
            path,
            collection,
            include,
            exclude,
            follow_links,
            ocr_languages,
        }) => {
            let languages = ocr_language_list(&ocr_languages);
            // Checked before the source exists, so a refused language adds nothing.
            Library::check_ocr_languages(&languages)?;
            let mut s = library.add_source(&path, &collection, &include, &exclude)?;
            if follow_links {
                s = library.set_source_follow_links(s.id, true)?;
            }
            if languages != ["eng"] {
                s = library.set_source_ocr_languages(s.id, &languages)?;
            }
            println!(
                "added source {} ({}) to collection {}; run `quarry index` to index it",
                s.id,
                terminal::printable_path(&s.root),
                terminal::printable(&s.collection)
            );
        }
        Command::Source(SourceCommand::Ocr { source, languages }) => {
            let s = library.find_source(&source)?;
            let s = library.set_source_ocr_languages(s.id, &ocr_language_list(&languages))?;
            println!(
                "source {} reads scans in {}",
                s.id,
                terminal::printable(&s.ocr_languages.join("+"))
            );
        }
        Command::Source(SourceCommand::List { json }) => {
            output::sources(&library.sources()?, json)?
        }
        Command::Source(SourceCommand::Remove { source }) => {
            let s = library.find_source(&source)?;
            library.remove_source(s.id)?;
            println!(
                "removed source {} ({})",
                s.id,
                terminal::printable_path(&s.root)
            );
        }
        Command::Index(args) => index(&mut library, &args)?,
        Command::Search(args) => {
            let mut request = SearchRequest::new(&args.query);
            request.settings = search_settings(&args, library.models())?;
            request.collections = args.collection.clone();
            request.embedding_model = args.model.clone();
            let principal = args.principal.principal(&library)?;
            let results = library.search_as(&principal, request)?;
            output::hits(&results, args.json, args.explain)?;
            if results.hits.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Status { json } => output::status(&library.status()?, json)?,
        Command::Doc(DocCommand::Show {
            path,
            collection,
            json,
        }) => output::document(&library.document_in(&path, collection.as_deref())?, json)?,
        Command::Check { repair, json } => {
            let report = library.verify()?;
            output::check(&report, json)?;
            if !report.is_consistent() {
                if repair {
                    library.writer()?.rebuild_fulltext()?;
                    let after = library.verify()?;
                    output::check(&after, json)?;
                    if after.is_consistent() {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                return Ok(ExitCode::from(2));
            }
        }
        Command::Models(command) => models_cmd::run_with_library(&command, &mut library)?,
        Command::Tools(command) => tools_cmd::run_tools(command, &library)?,
        Command::Pipeline(command) => {
            if !pipeline_cmd::run_pipeline(command, &library)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Keys(command) => keys_cmd::run_keys(command, &library)?,
        Command::Audit(args) => audit_cmd::print_audit(&library, &args)?,
        Command::Chat(args) => chat_cmd::run_chat(&args, &library)?,
        Command::Orchestrator(command) => chat_cmd::run_orchestrator(command, &library)?,
        Command::Mcp(args) => mcp::run(args, library)?,
        Command::Demo { .. } | Command::Bench(_) | Command::Eval(_) => {
            unreachable!("handled before opening a library")
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn index(library: &mut Library, args: &IndexArgs) -> Result<()> {
    if library.sources()?.is_empty() {
        anyhow::bail!(
            "no sources yet: add a folder with `quarry source add PATH --collection NAME`"
        );
    }
    let options = args.options();
    let style = match args.progress {
        ProgressStyle::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
            ProgressStyle::Bar
        }
        ProgressStyle::Auto => ProgressStyle::None,
        other => other,
    };
    let reporter =
        output::ProgressReporter::new(style == ProgressStyle::Bar, style == ProgressStyle::Json);
    let mut writer = library.writer()?;
    let progress = writer.index_all(&options, &|e| reporter.index_event(e))?;
    reporter.finish();
    if style != ProgressStyle::Json {
        output::summary(&progress);
    }
    if !args.no_embed {
        let stop = AtomicBool::new(false);
        let embed_reporter = output::ProgressReporter::with_unit(
            style == ProgressStyle::Bar,
            style == ProgressStyle::Json,
            "chunks",
        );
        let embedded = writer.embed_pending(&|p| embed_reporter.embed_event(p), &stop);
        embed_reporter.finish();
        match embedded {
            Ok(n) if style != ProgressStyle::Json && n > 0 => {
                eprintln!("embedded {n} chunk(s)")
            }
            Ok(_) => {}
            // Full text is committed: say what is missing and carry on.
            Err(e) => eprintln!(
                "warning[{}]: chunks were not embedded, so vector search will not see them: {}",
                e.code(),
                terminal::printable(&e.to_string())
            ),
        }
    }
    if args.watch {
        // Ctrl-C ends the process: every write is a transaction and tantivy replays from the
        // outbox, so there is nothing to flush.
        let stop = AtomicBool::new(false);
        let watch_options = WatchOptions {
            rescan_interval: Duration::from_secs(args.rescan_secs.max(1)),
            poll_only: args.poll,
            // index_all just scanned every source.
            scan_on_start: false,
            ..WatchOptions::default()
        };
        eprintln!("watching for changes (Ctrl-C to stop)");
        writer.watch(
            &options,
            &watch_options,
            &|e| reporter.watch_event(e),
            &stop,
        )?;
    }
    Ok(())
}

/// `eng+deu` (Tesseract's own way) or `eng,deu` as a list of language codes.
fn ocr_language_list(languages: &str) -> Vec<String> {
    languages
        .split(['+', ','])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}
