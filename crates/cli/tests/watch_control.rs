//! What the desktop app relies on to control indexing: a retry queue the watcher drains
//! (failed files read again even when unchanged), a cancel flag that stops a scan without
//! losing anything, and a second in-process writer refused at once.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quarry_core::{
    DocumentStatus, Error, IndexOptions, Library, SearchMode, SearchRequest, WatchOptions,
    WatchRequests,
};

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

fn status_of(library: &Library, path: &Path) -> DocumentStatus {
    library.document(path).unwrap().document.status
}

#[test]
fn a_requested_retry_reads_a_failed_file_that_has_not_changed() {
    let env = TestEnv::new();
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
    let hits = reader
        .search(&SearchRequest::new("ptarmigans").with_mode(SearchMode::Lexical))
        .unwrap();
    assert_eq!(hits.hits[0].path, file);

    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap().unwrap();
}

#[test]
fn a_cancelled_scan_reads_nothing_more_and_deletes_nothing() {
    let env = TestEnv::new();
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
    let env = TestEnv::new();
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
