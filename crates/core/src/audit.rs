//! The audit log: one record per tool test run and pipeline run (who, what, a hash of the
//! input, the outcome and how long it took). Inputs are hashed, not stored, so the log never
//! holds the documents or questions themselves.

use rusqlite::params;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::store::Store;

/// One audit record.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// Row id, increasing.
    pub id: i64,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// The principal's label.
    pub principal: String,
    /// `tool.test` or `pipeline.run`.
    pub action: String,
    /// The tool slug or pipeline name.
    pub target: String,
    /// `sha256:` of the input as canonical JSON.
    pub input_hash: String,
    /// `ok`, or `error: <code>`.
    pub outcome: String,
    /// More about the outcome (the error message, the pipeline context).
    pub detail: Option<String>,
    /// Duration.
    pub duration_ms: i64,
}

/// The hash recorded for an input.
pub fn input_hash(input: &serde_json::Value) -> String {
    format!(
        "sha256:{:x}",
        Sha256::digest(serde_json::to_vec(input).expect("json").as_slice())
    )
}

/// Appends a record.
#[allow(clippy::too_many_arguments)]
pub fn record(
    store: &Store,
    principal: &str,
    action: &str,
    target: &str,
    input: &serde_json::Value,
    outcome: std::result::Result<(), &crate::Error>,
    detail: Option<&str>,
    duration_ms: i64,
) -> Result<()> {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let (outcome, detail) = match outcome {
        Ok(()) => ("ok".to_string(), detail.map(String::from)),
        Err(e) => (format!("error: {}", e.code()), Some(e.to_string())),
    };
    store.conn().execute(
        "INSERT INTO audit_log(at_ms, principal, action, target, input_hash, outcome, detail, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![at_ms, principal, action, target, input_hash(input), outcome, detail, duration_ms],
    )?;
    Ok(())
}

/// The newest records first.
pub fn recent(store: &Store, limit: usize) -> Result<Vec<AuditRecord>> {
    let mut stmt = store.conn().prepare(
        "SELECT id, at_ms, principal, action, target, input_hash, outcome, detail, duration_ms
         FROM audit_log ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit as i64], |r| {
        Ok(AuditRecord {
            id: r.get(0)?,
            at_ms: r.get(1)?,
            principal: r.get(2)?,
            action: r.get(3)?,
            target: r.get(4)?,
            input_hash: r.get(5)?,
            outcome: r.get(6)?,
            detail: r.get(7)?,
            duration_ms: r.get(8)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
