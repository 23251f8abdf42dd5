//! `quarry tools`: list, show, create, edit, duplicate, import, export, test and delete tool
//! definitions.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use quarry_core::pipeline::{TestInput, ToolTestReport};
use quarry_core::tools::{Limits, SaveOptions, ToolDefinition, ToolType};
use quarry_core::Library;
use serde_json::Value;

use crate::output::print_json;
use crate::pipeline_cmd::{print_evidence, print_stage, read_history};
use crate::principal_arg::AsPrincipal;
use crate::terminal::{printable, printable_text};

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
        /// Another code type for the copy (query, chunk, action); retrieval settings and code
        /// do not convert into each other
        #[arg(long = "type")]
        tool_type: Option<String>,
    },
    /// List a tool's saved versions, newest first
    Versions { slug: String },
    /// Make an older version the tool's definition again (saved as a new version)
    Restore { slug: String, version: i64 },
    /// Change a tool (its type is fixed)
    Edit(ToolFields),
    /// Import tools from an export file (all or nothing)
    Import {
        files: Vec<PathBuf>,
        /// Replace tools that already exist (types stay fixed)
        #[arg(long)]
        replace: bool,
        /// Accept egress origins on this machine or its networks (loopback, private,
        /// link-local, cloud metadata hosts); recorded in the audit log
        #[arg(long)]
        allow_private_egress: bool,
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
        /// Query tools: the conversation so far, a JSON file of `{"role", "content"}` messages,
        /// newest last
        #[arg(long)]
        history: Option<PathBuf>,
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
    /// Settings as JSON; on edit, merged into the saved settings (a field set to null is
    /// removed, objects merge field by field)
    #[arg(long)]
    settings: Option<String>,
    /// On edit: the --settings JSON replaces the saved settings instead of merging into them
    #[arg(long, requires = "settings")]
    replace: bool,
    /// Allowed origin for ctx.http_get (repeatable; at most 64)
    #[arg(long)]
    egress: Vec<String>,
    /// Accept egress origins on this machine or its networks (loopback, private, link-local,
    /// cloud metadata hosts); recorded in the audit log
    #[arg(long)]
    allow_private_egress: bool,
    #[arg(long)]
    timeout_ms: Option<u64>,
    #[arg(long)]
    memory_mb: Option<u64>,
    /// The model ctx.llm calls (only for code that uses ctx.llm)
    #[arg(long)]
    model: Option<String>,
    /// Action tools: each call needs the user's confirmation (such a tool is never a mode's
    /// direct evidence tool)
    #[arg(long, value_name = "true|false")]
    requires_confirmation: Option<bool>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// `patch` over `base` as a JSON merge patch (RFC 7386): objects merge field by field, `null`
/// removes a field, anything else replaces.
fn merge_patch(base: &Value, patch: &Value) -> Value {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            let mut merged = base.clone();
            for (key, value) in patch {
                if value.is_null() {
                    merged.remove(key);
                } else {
                    let next = merge_patch(merged.get(key).unwrap_or(&Value::Null), value);
                    merged.insert(key.clone(), next);
                }
            }
            Value::Object(merged)
        }
        _ => patch.clone(),
    }
}

fn json_arg(flag: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("{flag} is not valid JSON"))
}

impl ToolFields {
    fn save_options(&self) -> SaveOptions {
        SaveOptions {
            allow_private_egress: self.allow_private_egress,
        }
    }

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
                    requires_confirmation: false,
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
            let given = json_arg("--settings", s)?;
            tool.settings = if self.replace {
                given
            } else {
                merge_patch(&tool.settings, &given)
            };
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
        if let Some(confirm) = self.requires_confirmation {
            tool.requires_confirmation = confirm;
        }
        Ok(tool)
    }
}

