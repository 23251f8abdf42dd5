//! `quarry eval`: index a BEIR-layout set into a throwaway library and score each mode (the
//! engine's `run_evaluation`, which the desktop tester runs too).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use quarry_core::cancel::Cancel;
use quarry_core::{run_evaluation, EvalPlan, Library, RetrievalSettings};

#[derive(Args)]
pub struct EvalArgs {
    /// Folder in the BEIR layout (corpus.jsonl or corpus-folder.json, queries.jsonl,
    /// qrels/test.tsv)
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
    /// With --json: each query's scores too
    #[arg(long)]
    per_query: bool,
    /// Also score whole-document BM25, the baseline for page ranking
    #[arg(long)]
    baseline: bool,
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
    let settings: RetrievalSettings = match &args.settings {
        Some(json) => serde_json::from_str(json)?,
        None => RetrievalSettings::default(),
    };
    let plan = EvalPlan {
        set: args.beir.clone(),
        modes: args.mode.clone(),
        settings,
        sweep_lexical_weight: args.sweep_lexical_weight.clone(),
        pipelines,
        keep: args.keep.clone(),
        per_query: args.per_query,
        baseline: args.baseline,
    };
    let report = run_evaluation(&plan, &|_| {}, &Cancel::new())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} documents ({} chunks, indexed in {:.1} s; {} embedded in {:.1} s), {} judged queries",
        args.beir.display(),
        report.documents,
        report.chunks,
        report.indexed_secs,
        report.embedded,
        report.embed_secs,
        report.judged_queries
    );
    println!(
        "{:<20} {:>8} {:>11} {:>7} {:>10}",
        "mode", "nDCG@10", "Recall@100", "MRR@10", "queries/s"
    );
    for r in &report.rows {
        println!(
            "{:<20} {:>8.4} {:>11.4} {:>7.4} {:>10.1}",
            r.name, r.ndcg_at_10, r.recall_at_100, r.mrr_at_10, r.queries_per_sec
        );
    }
    Ok(ExitCode::SUCCESS)
}
