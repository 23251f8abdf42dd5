//! [`Library`]: the one public face the CLI and the desktop shell use.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fulltext::{language_by_name, FullText};
use crate::ingest::walk::overrides;
use crate::ingest::{
    index_scope, IndexEvent, IndexOptions, IndexProgress, Run, Scope, WatchEvent, WatchOptions,
};
use crate::lock::WriterLock;
use crate::retrieve::{self, SearchRequest, SearchResults};
use crate::store::{ChunkRecord, Collection, DocumentRecord, Source, Stats, Store};

/// An open library (one data directory). Any number of processes may open one to read; one
/// at a time writes, through [`Library::writer`].
pub struct Library {
    data_dir: PathBuf,
    store: Store,
    fulltext: FullText,
}

/// Everything `quarry status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// The data directory.
    #[serde(serialize_with = "crate::store::serialize_path")]
    pub data_dir: PathBuf,
    /// Counts.
    pub stats: Stats,
    /// Sources with their state.
    pub sources: Vec<Source>,
    /// The most recent skipped and failed files.
    pub problems: Vec<DocumentRecord>,
    /// Outbox sequence the full-text index has applied.
    pub fulltext_applied_seq: i64,
    /// Bytes on disk (database + full text).
    pub disk_bytes: u64,
}

/// A document with its chunks.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentView {
    /// The document row.
    pub document: DocumentRecord,
    /// Its current chunks.
    pub chunks: Vec<ChunkRecord>,
}

/// Whether SQLite and the full-text index agree.
#[derive(Debug, Clone, Serialize)]
pub struct ConsistencyReport {
    /// Chunks in SQLite.
    pub sqlite_chunks: usize,
    /// Live documents in tantivy.
    pub fulltext_chunks: usize,
    /// In SQLite, not searchable.
    pub missing_from_fulltext: Vec<i64>,
    /// Searchable, not in SQLite.
    pub stale_in_fulltext: Vec<i64>,
    /// Documents sharing a path within a source (must be none).
    pub duplicate_paths: i64,
}

impl ConsistencyReport {
    /// True when the two stores agree exactly.
    pub fn is_consistent(&self) -> bool {
        self.missing_from_fulltext.is_empty()
            && self.stale_in_fulltext.is_empty()
            && self.duplicate_paths == 0
    }
}

