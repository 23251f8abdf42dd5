//! Symbolic links stay inside their source. Each attack here worked once (issue 17, item 10):
//! a link in a public folder to a file of a restricted collection, and a link to a file
//! outside every source, were indexed into the public collection and returned to a key that
//! may read only that collection; a link to the data directory made the library's own files
//! searchable, and under `--watch` re-indexed them on every write.

#![cfg(unix)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quarry_core::{
    DocumentStatus, IndexOptions, Library, Principal, Scope, SearchMode, SearchRequest, WatchEvent,
    WatchOptions,
};

/// `pub` (public) and `secret` (confidential) collections, a folder outside every source, and
/// in `pub`: links to a secret file, to the outside file, to the data directory, and to a
/// file of `pub` itself.
struct Linked {
    fixture: Fixture,
    public: PathBuf,
}

fn linked() -> Linked {
    let mut fixture = Fixture::new();
    let public = fixture.add_collection(
        "pub",
        "public",
        "pub",
        &[("notes.md", "# Notes\n\nZebras graze in the public park.")],
    );
    let secret = fixture.add_collection(
        "secret",
        "confidential",
        "secret",
        &[(
            "plans.md",
            "# Plans\n\nZebras will be moved at midnight, says the secret plan.",
        )],
    );
    let outside = fixture.docs.path().join("outside");
    write(
        &outside.join("loose.md"),
        "# Loose\n\nZebras outside every source.",
    );
    symlink(secret.join("plans.md"), public.join("leak.md")).unwrap();
    symlink(outside.join("loose.md"), public.join("loose.md")).unwrap();
    symlink(fixture.data.path(), public.join("library")).unwrap();
    symlink(public.join("notes.md"), public.join("again.md")).unwrap();
    Linked { fixture, public }
}

fn public_reader() -> Principal {
    Principal {
        kind: quarry_core::auth::PrincipalKind::Personal,
        id: "key:1".into(),
        label: "reader".into(),
        scope: Scope {
            collections: Some(vec!["pub".into()]),
            sensitivity_ceiling: "internal".into(),
        },
    }
}

