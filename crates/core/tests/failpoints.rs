//! Fail points inside the engine: moments no outside process can hit reliably.
//! Fail points are process-global: each test holds a `FailScenario`, which runs the tests one
//! at a time and clears every point when the test ends, even when it panics.
//! Release builds have no fail points, so these tests run in debug builds only.
#![cfg(debug_assertions)]

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

fn hit_count(library: &Library, query: &str) -> usize {
    library
        .search(&SearchRequest::new(query))
        .unwrap()
        .hits
        .len()
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
    assert_eq!(hit_count(&library, "gecko"), 1);
    // The next scan no longer sees the file and drops the record.
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    assert!(library.document(&doomed).is_err());
    assert!(library.verify().unwrap().is_consistent());
}

/// Indexes on a thread of its own and fails, rather than hangs, when that takes a minute.
fn index_within_a_minute(library: Library) -> (Library, quarry_core::IndexProgress) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut library = library;
        let progress = library
            .writer()
            .unwrap()
            .index_all(&IndexOptions::default(), &|_| {})
            .unwrap();
        let _ = tx.send((library, progress));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("indexing hung (a read that blocks for good?)")
}

#[test]
fn a_file_swapped_for_a_link_after_the_walk_is_not_read_through_it() {
    let _scenario = FailScenario::setup();
    let (_data, docs, mut library) = library_with(&[
        ("stays.md", "The gecko climbs."),
        ("swapped.md", "The tern migrates over the estuary."),
    ]);
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    // Outside every source: a file only the indexing user may read.
    let private = tempfile::tempdir().unwrap();
    let secret = private.path().join("secret.txt");
    std::fs::write(&secret, "The vault combination is marzipan.").unwrap();
    let swapped = docs.path().join("swapped.md");
    std::fs::write(&swapped, "The tern migrates over the estuary, twice.").unwrap();
    let (target, link) = (secret.clone(), swapped.clone());
    fail::cfg_callback("index_after_walk", move || {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
    })
    .unwrap();
    let (library, _) = index_within_a_minute(library);
    fail::remove("index_after_walk");
    assert!(
        hit_count(&library, "marzipan vault") == 0,
        "the linked file was indexed"
    );
    let doc = library.document(&swapped).unwrap();
    assert_eq!(doc.document.status, DocumentStatus::Failed);
    assert_eq!(doc.document.reason.as_deref(), Some("replaced"));
    // What was indexed of the file before stays searchable.
    assert_eq!(hit_count(&library, "estuary"), 1);
}

#[test]
fn a_file_swapped_for_a_named_pipe_after_the_walk_does_not_hang_indexing() {
    let _scenario = FailScenario::setup();
    let (_data, docs, library) = library_with(&[
        ("stays.md", "The gecko climbs."),
        ("piped.md", "The tern migrates."),
    ]);
    let piped = docs.path().join("piped.md");
    let fifo = piped.clone();
    fail::cfg_callback("index_after_walk", move || {
        let _ = std::fs::remove_file(&fifo);
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    })
    .unwrap();
    let (library, progress) = index_within_a_minute(library);
    fail::remove("index_after_walk");
    assert_eq!(progress.files_indexed, 1);
    let doc = library.document(&piped).unwrap().document;
    assert_eq!(doc.status, DocumentStatus::Skipped);
    assert_eq!(doc.reason.as_deref(), Some("not_regular_file"));
    assert_eq!(hit_count(&library, "gecko"), 1);
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
    assert_eq!(hit_count(&library, "dormouse"), 1);
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
    assert_eq!(hit_count(&library, "lynx"), 1);
}
