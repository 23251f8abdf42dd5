//! Tauri commands of the Tools view: list, open, check while typing, save (a new version),
//! create, duplicate, delete, restore a version, import and export, and the Test tab. Thin
//! over the library: validation, derivation, the sandbox and the audit all run in the engine.

use std::path::PathBuf;

use quarry_core::audit::AuditRecord;
use quarry_core::models::ModelKind;
use quarry_core::pipeline::{TestInput, ToolTestReport};
use quarry_core::tools::{
    schema, NetworkIsolation, SaveOptions, ToolCheck, ToolDefinition, ToolSummary, ToolType,
    ToolVersion,
};
use quarry_core::{Library, Principal};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tauri::AppHandle;
use tauri_plugin_dialog::DialogExt;

use crate::commands::{blocking, EngineState};
use crate::error::{CommandError, CommandResult};

/// A tool as the editor opens it.
#[derive(Serialize, specta::Type)]
pub struct ToolDetail {
    tool: ToolDefinition,
    /// Saved versions, newest first.
    versions: Vec<ToolVersion>,
    /// Pipelines whose draft or newest saved version use it (a Pipeline context to test in).
    used_by: Vec<String>,
    /// An input for the Test tab: the Inputs schema's defaults (action tools), or a query.
    test_template: Value,
    /// Chat models installed, offered only when the code calls `ctx.llm`.
    llm_models: Vec<String>,
    /// Rerankers installed, for the retrieval form.
    rerankers: Vec<String>,
}

fn detail(library: &Library, slug: &str) -> quarry_core::Result<ToolDetail> {
    let tool = library.tool(slug)?;
    let input_schema = tool.derived.as_ref().and_then(|d| d.input_schema.clone());
    let test_template = match (&tool.tool_type, input_schema) {
        (ToolType::Action, Some(input_schema)) => schema::with_defaults(&json!({}), &input_schema),
        _ => json!({"query": ""}),
    };
    let installed = |kind: ModelKind| -> Vec<String> {
        library
            .models()
            .list()
            .into_iter()
            .filter(|m| m.kind == kind && m.installed_at.is_some())
            .map(|m| m.id)
            .collect()
    };
    Ok(ToolDetail {
        versions: library.tool_versions(slug)?,
        used_by: library.pipelines_using_tool(slug)?,
        test_template,
        llm_models: installed(ModelKind::Llm),
        rerankers: installed(ModelKind::Reranker),
        tool,
    })
}

#[tauri::command]
#[specta::specta]
pub async fn tools_list(
    engine: EngineState<'_>,
    tool_type: Option<ToolType>,
    search: Option<String>,
) -> CommandResult<Vec<ToolSummary>> {
    blocking(&engine, move |engine| {
        let search = search.filter(|s| !s.trim().is_empty());
        Ok(engine.library().tools(tool_type, search.as_deref())?)
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn tool_open(engine: EngineState<'_>, slug: String) -> CommandResult<ToolDetail> {
    blocking(&engine, move |engine| Ok(detail(&engine.library(), &slug)?)).await
}

/// Checks an unsaved definition exactly as saving would (the same derivation): the editor
/// calls it on every pause in typing.
#[tauri::command]
#[specta::specta]
pub async fn tool_check(
    engine: EngineState<'_>,
    tool: ToolDefinition,
    allow_private_egress: bool,
) -> CommandResult<ToolCheck> {
    blocking(&engine, move |engine| {
        let options = SaveOptions {
            allow_private_egress,
        };
        Ok(engine.library().check_tool_with(tool, options)?)
    })
    .await
}

/// Saves an edit as a new version. It changes the reusable definition, not what runs: a
/// pipeline runs its saved snapshot until it is saved again. `allow_private_egress` is the
/// administrator's confirmation of new egress origins on this machine or its networks
/// (audited as `tool.private_egress`).
#[tauri::command]
#[specta::specta]
pub async fn tool_save(
    engine: EngineState<'_>,
    slug: String,
    tool: ToolDefinition,
    allow_private_egress: bool,
) -> CommandResult<ToolDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let options = SaveOptions {
            allow_private_egress,
        };
        library.update_tool_with(&slug, tool, options)?;
        Ok(detail(&library, &slug)?)
    })
    .await
}

/// A new tool of `tool_type` (fixed from then on), from a starting template.
#[tauri::command]
#[specta::specta]
pub async fn tool_create(
    engine: EngineState<'_>,
    slug: String,
    name: String,
    tool_type: ToolType,
) -> CommandResult<ToolDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let tool = library.create_tool(starting_definition(slug, name, tool_type))?;
        Ok(detail(&library, &tool.slug)?)
    })
    .await
}

