//! quarry-core: the engine behind the Quarry desktop app and the `quarry` CLI.
//!
//! A [`Library`] is one data directory: `quarry.db` (SQLite, the source of truth) and
//! `fulltext/` (tantivy, derived from SQLite through an outbox). Folders are added as sources
//! of collections, indexed (walk → extract → chunk → SQLite + full text), kept current by a
//! watcher, and searched.
//!
//! ```
//! use quarry_core::{Library, IndexOptions, SearchRequest};
//! # fn main() -> quarry_core::Result<()> {
//! let data = tempfile::tempdir().unwrap();
//! let docs = tempfile::tempdir().unwrap();
//! std::fs::write(docs.path().join("notes.md"), "# Ferns\n\nFerns reproduce by spores.").unwrap();
//!
//! let mut library = Library::open(data.path())?;
//! library.create_collection("notes", "internal", "english")?;
//! library.add_source(docs.path(), "notes", &[], &[])?;
//! library.writer()?.index_all(&IndexOptions::default(), &|_| {})?;
//!
//! let hits = library.search(&SearchRequest::new("spore"))?;
//! assert_eq!(hits.hits[0].title.as_deref(), Some("Ferns"));
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod assistant;
pub mod audit;
pub mod auth;
pub mod bench;
pub mod cancel;
pub mod context;
pub mod cores;
mod embed;
pub mod environment;
mod error;
pub mod eval;
pub mod evidence;
mod fulltext;
mod governance;
mod ids;
pub mod ingest;
mod json_diff;
mod library;
pub mod llm;
mod lock;
mod memory;
mod model_use;
pub mod models;
pub mod names;
pub mod orchestrator;
pub mod pipeline;
pub mod retrieve;
pub mod scans;
mod serde_paths;
mod store;
pub mod tools;

pub use auth::{Principal, Scope};
pub use embed::device as embed_device;
pub use embed::register_served;
pub use error::{Error, ErrorKind, Result, ERROR_CODES};
pub use eval::{run_chat_evaluation, ChatEvalPlan, ChatEvalReport};
pub use eval::{run_evaluation, EvalPlan, EvalProgress, EvalReport};
pub use ids::{ChunkId, CollectionId, DocumentId, RevisionId, SourceId};
pub use ingest::{
    ChunkOptions, EmbedProgress, IndexEvent, IndexOptions, IndexProgress, WatchEvent, WatchOptions,
    WatchRequests,
};
pub use library::{
    ChunkInContext, ConsistencyReport, DocumentView, Library, LibraryOptions, LibraryWriter,
    StatusReport,
};
pub use pipeline::{PipelineRun, RunOptions};
pub use retrieve::{
    Fusion, Hit, PageEvidence, RetrievalSettings, SearchMode, SearchRequest, SearchResults,
    WeightedQuery,
};
pub use store::{
    ChunkLocation, ChunkRecord, Collection, DocumentRecord, DocumentStatus, EmbeddingCoverage,
    OcrCounts, ReasonCount, RepeatChanges, Source, SourceStatus, Stats,
};
pub use tools::{ToolDefinition, ToolType};

/// Arms the fail points named in the `FAILPOINTS` environment variable (crash tests only;
/// a no-op in release builds, which have no fail points).
#[doc(hidden)]
pub fn init_failpoints_from_env() {
    #[cfg(debug_assertions)]
    std::mem::forget(fail::FailScenario::setup());
}
