//! Tool definitions: the four types of the tool manual, stored in the library, validated and
//! derived on save, exported and imported in a versioned JSON format.
//!
//! A retrieval tool is settings only ([`RetrievalSettings`]). Query, chunk and action tools are
//! Python (`async def run(input, ctx)`): saving one asks a worker to parse it and derive its
//! settings schema, action input and output schemas and evidence manifest (the `ctx`
//! operations it uses); the host adds the source hash. The type is fixed at creation.
//!
//! The export format is `{"format": "quarry-tool", "version": 1, "tools": [...]}`, serialised
//! deterministically (keys in a fixed order), so export → delete → import → export gives the
//! same bytes. Import checks every tool before writing any, in one transaction.

#[cfg(target_os = "linux")]
mod confine;
mod egress;
mod executor;
pub mod schema;
mod seeds;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::names::{Name, NameKind};
use crate::retrieve::RetrievalSettings;
use crate::store::{Store, Tx};
pub(crate) use egress::private_origins;
pub use egress::{SaveOptions, MAX_EGRESS_ORIGINS};
pub use executor::{
    python_command, CallError, CallOutcome, Confinement, Executor, NetworkIsolation,
    UNCONFINED_SETTING,
};
pub use seeds::SEEDED_TOOLS;
pub(crate) use seeds::{insert_seeded, seeded_definitions, store_late_derivations};

/// The export format's name and the newest version this build reads and writes.
pub const EXPORT_FORMAT: &str = "quarry-tool";
/// See [`EXPORT_FORMAT`].
pub const EXPORT_VERSION: u32 = 1;

/// The governed operations a code tool may use through `ctx` (the evidence manifest's vocabulary,
/// sent to the worker's analysis; `pipeline::host` implements each).
pub const CTX_OPERATIONS: &[&str] = &[
    "search",
    "search_documents",
    "fetch_document_chunks",
    "fetch_source_document",
    "fetch_neighbors",
    "http_get",
    "llm",
];

/// Where a tool runs and what it produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum ToolType {
    /// Before retrieval: weighted query variants.
    Query,
    /// During retrieval: settings only.
    Retrieval,
    /// After retrieval: selects or reorders issued references.
    Chunk,
    /// Called by the orchestrator: a schema-validated direct-evidence result.
    Action,
}

impl ToolType {
    /// `query`, `retrieval`, `chunk` or `action`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolType::Query => "query",
            ToolType::Retrieval => "retrieval",
            ToolType::Chunk => "chunk",
            ToolType::Action => "action",
        }
    }

    /// Parses [`ToolType::as_str`]'s names.
    pub fn parse(s: &str) -> Result<ToolType> {
        match s {
            "query" => Ok(ToolType::Query),
            "retrieval" => Ok(ToolType::Retrieval),
            "chunk" => Ok(ToolType::Chunk),
            "action" => Ok(ToolType::Action),
            _ => Err(Error::InvalidSetting {
                field: "type".into(),
                reason: format!("`{s}` is not one of query, retrieval, chunk, action"),
            }),
        }
    }

    /// Whether tools of this type are Python.
    pub fn is_code(self) -> bool {
        self != ToolType::Retrieval
    }
}

/// A code tool's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Limits {
    /// Wall-clock limit per call, ms.
    pub timeout_ms: u64,
    /// Address-space limit of the worker, MB.
    pub memory_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: 5000,
            memory_mb: 256,
        }
    }
}

/// What saving a code tool derives from its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Derived {
    /// From `class Settings`.
    pub settings_schema: Value,
    /// From `class Inputs` (action tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// From `class Output` (action tools), or the type's fixed shape.
    pub output_schema: Value,
    /// `sha256:` of the source.
    pub source_hash: String,
    /// The `ctx` operations the code uses.
    pub manifest: Vec<String>,
}

/// A tool as stored and exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolDefinition {
    /// Unique id: lower-case letters, digits, `-`, `_`.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// What it does and when to use it.
    #[serde(default)]
    pub description: String,
    /// Fixed at creation.
    #[serde(rename = "type")]
    pub tool_type: ToolType,
    /// Retrieval settings, or the values of a code tool's `Settings`.
    #[serde(default = "empty_object")]
    pub settings: Value,
    /// Code tools: time and memory limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Code tools: origins `ctx.http_get` may reach (`https://host[:port]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
    /// Code tools that use `ctx.llm`: the model they call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Action tools: each call needs the user's confirmation first. Declared, because the code
    /// cannot show it; such a tool is never a direct evidence tool (the model calls those on its
    /// own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_confirmation: bool,
    /// Code tools: the Python source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Code tools: what saving derived from the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<Derived>,
}

