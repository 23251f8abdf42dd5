//! The audit log: one record per tool test run, pipeline run, orchestrator apply and key
//! change (who, what, a hash of the input, the outcome and how long it took). Inputs are
//! hashed, not stored, so the log never holds the documents or questions themselves.

use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::store::{NewAuditRecord, Store};

pub use crate::store::{AuditFacets, AuditQuery, AuditRecord};

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
        // The error, after what the caller knew of the context (a client, a pipeline).
        Err(e) => (
            format!("error: {}", e.code()),
            Some(match detail {
                Some(context) => format!("{context}: {e}"),
                None => e.to_string(),
            }),
        ),
    };
    let detail = detail.map(bounded);
    store.append_audit(&NewAuditRecord {
        at_ms,
        principal,
        action,
        target,
        input_hash: &input_hash(input),
        outcome: &outcome,
        detail: detail.as_deref(),
        duration_ms,
    })
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
pub fn query(store: &Store, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
    store.audit_records(query)
}

/// The principals, actions and targets on record, to filter by.
pub fn facets(store: &Store) -> Result<AuditFacets> {
    store.audit_facets()
}
