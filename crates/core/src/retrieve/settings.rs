//! Retrieval settings: everything a retrieval tool is made of (the seed manual's fields), with
//! defaults measured on this project's eval sets and validation that names the bad field.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which candidate streams a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum SearchMode {
    /// BM25 only.
    Lexical,
    /// Embeddings only.
    Vector,
    /// Both, fused.
    #[default]
    Hybrid,
}

impl SearchMode {
    /// Parses `lexical`, `vector` or `hybrid`.
    pub fn parse(s: &str) -> Result<SearchMode> {
        match s {
            "lexical" => Ok(SearchMode::Lexical),
            "vector" | "semantic" => Ok(SearchMode::Vector),
            "hybrid" => Ok(SearchMode::Hybrid),
            _ => Err(Error::InvalidSetting {
                field: "mode".into(),
                reason: format!("`{s}` is not one of lexical, vector, hybrid"),
            }),
        }
    }

    /// The name used in settings and output.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Lexical => "lexical",
            SearchMode::Vector => "vector",
            SearchMode::Hybrid => "hybrid",
        }
    }

    pub(crate) fn uses_lexical(self) -> bool {
        matches!(self, SearchMode::Lexical | SearchMode::Hybrid)
    }

    pub(crate) fn uses_vector(self) -> bool {
        matches!(self, SearchMode::Vector | SearchMode::Hybrid)
    }
}

/// How the lexical and vector streams (and the query variants) become one ranking.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Fusion {
    /// Reciprocal Rank Fusion: Σ 1 / (k + rank).
    Rrf {
        /// The damping constant (60 in the original paper).
        k: f32,
    },
    /// Min-max normalised scores, `lexical_weight` × lexical + (1 − it) × vector.
    Weighted {
        /// Share of the lexical score, 0 to 1.
        lexical_weight: f32,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        // Measured on Cranfield and the long-page set with the shipped MiniLM model, pages
        // weighed: see docs/architecture.md.
        Fusion::Weighted {
            lexical_weight: 0.5,
        }
    }
}

/// Older documents score lower: score × ((1 − weight) + weight × 0.5^(age / half-life)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Freshness {
    /// Age at which the fresh share halves, in days.
    pub half_life_days: f64,
    /// Share of the score that decays, 0 to 1.
    pub weight: f64,
}

/// Reranking of the best fused candidates: by an ONNX cross-encoder, or by a GGUF chat model
/// judging each candidate (the probability it answers "yes" to "does this answer the
/// query?"), blended half and half with the fused score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankSettings {
    /// An installed reranker's id, or an installed chat model's id (or a GGUF file's path).
    pub model: String,
    /// How many of the best fused candidates are reranked (a cross-encoder drops the rest;
    /// after a chat model's judgements they follow in their fused order).
    pub candidates: usize,
    /// Candidates scoring below this are dropped.
    pub min_score: Option<f32>,
    /// When it runs: `always`, or only when the first search is `unsure` (see
    /// `unsure_below`).
    pub when: RerankWhen,
    /// With `when: unsure`: the first search's certainty (0 to 1) below which it runs.
    pub unsure_below: f32,
    /// A chat model: stop judging new candidates after this many milliseconds (`None`: no
    /// limit); the ones left unjudged keep only their fused rank's share.
    pub time_budget_ms: Option<u64>,
    /// A chat model: tokens of each candidate it reads (title and headings included).
    pub passage_tokens: usize,
}

/// When a rerank runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RerankWhen {
    /// On every search.
    #[default]
    Always,
    /// Only when the first search is unsure of its ranking.
    Unsure,
}

impl RerankSettings {
    /// A deep search's rerank: the chat model `model` judges the best 10 pages, only when the
    /// first search is unsure, within 2.5 s. Measured on the long-page set's tuning half (see
    /// docs/architecture.md).
    pub fn judged_by(model: impl Into<String>) -> RerankSettings {
        RerankSettings {
            model: model.into(),
            candidates: 10,
            when: RerankWhen::Unsure,
            time_budget_ms: Some(2500),
            ..RerankSettings::default()
        }
    }
}

impl Default for RerankSettings {
    fn default() -> Self {
        RerankSettings {
            model: "bge-reranker-base".into(),
            candidates: 30,
            min_score: None,
            when: RerankWhen::Always,
            unsure_below: 0.4,
            time_budget_ms: None,
            passage_tokens: 128,
        }
    }
}