fn empty_object() -> Value {
    json!({})
}

impl ToolDefinition {
    /// The retrieval settings of a retrieval tool.
    pub fn retrieval_settings(&self) -> Result<RetrievalSettings> {
        serde_json::from_value(self.settings.clone()).map_err(|e| Error::InvalidTool {
            tool: self.slug.clone(),
            field: "settings".into(),
            reason: e.to_string(),
        })
    }

    /// A code tool's settings with the defaults of its `Settings` model filled in.
    pub fn effective_settings(&self) -> Value {
        match &self.derived {
            Some(d) => schema::with_defaults(&self.settings, &d.settings_schema),
            None => self.settings.clone(),
        }
    }

    /// Whether the code calls `ctx.llm`.
    pub fn uses_llm(&self) -> bool {
        self.derived
            .as_ref()
            .is_some_and(|d| d.manifest.iter().any(|m| m == "llm"))
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits.unwrap_or_default()
    }

    /// Why this tool may not be a mode's direct evidence tool, if it may not. The manual
    /// accepts an action tool there only when it is read-only, needs no confirmation, has
    /// strict input and output schemas and returns references the host can validate and admit;
    /// each is read from what saving derived (the `ctx` operations used, the schemas).
    pub fn direct_evidence_problems(&self) -> Vec<String> {
        if self.tool_type != ToolType::Action {
            return vec![format!(
                "it is a {} tool; only action tools are direct evidence tools",
                self.tool_type.as_str()
            )];
        }
        let Some(derived) = &self.derived else {
            return vec!["its code has not been derived yet (save it once Python is there)".into()];
        };
        let mut problems = Vec::new();
        if self.requires_confirmation {
            problems.push(
                "it is declared to need the user's confirmation before each call, and a direct evidence tool is called by the model on its own"
                    .to_string(),
            );
        }
        // Every ctx operation but http_get reads the library as the caller; a request to
        // another server may change something there.
        if derived.manifest.iter().any(|op| op == "http_get") {
            problems.push(
                "it calls ctx.http_get, so it is not read-only (a request may change something elsewhere)"
                    .to_string(),
            );
        }
        let strict = |schema: Option<&Value>| {
            schema.is_some_and(|s| s.get("additionalProperties") == Some(&Value::Bool(false)))
        };
        if !strict(derived.input_schema.as_ref()) {
            problems.push("its `Inputs` schema is not strict (extra fields allowed)".into());
        }
        if !strict(Some(&derived.output_schema)) {
            problems.push("its `Output` schema is not strict (extra fields allowed)".into());
        }
        if !mentions_reference(&derived.output_schema) {
            problems.push(
                "its `Output` returns no evidence_ref, evidence_refs or sourceRef: nothing the host can validate and admit, so its text could never be cited"
                    .into(),
            );
        }
        problems
    }
}

/// Whether a schema has a property named like an evidence or source reference, at any depth.
fn mentions_reference(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.iter().any(|(key, value)| {
            (key == "properties"
                && value.as_object().is_some_and(|props| {
                    props.keys().any(|k| {
                        matches!(
                            k.as_str(),
                            "evidence_ref" | "evidence_refs" | "sourceRef" | "source_ref"
                        )
                    })
                }))
                || mentions_reference(value)
        }),
        Value::Array(items) => items.iter().any(mentions_reference),
        _ => false,
    }
}

/// A tool in a listing.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolSummary {
    /// Slug.
    pub slug: String,
    /// Name.
    pub name: String,
    /// Type.
    #[serde(rename = "type")]
    pub tool_type: ToolType,
    /// Description.
    pub description: String,
    /// Installed by a fresh library.
    pub seeded: bool,
    /// Unix seconds.
    pub updated_at: i64,
    /// The newest saved version (each save makes one).
    pub version: i64,
}

/// One saved version of a tool, as the editor's history lists it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolVersion {
    /// 1, 2, …
    pub version: i64,
    /// Unix seconds.
    pub saved_at: i64,
    /// The definition as saved (a code tool's source hash is in its `derived`).
    pub tool: ToolDefinition,
}

/// What checking an unsaved definition found: the definition as saving would store it, or
/// the first problem, located.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolCheck {
    /// The validated, derived definition (`None` when there is a problem).
    pub tool: Option<ToolDefinition>,
    /// What is wrong, where.
    pub problem: Option<ToolProblem>,
}

