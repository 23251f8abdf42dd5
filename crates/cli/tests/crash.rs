//! Killing the indexer (SIGKILL) at several points never leaves SQLite and tantivy
//! disagreeing, and a restart indexes every file exactly once.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;

const FILES: usize = 600;

fn corpus(env: &TestEnv) {
    for i in 0..FILES {
        let mut text = format!("# Note {i}\n\nUnique token uniq{i}x marks this note.\n\n");
        for p in 0..6 {
            text.push_str(&format!("Paragraph {p} of note {i} talks about rivers, deltas and sediment transport in some detail.\n\n"));
        }
        write(&env.docs().join(format!("dir{}/note{i}.md", i % 7)), text);
    }
    env.add_docs_source("crash");
}

fn assert_consistent(env: &TestEnv) {
    let report = env.json(&["check"]);
    assert!(
        report["missing_from_fulltext"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{report:#}"
    );
    assert!(
        report["stale_in_fulltext"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert_eq!(report["duplicate_paths"], 0);
}

fn assert_complete(env: &TestEnv) {
    env.ok(&["index", "--no-embed"]);
    assert_consistent(env);
    let status = env.status();
    assert_eq!(
        status["stats"]["documents_indexed"], FILES as u64,
        "{status:#}"
    );
    assert_eq!(status["stats"]["documents_failed"], 0);
    for i in [0, 1, FILES / 2, FILES - 1] {
        let hits = env.search_paths(&format!("uniq{i}x"));
        assert_eq!(hits.len(), 1, "note {i} indexed exactly once: {hits:?}");
    }
}

/// Kills `quarry index` with SIGKILL after it reports `events` events of kind `event`.
fn kill_after(env: &TestEnv, event: &str, count: usize) {
    let mut child = env
        .command(&[
            "index",
            "--no-embed",
            "--progress",
            "json",
            "--threads",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut seen = 0;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if line.contains(&format!("\"event\":\"{event}\"")) {
            seen += 1;
            if seen == count {
                child.kill().unwrap();
                break;
            }
        }
    }
    child.wait().unwrap();
}

#[test]
fn sigkill_at_several_points_then_restart() {
    for (event, count) in [
        ("batch_committed", 1),
        ("fulltext_committed", 1),
        ("batch_committed", 3),
        ("scan_finished", 1),
    ] {
        let env = TestEnv::new();
        corpus(&env);
        kill_after(&env, event, count);
        // Opening the library after the crash replays the outbox: the two stores agree.
        assert_consistent(&env);
        assert_complete(&env);
    }
}

#[test]
fn sigkill_at_random_times_then_restart() {
    let env = TestEnv::new();
    corpus(&env);
    for delay_ms in [30u64, 120, 250] {
        let mut child = env
            .command(&["index", "--no-embed", "--threads", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();
        assert_consistent(&env);
        // Touch some files so the next run has real work between kills.
        write(
            &env.docs().join(format!("dir0/extra{delay_ms}.md")),
            format!("extra note {delay_ms}"),
        );
    }
    std::fs::remove_file(env.docs().join("dir0/extra30.md")).unwrap();
    std::fs::remove_file(env.docs().join("dir0/extra120.md")).unwrap();
    std::fs::remove_file(env.docs().join("dir0/extra250.md")).unwrap();
    assert_complete(&env);
}

#[test]
fn abort_between_sqlite_and_fulltext_commit_is_repaired() {
    let env = TestEnv::new();
    corpus(&env);
    // The fail point aborts the process right after the first SQLite batch commits, before
    // tantivy has seen it.
    let out = env
        .command(&["index", "--no-embed"])
        .env("FAILPOINTS", "index_after_sqlite_commit=return")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the process aborted");
    let status = env.json(&["status"]);
    assert!(
        status["stats"]["chunks"].as_u64().unwrap() > 0,
        "SQLite kept the first batch"
    );
    assert_consistent(&env);
    assert_complete(&env);
}

/// Chunks that have a vector: a vector-only search wide enough to return every one of them.
fn chunks_with_vectors(env: &TestEnv) -> usize {
    let v = env.json(&[
        "search",
        "rivers and sediment",
        "--mode",
        "vector",
        "--all-chunks",
        "-n",
        "1000",
        "--settings",
        r#"{"ann_breadth":0,"vector_candidates":1000,"min_similarity":-1}"#,
    ]);
    v["hits"].as_array().unwrap().len()
}

#[test]
fn killing_the_embedding_lane_loses_nothing_and_it_resumes() {
    let env = TestEnv::new();
    for i in 0..60 {
        let mut text = format!("# Note {i}\n\n");
        for p in 0..2 {
            text.push_str(&format!("Paragraph {p} of note {i} is about rivers, deltas and sediment, at some length so that it is a chunk of its own. "));
            text.push_str(&"Silt settles where the current slows. ".repeat(20));
            text.push_str("\n\n");
        }
        write(&env.docs().join(format!("note{i}.md")), text);
    }
    env.add_docs_source("lane");
    env.ok(&["index", "--no-embed"]);
    let total = env.status()["embeddings"][0]["total"].as_i64().unwrap();
    assert!(total > 64, "want several batches, got {total} chunks");
    // Kill the lane once it has committed at least one batch.
    let mut child = env
        .command(&["index", "--progress", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "embedding" && event["embedded"].as_i64().unwrap() > 0 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let embedded = env.status()["embeddings"][0]["embedded"].as_i64().unwrap();
    assert!(embedded > 0 && embedded < total, "{embedded} of {total}");
    // What the cursor says is embedded has a vector, and nothing past it does.
    assert_eq!(chunks_with_vectors(&env) as i64, embedded);
    env.ok(&["index"]);
    let status = env.status();
    assert_eq!(status["embeddings"][0]["embedded"].as_i64().unwrap(), total);
    assert_eq!(chunks_with_vectors(&env) as i64, total);
}