/// Pages are ranked by the evidence of all they say, not by one lucky fragment. The lexical
/// stream scores a page by BM25 over its whole text (`whole_page`) beside its best chunk's;
/// the vector stream scores it by its best chunk's similarity plus `weight` × its next best
/// (up to `chunks` in all, each added at `weight` to the power of its place). A page's best
/// chunk stays the hit, its snippet and its citation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageEvidence {
    /// Share of a page's lexical score that is BM25 over its whole text, 0 to 1 (0: its best
    /// chunk alone).
    pub whole_page: f32,
    /// Vector stream: chunks of one page that count, its best included (1: the best alone).
    pub chunks: usize,
    /// Vector stream: what the second best counts for relative to the best; the third
    /// counts `weight²`.
    pub weight: f32,
}

impl Default for PageEvidence {
    fn default() -> Self {
        // Measured on the long-page set (tests/data/rust-docs-qa) and Cranfield: see
        // docs/architecture.md.
        PageEvidence {
            whole_page: 0.7,
            chunks: 1,
            weight: 0.5,
        }
    }
}

/// Every retrieval setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalSettings {
    /// Lexical, vector or hybrid.
    pub mode: SearchMode,
    /// Chunks taken from BM25 per query variant.
    pub lexical_candidates: usize,
    /// Chunks taken from the vector index per query variant.
    pub vector_candidates: usize,
    /// BM25 scores below this are dropped.
    pub min_lexical_score: f32,
    /// Cosine similarities below this are dropped.
    pub min_similarity: f32,
    /// How streams and variants are fused.
    pub fusion: Fusion,
    /// Optional recency preference.
    pub freshness: Option<Freshness>,
    /// Sign-bit candidates rescored exactly per collection (ANN breadth); 0 = exact scan.
    pub ann_breadth: usize,
    /// Optional cross-encoder pass.
    pub rerank: Option<RerankSettings>,
    /// Results returned (the evidence limit).
    pub limit: usize,
    /// Most results from one document (0: no limit).
    pub max_per_document: usize,
    /// Hybrid search ranks the chunks that contain a rare identifier from the query exactly
    /// (`E0502`, `XR-200`, `parse_header`) ahead of the rest. Default true.
    pub identifiers_first: bool,
    /// How several chunks of one page add up (`None`: a page is its best chunk).
    pub page_evidence: Option<PageEvidence>,
    /// The same chunk text in several files is one hit, the copy in the smallest document,
    /// naming the others (`also_at`). Default true.
    pub fold_copies: bool,
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        RetrievalSettings {
            mode: SearchMode::Hybrid,
            lexical_candidates: 100,
            vector_candidates: 100,
            min_lexical_score: 0.0,
            min_similarity: 0.0,
            fusion: Fusion::default(),
            freshness: None,
            ann_breadth: 400,
            rerank: None,
            limit: 10,
            max_per_document: 1,
            identifiers_first: true,
            page_evidence: Some(PageEvidence::default()),
            fold_copies: true,
        }
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidSetting {
        field: field.into(),
        reason: reason.into(),
    }
}