/// What a new tool of each type starts as: a working example to edit.
fn starting_definition(slug: String, name: String, tool_type: ToolType) -> ToolDefinition {
    let source = match tool_type {
        ToolType::Retrieval => None,
        ToolType::Query => Some(QUERY_TEMPLATE),
        ToolType::Chunk => Some(CHUNK_TEMPLATE),
        ToolType::Action => Some(ACTION_TEMPLATE),
    };
    ToolDefinition {
        slug,
        name,
        description: String::new(),
        tool_type,
        settings: json!({}),
        limits: None,
        egress: None,
        model: None,
        requires_confirmation: false,
        source: source.map(String::from),
        derived: None,
    }
}

const QUERY_TEMPLATE: &str = r#"from quarry import BaseModel, Field


class Settings(BaseModel):
    max_query_variants: int = Field(2, ge=1, le=8, description="Most query streams emitted.")


async def run(input, ctx):
    query = " ".join((input.get("query") or "").split())
    if not query:
        return {"kind": "query_variants", "queries": []}
    queries = [{"query": query, "weight": 1.0}]
    return {"kind": "query_variants", "queries": queries[: ctx.settings["max_query_variants"]]}
"#;

const CHUNK_TEMPLATE: &str = r#"from quarry import BaseModel, Field


class Settings(BaseModel):
    keep: int = Field(10, ge=1, le=200, description="Most candidates kept, best first.")


async def run(input, ctx):
    candidates = input.get("candidates") or []
    kept = candidates[: ctx.settings["keep"]]
    return {"chunks": [{"evidence_ref": c["evidence_ref"]} for c in kept]}
"#;

const ACTION_TEMPLATE: &str = r#"from quarry import BaseModel, Field


class Settings(BaseModel):
    max_results: int = Field(5, ge=1, le=50, description="Most documents returned.")


class Inputs(BaseModel):
    query: str = Field(..., min_length=1, max_length=500, description="What to look for.")


class Match(BaseModel):
    sourceRef: str = Field(..., description="Opaque reference to the document.")
    title: str = Field("", description="Document title.")


class Output(BaseModel):
    matches: list[Match] = Field(..., description="Best matching documents first.")


async def run(input, ctx):
    hits = await ctx.search_documents(input["query"], limit=ctx.settings["max_results"])
    return {"matches": [{"sourceRef": h["source_ref"], "title": h.get("title") or ""} for h in hits]}
"#;

/// Copies a tool under a new slug, optionally as another code type (code carries over between
/// code types; a retrieval tool's settings and code do not convert, and the engine says so).
#[tauri::command]
#[specta::specta]
pub async fn tool_duplicate(
    engine: EngineState<'_>,
    slug: String,
    new_slug: String,
    name: Option<String>,
    tool_type: Option<ToolType>,
) -> CommandResult<ToolDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let name = name.filter(|n| !n.trim().is_empty());
        let tool = library.duplicate_tool(&slug, &new_slug, name.as_deref(), tool_type)?;
        Ok(detail(&library, &tool.slug)?)
    })
    .await
}

/// Deletes a tool; refused while a pipeline uses it (the error names them).
#[tauri::command]
#[specta::specta]
pub async fn tool_delete(engine: EngineState<'_>, slug: String) -> CommandResult<()> {
    blocking(&engine, move |engine| {
        Ok(engine.library().delete_tool(&slug)?)
    })
    .await
}

/// Makes an older version the definition again, as a new version.
#[tauri::command]
#[specta::specta]
pub async fn tool_restore(
    engine: EngineState<'_>,
    slug: String,
    version: i64,
) -> CommandResult<ToolDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        library.restore_tool_version(&slug, version)?;
        Ok(detail(&library, &slug)?)
    })
    .await
}

