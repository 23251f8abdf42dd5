//! Retrieval: lexical (BM25), vector (sqlite-vec) and hybrid search with every retrieval-tool
//! setting, joined with SQLite for text, location and snippets.
//!
//! The stages run in order: candidates per query variant (lexical and/or vector) → fusion (RRF
//! or weighted normalised scores, variants added by weight) → exact identifiers first (hybrid)
//! → freshness → one or more hits per document → optional cross-encoder rerank → the evidence
//! limit. Every hit carries what each stage gave it, and the trace says what each stage did,
//! so the pipeline tester can show it. `search` is the driver; each stage has its file: `plan`
//! (the collections searched), `lexical`, `vector`, `fusion`, `exact` (identifiers), `rank`
//! (the SQLite join, freshness, fold) and `rerank`. `vector` is also the one vector-query path `knowledge_search` takes.
//!
//! SQLite has the last word: a candidate whose chunk is gone (deleted since tantivy's last
//! commit) is dropped, so a removed source vanishes from results at once.

mod certainty;
mod exact;
mod fusion;
mod lexical;
mod pages;
mod plan;
mod rank;
mod rerank;
mod settings;
mod vector;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::fulltext::{FullText, FulltextResults, Snippet};
use crate::ids::{ChunkId, CollectionId, DocumentId};
use crate::store::{ChunkLocation, ChunkRecord, Collection, SharedSignIndex, Store, VectorTable};
pub use certainty::Certainty;
use fusion::{Pool, VariantStreams};
use pages::VariantFound;
use plan::Searched;
use rank::Ranked;
pub use rerank::deep_search_model;
pub(crate) use rerank::RerankScorer;
pub use settings::{
    Freshness, Fusion, PageEvidence, RerankSettings, RerankWhen, RetrievalSettings, SearchMode,
};
pub(crate) use vector::{query_collection, VectorContext};

/// One query stream with its weight (the query tools produce several).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WeightedQuery {
    /// The text.
    pub text: String,
    /// Its weight in the fused ranking.
    pub weight: f32,
}

/// A search.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Free text. `"phrases"`, `+required`, `-excluded` work in the lexical stream.
    pub query: String,
    /// Weighted query variants; when empty, `query` alone at weight 1.
    pub variants: Vec<WeightedQuery>,
    /// Collection names to search (empty: all).
    pub collections: Vec<String>,
    /// Retrieval settings (mode, pools, fusion, rerank, limit, …).
    pub settings: RetrievalSettings,
    /// The embedding model the caller expects; a collection embedded with another is refused.
    pub embedding_model: Option<String>,
    /// Snippet length in characters. Default 200.
    pub snippet_chars: usize,
    /// The caller's authorization: collections outside it are never searched (`None`: the
    /// local administrator, everything).
    pub scope: Option<crate::auth::Scope>,
}

impl SearchRequest {
    /// A search of every collection with the default settings.
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            variants: Vec::new(),
            collections: Vec::new(),
            settings: RetrievalSettings::default(),
            embedding_model: None,
            snippet_chars: 200,
            scope: None,
        }
    }

    /// The same search with another mode.
    pub fn with_mode(mut self, mode: SearchMode) -> Self {
        self.settings.mode = mode;
        self
    }

    fn streams(&self) -> Vec<WeightedQuery> {
        if self.variants.is_empty() {
            vec![WeightedQuery {
                text: self.query.clone(),
                weight: 1.0,
            }]
        } else {
            self.variants.clone()
        }
    }
}

