//! The embedding lane on a real library with the real model: an input already embedded in the
//! run reuses its vector, and every chunk still gets one. (Its own test binary: the shared
//! session test in `library_api.rs` needs no other embedder alive in its process.)

mod common;

use quarry_core::{EmbedProgress, Hit, IndexOptions, SearchMode, SearchRequest};

use common::Fixture;

/// The similarities of the hits whose path holds `part`, in rank order.
fn similarities(hits: &[Hit], part: &str) -> Vec<f32> {
    hits.iter()
        .filter(|h| h.path.to_string_lossy().contains(part))
        .filter_map(|h| h.scores.similarity)
        .collect()
}

/// Runs the embedding lane to the end; its last report.
fn embed_reporting(f: &mut Fixture) -> EmbedProgress {
    let last = std::cell::RefCell::new(None);
    f.library
        .writer()
        .unwrap()
        .embed_pending(
            &|p| *last.borrow_mut() = Some(p.clone()),
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
    last.into_inner().expect("the lane reported")
}

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
    let coverage = f.library.embedding_coverage().unwrap();
    assert_eq!(coverage[0].embedded, coverage[0].total, "{coverage:?}");
    assert_eq!(coverage[0].total, 40);

    let mut request = SearchRequest::new("keyboard shortcuts to search and move between chapters");
    request.settings.mode = SearchMode::Vector;
    request.settings.limit = 50;
    request.settings.max_per_document = 0;
    request.settings.fold_copies = false;
    let hits = f.library.search(&request).unwrap().hits;
    let copies = similarities(&hits, "shortcuts.md");
    assert_eq!(copies.len(), 30, "every copy has its vector");
    assert!(copies.windows(2).all(|w| w[0] == w[1]), "{copies:?}");
    let chapters = similarities(&hits, "chapter");
    assert_eq!(chapters.len(), 10);
    assert!(
        chapters.iter().all(|s| *s < copies[0]),
        "other pages keep their own vectors"
    );
}

#[test]
fn an_edited_file_keeps_the_vectors_of_its_unchanged_chunks() {
    let mut f = Fixture::new();
    // Parts that differ in words, not only in numbers: those would share one vector.
    let parts = [
        "seal", "gasket", "valve", "shaft", "bearing", "housing", "flange", "coupling", "motor",
        "filter", "hose", "clamp",
    ];
    let sections: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            format!(
                "## Part {i}\n\nPart {i} explains maintenance step {i} of the water pump: \
                 check the {part}, then torque bolt {i} to {} newton metres.\n",
                20 + i
            )
        })
        .collect();
    let manual = |extra: &str| format!("# Pump manual\n\n{}\n{extra}", sections.join("\n"));
    let dir = f.add_source("docs", "", &[("pump.md", manual(""))]);
    f.reindex();
    let first = embed_reporting(&mut f);
    let similarity_of_part_3 = |f: &Fixture| {
        let mut request = SearchRequest::new("torque bolt 3 to 23 newton metres");
        request.settings.mode = SearchMode::Vector;
        request.settings.max_per_document = 0;
        let hits = f.library.search(&request).unwrap().hits;
        let hit = hits
            .iter()
            .find(|h| h.heading_path.contains("Part 3"))
            .expect("part 3 found");
        hit.scores.similarity.unwrap()
    };
    let before = similarity_of_part_3(&f);

    // One section added at the end: the rest of the file is unchanged.
    common::write(
        &dir.join("pump.md"),
        manual("## Part 12\n\nPart 12 is new: replace the impeller every five years.\n"),
    );
    f.reindex();
    let second = embed_reporting(&mut f);
    let coverage = f.library.embedding_coverage().unwrap();
    assert_eq!(coverage[0].embedded, coverage[0].total, "{coverage:?}");
    assert_eq!(second.embedded_this_run, first.embedded_this_run + 1);
    assert!(
        second.model_tokens_this_run * 4 < first.model_tokens_this_run,
        "only the new section went through the model: {} tokens, first run {}",
        second.model_tokens_this_run,
        first.model_tokens_this_run
    );
    assert_eq!(similarity_of_part_3(&f), before, "the same vector");

    // A new title changes every chunk's embedded text: all of them are embedded again.
    common::write(
        &dir.join("pump.md"),
        manual("").replace("# Pump manual", "# Pump guide"),
    );
    f.reindex();
    let retitled = embed_reporting(&mut f);
    assert!(retitled.model_tokens_this_run >= first.model_tokens_this_run / 2);
}

