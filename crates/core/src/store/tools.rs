//! Tool definitions, seeded and user-made.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::{now_unix, Store};
use crate::error::Result;

/// A stored tool, as a listing reads it.
#[derive(Debug, Clone)]
pub(crate) struct ToolRow {
    /// The definition, as saved (canonical JSON).
    pub definition: String,
    /// Installed by seeding.
    pub seeded: bool,
    /// Unix seconds.
    pub updated_at: i64,
    /// The newest saved version (1 when created).
    pub version: i64,
}

/// One saved definition of a tool.
#[derive(Debug, Clone)]
pub(crate) struct ToolVersionRow {
    /// 1, 2, …
    pub version: i64,
    /// The definition JSON as saved.
    pub definition: String,
    /// Unix seconds.
    pub saved_at: i64,
}

impl Store {
    /// Every stored tool, by type, then slug.
    pub(crate) fn tool_rows(&self) -> Result<Vec<ToolRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT definition, seeded, updated_at,
                        (SELECT COALESCE(MAX(version), 1) FROM tool_versions WHERE tool_id = id)
                 FROM tools ORDER BY tool_type, slug",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(ToolRow {
                definition: r.get(0)?,
                seeded: r.get(1)?,
                updated_at: r.get(2)?,
                version: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every saved version of the tool `slug`, newest first (empty when there is no such tool).
    pub(crate) fn tool_versions(&self, slug: &str) -> Result<Vec<ToolVersionRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT v.version, v.definition, v.saved_at FROM tool_versions v
             JOIN tools t ON t.id = v.tool_id WHERE t.slug = ?1 ORDER BY v.version DESC",
        )?;
        let rows = stmt.query_map([slug], |r| {
            Ok(ToolVersionRow {
                version: r.get(0)?,
                definition: r.get(1)?,
                saved_at: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The definition JSON of the tool `slug`, if there is one.
    pub(crate) fn tool_definition(&self, slug: &str) -> Result<Option<String>> {
        tool_definition(&self.conn, slug)
    }

    /// Replaces the definition of the tool `slug` if it still has `tool_type`; `false` when no
    /// such tool exists.
    pub(crate) fn update_tool(
        &self,
        slug: &str,
        tool_type: &str,
        definition: &str,
    ) -> Result<bool> {
        let tx = self.conn.unchecked_transaction()?;
        // Guarded by the type: a tool deleted and re-created meanwhile is not overwritten.
        let updated = tx.execute(
            "UPDATE tools SET definition = ?2, updated_at = ?3 WHERE slug = ?1 AND tool_type = ?4",
            params![slug, definition, now_unix(), tool_type],
        )?;
        if updated == 0 {
            return Ok(false);
        }
        add_tool_version(&tx, slug, definition)?;
        tx.commit()?;
        Ok(true)
    }
}

/// The definition JSON of the tool `slug`, if there is one (on `conn`, which may be the
/// caller's transaction).
pub(crate) fn tool_definition(conn: &Connection, slug: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT definition FROM tools WHERE slug = ?1",
            [slug],
            |r| r.get(0),
        )
        .optional()?)
}

/// Inserts a tool (on `conn`, which may be the caller's transaction); `false` when the slug is
/// taken.
pub(crate) fn insert_tool(
    conn: &Connection,
    slug: &str,
    tool_type: &str,
    definition: &str,
    seeded: bool,
) -> Result<bool> {
    let now = now_unix();
    let inserted = conn.execute(
        "INSERT INTO tools(slug, tool_type, definition, seeded, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT(slug) DO NOTHING",
        params![slug, tool_type, definition, seeded, now],
    )?;
    if inserted > 0 {
        add_tool_version(conn, slug, definition)?;
    }
    Ok(inserted > 0)
}

/// Records `definition` as the next version of the tool `slug` (on `conn`, which may be the
/// caller's transaction).
fn add_tool_version(conn: &Connection, slug: &str, definition: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO tool_versions(tool_id, version, definition, saved_at)
         SELECT id, (SELECT COALESCE(MAX(version), 0) + 1 FROM tool_versions WHERE tool_id = id),
                ?2, ?3
         FROM tools WHERE slug = ?1",
        params![slug, definition, now_unix()],
    )?;
    Ok(())
}

/// The type of the tool `slug`, if there is one, in the caller's transaction.
pub(crate) fn tool_type_of(tx: &Transaction<'_>, slug: &str) -> Result<Option<String>> {
    Ok(tx
        .query_row("SELECT tool_type FROM tools WHERE slug = ?1", [slug], |r| {
            r.get(0)
        })
        .optional()?)
}

/// Replaces the definition of the tool `slug` and its update time, in the caller's
/// transaction.
pub(crate) fn replace_tool_definition(
    tx: &Transaction<'_>,
    slug: &str,
    definition: &str,
) -> Result<()> {
    tx.execute(
        "UPDATE tools SET definition = ?2, updated_at = ?3 WHERE slug = ?1",
        params![slug, definition, now_unix()],
    )?;
    add_tool_version(tx, slug, definition)
}

/// Deletes the tool `slug`, in the caller's transaction.
pub(crate) fn delete_tool(tx: &Transaction<'_>, slug: &str) -> Result<()> {
    tx.execute("DELETE FROM tools WHERE slug = ?1", [slug])?;
    Ok(())
}

/// The definition JSON of the tool `slug` if it was seeded, in the caller's transaction.
pub(crate) fn seeded_tool_definition(tx: &Transaction<'_>, slug: &str) -> Result<Option<String>> {
    Ok(tx
        .query_row(
            "SELECT definition FROM tools WHERE slug = ?1 AND seeded = 1",
            [slug],
            |r| r.get(0),
        )
        .optional()?)
}

/// Replaces the definition of the tool `slug` with its derived form, leaving its update time
/// as it is, in the caller's transaction.
pub(crate) fn set_derived_seed_definition(
    tx: &Transaction<'_>,
    slug: &str,
    definition: &str,
) -> Result<()> {
    tx.execute(
        "UPDATE tools SET definition = ?2 WHERE slug = ?1",
        params![slug, definition],
    )?;
    // The newest version is what the tool is: restoring it must restore the derived form.
    tx.execute(
        "UPDATE tool_versions SET definition = ?2
         WHERE tool_id = (SELECT id FROM tools WHERE slug = ?1)
           AND version = (SELECT MAX(version) FROM tool_versions
                          WHERE tool_id = (SELECT id FROM tools WHERE slug = ?1))",
        params![slug, definition],
    )?;
    Ok(())
}
