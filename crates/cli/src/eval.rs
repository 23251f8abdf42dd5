//! `quarry eval`: index a BEIR-layout set into a throwaway library and score each mode (the
//! engine's `run_evaluation`, which the desktop tester runs too), or, with `--chat`, ask a
//! grounded-QA set of each chat backend (`run_chat_evaluation`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use quarry_core::cancel::Cancel;
use quarry_core::models::Models;
use quarry_core::orchestrator::BackendConfig;
use quarry_core::{
    run_chat_evaluation, run_evaluation, ChatEvalPlan, ChatEvalReport, EvalPlan, Library,
    RetrievalSettings,
};

#[derive(Args)]
pub struct EvalArgs {
    /// Folder in the BEIR layout (corpus.jsonl or corpus-folder.json, queries.jsonl,
    /// qrels/test.tsv)
    #[arg(long, required_unless_present = "chat", conflicts_with = "chat")]
    beir: Option<PathBuf>,
    /// A grounded-QA set (corpora.json, questions.jsonl): ask each --backend every question
    /// and score the answers (fact found, citations that hold it, refusals, time to first
    /// token)
    #[arg(long)]
    chat: Option<PathBuf>,
    /// With --chat: a backend to ask (repeatable): extractive, embedded[:MODEL],
    /// openai:URL[#MODEL], ollama:URL#MODEL [default: the mode's backend, then extractive]
    #[arg(long, requires = "chat")]
    backend: Vec<String>,
    /// With --chat: ask only N questions, spread evenly over the set
    #[arg(long, requires = "chat")]
    limit: Option<usize>,
    /// With --chat: the orchestrator mode the turns run in [default: the configuration's]
    #[arg(long = "chat-mode", requires = "chat")]
    chat_mode: Option<String>,
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
    /// With --json: each query's scores too (with --chat: each answer)
    #[arg(long)]
    per_query: bool,
    /// Also score whole-document BM25, the baseline for page ranking
    #[arg(long)]
    baseline: bool,
    /// Also score a deep hybrid search: the local chat model judges the best candidates when
    /// the first search is unsure (or `always`) [model: --deep-model, else the default chat
    /// model]
    #[arg(long, num_args = 0..=1, default_missing_value = "unsure", value_parser = ["unsure", "always"])]
    deep: Option<String>,
    /// With --deep: the chat model that judges (an installed id or a GGUF path)
    #[arg(long, requires = "deep")]
    deep_model: Option<String>,
    /// Write the set's documents, as Quarry extracted them, to this BEIR corpus.jsonl (for
    /// baselines computed outside Quarry: bench/bm25_textbook.py)
    #[arg(long)]
    export_corpus: Option<PathBuf>,
}