/// A problem in a tool definition, at its field (and, in the source, its line and column).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ToolProblem {
    /// `source`, `name`, `settings`, `settings.fusion.k`, `limits.timeout_ms`, …
    pub field: String,
    /// 1-based, in the source.
    pub line: Option<u32>,
    /// 1-based, in the source.
    pub column: Option<u32>,
    /// The engine's message, as saving would give it.
    pub message: String,
}

/// The export file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFile {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`] when written by this build.
    pub version: u32,
    /// The tools.
    pub tools: Vec<ToolDefinition>,
}

fn invalid(tool: &str, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidTool {
        tool: tool.into(),
        field: field.into(),
        reason: reason.into(),
    }
}

/// Checks a slug: 1–64 of `a-z 0-9 - _`, starting with a letter or digit.
pub fn validate_slug(slug: &str) -> Result<()> {
    Name::parse(NameKind::Tool, slug).map_err(|bad| invalid(slug, "slug", bad.reason()))?;
    Ok(())
}

/// Validates a definition and derives what its source implies. The result is what gets stored.
/// `confirmed`: egress origins saved before (the tool's current definition, the version being
/// restored), which need no new confirmation; `options`: what the administrator confirmed.
pub fn prepare(
    tool: ToolDefinition,
    executor: &Executor,
    confirmed: &[String],
    options: SaveOptions,
) -> Result<ToolDefinition> {
    validate_common(&tool)?;
    if tool.tool_type.is_code() {
        prepare_code(tool, executor, confirmed, options)
    } else {
        prepare_retrieval(tool)
    }
}

/// Slug, name, description and the settings' shape, which every type shares.
fn validate_common(tool: &ToolDefinition) -> Result<()> {
    validate_slug(&tool.slug)?;
    let slug = &tool.slug;
    if tool.name.trim().is_empty() || tool.name.chars().count() > 120 {
        return Err(invalid(slug, "name", "must be 1 to 120 characters"));
    }
    if tool.description.chars().count() > 2000 {
        return Err(invalid(
            slug,
            "description",
            "must be at most 2000 characters",
        ));
    }
    if !tool.settings.is_object() {
        return Err(invalid(slug, "settings", "must be a JSON object"));
    }
    Ok(())
}

/// A retrieval tool is settings only, stored in full.
fn prepare_retrieval(mut tool: ToolDefinition) -> Result<ToolDefinition> {
    let slug = tool.slug.clone();
    for (field, present) in [
        ("source", tool.source.is_some()),
        ("limits", tool.limits.is_some()),
        ("egress", tool.egress.is_some()),
        ("model", tool.model.is_some()),
        ("requires_confirmation", tool.requires_confirmation),
        ("derived", tool.derived.is_some()),
    ] {
        if present {
            return Err(invalid(
                &slug,
                field,
                "does not apply: a retrieval tool is settings only",
            ));
        }
    }
    let settings = tool.retrieval_settings()?;
    settings.validate().map_err(|e| match e {
        Error::InvalidSetting { field, reason } => {
            invalid(&slug, &format!("settings.{field}"), reason)
        }
        other => invalid(&slug, "settings", other.to_string()),
    })?;
    // Stored in full, so every field is visible and export is canonical.
    // Through text, so f32 fields keep their short form (0.3, not 0.30000001192092896).
    tool.settings = serde_json::from_str(&serde_json::to_string(&settings).expect("serializes"))
        .expect("round-trips");
    Ok(tool)
}

/// A code tool: source, limits and egress checked, then its shapes derived by a worker.
fn prepare_code(
    mut tool: ToolDefinition,
    executor: &Executor,
    confirmed: &[String],
    options: SaveOptions,
) -> Result<ToolDefinition> {
    let slug = tool.slug.clone();
    let source = tool
        .source
        .clone()
        .ok_or_else(|| invalid(&slug, "source", "is required for a code tool"))?;
    if source.len() > 256 * 1024 {
        return Err(invalid(&slug, "source", "is larger than 256 KiB"));
    }
    if tool.requires_confirmation && tool.tool_type != ToolType::Action {
        return Err(invalid(
            &slug,
            "requires_confirmation",
            "applies only to action tools (query and chunk tools run inside a pipeline, with no one to ask)",
        ));
    }
    let limits = tool.limits.unwrap_or_default();
    if !(10..=600_000).contains(&limits.timeout_ms) {
        return Err(invalid(&slug, "limits.timeout_ms", "must be 10 to 600000"));
    }
    if !(64..=16_384).contains(&limits.memory_mb) {
        return Err(invalid(&slug, "limits.memory_mb", "must be 64 to 16384"));
    }
    tool.limits = Some(limits);
    let egress = tool.egress.clone().unwrap_or_default();
    egress::validate_egress(&slug, &egress, confirmed, options)?;
    tool.egress = Some(egress);

    let derived = derive(&slug, tool.tool_type, &source, executor)?;
    schema::validate(&tool.settings, &derived.settings_schema)
        .map_err(|e| invalid(&slug, "settings", e))?;
    tool.derived = Some(derived);
    if tool.model.is_some() && !tool.uses_llm() {
        return Err(invalid(
            &slug,
            "model",
            "can be chosen only when the code uses ctx.llm",
        ));
    }
    Ok(tool)
}

