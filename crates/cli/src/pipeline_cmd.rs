//! `quarry pipeline`: pipeline drafts, saved versions, readiness checks and runs, and the
//! printing of run reports (stages and evidence) that `quarry tools test` shares.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use quarry_core::pipeline::{PipelineDefinition, PipelineRun, Severity, StageOutput};
use quarry_core::{Library, Principal, RunOptions};
use serde_json::Value;

use crate::output::print_json;
use crate::principal_arg::AsPrincipal;
use crate::terminal::{one_line, printable, printable_path};

#[derive(Subcommand)]
pub enum PipelineCommand {
    /// List pipelines
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a pipeline's draft, saved version and readiness
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Create a pipeline draft
    Create(PipelineFields),
    /// Change a pipeline's draft (runs keep the saved version until `save`)
    Edit(PipelineFields),
    /// Save the draft as a new version, snapshotting its tools
    Save { name: String },
    /// List readiness problems
    Check {
        name: String,
        /// Check the draft instead of the saved version
        #[arg(long)]
        draft: bool,
        /// Check for this caller (code tools may be blocked for keys where the OS cannot
        /// confine them)
        #[command(flatten)]
        principal: AsPrincipal,
        #[arg(long)]
        json: bool,
    },
    /// Run a pipeline on a query and show what every stage did
    Run {
        query: String,
        /// The pipeline
        #[arg(long, short, default_value = "default")]
        pipeline: String,
        /// Show every stage's input, output, timing and per-candidate scores
        #[arg(long)]
        trace: bool,
        /// Run the draft with the live tools
        #[arg(long)]
        draft: bool,
        /// Bind the evidence references to this conversation id (so `tools test … --conversation`
        /// can page from them)
        #[arg(long)]
        conversation: Option<String>,
        /// The conversation so far, for query tools: a JSON file of `{"role", "content"}`
        /// messages, newest last
        #[arg(long)]
        history: Option<PathBuf>,
        #[command(flatten)]
        principal: AsPrincipal,
        #[arg(long)]
        json: bool,
    },
    /// Delete a pipeline
    Delete { name: String },
}

#[derive(Args)]
pub struct PipelineFields {
    name: String,
    /// Query tools in order (comma-separated)
    #[arg(long, value_delimiter = ',')]
    query_tools: Option<Vec<String>>,
    /// The default retrieval tool
    #[arg(long)]
    retrieval: Option<String>,
    /// Extra retrieval capabilities (comma-separated)
    #[arg(long, value_delimiter = ',')]
    capabilities: Option<Vec<String>>,
    /// Chunk tools in order (comma-separated)
    #[arg(long, value_delimiter = ',')]
    chunk_tools: Option<Vec<String>>,
    /// Collections to search (comma-separated; empty: all the caller may read)
    #[arg(long, value_delimiter = ',')]
    collections: Option<Vec<String>>,
    /// Most query streams
    #[arg(long)]
    max_query_variants: Option<usize>,
    /// Most chunks admitted as evidence
    #[arg(long)]
    max_evidence: Option<usize>,
}

impl PipelineFields {
    fn apply(&self, mut p: PipelineDefinition) -> PipelineDefinition {
        let clean = |v: &Vec<String>| {
            v.iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect::<Vec<_>>()
        };
        if let Some(v) = &self.query_tools {
            p.query_tools = clean(v);
        }
        if let Some(r) = &self.retrieval {
            p.retrieval = (!r.is_empty()).then(|| r.clone());
        }
        if let Some(v) = &self.capabilities {
            p.retrieval_capabilities = clean(v);
        }
        if let Some(v) = &self.chunk_tools {
            p.chunk_tools = clean(v);
        }
        if let Some(v) = &self.collections {
            p.collections = clean(v);
        }
        if let Some(n) = self.max_query_variants {
            p.budget.max_query_variants = n;
        }
        if let Some(n) = self.max_evidence {
            p.budget.max_evidence = n;
        }
        p
    }
}

fn print_problems(problems: &[quarry_core::pipeline::ReadinessProblem]) {
    if problems.is_empty() {
        println!("ready");
    }
    for p in problems {
        let label = match p.severity {
            Severity::Blocking => "blocking",
            Severity::Degraded => "degraded",
            Severity::Optional => "optional",
        };
        println!(
            "{label}: {}: {}",
            printable(&p.component),
            printable(&p.message)
        );
    }
}

