//! The lexical stage: BM25 candidates from the full-text index, pages weighed whole.
//!
//! With [`super::PageEvidence::whole_page`] above 0, the stage also finds the best pages by BM25
//! over their whole text (their page entries); pages with no chunk among the candidates bring
//! their best chunk, the hit they are cited by. The `pages` stage then weighs them
//! ([`weigh_pages`]) once copies are folded.

use std::collections::HashMap;
use std::time::Instant;

use super::plan::Searched;
use super::{elapsed_us, RetrievalSettings, SearchContext, StageTrace};
use crate::error::Result;
use crate::fulltext::{FulltextHit, FulltextQuery, FulltextResults};
use crate::ids::{ChunkId, DocumentId};

/// One query variant's lexical candidates, best first, and the full-text results they came
/// from (kept to highlight snippets).
pub(super) struct LexicalStream {
    pub list: Vec<(ChunkId, f32)>,
    /// The best pages by their whole text, when pages are weighed.
    pub pages: Option<Vec<(DocumentId, f32)>>,
    pub results: FulltextResults,
}

/// Stage `lexical` for query variant `variant`: BM25 over the searched collections, without
/// the candidates below `min_lexical_score`, pages weighed whole when the settings say so.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    searched: &Searched<'_>,
    settings: &RetrievalSettings,
    text: &str,
    variant: usize,
) -> Result<(LexicalStream, StageTrace)> {
    let t = Instant::now();
    let query = FulltextQuery {
        text,
        languages: &searched.languages,
        collection_ids: &searched.ids,
        limit: settings.lexical_candidates,
    };
    let results = ctx.fulltext.search(&query)?;
    let before = results.hits.len();
    let mut chunks: Vec<FulltextHit> = results
        .hits
        .iter()
        .filter(|h| h.score >= settings.min_lexical_score)
        .cloned()
        .collect();
    let dropped = before - chunks.len();
    let whole_page = settings.page_evidence.map_or(0.0, |p| p.whole_page);
    let (pages, pages_note) = if whole_page > 0.0 {
        let pages = ctx.fulltext.search_pages(&query)?;
        let missing: Vec<DocumentId> = {
            let have: std::collections::HashSet<DocumentId> =
                chunks.iter().map(|h| h.document_id).collect();
            pages
                .iter()
                .map(|p| p.0)
                .filter(|d| !have.contains(d))
                .collect()
        };
        let mut brought = ctx.fulltext.best_chunks_of(&query, &missing)?;
        brought.retain(|h| h.score >= settings.min_lexical_score);
        let note = format!(
            "; {} pages weighed whole ({whole_page} of the score), {} of them brought their best chunk",
            pages.len(),
            brought.len()
        );
        chunks.extend(brought);
        (Some(pages), note)
    } else {
        (None, String::new())
    };
    let list: Vec<(ChunkId, f32)> = chunks.iter().map(|h| (h.chunk_id, h.score)).collect();
    let trace = StageTrace {
        stage: "lexical",
        variant: Some(variant),
        candidates: list.len(),
        took_us: elapsed_us(t),
        detail: format!(
            "BM25 over {} collection(s); {dropped} below min_lexical_score dropped{pages_note}",
            searched.collections.len(),
        ),
    };
    Ok((
        LexicalStream {
            list,
            pages,
            results,
        },
        trace,
    ))
}

/// The chunks ranked by their page: `whole_page` × the page's whole-text BM25 plus the rest ×
/// its best chunk's, both over the stream's best (a page outside `pages` counts 0 whole). A
/// page's other chunks follow its best in their own order.
pub(super) fn weigh_pages(
    chunks: &[(ChunkId, f32)],
    document_of: &HashMap<ChunkId, DocumentId>,
    pages: &[(DocumentId, f32)],
    whole_page: f32,
) -> Vec<(ChunkId, f32)> {
    let top = |scores: &mut dyn Iterator<Item = f32>| scores.fold(f32::MIN_POSITIVE, f32::max);
    let mut best_of_page: HashMap<DocumentId, f32> = HashMap::new();
    for (id, score) in chunks {
        if let Some(d) = document_of.get(id) {
            let best = best_of_page.entry(*d).or_insert(*score);
            *best = best.max(*score);
        }
    }
    // Pages left without a chunk (a print-all page whose every chunk folded into the pages it
    // copies) rank nothing, so they set no scale either.
    let best_page = top(&mut pages
        .iter()
        .filter(|p| best_of_page.contains_key(&p.0))
        .map(|p| p.1));
    let best_chunk = top(&mut chunks.iter().map(|h| h.1));
    let page_score: HashMap<DocumentId, f32> = pages.iter().copied().collect();
    let mut list: Vec<(ChunkId, f32)> = chunks
        .iter()
        .filter_map(|&(id, score)| {
            let document = document_of.get(&id)?;
            let whole = page_score.get(document).copied().unwrap_or(0.0) / best_page;
            let page_best = best_of_page[document] / best_chunk;
            let behind_best = page_best - score / best_chunk;
            let page = whole_page * whole + (1.0 - whole_page) * page_best;
            Some((id, page - (1.0 - whole_page) * behind_best))
        })
        .collect();
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_about_the_question_beats_a_fragment_that_repeats_its_words() {
        // Chunk 1 (document 1) is a short fragment full of the query's words; document 2 is
        // the page about it, whose best chunk scores less.
        let chunks = [(ChunkId(1), 10.0), (ChunkId(2), 6.0), (ChunkId(3), 5.0)];
        let document_of = HashMap::from([
            (ChunkId(1), DocumentId(1)),
            (ChunkId(2), DocumentId(2)),
            (ChunkId(3), DocumentId(2)),
        ]);
        let pages = [(DocumentId(2), 20.0), (DocumentId(1), 4.0)];
        let list = weigh_pages(&chunks, &document_of, &pages, 0.5);
        // Document 2: 0.5 × 1 + 0.5 × 0.6 = 0.8; document 1: 0.5 × 0.2 + 0.5 × 1 = 0.6.
        assert_eq!(list[0].0, ChunkId(2));
        assert!((list[0].1 - 0.8).abs() < 1e-6);
        assert_eq!(
            list[1].0,
            ChunkId(3),
            "the page's next chunk follows its best"
        );
        assert_eq!(list[2].0, ChunkId(1));
        // Whole pages off: the best fragment first, as before.
        assert_eq!(
            weigh_pages(&chunks, &document_of, &pages, 0.0)[0].0,
            ChunkId(1)
        );
    }
}