/// What a worker's analysis of the source implies: schemas, manifest and source hash.
fn derive(slug: &str, tool_type: ToolType, source: &str, executor: &Executor) -> Result<Derived> {
    let analysis =
        executor
            .analyze(source, tool_type.as_str())?
            .map_err(|(message, line, column)| Error::ToolSource {
                tool: slug.into(),
                line,
                column,
                message,
            })?;
    let manifest: Vec<String> = serde_json::from_value(analysis["manifest"].clone())
        .map_err(|e| Error::Internal(format!("worker manifest: {e}")))?;
    let output_schema = match tool_type {
        ToolType::Query => schema::query_output_schema(),
        ToolType::Chunk => schema::chunk_output_schema(),
        _ => analysis["output_schema"].clone(),
    };
    let input_schema = match tool_type {
        ToolType::Action => Some(analysis["input_schema"].clone()),
        _ => None,
    };
    Ok(Derived {
        settings_schema: analysis["settings_schema"].clone(),
        input_schema,
        output_schema,
        source_hash: format!("sha256:{:x}", Sha256::digest(source.as_bytes())),
        manifest,
    })
}

/// The tools, optionally of one type and matching a search (slug, name or description).
pub(crate) fn list(
    store: &Store,
    tool_type: Option<ToolType>,
    search: Option<&str>,
) -> Result<Vec<ToolSummary>> {
    let needle = search.map(str::to_lowercase);
    let mut out = Vec::new();
    for row in store.tool_rows()? {
        let tool: ToolDefinition = parse_stored(&row.definition)?;
        if tool_type.is_some_and(|t| t != tool.tool_type) {
            continue;
        }
        if let Some(needle) = &needle {
            let haystack =
                format!("{} {} {}", tool.slug, tool.name, tool.description).to_lowercase();
            if !haystack.contains(needle.as_str()) {
                continue;
            }
        }
        out.push(ToolSummary {
            slug: tool.slug,
            name: tool.name,
            tool_type: tool.tool_type,
            description: tool.description,
            seeded: row.seeded,
            updated_at: row.updated_at,
            version: row.version,
        });
    }
    Ok(out)
}

fn parse_stored(definition: &str) -> Result<ToolDefinition> {
    serde_json::from_str(definition)
        .map_err(|e| Error::Internal(format!("stored tool definition is unreadable: {e}")))
}

/// One tool.
pub(crate) fn get(store: &Store, slug: &str) -> Result<ToolDefinition> {
    let definition = store.tool_definition(slug)?;
    parse_stored(&definition.ok_or_else(|| Error::ToolNotFound(slug.into()))?)
}

/// Every saved version of a tool, newest first.
pub(crate) fn versions(store: &Store, slug: &str) -> Result<Vec<ToolVersion>> {
    let rows = store.tool_versions(slug)?;
    if rows.is_empty() {
        return Err(Error::ToolNotFound(slug.into()));
    }
    rows.into_iter()
        .map(|row| {
            let tool = parse_stored(&row.definition)?;
            Ok(ToolVersion {
                version: row.version,
                saved_at: row.saved_at,
                tool,
            })
        })
        .collect()
}

/// Makes an older version the tool's definition again, as a new version (checked and derived
/// like any save).
pub(crate) fn restore(
    store: &Store,
    executor: &Executor,
    slug: &str,
    version: i64,
) -> Result<ToolDefinition> {
    let old = versions(store, slug)?
        .into_iter()
        .find(|v| v.version == version)
        .ok_or_else(|| invalid(slug, "version", format!("{slug} has no version {version}")))?;
    // Its origins were accepted when that version was saved.
    let confirmed = old.tool.egress.clone().unwrap_or_default();
    update_confirmed(
        store,
        executor,
        slug,
        old.tool,
        &confirmed,
        SaveOptions::default(),
    )
}

