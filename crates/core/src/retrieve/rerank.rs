//! The rerank stage: a cross-encoder scores the best candidates against the query.

use std::collections::HashMap;
use std::time::Instant;

use super::rank::Ranked;
use super::{elapsed_us, ReadinessIssue, RerankSettings, SearchContext, StageTrace};
use crate::embed::Reranker;
use crate::error::Result;
use crate::ids::ChunkId;
use crate::store::ChunkRecord;

/// Stage `rerank`: the best `candidates` reordered by cross-encoder score, those below
/// `min_score` dropped. A reranker that cannot load leaves the ranking as it was and says so
/// in the trace and the readiness issue.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    query: &str,
    settings: &RerankSettings,
) -> Result<(StageTrace, Option<ReadinessIssue>)> {
    let t = Instant::now();
    let reranker = match (ctx.reranker)(&settings.model) {
        Ok(reranker) => reranker,
        Err(e) => {
            let trace = StageTrace {
                stage: "rerank",
                variant: None,
                candidates: ranked.len(),
                took_us: elapsed_us(t),
                detail: format!("NOT APPLIED: {e}"),
            };
            let issue = ReadinessIssue {
                component: "reranker",
                message: e.to_string(),
            };
            return Ok((trace, Some(issue)));
        }
    };
    ranked.truncate(settings.candidates);
    let before = ranked.len();
    rescore(&reranker, ranked, chunks, query, settings.min_score)?;
    let trace = StageTrace {
        stage: "rerank",
        variant: None,
        candidates: ranked.len(),
        took_us: elapsed_us(t),
        detail: format!(
            "cross-encoder {} over {before} candidate(s); {} below min_score dropped",
            reranker.id(),
            before - ranked.len()
        ),
    };
    Ok((trace, None))
}

fn rescore(
    reranker: &Reranker,
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    query: &str,
    min_score: Option<f32>,
) -> Result<()> {
    let passages: Vec<&str> = ranked
        .iter()
        .map(|(id, _)| chunks[id].text.as_str())
        .collect();
    let scores = reranker.score(query, &passages)?;
    for ((_, c), s) in ranked.iter_mut().zip(&scores) {
        c.scores.rerank = Some(*s);
    }
    let score = |c: &super::fusion::Candidate| c.scores.rerank.unwrap_or(f32::NEG_INFINITY);
    if let Some(min) = min_score {
        ranked.retain(|(_, c)| score(c) >= min);
    }
    // The cross-encoder reorders within the exact identifier matches and within the rest.
    super::rank::best_first(ranked, score);
    Ok(())
}
