//! `quarry eval`: index a BEIR-layout set into a throwaway library and score each mode.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use quarry_core::eval::{BeirSet, EvalScores};
use quarry_core::{IndexOptions, Library, RetrievalSettings, SearchMode};

#[derive(Args)]
pub struct EvalArgs {
    /// Folder in the BEIR layout (corpus.jsonl, queries.jsonl, qrels/test.tsv)
    #[arg(long)]
    beir: PathBuf,
    /// Modes to score, comma-separated
    #[arg(long, default_value = "lexical,vector,hybrid", value_delimiter = ',')]
    mode: Vec<String>,
    /// Retrieval settings as JSON over the defaults (the mode is set per run)
    #[arg(long)]
    settings: Option<String>,
    /// Also score weighted fusion at these lexical weights (e.g. 0.2,0.5)
    #[arg(long, value_delimiter = ',')]
    sweep_lexical_weight: Vec<f32>,
    /// Keep the library here (reused when it already holds the set)
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Also score this pipeline of the library (its saved version: query tools, retrieval and
    /// chunk tools) over the set (repeatable)
    #[arg(long)]
    pipeline: Vec<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(args: &EvalArgs, data_dir: &std::path::Path) -> Result<ExitCode> {
    // Resolved from the user's library before anything else, so a typo fails fast.
    let pipelines = if args.pipeline.is_empty() {
        Vec::new()
    } else {
        let user_library = Library::open(data_dir)?;
        args.pipeline
            .iter()
            .map(|name| user_library.resolve_pipeline(name, false))
            .collect::<quarry_core::Result<Vec<_>>>()?
    };
    let set = BeirSet::load(&args.beir)?;
    let temp = tempfile::tempdir()?;
    let work = args
        .keep
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let mut library = Library::open(&work.join("library"))?;
    let folder = work.join("corpus");
    if library.sources()?.is_empty() {
        set.write_corpus(&folder)?;
        library.add_source(&folder, "eval", &[], &[])?;
    }
    let started = Instant::now();
    let mut writer = library.writer()?;
    let progress = writer.index_all(&IndexOptions::default(), &|_| {})?;
    let indexed_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let needs_vectors = args.mode.iter().any(|m| m != "lexical") || !pipelines.is_empty();
    let embedded = if needs_vectors {
        writer.embed_pending(&|_| {}, &AtomicBool::new(false))?
    } else {
        0
    };
    let embed_secs = started.elapsed().as_secs_f64();
    drop(writer);
    let base: RetrievalSettings = match &args.settings {
        Some(json) => serde_json::from_str(json)?,
        None => RetrievalSettings::default(),
    };
    let mut rows: Vec<EvalScores> = Vec::new();
    for mode in &args.mode {
        let mut settings = base.clone();
        settings.mode = SearchMode::parse(mode)?;
        rows.push(library.evaluate(&set, mode, &settings)?);
    }
    for w in &args.sweep_lexical_weight {
        let mut settings = base.clone();
        settings.mode = SearchMode::Hybrid;
        settings.fusion = quarry_core::Fusion::Weighted { lexical_weight: *w };
        rows.push(library.evaluate(&set, &format!("hybrid w={w}"), &settings)?);
    }
    for pipeline in &pipelines {
        rows.push(library.evaluate_pipeline(&set, pipeline)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} documents ({} chunks, indexed in {:.1} s; {} embedded in {:.1} s), {} judged queries",
        args.beir.display(),
        set.corpus.len(),
        progress.chunks_written,
        indexed_secs,
        embedded,
        embed_secs,
        set.queries.len()
    );
    println!(
        "{:<20} {:>8} {:>11} {:>7} {:>10}",
        "mode", "nDCG@10", "Recall@100", "MRR@10", "queries/s"
    );
    for r in &rows {
        println!(
            "{:<20} {:>8.4} {:>11.4} {:>7.4} {:>10.1}",
            r.name, r.ndcg_at_10, r.recall_at_100, r.mrr_at_10, r.queries_per_sec
        );
    }
    Ok(ExitCode::SUCCESS)
}
