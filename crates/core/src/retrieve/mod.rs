//! Retrieval: lexical (BM25), vector (sqlite-vec) and hybrid search with every retrieval-tool
//! setting, joined with SQLite for text, location and snippets.
//!
//! The stages run in order: candidates per query variant (lexical and/or vector) → fusion (RRF
//! or weighted normalised scores, variants added by weight) → freshness → one or more hits per
//! document → optional cross-encoder rerank → the evidence limit. Every hit carries what each
//! stage gave it, and the trace says what each stage did, so the pipeline tester can show it.
//!
//! SQLite has the last word: a candidate whose chunk is gone (deleted since tantivy's last
//! commit) is dropped, so a removed source vanishes from results at once.

mod fusion;
mod settings;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::embed::{Embedder, Reranker};
use crate::error::{Error, Result};
use crate::fulltext::{FullText, FulltextQuery, Snippet};
use crate::store::{ChunkLocation, ChunkRecord, Collection, SharedSignIndex, Store, VectorTable};
use fusion::{accumulate, freshness_factor, fuse_variant, VariantStreams};
pub use settings::{Freshness, Fusion, RerankSettings, RetrievalSettings, SearchMode};

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
    /// Its BM25 score there.
    pub lexical_score: Option<f32>,
    /// Best 1-based rank in a vector stream.
    pub vector_rank: Option<usize>,
    /// Its cosine similarity there.
    pub similarity: Option<f32>,
    /// Score after fusion (and variants).
    pub fused: f32,
    /// Freshness multiplier applied, when freshness is on.
    pub freshness: Option<f32>,
    /// Cross-encoder score, when reranked.
    pub rerank: Option<f32>,
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
    pub chunk_id: i64,
    /// Its document.
    pub document_id: i64,
    /// The file.
    #[serde(serialize_with = "crate::store::serialize_path")]
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
}

/// What one stage did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct StageTrace {
    /// `lexical`, `vector`, `fusion`, `freshness`, `fold`, `rerank`.
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
}

/// What a search needs from the library: its stores and its model caches.
pub(crate) struct SearchContext<'a> {
    pub store: &'a Store,
    pub fulltext: &'a FullText,
    pub embedder: &'a dyn Fn(&str) -> Result<Arc<Embedder>>,
    pub reranker: &'a dyn Fn(&str) -> Result<Arc<Reranker>>,
    /// The in-memory sign bits of a collection's vectors, built or refreshed.
    pub sign_index: &'a dyn Fn(&VectorTable, i64) -> Result<SharedSignIndex>,
}

#[derive(Default)]
struct Candidate {
    scores: StageScores,
    total: f32,
}

