//! Ingest: walk → extract → chunk → SQLite (+ full text through the outbox), and the watcher
//! that keeps a library current.
//!
//! Per-file failures never stop a run: each is recorded on the document row with a machine
//! reason and a message, and shown by `quarry status`. Only a library-level fault (database,
//! disk) aborts.
//!
//! An indexing run (`index_scope`, in `indexer`) walks and plans on the calling thread,
//! reads and extracts on workers (`outcome`) and commits in batches (`batch`); `run` carries
//! its progress across sources, and `watch` feeds it the paths that changed.

mod backfill;
mod batch;
pub(crate) mod chunk;
pub(crate) mod extract;
mod indexer;
pub mod ocr;
mod options;
mod outcome;
mod progress;
mod run;
pub(crate) mod walk;
mod watch;

pub(crate) use backfill::backfill;
pub use backfill::{EmbedProgress, DEFAULT_EMBED_BATCH};
pub use chunk::{count_tokens, ChunkOptions};
pub(crate) use indexer::{index_scope, ScanScope};
pub use options::IndexOptions;
pub use progress::{IndexEvent, IndexProgress};
pub(crate) use run::Run;
pub(crate) use watch::watch;
pub use watch::{WatchEvent, WatchOptions, WatchRequests};
