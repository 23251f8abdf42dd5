//! No file may stall the indexer: a file that chunks into more than the per-file cap is
//! indexed up to the cap and says so, one that takes longer than the per-file budget is left
//! out with reason `timeout`, and every other file of the folder is indexed all the same.

mod common;

use std::time::Duration;

use quarry_core::{DocumentStatus, IndexOptions, Library, SearchMode, SearchRequest};

use common::Fixture;

/// Prose of `paragraphs` numbered paragraphs, one chunk-sized each.
fn long_text(paragraphs: usize) -> String {
    (0..paragraphs)
        .map(|i| {
            format!(
                "Paragraph {i}. {}\n\n",
                "The tide tables list the harbour's high and low water. ".repeat(12)
            )
        })
        .collect()
}

fn index_with(library: &mut Library, options: IndexOptions) {
    library
        .writer()
        .unwrap()
        .index_all(&options, &|_| {})
        .unwrap();
}

fn found(library: &Library, query: &str) -> Vec<String> {
    let mut request = SearchRequest::new(query);
    request.settings.mode = SearchMode::Lexical;
    library
        .search(&request)
        .unwrap()
        .hits
        .iter()
        .map(|h| h.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Whether every `quarry-extract` thread of this process has ended within `wait`.
fn extraction_threads_end_within(wait: Duration) -> bool {
    let started = std::time::Instant::now();
    loop {
        let running = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| name.trim() == "quarry-extract")
            })
            .count();
        if running == 0 {
            return true;
        }
        if started.elapsed() > wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A folder of one short note (about the okapi) and `tides.txt`, `paragraphs` long.
fn note_beside_tides(paragraphs: usize) -> (Fixture, std::path::PathBuf) {
    let mut f = Fixture::new();
    let dir = f.add_source(
        "notes",
        "",
        &[
            (
                "good.md",
                "# Okapi\n\nThe okapi lives in the Congo.\n".to_string(),
            ),
            ("tides.txt", long_text(paragraphs)),
        ],
    );
    (f, dir)
}

#[test]
fn a_file_past_the_chunk_cap_is_indexed_up_to_it_and_says_so() {
    let (mut f, dir) = note_beside_tides(400);
    let mut options = IndexOptions::default();
    options.max_chunks_per_file = 25;
    index_with(&mut f.library, options);
    let tides = f.library.document(&dir.join("tides.txt")).unwrap();
    assert_eq!(tides.document.status, DocumentStatus::Indexed);
    assert_eq!(tides.chunks.len(), 25);
    let warning = tides.document.warning.unwrap_or_default();
    assert!(
        warning.contains("only the first 25 of its") && warning.contains("capped at 25 chunks"),
        "{warning}"
    );
    assert_eq!(found(&f.library, "okapi Congo"), ["good.md"]);
}

#[test]
fn a_file_past_the_time_budget_is_left_out_and_the_rest_is_indexed() {
    let (mut f, dir) = note_beside_tides(20_000);
    let mut options = IndexOptions::default();
    // Ample for a short note even on a busy machine; far too little for 14 MB of prose.
    options.file_time_budget = Duration::from_millis(250);
    index_with(&mut f.library, options);
    let tides = f.library.document(&dir.join("tides.txt")).unwrap();
    assert_eq!(tides.document.status, DocumentStatus::Failed);
    assert_eq!(tides.document.reason.as_deref(), Some("timeout"));
    assert!(tides
        .document
        .last_error
        .unwrap_or_default()
        .contains("longer than 0.25 s"));
    assert_eq!(found(&f.library, "okapi Congo"), ["good.md"]);
    // The extraction left behind stops itself at its next look at the clock, instead of
    // chunking the whole file for nobody (under `--watch` such threads piled up).
    assert!(
        extraction_threads_end_within(Duration::from_secs(5)),
        "an abandoned extraction thread is still running"
    );

    // With the default budget the same file is indexed on the next scan.
    let mut options = IndexOptions::default();
    options.retry_failed = true;
    index_with(&mut f.library, options);
    let tides = f.library.document(&dir.join("tides.txt")).unwrap();
    assert_eq!(tides.document.status, DocumentStatus::Indexed);
}
