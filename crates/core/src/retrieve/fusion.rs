//! Fusion of ranked candidate lists into one score per chunk, and the fusion stage that
//! gathers every variant's candidates. Pure functions, tested alone.

use std::collections::HashMap;
use std::time::Instant;

use super::settings::Fusion;
use super::{elapsed_us, StageScores, StageTrace};
use crate::ids::ChunkId;

/// A chunk some stream found, with what each stage gave it.
#[derive(Default)]
pub(super) struct Candidate {
    pub scores: StageScores,
    /// The score it is ranked by: fused, then times freshness.
    pub total: f32,
}

impl Candidate {
    /// How many rare query identifiers it contains exactly (0 when none or not looked for).
    pub fn identifier_matches(&self) -> u32 {
        self.scores.identifier_matches.unwrap_or(0)
    }
}

/// Every query variant's candidates so far, and their fused scores summed by variant weight.
#[derive(Default)]
pub(super) struct Pool {
    candidates: HashMap<ChunkId, Candidate>,
    total: HashMap<ChunkId, f32>,
}

impl Pool {
    /// Adds one variant: each chunk keeps its best rank and score per stream, and the
    /// variant's fused scores are added at `weight`.
    pub(super) fn add_variant(
        &mut self,
        streams: &VariantStreams<'_>,
        fusion: Fusion,
        weight: f32,
    ) {
        for (rank, &(id, s)) in streams.lexical.into_iter().flatten().enumerate() {
            let c = self.candidates.entry(id).or_default();
            if c.scores.lexical_rank.is_none_or(|r| rank + 1 < r) {
                c.scores.lexical_rank = Some(rank + 1);
            }
            c.scores.lexical_score = Some(c.scores.lexical_score.map_or(s, |x| x.max(s)));
        }
        for (rank, &(id, s)) in streams.vector.into_iter().flatten().enumerate() {
            let c = self.candidates.entry(id).or_default();
            if c.scores.vector_rank.is_none_or(|r| rank + 1 < r) {
                c.scores.vector_rank = Some(rank + 1);
            }
            c.scores.similarity = Some(c.scores.similarity.map_or(s, |x| x.max(s)));
        }
        accumulate(&mut self.total, fuse_variant(streams, fusion), weight);
    }

    /// Stage `fusion`: every candidate gets its fused score over the `variants` added.
    pub(super) fn fuse(
        self,
        fusion: Fusion,
        variants: usize,
    ) -> (HashMap<ChunkId, Candidate>, StageTrace) {
        let t = Instant::now();
        let mut candidates = self.candidates;
        for (id, s) in &self.total {
            if let Some(c) = candidates.get_mut(id) {
                c.scores.fused = *s;
                c.total = *s;
            }
        }
        let detail = match fusion {
            Fusion::Rrf { k } => format!("reciprocal rank fusion, k = {k}; {variants} variant(s)"),
            Fusion::Weighted { lexical_weight } => format!(
                "weighted min-max scores, lexical {lexical_weight} / vector {}; {variants} variant(s)",
                1.0 - lexical_weight,
            ),
        };
        let trace = StageTrace {
            stage: "fusion",
            variant: None,
            candidates: candidates.len(),
            took_us: elapsed_us(t),
            detail,
        };
        (candidates, trace)
    }
}

/// Scores of one query variant's streams, best first: `(chunk id, score)`.
pub(crate) struct VariantStreams<'a> {
    pub lexical: Option<&'a [(ChunkId, f32)]>,
    pub vector: Option<&'a [(ChunkId, f32)]>,
}

/// Min-max normalises scores to 0..1 (all equal → all 1).
fn normalised(list: &[(ChunkId, f32)]) -> impl Iterator<Item = (ChunkId, f32)> + '_ {
    let max = list.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    let min = list.iter().map(|x| x.1).fold(f32::INFINITY, f32::min);
    let span = max - min;
    list.iter().map(move |&(id, s)| {
        let n = if span > f32::EPSILON {
            (s - min) / span
        } else {
            1.0
        };
        (id, n)
    })
}

/// One variant's fused score per chunk. A stream that is absent (its mode is off, or no
/// vectors exist) gives its share to the other, so a one-stream search ranks by that stream.
pub(crate) fn fuse_variant(streams: &VariantStreams<'_>, fusion: Fusion) -> HashMap<ChunkId, f32> {
    let mut fused: HashMap<ChunkId, f32> = HashMap::new();
    match fusion {
        Fusion::Rrf { k } => {
            for list in [streams.lexical, streams.vector].into_iter().flatten() {
                for (rank, &(id, _)) in list.iter().enumerate() {
                    *fused.entry(id).or_default() += 1.0 / (k + rank as f32 + 1.0);
                }
            }
        }
        Fusion::Weighted { lexical_weight } => {
            let (lw, vw) = match (streams.lexical, streams.vector) {
                (Some(_), Some(_)) => (lexical_weight, 1.0 - lexical_weight),
                (Some(_), None) => (1.0, 0.0),
                (None, Some(_)) => (0.0, 1.0),
                (None, None) => (0.0, 0.0),
            };
            for (list, weight) in [(streams.lexical, lw), (streams.vector, vw)] {
                if let Some(list) = list {
                    for (id, n) in normalised(list) {
                        *fused.entry(id).or_default() += weight * n;
                    }
                }
            }
        }
    }
    fused
}

