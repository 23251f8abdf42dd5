//! [`Library`]: the one public face the CLI and the desktop shell use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::embed::{Embedder, Reranker};
use crate::error::{Error, Result};
use crate::fulltext::{language_by_name, FullText};
use crate::ids::{ChunkId, CollectionId, DocumentId, SourceId};
use crate::ingest::walk::overrides;
use crate::ingest::{
    backfill, index_scope, ocr::read_queued, EmbedProgress, IndexEvent, IndexOptions,
    IndexProgress, Run, ScanScope, WatchEvent, WatchOptions,
};
use crate::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use crate::lock::WriterLock;
use crate::models::{ModelKind, Models};
use crate::retrieve::{self, RerankScorer, SearchContext, SearchRequest, SearchResults};
use crate::store::{
    ChunkRecord, Collection, DocumentRecord, EmbeddingCoverage, SharedSignIndex, SignIndex, Source,
    Stats, Store, VectorTable,
};

/// An open library (one data directory). Any number of processes may open one to read; one
/// at a time writes, through [`Library::writer`].
pub struct Library {
    data_dir: PathBuf,
    store: Store,
    fulltext: FullText,
    models: Models,
    /// Loaded models by id: loading one takes a second, so each is loaded once per process.
    embedders: Mutex<HashMap<String, Arc<Embedder>>>,
    /// The embedding lane's own sessions: a batch takes a second or two, and a search's query
    /// must not wait behind it.
    lane_embedders: Mutex<HashMap<String, Arc<Embedder>>>,
    rerankers: Mutex<HashMap<String, Arc<Reranker>>>,
    /// In-memory sign bits per (vector table, collection), kept for the process's searches.
    sign_indexes: Mutex<HashMap<(String, CollectionId), SharedSignIndex>>,
    ort_threads: Option<usize>,
    /// Python workers for code tools, started on first use and reused.
    pub(crate) executor: crate::tools::Executor,
    pub(crate) evidence_key: std::sync::OnceLock<crate::evidence::EvidenceKey>,
}

/// Everything `quarry status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// The data directory.
    #[serde(serialize_with = "crate::serde_paths::path")]
    pub data_dir: PathBuf,
    /// Counts.
    pub stats: Stats,
    /// Sources with their state.
    pub sources: Vec<Source>,
    /// The most recent failed files, and indexed ones with a warning.
    pub problems: Vec<DocumentRecord>,
    /// The most recent files skipped by design (binary, hidden, empty…): not problems, counted
    /// by reason in `stats`.
    pub skipped: Vec<DocumentRecord>,
    /// Outbox sequence the full-text index has applied.
    pub fulltext_applied_seq: i64,
    /// Vectors per collection.
    pub embeddings: Vec<EmbeddingCoverage>,
    /// Bytes on disk (database + full text).
    pub disk_bytes: u64,
    /// The audit log's size and what it keeps.
    pub audit: crate::audit::AuditSummary,
}

/// A document with its chunks.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentView {
    /// The document row.
    pub document: DocumentRecord,
    /// Its current chunks.
    pub chunks: Vec<ChunkRecord>,
}

/// How a library is opened: fixed for the handle's life, so nothing loaded under one setting
/// (an embedder, a seed derived by the executor) is used under another.
#[derive(Default)]
pub struct LibraryOptions {
    /// Model folders to use instead of the data directory's and `QUARRY_MODELS_DIR` (tests,
    /// or an app with its own layout).
    pub models: Option<Models>,
    /// Caps ONNX Runtime's threads per model (default: every core).
    pub ort_threads: Option<usize>,
    /// Runs code tools (tests lower its isolation to exercise the fallbacks).
    pub executor: crate::tools::Executor,
}

/// A chunk with its neighbours, as a result preview shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ChunkInContext {
    /// The chunk's own document.
    pub document: DocumentRecord,
    /// The chunk and its neighbours, in document order.
    pub chunks: Vec<ChunkRecord>,
    /// The chunk asked for.
    pub focus_chunk_id: ChunkId,
}