/// Writes the export file of `slugs` to `path` (`None`: the native save dialog); returns the
/// path written, `None` when the dialog was cancelled.
#[tauri::command]
#[specta::specta]
pub async fn tools_export(
    app: AppHandle,
    engine: EngineState<'_>,
    slugs: Vec<String>,
    path: Option<String>,
) -> CommandResult<Option<String>> {
    blocking(&engine, move |engine| {
        let text = engine.library().export_tools(&slugs)?;
        let path = match path.filter(|p| !p.trim().is_empty()) {
            Some(p) => PathBuf::from(p.trim()),
            None => match app
                .dialog()
                .file()
                .set_title("Export tools")
                .set_file_name("quarry-tools.json")
                .add_filter("Quarry tools", &["json"])
                .blocking_save_file()
                .and_then(|f| f.into_path().ok())
            {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        std::fs::write(&path, text).map_err(|e| quarry_core::Error::io(&path, e))?;
        Ok(Some(path.display().to_string()))
    })
    .await
}

/// Imports an export file, all or nothing (`None`: the native open dialog); returns the
/// slugs imported, empty when the dialog was cancelled. `allow_private_egress` as for
/// [`tool_save`].
#[tauri::command]
#[specta::specta]
pub async fn tools_import(
    app: AppHandle,
    engine: EngineState<'_>,
    path: Option<String>,
    replace: bool,
    allow_private_egress: bool,
) -> CommandResult<Vec<String>> {
    blocking(&engine, move |engine| {
        let path = match path.filter(|p| !p.trim().is_empty()) {
            Some(p) => PathBuf::from(p.trim()),
            None => match app
                .dialog()
                .file()
                .set_title("Import tools")
                .add_filter("Quarry tools", &["json"])
                .blocking_pick_file()
                .and_then(|f| f.into_path().ok())
            {
                Some(p) => p,
                None => return Ok(Vec::new()),
            },
        };
        let bytes = std::fs::read(&path).map_err(|e| quarry_core::Error::io(&path, e))?;
        let options = SaveOptions {
            allow_private_egress,
        };
        let imported = engine
            .library()
            .import_tools_with(&bytes, &path, replace, options)?;
        Ok(imported.into_iter().map(|t| t.slug).collect())
    })
    .await
}

/// Who a test runs as: the administrator, or an API key (a service key with the user it acts
/// for). The secret goes to the engine's own check and is not kept.
#[derive(Deserialize, specta::Type)]
pub struct RunAs {
    key: Option<String>,
    acting_for: Option<String>,
}

impl RunAs {
    pub fn principal(&self, library: &Library) -> quarry_core::Result<Principal> {
        let key = self.key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        let user = self
            .acting_for
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        match key {
            Some(key) => library.authenticate(key, user),
            None => Ok(Principal::administrator()),
        }
    }
}

/// A finished test, with what the Test tab shows beside the output.
#[derive(Serialize, specta::Type)]
pub struct ToolTestView {
    report: ToolTestReport,
    /// How the OS confines code tools here, in words.
    sandbox: String,
    /// The audit record the test wrote.
    audit: Option<AuditRecord>,
}

/// Tests a tool (retrieval tools take a query; code tools the JSON `input`) as `run_as`, in a
/// pipeline's context. Every test writes an audit record, failed ones too: a failure comes
/// back as the error, and the Audit view has its record.
#[tauri::command]
#[specta::specta]
pub async fn tool_test(
    engine: EngineState<'_>,
    slug: String,
    input: Value,
    run_as: RunAs,
    pipeline: Option<String>,
) -> CommandResult<ToolTestView> {
    blocking(&engine, move |engine| {
        // Off the UI's handle: a cold Python worker takes seconds, and search goes on.
        let library = engine.workbench_library()?;
        let principal = run_as.principal(&library)?;
        let tool = library.tool(&slug)?;
        let input = test_input(&tool, input)?;
        let pipeline = pipeline.filter(|p| !p.is_empty());
        let report = library.test_tool(&slug, &input, &principal, pipeline.as_deref(), None)?;
        // This run's own record, not the newest for the tool (another test may have
        // written one meanwhile).
        let audit = match report.audit_id {
            Some(id) => library.audit_record(id)?,
            None => None,
        };
        Ok(ToolTestView {
            report,
            sandbox: sandbox_tier(&library, &tool),
            audit,
        })
    })
    .await
}

/// A retrieval, query or chunk tool takes `{"query": "..."}`; an action tool its own input.
fn test_input(tool: &ToolDefinition, input: Value) -> CommandResult<TestInput> {
    if tool.tool_type == ToolType::Action {
        return Ok(TestInput::Json(input));
    }
    match input.get("query").and_then(Value::as_str) {
        Some(q) => Ok(TestInput::Query(q.to_string())),
        None => Err(CommandError::from(quarry_core::Error::InvalidSetting {
            field: "query".into(),
            reason: format!(
                "a {} tool is tested with {{\"query\": \"...\"}}",
                tool.tool_type.as_str()
            ),
        })),
    }
}

fn sandbox_tier(library: &Library, tool: &ToolDefinition) -> String {
    if !tool.tool_type.is_code() {
        return "none needed: a retrieval tool runs no code".into();
    }
    match library.executor().confinement() {
        Ok(c) => {
            let network = match c.network {
                NetworkIsolation::Sandbox => "bubblewrap sandbox",
                NetworkIsolation::Namespace => "network namespace",
                NetworkIsolation::AuditHookOnly => "audit hook only",
            };
            let mut parts = vec![network.to_string()];
            if c.seccomp {
                parts.push("seccomp".into());
            }
            if c.landlock > 0 {
                parts.push(format!("Landlock ABI {}", c.landlock));
            }
            let missing = c.missing();
            if missing.is_empty() {
                parts.join(" + ")
            } else {
                format!("{} (missing: {missing})", parts.join(" + "))
            }
        }
        Err(e) => format!("unavailable: {e}"),
    }
}