fn us(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

pub(crate) fn search(ctx: &SearchContext<'_>, request: &SearchRequest) -> Result<SearchResults> {
    let started = Instant::now();
    let settings = &request.settings;
    settings.validate()?;
    let streams = request.streams();
    for (i, q) in streams.iter().enumerate() {
        if !(q.weight.is_finite() && q.weight > 0.0) {
            return Err(Error::InvalidSetting {
                field: format!("variants[{i}].weight"),
                reason: "must be more than 0".into(),
            });
        }
    }
    let all = ctx.store.collections()?;
    let wanted: Vec<&Collection> = if request.collections.is_empty() {
        all.iter().collect()
    } else {
        request
            .collections
            .iter()
            .map(|name| {
                all.iter()
                    .find(|c| &c.name == name)
                    .ok_or_else(|| Error::CollectionNotFound(name.clone()))
            })
            .collect::<Result<_>>()?
    };
    let mut wanted = wanted;
    if let Some(scope) = &request.scope {
        // A named collection the caller may not read is "not found", like a missing one, so
        // the answer does not tell which exist.
        if let Some(hidden) = wanted
            .iter()
            .find(|c| !request.collections.is_empty() && !scope.allows(c))
        {
            return Err(Error::CollectionNotFound(hidden.name.clone()));
        }
        wanted.retain(|c| scope.allows(c));
        if wanted.is_empty() {
            // Nothing the caller may read: an empty answer, never "all collections".
            return Ok(SearchResults {
                hits: Vec::new(),
                took_us: us(started),
                mode: settings.mode,
                trace: Vec::new(),
                readiness: Vec::new(),
            });
        }
    }
    let collection_ids: Vec<i64> = if request.collections.is_empty() && request.scope.is_none() {
        Vec::new()
    } else {
        wanted.iter().map(|c| c.id).collect()
    };
    let mut languages: Vec<String> = Vec::new();
    for c in &wanted {
        if !languages.contains(&c.language) {
            languages.push(c.language.clone());
        }
    }
    let mut trace = Vec::new();
    let mut readiness = Vec::new();

    // Vector side: which collections can answer, with which model.
    let mut vector_targets = Vec::new();
    if settings.mode.uses_vector() {
        vector_targets = vector_targets_for(ctx, request, &wanted, &mut readiness)?;
        if settings.mode == SearchMode::Vector && vector_targets.is_empty() && !wanted.is_empty() {
            // Nothing can answer a vector-only search: say why instead of returning nothing.
            if let Some(issue) = readiness.first() {
                return Err(Error::InvalidSetting {
                    field: "mode".into(),
                    reason: format!("vector search is not possible here: {}", issue.message),
                });
            }
        }
    }

    let mut candidates: HashMap<i64, Candidate> = HashMap::new();
    let mut total: HashMap<i64, f32> = HashMap::new();
    let mut snippet_source = None;
    for (v, query) in streams.iter().enumerate() {
        let lexical = if settings.mode.uses_lexical() {
            let t = Instant::now();
            let results = ctx.fulltext.search(&FulltextQuery {
                text: &query.text,
                languages: &languages,
                collection_ids: &collection_ids,
                limit: settings.lexical_candidates,
            })?;
            let before = results.hits.len();
            let list: Vec<(i64, f32)> = results
                .hits
                .iter()
                .filter(|h| h.score >= settings.min_lexical_score)
                .map(|h| (h.chunk_id, h.score))
                .collect();
            trace.push(StageTrace {
                stage: "lexical",
                variant: Some(v),
                candidates: list.len(),
                took_us: us(t),
                detail: format!(
                    "BM25 over {} collection(s); {} below min_lexical_score dropped",
                    wanted.len(),
                    before - list.len()
                ),
            });
            if snippet_source.is_none() {
                snippet_source = Some(results);
            }
            Some(list)
        } else {
            None
        };
        let vector = if settings.mode.uses_vector() && !vector_targets.is_empty() {
            let t = Instant::now();
            let mut list: Vec<(i64, f32)> = Vec::new();
            let mut models = Vec::new();
            for target in &vector_targets {
                let q = target.embedder.embed_query(&query.text)?;
                let index = if settings.ann_breadth > 0 {
                    Some((ctx.sign_index)(&target.table, target.collection_id)?)
                } else {
                    None
                };
                let mut guard = index
                    .as_ref()
                    .map(|i| i.lock().unwrap_or_else(|e| e.into_inner()));
                list.extend(ctx.store.nearest_chunks(
                    &target.table,
                    target.collection_id,
                    &q,
                    settings.vector_candidates,
                    settings.ann_breadth,
                    guard.as_deref_mut(),
                )?);
                if !models.contains(&target.embedder.id()) {
                    models.push(target.embedder.id());
                }
            }
            list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            list.truncate(settings.vector_candidates);
            let before = list.len();
            list.retain(|x| x.1 >= settings.min_similarity);
            trace.push(StageTrace {
                stage: "vector",
                variant: Some(v),
                candidates: list.len(),
                took_us: us(t),
                detail: format!(
                    "cosine KNN with {} ({}); {} below min_similarity dropped",
                    models.join(", "),
                    if settings.ann_breadth == 0 {
                        "exact scan".to_string()
                    } else {
                        format!(
                            "in-memory sign-bit pass, {} rescored exactly",
                            settings.ann_breadth
                        )
                    },
                    before - list.len()
                ),
            });
            Some(list)
        } else {
            None
        };
        for (rank, &(id, s)) in lexical.iter().flatten().enumerate() {
            let c = candidates.entry(id).or_default();
            if c.scores.lexical_rank.is_none_or(|r| rank + 1 < r) {
                c.scores.lexical_rank = Some(rank + 1);
            }
            c.scores.lexical_score = Some(c.scores.lexical_score.map_or(s, |x| x.max(s)));
        }
        for (rank, &(id, s)) in vector.iter().flatten().enumerate() {
            let c = candidates.entry(id).or_default();
            if c.scores.vector_rank.is_none_or(|r| rank + 1 < r) {
                c.scores.vector_rank = Some(rank + 1);
            }
            c.scores.similarity = Some(c.scores.similarity.map_or(s, |x| x.max(s)));
        }
        let fused = fuse_variant(
            &VariantStreams {
                lexical: lexical.as_deref(),
                vector: vector.as_deref(),
            },
            settings.fusion,
        );
        accumulate(&mut total, fused, query.weight);
    }
    let t = Instant::now();
    for (id, s) in &total {
        if let Some(c) = candidates.get_mut(id) {
            c.scores.fused = *s;
            c.total = *s;
        }
    }
    trace.push(StageTrace {
        stage: "fusion",
        variant: None,
        candidates: candidates.len(),
        took_us: us(t),
        detail: match settings.fusion {
            Fusion::Rrf { k } => format!(
                "reciprocal rank fusion, k = {k}; {} variant(s)",
                streams.len()
            ),
            Fusion::Weighted { lexical_weight } => format!(
                "weighted min-max scores, lexical {lexical_weight} / vector {}; {} variant(s)",
                1.0 - lexical_weight,
                streams.len()
            ),
        },
    });

    // Join with SQLite: drops chunks deleted since the full-text commit.
    let ids: Vec<i64> = candidates.keys().copied().collect();
    let chunks: HashMap<i64, ChunkRecord> = ctx
        .store
        .chunks_by_id(&ids)?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    candidates.retain(|id, _| chunks.contains_key(id));

    if let Some(f) = &settings.freshness {
        let t = Instant::now();
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as f64)
            .unwrap_or(0.0);
        for (id, c) in candidates.iter_mut() {
            let age_days = chunks[id]
                .mtime_ns
                .map(|m| (now_ns - m as f64) / 86_400e9)
                .unwrap_or(0.0);
            let factor = freshness_factor(age_days, f.half_life_days, f.weight) as f32;
            c.scores.freshness = Some(factor);
            c.total *= factor;
        }
        trace.push(StageTrace {
            stage: "freshness",
            variant: None,
            candidates: candidates.len(),
            took_us: us(t),
            detail: format!("half-life {} days, weight {}", f.half_life_days, f.weight),
        });
    }

    let mut ranked: Vec<(i64, Candidate)> = candidates.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total.total_cmp(&a.1.total).then(a.0.cmp(&b.0)));
    let t = Instant::now();
    let before_fold = ranked.len();
    if settings.max_per_document > 0 {
        let mut per_document: HashMap<i64, usize> = HashMap::new();
        ranked.retain(|(id, _)| {
            let seen = per_document.entry(chunks[id].document_id).or_default();
            *seen += 1;
            *seen <= settings.max_per_document
        });
    }
    trace.push(StageTrace {
        stage: "fold",
        variant: None,
        candidates: ranked.len(),
        took_us: us(t),
        detail: format!(
            "at most {} per document; {} folded",
            settings.max_per_document,
            before_fold - ranked.len()
        ),
    });

    if let Some(rerank) = &settings.rerank {
        let t = Instant::now();
        match (ctx.reranker)(&rerank.model) {
            Ok(reranker) => {
                ranked.truncate(rerank.candidates);
                let passages: Vec<&str> = ranked
                    .iter()
                    .map(|(id, _)| chunks[id].text.as_str())
                    .collect();
                let scores = reranker.score(&request.query, &passages)?;
                for ((_, c), s) in ranked.iter_mut().zip(&scores) {
                    c.scores.rerank = Some(*s);
                }
                let before = ranked.len();
                if let Some(min) = rerank.min_score {
                    ranked.retain(|(_, c)| c.scores.rerank.unwrap_or(f32::NEG_INFINITY) >= min);
                }
                ranked.sort_by(|a, b| {
                    let (x, y) = (
                        a.1.scores.rerank.unwrap_or(f32::NEG_INFINITY),
                        b.1.scores.rerank.unwrap_or(f32::NEG_INFINITY),
                    );
                    y.total_cmp(&x).then(a.0.cmp(&b.0))
                });
                trace.push(StageTrace {
                    stage: "rerank",
                    variant: None,
                    candidates: ranked.len(),
                    took_us: us(t),
                    detail: format!(
                        "cross-encoder {} over {before} candidate(s); {} below min_score dropped",
                        reranker.id(),
                        before - ranked.len()
                    ),
                });
            }
            Err(e) => {
                readiness.push(ReadinessIssue {
                    component: "reranker",
                    message: e.to_string(),
                });
                trace.push(StageTrace {
                    stage: "rerank",
                    variant: None,
                    candidates: ranked.len(),
                    took_us: us(t),
                    detail: format!("NOT APPLIED: {e}"),
                });
            }
        }
    }

    ranked.truncate(settings.limit);
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
        let snippet = match snippet_source.as_mut() {
            Some(results) => results.snippet(language, &chunk.text, request.snippet_chars)?,
            None => Snippet::plain(&chunk.text, request.snippet_chars),
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
        });
    }
    Ok(SearchResults {
        hits,
        took_us: us(started),
        mode: settings.mode,
        trace,
        readiness,
    })
}