/// Runs a `quarry pipeline` command; `false` when the answer is a "no" (a pipeline not ready,
/// a run without evidence), which the binary turns into its exit code.
pub fn run_pipeline(command: PipelineCommand, library: &Library) -> Result<bool> {
    match command {
        PipelineCommand::List { json } => list(library, json).map(|_| true),
        PipelineCommand::Show { name, json } => show(library, &name, json).map(|_| true),
        PipelineCommand::Create(fields) => {
            let p = fields.apply(PipelineDefinition::default());
            library.create_pipeline(&fields.name, &p)?;
            println!(
                "created pipeline {} (a draft: `quarry pipeline save {}` puts it into service)",
                fields.name, fields.name
            );
            Ok(true)
        }
        PipelineCommand::Edit(fields) => {
            let view = library.pipeline(&fields.name)?;
            library.edit_pipeline(&fields.name, &fields.apply(view.draft))?;
            println!(
                "updated the draft of {}; runs use the saved version until you save",
                fields.name
            );
            Ok(true)
        }
        PipelineCommand::Save { name } => {
            let saved = library.save_pipeline(&name, &Principal::administrator())?;
            println!(
                "saved {name} as version {} ({} tool(s) snapshotted)",
                saved.version,
                saved.tools.len()
            );
            // Saved all the same (a draft may be saved mid-work), but said plainly: runs of
            // this version fail, and `orchestrator apply` refuses it, until these are fixed.
            let blocking: Vec<_> = library
                .check_pipeline(&name, false, &Principal::administrator())?
                .into_iter()
                .filter(|p| p.severity == Severity::Blocking)
                .collect();
            for p in &blocking {
                eprintln!(
                    "warning: version {} cannot run: {}: {}",
                    saved.version,
                    printable(&p.component),
                    printable(&p.message)
                );
            }
            Ok(true)
        }
        PipelineCommand::Check {
            name,
            draft,
            principal,
            json,
        } => {
            let who = principal.principal(library)?;
            let problems = library.check_pipeline(&name, draft, &who)?;
            if json {
                print_json(&problems)?;
            } else {
                print_problems(&problems);
            }
            Ok(!problems.iter().any(|p| p.severity == Severity::Blocking))
        }
        PipelineCommand::Run {
            query,
            pipeline,
            trace,
            draft,
            conversation,
            history,
            principal,
            json,
        } => {
            let who = principal.principal(library)?;
            let options = RunOptions {
                draft,
                conversation,
                history: history
                    .as_deref()
                    .map(read_history)
                    .transpose()?
                    .unwrap_or_default(),
                ..Default::default()
            };
            let run = library.run_pipeline(&pipeline, &query, &who, &options)?;
            if json {
                print_json(&run)?;
            } else {
                print_run(&run, trace);
            }
            Ok(!run.evidence.entries.is_empty())
        }
        PipelineCommand::Delete { name } => {
            library.delete_pipeline(&name)?;
            println!("deleted pipeline {name}");
            Ok(true)
        }
    }
}

fn list(library: &Library, json: bool) -> Result<()> {
    let names = library.pipelines()?;
    if json {
        return print_json(&names);
    }
    for name in names {
        let view = library.pipeline(&name)?;
        println!(
            "{}  (saved version {}{})",
            printable(&name),
            view.saved
                .as_ref()
                .map_or("none".into(), |s| s.version.to_string()),
            if view.unsaved_changes {
                ", unsaved changes"
            } else {
                ""
            }
        );
    }
    Ok(())
}

fn show(library: &Library, name: &str, json: bool) -> Result<()> {
    let view = library.pipeline(name)?;
    let problems =
        library.check_pipeline(name, view.saved.is_none(), &Principal::administrator())?;
    if json {
        return print_json(&serde_json::json!({"pipeline": view, "readiness": problems}));
    }
    match &view.saved {
        Some(s) => print_definition(
            &format!(
                "saved version {} (by {})",
                s.version,
                printable(&s.saved_by)
            ),
            &s.pipeline,
        ),
        None => println!("never saved"),
    }
    if view.unsaved_changes {
        print_definition("draft (unsaved changes)", &view.draft);
    }
    print_problems(&problems);
    Ok(())
}

fn print_definition(label: &str, p: &PipelineDefinition) {
    println!("{label}:");
    println!("  query:      {}", printable(&p.query_tools.join(" → ")));
    println!(
        "  retrieval:  {} (default){}",
        printable(p.retrieval.as_deref().unwrap_or("NONE")),
        if p.retrieval_capabilities.is_empty() {
            String::new()
        } else {
            format!(" + {}", printable(&p.retrieval_capabilities.join(", ")))
        }
    );
    println!("  chunk:      {}", printable(&p.chunk_tools.join(" → ")));
    println!(
        "  collections: {}",
        if p.collections.is_empty() {
            "all the caller may read".into()
        } else {
            printable(&p.collections.join(", ")).into_owned()
        }
    );
    println!(
        "  budget:     {} query variant(s), {} evidence chunk(s)",
        p.budget.max_query_variants, p.budget.max_evidence
    );
}

