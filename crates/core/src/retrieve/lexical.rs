//! The lexical stage: BM25 candidates from the full-text index.

use std::time::Instant;

use super::plan::Searched;
use super::{elapsed_us, RetrievalSettings, SearchContext, StageTrace};
use crate::error::Result;
use crate::fulltext::{FulltextQuery, FulltextResults};
use crate::ids::ChunkId;

/// One query variant's lexical candidates, best first, and the full-text results they came
/// from (kept to highlight snippets).
pub(super) struct LexicalStream {
    pub list: Vec<(ChunkId, f32)>,
    pub results: FulltextResults,
}

/// Stage `lexical` for query variant `variant`: BM25 over the searched collections, without
/// the candidates below `min_lexical_score`.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    searched: &Searched<'_>,
    settings: &RetrievalSettings,
    text: &str,
    variant: usize,
) -> Result<(LexicalStream, StageTrace)> {
    let t = Instant::now();
    let results = ctx.fulltext.search(&FulltextQuery {
        text,
        languages: &searched.languages,
        collection_ids: &searched.ids,
        limit: settings.lexical_candidates,
    })?;
    let before = results.hits.len();
    let list: Vec<(ChunkId, f32)> = results
        .hits
        .iter()
        .filter(|h| h.score >= settings.min_lexical_score)
        .map(|h| (h.chunk_id, h.score))
        .collect();
    let trace = StageTrace {
        stage: "lexical",
        variant: Some(variant),
        candidates: list.len(),
        took_us: elapsed_us(t),
        detail: format!(
            "BM25 over {} collection(s); {} below min_lexical_score dropped",
            searched.collections.len(),
            before - list.len()
        ),
    };
    Ok((LexicalStream { list, results }, trace))
}
