//! Stage `pages`: the candidate streams before fusion, as pages rather than fragments.
//!
//! 1. Copies: the same chunk text in several documents (a print-all page, an old edition, a
//!    file under two paths) is one candidate, the copy in the document with the fewest chunks
//!    (the page itself, not the page that holds every page); the other places are listed on
//!    the hit as "also at".
//! 2. Page evidence in the vector stream: a document scores its best chunk's similarity plus
//!    the decayed similarities of its next best ([`PageEvidence`]), so evidence spread over a
//!    page's sections adds up; the best chunk stays the hit and its citation.
//! 3. Whole pages in the lexical stream: each chunk ranked by its page's whole-text BM25 beside
//!    its best chunk's ([`super::lexical::weigh_pages`]). After the fold, so a print-all page
//!    lends no chunk its score.

use std::collections::HashMap;
use std::time::Instant;

use super::{elapsed_us, PageEvidence, RetrievalSettings, StageTrace};
use crate::error::Result;
use crate::ids::{ChunkId, CollectionId, DocumentId};
use crate::store::{text_hash, ChunkRecord, Store, TextCopy};

/// One query variant's streams, `(chunk, score)` best first.
pub(super) struct VariantFound {
    pub lexical: Option<Vec<(ChunkId, f32)>>,
    /// The best pages by their whole text, when the lexical stream weighs pages.
    pub lexical_pages: Option<Vec<(DocumentId, f32)>>,
    pub vector: Option<Vec<(ChunkId, f32)>>,
    pub weight: f32,
}

impl VariantFound {
    fn lists_mut(&mut self) -> impl Iterator<Item = &mut Vec<(ChunkId, f32)>> {
        self.lexical.iter_mut().chain(self.vector.iter_mut())
    }
}

/// Which candidates are copies of which.
#[derive(Default)]
pub(super) struct Copies {
    /// A candidate that is a copy → the chunk kept for it.
    canonical: HashMap<ChunkId, ChunkId>,
    /// A kept chunk → its copies.
    pub also_at: HashMap<ChunkId, Vec<ChunkId>>,
    /// A kept chunk → its document (it may not be a candidate yet).
    documents: HashMap<ChunkId, DocumentId>,
}

impl Copies {
    /// For each candidate, the chunks anywhere in the library with the same text (repeated
    /// copies left out): a group in two documents or more keeps the chunk of the document with
    /// the fewest chunks (ties: the lowest chunk id), candidate or not.
    pub fn find(chunks: &HashMap<ChunkId, ChunkRecord>, copies: &[TextCopy]) -> Copies {
        let mut by_hash: HashMap<i64, Vec<&TextCopy>> = HashMap::new();
        for copy in copies {
            by_hash.entry(copy.text_hash).or_default().push(copy);
        }
        let mut found = Copies::default();
        for group in by_hash.values_mut() {
            group.sort_by_key(|c| (c.document_chunks, c.id));
            group.dedup_by_key(|c| c.id);
            let documents: std::collections::HashSet<DocumentId> =
                group.iter().map(|c| c.document_id).collect();
            if documents.len() < 2 {
                continue;
            }
            let kept = group[0];
            found.documents.insert(kept.id, kept.document_id);
            // Only candidates need a way to their kept copy; every copy is named on the hit.
            let others: Vec<ChunkId> = group[1..].iter().map(|c| c.id).collect();
            for &other in &others {
                if chunks.contains_key(&other) {
                    found.canonical.insert(other, kept.id);
                }
            }
            found.also_at.insert(kept.id, others);
        }
        found
    }

    /// `list` with each copy replaced by its kept candidate at the best score of the two, each
    /// candidate once, best first.
    fn fold(&self, list: &[(ChunkId, f32)]) -> Vec<(ChunkId, f32)> {
        let mut best: HashMap<ChunkId, f32> = HashMap::with_capacity(list.len());
        for &(id, score) in list {
            let id = self.canonical.get(&id).copied().unwrap_or(id);
            let entry = best.entry(id).or_insert(score);
            *entry = entry.max(score);
        }
        best_first(best.into_iter().collect())
    }
}

fn best_first(mut list: Vec<(ChunkId, f32)>) -> Vec<(ChunkId, f32)> {
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    list
}

/// Each chunk's score plus its page's evidence from its other chunks in `list`: the
/// document's 2nd to `chunks`-th best scores, the i-th added at `weight^(i-1)`. A page's best
/// chunk gets the page's score; its other chunks rank below it, in their own order.
pub(super) fn page_scores(
    list: &[(ChunkId, f32)],
    document_of: &HashMap<ChunkId, DocumentId>,
    evidence: PageEvidence,
) -> Vec<(ChunkId, f32)> {
    let mut by_document: HashMap<DocumentId, Vec<f32>> = HashMap::new();
    for (id, score) in list {
        if let Some(d) = document_of.get(id) {
            by_document.entry(*d).or_default().push(score.max(0.0));
        }
    }
    let bonus: HashMap<DocumentId, f32> = by_document
        .into_iter()
        .map(|(d, mut scores)| {
            scores.sort_by(|a, b| b.total_cmp(a));
            let extra = scores
                .iter()
                .take(evidence.chunks)
                .skip(1)
                .enumerate()
                .map(|(i, s)| s * evidence.weight.powi(i as i32 + 1))
                .sum();
            (d, extra)
        })
        .collect();
    best_first(
        list.iter()
            .map(|&(id, score)| {
                let extra = document_of.get(&id).and_then(|d| bonus.get(d)).copied();
                (id, score + extra.unwrap_or(0.0))
            })
            .collect(),
    )
}

