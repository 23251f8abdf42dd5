//! API keys: hashed secrets, scopes and revocation.

use rusqlite::{params, OptionalExtension, Row};

use super::Store;
use crate::error::Result;

/// The columns [`ApiKeyRow::from_row`] reads, in order.
const KEY_COLUMNS: &str = "id, name, kind, user_name, key_prefix, collections, sensitivity_ceiling, created_at, revoked_at, acts_for";

/// An `api_keys` row as stored (never the hash); [`crate::auth`] turns it into an
/// [`crate::auth::ApiKey`].
#[derive(Debug, Clone)]
pub(crate) struct ApiKeyRow {
    pub id: i64,
    pub name: String,
    /// `personal` or `service`.
    pub kind: String,
    pub user: Option<String>,
    pub prefix: String,
    /// The readable collections as a JSON list; `None`: every collection.
    pub collections: Option<String>,
    pub sensitivity_ceiling: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// For a service key, the users it may act for as a JSON list; `None`: a key made before
    /// keys named them, which acts for every user.
    pub acts_for: Option<String>,
}

impl ApiKeyRow {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(ApiKeyRow {
            id: r.get(0)?,
            name: r.get(1)?,
            kind: r.get(2)?,
            user: r.get(3)?,
            prefix: r.get(4)?,
            collections: r.get(5)?,
            sensitivity_ceiling: r.get(6)?,
            created_at: r.get(7)?,
            revoked_at: r.get(8)?,
            acts_for: r.get(9)?,
        })
    }
}

/// A key about to be stored.
#[derive(Debug, Clone)]
pub(crate) struct NewApiKeyRow<'a> {
    pub name: &'a str,
    /// `personal` or `service`.
    pub kind: &'a str,
    pub user: Option<&'a str>,
    pub prefix: &'a str,
    /// SHA-256 of the secret, hex.
    pub hash: &'a str,
    /// The readable collections as a JSON list; `None`: every collection.
    pub collections: Option<&'a str>,
    pub sensitivity_ceiling: &'a str,
    pub created_at: i64,
    /// For a service key, the users it may act for as a JSON list.
    pub acts_for: Option<&'a str>,
}

impl Store {
    /// Whether a key with this name exists (revoked or not).
    pub(crate) fn api_key_name_exists(&self, name: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM api_keys WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )?)
    }

    /// Stores a new key.
    pub(crate) fn insert_api_key(&self, key: &NewApiKeyRow<'_>) -> Result<()> {
        self.conn.execute(
            "INSERT INTO api_keys(name, kind, user_name, key_prefix, key_hash, collections,
                 sensitivity_ceiling, created_at, acts_for)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                key.name,
                key.kind,
                key.user,
                key.prefix,
                key.hash,
                key.collections,
                key.sensitivity_ceiling,
                key.created_at,
                key.acts_for
            ],
        )?;
        Ok(())
    }

    /// The key with this name, if any.
    pub(crate) fn api_key_by_name(&self, name: &str) -> Result<Option<ApiKeyRow>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE name = ?1"),
                [name],
                ApiKeyRow::from_row,
            )
            .optional()?)
    }

    /// Every key, oldest first.
    pub(crate) fn api_keys(&self) -> Result<Vec<ApiKeyRow>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id"))?;
        let rows = stmt.query_map([], ApiKeyRow::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Marks the named key revoked at `at` (Unix seconds), unless it already is.
    pub(crate) fn revoke_api_key(&self, name: &str, at: i64) -> Result<()> {
        self.conn.execute(
            "UPDATE api_keys SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
            params![name, at],
        )?;
        Ok(())
    }

    /// The key with this public prefix and its stored secret hash, if any.
    pub(crate) fn api_key_by_prefix(&self, prefix: &str) -> Result<Option<(ApiKeyRow, String)>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {KEY_COLUMNS}, key_hash FROM api_keys WHERE key_prefix = ?1"),
                [prefix],
                |r| Ok((ApiKeyRow::from_row(r)?, r.get::<_, String>(10)?)),
            )
            .optional()?)
    }
}
