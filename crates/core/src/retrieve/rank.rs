//! The stages after fusion that need the chunks' rows: the join with SQLite, freshness and
//! the per-document fold.

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::fusion::{freshness_factor, Candidate};
use super::{elapsed_us, Freshness, StageTrace};
use crate::error::Result;
use crate::ids::{ChunkId, DocumentId};
use crate::store::{ChunkRecord, Store};

/// Candidates in ranked order, best first.
pub(super) type Ranked = Vec<(ChunkId, Candidate)>;

/// `rows` with the rows of `ids` it lacks; ids whose chunk was deleted stay absent.
pub(super) fn fetch_rows(
    store: &Store,
    ids: Vec<ChunkId>,
    mut rows: HashMap<ChunkId, ChunkRecord>,
) -> Result<HashMap<ChunkId, ChunkRecord>> {
    let missing: Vec<ChunkId> = ids
        .into_iter()
        .filter(|id| !rows.contains_key(id))
        .collect();
    rows.extend(store.chunks_by_id(&missing)?.into_iter().map(|c| (c.id, c)));
    Ok(rows)
}

/// The candidates' chunk rows (those of `rows`, and any candidate a later stage added).
/// SQLite has the last word: a candidate whose chunk was deleted since the full-text commit
/// is dropped.
pub(super) fn join_chunks(
    store: &Store,
    rows: HashMap<ChunkId, ChunkRecord>,
    candidates: &mut HashMap<ChunkId, Candidate>,
) -> Result<HashMap<ChunkId, ChunkRecord>> {
    let chunks = fetch_rows(store, candidates.keys().copied().collect(), rows)?;
    candidates.retain(|id, _| chunks.contains_key(id));
    Ok(chunks)
}

/// Stage `freshness`: each candidate's score times its document's age factor.
pub(super) fn freshness(
    candidates: &mut HashMap<ChunkId, Candidate>,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    f: &Freshness,
) -> StageTrace {
    let t = Instant::now();
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
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
    StageTrace {
        stage: "freshness",
        variant: None,
        candidates: candidates.len(),
        took_us: elapsed_us(t),
        detail: format!("half-life {} days, weight {}", f.half_life_days, f.weight),
    }
}

/// The candidates best first by their fused (and freshness) score.
pub(super) fn ranked(candidates: HashMap<ChunkId, Candidate>) -> Ranked {
    let mut ranked: Ranked = candidates.into_iter().collect();
    best_first(&mut ranked, |c| c.total);
    ranked
}

/// Sorts best first: more exact identifier matches first, then by `score` (ties by chunk id,
/// so the order is stable). Ranking and reranking both order this way.
pub(super) fn best_first(ranked: &mut Ranked, score: impl Fn(&Candidate) -> f32) {
    ranked.sort_by(|a, b| {
        (b.1.identifier_matches().cmp(&a.1.identifier_matches()))
            .then(score(&b.1).total_cmp(&score(&a.1)))
            .then(a.0.cmp(&b.0))
    });
}

/// Stage `fold`: at most `max_per_document` hits per document (0: no limit), the best kept.
pub(super) fn fold(
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    max_per_document: usize,
) -> StageTrace {
    let t = Instant::now();
    let before = ranked.len();
    if max_per_document > 0 {
        let mut per_document: HashMap<DocumentId, usize> = HashMap::new();
        ranked.retain(|(id, _)| {
            let seen = per_document.entry(chunks[id].document_id).or_default();
            *seen += 1;
            *seen <= max_per_document
        });
    }
    StageTrace {
        stage: "fold",
        variant: None,
        candidates: ranked.len(),
        took_us: elapsed_us(t),
        detail: format!(
            "at most {max_per_document} per document; {} folded",
            before - ranked.len()
        ),
    }
}
