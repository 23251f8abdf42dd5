//! The narrow context that pipelines, tool tests, chat turns and evaluations take instead of
//! the whole [`crate::Library`].
//!
//! The library builds it ([`crate::Library::engine_context`]), so the library stays the one
//! module that knows every subsystem and nothing below it imports it back. Tests build one
//! from a real store and a stub [`Retrieval`], so a pipeline or a turn can be tested
//! without models or a full-text index.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::Result;
use crate::evidence::EvidenceKey;
use crate::ids::CollectionId;
use crate::models::Models;
use crate::retrieve::{SearchRequest, SearchResults};
use crate::store::{SharedSignIndex, Store, VectorTable};
use crate::tools::Executor;

#[cfg(test)]
pub(crate) mod testing;

/// What retrieval offers the layers above it: the calls that need the library's indexes and
/// model caches. `search` and `embedder` are required; `embed_query` and `sign_index` have
/// defaults a stub can keep (`knowledge_search` uses them).
pub trait Retrieval {
    /// Runs one search, as the request says (lexical, vector or hybrid, reranked or not).
    fn search(&self, request: &SearchRequest) -> Result<SearchResults>;
    /// The query embedder for a model id, loaded once per process.
    fn embedder(&self, model: &str) -> Result<Arc<Embedder>>;

    /// A query's vector under `model`. A stub overrides this to answer without a model.
    fn embed_query(&self, model: &str, query: &str) -> Result<Arc<[f32]>> {
        self.embedder(model)?.embed_query(query)
    }

    /// The cached sign bits of a collection's vectors, for the approximate first pass of a
    /// nearest-neighbour query; `None` (the default) scans the vectors exactly.
    fn sign_index(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<Option<SharedSignIndex>> {
        let _ = (table, collection_id);
        Ok(None)
    }
}

/// Everything a pipeline run, a tool test or a chat turn reads or calls.
#[derive(Clone, Copy)]
pub struct EngineContext<'a> {
    /// The library's database.
    pub store: &'a Store,
    /// Where models are installed.
    pub models: &'a Models,
    /// Runs code tools.
    pub executor: &'a Executor,
    /// Signs and checks evidence references.
    pub evidence_key: &'a EvidenceKey,
    /// Searches and embeds.
    pub retrieval: &'a dyn Retrieval,
}