/// Whether SQLite and the full-text index agree.
#[derive(Debug, Clone, Serialize)]
pub struct ConsistencyReport {
    /// Chunks in SQLite.
    pub sqlite_chunks: usize,
    /// Live documents in tantivy.
    pub fulltext_chunks: usize,
    /// In SQLite, not searchable.
    pub missing_from_fulltext: Vec<ChunkId>,
    /// Searchable, not in SQLite.
    pub stale_in_fulltext: Vec<ChunkId>,
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
        if let Some(dir) = crate::environment::data_dir() {
            return dir;
        }
        directories::ProjectDirs::from("dev", "Quarry", "quarry")
            .map(|d| d.data_dir().to_path_buf())
            .unwrap_or_else(|| PathBuf::from(".quarry"))
    }

    /// Opens (creating if needed) the library in `data_dir`, with the default models, executor
    /// and threads.
    pub fn open(data_dir: &Path) -> Result<Library> {
        Library::open_with(data_dir, LibraryOptions::default())
    }

    /// Opens (creating if needed) the library in `data_dir` with these options.
    pub fn open_with(data_dir: &Path, options: LibraryOptions) -> Result<Library> {
        std::fs::create_dir_all(data_dir).map_err(|e| Error::io(data_dir, e))?;
        let store = Store::open(&data_dir.join("quarry.db"))?;
        let fulltext = FullText::open(&data_dir.join("fulltext"))?;
        let mut library = Library {
            data_dir: data_dir.to_path_buf(),
            store,
            fulltext,
            models: options.models.unwrap_or_else(|| Models::discover(data_dir)),
            embedders: Mutex::new(HashMap::new()),
            lane_embedders: Mutex::new(HashMap::new()),
            rerankers: Mutex::new(HashMap::new()),
            sign_indexes: Mutex::new(HashMap::new()),
            ort_threads: options.ort_threads,
            executor: options.executor,
            evidence_key: std::sync::OnceLock::new(),
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
        crate::pipeline::install_seeds(&library.store, &library.executor)?;
        // Chats run an applied revision: it takes up what an amendment of the seeds saved.
        crate::orchestrator::revisions::follow_amended_pipelines(
            &library.store,
            &crate::pipeline::amendment_authors(),
            crate::pipeline::seeds_revision(),
        )?;
        Ok(library)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Where models are looked up and installed.
    pub fn models(&self) -> &Models {
        &self.models
    }

    /// The embedding model `id`, loaded once per process: every handle of the process (the
    /// window's, the assistant's) shares one session per model file.
    pub(crate) fn embedder(&self, id: &str) -> Result<Arc<Embedder>> {
        load_cached(&self.embedders, id, || {
            let dir = self.models.find_kind(id, ModelKind::Embedding)?.dir;
            shared_in_process(&SEARCH_EMBEDDERS, (dir, self.ort_threads), || {
                Embedder::load_for_queries(&self.models, id, self.ort_threads)
            })
        })
    }

    /// The reranker `id`, loaded once per process (shared like [`Library::embedder`]): an
    /// installed cross-encoder, or a chat model (an installed one's id, or a GGUF path),
    /// shared with the assistant's.
    pub(crate) fn reranker(&self, id: &str) -> Result<RerankScorer> {
        let chat_model = EmbeddedConfig::names_a_file(id)
            || crate::models::spec(id).is_some_and(|m| m.kind == ModelKind::Llm)
            || self.models.find_kind(id, ModelKind::Llm).is_ok();
        if chat_model {
            let config = EmbeddedConfig::named(&self.models, id)?;
            return Ok(RerankScorer::ChatModel(EmbeddedBackend::shared(config)?));
        }
        let cross_encoder = load_cached(&self.rerankers, id, || {
            let dir = self.models.find_kind(id, ModelKind::Reranker)?.dir;
            shared_in_process(&RERANKERS, (dir, self.ort_threads), || {
                Reranker::load(&self.models, id, self.ort_threads)
            })
        })?;
        Ok(RerankScorer::CrossEncoder(cross_encoder))
    }

    /// The in-memory sign bits of a collection's vectors: built on first use, then brought up
    /// to date with what was embedded since (by this process or another).
    pub(crate) fn sign_index(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<Arc<Mutex<SignIndex>>> {
        let key = (table.table.clone(), collection_id);
        let existing = self
            .sign_indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        match existing {
            Some(index) => {
                index.lock().unwrap_or_else(|e| e.into_inner()).refresh(
                    &self.store,
                    table,
                    collection_id,
                )?;
                Ok(index)
            }
            None => {
                let index = Arc::new(Mutex::new(SignIndex::build(
                    &self.store,
                    table,
                    collection_id,
                )?));
                Ok(self
                    .sign_indexes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(key)
                    .or_insert(index)
                    .clone())
            }
        }
    }

    /// Makes `model_id` the collection's embedding model. A collection with vectors keeps
    /// serving from them while the new model's are filled in by the next index run or watcher.
    pub fn use_embedding_model(&mut self, collection: &str, model_id: &str) -> Result<()> {
        self.models.find_kind(model_id, ModelKind::Embedding)?;
        self.store.set_collection_model(collection, Some(model_id))
    }

    /// The SQLite store, for read queries.
    pub(crate) fn store(&self) -> &Store {
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

    /// Creates a collection. `language` picks the stemmer (an unknown one is refused with the
    /// list of known languages).
    pub fn create_collection(
        &mut self,
        name: &str,
        sensitivity: &str,
        language: &str,
    ) -> Result<Collection> {
        // An unknown label would rank above every ceiling and hide the collection from
        // everyone but plain search: refuse it, as key ceilings are refused.
        crate::auth::validate_sensitivity("sensitivity", sensitivity)?;
        let language = language_by_name(&language.to_ascii_lowercase())?;
        self.store.create_collection(
            name,
            sensitivity,
            language,
            crate::models::default_embedding_model(),
        )
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

    /// Whether a source follows symbolic links whose target leaves its folder (never into the
    /// library's data directory or another source's folder); it takes effect at the next scan,
    /// which also drops what links no longer allowed had brought in.
    pub fn set_source_follow_links(&self, source: SourceId, follow: bool) -> Result<Source> {
        self.store.set_source_follow_links(source, follow)
    }

    /// The languages a source's scans and images are read in by OCR (Tesseract codes such as
    /// `eng`, `deu`, `chi_sim`), each checked against the installed language data; a missing
    /// one is refused with the command that installs it. Documents already read keep their
    /// text until they change (or are re-read with `--retry-failed` when they failed).
    pub fn set_source_ocr_languages(
        &self,
        source: SourceId,
        languages: &[String],
    ) -> Result<Source> {
        Library::check_ocr_languages(languages)?;
        self.store.set_source_ocr_languages(source, languages)
    }

    /// Whether OCR can read `languages` here: each a Tesseract code with its data installed
    /// (a missing one is refused with the command that installs it).
    pub fn check_ocr_languages(languages: &[String]) -> Result<()> {
        crate::ingest::ocr::check_languages(languages)
            .map(|_| ())
            .map_err(|e| Error::InvalidSetting {
                field: "ocr_languages".into(),
                reason: e.message,
            })
    }

    /// All sources.
    pub fn sources(&self) -> Result<Vec<Source>> {
        self.store.sources()
    }

    /// Finds a source by id or by folder path.
    pub fn find_source(&self, id_or_path: &str) -> Result<Source> {
        let sources = self.store.sources()?;
        if let Ok(id) = id_or_path.parse::<i64>().map(SourceId) {
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
    pub fn remove_source(&mut self, id: SourceId) -> Result<()> {
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

    /// Lexical, vector or hybrid search (see [`crate::retrieve`]).
    pub fn search(&self, request: &SearchRequest) -> Result<SearchResults> {
        self.fulltext.refresh()?;
        let embedder = |id: &str| self.embedder(id);
        let reranker = |id: &str| self.reranker(id);
        let sign_index = |t: &VectorTable, c: CollectionId| self.sign_index(t, c).map(Some);
        retrieve::search(
            &SearchContext {
                store: &self.store,
                fulltext: &self.fulltext,
                embedder: &embedder,
                reranker: &reranker,
                sign_index: &sign_index,
            },
            request,
        )
    }

    /// Counts of documents, chunks and skipped files (what [`Library::status`] reports, without
    /// the sources and problem lists).
    pub fn stats(&self) -> Result<Stats> {
        self.store.stats()
    }

    /// Counts, sources and recent problems.
    pub fn status(&self) -> Result<StatusReport> {
        Ok(StatusReport {
            data_dir: self.data_dir.clone(),
            stats: self.store.stats()?,
            sources: self.store.sources()?,
            problems: self.store.problem_documents(50)?,
            skipped: self.store.skipped_documents(50)?,
            fulltext_applied_seq: self.fulltext.applied_seq()?,
            embeddings: self.store.embedding_coverage()?,
            disk_bytes: dir_size(&self.data_dir),
            audit: crate::audit::summary(&self.store)?,
        })
    }

    /// A document and its chunks, by path.
    pub fn document(&self, path: &Path) -> Result<DocumentView> {
        self.document_in(path, None)
    }

    /// [`Library::document`] in `collection`: a folder that is a source of several collections
    /// has a document in each, and without a collection that path is refused
    /// (`ambiguous_document`, naming them) rather than one picked.
    pub fn document_in(&self, path: &Path, collection: Option<&str>) -> Result<DocumentView> {
        // The folder is resolved, not the file: a symbolic link is a document of its own
        // (indexed, or skipped with its reason), not the file it points to.
        let canonical = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
                parent.canonicalize().map(|p| p.join(name))
            }
            (Some(_), Some(name)) => std::env::current_dir().map(|d| d.join(name)),
            _ => path.canonicalize(),
        }
        .unwrap_or_else(|_| path.to_path_buf());
        let mut found = self.store.documents_by_path(&canonical)?;
        if found.is_empty() {
            found = self.store.documents_by_path(path)?;
        }
        if let Some(collection) = collection {
            found.retain(|d| d.collection == collection);
        }
        let document = match found.len() {
            0 => return Err(Error::DocumentNotFound(path.to_path_buf())),
            1 => found.remove(0),
            _ => {
                return Err(Error::AmbiguousDocument {
                    path: path.to_path_buf(),
                    collections: found.into_iter().map(|d| d.collection).collect(),
                })
            }
        };
        let chunks = self.store.chunks_of_document(document.id)?;
        Ok(DocumentView { document, chunks })
    }

    /// A chunk among up to `context` neighbours on each side, in its own document; `None` when
    /// the chunk has left the index (its file changed). The document is found by the chunk's
    /// document id, never by path: one folder can be a source of two collections.
    pub fn chunk_in_context(
        &self,
        chunk_id: ChunkId,
        context: usize,
    ) -> Result<Option<ChunkInContext>> {
        let Some(focus) = self.store.chunks_by_id(&[chunk_id])?.into_iter().next() else {
            return Ok(None);
        };
        let Some(document) = self.store.document_by_id(focus.document_id)? else {
            return Ok(None);
        };
        let chunks = self.store.chunks_of_document(document.id)?;
        let at = chunks.iter().position(|c| c.id == chunk_id).unwrap_or(0);
        let start = at.saturating_sub(context);
        let end = (at + context + 1).min(chunks.len());
        Ok(Some(ChunkInContext {
            document,
            chunks: chunks[start..end].to_vec(),
            focus_chunk_id: chunk_id,
        }))
    }

    /// Queues documents the user opened to be embedded before the rest of their collections,
    /// where they still wait for vectors (searches queue what they find themselves). Returns
    /// how many were queued.
    pub fn embed_first(&self, documents: &[DocumentId]) -> Result<usize> {
        self.store.queue_for_vectors(documents)
    }

    /// The document with this id, if it is still in the index.
    pub fn document_by_id(&self, id: DocumentId) -> Result<Option<DocumentRecord>> {
        self.store.document_by_id(id)
    }

    /// The chunks with these ids that are still indexed, in the order given.
    pub fn chunks_by_id(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>> {
        self.store.chunks_by_id(ids)
    }

    /// Every indexed chunk's id, ascending.
    pub fn chunk_ids(&self) -> Result<Vec<ChunkId>> {
        self.store.all_chunk_ids()
    }

    /// Every document of a source, whatever its state (indexed, failed, skipped).
    pub fn documents_of_source(&self, source: SourceId) -> Result<Vec<DocumentRecord>> {
        self.store.documents_of_source(source)
    }

    /// The most recent failed files and indexed ones with a warning, of one source or of all,
    /// at most `limit`.
    pub fn problem_documents(
        &self,
        source: Option<SourceId>,
        limit: usize,
    ) -> Result<Vec<DocumentRecord>> {
        self.store.problem_documents_in(source, limit)
    }

    /// Vectors per collection: how much of each is searchable by meaning.
    pub fn embedding_coverage(&self) -> Result<Vec<EmbeddingCoverage>> {
        self.store.embedding_coverage()
    }

    /// Compares SQLite's chunks with tantivy's committed documents.
    pub fn verify(&self) -> Result<ConsistencyReport> {
        self.fulltext.refresh()?;
        let sqlite: std::collections::BTreeSet<ChunkId> =
            self.store.searchable_chunk_ids()?.into_iter().collect();
        let fulltext = self.fulltext.chunk_ids()?;
        let duplicate_paths = self.store.duplicate_document_paths()?;
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
        let lib = &mut *self.library;
        for source in sources {
            index_scope(
                &mut lib.store,
                &mut lib.fulltext,
                source,
                &ScanScope::All,
                options,
                &mut run,
            )?;
        }
        // Scans and images after every source's text: lexical search never waits for OCR.
        for source in sources {
            read_queued(&mut lib.store, &mut lib.fulltext, source, options, &mut run)?;
        }
        run.finish();
        Ok(run.progress)
    }

    /// Embeds every chunk that has no vector yet (the embedding lane), until done or `stop`.
    pub fn embed_pending(
        &mut self,
        on_progress: &dyn Fn(&EmbedProgress),
        stop: &AtomicBool,
    ) -> Result<u64> {
        self.embed_pending_limited(usize::MAX, on_progress, stop)
    }

    /// [`LibraryWriter::embed_pending`], stopping after about `limit` chunks (benchmarks).
    pub fn embed_pending_limited(
        &mut self,
        limit: usize,
        on_progress: &dyn Fn(&EmbedProgress),
        stop: &AtomicBool,
    ) -> Result<u64> {
        let lib = &mut *self.library;
        let (store, embedders, models, threads) = (
            &mut lib.store,
            &lib.lane_embedders,
            &lib.models,
            lib.ort_threads,
        );
        let embedder_for = |id: &str| {
            load_cached(embedders, id, || {
                Embedder::load(models, id, threads).map(Arc::new)
            })
        };
        backfill(
            store,
            &embedder_for,
            crate::ingest::DEFAULT_EMBED_BATCH,
            limit as u64,
            on_progress,
            stop,
        )
    }

    /// Watches every source until `stop` is set (a full scan of each comes first). The
    /// embedding lane runs beside it on its own connection, filling in vectors as files are
    /// indexed; a missing model is reported once and lexical indexing carries on.
    pub fn watch(
        &mut self,
        index_options: &IndexOptions,
        options: &WatchOptions,
        on_event: &(dyn Fn(&WatchEvent) + Sync),
        stop: &AtomicBool,
    ) -> Result<()> {
        let lib = &mut *self.library;
        let db_path = lib.store.path().to_path_buf();
        let (embedders, models, threads) = (&lib.lane_embedders, &lib.models, lib.ort_threads);
        let (store, fulltext) = (&mut lib.store, &mut lib.fulltext);
        std::thread::scope(|scope| {
            let lane = scope
                .spawn(|| embedding_lane(&db_path, embedders, models, threads, on_event, stop));
            let watched =
                crate::ingest::watch(store, fulltext, index_options, options, on_event, stop);
            stop.store(true, Ordering::Relaxed);
            let lane = lane
                .join()
                .unwrap_or_else(|_| Err(Error::Internal("the embedding lane panicked".into())));
            watched.and(lane)
        })
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

/// How long the embedding lane keeps its model session with nothing to embed: the session
/// holds a few hundred MB, and the app's searches have their own.
const LANE_IDLE_RELEASE: Duration = Duration::from_secs(15);

/// The embedding lane of [`LibraryWriter::watch`]: on its own connection, fills in vectors
/// every second until `stop`, reports a missing model once, and releases its session (and
/// the memory behind it) after [`LANE_IDLE_RELEASE`] with nothing to do.
fn embedding_lane(
    db_path: &Path,
    embedders: &Mutex<HashMap<String, Arc<Embedder>>>,
    models: &Models,
    threads: Option<usize>,
    on_event: &(dyn Fn(&WatchEvent) + Sync),
    stop: &AtomicBool,
) -> Result<()> {
    let mut lane_store = Store::open(db_path)?;
    let embedder_for = |id: &str| {
        load_cached(embedders, id, || {
            Embedder::load(models, id, threads).map(Arc::new)
        })
    };
    let report = |p: &EmbedProgress| on_event(&WatchEvent::Embedding(p.clone()));
    let mut reported_error = false;
    let mut idle_since = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match backfill(
            &mut lane_store,
            &embedder_for,
            crate::ingest::DEFAULT_EMBED_BATCH,
            u64::MAX,
            &report,
            stop,
        ) {
            Ok(embedded) => {
                reported_error = false;
                if embedded > 0 {
                    idle_since = std::time::Instant::now();
                }
            }
            Err(e) if !reported_error => {
                on_event(&WatchEvent::EmbeddingUnavailable {
                    code: e.code(),
                    message: e.to_string(),
                });
                reported_error = true;
            }
            Err(_) => {}
        }
        if idle_since.elapsed() >= LANE_IDLE_RELEASE && release_all(embedders) {
            tracing::debug!("the embedding lane released its model session (idle)");
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Drops every cached session and hands the freed memory back to the OS; false when there
/// was none.
fn release_all<T>(cache: &Mutex<HashMap<String, Arc<T>>>) -> bool {
    let released = std::mem::take(&mut *cache.lock().unwrap_or_else(|e| e.into_inner()));
    if released.is_empty() {
        return false;
    }
    drop(released);
    crate::memory::return_freed_memory();
    true
}

/// Sessions of one model file and thread count, shared by every handle of the process and
/// dropped when the last handle lets go (a `Weak` does not keep one alive).
type SharedModels<T> = Mutex<HashMap<(PathBuf, Option<usize>), std::sync::Weak<T>>>;

static SEARCH_EMBEDDERS: std::sync::LazyLock<SharedModels<Embedder>> =
    std::sync::LazyLock::new(Default::default);
static RERANKERS: std::sync::LazyLock<SharedModels<Reranker>> =
    std::sync::LazyLock::new(Default::default);

/// The process's session of `key`, loaded by `load` when no handle holds one.
fn shared_in_process<T>(
    registry: &SharedModels<T>,
    key: (PathBuf, Option<usize>),
    load: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    let mut shared = registry.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(alive) = shared.get(&key).and_then(std::sync::Weak::upgrade) {
        return Ok(alive);
    }
    // Loaded under the lock: two handles asking at once would otherwise load it twice.
    let loaded = Arc::new(load()?);
    shared.insert(key, Arc::downgrade(&loaded));
    Ok(loaded)
}

fn load_cached<T>(
    cache: &Mutex<HashMap<String, Arc<T>>>,
    id: &str,
    load: impl FnOnce() -> Result<Arc<T>>,
) -> Result<Arc<T>> {
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(id) {
        return Ok(hit.clone());
    }
    // Loaded outside the lock: a second caller may load it too, and the first insert wins.
    let loaded = load()?;
    Ok(cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(id.to_string())
        .or_insert(loaded)
        .clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_handles_of_one_process_share_one_embedding_session() {
        // Sessions are shared by model and thread count: a count no other test uses keeps
        // this test's session its own.
        let options = || LibraryOptions {
            ort_threads: Some(3),
            ..LibraryOptions::default()
        };
        let data = tempfile::tempdir().unwrap();
        let first = Library::open_with(data.path(), options()).unwrap();
        let second = Library::open_with(data.path(), options()).unwrap();
        let id = crate::models::default_embedding_model();
        let a = first.embedder(id).unwrap();
        let b = second.embedder(id).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one ONNX session, not two");
        // Dropped by every handle, it is loaded afresh.
        let weak = Arc::downgrade(&a);
        drop((a, b, first, second));
        assert!(
            weak.upgrade().is_none(),
            "nothing keeps a released session alive"
        );
    }

    /// The in-memory sign bits stay in step with the library: vectors embedded after the copy
    /// was made join it, and deleted ones drop out of results.
    #[test]
    fn the_copy_follows_new_and_deleted_vectors() {
        use crate::store::Store;

        const MODEL: &str = "all-minilm-l6-v2-int8";
        let vector = |chunk: ChunkId| -> Vec<f32> {
            (0..384)
                .map(|d| {
                    if (chunk.0 * 31 + d * 7) % 5 < 2 {
                        1.0
                    } else {
                        -1.0
                    }
                })
                .collect()
        };
        let reindex = |library: &mut Library| {
            let options = IndexOptions::default();
            library
                .writer()
                .unwrap()
                .index_all(&options, &|_| {})
                .unwrap();
        };
        // Stand-in vectors for every pending chunk, written as the embedding lane writes them.
        let embed_everything = |library: &mut Library| -> usize {
            let collection = library.collections().unwrap().remove(0);
            let mut store = Store::open(library.store().path()).unwrap();
            let pending = store.pending_chunks(collection.id, MODEL, 10_000).unwrap();
            let table = store.ensure_vector_table(MODEL, 384).unwrap();
            let rows: Vec<(ChunkId, Vec<f32>)> = pending
                .iter()
                .map(|p| (p.id, crate::embed::normalized(vector(p.id))))
                .collect();
            if let Some(last) = rows.last().map(|r| r.0) {
                store
                    .store_vectors(&table, collection.id, &rows, &[], last)
                    .unwrap();
            }
            rows.len()
        };
        let data = tempfile::tempdir().unwrap();
        let docs = tempfile::tempdir().unwrap();
        for i in 0..5 {
            let text = format!("# Note {i}\n\nText number {i}.");
            std::fs::write(docs.path().join(format!("{i}.md")), text).unwrap();
        }
        let mut library = Library::open(data.path()).unwrap();
        library.add_source(docs.path(), "notes", &[], &[]).unwrap();
        reindex(&mut library);
        assert_eq!(embed_everything(&mut library), 5);
        let collection = library.collections().unwrap().remove(0);
        let table = library.store().vector_table(MODEL).unwrap().unwrap();
        let index = library.sign_index(&table, collection.id).unwrap();
        assert_eq!(index.lock().unwrap().len(), 5);

        // Three new files, embedded after the copy was made: the next use picks them up.
        for i in 5..8 {
            let text = format!("# Note {i}\n\nMore text {i}.");
            std::fs::write(docs.path().join(format!("{i}.md")), text).unwrap();
        }
        reindex(&mut library);
        assert_eq!(embed_everything(&mut library), 3);
        let index = library.sign_index(&table, collection.id).unwrap();
        assert_eq!(index.lock().unwrap().len(), 8);

        // A deleted file's vector is gone from results even though the copy still lists it.
        let gone_id = library.document(&docs.path().join("6.md")).unwrap().chunks[0].id;
        std::fs::remove_file(docs.path().join("6.md")).unwrap();
        reindex(&mut library);
        let query = crate::embed::normalized(vector(gone_id));
        let mut guard = index.lock().unwrap();
        let hits = library
            .store()
            .nearest_chunks(&table, collection.id, &query, 3, 4, Some(&mut guard))
            .unwrap();
        assert!(!hits.iter().any(|(id, _)| *id == gone_id), "{hits:?}");
        assert_eq!(hits.len(), 3);
    }
}
