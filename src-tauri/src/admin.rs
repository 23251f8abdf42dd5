//! Tauri commands of the administrator's views: API keys (create, list, revoke) and the audit
//! log. Thin over the library, like `commands`: every check runs in the engine.

use quarry_core::audit::{AuditFacets, AuditQuery, AuditRecord};
use quarry_core::auth::{ApiKey, CreatedKey, NewKey, SENSITIVITY_LEVELS};
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
