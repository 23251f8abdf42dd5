//! The audit log: one row per tool test, pipeline run, key change and configuration change.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::{Error, Result};

/// One audit record.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
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

/// Which audit records to list: every filter that is set must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct AuditQuery {
    /// The principal's label, as listed.
    pub principal: Option<String>,
    /// `tool.test`, `pipeline.run`, `orchestrator.apply`, `key.create`, `key.revoke`, `auth`, …
    pub action: Option<String>,
    /// The tool slug, pipeline or key name.
    pub target: Option<String>,
    /// `ok`, or `error` for every failure whatever its code.
    pub outcome: Option<String>,
    /// The newest this many; 0 means 100.
    pub limit: u32,
}

impl AuditQuery {
    /// The newest `limit` records, unfiltered.
    pub fn newest(limit: u32) -> AuditQuery {
        AuditQuery {
            limit,
            ..AuditQuery::default()
        }
    }

    fn check(&self) -> Result<()> {
        match self.outcome.as_deref() {
            None | Some("ok") | Some("error") => Ok(()),
            Some(other) => Err(Error::InvalidSetting {
                field: "outcome".into(),
                reason: format!("`{other}` is neither `ok` nor `error`"),
            }),
        }
    }
}

/// The values the audit log holds, to filter by.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct AuditFacets {
    /// Principals' labels.
    pub principals: Vec<String>,
    /// Actions.
    pub actions: Vec<String>,
    /// Targets.
    pub targets: Vec<String>,
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

    /// The newest audit records `query` selects, newest first.
    pub(crate) fn audit_records(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        query.check()?;
        let limit = if query.limit == 0 { 100 } else { query.limit };
        let mut stmt = self.conn.prepare(
            "SELECT id, at_ms, principal, action, target, input_hash, outcome, detail, duration_ms
             FROM audit_log
             WHERE (?2 IS NULL OR principal = ?2) AND (?3 IS NULL OR action = ?3)
               AND (?4 IS NULL OR target = ?4)
               AND (?5 IS NULL OR (?5 = 'ok' AND outcome = 'ok')
                    OR (?5 = 'error' AND outcome LIKE 'error%'))
             ORDER BY id DESC LIMIT ?1",
        )?;
        let filters = params![
            limit,
            query.principal,
            query.action,
            query.target,
            query.outcome
        ];
        let rows = stmt.query_map(filters, |r| {
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

    /// Every principal, action and target the log holds, sorted.
    pub(crate) fn audit_facets(&self) -> Result<AuditFacets> {
        let distinct = |column: &str| -> Result<Vec<String>> {
            let mut stmt = self.conn.prepare(&format!(
                "SELECT DISTINCT {column} FROM audit_log ORDER BY {column}"
            ))?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        };
        Ok(AuditFacets {
            principals: distinct("principal")?,
            actions: distinct("action")?,
            targets: distinct("target")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn append(store: &Store, principal: &str, action: &str, target: &str, outcome: &str) {
        store
            .append_audit(&NewAuditRecord {
                at_ms: 1,
                principal,
                action,
                target,
                input_hash: "sha256:0",
                outcome,
                detail: None,
                duration_ms: 0,
            })
            .unwrap();
    }

    #[test]
    fn every_filter_that_is_set_must_match_newest_first() {
        let (_dir, store) = temp_store();
        append(&store, "administrator", "key.create", "alice", "ok");
        append(
            &store,
            "alice",
            "tool.test",
            "lex",
            "error: invalid_setting",
        );
        append(&store, "alice", "tool.test", "lex", "ok");
        append(&store, "unknown", "auth", "qk_1", "error: unauthorized");
        let ids = |query: AuditQuery| -> Vec<i64> {
            store
                .audit_records(&query)
                .unwrap()
                .iter()
                .map(|r| r.id)
                .collect()
        };
        assert_eq!(ids(AuditQuery::default()), [4, 3, 2, 1]);
        assert_eq!(ids(AuditQuery::newest(2)), [4, 3]);
        let alice_failures = AuditQuery {
            principal: Some("alice".into()),
            outcome: Some("error".into()),
            ..AuditQuery::default()
        };
        assert_eq!(ids(alice_failures), [2]);
        let tests_of_lex = AuditQuery {
            action: Some("tool.test".into()),
            target: Some("lex".into()),
            outcome: Some("ok".into()),
            ..AuditQuery::default()
        };
        assert_eq!(ids(tests_of_lex), [3]);
        let facets = store.audit_facets().unwrap();
        assert_eq!(facets.principals, ["administrator", "alice", "unknown"]);
        assert_eq!(facets.actions, ["auth", "key.create", "tool.test"]);
    }

    #[test]
    fn an_unknown_outcome_is_refused_by_name() {
        let (_dir, store) = temp_store();
        let query = AuditQuery {
            outcome: Some("maybe".into()),
            ..AuditQuery::default()
        };
        let err = store.audit_records(&query).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSetting { field, .. } if field == "outcome"),
            "{err}"
        );
    }
}