#[test]
fn near_duplicates_share_a_vector_and_chunks_without_prose_stay_full_text_only() {
    let mut f = Fixture::new();
    // A generated reference: the same sentence for every type, other names; each type's
    // implementations, signatures without prose; and a note of its own.
    let mut files: Vec<(String, String)> = Vec::new();
    for i in 0..12 {
        files.push((
            format!("reference/widget{i}.md"),
            format!("# Widget{i}\n\nCreates a new Widget{i} with the default capacity and returns it to the caller.\n"),
        ));
        files.push((
            format!("impls/widget{i}.txt"),
            format!("impl<T: Clone> Clone for Widget{i}<T>\nimpl<T: Send> Send for Widget{i}<T>\n"),
        ));
    }
    files.push((
        "notes/pump.md".into(),
        "# Pump\n\nThe water pump needs a new seal every spring, before the first frost.\n".into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    f.add_source("docs", "", &refs);
    f.reindex();
    let progress = embed_reporting(&mut f);
    let coverage = &f.library.embedding_coverage().unwrap()[0];
    assert_eq!(coverage.total, 25, "{coverage:?}");
    assert_eq!(coverage.embedded, coverage.total, "{coverage:?}");
    assert_eq!(coverage.lexical_only, 12, "{coverage:?}");
    assert_eq!(coverage.shared, 11, "{coverage:?}");
    assert_eq!((progress.shared, progress.lexical_only), (11, 12));
    assert!(
        progress.model_tokens_this_run * 4 < progress.tokens_this_run,
        "the model read two texts: {progress:?}"
    );

    // By meaning: every reference page, all with the one vector; no signature.
    let mut request = SearchRequest::new("make a widget with the default capacity");
    request.settings.mode = SearchMode::Vector;
    request.settings.limit = 50;
    request.settings.max_per_document = 0;
    let hits = f.library.search(&request).unwrap().hits;
    assert!(
        hits.iter()
            .all(|h| !h.path.to_string_lossy().contains("impls")),
        "{hits:?}"
    );
    let pages = similarities(&hits, "reference");
    assert_eq!(pages.len(), 12);
    assert!(pages.windows(2).all(|w| w[0] == w[1]), "{pages:?}");
    assert!(hits[0].path.to_string_lossy().contains("reference"));

    // By name: the full text finds a signature.
    let hits = f
        .library
        .search(&SearchRequest::new("Widget7 Send").with_mode(SearchMode::Lexical))
        .unwrap()
        .hits;
    assert!(hits[0].path.ends_with("impls/widget7.txt"), "{hits:?}");
}

#[test]
fn what_a_search_finds_is_embedded_before_the_rest_and_then_found_by_meaning() {
    let mut f = Fixture::new();
    // Forty chapters on other things, and the page the user is after.
    let mut files: Vec<(String, String)> = (0..40)
        .map(|i| {
            (
                format!("a{i:02}.md"),
                format!("# Chapter {i}\n\nChapter {i} of the survey describes topic number {i}.\n"),
            )
        })
        .collect();
    files.push((
        "z-pump.md".into(),
        "# Pump maintenance\n\nPrime the centrifugal pump with water before starting it, or its seals burn.\n"
            .into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    f.add_source("manuals", "", &refs);
    f.reindex();
    let is_pump = |h: &Hit| h.path.ends_with("z-pump.md");

    // Found by its words while nothing has a vector yet: queued.
    let hits = f
        .library
        .search(&SearchRequest::new("centrifugal pump seals"))
        .unwrap()
        .hits;
    assert!(is_pump(&hits[0]), "{hits:?}");

    // The lane, stopped after its first chunk, embedded that page, ahead of the walk.
    f.library
        .writer()
        .unwrap()
        .embed_pending_limited(1, &|_| {}, &std::sync::atomic::AtomicBool::new(false))
        .unwrap();
    let coverage = f.library.embedding_coverage().unwrap().remove(0);
    assert_eq!((coverage.embedded, coverage.ahead), (0, 1), "{coverage:?}");
    let mut by_meaning =
        SearchRequest::new("how do I get a water pump ready before I switch it on");
    by_meaning.settings.mode = SearchMode::Vector;
    by_meaning.settings.max_per_document = 0;
    by_meaning.settings.limit = 100;
    let hits = f.library.search(&by_meaning).unwrap().hits;
    assert_eq!(hits.len(), 1, "only that page has a vector: {hits:?}");
    assert!(is_pump(&hits[0]));

    // The walk fills in the rest and, passing the page, counts it once.
    let last = embed_reporting(&mut f);
    assert!(last.done);
    let coverage = f.library.embedding_coverage().unwrap().remove(0);
    assert_eq!(coverage.embedded, coverage.total);
    assert_eq!(coverage.ahead, 0);
    by_meaning.settings.min_similarity = -1.0;
    let hits = f.library.search(&by_meaning).unwrap().hits;
    assert_eq!(hits.len(), coverage.total as usize, "one hit a chunk");
    assert!(is_pump(&hits[0]), "{hits:?}");
    assert_eq!(hits.iter().filter(|h| is_pump(h)).count(), 1);
}

#[test]
fn a_collection_the_assistant_names_is_embedded_before_the_rest_of_another() {
    let mut f = Fixture::new();
    let chapters = |topic: &str| -> Vec<(String, String)> {
        (0..40)
            .map(|i| {
                (
                    format!("{topic}{i:02}.md"),
                    format!("# {topic} {i}\n\nPart {i} of the {topic} describes step {i}.\n"),
                )
            })
            .collect()
    };
    for (collection, topic) in [("archive", "ledger"), ("manuals", "pump")] {
        let files = chapters(topic);
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        f.add_source(collection, collection, &refs);
    }
    f.reindex();

    // The walk starts with `archive` (by name); after its first batch the assistant searches
    // `manuals`, as a chat mode over it would, from another handle on the library.
    let assistant = quarry_core::Library::open(f.data.path()).unwrap();
    let reports = std::cell::RefCell::new(Vec::new());
    let on_progress = |p: &EmbedProgress| {
        let first = reports.borrow().is_empty();
        reports.borrow_mut().push((p.collection.clone(), p.done));
        if first {
            let mut request = SearchRequest::new("pump step").with_mode(SearchMode::Lexical);
            request.collections = vec!["manuals".into()];
            assert!(!assistant.search(&request).unwrap().hits.is_empty());
        }
    };
    f.library
        .writer()
        .unwrap()
        .embed_pending(&on_progress, &std::sync::atomic::AtomicBool::new(false))
        .unwrap();

    let reports = reports.into_inner();
    assert_eq!(reports[0], ("archive".to_string(), false), "{reports:?}");
    let done = |name: &str| {
        reports
            .iter()
            .position(|(c, done)| c == name && *done)
            .unwrap_or_else(|| panic!("{name} was not finished: {reports:?}"))
    };
    assert!(done("manuals") < done("archive"), "{reports:?}");
    for coverage in f.library.embedding_coverage().unwrap() {
        assert_eq!(coverage.embedded, coverage.total, "{coverage:?}");
    }
}