struct VectorTarget {
    collection_id: i64,
    table: VectorTable,
    embedder: Arc<Embedder>,
}

/// The collections a vector stream can search, each with its model and table. Missing models
/// and partial vectors become readiness issues; asking for a model other than a collection's
/// is an error (the plugin manual's rule).
fn vector_targets_for(
    ctx: &SearchContext<'_>,
    request: &SearchRequest,
    wanted: &[&Collection],
    readiness: &mut Vec<ReadinessIssue>,
) -> Result<Vec<VectorTarget>> {
    let mut targets = Vec::new();
    for c in wanted {
        let Some(model) = c.embedding_model.as_deref() else {
            readiness.push(ReadinessIssue {
                component: "embedding_model",
                message: format!(
                    "collection `{}` has no embedding model (`quarry models use <model> -c {}`)",
                    c.name, c.name
                ),
            });
            continue;
        };
        if let Some(requested) = &request.embedding_model {
            if requested != model {
                return Err(Error::ModelMismatch {
                    collection: c.name.clone(),
                    embedded_with: model.to_string(),
                    requested: requested.clone(),
                });
            }
        }
        // The model first: a missing or corrupt model is the more useful thing to report.
        let embedder = match (ctx.embedder)(model) {
            Ok(e) => e,
            // A vector-only search cannot do without it: the model's own error says what to run.
            Err(e) if request.settings.mode == SearchMode::Vector => return Err(e),
            Err(e) => {
                readiness.push(ReadinessIssue {
                    component: "embedding_model",
                    message: e.to_string(),
                });
                continue;
            }
        };
        let Some(table) = ctx.store.vector_table(model)? else {
            readiness.push(ReadinessIssue {
                component: "vectors_incomplete",
                message: format!(
                    "collection `{}` has no vectors yet (run `quarry index` to embed it)",
                    c.name
                ),
            });
            continue;
        };
        if c.pending_model.is_none() && !ctx.store.pending_chunks(c.id, model, 1)?.is_empty() {
            readiness.push(ReadinessIssue {
                component: "vectors_incomplete",
                message: format!(
                    "collection `{}` is still being embedded; vector results cover only the chunks embedded so far",
                    c.name
                ),
            });
        }
        targets.push(VectorTarget {
            collection_id: c.id,
            table,
            embedder,
        });
    }
    Ok(targets)
}
