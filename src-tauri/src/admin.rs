//! Tauri commands of the administrator's views: API keys (create, list, revoke), the audit
//! log, and orchestrator configurations (draft, changes, apply, revisions). Thin over the
//! library, like `commands`: every check runs in the engine.

use quarry_core::audit::{AuditFacets, AuditQuery, AuditRecord};
use quarry_core::auth::{ApiKey, CreatedKey, NewKey, SENSITIVITY_LEVELS};
use quarry_core::orchestrator::{
    self, AppliedRevision, ConfigChange, OrchestratorConfig, RevisionSummary, DEFAULT_CONFIG,
};
use quarry_core::{Library, Principal};
use serde::Serialize;

use crate::commands::{blocking, EngineState};
use crate::error::CommandResult;

/// What the Keys view shows, and the choices its form offers.
#[derive(Serialize, specta::Type)]
pub struct KeysOverview {
    /// Every key, revoked ones included (never a secret).
    keys: Vec<ApiKey>,
    /// Collection names a key may be limited to.
    collections: Vec<String>,
    /// Sensitivity labels, lowest first: a key's ceiling is one of them.
    sensitivity_levels: Vec<String>,
}

#[tauri::command]
#[specta::specta]
pub async fn list_keys(engine: EngineState<'_>) -> CommandResult<KeysOverview> {
    blocking(&engine, |engine| {
        let library = engine.library();
        Ok(KeysOverview {
            keys: library.keys()?,
            collections: library.collections()?.into_iter().map(|c| c.name).collect(),
            sensitivity_levels: SENSITIVITY_LEVELS.iter().map(|l| l.to_string()).collect(),
        })
    })
    .await
}

/// Creates a key; its secret is in the answer and nowhere else.
#[tauri::command]
#[specta::specta]
pub async fn create_key(engine: EngineState<'_>, key: NewKey) -> CommandResult<CreatedKey> {
    blocking(&engine, move |engine| {
        Ok(engine.library().create_key(&key)?)
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn revoke_key(engine: EngineState<'_>, name: String) -> CommandResult<ApiKey> {
    blocking(&engine, move |engine| {
        Ok(engine.library().revoke_key(&name)?)
    })
    .await
}

/// The audit records `query` selects, newest first, and the values there are to filter by.
#[derive(Serialize, specta::Type)]
pub struct AuditPage {
    records: Vec<AuditRecord>,
    facets: AuditFacets,
}

#[tauri::command]
#[specta::specta]
pub async fn list_audit(engine: EngineState<'_>, query: AuditQuery) -> CommandResult<AuditPage> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        Ok(AuditPage {
            records: library.audit(&query)?,
            facets: library.audit_facets()?,
        })
    })
    .await
}

/// The applied revision as the Orchestrator view shows it.
#[derive(Serialize, specta::Type)]
pub struct AppliedView {
    revision: i64,
    applied_by: String,
    /// Unix seconds.
    applied_at: i64,
    /// Its configuration, as pretty JSON.
    config: String,
}

/// One orchestrator configuration: its draft beside the newest applied revision, what the
/// draft changes, what stops it from being applied, and every revision.
#[derive(Serialize, specta::Type)]
pub struct OrchestratorView {
    /// Every configuration's name.
    names: Vec<String>,
    /// This configuration's.
    name: String,
    /// The draft, as pretty JSON: what the editor holds.
    draft: String,
    /// Problems that stop the draft from being applied.
    problems: Vec<String>,
    /// The newest applied revision, if any.
    applied: Option<AppliedView>,
    /// What the draft changes against it, field by field.
    changes: Vec<ConfigChange>,
    /// Every applied revision, newest first.
    revisions: Vec<RevisionSummary>,
}

fn applied_view(applied: AppliedRevision) -> AppliedView {
    AppliedView {
        revision: applied.revision,
        applied_by: applied.applied_by,
        applied_at: applied.applied_at,
        config: applied.config.to_json(),
    }
}

fn orchestrator_view_of(library: &Library, name: &str) -> quarry_core::Result<OrchestratorView> {
    let draft = library.orchestrator_draft(name)?;
    let applied = library.orchestrator_revision(name, None).ok();
    Ok(OrchestratorView {
        names: library.orchestrator_configs()?,
        name: name.to_string(),
        draft: draft.to_json(),
        problems: library.orchestrator_problems(&draft),
        changes: applied
            .as_ref()
            .map(|a| orchestrator::diff(&a.config, &draft))
            .unwrap_or_default(),
        applied: applied.map(applied_view),
        revisions: library.orchestrator_revisions(name)?,
    })
}

