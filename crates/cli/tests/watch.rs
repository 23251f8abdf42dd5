//! `quarry index --watch` reflects edits, renames, deletes and new files within seconds,
//! survives its folder disappearing, and lets other processes search meanwhile.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;

struct Watcher {
    child: Child,
    /// Scans started since the watcher began watching.
    scans: Arc<AtomicUsize>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the watcher and waits until it watches (after its first full scan).
fn start(env: &TestEnv, extra: &[&str]) -> Watcher {
    let mut args = vec!["index", "--watch", "--progress", "json"];
    args.extend_from_slice(extra);
    let mut child = env
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let scans = Arc::new(AtomicUsize::new(0));
    let counter = scans.clone();
    std::thread::spawn(move || {
        let mut watching = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"watching\"") || line.contains("\"degraded\"") {
                watching = true;
                let _ = tx.send(());
            } else if watching && line.contains("\"scan_started\"") {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("watcher started");
    Watcher { child, scans }
}

#[test]
fn an_idle_watcher_stays_idle() {
    let env = TestEnv::new();
    write(&env.docs().join(".gitignore"), "target/\n");
    write(&env.docs().join("a.md"), "The stoat naps.");
    env.add_docs_source("idle");
    let watcher = start(&env, &[]);
    // One change, one scan; the scan's own reads (folders, .gitignore) must not look like
    // changes that start the next one.
    write(&env.docs().join("b.md"), "The weasel hunts.");
    eventually(15, "change is searchable", || {
        !env.search_paths("weasel").is_empty()
    });
    let after_change = watcher.scans.load(Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        watcher.scans.load(Ordering::Relaxed),
        after_change,
        "no scans while nothing changes"
    );
}

#[test]
fn edits_renames_deletes_and_new_files_are_reflected() {
    let env = TestEnv::new();
    let d = env.docs();
    write(
        &d.join("alpha.md"),
        "# Alpha\n\nThe capybara is the largest rodent.",
    );
    write(
        &d.join("beta.md"),
        "# Beta\n\nThe heron waits in the shallows.",
    );
    write(&d.join(".gitignore"), "target/\n");
    write(&d.join("target/keep.txt"), "build output");
    write(&d.join(".cache/keep.txt"), "cache");
    env.add_docs_source("w");
    let watcher = start(&env, &[]);
    assert!(env.search_paths("capybara")[0].ends_with("alpha.md"));

    // Another writer is refused with the holder named; readers keep working.
    let busy = env.run(&["index"]);
    let err = String::from_utf8_lossy(&busy.stderr);
    assert!(
        err.contains("writer_busy") && err.contains(&format!("pid {}", watcher.child.id())),
        "{err}"
    );

    // Changes inside gitignored or hidden folders are ignored, as a full scan ignores them.
    write(&d.join("target/gen.md"), "The lemming is generated.");
    write(&d.join(".cache/deep/x.md"), "The lemming is cached.");
    write(&d.join("sentinel.md"), "The sentinel arrives after them.");
    eventually(15, "sentinel is searchable", || {
        !env.search_paths("sentinel").is_empty()
    });
    let lemmings = env.search_paths("lemming");
    assert!(
        lemmings.is_empty(),
        "ignored folders stay out: {lemmings:?}"
    );

    // Edit.
    write(
        &d.join("alpha.md"),
        "# Alpha\n\nThe capybara swims with the marmoset.",
    );
    eventually(15, "edit is searchable", || {
        !env.search_paths("marmoset").is_empty()
    });

    // Rename: same document id, no re-extraction.
    let before = env.json(&["doc", "show", d.join("beta.md").to_str().unwrap()]);
    std::fs::rename(d.join("beta.md"), d.join("gamma.md")).unwrap();
    eventually(15, "rename is reflected", || {
        env.search_paths("heron")
            .first()
            .is_some_and(|p| p.ends_with("gamma.md"))
    });
    let after = env.json(&["doc", "show", d.join("gamma.md").to_str().unwrap()]);
    assert_eq!(
        before["document"]["id"], after["document"]["id"],
        "a rename keeps the document"
    );
    assert_eq!(
        before["chunks"][0]["id"], after["chunks"][0]["id"],
        "and its chunks"
    );
    assert_eq!(after["document"]["title"], "Beta");

    // Delete.
    std::fs::remove_file(d.join("gamma.md")).unwrap();
    eventually(15, "delete is reflected", || {
        env.search_paths("heron").is_empty()
    });

    // New file in a new folder.
    write(&d.join("sub/delta.md"), "The ocelot hunts at night.");
    eventually(15, "new file is searchable", || {
        !env.search_paths("ocelot").is_empty()
    });

    // The whole folder disappears: the watcher survives and keeps what was indexed.
    let moved = env.data.path().join("moved-away");
    std::fs::rename(d, &moved).unwrap();
    eventually(15, "source marked missing", || {
        env.json(&["source", "list"])[0]["status"] == "missing"
    });
    assert!(
        !env.search_paths("capybara").is_empty(),
        "documents are kept"
    );
    // It comes back: re-watched and rescanned.
    std::fs::rename(&moved, d).unwrap();
    write(&d.join("epsilon.md"), "The pelican returns.");
    eventually(20, "returned folder is rescanned", || {
        !env.search_paths("pelican").is_empty()
    });
    assert_eq!(env.json(&["source", "list"])[0]["status"], "ok");

    // A source removed from another process leaves the results.
    env.ok(&["source", "remove", d.to_str().unwrap()]);
    assert!(env.search_paths("pelican").is_empty());
    eventually(15, "full text catches up with the removal", || {
        env.json(&["check"])["stale_in_fulltext"]
            .as_array()
            .unwrap()
            .is_empty()
    });
    drop(watcher);
}

#[test]
fn polling_mode_picks_up_changes() {
    let env = TestEnv::new();
    write(&env.docs().join("one.txt"), "The kestrel hovers.");
    env.add_docs_source("p");
    let _watcher = start(&env, &["--poll", "--rescan-secs", "1"]);
    assert!(!env.search_paths("kestrel").is_empty());
    write(&env.docs().join("two.txt"), "The kingfisher dives.");
    eventually(15, "polled change is searchable", || {
        !env.search_paths("kingfisher").is_empty()
    });
    std::fs::remove_file(env.docs().join("one.txt")).unwrap();
    eventually(15, "polled delete is reflected", || {
        env.search_paths("kestrel").is_empty()
    });
}
