//! Setup the store's unit tests and the stub engine share: a fresh store on a temporary file,
//! a collection with one source, and documents written the way the indexer writes them.

use std::path::Path;

use super::records::{ChunkRecord, DocumentStatus, Source};
use super::writes::{self, Extraction, FileFacts};
use super::{NewChunk, Store};
use rusqlite::Transaction;

/// A fresh store; the folder holding it goes when the first value is dropped.
pub(crate) fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("q.db")).unwrap();
    (dir, store)
}

/// A new collection embedded by `model`, with one source at `root`.
pub(crate) fn collection_with_source(
    store: &mut Store,
    name: &str,
    sensitivity: &str,
    model: &str,
    root: &Path,
) -> Source {
    let collection = store
        .create_collection(name, sensitivity, "english", model)
        .unwrap();
    store.create_source(&collection, root, &[], &[]).unwrap()
}

/// Writes (and commits) one markdown document of `chunks` at `path`, `bytes` long, titled
/// and hashed `title`; returns its chunks in document order.
pub(crate) fn write_document(
    store: &Store,
    source: &Source,
    path: &Path,
    title: &str,
    bytes: i64,
    chunks: &[NewChunk],
) -> Vec<ChunkRecord> {
    let tx = store.write().unwrap();
    let document = writes::write_revision(
        &tx,
        source.id,
        &FileFacts {
            path,
            size: bytes,
            mtime_ns: 1,
            inode: None,
        },
        &Extraction {
            content_hash: title,
            title,
            format: "markdown",
            warning: None,
            extracted_bytes: bytes,
            reader_text: "",
        },
        chunks,
    )
    .unwrap();
    tx.commit().unwrap();
    store.chunks_of_document(document).unwrap()
}

/// Records `path` as skipped (hidden) without content, in `tx`.
pub(crate) fn write_skipped(tx: &Transaction<'_>, source: &Source, path: &Path) {
    let file = FileFacts {
        path,
        size: 1,
        mtime_ns: 1,
        inode: None,
    };
    writes::write_not_indexed(tx, source.id, &file, DocumentStatus::Skipped, "hidden", "x")
        .unwrap();
}
