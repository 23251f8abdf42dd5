//! Orchestrator configurations and their revisions.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::Store;
use crate::error::Result;

/// An applied revision as stored: its definition and snapshot still as JSON text.
#[derive(Debug, Clone)]
pub(crate) struct RevisionRow {
    pub revision: i64,
    pub definition: String,
    pub snapshot: String,
    pub applied_by: String,
    pub applied_at: i64,
}

/// A revision in a listing, its definition still as JSON text.
#[derive(Debug, Clone)]
pub(crate) struct RevisionListRow {
    pub revision: i64,
    pub applied_by: String,
    pub applied_at: i64,
    pub definition: String,
}

impl Store {
    /// Every configuration's name, sorted.
    pub(crate) fn orchestrator_config_names(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM orchestrator_configs ORDER BY name")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether a configuration named `name` exists.
    pub(crate) fn orchestrator_config_exists(&self, name: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM orchestrator_configs WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )?)
    }

    /// Inserts a configuration with this draft unless one of that name exists; true when it
    /// was inserted.
    pub(crate) fn insert_orchestrator_config_if_absent(
        &self,
        name: &str,
        draft: &str,
        now: i64,
    ) -> Result<bool> {
        let inserted = self.conn.execute(
            "INSERT OR IGNORE INTO orchestrator_configs(name, draft, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?3)",
            params![name, draft, now],
        )?;
        Ok(inserted == 1)
    }

    /// A configuration's id and draft (JSON text), if it exists.
    pub(crate) fn orchestrator_config(&self, name: &str) -> Result<Option<(i64, String)>> {
        orchestrator_config_in(&self.conn, name)
    }

    /// Replaces (or creates) a configuration's draft (JSON text).
    pub(crate) fn upsert_orchestrator_draft(
        &self,
        name: &str,
        draft: &str,
        now: i64,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO orchestrator_configs(name, draft, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT(name) DO UPDATE SET draft = excluded.draft, updated_at = excluded.updated_at",
            params![name, draft, now],
        )?;
        Ok(())
    }

    /// Revision `revision` of a configuration (`None`: its newest), if it exists.
    pub(crate) fn orchestrator_revision(
        &self,
        config_id: i64,
        revision: Option<i64>,
    ) -> Result<Option<RevisionRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT revision, definition, snapshot, applied_by, applied_at FROM orchestrator_revisions
                 WHERE config_id = ?1 AND (?2 IS NULL OR revision = ?2)
                 ORDER BY revision DESC LIMIT 1",
                params![config_id, revision],
                |r| {
                    Ok(RevisionRow {
                        revision: r.get(0)?,
                        definition: r.get(1)?,
                        snapshot: r.get(2)?,
                        applied_by: r.get(3)?,
                        applied_at: r.get(4)?,
                    })
                },
            )
            .optional()?)
    }

    /// Every revision of a configuration, newest first.
    pub(crate) fn orchestrator_revisions(&self, config_id: i64) -> Result<Vec<RevisionListRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT revision, applied_by, applied_at, definition FROM orchestrator_revisions
             WHERE config_id = ?1 ORDER BY revision DESC",
        )?;
        let rows = stmt.query_map([config_id], |r| {
            Ok(RevisionListRow {
                revision: r.get(0)?,
                applied_by: r.get(1)?,
                applied_at: r.get(2)?,
                definition: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// A configuration's id and draft (JSON text), if it exists, read on `conn` (the caller's
/// transaction when applying).
pub(crate) fn orchestrator_config_in(
    conn: &Connection,
    name: &str,
) -> Result<Option<(i64, String)>> {
    Ok(conn
        .query_row(
            "SELECT id, draft FROM orchestrator_configs WHERE name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// The number the next revision of a configuration gets (1 for its first).
pub(crate) fn next_orchestrator_revision(tx: &Transaction<'_>, config_id: i64) -> Result<i64> {
    Ok(tx.query_row(
        "SELECT COALESCE(MAX(revision), 0) + 1 FROM orchestrator_revisions WHERE config_id = ?1",
        [config_id],
        |r| r.get(0),
    )?)
}

/// Inserts an applied revision (definition and snapshot as JSON text), in the caller's
/// transaction.
pub(crate) fn insert_orchestrator_revision(
    tx: &Transaction<'_>,
    config_id: i64,
    revision: i64,
    definition: &str,
    snapshot: &str,
    applied_by: &str,
    applied_at: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO orchestrator_revisions(config_id, revision, definition, snapshot, applied_by, applied_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![config_id, revision, definition, snapshot, applied_by, applied_at],
    )?;
    Ok(())
}
