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

#[test]
fn the_run_shape_is_measured_once_per_cpu_and_every_shape_embeds_alike() {
    use quarry_core::embed::calibration::{self, RunShape};
    use quarry_core::embed::Embedder;
    use quarry_core::models::{default_embedding_model, Models};

    // A models folder of its own first, so the record lands there and nowhere shared.
    let scratch = tempfile::tempdir().unwrap();
    let mut dirs = vec![scratch.path().to_path_buf()];
    dirs.extend(Models::discover(scratch.path()).dirs().iter().cloned());
    let models = Models::at(dirs);
    let id = default_embedding_model();
    let texts: Vec<String> = (0..30)
        .map(|i| {
            format!(
                "Section {i}. {}",
                "The gearbox is serviced every {i} thousand kilometres. ".repeat(1 + i % 7)
            )
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    let embedder = Embedder::load(&models, id, Some(2)).unwrap();
    assert!(embedder.needs_calibration(), "no record yet");
    let measured = embedder.calibrate(&refs).unwrap();
    assert_eq!(measured.rates.len(), calibration::shapes(2).len());
    assert!(measured.rates.iter().all(|r| r.tokens_per_sec > 0.0));
    assert_eq!(embedder.shape(), measured.shape);
    assert!(scratch.path().join(calibration::RECORD).is_file());

    // The next process on this CPU takes the kept shape without measuring.
    let again = Embedder::load(&models, id, Some(2)).unwrap();
    assert!(!again.needs_calibration());
    assert_eq!(again.shape(), measured.shape);

    // Sorting and splitting change which texts run together, never what each vector is.
    again
        .set_shape(RunShape {
            workers: 1,
            texts_per_run: 1,
        })
        .unwrap();
    let one_by_one = again.embed_counted(&refs).unwrap();
    for shape in calibration::shapes(2) {
        again.set_shape(shape).unwrap();
        let embedded = again.embed_counted(&refs).unwrap();
        assert_eq!(embedded.tokens, one_by_one.tokens, "{shape}");
        assert_eq!(embedded.lengths, one_by_one.lengths, "{shape}");
        for (i, (a, b)) in embedded.vectors.iter().zip(&one_by_one.vectors).enumerate() {
            assert!(cosine(a, b) > 0.99, "{shape}: text {i} moved");
        }
    }
}

#[test]
fn the_optimised_copy_of_the_model_gives_the_same_vectors_and_a_bad_one_is_set_aside() {
    use quarry_core::embed::Embedder;
    use quarry_core::models::{default_embedding_model, Models};

    // A models folder holding its own copy of the model, and so its own optimised copies.
    let scratch = tempfile::tempdir().unwrap();
    let installed = Models::discover(scratch.path());
    let id = default_embedding_model();
    let source = installed.find(id).unwrap().dir;
    let own = scratch.path().join(id);
    std::fs::create_dir_all(&own).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), own.join(entry.file_name())).unwrap();
        }
    }
    let mut dirs = vec![scratch.path().to_path_buf()];
    dirs.extend(installed.dirs().iter().cloned());
    let models = Models::at(dirs);
    let texts = [
        "The gearbox is serviced every 40,000 km.",
        "Tyre pressure: 2.4 bar.",
    ];
    let copies = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(scratch.path().join("optimized"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };

    // The first session makes the copy; the next loads it.
    let original = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    let made = copies();
    assert!(
        made.iter()
            .any(|p| p.extension().is_some_and(|e| e == "onnx")),
        "{made:?}"
    );
    let from_copy = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_same_vectors(&original, &from_copy);

    // A copy that is not a model, noted with its own hash (so the hash check passes): the
    // session falls back to the original and the bad copy is removed.
    let copy = made
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "onnx"))
        .unwrap();
    std::fs::write(copy, b"not an onnx graph").unwrap();
    let (sha256, _) = quarry_core::models::sha256_file(copy).unwrap();
    std::fs::write(copy.with_extension("sha256"), sha256).unwrap();
    let after = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_same_vectors(&original, &after);
    assert!(copies().is_empty(), "the bad copy is set aside");
}

#[test]
fn an_edited_file_keeps_the_vectors_of_its_unchanged_chunks() {
    let mut f = Fixture::new();
    let sections: Vec<String> = (0..12)
        .map(|i| {
            format!(
                "## Part {i}\n\nPart {i} explains maintenance step {i} of the water pump: \
                 check seal {i}, then torque bolt {i} to {} newton metres.\n",
                20 + i
            )
        })
        .collect();
    let manual = |extra: &str| format!("# Pump manual\n\n{}\n{extra}", sections.join("\n"));
    let dir = f.add_source("docs", "", &[("pump.md", manual(""))]);
    f.reindex();
    let lane = |f: &mut Fixture| {
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
    };
    let first = lane(&mut f);
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
    let second = lane(&mut f);
    let coverage = f.library.store().embedding_coverage().unwrap();
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
    let retitled = lane(&mut f);
    assert!(retitled.model_tokens_this_run >= first.model_tokens_this_run / 2);
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn assert_same_vectors(a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(cosine(x, y) > 0.9999, "cosine {}", cosine(x, y));
    }
}
