//! The audit log: one row per tool test, pipeline run, key change and configuration change.

use rusqlite::params;
use serde::Serialize;

use super::Store;
use crate::error::Result;

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

/// An audit record about to be appended.
#[derive(Debug, Clone)]
pub(crate) struct NewAuditRecord<'a> {
    pub at_ms: i64,
    pub principal: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub input_hash: &'a str,
    pub outcome: &'a str,
    pub detail: Option<&'a str>,
    pub duration_ms: i64,
}

impl Store {
    /// Appends a record to the audit log.
    pub(crate) fn append_audit(&self, record: &NewAuditRecord<'_>) -> Result<()> {
        self.conn.execute(
            "INSERT INTO audit_log(at_ms, principal, action, target, input_hash, outcome, detail, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                record.at_ms,
                record.principal,
                record.action,
                record.target,
                record.input_hash,
                record.outcome,
                record.detail,
                record.duration_ms
            ],
        )?;
        Ok(())
    }

    /// The newest `limit` audit records, newest first.
    pub(crate) fn recent_audit(&self, limit: usize) -> Result<Vec<AuditRecord>> {
        let mut stmt = self.conn.prepare(
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
}