/// A configuration (default: the seeded one).
#[tauri::command]
#[specta::specta]
pub async fn orchestrator_view(
    engine: EngineState<'_>,
    name: Option<String>,
) -> CommandResult<OrchestratorView> {
    blocking(&engine, move |engine| {
        let name = name.unwrap_or_else(|| DEFAULT_CONFIG.to_string());
        Ok(orchestrator_view_of(&engine.library(), &name)?)
    })
    .await
}

/// Replaces a draft with `json` (parsed and checked by the engine, which names the field at
/// fault); it takes effect only when applied.
#[tauri::command]
#[specta::specta]
pub async fn save_orchestrator_draft(
    engine: EngineState<'_>,
    name: String,
    json: String,
) -> CommandResult<OrchestratorView> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        library.set_orchestrator_draft(&name, &OrchestratorConfig::parse(&json)?)?;
        Ok(orchestrator_view_of(&library, &name)?)
    })
    .await
}

/// Applies a draft as a new revision, as the local administrator (audited).
#[tauri::command]
#[specta::specta]
pub async fn apply_orchestrator(
    engine: EngineState<'_>,
    name: String,
) -> CommandResult<OrchestratorView> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        library.apply_orchestrator(&name, &Principal::administrator())?;
        Ok(orchestrator_view_of(&library, &name)?)
    })
    .await
}

/// An earlier applied revision.
#[tauri::command]
#[specta::specta]
pub async fn orchestrator_revision(
    engine: EngineState<'_>,
    name: String,
    revision: i64,
) -> CommandResult<AppliedView> {
    blocking(&engine, move |engine| {
        let applied = engine
            .library()
            .orchestrator_revision(&name, Some(revision))?;
        Ok(applied_view(applied))
    })
    .await
}

/// How an MCP client (another assistant or editor) starts `quarry mcp` on this library: the
/// program, its data directory, and the modes whose tools it may be offered. The window builds
/// the client configuration from these and a key it creates.
#[derive(Serialize, specta::Type)]
pub struct McpSetup {
    /// The `quarry` binary beside this app, or `quarry` on the PATH.
    program: String,
    /// This library's data directory.
    data_dir: String,
    /// The modes of the default configuration's newest revision, with their tools.
    modes: Vec<McpMode>,
    /// The mode to suggest: `agent` when there is one.
    default_mode: String,
    /// Collection names a key for the client may be limited to.
    collections: Vec<String>,
}

/// A mode as an MCP client would see it.
#[derive(Serialize, specta::Type)]
pub struct McpMode {
    name: String,
    description: String,
    /// The tools the mode offers (before a key's scope and the gates).
    tools: Vec<String>,
}

#[tauri::command]
#[specta::specta]
pub async fn mcp_setup(engine: EngineState<'_>) -> CommandResult<McpSetup> {
    blocking(&engine, |engine| {
        let library = engine.library();
        let applied = library.orchestrator_revision(DEFAULT_CONFIG, None)?;
        let modes: Vec<McpMode> = applied
            .config
            .modes
            .iter()
            .map(|mode| McpMode {
                name: mode.name.clone(),
                description: mode.description.clone(),
                tools: mode
                    .pipeline
                    .as_ref()
                    .map(|_| orchestrator::RUN_PIPELINE.to_string())
                    .into_iter()
                    .chain(mode.knowledge_search.as_ref().map(|k| k.tool_name.clone()))
                    .chain(mode.direct_tools.iter().cloned())
                    .collect(),
            })
            .collect();
        let default_mode = modes
            .iter()
            .find(|m| m.name == "agent")
            .or(modes.first())
            .map(|m| m.name.clone())
            .unwrap_or_default();
        Ok(McpSetup {
            program: quarry_program(),
            data_dir: library.data_dir().display().to_string(),
            modes,
            default_mode,
            collections: library.collections()?.into_iter().map(|c| c.name).collect(),
        })
    })
    .await
}

/// The CLI installed beside the app (both come from one build), else the one on the PATH.
fn quarry_program() -> String {
    let name = if cfg!(windows) {
        "quarry.exe"
    } else {
        "quarry"
    };
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(name))
        .filter(|path| path.is_file())
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| name.to_string())
}