pub fn run_tools(command: ToolsCommand, library: &Library) -> Result<()> {
    match command {
        ToolsCommand::List {
            tool_type,
            search,
            json,
        } => list(library, tool_type.as_deref(), search.as_deref(), json),
        ToolsCommand::Show { slug, json } => show(library, &slug, json),
        ToolsCommand::Create(fields) => {
            let tool = library.create_tool_with(fields.apply(None)?, fields.save_options())?;
            println!("created {} tool {}", tool.tool_type.as_str(), tool.slug);
            Ok(())
        }
        ToolsCommand::Edit(fields) => edit(library, fields),
        ToolsCommand::Duplicate {
            slug,
            new_slug,
            name,
            tool_type,
        } => {
            let tool_type = tool_type.as_deref().map(ToolType::parse).transpose()?;
            let tool = library.duplicate_tool(&slug, &new_slug, name.as_deref(), tool_type)?;
            println!(
                "created {} {} as a copy of {slug}",
                tool.tool_type.as_str(),
                tool.slug
            );
            Ok(())
        }
        ToolsCommand::Versions { slug } => {
            for v in library.tool_versions(&slug)? {
                println!(
                    "{:>4}  saved at {} (unix)  {}",
                    v.version,
                    v.saved_at,
                    v.tool
                        .derived
                        .as_ref()
                        .map_or("", |d| d.source_hash.as_str())
                );
            }
            Ok(())
        }
        ToolsCommand::Restore { slug, version } => {
            let tool = library.restore_tool_version(&slug, version)?;
            let now = library.tool_versions(&tool.slug)?[0].version;
            println!("restored {slug} to version {version} (saved as version {now})");
            Ok(())
        }
        ToolsCommand::Import {
            files,
            replace,
            allow_private_egress,
        } => import(
            library,
            &files,
            replace,
            SaveOptions {
                allow_private_egress,
            },
        ),
        ToolsCommand::Export { slugs, all, output } => export(library, slugs, all, output),
        ToolsCommand::Test {
            slug,
            query,
            input,
            pipeline,
            conversation,
            history,
            principal,
            json,
        } => {
            if history.is_some() && library.tool(&slug)?.tool_type != ToolType::Query {
                bail!("--history is for query tools: they receive the conversation so far");
            }
            let input = match (query, input, history) {
                (_, Some(text), history) => {
                    let mut input = json_arg("--input", &text)?;
                    if let Some(path) = history {
                        input["history"] = Value::Array(read_history(&path)?);
                    }
                    TestInput::Json(input)
                }
                (Some(q), None, Some(path)) => TestInput::Json(
                    serde_json::json!({"query": q, "history": read_history(&path)?}),
                ),
                (Some(q), None, None) => TestInput::Query(q),
                (None, None, _) => bail!("give --query TEXT or --input JSON"),
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
            print_test(&report)
        }
        ToolsCommand::Delete { slug } => {
            library.delete_tool(&slug)?;
            println!("deleted tool {slug}");
            Ok(())
        }
    }
}

fn list(
    library: &Library,
    tool_type: Option<&str>,
    search: Option<&str>,
    json: bool,
) -> Result<()> {
    let t = tool_type.map(ToolType::parse).transpose()?;
    let tools = library.tools(t, search)?;
    if json {
        return print_json(&tools);
    }
    for tool in &tools {
        println!(
            "{:<10} {:<28} {}{}",
            tool.tool_type.as_str(),
            printable(&tool.slug),
            printable(&tool.name),
            if tool.seeded { "  (seeded)" } else { "" }
        );
    }
    println!("{} tool(s)", tools.len());
    Ok(())
}

fn show(library: &Library, slug: &str, json: bool) -> Result<()> {
    let tool = library.tool(slug)?;
    if json {
        return print_json(&tool);
    }
    println!(
        "{} ({} tool): {}",
        printable(&tool.slug),
        tool.tool_type.as_str(),
        printable(&tool.name)
    );
    if !tool.description.is_empty() {
        println!("  {}", printable(&tool.description));
    }
    // JSON escapes C0 controls but not C1 or bidirectional ones.
    println!(
        "settings: {}",
        printable(&serde_json::to_string(&tool.settings)?)
    );
    if let Some(l) = tool.limits {
        println!("limits: {} ms, {} MB", l.timeout_ms, l.memory_mb);
    }
    if let Some(e) = &tool.egress {
        println!("egress: {}", printable(&list_or_none(e)));
    }
    if let Some(d) = &tool.derived {
        print_derived(d)?;
    }
    if tool.tool_type == ToolType::Action {
        if tool.requires_confirmation {
            println!("needs the user's confirmation before each call");
        }
        match tool.direct_evidence_problems().as_slice() {
            [] => println!("direct evidence tool: can be one"),
            problems => println!(
                "direct evidence tool: cannot be one: {}",
                printable(&problems.join("; "))
            ),
        }
    }
    let users = library.pipelines_using_tool(slug)?;
    if !users.is_empty() {
        println!("used by pipeline(s): {}", printable(&users.join(", ")));
    }
    Ok(())
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// What saving a code tool derived from its source.
fn print_derived(d: &quarry_core::tools::Derived) -> Result<()> {
    println!(
        "evidence manifest: {}",
        printable(&list_or_none(&d.manifest))
    );
    println!("source hash: {}", printable(&d.source_hash));
    println!(
        "settings schema: {}",
        printable(&serde_json::to_string(&d.settings_schema)?)
    );
    if let Some(i) = &d.input_schema {
        println!("input schema: {}", printable(&serde_json::to_string(i)?));
    }
    println!(
        "output schema: {}",
        printable(&serde_json::to_string(&d.output_schema)?)
    );
    Ok(())
}

fn edit(library: &Library, fields: ToolFields) -> Result<()> {
    let slug = match (&fields.slug, &fields.file) {
        (Some(s), _) => s.clone(),
        (None, Some(_)) => fields.apply(None)?.slug,
        (None, None) => bail!("give the slug of the tool to edit"),
    };
    let current = library.tool(&slug)?;
    let tool =
        library.update_tool_with(&slug, fields.apply(Some(current))?, fields.save_options())?;
    println!(
        "saved {}; pipelines pick it up when they are saved again",
        tool.slug
    );
    Ok(())
}

fn import(library: &Library, files: &[PathBuf], replace: bool, options: SaveOptions) -> Result<()> {
    if files.is_empty() {
        bail!("give one or more export files");
    }
    for file in files {
        let bytes =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let tools = library.import_tools_with(&bytes, file, replace, options)?;
        for t in tools {
            println!(
                "imported {} tool {}",
                t.tool_type.as_str(),
                printable(&t.slug)
            );
        }
    }
    Ok(())
}

fn export(library: &Library, slugs: Vec<String>, all: bool, output: Option<PathBuf>) -> Result<()> {
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
    Ok(())
}

fn print_test(report: &ToolTestReport) -> Result<()> {
    println!(
        "tested {} ({} tool) as {}{} in {:.1} ms",
        printable(&report.tool),
        report.tool_type.as_str(),
        printable(&report.principal),
        report
            .pipeline
            .as_ref()
            .map(|p| format!(", pipeline context `{}`", printable(p)))
            .unwrap_or_default(),
        report.took_us as f64 / 1000.0
    );
    for stage in &report.stages {
        print_stage(stage, true);
    }
    println!(
        "output: {}",
        printable_text(&serde_json::to_string_pretty(&report.output)?)
    );
    print_evidence(&report.evidence);
    if let Some(id) = report.audit_id {
        println!("audit record #{id} (quarry audit --action tool.test)");
    }
    Ok(())
}