/// Adds one variant's fused scores, weighted, into the running total.
pub(crate) fn accumulate(
    total: &mut HashMap<ChunkId, f32>,
    variant: HashMap<ChunkId, f32>,
    weight: f32,
) {
    for (id, s) in variant {
        *total.entry(id).or_default() += weight * s;
    }
}

/// The freshness multiplier for a document `age_days` old.
pub(crate) fn freshness_factor(age_days: f64, half_life_days: f64, weight: f64) -> f64 {
    let age = age_days.max(0.0);
    (1.0 - weight) + weight * 0.5f64.powf(age / half_life_days)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of (chunk id, score) pairs.
    fn stream<const N: usize>(pairs: [(i64, f32); N]) -> Vec<(ChunkId, f32)> {
        pairs.into_iter().map(|(id, s)| (ChunkId(id), s)).collect()
    }

    #[test]
    fn rrf_sums_reciprocal_ranks() {
        let lex = stream([(1, 9.0), (2, 5.0)]);
        let vec = stream([(2, 0.9), (3, 0.8)]);
        let f = fuse_variant(
            &VariantStreams {
                lexical: Some(&lex),
                vector: Some(&vec),
            },
            Fusion::Rrf { k: 60.0 },
        );
        assert!((f[&ChunkId(1)] - 1.0 / 61.0).abs() < 1e-6);
        assert!((f[&ChunkId(2)] - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-6);
        assert!((f[&ChunkId(3)] - 1.0 / 62.0).abs() < 1e-6);
    }

    #[test]
    fn weighted_fusion_normalises_each_stream() {
        let lex = stream([(1, 10.0), (2, 6.0), (3, 2.0)]);
        let vec = stream([(3, 0.9), (4, 0.5)]);
        let f = fuse_variant(
            &VariantStreams {
                lexical: Some(&lex),
                vector: Some(&vec),
            },
            Fusion::Weighted {
                lexical_weight: 0.25,
            },
        );
        assert!((f[&ChunkId(1)] - 0.25).abs() < 1e-6);
        assert!((f[&ChunkId(2)] - 0.125).abs() < 1e-6);
        assert!((f[&ChunkId(3)] - 0.75).abs() < 1e-6); // lexical min (0) + vector max (1) × 0.75
        assert!((f[&ChunkId(4)] - 0.0).abs() < 1e-6);
        // One stream alone takes the whole weight.
        let only = fuse_variant(
            &VariantStreams {
                lexical: Some(&lex),
                vector: None,
            },
            Fusion::Weighted {
                lexical_weight: 0.25,
            },
        );
        assert!((only[&ChunkId(1)] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn variants_add_by_weight_and_freshness_halves() {
        let mut total = HashMap::new();
        accumulate(
            &mut total,
            HashMap::from([(ChunkId(1), 1.0), (ChunkId(2), 0.5)]),
            1.0,
        );
        accumulate(&mut total, HashMap::from([(ChunkId(2), 1.0)]), 0.8);
        assert!((total[&ChunkId(1)] - 1.0).abs() < 1e-6);
        assert!((total[&ChunkId(2)] - 1.3).abs() < 1e-6);
        assert!((freshness_factor(0.0, 30.0, 0.5) - 1.0).abs() < 1e-9);
        assert!((freshness_factor(30.0, 30.0, 0.5) - 0.75).abs() < 1e-9);
        assert!((freshness_factor(30.0, 30.0, 0.0) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_pool_keeps_each_chunks_best_rank_and_sums_variants() {
        let mut pool = Pool::default();
        let fusion = Fusion::Rrf { k: 60.0 };
        let (lex, vec) = (stream([(1, 9.0), (2, 5.0)]), stream([(2, 0.9)]));
        let first = VariantStreams {
            lexical: Some(&lex),
            vector: Some(&vec),
        };
        pool.add_variant(&first, fusion, 1.0);
        let second = VariantStreams {
            lexical: Some(&stream([(2, 7.0)])),
            vector: None,
        };
        pool.add_variant(&second, fusion, 0.5);
        let (candidates, trace) = pool.fuse(fusion, 2);
        assert_eq!(trace.stage, "fusion");
        assert_eq!(trace.candidates, 2);
        let two = &candidates[&ChunkId(2)].scores;
        assert_eq!((two.lexical_rank, two.lexical_score), (Some(1), Some(7.0)));
        assert_eq!((two.vector_rank, two.similarity), (Some(1), Some(0.9)));
        let expected = 1.0 / 62.0 + 1.0 / 61.0 + 0.5 / 61.0;
        assert!((two.fused - expected).abs() < 1e-6);
        assert_eq!(candidates[&ChunkId(2)].total, two.fused);
    }
}
