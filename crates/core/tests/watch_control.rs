//! What the desktop app relies on to control indexing: a retry queue the watcher drains
//! (failed files read again even when unchanged), a cancel flag that stops a scan without
//! losing anything, and a second in-process writer refused at once.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quarry_core::{
    DocumentStatus, Error, IndexOptions, Library, SearchMode, SearchRequest, WatchOptions,
    WatchRequests,
};

fn wait_for(what: &str, check: impl FnMut() -> bool) {
    eventually(60, what, check);
}

fn status_of(library: &Library, path: &Path) -> DocumentStatus {
    library.document(path).unwrap().document.status
}

#[test]
fn a_requested_retry_reads_a_failed_file_that_has_not_changed() {
    let env = TestDirs::new();
    let good = pdf(&["Ptarmigans turn white in winter"], false);
    let mut broken = b"%PDF-1.4\nthis file was cut short\n".to_vec();
    broken.resize(good.len(), b' ');
    let file = env.docs().join("survey.pdf");
    write(&file, &broken);
    let file = file.canonicalize().unwrap();

    let mut reader = Library::open(env.data.path()).unwrap();
    reader.add_source(env.docs(), "docs", &[], &[]).unwrap();

    let requests = WatchRequests::default();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (data, requests, stop) = (
            env.data.path().to_path_buf(),
            requests.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let mut library = Library::open(&data).unwrap();
            let options = WatchOptions {
                requests,
                ..WatchOptions::default()
            };
            let mut writer = library.writer().unwrap();
            writer.watch(&IndexOptions::default(), &options, &|_| {}, &stop)
        })
    };
    wait_for("the broken PDF to fail", || {
        reader
            .document(&file)
            .is_ok_and(|d| d.document.status == DocumentStatus::Failed)
    });

    // Mended in place with the same size and modification time: a scan sees no change.
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    write(&file, &good);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(status_of(&reader, &file), DocumentStatus::Failed);

    requests.push(file.clone());
    wait_for("the retried PDF to be indexed", || {
        status_of(&reader, &file) == DocumentStatus::Indexed
    });
    // Another process's reader follows the full-text index's commits after a short delay
    // (tantivy's `OnCommitWithDelay`), so the hit may trail the status by a moment.
    wait_for("the retried PDF to be found by its words", || {
        reader
            .search(&SearchRequest::new("ptarmigans").with_mode(SearchMode::Lexical))
            .unwrap()
            .hits
            .first()
            .is_some_and(|hit| hit.path == file)
    });

    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap().unwrap();
}

#[test]
fn a_cancelled_scan_reads_nothing_more_and_deletes_nothing() {
    let env = TestDirs::new();
    for i in 0..20 {
        write(
            &env.docs().join(format!("note-{i}.md")),
            format!("# Note {i}\n\nfjord {i}\n").as_bytes(),
        );
    }
    let mut library = Library::open(env.data.path()).unwrap();
    let source = library.add_source(env.docs(), "docs", &[], &[]).unwrap();
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    assert_eq!(library.status().unwrap().stats.documents_indexed, 20);

    // A rename and two new files, seen by a scan that is cancelled before it reads any file.
    std::fs::rename(env.docs().join("note-0.md"), env.docs().join("renamed.md")).unwrap();
    write(&env.docs().join("new-a.md"), b"# New A\n\nglacier\n");
    write(&env.docs().join("new-b.md"), b"# New B\n\nglacier\n");
    let cancelled = IndexOptions::default().with_cancel(Arc::new(AtomicBool::new(true)));
    let progress = library
        .writer()
        .unwrap()
        .index_sources(std::slice::from_ref(&source), &cancelled, &|_| {})
        .unwrap();
    assert_eq!(progress.files_indexed, 0, "{progress:?}");
    assert_eq!(
        progress.files_removed, 0,
        "the old name is kept until a scan completes"
    );
    assert_eq!(library.status().unwrap().stats.documents_indexed, 20);

    // The next full scan carries on: the rename is recognised, the new files are read.
    let progress = library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    assert_eq!(progress.files_renamed, 1, "{progress:?}");
    assert_eq!(library.status().unwrap().stats.documents_indexed, 22);
    assert!(library.verify().unwrap().is_consistent());
}

#[test]
fn a_second_writer_in_the_same_process_is_told_who_writes() {
    let env = TestDirs::new();
    let mut first = Library::open(env.data.path()).unwrap();
    let mut second = Library::open(env.data.path()).unwrap();
    let _writing = first.writer().unwrap();
    match second.writer() {
        Err(Error::WriterBusy { holder, .. }) => {
            assert!(holder.contains("this process"), "{holder}")
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("two writers at once"),
    }
    // Removing a source while another thread writes works; the writer applies the deletion.
    let source = second.add_source(env.docs(), "docs", &[], &[]).unwrap();
    second.remove_source(source.id).unwrap();
    assert!(second.sources().unwrap().is_empty());
}

#[test]
fn removing_a_source_in_the_middle_of_its_scan_does_not_stop_the_watcher() {
    let env = TestDirs::new();
    for i in 0..300 {
        write(
            &env.docs().join(format!("n{i:03}.md")),
            format!("# Note {i}\n\ncormorant {i}\n").as_bytes(),
        );
    }
    let other = tempfile::tempdir().unwrap();
    write(&other.path().join("later.md"), b"# Later\n\nwaxwing\n");

    let mut setup = Library::open(env.data.path()).unwrap();
    let doomed = setup.add_source(env.docs(), "docs", &[], &[]).unwrap();
    // The UI's handle removes the source from inside the scan's first progress event, so the
    // rest of the scan writes for a source that no longer exists.
    let remover = std::sync::Mutex::new(Some(setup));
    let on_event = |event: &quarry_core::WatchEvent| {
        if let quarry_core::WatchEvent::Index(quarry_core::IndexEvent::BatchCommitted { .. }) =
            event
        {
            if let Some(mut library) = remover.lock().unwrap().take() {
                library.remove_source(doomed.id).unwrap();
            }
        }
    };
    let stop = AtomicBool::new(false);
    let mut library = Library::open(env.data.path()).unwrap();
    let reader = Library::open(env.data.path()).unwrap();
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut writer = library.writer().unwrap();
            writer.watch(
                &IndexOptions::default(),
                &WatchOptions::default(),
                &on_event,
                &stop,
            )
        });
        wait_for("the removal", || remover.lock().unwrap().is_none());
        // Still watching: a folder added now is indexed.
        let mut adder = Library::open(env.data.path()).unwrap();
        adder.add_source(other.path(), "other", &[], &[]).unwrap();
        wait_for("the new folder to be searchable", || {
            reader
                .search(&SearchRequest::new("waxwing").with_mode(SearchMode::Lexical))
                .is_ok_and(|r| r.hits.len() == 1)
        });
        assert!(!watcher.is_finished(), "the watcher stopped");
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap().unwrap();
    });
    let sources = reader.sources().unwrap();
    assert_eq!(sources.len(), 1, "{sources:?}");
    let hits = reader
        .search(&SearchRequest::new("cormorant").with_mode(SearchMode::Lexical))
        .unwrap();
    assert!(
        hits.hits.is_empty(),
        "the removed folder's documents are gone"
    );
}
