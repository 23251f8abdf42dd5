//! `quarry tools|pipeline|keys|audit`: tool definitions, pipelines, API keys and the audit log.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use quarry_core::auth::{NewKey, PrincipalKind, Scope};
use quarry_core::pipeline::{PipelineDefinition, PipelineRun, Severity, TestInput, ToolTestReport};
use quarry_core::tools::{Limits, ToolDefinition, ToolType};
use quarry_core::{Library, Principal, RunOptions};
use serde_json::Value;

/// Who a command runs as: the administrator unless a key is given.
#[derive(Args, Clone)]
pub struct AsPrincipal {
    /// Run as this API key (a personal key, or a service key with --user)
    #[arg(long = "as", env = "QUARRY_KEY", hide_env_values = true)]
    key: Option<String>,
    /// With a service key: the user it acts for
    #[arg(long)]
    user: Option<String>,
}

impl AsPrincipal {
    pub fn principal(&self, library: &Library) -> Result<Principal> {
        match &self.key {
            Some(key) => Ok(library.authenticate(key, self.user.as_deref())?),
            None if self.user.is_some() => bail!("--user needs a service key (--as KEY)"),
            None => Ok(Principal::administrator()),
        }
    }
}

#[derive(Subcommand)]
pub enum ToolsCommand {
    /// List tools
    List {
        /// Only this type (query, retrieval, chunk, action)
        #[arg(long = "type")]
        tool_type: Option<String>,
        /// Only tools whose slug, name or description contain this
        #[arg(long)]
        search: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show a tool's definition (with its derived schemas and manifest)
    Show {
        slug: String,
        #[arg(long)]
        json: bool,
    },
    /// Create a tool from flags, or from a definition file (--file)
    Create(ToolFields),
    /// Copy a tool under a new slug
    Duplicate {
        slug: String,
        new_slug: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// Change a tool (its type is fixed)
    Edit(ToolFields),
    /// Import tools from an export file (all or nothing)
    Import {
        files: Vec<PathBuf>,
        /// Replace tools that already exist (types stay fixed)
        #[arg(long)]
        replace: bool,
    },
    /// Export tools to a file (or stdout)
    Export {
        slugs: Vec<String>,
        /// Every tool
        #[arg(long)]
        all: bool,
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Test a tool as the administrator, a personal key, or a service key + user (audited)
    Test {
        slug: String,
        /// A query (retrieval, query and chunk tools)
        #[arg(long)]
        query: Option<String>,
        /// JSON input (code tools)
        #[arg(long)]
        input: Option<String>,
        /// The pipeline whose retrieval tools and collections to use
        #[arg(long)]
        pipeline: Option<String>,
        /// A conversation id: references issued under it by earlier runs are accepted
        #[arg(long)]
        conversation: Option<String>,
        #[command(flatten)]
        principal: AsPrincipal,
        #[arg(long)]
        json: bool,
    },
    /// Delete a tool (refused while a pipeline uses it)
    Delete { slug: String },
}

#[derive(Args)]
pub struct ToolFields {
    /// The tool's slug
    slug: Option<String>,
    /// A definition file (JSON: slug, name, description, type, settings, limits, egress, source)
    #[arg(long)]
    file: Option<PathBuf>,
    /// query, retrieval, chunk or action
    #[arg(long = "type")]
    tool_type: Option<String>,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    description: Option<String>,
    /// Python source file (code tools)
    #[arg(long)]
    source: Option<PathBuf>,
    /// Settings as JSON
    #[arg(long)]
    settings: Option<String>,
    /// Allowed origin for ctx.http_get (repeatable)
    #[arg(long)]
    egress: Vec<String>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    #[arg(long)]
    memory_mb: Option<u64>,
    /// The model ctx.llm calls (only for code that uses ctx.llm)
    #[arg(long)]
    model: Option<String>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn json_arg(flag: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("{flag} is not valid JSON"))
}

impl ToolFields {
    /// Applies the flags over `base` (a new tool when `None`).
    fn apply(&self, base: Option<ToolDefinition>) -> Result<ToolDefinition> {
        let mut tool = match (&self.file, base) {
            (Some(file), _) => serde_json::from_str(&read(file)?)
                .with_context(|| format!("{} is not a tool definition", file.display()))?,
            (None, Some(base)) => base,
            (None, None) => {
                let slug = self
                    .slug
                    .clone()
                    .context("give the tool's slug (or --file)")?;
                let tool_type = self
                    .tool_type
                    .as_deref()
                    .context("give --type (query, retrieval, chunk or action)")?;
                ToolDefinition {
                    name: slug.clone(),
                    slug,
                    description: String::new(),
                    tool_type: ToolType::parse(tool_type)?,
                    settings: Value::Object(Default::default()),
                    limits: None,
                    egress: None,
                    model: None,
                    source: None,
                    derived: None,
                }
            }
        };
        if let Some(t) = &self.tool_type {
            tool.tool_type = ToolType::parse(t)?;
        }
        if let Some(name) = &self.name {
            tool.name = name.clone();
        }
        if let Some(d) = &self.description {
            tool.description = d.clone();
        }
        if let Some(path) = &self.source {
            tool.source = Some(read(path)?);
        }
        if let Some(s) = &self.settings {
            tool.settings = json_arg("--settings", s)?;
        }
        if !self.egress.is_empty() {
            tool.egress = Some(self.egress.clone());
        }
        if self.timeout_ms.is_some() || self.memory_mb.is_some() {
            let mut limits = tool.limits.unwrap_or_default();
            limits.timeout_ms = self.timeout_ms.unwrap_or(limits.timeout_ms);
            limits.memory_mb = self.memory_mb.unwrap_or(limits.memory_mb);
            tool.limits = Some(Limits { ..limits });
        }
        if let Some(m) = &self.model {
            tool.model = Some(m.clone());
        }
        Ok(tool)
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn run_tools(command: ToolsCommand, library: &Library) -> Result<()> {
    match command {
        ToolsCommand::List {
            tool_type,
            search,
            json,
        } => {
            let t = tool_type.as_deref().map(ToolType::parse).transpose()?;
            let tools = library.tools(t, search.as_deref())?;
            if json {
                return print_json(&tools);
            }
            for tool in &tools {
                println!(
                    "{:<10} {:<28} {}{}",
                    tool.tool_type.as_str(),
                    tool.slug,
                    tool.name,
                    if tool.seeded { "  (seeded)" } else { "" }
                );
            }
            println!("{} tool(s)", tools.len());
        }
        ToolsCommand::Show { slug, json } => {
            let tool = library.tool(&slug)?;
            if json {
                return print_json(&tool);
            }
            println!(
                "{} ({} tool): {}",
                tool.slug,
                tool.tool_type.as_str(),
                tool.name
            );
            if !tool.description.is_empty() {
                println!("  {}", tool.description);
            }
            println!("settings: {}", serde_json::to_string(&tool.settings)?);
            if let Some(l) = tool.limits {
                println!("limits: {} ms, {} MB", l.timeout_ms, l.memory_mb);
            }
            if let Some(e) = &tool.egress {
                println!(
                    "egress: {}",
                    if e.is_empty() {
                        "none".into()
                    } else {
                        e.join(", ")
                    }
                );
            }
            if let Some(d) = &tool.derived {
                println!(
                    "evidence manifest: {}",
                    if d.manifest.is_empty() {
                        "none".into()
                    } else {
                        d.manifest.join(", ")
                    }
                );
                println!("source hash: {}", d.source_hash);
                println!(
                    "settings schema: {}",
                    serde_json::to_string(&d.settings_schema)?
                );
                if let Some(i) = &d.input_schema {
                    println!("input schema: {}", serde_json::to_string(i)?);
                }
                println!(
                    "output schema: {}",
                    serde_json::to_string(&d.output_schema)?
                );
            }
            let users = quarry_core::pipeline::pipelines_using(library.store(), &slug)?;
            if !users.is_empty() {
                println!("used by pipeline(s): {}", users.join(", "));
            }
        }
        ToolsCommand::Create(fields) => {
            let tool = library.create_tool(fields.apply(None)?)?;
            println!("created {} tool {}", tool.tool_type.as_str(), tool.slug);
        }
        ToolsCommand::Edit(fields) => {
            let slug = match (&fields.slug, &fields.file) {
                (Some(s), _) => s.clone(),
                (None, Some(_)) => fields.apply(None)?.slug,
                (None, None) => bail!("give the slug of the tool to edit"),
            };
            let current = library.tool(&slug)?;
            let tool = library.update_tool(&slug, fields.apply(Some(current))?)?;
            println!(
                "saved {}; pipelines pick it up when they are saved again",
                tool.slug
            );
        }
        ToolsCommand::Duplicate {
            slug,
            new_slug,
            name,
        } => {
            let tool = library.duplicate_tool(&slug, &new_slug, name.as_deref())?;
            println!("created {} as a copy of {slug}", tool.slug);
        }
        ToolsCommand::Import { files, replace } => {
            if files.is_empty() {
                bail!("give one or more export files");
            }
            for file in files {
                let bytes = std::fs::read(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                let tools = library.import_tools(&bytes, &file, replace)?;
                for t in tools {
                    println!("imported {} tool {}", t.tool_type.as_str(), t.slug);
                }
            }
        }
        ToolsCommand::Export { slugs, all, output } => {
            let slugs = if all {
                library
                    .tools(None, None)?
                    .into_iter()
                    .map(|t| t.slug)
                    .collect()
            } else if slugs.is_empty() {
                bail!("give tool slugs, or --all");
            } else {
                slugs
            };
            let text = library.export_tools(&slugs)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!("exported {} tool(s) to {}", slugs.len(), path.display());
                }
                None => print!("{text}"),
            }
        }
        ToolsCommand::Test {
            slug,
            query,
            input,
            pipeline,
            conversation,
            principal,
            json,
        } => {
            let input = match (query, input) {
                (_, Some(text)) => TestInput::Json(json_arg("--input", &text)?),
                (Some(q), None) => TestInput::Query(q),
                (None, None) => bail!("give --query TEXT or --input JSON"),
            };
            let who = principal.principal(library)?;
            let report = library.test_tool(
                &slug,
                &input,
                &who,
                pipeline.as_deref(),
                conversation.as_deref(),
            )?;
            if json {
                return print_json(&report);
            }
            print_test(&report)?;
        }
        ToolsCommand::Delete { slug } => {
            library.delete_tool(&slug)?;
            println!("deleted tool {slug}");
        }
    }
    Ok(())
}

fn print_test(report: &ToolTestReport) -> Result<()> {
    println!(
        "tested {} ({} tool) as {}{} in {:.1} ms",
        report.tool,
        report.tool_type.as_str(),
        report.principal,
        report
            .pipeline
            .as_ref()
            .map(|p| format!(", pipeline context `{p}`"))
            .unwrap_or_default(),
        report.took_us as f64 / 1000.0
    );
    for stage in &report.stages {
        print_stage(stage, true);
    }
    println!("output: {}", serde_json::to_string_pretty(&report.output)?);
    print_evidence(&report.evidence);
    Ok(())
}

fn print_stage(stage: &quarry_core::pipeline::StageReport, trace: bool) {
    println!(
        "[{}] {} {:.1} ms: {}",
        stage.stage,
        stage.tool.as_deref().unwrap_or("-"),
        stage.took_us as f64 / 1000.0,
        stage.detail
    );
    if !trace {
        return;
    }
    if stage.stage == "query" {
        for q in stage.output["queries"].as_array().into_iter().flatten() {
            println!(
                "    {:.2}  {}",
                q["weight"].as_f64().unwrap_or(0.0),
                q["query"].as_str().unwrap_or("")
            );
        }
    }
    for s in &stage.search_trace {
        println!(
            "    {:<10} {:>5} candidate(s) {:>8.1} ms  {}",
            s.stage,
            s.candidates,
            s.took_us as f64 / 1000.0,
            s.detail
        );
    }
    if stage.stage == "retrieval" {
        for c in stage.output["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .take(10)
        {
            let scores = &c["scores"];
            println!(
                "    #{:<3} {:.4}  bm25 {}  cos {}  rerank {}  {}",
                c["rank"],
                c["score"].as_f64().unwrap_or(0.0),
                scores["lexical_score"]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.2}")),
                scores["similarity"]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.3}")),
                scores["rerank"]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.3}")),
                c["path"].as_str().unwrap_or("")
            );
        }
    }
    for call in &stage.ctx_calls {
        println!(
            "    ctx.{} {:.1} ms{}",
            call.operation,
            call.took_us as f64 / 1000.0,
            call.error
                .as_ref()
                .map(|e| format!(": refused: {e}"))
                .unwrap_or_default()
        );
    }
    for log in &stage.logs {
        println!("    log: {}", log.trim_end());
    }
}

fn print_evidence(ledger: &quarry_core::evidence::EvidenceLedger) {
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
        let snippet: String = e
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(120)
            .collect();
        println!(
            "  {:>2}. {}{}  {}  [{}]\n      {}",
            i + 1,
            e.path.display(),
            lines,
            e.score.map(|s| format!("{s:.4}")).unwrap_or_default(),
            e.title.as_deref().unwrap_or(""),
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
            r.reference, r.returned_by, r.reason
        );
    }
}

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
        };
        println!("{label}: {}: {}", p.component, p.message);
    }
}

