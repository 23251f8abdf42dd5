//! Pipelines and their saved versions.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{now_unix, Store};
use crate::error::Result;

/// The newest saved version of a pipeline.
#[derive(Debug, Clone)]
pub(crate) struct LatestPipelineVersion {
    /// The pipeline's id.
    pub pipeline_id: i64,
    /// The version number.
    pub version: i64,
    /// The saved version, as JSON.
    pub definition: String,
}

impl Store {
    /// Every pipeline's name, sorted.
    pub(crate) fn pipeline_names(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM pipelines ORDER BY name")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The id and draft JSON of the pipeline `name`, if there is one.
    pub(crate) fn pipeline_draft(&self, name: &str) -> Result<Option<(i64, String)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, draft FROM pipelines WHERE name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// The JSON of a pipeline's newest saved version, if it has one.
    pub(crate) fn latest_pipeline_version(&self, pipeline_id: i64) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT definition FROM pipeline_versions WHERE pipeline_id = ?1
                 ORDER BY version DESC LIMIT 1",
                [pipeline_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Every saved version number of a pipeline, ascending.
    pub(crate) fn pipeline_version_numbers(&self, pipeline_id: i64) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare(
            "SELECT version FROM pipeline_versions WHERE pipeline_id = ?1 ORDER BY version",
        )?;
        let rows = stmt.query_map([pipeline_id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Inserts a pipeline with its draft JSON; `false` when the name is taken.
    pub(crate) fn create_pipeline(&self, name: &str, draft: &str) -> Result<bool> {
        let inserted = self.conn.execute(
            "INSERT INTO pipelines(name, draft, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT(name) DO NOTHING",
            params![name, draft, now_unix()],
        )?;
        Ok(inserted > 0)
    }

    /// Replaces the draft JSON of the pipeline `name`.
    pub(crate) fn set_pipeline_draft(&self, name: &str, draft: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE pipelines SET draft = ?2, updated_at = ?3 WHERE name = ?1",
            params![name, draft, now_unix()],
        )?;
        Ok(())
    }

    /// Deletes the pipeline `name` with its versions.
    pub(crate) fn delete_pipeline(&self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM pipelines WHERE name = ?1", [name])?;
        Ok(())
    }
}

/// Inserts a pipeline with its draft JSON in the caller's transaction; returns its id.
pub(crate) fn insert_pipeline(tx: &Transaction<'_>, name: &str, draft: &str) -> Result<i64> {
    tx.execute(
        "INSERT INTO pipelines(name, draft, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)",
        params![name, draft, now_unix()],
    )?;
    Ok(tx.last_insert_rowid())
}

/// Inserts a saved version of a pipeline in the caller's transaction.
pub(crate) fn insert_pipeline_version(
    tx: &Transaction<'_>,
    pipeline_id: i64,
    version: i64,
    definition: &str,
    saved_by: &str,
    saved_at: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO pipeline_versions(pipeline_id, version, definition, saved_by, saved_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![pipeline_id, version, definition, saved_by, saved_at],
    )?;
    Ok(())
}

/// The number the next saved version of a pipeline gets (1 for the first), in the caller's
/// transaction.
pub(crate) fn next_pipeline_version(tx: &Transaction<'_>, pipeline_id: i64) -> Result<i64> {
    Ok(tx.query_row(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM pipeline_versions WHERE pipeline_id = ?1",
        [pipeline_id],
        |r| r.get(0),
    )?)
}

/// The newest saved version of every pipeline that has one, in the caller's transaction.
pub(crate) fn latest_pipeline_versions(tx: &Transaction<'_>) -> Result<Vec<LatestPipelineVersion>> {
    let mut stmt = tx.prepare(
        "SELECT v.pipeline_id, v.version, v.definition FROM pipeline_versions v
         WHERE v.version = (SELECT MAX(version) FROM pipeline_versions w
                            WHERE w.pipeline_id = v.pipeline_id)",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(LatestPipelineVersion {
            pipeline_id: r.get(0)?,
            version: r.get(1)?,
            definition: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
