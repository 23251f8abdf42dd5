//! The embedding lane on a real library with the real model: an input already embedded in the
//! run reuses its vector, and every chunk still gets one. (Its own test binary: the shared
//! session test in `library_api.rs` needs no other embedder alive in its process.)

mod common;

use quarry_core::{IndexOptions, SearchMode, SearchRequest};

use common::Fixture;

#[test]
fn identical_texts_share_one_embedding_and_every_chunk_gets_a_vector() {
    let mut f = Fixture::new();
    // The same page under many paths (old editions, a copy per version), beside other pages.
    let page =
        "# Keyboard shortcuts\n\nPress S to search, and the arrow keys to move between chapters.\n";
    let mut files: Vec<(String, String)> = (0..30)
        .map(|i| (format!("edition{i}/shortcuts.md"), page.to_string()))
        .collect();
    files.extend((0..10).map(|i| {
        (
            format!("chapter{i}.md"),
            format!("# Chapter {i}\n\nChapter {i} is about topic number {i}.\n"),
        )
    }));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    f.add_source("book", "", &refs);
    // Every copy searchable (repeated text is otherwise searched and embedded once).
    let mut options = IndexOptions::default();
    options.repeat_documents = 0;
    f.library
        .writer()
        .unwrap()
        .index_all(&options, &|_| {})
        .unwrap();
    f.embed();
    let coverage = f.library.store().embedding_coverage().unwrap();
    assert_eq!(coverage[0].embedded, coverage[0].total, "{coverage:?}");
    assert_eq!(coverage[0].total, 40);

    let mut request = SearchRequest::new("keyboard shortcuts to search and move between chapters");
    request.settings.mode = SearchMode::Vector;
    request.settings.limit = 50;
    request.settings.max_per_document = 0;
    request.settings.fold_copies = false;
    let hits = f.library.search(&request).unwrap().hits;
    let copies: Vec<f32> = hits
        .iter()
        .filter(|h| h.path.ends_with("shortcuts.md"))
        .filter_map(|h| h.scores.similarity)
        .collect();
    assert_eq!(copies.len(), 30, "every copy has its vector");
    assert!(copies.windows(2).all(|w| w[0] == w[1]), "{copies:?}");
    let chapters: Vec<f32> = hits
        .iter()
        .filter(|h| h.path.to_string_lossy().contains("chapter"))
        .filter_map(|h| h.scores.similarity)
        .collect();
    assert_eq!(chapters.len(), 10);
    assert!(
        chapters.iter().all(|s| *s < copies[0]),
        "other pages keep their own vectors"
    );
}