/// The file names a lexical search returns to `principal`, sorted: each hit's, and the files
/// it names as holding the same text ("also at").
fn found(library: &Library, principal: &Principal, query: &str) -> Vec<String> {
    let mut request = SearchRequest::new(query).with_mode(SearchMode::Lexical);
    request.settings.max_per_document = 0;
    let file_name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let mut names: Vec<String> = library
        .search_as(principal, request)
        .unwrap()
        .hits
        .iter()
        .flat_map(|h| {
            let copies = h.also_at.iter().map(|p| file_name(Path::new(p)));
            std::iter::once(file_name(&h.path)).chain(copies)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn skipped_reason(library: &Library, path: &Path) -> Option<String> {
    let document = library.document(path).ok()?.document;
    (document.status == DocumentStatus::Skipped)
        .then_some(document.reason)
        .flatten()
}

#[test]
fn links_leaving_a_source_are_not_followed_and_say_why() {
    let Linked {
        mut fixture,
        public,
    } = linked();
    fixture.reindex();
    let library = &fixture.library;

    // Only the public note, directly and through the link that stays inside the folder.
    assert_eq!(
        found(library, &public_reader(), "zebras"),
        ["again.md", "notes.md"]
    );
    assert!(found(library, &Principal::administrator(), "midnight") == ["plans.md"]);
    for link in ["leak.md", "loose.md", "library"] {
        assert_eq!(
            skipped_reason(library, &public.join(link)).as_deref(),
            Some("symlink_outside"),
            "{link}"
        );
    }
    let message = |link: &str| {
        let document = library.document(&public.join(link)).unwrap().document;
        document.last_error.unwrap_or_default()
    };
    assert!(
        message("leak.md").contains("never read through a link"),
        "{}",
        message("leak.md")
    );
    assert!(
        message("loose.md").contains("outside the source folder"),
        "{}",
        message("loose.md")
    );
    // The library's own files are not searchable.
    assert!(found(library, &Principal::administrator(), "outbox_seq").is_empty());
}

#[test]
fn a_source_allowed_to_follow_links_still_never_reaches_another_source_or_the_library() {
    let Linked {
        mut fixture,
        public,
    } = linked();
    fixture.reindex();
    let source = fixture.library.sources().unwrap()[0].id;
    let updated = fixture
        .library
        .set_source_follow_links(source, true)
        .unwrap();
    assert!(updated.follow_links);
    fixture.reindex();
    let library = &fixture.library;

    assert_eq!(
        found(library, &public_reader(), "zebras"),
        ["again.md", "loose.md", "notes.md"]
    );
    for link in ["leak.md", "library"] {
        assert_eq!(
            skipped_reason(library, &public.join(link)).as_deref(),
            Some("symlink_outside"),
            "{link}"
        );
    }
    assert!(found(library, &Principal::administrator(), "outbox_seq").is_empty());

    // Taking the permission back drops what it brought in at the next scan.
    fixture
        .library
        .set_source_follow_links(source, false)
        .unwrap();
    fixture.reindex();
    assert_eq!(
        found(&fixture.library, &public_reader(), "zebras"),
        ["again.md", "notes.md"]
    );
}

#[test]
fn links_into_proc_and_sys_are_never_followed_even_when_links_may_leave_the_folder() {
    let mut fixture = Fixture::new();
    let public = fixture.add_collection(
        "pub",
        "public",
        "pub",
        &[("notes.md", "# Notes\n\nZebras graze in the public park.")],
    );
    // The indexing process's own environment (keys, tokens) and the kernel's state.
    symlink("/proc/self/environ", public.join("environ.txt")).unwrap();
    symlink("/proc/self", public.join("self")).unwrap();
    symlink("/sys/kernel", public.join("kernel")).unwrap();
    let source = fixture.library.sources().unwrap()[0].id;
    fixture
        .library
        .set_source_follow_links(source, true)
        .unwrap();
    fixture.reindex();
    let library = &fixture.library;
    for link in ["environ.txt", "self", "kernel"] {
        let document = library.document(&public.join(link)).unwrap().document;
        assert_eq!(document.status, DocumentStatus::Skipped, "{link}");
        let message = document.last_error.unwrap_or_default();
        assert!(message.contains("pseudo-filesystem"), "{link}: {message}");
    }
    assert!(found(library, &Principal::administrator(), "PATH").is_empty());
    assert_eq!(found(library, &public_reader(), "zebras"), ["notes.md"]);
}

#[test]
fn a_watched_source_with_a_link_to_the_library_does_not_index_itself_in_a_loop() {
    let Linked { fixture, public } = linked();
    let data = fixture.data.path().to_path_buf();
    drop(fixture.library);
    let changes = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (data, changes, stop) = (data.clone(), changes.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut library = Library::open(&data).unwrap();
            let mut writer = library.writer().unwrap();
            let on_event = |event: &WatchEvent| {
                if let WatchEvent::Changed { .. } = event {
                    changes.fetch_add(1, Ordering::SeqCst);
                }
            };
            writer.watch(
                &IndexOptions::default(),
                &WatchOptions::default(),
                &on_event,
                &stop,
            )
        })
    };
    let reader = Library::open(&data).unwrap();
    eventually(60, "the first scan", || {
        reader
            .document(&public.join("notes.md"))
            .is_ok_and(|d| d.document.status == DocumentStatus::Indexed)
    });
    // A real change is seen...
    write(
        &public.join("fresh.md"),
        "# Fresh\n\nOkapis arrive in the public park.",
    );
    eventually(30, "the new note", || {
        !found(&reader, &Principal::administrator(), "okapis").is_empty()
    });
    // ...and then the folder is quiet: the writes of indexing it (into the data directory,
    // which the link makes visible inside the source) start no further scans.
    std::thread::sleep(Duration::from_secs(2));
    let settled = changes.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(4));
    let later = changes.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap().unwrap();
    assert_eq!(later, settled, "the watcher kept re-indexing its own files");
}
