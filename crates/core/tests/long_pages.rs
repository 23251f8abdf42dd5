//! Long pages rank as pages: a page whose sections all speak to the question outranks a short
//! fragment elsewhere that repeats the question's words; a print-all page that copies every
//! page folds into the pages it copies ("also at"); and a block repeated on every page of a
//! site (an mdBook's help block) is searched and embedded once, and comes back when it stops
//! being repeated.

mod common;

use quarry_core::{Hit, Library, PageEvidence, SearchMode, SearchRequest};

use common::Fixture;

const HELP: &str = "\n## Keyboard shortcuts\n\nPress the left or right arrow to move between chapters; press S to search this book.\n";

/// A page about tides whose every section mentions the tide, the harbour and its turn, none
/// of them in its title or headings.
const TIDES: &str = "# Notes from Kettle Bay

## Why the water rises

The moon pulls the sea, and twice a day the tide climbs the harbour walls and falls back. Fishermen plan every trip around the turn of the water in the harbour.

## Slack water

When the flood ends the water stands still for a while; then the tide begins to turn and carries the boats out of the harbour past the breakwater.

## Reading the table

The harbour master prints a table of each high and low tide. The turn comes about fifty minutes later each day, so the table is read every morning.

## Spring and neap

At new and full moon the tide range is widest. Harbour pilots watch each turn closely when deep ships come in.
";

/// A glossary whose one short entry holds the same three words.
const GLOSSARY: &str = "# Sailing glossary

## Bowline

A knot that makes a fixed loop at the end of a rope; it does not slip or jam and is easy to untie after a load.

## Slack

Turn of the tide: harbour slack.

## Cleat

A fitting with two horns around which a rope is made fast on deck or on a pier.

## Reef

To reduce the area of a sail in a strong wind by rolling or folding part of it.
";

fn short_page(topic: &str) -> String {
    format!("# About {topic}\n\n## Basics\n\nSome words about {topic} for new sailors, their history and their care.\n")
}

/// Six pages, each ending with the help block, and `print.md`, all of them in one.
fn site() -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = vec![
        ("tides.md".into(), TIDES.into()),
        ("glossary.md".into(), GLOSSARY.into()),
    ];
    for topic in ["knots", "sails", "ropes", "masts"] {
        pages.push((format!("{topic}.md"), short_page(topic)));
    }
    for (_, text) in &mut pages {
        text.push_str(HELP);
    }
    let print: String = pages.iter().map(|(_, t)| t.as_str()).collect();
    pages.push(("print.md".into(), print));
    pages
}

fn indexed_site() -> Fixture {
    let mut f = Fixture::new();
    let files = site();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    f.add_source("site", "", &files);
    f.reindex();
    f
}

fn search(library: &Library, request: SearchRequest) -> Vec<Hit> {
    library.search(&request).unwrap().hits
}

fn lexical(query: &str, page_evidence: Option<PageEvidence>) -> SearchRequest {
    let mut request = SearchRequest::new(query).with_mode(SearchMode::Lexical);
    request.settings.page_evidence = page_evidence;
    request
}

fn name(hit: &Hit) -> String {
    hit.path.file_name().unwrap().to_string_lossy().into_owned()
}

fn names(hits: &[Hit]) -> Vec<String> {
    hits.iter().map(name).collect()
}

#[test]
fn a_page_about_the_question_outranks_a_fragment_that_repeats_its_words() {
    let f = indexed_site();
    let query = "tide turn harbour";
    // Ranked by its best chunk, the glossary's one-line entry wins.
    let by_fragment = search(&f.library, lexical(query, None));
    assert_eq!(
        name(&by_fragment[0]),
        "glossary.md",
        "{:?}",
        names(&by_fragment)
    );
    // Ranked as pages (the default), the page about tides wins, cited by its best chunk.
    let by_page = search(&f.library, lexical(query, Some(PageEvidence::default())));
    assert_eq!(name(&by_page[0]), "tides.md", "{:?}", names(&by_page));
    assert!(
        by_page[0].snippet.text.contains("tide"),
        "{:?}",
        by_page[0].snippet
    );
    // The print-all page never shows: every chunk of it folds into the page it copies.
    assert!(
        !names(&by_page).contains(&"print.md".to_string()),
        "{:?}",
        names(&by_page)
    );
    let print = f.docs.path().join("print.md").canonicalize().unwrap();
    assert_eq!(
        by_page[0].also_at,
        vec![print.to_string_lossy().into_owned()]
    );
    // Searching named collections weighs pages the same way (their filter once broke
    // tantivy's page statistics).
    let mut named = lexical(query, Some(PageEvidence::default()));
    named.collections = vec!["site".into()];
    assert_eq!(names(&search(&f.library, named)), names(&by_page));
}

/// Hits whose text is the help block.
fn help_hits(library: &Library, mode: SearchMode) -> Vec<Hit> {
    let request = SearchRequest::new("arrow keys to move between chapters").with_mode(mode);
    search(library, request)
        .into_iter()
        .filter(|h| h.heading_path.contains("Keyboard shortcuts"))
        .collect()
}

#[test]
fn text_repeated_across_the_site_is_searched_and_embedded_once_and_comes_back_when_it_is_not() {
    let mut f = indexed_site();
    // Seven documents hold the help block, print.md six times: one copy stays searchable.
    let status = f.library.status().unwrap();
    assert_eq!(status.stats.chunks_repeated, 11);
    assert!(f.library.verify().unwrap().is_consistent());
    let kept = help_hits(&f.library, SearchMode::Lexical);
    assert_eq!(kept.len(), 1, "{:?}", names(&kept));
    // Embedded once too: the other copies need no vector, and coverage is complete.
    f.embed();
    let coverage = &f.library.status().unwrap().embeddings[0];
    assert_eq!(coverage.embedded, coverage.total);
    assert_eq!(coverage.total, status.stats.chunks - 11);
    assert_eq!(help_hits(&f.library, SearchMode::Vector).len(), 1);

    // With three documents gone, four pages hold the block: below five, every copy is back,
    // searchable and embedded (and, being copies, shown as one hit "also at" the others).
    for gone in ["print.md", "ropes.md", "masts.md"] {
        std::fs::remove_file(f.docs.path().join(gone)).unwrap();
    }
    f.reindex();
    assert_eq!(f.library.status().unwrap().stats.chunks_repeated, 0);
    assert!(f.library.verify().unwrap().is_consistent());
    let back = help_hits(&f.library, SearchMode::Lexical);
    assert_eq!((back.len(), back[0].also_at.len()), (1, 3), "{back:?}");
    f.embed();
    let coverage = &f.library.status().unwrap().embeddings[0];
    assert_eq!(coverage.embedded, coverage.total);
    let back = help_hits(&f.library, SearchMode::Vector);
    assert_eq!((back.len(), back[0].also_at.len()), (1, 3), "{back:?}");
}
