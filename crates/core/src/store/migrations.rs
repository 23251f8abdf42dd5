//! Versioned schema migrations, applied in order inside one transaction each.
//!
//! `PRAGMA user_version` holds the applied version. A database newer than this build is
//! refused rather than guessed at.

use std::path::Path;

use rusqlite::Connection;

use crate::error::{Error, Result};

/// Each entry upgrades the schema from version `index` to `index + 1`. Never edit a shipped
/// migration: append a new one.
const MIGRATIONS: &[&str] = &[
    // v1: the foundation.
    "CREATE TABLE meta(
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE collections(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        sensitivity TEXT NOT NULL DEFAULT 'internal',
        language TEXT NOT NULL DEFAULT 'english',
        created_at INTEGER NOT NULL
    );
    CREATE TABLE sources(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        root BLOB NOT NULL,
        root_display TEXT NOT NULL,
        include_globs TEXT NOT NULL DEFAULT '[]',
        exclude_globs TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL DEFAULT 'ok',
        last_error TEXT,
        last_scan_at INTEGER,
        created_at INTEGER NOT NULL,
        UNIQUE(collection_id, root)
    );
    CREATE TABLE documents(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        path BLOB NOT NULL,
        path_display TEXT NOT NULL,
        size INTEGER,
        mtime_ns INTEGER,
        content_hash TEXT,
        status TEXT NOT NULL CHECK (status IN ('indexed', 'skipped', 'failed')),
        reason TEXT,
        last_error TEXT,
        warning TEXT,
        title TEXT,
        format TEXT,
        current_revision_id INTEGER,
        updated_at INTEGER NOT NULL,
        UNIQUE(source_id, path)
    );
    CREATE INDEX documents_path ON documents(path);
    CREATE INDEX documents_status ON documents(status);
    CREATE TABLE revisions(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        content_hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        extracted_bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX revisions_document ON revisions(document_id);
    CREATE TABLE chunks(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        revision_id INTEGER NOT NULL REFERENCES revisions(id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,
        text TEXT NOT NULL,
        heading_path TEXT NOT NULL DEFAULT '',
        page INTEGER,
        line_start INTEGER,
        line_end INTEGER,
        byte_start INTEGER,
        byte_end INTEGER,
        token_count INTEGER NOT NULL
    );
    CREATE INDEX chunks_document ON chunks(document_id, ordinal);
    CREATE TABLE fulltext_outbox(
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
        chunk_id INTEGER NOT NULL
    );",
    // v2: vectors. Each embedding model gets a vec0 table (see store/vectors.rs); collections
    // say which model serves them and which one they are switching to.
    "ALTER TABLE collections ADD COLUMN embedding_model TEXT;
    ALTER TABLE collections ADD COLUMN pending_model TEXT;
    UPDATE collections SET embedding_model = 'all-minilm-l6-v2-int8';
    CREATE TABLE vector_tables(
        model_id TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL,
        table_name TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE embedding_progress(
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        model_id TEXT NOT NULL,
        last_chunk_id INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY(collection_id, model_id)
    );",
    // v3: tools, pipelines, API keys and the audit log (see tools/, pipeline/, auth.rs, audit.rs).
    "CREATE TABLE tools(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        slug TEXT NOT NULL UNIQUE,
        tool_type TEXT NOT NULL CHECK (tool_type IN ('query', 'retrieval', 'chunk', 'action')),
        definition TEXT NOT NULL,
        seeded INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TRIGGER tools_type_is_fixed BEFORE UPDATE OF tool_type ON tools
    WHEN NEW.tool_type <> OLD.tool_type
    BEGIN SELECT RAISE(ABORT, 'a tool''s type is fixed after creation'); END;
    CREATE TABLE pipelines(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        draft TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE pipeline_versions(
        pipeline_id INTEGER NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        definition TEXT NOT NULL,
        saved_by TEXT NOT NULL,
        saved_at INTEGER NOT NULL,
        PRIMARY KEY(pipeline_id, version)
    );
    CREATE TABLE api_keys(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('personal', 'service')),
        user_name TEXT,
        key_prefix TEXT NOT NULL UNIQUE,
        key_hash TEXT NOT NULL,
        collections TEXT,
        sensitivity_ceiling TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
    );
    CREATE TABLE audit_log(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        principal TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL,
        input_hash TEXT NOT NULL,
        outcome TEXT NOT NULL,
        detail TEXT,
        duration_ms INTEGER NOT NULL
    );",
    // v4: the orchestrator's configurations (drafts and applied revisions) and conversations
    // with their evidence and trace (see orchestrator/).
    "CREATE TABLE orchestrator_configs(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        draft TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE orchestrator_revisions(
        config_id INTEGER NOT NULL REFERENCES orchestrator_configs(id) ON DELETE CASCADE,
        revision INTEGER NOT NULL,
        definition TEXT NOT NULL,
        snapshot TEXT NOT NULL,
        applied_by TEXT NOT NULL,
        applied_at INTEGER NOT NULL,
        PRIMARY KEY(config_id, revision)
    );
    CREATE TABLE conversations(
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        config TEXT NOT NULL,
        revision INTEGER NOT NULL,
        mode TEXT NOT NULL,
        title TEXT NOT NULL,
        qualified INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE chat_messages(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        citations TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE chat_evidence(
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        n INTEGER NOT NULL,
        chunk_id INTEGER NOT NULL,
        turn INTEGER NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY(conversation_id, n),
        UNIQUE(conversation_id, chunk_id)
    );
    CREATE TABLE chat_events(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX conversations_by_principal ON conversations(principal, updated_at);
    CREATE INDEX chat_messages_by_turn ON chat_messages(conversation_id, turn);
    CREATE INDEX chat_events_by_turn ON chat_events(conversation_id, turn);",
    // A file renamed over another can keep the old file's size and mtime; its inode differs.
    "ALTER TABLE documents ADD COLUMN inode INTEGER;",
    // Symbolic links leaving the source folder are followed only when the source says so.
    "ALTER TABLE sources ADD COLUMN follow_links INTEGER NOT NULL DEFAULT 0;",
    // Every saved definition of a tool, so the editor can show and restore older versions.
    "CREATE TABLE tool_versions(
        tool_id INTEGER NOT NULL REFERENCES tools(id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        definition TEXT NOT NULL,
        saved_at INTEGER NOT NULL,
        PRIMARY KEY(tool_id, version)
    );
    INSERT INTO tool_versions(tool_id, version, definition, saved_at)
        SELECT id, 1, definition, updated_at FROM tools;",
    // Each outbox row names its chunk's document, so the full-text index can refresh the
    // document's whole-page entry even after the chunk is gone. Chunks carry a hash of their
    // text, and copies of a text repeated across a source's documents are left out of search
    // (`store::repeats`).
    "ALTER TABLE fulltext_outbox ADD COLUMN document_id INTEGER;
    ALTER TABLE chunks ADD COLUMN text_hash INTEGER;
    ALTER TABLE chunks ADD COLUMN repeated INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX chunks_text_hash ON chunks(text_hash);",
    // The current revision's reader text (zstd), which `fetch_source_document` pages by byte
    // range, and each chunk's range in it.
    "CREATE TABLE revision_texts(
        revision_id INTEGER PRIMARY KEY REFERENCES revisions(id) ON DELETE CASCADE,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        text_len INTEGER NOT NULL,
        zstd BLOB NOT NULL
    );
    CREATE INDEX revision_texts_by_document ON revision_texts(document_id);
    ALTER TABLE chunks ADD COLUMN reader_start INTEGER;
    ALTER TABLE chunks ADD COLUMN reader_end INTEGER;",
    // Issue 38. A service key names the users it may act for (NULL on keys made before: every
    // user). Refused sign-ins repeated within a minute are one audit row with a count, found
    // by action, target and time; the log is pruned by age and row count (`audit::Retention`).
    "ALTER TABLE api_keys ADD COLUMN acts_for TEXT;
    ALTER TABLE audit_log ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
    CREATE INDEX audit_log_by_action ON audit_log(action, target, at_ms);
    CREATE INDEX audit_log_by_time ON audit_log(at_ms);",
    // Issue 37. The outside agent (MCP client) whose session a conversation is, so the Chat
    // list shows those apart from the user's own conversations (NULL: the window or the CLI);
    // the collections a conversation was started with, as a JSON list (NULL: every one the
    // caller may read), which its later turns keep to.
    "ALTER TABLE conversations ADD COLUMN client TEXT;
    ALTER TABLE conversations ADD COLUMN collections TEXT;",
    // Issue 36. OCR: each chunk read from pixels carries Tesseract's confidence (NULL: the
    // file's own text); each source its OCR languages (a JSON list of Tesseract codes); and
    // the documents whose pages wait for the OCR lane, with the content they were queued for
    // and how many pages lack a text layer.
    "ALTER TABLE chunks ADD COLUMN ocr_confidence INTEGER;
    CREATE INDEX chunks_ocr ON chunks(document_id, page) WHERE ocr_confidence IS NOT NULL;
    ALTER TABLE sources ADD COLUMN ocr_languages TEXT NOT NULL DEFAULT '[\"eng\"]';
    CREATE TABLE ocr_queue(
        document_id INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
        content_hash TEXT NOT NULL,
        pages INTEGER NOT NULL,
        queued_at INTEGER NOT NULL
    );",
    // Issue 35. What each chunk got from the embedding lane (`store::VectorKind`): a vector of
    // its own, a near-duplicate's, or none (no prose: full text only); NULL until the lane
    // reaches it.
    "ALTER TABLE chunks ADD COLUMN vector_kind INTEGER;",
    // Issue 35. The embedding lane's last measured rate per collection (chunks a second, the
    // shared and full-text-only counted), for the time left that `quarry status` says.
    "ALTER TABLE collections ADD COLUMN embed_chunks_per_sec REAL;",
    // Issue 35. What the user searches first is embedded first: documents a search found or
    // the app opened while their collection waited for vectors (`store::embed_first`), and
    // the chunks the lane gave a vector ahead of the collection's cursor, so the searches'
    // sign-bit copy finds them and counts them once.
    "CREATE TABLE embed_first(
        document_id INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
        requested INTEGER NOT NULL
     );
     CREATE TABLE embedded_ahead(
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL,
        model_id TEXT NOT NULL,
        chunk_id INTEGER NOT NULL
     );
     CREATE UNIQUE INDEX embedded_ahead_by_chunk ON embedded_ahead(collection_id, model_id, chunk_id);",
    // Issue 35. A collection a scoped search or the assistant used while it waited for vectors
    // is walked before the others (`store::embed_first`): the latest request, a growing
    // number, first; NULL when none stands.
    "ALTER TABLE collections ADD COLUMN embed_first INTEGER;",
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.to_path_buf(),
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now > index as i64 {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
        tracing::info!(version = index + 1, "applied schema migration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = migrate(&mut conn, &path).unwrap_err();
        assert_eq!(err.code(), "schema_too_new");
        assert!(err.to_string().contains("q.db"));
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn, &path).unwrap();
        migrate(&mut conn, &path).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
