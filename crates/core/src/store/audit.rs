//! The audit log: one row per tool test, pipeline run, key change and configuration change;
//! refused sign-ins repeated within a minute share one row and count up.

use rusqlite::{params, OptionalExtension};
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
    /// How many times it happened: a refused sign-in repeated from one source with one key
    /// prefix within a minute is one record that counts up (1 for everything else).
    pub count: i64,
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

/// How big the audit log is.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct AuditLogSize {
    /// Rows.
    pub records: u64,
    /// What the rows stand for, counts included.
    pub events: u64,
    /// The oldest row's time (Unix milliseconds), when there is one.
    pub oldest_at_ms: Option<i64>,
    /// About how many bytes the rows' text takes (before SQLite's own overhead).
    pub approx_bytes: u64,
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
    /// Appends a record to the audit log; returns its id.
    pub(crate) fn append_audit(&self, record: &NewAuditRecord<'_>) -> Result<i64> {
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
        Ok(self.conn.last_insert_rowid())
    }

    /// Counts one more of the newest record with this action, target, outcome and detail
    /// written at or after `since_ms`; `false` when there is none (append one then).
    pub(crate) fn count_again_in_audit(
        &self,
        record: &NewAuditRecord<'_>,
        since_ms: i64,
    ) -> Result<bool> {
        let changed = self.conn.execute(
            "UPDATE audit_log SET count = count + 1 WHERE id = (
                 SELECT id FROM audit_log
                 WHERE action = ?1 AND target = ?2 AND at_ms >= ?3 AND outcome = ?4
                   AND detail IS ?5
                 ORDER BY id DESC LIMIT 1)",
            params![
                record.action,
                record.target,
                since_ms,
                record.outcome,
                record.detail
            ],
        )?;
        Ok(changed > 0)
    }

    /// Deletes the records older than `before_ms` and all but the newest `keep` rows; returns
    /// how many went.
    pub(crate) fn prune_audit(&self, before_ms: Option<i64>, keep: Option<u64>) -> Result<u64> {
        let mut deleted = 0;
        if let Some(before_ms) = before_ms {
            deleted += self
                .conn
                .execute("DELETE FROM audit_log WHERE at_ms < ?1", [before_ms])?;
        }
        if let Some(keep) = keep {
            deleted += self.conn.execute(
                "DELETE FROM audit_log WHERE id <= (
                     SELECT id FROM audit_log ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                [i64::try_from(keep).unwrap_or(i64::MAX)],
            )?;
        }
        Ok(deleted as u64)
    }

    /// The audit log's size.
    pub(crate) fn audit_log_size(&self) -> Result<AuditLogSize> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(count), 0), MIN(at_ms),
                    COALESCE(SUM(length(principal) + length(action) + length(target)
                        + length(input_hash) + length(outcome) + COALESCE(length(detail), 0)
                        + 32), 0)
             FROM audit_log",
            [],
            |r| {
                Ok(AuditLogSize {
                    records: r.get::<_, i64>(0)? as u64,
                    events: r.get::<_, i64>(1)? as u64,
                    oldest_at_ms: r.get(2)?,
                    approx_bytes: r.get::<_, i64>(3)? as u64,
                })
            },
        )?)
    }

    /// The newest audit records `query` selects, newest first.
    pub(crate) fn audit_records(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        query.check()?;
        let limit = if query.limit == 0 { 100 } else { query.limit };
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log
             WHERE (?2 IS NULL OR principal = ?2) AND (?3 IS NULL OR action = ?3)
               AND (?4 IS NULL OR target = ?4)
               AND (?5 IS NULL OR (?5 = 'ok' AND outcome = 'ok')
                    OR (?5 = 'error' AND outcome LIKE 'error%'))
             ORDER BY id DESC LIMIT ?1"
        ))?;
        let filters = params![
            limit,
            query.principal,
            query.action,
            query.target,
            query.outcome
        ];
        let rows = stmt.query_map(filters, audit_record_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One audit record by id (`None`: pruned, or never written).
    pub(crate) fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE id = ?1"),
                [id],
                audit_record_from_row,
            )
            .optional()?)
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

/// The columns [`audit_record_from_row`] reads, in its order.
const AUDIT_COLUMNS: &str =
    "id, at_ms, principal, action, target, input_hash, outcome, detail, duration_ms, count";

fn audit_record_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRecord> {
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
        count: r.get(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn append(store: &Store, principal: &str, action: &str, target: &str, outcome: &str) {
        append_at(store, 1, principal, action, target, outcome);
    }

    fn append_at(
        store: &Store,
        at_ms: i64,
        principal: &str,
        action: &str,
        target: &str,
        outcome: &str,
    ) {
        store
            .append_audit(&NewAuditRecord {
                at_ms,
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

    #[test]
    fn a_repeat_within_the_window_counts_up_and_pruning_keeps_the_newest() {
        let (_dir, store) = temp_store();
        let refused = |at_ms| NewAuditRecord {
            at_ms,
            principal: "unknown",
            action: "auth",
            target: "qk_1",
            input_hash: "sha256:0",
            outcome: "error: unauthorized",
            detail: Some("from 127.0.0.1: unknown API key"),
            duration_ms: 0,
        };
        assert!(!store.count_again_in_audit(&refused(10), 0).unwrap());
        store.append_audit(&refused(10)).unwrap();
        assert!(store.count_again_in_audit(&refused(20), 5).unwrap());
        assert!(store.count_again_in_audit(&refused(30), 10).unwrap());
        // Outside the window, or another source: a row of its own.
        assert!(!store.count_again_in_audit(&refused(90), 11).unwrap());
        let other = NewAuditRecord {
            detail: Some("from 127.0.0.2: unknown API key"),
            ..refused(40)
        };
        assert!(!store.count_again_in_audit(&other, 0).unwrap());
        let records = store.audit_records(&AuditQuery::default()).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].count, 3);
        let size = store.audit_log_size().unwrap();
        assert_eq!((size.records, size.events), (1, 3));

        for at_ms in 100..110 {
            append_at(&store, at_ms, "alice", "tool.test", "lex", "ok");
        }
        assert_eq!(store.prune_audit(Some(100), None).unwrap(), 1);
        assert_eq!(store.prune_audit(None, Some(4)).unwrap(), 6);
        let left: Vec<i64> = store
            .audit_records(&AuditQuery::default())
            .unwrap()
            .iter()
            .map(|r| r.at_ms)
            .collect();
        assert_eq!(left, [109, 108, 107, 106]);
        assert_eq!(store.audit_log_size().unwrap().oldest_at_ms, Some(106));
    }
}
