//! The audit log: one record per tool test run, pipeline run, orchestrator apply and key
//! change (who, what, a hash of the input, the outcome and how long it took). Inputs are
//! hashed, not stored, so the log never holds the documents or questions themselves.
//!
//! Anyone who can reach a server may present keys, so refused sign-ins are bounded: the same
//! refusal (source, key prefix, reason) within a minute is one record that counts up
//! (`record_refused_sign_in`), and the log keeps what its [`Retention`] says, pruned every
//! [`PRUNE_EVERY`] records and whenever the retention is set (issue 38).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::{NewAuditRecord, Store};

pub use crate::store::{AuditFacets, AuditLogSize, AuditQuery, AuditRecord};

/// The log is pruned to its retention each time this many records have been appended.
pub const PRUNE_EVERY: i64 = 1_000;

/// The `meta` key holding the retention.
const RETENTION_KEY: &str = "audit_retention";

/// How much of the audit log is kept; the older records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Retention {
    /// Records older than this many days go (`None`: kept whatever their age). Default 365.
    pub days: Option<u32>,
    /// At most this many records are kept, the newest (`None`: no limit). Default 500,000
    /// (about 150 MB).
    pub records: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            days: Some(365),
            records: Some(500_000),
        }
    }
}

impl Retention {
    /// Refuses a retention that would keep (almost) nothing.
    fn check(&self) -> Result<()> {
        if self.days == Some(0) {
            return Err(Error::InvalidSetting {
                field: "days".into(),
                reason: "keep the audit log at least one day".into(),
            });
        }
        if self.records.is_some_and(|n| n < 100) {
            return Err(Error::InvalidSetting {
                field: "records".into(),
                reason: "keep at least 100 audit records".into(),
            });
        }
        Ok(())
    }
}

/// The audit log's size and what it keeps, for Status.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct AuditSummary {
    /// Rows, what they stand for, their age and bytes.
    #[serde(flatten)]
    pub size: AuditLogSize,
    /// What is kept.
    pub retention: Retention,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The hash recorded for an input.
pub fn input_hash(input: &serde_json::Value) -> String {
    format!(
        "sha256:{:x}",
        Sha256::digest(serde_json::to_vec(input).expect("json").as_slice())
    )
}

/// Appends a record; returns its id.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record(
    store: &Store,
    principal: &str,
    action: &str,
    target: &str,
    input: &serde_json::Value,
    outcome: std::result::Result<(), &crate::Error>,
    detail: Option<&str>,
    duration_ms: i64,
) -> Result<i64> {
    let (outcome, detail) = outcome_and_detail(outcome, detail);
    let id = store.append_audit(&NewAuditRecord {
        at_ms: now_ms(),
        principal,
        action,
        target,
        input_hash: &input_hash(input),
        outcome: &outcome,
        detail: detail.as_deref(),
        duration_ms,
    })?;
    if id % PRUNE_EVERY == 0 {
        prune(store)?;
    }
    Ok(id)
}

/// The time window within which the same refusal counts up one record.
const REFUSAL_WINDOW_MS: i64 = 60_000;

/// Records a refused sign-in (action `auth`, principal `unknown`) by `source` (who presented
/// the key: `127.0.0.1 over MCP HTTP`; `None`: this machine's own process) with `target` (the
/// key's public prefix): the same refusal from the same source within a minute counts up the
/// record already written instead of adding one.
pub(crate) fn record_refused_sign_in(
    store: &Store,
    source: Option<&str>,
    target: &str,
    input: &serde_json::Value,
    error: &crate::Error,
    duration_ms: i64,
) -> Result<()> {
    let context = source.map(|s| format!("from {s}"));
    let (outcome, detail) = outcome_and_detail(Err(error), context.as_deref());
    let at_ms = now_ms();
    let record = NewAuditRecord {
        at_ms,
        principal: "unknown",
        action: "auth",
        target,
        input_hash: &input_hash(input),
        outcome: &outcome,
        detail: detail.as_deref(),
        duration_ms,
    };
    if store.count_again_in_audit(&record, at_ms - REFUSAL_WINDOW_MS)? {
        return Ok(());
    }
    if store.append_audit(&record)? % PRUNE_EVERY == 0 {
        prune(store)?;
    }
    Ok(())
}

/// An outcome as stored, and the detail bounded.
fn outcome_and_detail(
    outcome: std::result::Result<(), &crate::Error>,
    detail: Option<&str>,
) -> (String, Option<String>) {
    let (outcome, detail) = match outcome {
        Ok(()) => ("ok".to_string(), detail.map(String::from)),
        // The error, after what the caller knew of the context (a client, a pipeline).
        Err(e) => (
            format!("error: {}", e.code()),
            Some(match detail {
                Some(context) => format!("{context}: {e}"),
                None => e.to_string(),
            }),
        ),
    };
    (outcome, detail.map(bounded))
}

/// The most of a detail kept in the log: a tool's garbled output can be tens of megabytes.
const MAX_DETAIL_CHARS: usize = 2_000;

/// A detail as stored: whole when short, else its start and the whole text's length and hash.
fn bounded(detail: String) -> String {
    let count = detail.chars().count();
    if count <= MAX_DETAIL_CHARS {
        return detail;
    }
    let start: String = detail.chars().take(MAX_DETAIL_CHARS).collect();
    format!(
        "{start} …[cut: {count} characters in all, sha256:{:x}]",
        Sha256::digest(detail.as_bytes())
    )
}

/// The records `query` selects, newest first.
pub(crate) fn query(store: &Store, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
    store.audit_records(query)
}

/// One record by id (`None`: pruned, or never written).
pub(crate) fn record_by_id(store: &Store, id: i64) -> Result<Option<AuditRecord>> {
    store.audit_record(id)
}

/// The principals, actions and targets on record, to filter by.
pub(crate) fn facets(store: &Store) -> Result<AuditFacets> {
    store.audit_facets()
}

/// What the audit log keeps.
pub(crate) fn retention(store: &Store) -> Result<Retention> {
    Ok(store
        .meta(RETENTION_KEY)?
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default())
}

/// Sets what the audit log keeps and prunes it to that now; returns how many records went.
pub(crate) fn set_retention(store: &Store, retention: &Retention) -> Result<u64> {
    retention.check()?;
    store.set_meta(
        RETENTION_KEY,
        &serde_json::to_string(retention).expect("retention serializes"),
    )?;
    prune(store)
}

/// Deletes what the retention no longer keeps; returns how many records went.
pub(crate) fn prune(store: &Store) -> Result<u64> {
    let retention = retention(store)?;
    let before_ms = retention
        .days
        .map(|days| now_ms() - i64::from(days) * 86_400_000);
    store.prune_audit(before_ms, retention.records)
}

/// The audit log's size and retention.
pub(crate) fn summary(store: &Store) -> Result<AuditSummary> {
    Ok(AuditSummary {
        size: store.audit_log_size()?,
        retention: retention(store)?,
    })
}