/// Runs the steps over every stream of every variant; `chunks` must hold every candidate's
/// row (see [`super::rank::fetch_rows`]); kept copies that were not candidates need theirs
/// fetched after.
pub(super) fn stage(
    store: &Store,
    collections: &[CollectionId],
    found: &mut [VariantFound],
    chunks: &HashMap<ChunkId, ChunkRecord>,
    settings: &RetrievalSettings,
) -> Result<(Copies, StageTrace)> {
    let t = Instant::now();
    let evidence = settings.page_evidence;
    let copies = if settings.fold_copies {
        let mut hashes: Vec<i64> = chunks.values().map(|c| text_hash(&c.text)).collect();
        hashes.sort();
        hashes.dedup();
        Copies::find(chunks, &store.copies_of(&hashes, collections)?)
    } else {
        Copies::default()
    };
    let mut document_of: HashMap<ChunkId, DocumentId> =
        chunks.values().map(|c| (c.id, c.document_id)).collect();
    document_of.extend(copies.documents.iter().map(|(k, v)| (*k, *v)));
    let mut candidates = std::collections::HashSet::new();
    let summed = evidence.filter(|e| e.chunks > 1);
    for variant in found.iter_mut() {
        for list in variant.lists_mut() {
            // A chunk deleted since the full-text commit has no row: dropped here already.
            list.retain(|(id, _)| chunks.contains_key(id));
            *list = copies.fold(list);
            candidates.extend(list.iter().map(|(id, _)| *id));
        }
        if let (Some(list), Some(evidence)) = (variant.vector.as_mut(), summed) {
            *list = page_scores(list, &document_of, evidence);
        }
        if let (Some(list), Some(pages), Some(evidence)) =
            (variant.lexical.as_mut(), &variant.lexical_pages, evidence)
        {
            *list = super::lexical::weigh_pages(list, &document_of, pages, evidence.whole_page);
        }
    }
    let folded: usize = copies.also_at.values().map(Vec::len).sum();
    let detail = match summed {
        Some(e) => format!(
            "{folded} copies folded; vector: pages ranked by up to {} chunks (weight {})",
            e.chunks, e.weight
        ),
        None => format!("{folded} copies folded"),
    };
    let trace = StageTrace {
        stage: "pages",
        variant: None,
        candidates: candidates.len(),
        took_us: elapsed_us(t),
        detail,
    };
    Ok((copies, trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: i64) -> ChunkId {
        ChunkId(id)
    }

    #[test]
    fn a_page_with_evidence_in_several_sections_outranks_one_lucky_fragment() {
        // Document 1: one strong fragment (chunk 1). Document 2: three good sections.
        let list = vec![(c(1), 10.0), (c(2), 8.0), (c(3), 7.0), (c(4), 6.0)];
        let document_of = HashMap::from([
            (c(1), DocumentId(1)),
            (c(2), DocumentId(2)),
            (c(3), DocumentId(2)),
            (c(4), DocumentId(2)),
        ]);
        let evidence = PageEvidence {
            whole_page: 0.0,
            chunks: 3,
            weight: 0.5,
        };
        let ranked = page_scores(&list, &document_of, evidence);
        // 8 + 0.5 × 7 + 0.25 × 6 = 13 beats 10; the page's own chunks keep their order.
        assert_eq!(ranked[0], (c(2), 13.0));
        assert_eq!(ranked[1], (c(3), 12.0));
        assert_eq!(ranked[3], (c(1), 10.0));
        // One chunk counting: the best fragment wins, as before.
        let alone = page_scores(
            &list,
            &document_of,
            PageEvidence {
                chunks: 1,
                ..evidence
            },
        );
        assert_eq!(alone[0], (c(1), 10.0));
    }

    #[test]
    fn copies_fold_into_the_smaller_document_at_the_best_score() {
        let chunk = |id: i64, document: i64, text: &str| ChunkRecord {
            id: c(id),
            document_id: DocumentId(document),
            revision_id: crate::RevisionId(document),
            ordinal: id,
            text: text.into(),
            heading_path: String::new(),
            location: Default::default(),
            token_count: 8,
            path: format!("/docs/{document}.html").into(),
            title: None,
            collection: "docs".into(),
            mtime_ns: None,
        };
        let chunks = HashMap::from([
            (c(1), chunk(1, 1, "Profiles alter the compiler settings.")),
            (c(2), chunk(2, 2, "Profiles alter the compiler settings.\n")),
            (c(3), chunk(3, 2, "Something else.")),
        ]);
        // Document 2 (a print-all page) has 400 chunks; document 1, the page, has 12; chunk 9
        // of document 3 (50 chunks) is one more copy, found in the library, not a candidate.
        let copy = |id: i64, document: i64, document_chunks: i64| TextCopy {
            text_hash: text_hash("Profiles alter the compiler settings."),
            id: c(id),
            document_id: DocumentId(document),
            document_chunks,
        };
        let copies = Copies::find(&chunks, &[copy(2, 2, 400), copy(1, 1, 12), copy(9, 3, 50)]);
        assert_eq!(copies.also_at[&c(1)], vec![c(9), c(2)]);
        let folded = copies.fold(&[(c(2), 9.0), (c(3), 5.0), (c(1), 4.0)]);
        assert_eq!(folded, vec![(c(1), 9.0), (c(3), 5.0)]);
        // Only the print-all page's copy is a candidate: it still folds into the page's.
        let copies = Copies::find(&chunks, &[copy(2, 2, 400), copy(9, 3, 50)]);
        assert_eq!(copies.fold(&[(c(2), 9.0)]), vec![(c(9), 9.0)]);
    }
}