/// Checks an unsaved definition exactly as saving would (the same derivation), without
/// storing it; a problem comes back located at its field, line and column. `confirmed` and
/// `options` as for [`prepare`].
pub fn check(
    tool: ToolDefinition,
    executor: &Executor,
    confirmed: &[String],
    options: SaveOptions,
) -> Result<ToolCheck> {
    match prepare(tool, executor, confirmed, options) {
        Ok(tool) => Ok(ToolCheck {
            tool: Some(tool),
            problem: None,
        }),
        Err(Error::ToolSource {
            line,
            column,
            message,
            ..
        }) => Ok(ToolCheck {
            tool: None,
            problem: Some(ToolProblem {
                field: "source".into(),
                line: Some(line),
                column: Some(column),
                message,
            }),
        }),
        Err(Error::InvalidTool { field, reason, .. }) => Ok(ToolCheck {
            tool: None,
            problem: Some(ToolProblem {
                field,
                line: None,
                column: None,
                message: reason,
            }),
        }),
        // The worker could not run (no Python, say): not a problem of the definition.
        Err(other) => Err(other),
    }
}

pub(crate) fn canonical(tool: &ToolDefinition) -> String {
    serde_json::to_string(tool).expect("tool serializes")
}

/// Inserts a tool in the caller's transaction; an existing slug is [`Error::ToolExists`].
fn insert(tx: &Tx<'_>, tool: &ToolDefinition, seeded: bool) -> Result<()> {
    let inserted = crate::store::insert_tool(
        tx,
        &tool.slug,
        tool.tool_type.as_str(),
        &canonical(tool),
        seeded,
    )?;
    if !inserted {
        return Err(Error::ToolExists(tool.slug.clone()));
    }
    Ok(())
}

/// Creates a tool (validated and derived first).
pub(crate) fn create(
    store: &Store,
    executor: &Executor,
    tool: ToolDefinition,
    options: SaveOptions,
) -> Result<ToolDefinition> {
    create_confirmed(store, executor, tool, &[], options)
}

/// [`create`], with egress origins accepted before (a duplicate's original's).
fn create_confirmed(
    store: &Store,
    executor: &Executor,
    tool: ToolDefinition,
    confirmed: &[String],
    options: SaveOptions,
) -> Result<ToolDefinition> {
    let tool = prepare(tool, executor, confirmed, options)?;
    let tx = store.write()?;
    insert(&tx, &tool, false)?;
    tx.commit()?;
    Ok(tool)
}

/// Replaces a tool's definition. Its type cannot change. Saved pipeline versions keep the
/// definition they were saved with.
pub(crate) fn update(
    store: &Store,
    executor: &Executor,
    slug: &str,
    tool: ToolDefinition,
    options: SaveOptions,
) -> Result<ToolDefinition> {
    update_confirmed(store, executor, slug, tool, &[], options)
}

/// [`update`], with egress origins accepted before besides the current definition's (a
/// restored version's).
fn update_confirmed(
    store: &Store,
    executor: &Executor,
    slug: &str,
    tool: ToolDefinition,
    confirmed: &[String],
    options: SaveOptions,
) -> Result<ToolDefinition> {
    let current = get(store, slug)?;
    if tool.slug != slug {
        return Err(invalid(
            slug,
            "slug",
            "cannot change; duplicate the tool to get a new slug",
        ));
    }
    if tool.tool_type != current.tool_type {
        return Err(invalid(
            slug,
            "type",
            format!(
                "is fixed after creation (it is `{}`); duplicate or create a tool to get a `{}` tool",
                current.tool_type.as_str(),
                tool.tool_type.as_str()
            ),
        ));
    }
    let mut confirmed = confirmed.to_vec();
    confirmed.extend(current.egress.unwrap_or_default());
    let tool = prepare(tool, executor, &confirmed, options)?;
    // Guarded by the type: a tool deleted and re-created meanwhile is not overwritten.
    let updated = store.update_tool(slug, tool.tool_type.as_str(), &canonical(&tool))?;
    if !updated {
        return Err(Error::ToolNotFound(slug.into()));
    }
    Ok(tool)
}

