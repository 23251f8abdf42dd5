//! Collections and their sources (folders): created, listed, found, deleted.

use std::path::{Path, PathBuf};

use rusqlite::{params, OptionalExtension};

use super::{bytes_to_path, now_unix, path_to_bytes, Collection, Source, SourceStatus, Store};
use crate::error::{Error, Result};
use crate::ids::SourceId;
use crate::names::{Name, NameKind};

impl Store {
    /// Creates a collection whose vectors will come from `embedding_model`.
    pub fn create_collection(
        &mut self,
        name: &str,
        sensitivity: &str,
        language: &str,
        embedding_model: &str,
    ) -> Result<Collection> {
        validate_collection_name(name)?;
        if self.collection_by_name(name)?.is_some() {
            return Err(Error::CollectionExists(name.to_string()));
        }
        self.conn.execute(
            "INSERT INTO collections(name, sensitivity, language, created_at, embedding_model)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![name, sensitivity, language, now_unix(), embedding_model],
        )?;
        self.collection_by_name(name)?
            .ok_or_else(|| Error::Internal("collection vanished after insert".into()))
    }

    /// All collections, by name.
    pub fn collections(&self) -> Result<Vec<Collection>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {} FROM collections ORDER BY name",
            Collection::COLUMNS
        ))?;
        let rows = stmt.query_map([], Collection::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The collection with this name, if any.
    pub fn collection_by_name(&self, name: &str) -> Result<Option<Collection>> {
        Ok(self
            .conn
            .query_row(
                &format!(
                    "SELECT {} FROM collections WHERE name = ?1",
                    Collection::COLUMNS
                ),
                [name],
                Collection::from_row,
            )
            .optional()?)
    }

    /// Deletes a collection with its sources, documents and chunks (queued for full-text removal).
    pub fn delete_collection(&mut self, name: &str) -> Result<Collection> {
        let collection = self
            .collection_by_name(name)?
            .ok_or_else(|| Error::CollectionNotFound(name.to_string()))?;
        let tx = self.write()?;
        tx.execute(
            "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
             SELECT 'delete', c.id, c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id
             JOIN sources s ON s.id = d.source_id WHERE s.collection_id = ?1",
            [collection.id],
        )?;
        tx.execute("DELETE FROM collections WHERE id = ?1", [collection.id])?;
        tx.commit()?;
        Ok(collection)
    }

    // ---- sources -----------------------------------------------------------------------

    /// Adds a folder to a collection.
    pub fn create_source(
        &mut self,
        collection: &Collection,
        root: &Path,
        include: &[String],
        exclude: &[String],
    ) -> Result<Source> {
        let bytes = path_to_bytes(root);
        let exists: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM sources WHERE collection_id = ?1 AND root = ?2",
                params![collection.id, bytes],
                |r| r.get(0),
            )
            .optional()?;
        if exists.is_some() {
            return Err(Error::SourceExists {
                path: root.to_path_buf(),
                collection: collection.name.clone(),
            });
        }
        self.conn.execute(
            "INSERT INTO sources(collection_id, root, root_display, include_globs, exclude_globs, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                collection.id,
                bytes,
                root.to_string_lossy(),
                serde_json::to_string(include).expect("a list of strings serialises"),
                serde_json::to_string(exclude).expect("a list of strings serialises"),
                now_unix()
            ],
        )?;
        let id = SourceId(self.conn.last_insert_rowid());
        self.source(id)
    }

    /// Whether a source follows symbolic links whose target leaves its folder.
    pub fn set_source_follow_links(&self, id: SourceId, follow: bool) -> Result<Source> {
        let n = self.conn.execute(
            "UPDATE sources SET follow_links = ?2 WHERE id = ?1",
            params![id, follow],
        )?;
        if n == 0 {
            return Err(Error::SourceNotFound(id.to_string()));
        }
        self.source(id)
    }

    /// The Tesseract languages a source's scans are read in (checked by the caller).
    pub fn set_source_ocr_languages(&self, id: SourceId, languages: &[String]) -> Result<Source> {
        let n = self.conn.execute(
            "UPDATE sources SET ocr_languages = ?2 WHERE id = ?1",
            params![
                id,
                serde_json::to_string(languages).expect("a list of strings serialises")
            ],
        )?;
        if n == 0 {
            return Err(Error::SourceNotFound(id.to_string()));
        }
        self.source(id)
    }

    /// All sources with their collection's name.
    pub fn sources(&self) -> Result<Vec<Source>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SOURCE_SELECT} ORDER BY s.id"))?;
        let rows = stmt.query_map([], Source::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every source's folder, without the document counts `sources` adds (a scan asks for
    /// these on every change).
    pub(crate) fn source_roots(&self) -> Result<Vec<(SourceId, PathBuf)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, root FROM sources ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, bytes_to_path(&r.get::<_, Vec<u8>>(1)?)))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One source by id.
    pub fn source(&self, id: SourceId) -> Result<Source> {
        self.conn
            .query_row(
                &format!("{SOURCE_SELECT} WHERE s.id = ?1"),
                [id],
                Source::from_row,
            )
            .optional()?
            .ok_or_else(|| Error::SourceNotFound(id.to_string()))
    }

    /// Deletes a source with its documents and chunks (queued for full-text removal).
    pub fn delete_source(&mut self, id: SourceId) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            "INSERT INTO fulltext_outbox(op, chunk_id, document_id)
             SELECT 'delete', c.id, c.document_id FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE d.source_id = ?1",
            [id],
        )?;
        let n = tx.execute("DELETE FROM sources WHERE id = ?1", [id])?;
        if n == 0 {
            return Err(Error::SourceNotFound(id.to_string()));
        }
        tx.commit()?;
        Ok(())
    }

    /// Records whether a source's folder is reachable.
    pub(crate) fn set_source_status(
        &self,
        id: SourceId,
        status: SourceStatus,
        error: Option<&str>,
    ) -> Result<()> {
        self.conn.execute(
            "UPDATE sources SET status = ?2, last_error = ?3, last_scan_at = ?4 WHERE id = ?1",
            params![id, status.as_str(), error, now_unix()],
        )?;
        Ok(())
    }
}

fn validate_collection_name(name: &str) -> Result<()> {
    Name::parse(NameKind::Collection, name).map_err(|bad| Error::InvalidCollectionName {
        name: bad.name.clone(),
        reason: bad.reason(),
    })?;
    Ok(())
}

const SOURCE_SELECT: &str = "SELECT s.id, s.collection_id, c.name, s.root, s.include_globs,
    s.exclude_globs, s.status, s.last_error, s.last_scan_at,
    (SELECT COUNT(*) FROM documents d WHERE d.source_id = s.id AND d.status = 'indexed'),
    (SELECT COUNT(*) FROM documents d WHERE d.source_id = s.id AND d.status != 'indexed'),
    s.follow_links, s.ocr_languages
    FROM sources s JOIN collections c ON c.id = s.collection_id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_names_are_validated() {
        assert!(validate_collection_name("notes-2024_a.b").is_ok());
        for bad in ["", "has space", "slash/x", &"x".repeat(65)] {
            let err = validate_collection_name(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_collection_name", "{bad}");
        }
    }
}