impl Library {
    /// The default data directory: `QUARRY_DATA_DIR`, else the platform's data dir.
    pub fn default_data_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("QUARRY_DATA_DIR") {
            return PathBuf::from(dir);
        }
        directories::ProjectDirs::from("dev", "Quarry", "quarry")
            .map(|d| d.data_dir().to_path_buf())
            .unwrap_or_else(|| PathBuf::from(".quarry"))
    }

    /// Opens (creating if needed) the library in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Library> {
        std::fs::create_dir_all(data_dir).map_err(|e| Error::io(data_dir, e))?;
        let store = Store::open(&data_dir.join("quarry.db"))?;
        let fulltext = FullText::open(&data_dir.join("fulltext"))?;
        let mut library = Library {
            data_dir: data_dir.to_path_buf(),
            store,
            fulltext,
        };
        // Repair at start-up: if nobody is writing, replay whatever the outbox has that
        // tantivy does not (a crash between the two commits).
        if library.store.outbox_max_seq()? > library.fulltext.applied_seq()? {
            match library.writer() {
                Ok(_writer) => {}
                Err(Error::WriterBusy { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(library)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The SQLite store, for read queries.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Takes the write lock and brings the full-text index up to date with SQLite.
    pub fn writer(&mut self) -> Result<LibraryWriter<'_>> {
        let lock = WriterLock::acquire(&self.data_dir)?;
        self.fulltext.start_writing()?;
        self.fulltext.sync(&self.store)?;
        Ok(LibraryWriter {
            library: self,
            _lock: lock,
        })
    }

    /// Creates a collection. `language` picks the stemmer (see [`crate::fulltext::LANGUAGE_NAMES`]).
    pub fn create_collection(
        &mut self,
        name: &str,
        sensitivity: &str,
        language: &str,
    ) -> Result<Collection> {
        let language = language_by_name(&language.to_ascii_lowercase())?;
        self.store.create_collection(name, sensitivity, language)
    }

    /// All collections.
    pub fn collections(&self) -> Result<Vec<Collection>> {
        self.store.collections()
    }

    /// Removes a collection and everything indexed in it.
    pub fn remove_collection(&mut self, name: &str) -> Result<Collection> {
        let c = self.store.delete_collection(name)?;
        self.try_sync_fulltext()?;
        Ok(c)
    }

    /// Adds a folder to a collection (created with defaults if it does not exist). Globs are
    /// relative to the folder, gitignore-style.
    pub fn add_source(
        &mut self,
        root: &Path,
        collection: &str,
        include: &[String],
        exclude: &[String],
    ) -> Result<Source> {
        let canonical = root.canonicalize().map_err(|e| Error::InvalidSourcePath {
            path: root.to_path_buf(),
            reason: e.to_string(),
        })?;
        if !canonical.is_dir() {
            return Err(Error::InvalidSourcePath {
                path: root.to_path_buf(),
                reason: "not a folder".into(),
            });
        }
        let data_dir = self
            .data_dir
            .canonicalize()
            .unwrap_or_else(|_| self.data_dir.clone());
        if canonical.starts_with(&data_dir) || data_dir.starts_with(&canonical) {
            return Err(Error::InvalidSourcePath {
                path: root.to_path_buf(),
                reason: "it overlaps the library's own data directory".into(),
            });
        }
        overrides(&canonical, include, exclude)?;
        let collection = match self.store.collection_by_name(collection)? {
            Some(c) => c,
            None => self.create_collection(collection, "internal", "english")?,
        };
        self.store
            .create_source(&collection, &canonical, include, exclude)
    }

    /// All sources.
    pub fn sources(&self) -> Result<Vec<Source>> {
        self.store.sources()
    }

    /// Finds a source by id or by folder path.
    pub fn find_source(&self, id_or_path: &str) -> Result<Source> {
        let sources = self.store.sources()?;
        if let Ok(id) = id_or_path.parse::<i64>() {
            if let Some(s) = sources.iter().find(|s| s.id == id) {
                return Ok(s.clone());
            }
        }
        let path = Path::new(id_or_path);
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        sources
            .into_iter()
            .find(|s| s.root == canonical || s.root == path)
            .ok_or_else(|| Error::SourceNotFound(id_or_path.to_string()))
    }

    /// Removes a source; its documents leave the index.
    pub fn remove_source(&mut self, id: i64) -> Result<()> {
        self.store.delete_source(id)?;
        self.try_sync_fulltext()
    }

    /// Applies pending full-text changes now if no other process is writing (else the writer
    /// will; searches already hide deleted chunks).
    fn try_sync_fulltext(&mut self) -> Result<()> {
        match self.writer() {
            Ok(_) | Err(Error::WriterBusy { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Lexical search.
    pub fn search(&self, request: &SearchRequest) -> Result<SearchResults> {
        self.fulltext.refresh()?;
        retrieve::search(&self.store, &self.fulltext, request)
    }

    /// Counts, sources and recent problems.
    pub fn status(&self) -> Result<StatusReport> {
        Ok(StatusReport {
            data_dir: self.data_dir.clone(),
            stats: self.store.stats()?,
            sources: self.store.sources()?,
            problems: self.store.problem_documents(50)?,
            fulltext_applied_seq: self.fulltext.applied_seq()?,
            disk_bytes: dir_size(&self.data_dir),
        })
    }

    /// A document and its chunks, by path.
    pub fn document(&self, path: &Path) -> Result<DocumentView> {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let document = self
            .store
            .document_by_path(&canonical)
            .or_else(|_| self.store.document_by_path(path))?;
        let chunks = self.store.chunks_of_document(document.id)?;
        Ok(DocumentView { document, chunks })
    }

    /// Compares SQLite's chunks with tantivy's committed documents.
    pub fn verify(&self) -> Result<ConsistencyReport> {
        self.fulltext.refresh()?;
        let sqlite: std::collections::BTreeSet<i64> =
            self.store.all_chunk_ids()?.into_iter().collect();
        let fulltext = self.fulltext.chunk_ids()?;
        let duplicate_paths: i64 = self.store.conn().query_row(
            "SELECT COUNT(*) FROM (SELECT 1 FROM documents GROUP BY source_id, path HAVING COUNT(*) > 1)",
            [],
            |r| r.get(0),
        )?;
        Ok(ConsistencyReport {
            sqlite_chunks: sqlite.len(),
            fulltext_chunks: fulltext.len(),
            missing_from_fulltext: sqlite.difference(&fulltext).copied().collect(),
            stale_in_fulltext: fulltext.difference(&sqlite).copied().collect(),
            duplicate_paths,
        })
    }
}

/// A library being written: holds the write lock until dropped.
pub struct LibraryWriter<'a> {
    library: &'a mut Library,
    _lock: WriterLock,
}

impl LibraryWriter<'_> {
    /// Scans every source and indexes what changed.
    pub fn index_all(
        &mut self,
        options: &IndexOptions,
        on_event: &(dyn Fn(&IndexEvent) + Sync),
    ) -> Result<IndexProgress> {
        let sources = self.library.store.sources()?;
        self.index_sources(&sources, options, on_event)
    }

    /// Scans the given sources.
    pub fn index_sources(
        &mut self,
        sources: &[Source],
        options: &IndexOptions,
        on_event: &(dyn Fn(&IndexEvent) + Sync),
    ) -> Result<IndexProgress> {
        let mut run = Run::new(on_event);
        for source in sources {
            let lib = &mut *self.library;
            index_scope(
                &mut lib.store,
                &mut lib.fulltext,
                source,
                &Scope::All,
                options,
                &mut run,
            )?;
        }
        run.finish();
        Ok(run.progress)
    }

    /// Re-indexes just these paths of a source (files or folders; gone ones are removed).
    pub fn index_paths(
        &mut self,
        source: &Source,
        paths: Vec<PathBuf>,
        options: &IndexOptions,
        on_event: &(dyn Fn(&IndexEvent) + Sync),
    ) -> Result<IndexProgress> {
        let mut run = Run::new(on_event);
        let lib = &mut *self.library;
        index_scope(
            &mut lib.store,
            &mut lib.fulltext,
            source,
            &Scope::Paths(paths),
            options,
            &mut run,
        )?;
        run.finish();
        Ok(run.progress)
    }

    /// Watches every source until `stop` is set (a full scan of each comes first).
    pub fn watch(
        &mut self,
        index_options: &IndexOptions,
        options: &WatchOptions,
        on_event: &(dyn Fn(&WatchEvent) + Sync),
        stop: &AtomicBool,
    ) -> Result<()> {
        let lib = &mut *self.library;
        crate::ingest::watch(
            &mut lib.store,
            &mut lib.fulltext,
            index_options,
            options,
            on_event,
            stop,
        )
    }

    /// Drops and rebuilds the full-text index from SQLite.
    pub fn rebuild_fulltext(&mut self) -> Result<i64> {
        let lib = &mut *self.library;
        lib.fulltext.rebuild(&lib.store)
    }

    /// Read access while writing.
    pub fn library(&self) -> &Library {
        self.library
    }
}

impl Drop for LibraryWriter<'_> {
    fn drop(&mut self) {
        self.library.fulltext.stop_writing();
    }
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