/// What each stage gave a hit.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct StageScores {
    /// Best 1-based rank in a lexical stream.
    pub lexical_rank: Option<usize>,
    /// Its score there: BM25, or with pages weighed (`page_evidence`), its page's score over
    /// the stream's best (0 to 1).
    pub lexical_score: Option<f32>,
    /// Best 1-based rank in a vector stream.
    pub vector_rank: Option<usize>,
    /// Its cosine similarity there.
    pub similarity: Option<f32>,
    /// Score after fusion (and variants).
    pub fused: f32,
    /// Freshness multiplier applied, when freshness is on.
    pub freshness: Option<f32>,
    /// Rerank score, when reranked: the cross-encoder's, or a chat model's judgement blended
    /// with the fused rank.
    pub rerank: Option<f32>,
    /// A chat model's judgement, P("yes") to "does this answer the query?", when it judged.
    pub judged: Option<f32>,
    /// How many of the query's rare identifiers the chunk contains exactly; hybrid search
    /// ranks more of them first (see `identifiers_first`).
    pub identifier_matches: Option<u32>,
}

/// One result.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// Final score: the rerank score when reranked, else the fused score.
    pub score: f32,
    /// Per-stage scores.
    pub scores: StageScores,
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its document.
    pub document_id: DocumentId,
    /// The file.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub path: PathBuf,
    /// Document title.
    pub title: Option<String>,
    /// Collection name.
    pub collection: String,
    /// Headings above the chunk.
    pub heading_path: String,
    /// Page, lines, bytes.
    pub location: ChunkLocation,
    /// Highlighted excerpt.
    pub snippet: Snippet,
    /// File modification time, ns since the epoch.
    pub mtime_ns: Option<i64>,
    /// Other files that hold this chunk's text word for word (a print-all page, another
    /// copy), folded into this hit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_at: Vec<String>,
}

/// What one stage did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct StageTrace {
    /// `lexical`, `vector`, `pages`, `fusion`, `identifiers`, `freshness`, `fold`, `rerank`.
    pub stage: &'static str,
    /// The query variant (index into the streams), for per-variant stages.
    pub variant: Option<usize>,
    /// Candidates coming out.
    pub candidates: usize,
    /// Time spent, microseconds.
    pub took_us: u64,
    /// Anything worth saying (model used, candidates dropped, …).
    pub detail: String,
}

/// Something that keeps a search from being all it was configured to be.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ReadinessIssue {
    /// `embedding_model`, `vectors_incomplete`, `reranker`.
    pub component: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Results with timing and the per-stage trace.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<Hit>,
    /// Time spent, in microseconds.
    pub took_us: u64,
    /// The mode searched.
    pub mode: SearchMode,
    /// Every stage, in order.
    pub trace: Vec<StageTrace>,
    /// What was missing or partial.
    pub readiness: Vec<ReadinessIssue>,
    /// How sure the first ranking was (before any rerank); `None` when nothing was found.
    pub certainty: Option<Certainty>,
}

/// What a search needs from the library: its stores and its model caches.
pub(crate) struct SearchContext<'a> {
    pub store: &'a Store,
    pub fulltext: &'a FullText,
    pub embedder: &'a dyn Fn(&str) -> Result<Arc<Embedder>>,
    pub reranker: &'a dyn Fn(&str) -> Result<RerankScorer>,
    /// The in-memory sign bits of a collection's vectors, built or refreshed.
    pub sign_index: &'a dyn Fn(&VectorTable, CollectionId) -> Result<Option<SharedSignIndex>>,
}

impl SearchContext<'_> {
    fn vectors(&self) -> VectorContext<'_> {
        VectorContext {
            store: self.store,
            sign_index: self.sign_index,
        }
    }
}