impl RetrievalSettings {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if !(1..=1000).contains(&self.limit) {
            return Err(invalid(
                "limit",
                format!("{} is not between 1 and 1000", self.limit),
            ));
        }
        for (field, n) in [
            ("lexical_candidates", self.lexical_candidates),
            ("vector_candidates", self.vector_candidates),
        ] {
            if !(1..=10_000).contains(&n) {
                return Err(invalid(field, format!("{n} is not between 1 and 10000")));
            }
        }
        if self.ann_breadth > 100_000 {
            return Err(invalid("ann_breadth", "at most 100000"));
        }
        if !self.min_lexical_score.is_finite() || self.min_lexical_score < 0.0 {
            return Err(invalid("min_lexical_score", "must be 0 or more"));
        }
        if !(-1.0..=1.0).contains(&self.min_similarity) {
            return Err(invalid(
                "min_similarity",
                "a cosine similarity is between -1 and 1",
            ));
        }
        match self.fusion {
            Fusion::Rrf { k } if !(k.is_finite() && k > 0.0) => {
                return Err(invalid("fusion.k", "must be more than 0"))
            }
            Fusion::Weighted { lexical_weight } if !(0.0..=1.0).contains(&lexical_weight) => {
                return Err(invalid("fusion.lexical_weight", "must be between 0 and 1"))
            }
            _ => {}
        }
        if let Some(f) = &self.freshness {
            if !(f.half_life_days.is_finite() && f.half_life_days > 0.0) {
                return Err(invalid("freshness.half_life_days", "must be more than 0"));
            }
            if !(0.0..=1.0).contains(&f.weight) {
                return Err(invalid("freshness.weight", "must be between 0 and 1"));
            }
        }
        if let Some(p) = &self.page_evidence {
            if !(0.0..=1.0).contains(&p.whole_page) {
                return Err(invalid(
                    "page_evidence.whole_page",
                    "must be between 0 and 1",
                ));
            }
            if !(1..=100).contains(&p.chunks) {
                return Err(invalid("page_evidence.chunks", "must be between 1 and 100"));
            }
            if !(0.0..=1.0).contains(&p.weight) {
                return Err(invalid("page_evidence.weight", "must be between 0 and 1"));
            }
        }
        if let Some(r) = &self.rerank {
            if r.model.trim().is_empty() {
                return Err(invalid("rerank.model", "names no model"));
            }
            if !(1..=1000).contains(&r.candidates) {
                return Err(invalid("rerank.candidates", "must be between 1 and 1000"));
            }
            if !(0.0..=1.0).contains(&r.unsure_below) {
                return Err(invalid("rerank.unsure_below", "must be between 0 and 1"));
            }
            if !(16..=1024).contains(&r.passage_tokens) {
                return Err(invalid(
                    "rerank.passage_tokens",
                    "must be between 16 and 1024",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_json() {
        let s = RetrievalSettings::default();
        s.validate().unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: RetrievalSettings = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        let partial: RetrievalSettings =
            serde_json::from_str(r#"{"mode":"lexical","fusion":{"method":"rrf","k":60}}"#).unwrap();
        assert_eq!(partial.mode, SearchMode::Lexical);
        assert_eq!(partial.fusion, Fusion::Rrf { k: 60.0 });
        assert_eq!(partial.limit, 10);
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: Vec<(&str, RetrievalSettings)> = vec![
            (
                "limit",
                RetrievalSettings {
                    limit: 0,
                    ..Default::default()
                },
            ),
            (
                "vector_candidates",
                RetrievalSettings {
                    vector_candidates: 0,
                    ..Default::default()
                },
            ),
            (
                "min_similarity",
                RetrievalSettings {
                    min_similarity: 1.5,
                    ..Default::default()
                },
            ),
            (
                "fusion.k",
                RetrievalSettings {
                    fusion: Fusion::Rrf { k: 0.0 },
                    ..Default::default()
                },
            ),
            (
                "fusion.lexical_weight",
                RetrievalSettings {
                    fusion: Fusion::Weighted {
                        lexical_weight: 2.0,
                    },
                    ..Default::default()
                },
            ),
            (
                "freshness.half_life_days",
                RetrievalSettings {
                    freshness: Some(Freshness {
                        half_life_days: 0.0,
                        weight: 0.5,
                    }),
                    ..Default::default()
                },
            ),
            (
                "page_evidence.weight",
                RetrievalSettings {
                    page_evidence: Some(PageEvidence {
                        weight: 1.5,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            (
                "rerank.candidates",
                RetrievalSettings {
                    rerank: Some(RerankSettings {
                        candidates: 0,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            (
                "rerank.unsure_below",
                RetrievalSettings {
                    rerank: Some(RerankSettings {
                        unsure_below: 1.5,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            (
                "rerank.passage_tokens",
                RetrievalSettings {
                    rerank: Some(RerankSettings {
                        passage_tokens: 4,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
        ];
        for (field, settings) in cases {
            let err = settings.validate().unwrap_err();
            assert_eq!(err.code(), "invalid_setting");
            assert!(
                err.to_string().contains(&format!("`{field}`")),
                "{field}: {err}"
            );
        }
        let unknown = serde_json::from_str::<RetrievalSettings>(r#"{"limt": 3}"#).unwrap_err();
        assert!(unknown.to_string().contains("limt"));
        assert_eq!(
            SearchMode::parse("fuzzy").unwrap_err().code(),
            "invalid_setting"
        );
    }
}
