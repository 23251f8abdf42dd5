//! Fail points inside the engine: moments no outside process can hit reliably.
//! Fail points are process-global: each test holds a `FailScenario`, which runs the tests one
//! at a time and clears every point when the test ends, even when it panics.

mod common;

use fail::FailScenario;
use quarry_core::{DocumentStatus, IndexOptions, Library, SearchRequest};

use common::Fixture;

/// A library with one source `c` holding `files`, not indexed yet.
fn library_with(files: &[(&str, &str)]) -> (tempfile::TempDir, tempfile::TempDir, Library) {
    let mut f = Fixture::new();
    f.add_source("c", "", files);
    (f.data, f.docs, f.library)
}

#[test]
fn a_file_deleted_between_walk_and_read_is_recorded_and_healed() {
    let _scenario = FailScenario::setup();
    let (_data, docs, mut library) = library_with(&[
        ("stays.md", "The gecko climbs."),
        ("goes.md", "The tern migrates."),
    ]);
    let doomed = docs.path().join("goes.md");
    let target = doomed.clone();
    fail::cfg_callback("index_after_walk", move || {
        let _ = std::fs::remove_file(&target);
    })
    .unwrap();
    let progress = library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    fail::remove("index_after_walk");
    assert_eq!(progress.files_indexed, 1);
    assert_eq!(progress.files_failed, 1);
    let doc = library.document(&doomed).unwrap().document;
    assert_eq!(doc.status, DocumentStatus::Failed);
    assert_eq!(doc.reason.as_deref(), Some("vanished"));
    assert_eq!(
        library
            .search(&SearchRequest::new("gecko"))
            .unwrap()
            .hits
            .len(),
        1
    );
    // The next scan no longer sees the file and drops the record.
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    assert!(library.document(&doomed).is_err());
    assert!(library.verify().unwrap().is_consistent());
}

#[test]
fn a_failed_fulltext_commit_is_replayed_from_the_outbox() {
    let _scenario = FailScenario::setup();
    let (data, _docs, mut library) = library_with(&[("a.md", "The dormouse sleeps all winter.")]);
    fail::cfg("fulltext_before_commit", "return").unwrap();
    let result = library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {});
    fail::remove("fulltext_before_commit");
    assert!(result.is_err(), "the tantivy commit failed");
    // SQLite has the chunk; tantivy does not yet.
    let report = library.verify().unwrap();
    assert_eq!(report.sqlite_chunks, 1);
    assert_eq!(report.missing_from_fulltext.len(), 1);
    drop(library);
    // Re-opening replays the outbox.
    let library = Library::open(data.path()).unwrap();
    assert!(library.verify().unwrap().is_consistent());
    assert_eq!(
        library
            .search(&SearchRequest::new("dormouse"))
            .unwrap()
            .hits
            .len(),
        1
    );
}

#[test]
fn a_deleted_fulltext_folder_is_rebuilt_from_sqlite() {
    let _scenario = FailScenario::setup();
    let (data, _docs, mut library) =
        library_with(&[("a.md", "The wren sings."), ("b.md", "The lynx stalks.")]);
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    drop(library);
    std::fs::remove_dir_all(data.path().join("fulltext")).unwrap();
    let library = Library::open(data.path()).unwrap();
    assert!(library.verify().unwrap().is_consistent());
    assert_eq!(
        library
            .search(&SearchRequest::new("lynx"))
            .unwrap()
            .hits
            .len(),
        1
    );
}