fn elapsed_us(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

/// Runs the stages in order (see the module doc), each adding its step to the trace.
pub(crate) fn search(ctx: &SearchContext<'_>, request: &SearchRequest) -> Result<SearchResults> {
    let started = Instant::now();
    let settings = &request.settings;
    settings.validate()?;
    let streams = request.streams();
    check_weights(&streams)?;
    let all = ctx.store.collections()?;
    let mut results = SearchResults {
        hits: Vec::new(),
        took_us: 0,
        mode: settings.mode,
        trace: Vec::new(),
        readiness: Vec::new(),
        certainty: None,
    };
    let Some(searched) = Searched::resolve(request, &all)? else {
        results.took_us = elapsed_us(started);
        return Ok(results);
    };
    let (trace, readiness) = (&mut results.trace, &mut results.readiness);
    let targets = vector::targets(ctx, request, &searched.collections, readiness)?;
    let (mut found, mut snippets) = gather(ctx, &searched, &targets, &streams, settings, trace)?;
    let mut chunks = rank::fetch_rows(ctx.store, found_ids(&found), HashMap::new())?;
    let searched_ids: Vec<CollectionId> = searched.collections.iter().map(|c| c.id).collect();
    let (copies, step) = pages::stage(ctx.store, &searched_ids, &mut found, &chunks, settings)?;
    trace.push(step);
    chunks = rank::fetch_rows(ctx.store, found_ids(&found), chunks)?;
    let mut pool = Pool::default();
    for variant in &found {
        let streams = VariantStreams {
            lexical: variant.lexical.as_deref(),
            vector: variant.vector.as_deref(),
        };
        pool.add_variant(&streams, settings.fusion, variant.weight);
    }
    let (mut candidates, step) = pool.fuse(settings.fusion, streams.len());
    trace.push(step);
    if settings.mode == SearchMode::Hybrid && settings.identifiers_first {
        let pool = settings.lexical_candidates;
        trace.extend(exact::stage(
            ctx,
            &searched,
            &request.query,
            pool,
            &mut candidates,
        )?);
    }

    chunks = rank::join_chunks(ctx.store, chunks, &mut candidates)?;
    if let Some(f) = &settings.freshness {
        trace.push(rank::freshness(&mut candidates, &chunks, f));
    }
    let mut ranked = rank::ranked(candidates);
    trace.push(rank::fold(&mut ranked, &chunks, settings.max_per_document));
    let certainty = certainty::measure(&request.query, found.first(), &ranked, &chunks);
    if let Some(rerank) = &settings.rerank {
        let query = &request.query;
        let (step, issue) = rerank::stage(ctx, &mut ranked, &chunks, query, rerank, &certainty)?;
        trace.push(step);
        readiness.extend(issue);
    }
    results.certainty = (!ranked.is_empty()).then_some(certainty);
    ranked.truncate(settings.limit);
    results.hits = hits(
        ranked,
        &chunks,
        &all,
        snippets.as_mut(),
        request.snippet_chars,
    )?;
    add_copies(ctx.store, &mut results.hits, &copies)?;
    embed_found_first(ctx.store, &results.hits);
    if !request.collections.is_empty() {
        embed_collections_first(ctx.store, &searched_ids);
    }
    results.took_us = elapsed_us(started);
    Ok(results)
}

/// Documents among the best hits whose collection still waits for their vectors.
const FOUND_FIRST: usize = 10;

/// Queues the best hits' documents to be embedded before the rest of their collections, where
/// they still wait (see `store::embed_first`): what the user searches now is likely what they
/// search by meaning next. A hint, so it never fails the search.
fn embed_found_first(store: &Store, hits: &[Hit]) {
    let documents: Vec<DocumentId> = hits
        .iter()
        .take(FOUND_FIRST)
        .map(|h| h.document_id)
        .collect();
    if let Err(e) = store.queue_for_vectors(&documents) {
        tracing::debug!("could not queue the found documents for vectors: {e}");
    }
}

/// Puts the collections a search named (a chat mode's, the assistant's, the user's filter) ahead
/// of the others in the embedding lane, where they still wait: the user works in them now. A
/// search of everything names none. A hint, so it never fails the search.
fn embed_collections_first(store: &Store, collections: &[CollectionId]) {
    if let Err(e) = store.queue_collections_for_vectors(collections) {
        tracing::debug!("could not queue the searched collections for vectors: {e}");
    }
}

/// The lexical and vector stages of every query variant; and the first lexical stream's
/// full-text results, to highlight snippets with.
fn gather(
    ctx: &SearchContext<'_>,
    searched: &Searched<'_>,
    targets: &[vector::VectorTarget],
    streams: &[WeightedQuery],
    settings: &RetrievalSettings,
    trace: &mut Vec<StageTrace>,
) -> Result<(Vec<VariantFound>, Option<FulltextResults>)> {
    let mut found = Vec::with_capacity(streams.len());
    let mut snippets = None;
    for (v, query) in streams.iter().enumerate() {
        let (mut lexical, mut lexical_pages) = (None, None);
        if settings.mode.uses_lexical() {
            let (stream, step) = lexical::stage(ctx, searched, settings, &query.text, v)?;
            trace.push(step);
            lexical = Some(stream.list);
            lexical_pages = stream.pages;
            snippets.get_or_insert(stream.results);
        }
        let mut vector = None;
        if !targets.is_empty() {
            let (list, step) = vector::stage(ctx, targets, settings, &query.text, v)?;
            trace.push(step);
            vector = Some(list);
        }
        found.push(VariantFound {
            lexical,
            lexical_pages,
            vector,
            weight: query.weight,
        });
    }
    Ok((found, snippets))
}

/// Every chunk any stream found.
fn found_ids(found: &[VariantFound]) -> Vec<ChunkId> {
    let mut ids: Vec<ChunkId> = found
        .iter()
        .flat_map(|v| v.lexical.iter().chain(v.vector.iter()).flatten())
        .map(|(id, _)| *id)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Names on each hit the other files its text was folded from.
fn add_copies(store: &Store, hits: &mut [Hit], copies: &pages::Copies) -> Result<()> {
    for hit in hits {
        if let Some(others) = copies.also_at.get(&hit.chunk_id) {
            let mut paths: Vec<String> = store
                .chunks_by_id(others)?
                .into_iter()
                .map(|c| c.path.to_string_lossy().into_owned())
                .collect();
            paths.dedup();
            hit.also_at = paths;
        }
    }
    Ok(())
}

/// Every variant weighs more than 0.
fn check_weights(streams: &[WeightedQuery]) -> Result<()> {
    for (i, q) in streams.iter().enumerate() {
        if !(q.weight.is_finite() && q.weight > 0.0) {
            return Err(Error::InvalidSetting {
                field: format!("variants[{i}].weight"),
                reason: "must be more than 0".into(),
            });
        }
    }
    Ok(())
}

/// The ranked candidates as hits, each with its snippet: highlighted by the first lexical
/// stream's query when there was one, else the chunk's opening.
fn hits(
    ranked: Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    all: &[Collection],
    mut snippets: Option<&mut FulltextResults>,
    snippet_chars: usize,
) -> Result<Vec<Hit>> {
    let language_of: HashMap<&str, &str> = all
        .iter()
        .map(|c| (c.name.as_str(), c.language.as_str()))
        .collect();
    let mut hits = Vec::with_capacity(ranked.len());
    for (id, c) in ranked {
        let chunk = &chunks[&id];
        let language = language_of
            .get(chunk.collection.as_str())
            .copied()
            .unwrap_or("english");
        let snippet = match snippets.as_deref_mut() {
            Some(results) => results.snippet(language, &chunk.text, snippet_chars)?,
            None => Snippet::plain(&chunk.text, snippet_chars),
        };
        hits.push(Hit {
            rank: hits.len() + 1,
            score: c.scores.rerank.unwrap_or(c.total),
            scores: c.scores,
            chunk_id: id,
            document_id: chunk.document_id,
            path: chunk.path.clone(),
            title: chunk.title.clone(),
            collection: chunk.collection.clone(),
            heading_path: chunk.heading_path.clone(),
            location: chunk.location.clone(),
            snippet,
            mtime_ns: chunk.mtime_ns,
            also_at: Vec::new(),
        });
    }
    Ok(hits)
}