/// Copies a tool under a new slug (and name).
pub(crate) fn duplicate(
    store: &Store,
    executor: &Executor,
    slug: &str,
    new_slug: &str,
    new_name: Option<&str>,
    new_type: Option<ToolType>,
) -> Result<ToolDefinition> {
    let mut tool = get(store, slug)?;
    if let Some(new_type) = new_type.filter(|t| *t != tool.tool_type) {
        // Code carries over between code types (and is derived again); settings do not.
        if !(new_type.is_code() && tool.tool_type.is_code()) {
            return Err(invalid(
                new_slug,
                "type",
                format!(
                    "a `{}` tool cannot be duplicated as a `{}` tool: {}; create a new `{}` tool instead",
                    tool.tool_type.as_str(),
                    new_type.as_str(),
                    if tool.tool_type.is_code() {
                        "a retrieval tool is settings only, not code"
                    } else {
                        "a retrieval tool holds settings, not the code a code tool runs"
                    },
                    new_type.as_str()
                ),
            ));
        }
        tool.tool_type = new_type;
        tool.derived = None;
    }
    tool.slug = new_slug.into();
    tool.name = new_name.map_or_else(|| format!("{} (copy)", tool.name), String::from);
    // The copy may keep the origins the original was saved with.
    let confirmed = tool.egress.clone().unwrap_or_default();
    create_confirmed(store, executor, tool, &confirmed, SaveOptions::default())
}

/// The export file for some tools (pretty, deterministic, ending in a newline).
pub(crate) fn export(store: &Store, slugs: &[String]) -> Result<String> {
    let tools = slugs
        .iter()
        .map(|s| get(store, s))
        .collect::<Result<Vec<_>>>()?;
    let file = ToolFile {
        format: EXPORT_FORMAT.into(),
        version: EXPORT_VERSION,
        tools,
    };
    Ok(serde_json::to_string_pretty(&file).expect("serializes") + "\n")
}

/// Imports an export file: every tool is checked before any is written, and all are written
/// in one transaction. An existing slug is refused unless `replace` (which keeps types fixed;
/// a replaced tool keeps the egress origins it was saved with).
pub(crate) fn import(
    store: &Store,
    executor: &Executor,
    bytes: &[u8],
    path: &Path,
    replace: bool,
    options: SaveOptions,
) -> Result<Vec<ToolDefinition>> {
    let bad = |reason: String| Error::InvalidToolFile {
        path: path.to_path_buf(),
        reason,
    };
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    if raw.get("format").and_then(Value::as_str) != Some(EXPORT_FORMAT) {
        return Err(bad(format!(
            "not a Quarry tool export (`format` must be \"{EXPORT_FORMAT}\")"
        )));
    }
    match raw.get("version").and_then(Value::as_u64) {
        Some(v) if v == EXPORT_VERSION as u64 => {}
        Some(v) if v > EXPORT_VERSION as u64 => {
            return Err(bad(format!(
                "format version {v} was written by a newer Quarry; this one reads version {EXPORT_VERSION}"
            )))
        }
        other => return Err(bad(format!("unsupported format version {other:?}"))),
    }
    let file: ToolFile = serde_json::from_value(raw).map_err(|e| bad(e.to_string()))?;
    if file.tools.is_empty() {
        return Err(bad("it holds no tools".into()));
    }
    let mut prepared = Vec::new();
    for (i, tool) in file.tools.into_iter().enumerate() {
        if prepared
            .iter()
            .any(|t: &ToolDefinition| t.slug == tool.slug)
        {
            return Err(bad(format!("tools[{i}]: `{}` appears twice", tool.slug)));
        }
        let confirmed = match get(store, &tool.slug) {
            Ok(existing) if replace => existing.egress.unwrap_or_default(),
            _ => Vec::new(),
        };
        let tool = prepare(tool, executor, &confirmed, options)
            .map_err(|e| bad(format!("tools[{i}]: {e}")))?;
        prepared.push(tool);
    }
    let tx = store.write()?;
    for tool in &prepared {
        match crate::store::tool_type_of(&tx, &tool.slug)? {
            None => insert(&tx, tool, false)?,
            Some(_) if !replace => {
                return Err(bad(format!(
                    "tool `{}` already exists (import with --replace to overwrite it)",
                    tool.slug
                )))
            }
            Some(t) if t != tool.tool_type.as_str() => {
                return Err(invalid(
                    &tool.slug,
                    "type",
                    format!("is fixed after creation (the existing tool is `{t}`)"),
                ))
            }
            Some(_) => crate::store::replace_tool_definition(&tx, &tool.slug, &canonical(tool))?,
        }
    }
    tx.commit()?;
    Ok(prepared)
}
