//! How sure the first search is of its ranking, so the expensive passes (a chat model
//! reranking, query expansion) run only when it is not. Three signals, each 0 to 1:
//! - `agreement`: how many of the lexical stream's best 5 pages the vector stream also ranks
//!   in its best 5 (hybrid only);
//! - `margin`: how far the best page's fused score stands above the second's;
//! - `coverage`: the share of the query's content words found in the best hit (questions
//!   asked in other words than the page's are the ones a first search misses).
//!
//! The certainty is their mean.

use std::collections::HashMap;

use serde::Serialize;

use super::pages::VariantFound;
use super::rank::Ranked;
use crate::ids::{ChunkId, DocumentId};
use crate::store::ChunkRecord;

/// Pages compared by `agreement`.
const TOP_PAGES: usize = 5;

/// The first search's certainty and what it was made of.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Certainty {
    /// The mean of the signals present, 0 to 1.
    pub value: f32,
    /// Lexical and vector best pages in common (`None` unless hybrid).
    pub agreement: Option<f32>,
    /// The best page's lead over the second, relative to its score.
    pub margin: f32,
    /// The query's content words found in the best hit.
    pub coverage: f32,
}

impl std::fmt::Display for Certainty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "certainty {:.2} (", self.value)?;
        if let Some(a) = self.agreement {
            write!(f, "agreement {a:.2}, ")?;
        }
        write!(
            f,
            "margin {:.2}, coverage {:.2})",
            self.margin, self.coverage
        )
    }
}

/// Measures the first search: its first (original) query's streams and the ranking.
pub(super) fn measure(
    query: &str,
    first: Option<&VariantFound>,
    ranked: &Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
) -> Certainty {
    let agreement = first.and_then(|f| match (&f.lexical, &f.vector) {
        (Some(lexical), Some(vector)) => {
            let lexical = best_pages(lexical, chunks);
            let vector = best_pages(vector, chunks);
            let shared = lexical.iter().filter(|d| vector.contains(d)).count();
            Some(shared as f32 / TOP_PAGES as f32)
        }
        _ => None,
    });
    let margin = match &ranked[..] {
        [(_, a), (_, b), ..] if a.total > 0.0 => ((a.total - b.total) / a.total).clamp(0.0, 1.0),
        [_] => 1.0,
        _ => 0.0,
    };
    let coverage = ranked
        .first()
        .and_then(|(id, _)| chunks.get(id))
        .map_or(0.0, |c| word_coverage(query, c));
    let signals: Vec<f32> = agreement.into_iter().chain([margin, coverage]).collect();
    Certainty {
        value: signals.iter().sum::<f32>() / signals.len() as f32,
        agreement,
        margin,
        coverage,
    }
}

/// The documents of a stream's best chunks, best first, up to [`TOP_PAGES`].
fn best_pages(list: &[(ChunkId, f32)], chunks: &HashMap<ChunkId, ChunkRecord>) -> Vec<DocumentId> {
    let mut sorted: Vec<&(ChunkId, f32)> = list.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut pages = Vec::with_capacity(TOP_PAGES);
    for (id, _) in sorted {
        let Some(c) = chunks.get(id) else { continue };
        if !pages.contains(&c.document_id) {
            pages.push(c.document_id);
            if pages.len() == TOP_PAGES {
                break;
            }
        }
    }
    pages
}

/// Common English words that say nothing about which page answers.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "her", "was", "one",
    "our", "out", "has", "have", "how", "its", "may", "who", "why", "what", "when", "where",
    "which", "with", "does", "did", "this", "that", "there", "their", "then", "than", "into",
    "from", "will", "would", "should", "could", "about", "your", "mine", "some", "like", "get",
    "use", "using", "way", "make", "want", "need", "still", "just", "only", "also", "them", "they",
    "these", "those", "been", "being", "were", "each", "other", "more", "most", "own",
];

/// The share of `query`'s content words (3+ letters, not stop words) that the chunk's title,
/// headings or text contain, compared by their first five letters (a rough stem: `compile`
/// matches `compiling`).
fn word_coverage(query: &str, chunk: &ChunkRecord) -> f32 {
    let stem = |w: &str| w.chars().take(5).collect::<String>();
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= 3)
            .map(str::to_lowercase)
            .collect()
    };
    let mut wanted: Vec<String> = words(query)
        .into_iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect();
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return 1.0;
    }
    let page = format!(
        "{} {} {}",
        chunk.title.as_deref().unwrap_or(""),
        chunk.heading_path,
        chunk.text
    );
    let present: std::collections::HashSet<String> = words(&page).iter().map(|w| stem(w)).collect();
    wanted.iter().filter(|w| present.contains(*w)).count() as f32 / wanted.len() as f32
}