pub fn print_run(run: &PipelineRun, trace: bool) {
    println!(
        "pipeline {} ({}) as {}: {:.1} ms",
        printable(&run.pipeline),
        run.version
            .map_or("draft".into(), |v| format!("version {v}")),
        printable(&run.principal),
        run.took_us as f64 / 1000.0
    );
    for p in &run.readiness {
        println!("  note: {}", printable(&p.message));
    }
    for stage in &run.stages {
        print_stage(stage, trace);
    }
    print_evidence(&run.evidence);
}

pub fn print_stage(stage: &quarry_core::pipeline::StageReport, trace: bool) {
    println!(
        "[{}] {} {:.1} ms: {}",
        stage.stage,
        printable(stage.tool.as_deref().unwrap_or("-")),
        stage.took_us as f64 / 1000.0,
        printable(&stage.detail)
    );
    if !trace {
        return;
    }
    let queries = match &stage.output {
        StageOutput::Json(output) if stage.stage == "query" => output["queries"].as_array(),
        _ => None,
    };
    for q in queries.into_iter().flatten() {
        println!(
            "    {:.2}  {}",
            q["weight"].as_f64().unwrap_or(0.0),
            printable(q["query"].as_str().unwrap_or(""))
        );
    }
    for s in &stage.search_trace {
        println!(
            "    {:<10} {:>5} candidate(s) {:>8.1} ms  {}",
            s.stage,
            s.candidates,
            s.took_us as f64 / 1000.0,
            printable(&s.detail)
        );
    }
    if let StageOutput::Candidates { candidates } = &stage.output {
        let shown =
            |v: Option<f32>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
        for c in candidates.iter().take(10) {
            println!(
                "    #{:<3} {:.4}  bm25 {}  cos {}  rerank {}  {}",
                c.rank,
                c.score,
                shown(c.scores.lexical_score, 2),
                shown(c.scores.similarity, 3),
                shown(c.scores.rerank, 3),
                printable(&c.path)
            );
        }
    }
    for call in &stage.ctx_calls {
        println!(
            "    ctx.{} {:.1} ms{}",
            printable(&call.operation),
            call.took_us as f64 / 1000.0,
            call.error
                .as_ref()
                .map(|e| format!(": refused: {}", printable(e)))
                .unwrap_or_default()
        );
    }
    for log in &stage.logs {
        println!("    log: {}", printable(log.trim_end()));
    }
}

pub fn print_evidence(ledger: &quarry_core::evidence::EvidenceLedger) {
    println!("evidence ({} admitted):", ledger.entries.len());
    const SHOWN: usize = 10;
    for (i, e) in ledger.entries.iter().enumerate().take(SHOWN) {
        let lines = match (e.location.line_start, e.location.line_end) {
            (Some(a), Some(b)) => format!(":{a}-{b}"),
            _ => e
                .location
                .page
                .map(|p| format!(" p.{p}"))
                .unwrap_or_default(),
        };
        let snippet: String = one_line(&e.text).chars().take(120).collect();
        println!(
            "  {:>2}. {}{}  {}  [{}]\n      {}",
            i + 1,
            printable_path(&e.path),
            lines,
            e.score.map(|s| format!("{s:.4}")).unwrap_or_default(),
            printable(e.title.as_deref().unwrap_or("")),
            snippet
        );
    }
    if ledger.entries.len() > SHOWN {
        println!(
            "  … {} more (--json shows every entry)",
            ledger.entries.len() - SHOWN
        );
    }
    for r in &ledger.rejected {
        println!(
            "  refused {}… from {}: {}",
            printable(&r.reference),
            printable(&r.returned_by),
            printable(&r.reason)
        );
    }
}

/// A `--history` file: a JSON array of `{"role": "user"|"assistant", "content": "..."}`
/// messages, newest last, as a chat turn gives query tools.
pub fn read_history(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(messages) = value.as_array() else {
        bail!(
            "{}: the history is a JSON array of messages",
            path.display()
        );
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str();
        if !matches!(role, Some("user" | "assistant")) || !m["content"].is_string() {
            bail!(
                "{}: message [{i}] needs \"role\" (user or assistant) and \"content\" (text)",
                path.display()
            );
        }
    }
    Ok(messages.clone())
}
