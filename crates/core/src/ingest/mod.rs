//! Ingest: walk → extract → chunk → SQLite (+ full text through the outbox), and the watcher
//! that keeps a library current.
//!
//! Per-file failures never stop a run: each is recorded on the document row with a machine
//! reason and a message, and shown by `quarry status`. Only a library-level fault (database,
//! disk) aborts.

mod backfill;
pub(crate) mod chunk;
pub(crate) mod extract;
mod indexer;
mod progress;
pub(crate) mod walk;
mod watch;

pub(crate) use backfill::backfill;
pub use backfill::{EmbedProgress, DEFAULT_EMBED_BATCH};
pub use chunk::{count_tokens, ChunkOptions};
pub use indexer::IndexOptions;
pub(crate) use indexer::{index_scope, Run, Scope};
pub use progress::{IndexEvent, IndexProgress};
pub(crate) use watch::watch;
pub use watch::{WatchEvent, WatchOptions, WatchRequests};