pub fn run_pipeline(command: PipelineCommand, library: &Library) -> Result<bool> {
    match command {
        PipelineCommand::List { json } => {
            let names = library.pipelines()?;
            if json {
                print_json(&names)?;
            } else {
                for name in names {
                    let view = library.pipeline(&name)?;
                    println!(
                        "{name}  (saved version {}{})",
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
            }
        }
        PipelineCommand::Show { name, json } => {
            let view = library.pipeline(&name)?;
            let problems = library.check_pipeline(&name, view.saved.is_none())?;
            if json {
                return print_json(&serde_json::json!({"pipeline": view, "readiness": problems}))
                    .map(|_| true);
            }
            let show = |label: &str, p: &PipelineDefinition| {
                println!("{label}:");
                println!("  query:      {}", p.query_tools.join(" → "));
                println!(
                    "  retrieval:  {} (default){}",
                    p.retrieval.as_deref().unwrap_or("NONE"),
                    if p.retrieval_capabilities.is_empty() {
                        String::new()
                    } else {
                        format!(" + {}", p.retrieval_capabilities.join(", "))
                    }
                );
                println!("  chunk:      {}", p.chunk_tools.join(" → "));
                println!(
                    "  collections: {}",
                    if p.collections.is_empty() {
                        "all the caller may read".into()
                    } else {
                        p.collections.join(", ")
                    }
                );
                println!(
                    "  budget:     {} query variant(s), {} evidence chunk(s)",
                    p.budget.max_query_variants, p.budget.max_evidence
                );
            };
            match &view.saved {
                Some(s) => show(
                    &format!("saved version {} (by {})", s.version, s.saved_by),
                    &s.pipeline,
                ),
                None => println!("never saved"),
            }
            if view.unsaved_changes {
                show("draft (unsaved changes)", &view.draft);
            }
            print_problems(&problems);
        }
        PipelineCommand::Create(fields) => {
            let p = fields.apply(PipelineDefinition::default());
            library.create_pipeline(&fields.name, &p)?;
            println!(
                "created pipeline {} (a draft: `quarry pipeline save {}` puts it into service)",
                fields.name, fields.name
            );
        }
        PipelineCommand::Edit(fields) => {
            let view = library.pipeline(&fields.name)?;
            library.edit_pipeline(&fields.name, &fields.apply(view.draft))?;
            println!(
                "updated the draft of {}; runs use the saved version until you save",
                fields.name
            );
        }
        PipelineCommand::Save { name } => {
            let saved = library.save_pipeline(&name, &Principal::administrator())?;
            println!(
                "saved {name} as version {} ({} tool(s) snapshotted)",
                saved.version,
                saved.tools.len()
            );
        }
        PipelineCommand::Check { name, draft, json } => {
            let problems = library.check_pipeline(&name, draft)?;
            if json {
                print_json(&problems)?;
            } else {
                print_problems(&problems);
            }
            return Ok(!problems.iter().any(|p| p.severity == Severity::Blocking));
        }
        PipelineCommand::Run {
            query,
            pipeline,
            trace,
            draft,
            conversation,
            principal,
            json,
        } => {
            let who = principal.principal(library)?;
            let run = library.run_pipeline(
                &pipeline,
                &query,
                &who,
                &RunOptions {
                    draft,
                    conversation,
                    ..Default::default()
                },
            )?;
            if json {
                print_json(&run)?;
            } else {
                print_run(&run, trace);
            }
            return Ok(!run.evidence.entries.is_empty());
        }
        PipelineCommand::Delete { name } => {
            library.delete_pipeline(&name)?;
            println!("deleted pipeline {name}");
        }
    }
    Ok(true)
}

pub fn print_run(run: &PipelineRun, trace: bool) {
    println!(
        "pipeline {} ({}) as {}: {:.1} ms",
        run.pipeline,
        run.version
            .map_or("draft".into(), |v| format!("version {v}")),
        run.principal,
        run.took_us as f64 / 1000.0
    );
    for p in &run.readiness {
        println!("  note: {}", p.message);
    }
    for stage in &run.stages {
        print_stage(stage, trace);
    }
    print_evidence(&run.evidence);
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create an API key (the secret is shown once)
    Create {
        name: String,
        /// personal or service
        #[arg(long, default_value = "personal", value_parser = ["personal", "service"])]
        kind: String,
        /// Owner of a personal key [default: its name]
        #[arg(long)]
        user: Option<String>,
        /// Collections it may read (comma-separated) [default: all]
        #[arg(long, value_delimiter = ',')]
        collections: Option<Vec<String>>,
        /// Highest sensitivity label it may read
        #[arg(long, default_value = "internal")]
        ceiling: String,
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their secrets)
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key
    Revoke { name: String },
}

pub fn run_keys(command: KeysCommand, library: &Library) -> Result<()> {
    match command {
        KeysCommand::Create {
            name,
            kind,
            user,
            collections,
            ceiling,
            json,
        } => {
            let created = library.create_key(&NewKey {
                name,
                kind: if kind == "service" {
                    PrincipalKind::Service
                } else {
                    PrincipalKind::Personal
                },
                user,
                scope: Scope {
                    collections,
                    sensitivity_ceiling: ceiling,
                },
            })?;
            if json {
                return print_json(&created);
            }
            println!("created {} key {}", kind, created.key.name);
            println!("secret (shown once, store it now): {}", created.secret);
        }
        KeysCommand::List { json } => {
            let keys = library.keys()?;
            if json {
                return print_json(&keys);
            }
            for k in keys {
                println!(
                    "{:<20} {:<9} {:<12} user {:<12} collections {:<20} ceiling {:<12} {}",
                    k.name,
                    format!("{:?}", k.kind).to_lowercase(),
                    k.prefix,
                    k.user.as_deref().unwrap_or("-"),
                    k.scope
                        .collections
                        .as_ref()
                        .map_or("all".into(), |c| c.join(",")),
                    k.scope.sensitivity_ceiling,
                    if k.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    }
                );
            }
        }
        KeysCommand::Revoke { name } => {
            library.revoke_key(&name)?;
            println!("revoked {name}");
        }
    }
    Ok(())
}

pub fn print_audit(library: &Library, limit: usize, json: bool) -> Result<()> {
    let records = library.audit(limit)?;
    if json {
        return print_json(&records);
    }
    for r in records {
        println!(
            "{:>5}  {} UTC  {:<22} {:<12} {:<28} {:>6} ms  {}  {}{}",
            r.id,
            utc(r.at_ms),
            r.principal,
            r.action,
            r.target,
            r.duration_ms,
            r.outcome,
            &r.input_hash[..19.min(r.input_hash.len())],
            r.detail.map(|d| format!("  ({d})")).unwrap_or_default()
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` for Unix milliseconds (UTC), by the civil-from-days algorithm.
fn utc(at_ms: i64) -> String {
    let secs = at_ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_unix_milliseconds() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_796_001_295_860), "2026-11-30 01:14:55");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
    }
}
