//! Search behaviour through the CLI: stemming per collection language, phrases, boosts,
//! collection filters, snippets and locations, JSON output and exit codes.

mod common;

use common::*;

#[test]
fn search_ranks_stems_filters_and_locates() {
    let env = TestEnv::new();
    let d = env.docs();
    write(
        &d.join("en/borrow.md"),
        "# Borrowing\n\nintro line\n\nThe borrow checker validates lifetimes of references.\n",
    );
    write(
        &d.join("en/other.md"),
        "# Cooking\n\nA recipe that mentions a checker pattern tablecloth.\n",
    );
    write(
        &d.join("en/title.md"),
        "# Lifetimes explained\n\nNothing else here about it.\n",
    );
    write(
        &d.join("fr/chat.txt"),
        "Les chats mangent des souris dans les maisons.",
    );
    env.ok(&["collection", "add", "french", "--language", "french"]);
    env.ok(&[
        "source",
        "add",
        d.join("en").to_str().unwrap(),
        "--collection",
        "english",
    ]);
    env.ok(&[
        "source",
        "add",
        d.join("fr").to_str().unwrap(),
        "--collection",
        "french",
    ]);
    env.ok(&["index"]);

    // English stemming: "checking" and "checker" share nothing, but "lifetime" matches "lifetimes".
    let v = env.json(&["search", "--mode", "lexical", "lifetime"]);
    let hits = v["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    // A title match outranks a body match.
    assert!(
        hits[0]["path"].as_str().unwrap().ends_with("title.md"),
        "{v:#}"
    );
    // Locations and highlighted snippets.
    let borrow = &env.json(&["search", "--mode", "lexical", "\"borrow checker\""])["hits"];
    assert_eq!(
        borrow.as_array().unwrap().len(),
        1,
        "a phrase needs the words together"
    );
    assert_eq!(borrow[0]["location"]["line_start"], 1);
    assert_eq!(borrow[0]["location"]["line_end"], 5);
    let snippet = &borrow[0]["snippet"];
    let text = snippet["text"].as_str().unwrap();
    let (s, e) = (
        snippet["highlights"][0][0].as_u64().unwrap() as usize,
        snippet["highlights"][0][1].as_u64().unwrap() as usize,
    );
    assert!(text[s..e].to_lowercase().starts_with("borrow"), "{snippet}");
    // French stemming in the French collection: "maison" finds "maisons".
    let fr = env.json(&[
        "search",
        "--mode",
        "lexical",
        "maison",
        "--collection",
        "french",
    ]);
    assert_eq!(fr["hits"].as_array().unwrap().len(), 1, "{fr:#}");
    // The collection filter excludes the other collection.
    let en_only = env.json(&[
        "search",
        "--mode",
        "lexical",
        "souris",
        "--collection",
        "english",
    ]);
    assert!(en_only["hits"].as_array().unwrap().is_empty());
    // No results: exit code 1, a readable line.
    let none = env.run(&["search", "--mode", "lexical", "xylophone"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stdout).contains("no results"));
    // Human output shows path:line and the heading path.
    let human = env.ok(&["search", "--mode", "lexical", "borrow checker"]);
    assert!(
        human.contains("borrow.md:1") && human.contains("§ Borrowing"),
        "{human}"
    );
    // Stray query syntax does not fail a search.
    env.ok(&["search", "--mode", "lexical", "lifetimes \"unbalanced"]);
}

#[test]
fn collections_and_sources_can_be_listed_and_removed() {
    let env = TestEnv::new();
    write(&env.docs().join("a.md"), "The jackal howls.");
    env.add_docs_source("animals");
    env.ok(&["index"]);
    let list = env.json(&["collection", "list"]);
    assert_eq!(list[0]["name"], "animals");
    let sources = env.json(&["source", "list"]);
    assert_eq!(sources[0]["documents_indexed"], 1);
    let dup = env.run(&[
        "source",
        "add",
        env.docs().to_str().unwrap(),
        "-c",
        "animals",
    ]);
    assert!(String::from_utf8_lossy(&dup.stderr).contains("source_exists"));
    env.ok(&["collection", "remove", "animals"]);
    assert!(env.search_paths("jackal").is_empty());
    assert!(env.json(&["check"])["stale_in_fulltext"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn demo_runs() {
    let out = TestEnv::new().ok(&["demo"]);
    assert!(out.contains("rust-ownership.md"), "{out}");
    assert!(out.contains("caching.html"), "{out}");
}

#[test]
fn include_and_exclude_globs_and_gitignore_apply() {
    let env = TestEnv::new();
    let d = env.docs();
    write(&d.join("keep.md"), "The walrus basks.");
    write(&d.join("skip.txt"), "The walrus text file.");
    write(&d.join("build/out.md"), "The walrus build artefact.");
    write(&d.join("ignored.md"), "The walrus ignored by git.");
    write(&d.join(".gitignore"), "ignored.md\n");
    env.ok(&[
        "source",
        "add",
        d.to_str().unwrap(),
        "-c",
        "g",
        "--include",
        "*.md",
        "--exclude",
        "build",
    ]);
    env.ok(&["index"]);
    let paths = env.search_paths("walrus");
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert!(paths[0].ends_with("keep.md"));
}

#[test]
fn a_hostile_query_is_refused_by_name_not_an_abort() {
    let env = TestEnv::new();
    write(&env.docs().join("a.md"), "Lighthouses guide ships.");
    env.add_docs_source("notes");
    env.ok(&["index"]);
    for (query, limit) in [
        (
            format!("{}lighthouse", "(".repeat(3_000)),
            "nested 3000 deep",
        ),
        (
            format!("{}lighthouse", "NOT ".repeat(2_000)),
            "2000 AND/OR/NOT",
        ),
        ("lighthouse ".repeat(1_000), "11000 characters"),
    ] {
        let out = env.run(&["search", &query, "--mode", "lexical"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("invalid_query"), "{stderr}");
        assert!(stderr.contains(limit), "{stderr}");
    }
    // A query within the limits still searches.
    assert!(!env.search_paths("((lighthouse))").is_empty());
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let env = TestEnv::new();
    for i in 0..50 {
        write(
            &env.docs().join(format!("n{i}.md")),
            "Lighthouses guide ships.",
        );
    }
    env.add_docs_source("notes");
    env.ok(&["index"]);
    // `quarry search … | head -0`: the reader is gone before the first line is written.
    let mut child = env
        .command(&["search", "lighthouse", "--mode", "lexical", "-n", "50"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}