pub fn run(args: &EvalArgs, data_dir: &std::path::Path) -> Result<ExitCode> {
    if let Some(set) = &args.chat {
        return run_chat(args, set);
    }
    let beir = args.beir.clone().expect("clap requires --beir or --chat");
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
    let deep = match &args.deep {
        Some(when) => {
            let model = match &args.deep_model {
                Some(model) => model.clone(),
                None => quarry_core::retrieve::deep_search_model(&Models::discover(data_dir))?,
            };
            Some(crate::deep_rerank(when, model))
        }
        None => None,
    };
    let plan = EvalPlan {
        set: beir.clone(),
        modes: args.mode.clone(),
        settings,
        sweep_lexical_weight: args.sweep_lexical_weight.clone(),
        pipelines,
        keep: args.keep.clone(),
        per_query: args.per_query,
        baseline: args.baseline,
        deep,
        export_corpus: args.export_corpus.clone(),
    };
    let report = run_evaluation(&plan, &|_| {}, &Cancel::new())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} documents ({} chunks, indexed in {:.1} s; {} embedded in {:.1} s), {} judged queries",
        beir.display(),
        report.documents,
        report.chunks,
        report.indexed_secs,
        report.embedded,
        report.embed_secs,
        report.judged_queries
    );
    println!(
        "{:<28} {:>8} {:>11} {:>7} {:>10}",
        "mode", "nDCG@10", "Recall@100", "MRR@10", "queries/s"
    );
    for r in &report.rows {
        println!(
            "{:<28} {:>8.4} {:>11.4} {:>7.4} {:>10.1}",
            r.name, r.ndcg_at_10, r.recall_at_100, r.mrr_at_10, r.queries_per_sec
        );
        for g in &r.groups {
            let name = format!("  {} ({})", g.name, g.queries);
            println!(
                "{name:<28} {:>8.4} {:>11.4} {:>7.4}",
                g.ndcg_at_10, g.recall_at_100, g.mrr_at_10
            );
        }
        if r.model_runs > 0 {
            println!(
                "  the chat model judged on {} of {} queries: {:.0} ms per query over all",
                r.model_runs, r.queries, r.model_ms_per_query
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_chat(args: &EvalArgs, set: &std::path::Path) -> Result<ExitCode> {
    let backends = if args.backend.is_empty() {
        vec![None, Some(BackendConfig::Extractive)]
    } else {
        args.backend
            .iter()
            .map(|b| BackendConfig::parse_spec(b).map(Some))
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(|e| anyhow::anyhow!("--backend {e}"))?
    };
    let plan = ChatEvalPlan {
        set: set.to_path_buf(),
        backends,
        mode: args.chat_mode.clone(),
        limit: args.limit,
        keep: args.keep.clone(),
    };
    // Progress goes to stderr (with --json too, so stdout stays the report), a line each
    // when stderr is not a terminal.
    let terminal = std::io::stderr().is_terminal();
    let on_progress = |p: quarry_core::eval::ChatEvalProgress| {
        if let quarry_core::eval::ChatEvalProgress::Answered {
            backend,
            done,
            total,
            answerable,
            correct,
            unanswerable,
            refused,
        } = p
        {
            let share = |a: usize, b: usize| {
                if b == 0 {
                    0.0
                } else {
                    100.0 * a as f64 / b as f64
                }
            };
            let line = format!(
                "{backend}: question {done} of {total}; right {correct}/{answerable} ({:.0}%), refused {refused}/{unanswerable} unanswerable",
                share(correct, answerable)
            );
            if terminal {
                eprint!("\r\x1b[2K{line}");
                if done == total {
                    eprintln!();
                }
            } else {
                eprintln!("{line}");
            }
        }
    };
    let report = run_chat_evaluation(&plan, &on_progress, &Cancel::new())?;
    if args.json {
        let mut report = report;
        if !args.per_query {
            report.rows.iter_mut().for_each(|r| r.answers.clear());
        }
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_chat_report(&report);
    Ok(ExitCode::SUCCESS)
}

fn print_chat_report(report: &ChatEvalReport) {
    println!(
        "{}: {} documents (indexed in {:.1} s), {} questions per backend",
        report.set, report.documents, report.indexed_secs, report.questions
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "backend", "correct", "supported", "cite-prec", "refused", "false-ref", "1st-tok", "total"
    );
    let ms = |v: Option<u64>| match v {
        None => "-".to_string(),
        Some(v) if v < 1000 => format!("{v} ms"),
        Some(v) => format!("{:.1} s", v as f64 / 1000.0),
    };
    for r in &report.rows {
        println!(
            "{:<44} {:>9} {:>9} {:>9.2} {:>9} {:>8} {:>9} {:>9}",
            r.backend,
            format!("{}/{}", r.correct, r.answerable),
            format!("{}/{}", r.supported, r.answerable),
            r.citation_precision,
            format!("{}/{}", r.refused, r.unanswerable),
            r.false_refusals,
            ms(r.first_token_ms_p50),
            ms(Some(r.total_ms_p50)),
        );
        if r.fell_back > 0 {
            println!("  ({} answer(s) fell back to extractive)", r.fell_back);
        }
    }
    for r in &report.rows {
        let mut line = format!(
            "{}: retrieval admitted the fact for {}/{} answerable questions",
            r.backend, r.fact_retrieved, r.answerable
        );
        if let Some(shown) = r.fact_shown {
            line.push_str(&format!(", the sentences shown held it for {shown}"));
        }
        if let (Some(admitted), Some(shown)) = (r.admitted_chars_p50, r.shown_chars_p50) {
            line.push_str(&format!(
                "; median evidence {admitted} characters admitted, {shown} shown"
            ));
        }
        if r.quoted > 0 || r.quoted_beside > 0 {
            line.push_str(&format!(
                "; the best sentence quoted instead of {} answer(s), beside {}",
                r.quoted, r.quoted_beside
            ));
        }
        println!("{line}");
    }
}
