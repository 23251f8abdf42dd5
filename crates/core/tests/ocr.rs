//! Scans and images are read by Tesseract (the real library, with Debian's English data) in
//! the OCR lane after the text lane: found by words only their pixels hold, with page and
//! confidence; PDFs with a text layer are not OCR'd; hostile images are recorded failures
//! that leave the rest of the folder searchable; a pause stops the lane.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use quarry_core::{DocumentStatus, IndexEvent, IndexOptions, Library, SearchMode, SearchRequest};

use common::{fixtures, Fixture};
use quarry_core::scans::{pdf_of, png_declaring, scanned_pdf, text_png, text_png_in, Page};

fn hits(library: &Library, query: &str) -> Vec<quarry_core::Hit> {
    let mut request = SearchRequest::new(query);
    request.settings.mode = SearchMode::Lexical;
    library.search(&request).unwrap().hits
}

fn file_names(library: &Library, query: &str) -> Vec<String> {
    hits(library, query)
        .iter()
        .map(|h| h.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Indexes every source, counting the pages the OCR lane read.
fn index_counting_pages(library: &mut Library, options: &IndexOptions) -> usize {
    let pages = AtomicUsize::new(0);
    library
        .writer()
        .unwrap()
        .index_all(options, &|event| {
            if matches!(event, IndexEvent::OcrPage { .. }) {
                pages.fetch_add(1, Ordering::Relaxed);
            }
        })
        .unwrap();
    pages.into_inner()
}

fn status_of(library: &Library, path: &Path) -> (DocumentStatus, Option<String>, Option<String>) {
    let view = library.document(path).unwrap();
    (
        view.document.status,
        view.document.reason.clone(),
        view.document.last_error.clone(),
    )
}

#[test]
fn scans_and_images_are_found_by_words_only_their_pixels_hold() {
    let mut f = Fixture::new();
    let receipt =
        text_png("Receipt from Quillfeather Stationers: two reams of paper and a box of pencils.");
    let scan = scanned_pdf(&[
        text_png("The periwinkle survey counted snails along the northern breakwater."),
        text_png_in(
            "Second page: the harbourmaster signed the tidal report in blue ink.",
            "DejaVu-Serif",
        ),
    ]);
    let dir = f.add_source(
        "docs",
        "",
        &[("note.md", "# Note\n\nA note about lighthouses.\n")],
    );
    fixtures::write(&dir.join("receipt.png"), &receipt);
    fixtures::write(&dir.join("survey.pdf"), &scan);
    fixtures::write(
        &dir.join("typed.pdf"),
        fixtures::pdf(
            &["A typed page about the okapi, which lives in the Congo rainforest."],
            false,
        ),
    );

    let pages = index_counting_pages(&mut f.library, &IndexOptions::default());
    assert_eq!(
        pages, 3,
        "the image and the scan's two pages; not the typed PDF"
    );

    assert_eq!(file_names(&f.library, "Quillfeather"), ["receipt.png"]);
    let periwinkle = hits(&f.library, "periwinkle breakwater");
    assert_eq!(periwinkle[0].path.file_name().unwrap(), "survey.pdf");
    assert_eq!(periwinkle[0].location.page, Some(1));
    let confidence = periwinkle[0]
        .location
        .ocr_confidence
        .expect("marked as OCR");
    assert!(
        confidence >= 70,
        "clean 300-dpi text: confidence {confidence}"
    );
    assert_eq!(
        periwinkle[0].location.ocr_note().as_deref(),
        Some("recognised text (OCR), page 1")
    );
    let second = hits(&f.library, "harbourmaster");
    assert_eq!(second[0].location.page, Some(2), "the serif page too");

    let typed = hits(&f.library, "okapi");
    assert_eq!(typed[0].path.file_name().unwrap(), "typed.pdf");
    assert_eq!(
        typed[0].location.ocr_confidence, None,
        "its text layer is used"
    );
    assert_eq!(typed[0].location.ocr_note(), None);

    let stats = f.library.stats().unwrap();
    assert_eq!(stats.ocr.pages_read, 3);
    assert_eq!(stats.ocr.pages_waiting, 0);
    assert_eq!(stats.documents_indexed, 4);

    // Unchanged files are not read again.
    assert_eq!(
        index_counting_pages(&mut f.library, &IndexOptions::default()),
        0
    );
    assert_eq!(file_names(&f.library, "Quillfeather"), ["receipt.png"]);
}

#[test]
fn a_pdf_with_text_and_scanned_pages_is_searchable_before_and_after_ocr() {
    let mut f = Fixture::new();
    let dir = f.add_source("docs", "", &[("readme.md", "# Readme\n\nHello.\n")]);
    // The text lane alone (paused right after it) indexes the typed page at once.
    let mixed = mixed_pdf();
    fixtures::write(&dir.join("mixed.pdf"), &mixed);
    let paused = Arc::new(AtomicBool::new(false));
    let options = IndexOptions::default().with_cancel(paused.clone());
    f.library
        .writer()
        .unwrap()
        .index_all(&options, &|event| {
            // Both files written: the text lane is done, the OCR lane not started.
            if let IndexEvent::BatchCommitted { progress } = event {
                if progress.files_processed == 2 {
                    paused.store(true, Ordering::Relaxed);
                }
            }
        })
        .unwrap();
    assert_eq!(file_names(&f.library, "cormorant"), ["mixed.pdf"]);
    assert!(
        file_names(&f.library, "albatross").is_empty(),
        "not read yet"
    );
    assert_eq!(f.library.stats().unwrap().ocr.pages_waiting, 1);

    assert_eq!(
        index_counting_pages(&mut f.library, &IndexOptions::default()),
        1
    );
    assert_eq!(file_names(&f.library, "cormorant"), ["mixed.pdf"]);
    let scanned = hits(&f.library, "albatross");
    assert_eq!(scanned[0].location.page, Some(2));
    assert!(scanned[0].location.ocr_confidence.is_some());
    assert_eq!(f.library.stats().unwrap().ocr.pages_waiting, 0);
}

/// Page 1 typed (a text layer about cormorants), page 2 scanned (pixels about albatrosses).
fn mixed_pdf() -> Vec<u8> {
    let scan = text_png("The wandering albatross glides for hours.");
    pdf_of(&[
        Page::Typed("The cormorant dries its wings on the rocks after every dive for fish."),
        Page::Scanned(&scan),
    ])
}

#[test]
fn hostile_images_are_recorded_failures_and_the_rest_is_searchable() {
    let mut f = Fixture::new();
    let dir = f.add_source(
        "docs",
        "",
        &[("note.md", "# Note\n\nThe gannet nests on cliffs.\n")],
    );
    let bomb = png_declaring(50_000, 50_000);
    assert!(bomb.len() < 100, "a bomb's header in a few bytes");
    fixtures::write(&dir.join("bomb.png"), &bomb);
    fixtures::write(
        &dir.join("garbage.jpg"),
        b"\xFF\xD8\xFF\xE0 this is no JPEG at all",
    );
    // A real header over pixels cut short: refused when decoded, in the OCR lane.
    let good = text_png("The puffin carries fish crosswise in its beak.");
    fixtures::write(&dir.join("cut.png"), &good[..good.len() / 3]);
    fixtures::write(&dir.join("puffin.png"), &good);

    index_counting_pages(&mut f.library, &IndexOptions::default());

    let (status, reason, message) = status_of(&f.library, &dir.join("bomb.png"));
    assert_eq!(status, DocumentStatus::Failed);
    assert_eq!(reason.as_deref(), Some("image_too_large"));
    assert!(message.unwrap().contains("50000 × 50000"));
    for corrupt in ["garbage.jpg", "cut.png"] {
        let (status, reason, message) = status_of(&f.library, &dir.join(corrupt));
        assert_eq!(status, DocumentStatus::Failed, "{corrupt}");
        assert_eq!(
            reason.as_deref(),
            Some("parse_error"),
            "{corrupt}: {message:?}"
        );
    }
    assert_eq!(file_names(&f.library, "gannet"), ["note.md"]);
    assert_eq!(file_names(&f.library, "puffin"), ["puffin.png"]);
    assert_eq!(f.library.stats().unwrap().ocr.pages_waiting, 0);
}

#[test]
fn pausing_stops_the_ocr_lane_and_the_next_run_carries_on() {
    let mut f = Fixture::new();
    let dir = f.add_source("docs", "", &[("note.md", "# Note\n\nKittiwakes.\n")]);
    for (name, word) in [
        ("a.png", "Aardvark"),
        ("b.png", "Bandicoot"),
        ("c.png", "Capybara"),
    ] {
        fixtures::write(
            &dir.join(name),
            text_png(&format!("The {word} is an animal worth reading about.")),
        );
    }
    let paused = Arc::new(AtomicBool::new(false));
    let options = IndexOptions::default().with_cancel(paused.clone());
    let pages = AtomicUsize::new(0);
    f.library
        .writer()
        .unwrap()
        .index_all(&options, &|event| {
            if matches!(event, IndexEvent::OcrPage { .. }) {
                pages.fetch_add(1, Ordering::Relaxed);
                paused.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
    assert_eq!(
        pages.into_inner(),
        1,
        "the lane stopped after the page it was on"
    );
    let ocr = f.library.stats().unwrap().ocr;
    assert_eq!((ocr.pages_read, ocr.documents_waiting), (1, 2));
    assert_eq!(file_names(&f.library, "Kittiwakes"), ["note.md"]);

    assert_eq!(
        index_counting_pages(&mut f.library, &IndexOptions::default()),
        2
    );
    for word in ["Aardvark", "Bandicoot", "Capybara"] {
        assert_eq!(file_names(&f.library, word).len(), 1, "{word}");
    }
    assert_eq!(f.library.stats().unwrap().ocr.documents_waiting, 0);
}

#[test]
fn a_file_past_the_page_cap_says_which_pages_were_not_read() {
    let mut f = Fixture::new();
    let dir = f.add_source("docs", "", &[("note.md", "# Note\n\nTerns.\n")]);
    let scan = scanned_pdf(&[
        text_png("The first page mentions the guillemot."),
        text_png("The second page mentions the shearwater."),
    ]);
    fixtures::write(&dir.join("long.pdf"), &scan);
    let mut options = IndexOptions::default();
    options.max_ocr_pages_per_file = 1;
    assert_eq!(index_counting_pages(&mut f.library, &options), 1);
    assert_eq!(file_names(&f.library, "guillemot"), ["long.pdf"]);
    assert!(file_names(&f.library, "shearwater").is_empty());
    let view = f.library.document(&dir.join("long.pdf")).unwrap();
    let warning = view.document.warning.unwrap();
    assert!(
        warning.contains("1 page(s) without a text layer were not read by OCR (pages 2–2"),
        "{warning}"
    );
}

#[test]
fn ocr_languages_are_checked_against_the_installed_data() {
    let mut f = Fixture::new();
    f.add_source("docs", "", &[("note.md", "# Note\n\nPetrels.\n")]);
    let source = f.library.sources().unwrap().remove(0);
    assert_eq!(source.ocr_languages, ["eng"]);
    let err = f
        .library
        .set_source_ocr_languages(source.id, &["eng".into(), "zzz".into()])
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("ocr_languages"), "{message}");
    assert!(
        message.contains("sudo apt install tesseract-ocr-zzz"),
        "{message}"
    );
    assert_eq!(
        f.library
            .find_source(&source.id.to_string())
            .unwrap()
            .ocr_languages,
        ["eng"]
    );
    let err = Library::check_ocr_languages(&["eng;rm".into()]).unwrap_err();
    assert!(
        err.to_string().contains("not a Tesseract language code"),
        "{err}"
    );
    let set = f
        .library
        .set_source_ocr_languages(source.id, &["eng".into()])
        .unwrap();
    assert_eq!(set.ocr_languages, ["eng"]);
}
