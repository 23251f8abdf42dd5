//! Tools, pipelines, evidence references, API keys and the audit log through the CLI: the
//! seeded tools and default pipeline, export/import round trips, validation on save, readiness,
//! stage traces on real documents, saved snapshots, forged references, scopes and audit records.
//!
//! Every test indexes with `--no-embed` and runs lexical pipelines, so none needs a model; code
//! tools need Python 3 (`QUARRY_PYTHON` or `python3` on the PATH).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SEEDED: &[(&str, &str)] = &[
    ("expand_multi_query", "query"),
    ("retrieve-lexical-focused", "retrieval"),
    ("retrieve-hybrid-coverage", "retrieval"),
    ("retrieve-high-recall", "retrieval"),
    ("llm_select_and_expand", "chunk"),
    ("iterative-context-chunk", "chunk"),
    ("noop_chunk", "chunk"),
    ("context_expansion", "action"),
    ("search_documents", "action"),
    ("fetch_source_document", "action"),
    ("fetch_document_chunks", "action"),
    ("fetch_neighbors", "action"),
];

/// Runs quarry expecting exit code 2 and an `error[code]: message` line; returns (code, message).
fn fails(env: &TestEnv, args: &[&str]) -> (String, String) {
    let out = env.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "quarry {args:?} should fail with 2\n--- stdout\n{}\n--- stderr\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| panic!("quarry {args:?}: no error line\n{stderr}"));
    let code = line
        .strip_prefix("error[")
        .and_then(|rest| rest.split_once(']'))
        .map(|(code, _)| code.to_string())
        .unwrap_or_default();
    (code, line.to_string())
}

/// Runs quarry with `--json`, requires success, and parses stdout.
fn ok_json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = env.ok(&all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("quarry {all:?}: not JSON ({e})\n{text}"))
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Writes `files` (relative path, text) under `env.docs()/dir`, adds that folder as collection
/// `collection` and indexes without embeddings.
fn index_corpus(env: &TestEnv, dir: &str, collection: &str, files: &[(&str, &str)]) -> PathBuf {
    let root = env.docs().join(dir);
    for (name, text) in files {
        write(&root.join(name), text);
    }
    env.ok(&["source", "add", s(&root), "--collection", collection]);
    env.ok(&["index", "--no-embed", "--progress", "none"]);
    root
}

/// Creates and saves a lexical pipeline with the given chunk (and optional query) tools.
fn lexical_pipeline(env: &TestEnv, name: &str, chunk_tools: &str, query_tools: Option<&str>) {
    let mut args = vec![
        "pipeline",
        "create",
        name,
        "--retrieval",
        "retrieve-lexical-focused",
        "--chunk-tools",
        chunk_tools,
    ];
    if let Some(q) = query_tools {
        args.extend(["--query-tools", q]);
    }
    env.ok(&args);
    env.ok(&["pipeline", "save", name]);
}

/// Writes a Python tool source into `dir` and returns its path.
fn source_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    write(&path, text);
    path
}

fn entries(run: &Value) -> &Vec<Value> {
    run["evidence"]["entries"].as_array().unwrap()
}

fn stage_names(run: &Value) -> Vec<&str> {
    run["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect()
}

fn blocking_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("blocking:"))
        .collect()
}

#[test]
fn fresh_library_seeds_twelve_tools_and_a_ready_default_pipeline() {
    let env = TestEnv::new();
    let tools = ok_json(&env, &["tools", "list"]);
    let mut listed: Vec<(String, String, bool)> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["slug"].as_str().unwrap().to_string(),
                t["type"].as_str().unwrap().to_string(),
                t["seeded"].as_bool().unwrap(),
            )
        })
        .collect();
    listed.sort();
    let mut expected: Vec<(String, String, bool)> = SEEDED
        .iter()
        .map(|(slug, t)| (slug.to_string(), t.to_string(), true))
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "{tools:#}");

    // Filters: by type and by text.
    let chunk = ok_json(&env, &["tools", "list", "--type", "chunk"]);
    let mut chunk_slugs: Vec<&str> = chunk
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["slug"].as_str().unwrap())
        .collect();
    chunk_slugs.sort();
    assert_eq!(
        chunk_slugs,
        [
            "iterative-context-chunk",
            "llm_select_and_expand",
            "noop_chunk"
        ]
    );
    let fetch = ok_json(&env, &["tools", "list", "--search", "fetch_"]);
    assert_eq!(fetch.as_array().unwrap().len(), 3, "{fetch:#}");

    // Every seeded code tool was derived on seeding (so it is ready to run).
    let emq = ok_json(&env, &["tools", "show", "expand_multi_query"]);
    assert_eq!(emq["derived"]["manifest"], serde_json::json!([]));
    assert!(emq["source"].as_str().unwrap().contains("async def run"));

    let check = env.run(&["pipeline", "check", "default"]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{stdout}");
    assert!(blocking_lines(&stdout).is_empty(), "{stdout}");
    // The seeded reranker cannot be installed offline: an optional part, said calmly, not a
    // warning that the pipeline runs with less than it should.
    let reranker = stdout
        .lines()
        .find(|l| l.contains("jina-reranker"))
        .unwrap_or_else(|| panic!("the reranker is named: {stdout}"));
    assert!(reranker.starts_with("optional: "), "{stdout}");

    let show = env.ok(&["pipeline", "show", "default"]);
    assert!(show.contains("saved version 1"), "{show}");
    assert!(
        show.contains("retrieve-hybrid-coverage (default)"),
        "{show}"
    );
    assert!(show.contains("expand_multi_query"), "{show}");
    assert!(show.contains("iterative-context-chunk"), "{show}");
    assert!(!show.contains("blocking:"), "{show}");
}

#[test]
fn export_delete_import_round_trips_every_seeded_tool_byte_identical() {
    let env = TestEnv::new();
    let out = tempfile::tempdir().unwrap();
    let file_of = |slug: &str, round: u32| out.path().join(format!("{slug}.{round}.json"));
    for (slug, _) in SEEDED {
        let path = file_of(slug, 1);
        env.ok(&["tools", "export", slug, "-o", s(&path)]);
    }
    let all_before = env.ok(&["tools", "export", "--all"]);
    let parsed: Value = serde_json::from_str(&all_before).unwrap();
    assert_eq!(parsed["format"], "quarry-tool");
    assert_eq!(parsed["version"], 1);
    assert_eq!(parsed["tools"].as_array().unwrap().len(), 12);

    // The seeded tools are in use by the default pipeline: remove it first.
    env.ok(&["pipeline", "delete", "default"]);
    for (slug, _) in SEEDED {
        env.ok(&["tools", "delete", slug]);
    }
    let empty = ok_json(&env, &["tools", "list"]);
    assert_eq!(empty.as_array().unwrap().len(), 0, "{empty:#}");

    let mut import = vec!["tools".to_string(), "import".to_string()];
    import.extend(
        SEEDED
            .iter()
            .map(|(slug, _)| s(&file_of(slug, 1)).to_string()),
    );
    let import: Vec<&str> = import.iter().map(String::as_str).collect();
    let said = env.ok(&import);
    assert_eq!(
        said.lines().filter(|l| l.starts_with("imported")).count(),
        12,
        "{said}"
    );

    for (slug, _) in SEEDED {
        let again = file_of(slug, 2);
        env.ok(&["tools", "export", slug, "-o", s(&again)]);
        let a = std::fs::read(file_of(slug, 1)).unwrap();
        let b = std::fs::read(&again).unwrap();
        assert!(
            a == b,
            "{slug}: export differs after a round trip\n--- before\n{}\n--- after\n{}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
    }
    assert_eq!(env.ok(&["tools", "export", "--all"]), all_before);
    let list = env.ok(&["tools", "list"]);
    assert!(list.contains("12 tool(s)"), "{list}");
    let json = ok_json(&env, &["tools", "list"]);
    assert_eq!(json.as_array().unwrap().len(), 12);
}

#[test]
fn deleting_a_tool_in_use_names_the_pipeline() {
    let env = TestEnv::new();
    let (code, message) = fails(&env, &["tools", "delete", "iterative-context-chunk"]);
    assert_eq!(code, "tool_in_use", "{message}");
    assert!(message.contains("default"), "{message}");
    let tool = ok_json(&env, &["tools", "show", "iterative-context-chunk"]);
    assert_eq!(tool["type"], "chunk");
    let show = env.ok(&["tools", "show", "iterative-context-chunk"]);
    assert!(show.contains("used by pipeline(s): default"), "{show}");

    // A tool nobody uses can go.
    env.ok(&["tools", "delete", "noop_chunk"]);
    let (code, _) = fails(&env, &["tools", "show", "noop_chunk"]);
    assert_eq!(code, "tool_not_found");
}

#[test]
fn tool_type_is_fixed() {
    let env = TestEnv::new();
    let (code, message) = fails(&env, &["tools", "edit", "noop_chunk", "--type", "query"]);
    assert_eq!(code, "invalid_tool", "{message}");
    assert!(message.contains("fixed"), "{message}");
    assert_eq!(
        ok_json(&env, &["tools", "show", "noop_chunk"])["type"],
        "chunk"
    );

    env.ok(&["tools", "duplicate", "noop_chunk", "my-chunk"]);
    let copy = ok_json(&env, &["tools", "show", "my-chunk"]);
    assert_eq!(copy["type"], "chunk");
    assert_eq!(copy["name"], "Pass-through chunk (copy)");
    let original = ok_json(&env, &["tools", "show", "noop_chunk"]);
    assert_eq!(copy["source"], original["source"]);
    assert_eq!(copy["derived"], original["derived"]);
    let chunk_tools = ok_json(&env, &["tools", "list", "--type", "chunk"]);
    let copy_listed = chunk_tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["slug"] == "my-chunk")
        .expect("the copy is listed as a chunk tool");
    assert_eq!(copy_listed["seeded"], false);

    // The copy's type is fixed too.
    let (code, _) = fails(&env, &["tools", "edit", "my-chunk", "--type", "action"]);
    assert_eq!(code, "invalid_tool");
}

#[test]
fn malformed_imports_are_rejected_without_partial_writes() {
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    let good_tool = |slug: &str| {
        serde_json::json!({
            "slug": slug, "name": "Fine", "type": "chunk",
            "source": "async def run(input, ctx):\n    return {\"chunks\": []}\n",
        })
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("not-json.json", "this is { not json".into(), "not JSON"),
        (
            "wrong-format.json",
            serde_json::json!({"format": "something-else", "version": 1, "tools": [good_tool("a1")]})
                .to_string(),
            "quarry-tool",
        ),
        (
            "too-new.json",
            serde_json::json!({"format": "quarry-tool", "version": 99, "tools": [good_tool("a2")]})
                .to_string(),
            "newer",
        ),
        (
            "second-bad.json",
            serde_json::json!({"format": "quarry-tool", "version": 1, "tools": [
                good_tool("first-fine"),
                {"slug": "second-broken", "name": "Broken", "type": "chunk",
                 "source": "async def run(input, ctx):\n    return {\"chunks\": [\n"},
            ]})
            .to_string(),
            "line 2",
        ),
        (
            "unknown-field.json",
            serde_json::json!({"format": "quarry-tool", "version": 1, "tools": [
                {"slug": "colourful", "name": "C", "type": "chunk", "colour": "red",
                 "source": "async def run(input, ctx):\n    return {\"chunks\": []}\n"},
            ]})
            .to_string(),
            "colour",
        ),
    ];
    for (name, text, expect) in &cases {
        let path = dir.path().join(name);
        write(&path, text);
        let (code, message) = fails(&env, &["tools", "import", s(&path)]);
        assert_eq!(code, "invalid_tool_file", "{name}: {message}");
        assert!(
            message.contains(s(&path)),
            "{name}: the error names the file: {message}"
        );
        assert!(
            message.contains(expect),
            "{name}: expected `{expect}` in: {message}"
        );
    }
    // The syntax error says where, and which tool.
    let path = dir.path().join("second-bad.json");
    let (_, message) = fails(&env, &["tools", "import", s(&path)]);
    assert!(message.contains("tools[1]"), "{message}");
    assert!(message.contains("second-broken"), "{message}");
    assert!(message.contains("column"), "{message}");

    // Nothing was written: not even the valid first tool of the two-tool file.
    for slug in ["first-fine", "second-broken", "a1", "a2", "colourful"] {
        let (code, _) = fails(&env, &["tools", "show", slug]);
        assert_eq!(code, "tool_not_found", "{slug} must not exist");
    }
    assert_eq!(
        ok_json(&env, &["tools", "list"]).as_array().unwrap().len(),
        12
    );

    // A good file with a slug that exists is refused as a whole without --replace.
    let clash = dir.path().join("clash.json");
    write(
        &clash,
        serde_json::json!({"format": "quarry-tool", "version": 1, "tools": [
            good_tool("brand-new"), good_tool("noop_chunk"),
        ]})
        .to_string(),
    );
    let (code, message) = fails(&env, &["tools", "import", s(&clash)]);
    assert_eq!(code, "invalid_tool_file", "{message}");
    assert!(
        message.contains("clash.json") && message.contains("--replace"),
        "{message}"
    );
    let (code, _) = fails(&env, &["tools", "show", "brand-new"]);
    assert_eq!(code, "tool_not_found", "an import is all or nothing");
}

#[test]
fn code_tool_save_reports_line_and_column() {
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    let syntax = source_file(
        dir.path(),
        "syntax.py",
        "async def run(input, ctx):\n    q = input[\"query\"]\n    return {{{\n",
    );
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "create",
            "bad-q",
            "--type",
            "query",
            "--name",
            "Bad",
            "--source",
            s(&syntax),
        ],
    );
    assert_eq!(code, "invalid_tool_source", "{message}");
    assert!(message.contains("line 3"), "{message}");
    assert!(message.contains("column"), "{message}");

    let no_inputs = source_file(
        dir.path(),
        "action.py",
        "from quarry import BaseModel\n\nclass Output(BaseModel):\n    x: int\n\nasync def run(input, ctx):\n    return {\"x\": 1}\n",
    );
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "create",
            "act",
            "--type",
            "action",
            "--name",
            "Act",
            "--source",
            s(&no_inputs),
        ],
    );
    assert_eq!(code, "invalid_tool_source", "{message}");
    assert!(message.contains("class Inputs"), "{message}");

    let uses_ctx = "async def run(input, ctx):\n    hits = await ctx.search(input[\"query\"])\n    near = await ctx.fetch_neighbors(hits[0][\"evidence_ref\"])\n    return {\"kind\": \"query_variants\", \"queries\": []}\n";
    let valid = source_file(dir.path(), "valid.py", uses_ctx);
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "create",
            "with-model",
            "--type",
            "query",
            "--name",
            "M",
            "--source",
            s(&valid),
            "--model",
            "x",
        ],
    );
    assert_eq!(code, "invalid_tool", "{message}");
    assert!(message.contains("ctx.llm"), "{message}");
    let (code, _) = fails(&env, &["tools", "show", "with-model"]);
    assert_eq!(code, "tool_not_found", "a refused tool is not saved");

    env.ok(&[
        "tools",
        "create",
        "good-q",
        "--type",
        "query",
        "--name",
        "Good",
        "--source",
        s(&valid),
    ]);
    let tool = ok_json(&env, &["tools", "show", "good-q"]);
    assert_eq!(
        tool["derived"]["manifest"],
        serde_json::json!(["fetch_neighbors", "search"])
    );
    let hash = tool["derived"]["source_hash"].as_str().unwrap();
    assert!(hash.starts_with("sha256:"), "{hash}");
    assert_eq!(
        hash,
        format!("sha256:{:x}", Sha256::digest(uses_ctx.as_bytes()))
    );
    assert_eq!(
        tool["limits"],
        serde_json::json!({"timeout_ms": 5000, "memory_mb": 256})
    );
    let text = env.ok(&["tools", "show", "good-q"]);
    assert!(
        text.contains("evidence manifest: fetch_neighbors, search"),
        "{text}"
    );

    // An unknown ctx operation is refused at its position.
    let unknown = source_file(
        dir.path(),
        "unknown.py",
        "async def run(input, ctx):\n    return await ctx.delete_everything()\n",
    );
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "create",
            "bad-op",
            "--type",
            "chunk",
            "--name",
            "B",
            "--source",
            s(&unknown),
        ],
    );
    assert_eq!(code, "invalid_tool_source", "{message}");
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("ctx.delete_everything"), "{message}");
}

#[test]
fn pipeline_run_trace_shows_every_stage_on_real_documents() {
    let env = TestEnv::new();
    index_corpus(
        &env,
        "corpus",
        "manuals",
        &[
            (
                "pump.md",
                "# XR-200 pump maintenance\n\nTo service the XR-200 pump, drain the housing and replace the impeller seal.\n",
            ),
            ("garden.md", "# Garden\n\nRoses need water and sun every day.\n"),
            ("kitchen.md", "# Kitchen\n\nBake bread at high heat for forty minutes.\n"),
        ],
    );
    lexical_pipeline(
        &env,
        "lex",
        "iterative-context-chunk",
        Some("expand_multi_query"),
    );

    let query = "how to service the XR-200 pump";
    let run = ok_json(&env, &["pipeline", "run", query, "--pipeline", "lex"]);
    assert_eq!(run["pipeline"], "lex");
    assert_eq!(run["version"], 1);
    assert_eq!(run["principal"], "administrator");
    assert_eq!(
        stage_names(&run),
        ["query", "retrieval", "chunk", "evidence"],
        "{run:#}"
    );
    let stages = run["stages"].as_array().unwrap();
    assert_eq!(stages[0]["tool"], "expand_multi_query");
    let queries = stages[0]["output"]["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 2, "{:#}", stages[0]);
    assert_eq!(queries[0]["query"], query);
    assert_eq!(queries[0]["weight"].as_f64(), Some(1.0));
    assert_eq!(queries[1]["query"], "XR-200");
    assert!((queries[1]["weight"].as_f64().unwrap() - 0.8).abs() < 1e-6);
    assert_eq!(stages[1]["tool"], "retrieve-lexical-focused");
    assert_eq!(stages[1]["input"]["variants"].as_array().unwrap().len(), 2);
    assert!(!stages[1]["search_trace"].as_array().unwrap().is_empty());
    assert_eq!(stages[2]["tool"], "iterative-context-chunk");

    let admitted = entries(&run);
    assert!(!admitted.is_empty(), "{run:#}");
    let top = &admitted[0];
    assert!(
        top["path"].as_str().unwrap().ends_with("pump.md"),
        "{top:#}"
    );
    assert!(
        top["text"].as_str().unwrap().contains("impeller seal"),
        "{top:#}"
    );
    assert_eq!(top["collection"], "manuals");
    assert_eq!(top["admitted_by"], "pipeline");
    assert!(top["evidence_ref"].as_str().unwrap().starts_with("qe1."));
    assert!(top["sourceRef"].as_str().unwrap().starts_with("qe1."));
    assert_eq!(stages[3]["output"]["admitted"], admitted.len());
    assert!(run["evidence"]["rejected"].as_array().unwrap().is_empty());

    let trace = env.ok(&["pipeline", "run", query, "--pipeline", "lex", "--trace"]);
    let mut at = 0;
    for marker in ["[query]", "[retrieval]", "[chunk]", "[evidence]"] {
        let found = trace[at..]
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} missing or out of order:\n{trace}"));
        at += found;
    }
    assert!(trace.contains("0.80  XR-200"), "{trace}");
    assert!(trace.contains("pump.md"), "{trace}");

    // Nothing matches: exit 1, with an empty ledger.
    let out = env.run(&["pipeline", "run", "zyzzyva", "--pipeline", "lex", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let none: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(entries(&none).is_empty());
}

#[test]
fn saved_pipeline_keeps_its_tool_snapshot_until_saved_again() {
    let env = TestEnv::new();
    index_corpus(
        &env,
        "corpus",
        "notes",
        &[
            ("a.md", "# One\n\nThe gearbox needs oil.\n"),
            ("b.md", "# Two\n\nA gearbox rattles when worn.\n"),
            ("c.md", "# Three\n\nReplace the gearbox bearings yearly.\n"),
        ],
    );
    env.ok(&["tools", "duplicate", "llm_select_and_expand", "my-select"]);
    lexical_pipeline(&env, "snap", "my-select", None);
    let before = ok_json(&env, &["pipeline", "run", "gearbox", "--pipeline", "snap"]);
    assert_eq!(entries(&before).len(), 3, "{before:#}");

    env.ok(&[
        "tools",
        "edit",
        "my-select",
        "--settings",
        r#"{"max_items":1}"#,
    ]);
    let view = ok_json(&env, &["pipeline", "show", "snap"]);
    assert_eq!(view["pipeline"]["unsaved_changes"], true, "{view:#}");
    assert_eq!(
        view["pipeline"]["saved"]["tools"]["my-select"]["settings"]["max_items"], 30,
        "the saved version keeps the old definition: {view:#}"
    );

    let saved = ok_json(&env, &["pipeline", "run", "gearbox", "--pipeline", "snap"]);
    assert_eq!(saved["version"], 1);
    assert!(entries(&saved).len() > 1, "{saved:#}");
    let draft = ok_json(
        &env,
        &[
            "pipeline",
            "run",
            "gearbox",
            "--pipeline",
            "snap",
            "--draft",
        ],
    );
    assert_eq!(draft["version"], Value::Null);
    assert_eq!(entries(&draft).len(), 1, "{draft:#}");

    let said = env.ok(&["pipeline", "save", "snap"]);
    assert!(said.contains("version 2"), "{said}");
    let after = ok_json(&env, &["pipeline", "run", "gearbox", "--pipeline", "snap"]);
    assert_eq!(after["version"], 2);
    assert_eq!(entries(&after).len(), 1, "{after:#}");
    let view = ok_json(&env, &["pipeline", "show", "snap"]);
    assert_eq!(view["pipeline"]["unsaved_changes"], false);
    assert_eq!(view["pipeline"]["versions"], serde_json::json!([1, 2]));
}

#[test]
fn readiness_lists_problems_before_running() {
    let env = TestEnv::new();
    env.ok(&["pipeline", "create", "empty", "--chunk-tools", "noop_chunk"]);
    let out = env.run(&["pipeline", "check", "empty", "--draft"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    let blocking = blocking_lines(&stdout);
    assert_eq!(blocking.len(), 1, "{stdout}");
    assert!(blocking[0].contains("retrieval"), "{stdout}");
    assert!(
        blocking[0].contains("no default retrieval tool"),
        "{stdout}"
    );

    let (code, message) = fails(&env, &["pipeline", "save", "empty"]);
    assert_eq!(code, "pipeline_not_ready", "{message}");
    assert!(message.contains("no default retrieval tool"), "{message}");
    // Never saved: only the draft can run, and it is not ready either.
    let (code, message) = fails(
        &env,
        &["pipeline", "run", "anything", "--pipeline", "empty"],
    );
    assert_eq!(code, "pipeline_not_ready", "{message}");
    assert!(message.contains("never been saved"), "{message}");
    let (code, _) = fails(
        &env,
        &[
            "pipeline",
            "run",
            "anything",
            "--pipeline",
            "empty",
            "--draft",
        ],
    );
    assert_eq!(code, "pipeline_not_ready");

    env.ok(&[
        "pipeline",
        "create",
        "broken",
        "--retrieval",
        "retrieve-lexical-focused",
        "--chunk-tools",
        "no-such-tool,retrieve-lexical-focused",
    ]);
    // Not ready: exit 1, with the problems as JSON.
    let problems = env.json(&["pipeline", "check", "broken", "--draft"]);
    let problems = problems.as_array().unwrap();
    let find = |component: &str| {
        problems
            .iter()
            .find(|p| p["component"] == component && p["severity"] == "blocking")
            .unwrap_or_else(|| panic!("no blocking problem for {component}: {problems:#?}"))
    };
    let missing = find("no-such-tool");
    assert!(
        missing["message"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{missing}"
    );
    let mistyped = find("retrieve-lexical-focused");
    let m = mistyped["message"].as_str().unwrap();
    assert!(
        m.contains("chunk_tools") && m.contains("retrieval tool"),
        "{m}"
    );
    let text =
        String::from_utf8_lossy(&env.run(&["pipeline", "check", "broken", "--draft"]).stdout)
            .into_owned();
    assert_eq!(blocking_lines(&text).len(), 2, "{text}");
    let (code, message) = fails(&env, &["pipeline", "save", "broken"]);
    assert_eq!(code, "pipeline_not_ready", "{message}");
    assert!(message.contains("no-such-tool"), "{message}");

    // Fixing the draft makes it saveable and ready.
    env.ok(&["pipeline", "edit", "broken", "--chunk-tools", "noop_chunk"]);
    env.ok(&["pipeline", "save", "broken"]);
    let check = env.run(&["pipeline", "check", "broken"]);
    assert_eq!(check.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "ready");
}

#[test]
fn python_missing_is_a_readiness_problem_and_lexical_search_still_works() {
    let env = TestEnv::new();
    index_corpus(
        &env,
        "corpus",
        "notes",
        &[(
            "volcano.md",
            "# Volcanoes\n\nMagma chambers feed the caldera.\n",
        )],
    );
    // A pipeline without code tools, saved while Python is there.
    env.ok(&[
        "pipeline",
        "create",
        "bare",
        "--retrieval",
        "retrieve-lexical-focused",
    ]);
    env.ok(&["pipeline", "save", "bare"]);
    let no_python = |args: &[&str]| {
        env.command(args)
            .env("QUARRY_PYTHON", "/nonexistent/python3")
            .output()
            .unwrap()
    };

    let out = no_python(&["pipeline", "check", "default"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let blocking = blocking_lines(&stdout);
    assert!(
        blocking
            .iter()
            .any(|l| l.starts_with("blocking: python:") && l.contains("/nonexistent/python3")),
        "{stdout}"
    );

    let out = no_python(&["pipeline", "run", "magma", "--pipeline", "default"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error[pipeline_not_ready]"), "{stderr}");
    assert!(stderr.contains("Python"), "{stderr}");

    let out = no_python(&["search", "magma", "--mode", "lexical", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        hits["hits"][0]["path"]
            .as_str()
            .unwrap()
            .ends_with("volcano.md"),
        "{hits:#}"
    );

    // A pipeline with no code tools needs no Python.
    let out = no_python(&["pipeline", "run", "magma", "--pipeline", "bare", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stage_names(&run), ["retrieval", "evidence"]);
    assert!(entries(&run)[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("volcano.md"));
}

#[test]
fn chunk_tool_cannot_introduce_content_or_forge_references() {
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    index_corpus(
        &env,
        "corpus",
        "notes",
        &[(
            "lighthouse.md",
            "# Lighthouse\n\nThe keeper trims the lamp wick at dusk.\n",
        )],
    );
    let forger = source_file(
        dir.path(),
        "forger.py",
        r#"async def run(input, ctx):
    genuine = input["candidates"][0]["evidence_ref"]
    head, body, mac = genuine.split(".")
    altered = head + "." + body + "." + ("B" if mac[0] == "A" else "A") + mac[1:]
    return {"chunks": [
        {"evidence_ref": genuine},
        {"evidence_ref": "qe1.forged.x"},
        {"evidence_ref": altered},
    ]}
"#,
    );
    env.ok(&[
        "tools",
        "create",
        "forger",
        "--type",
        "chunk",
        "--name",
        "Forger",
        "--source",
        s(&forger),
    ]);
    lexical_pipeline(&env, "forged", "forger", None);
    let run = ok_json(
        &env,
        &["pipeline", "run", "keeper lamp", "--pipeline", "forged"],
    );
    let admitted = entries(&run);
    assert_eq!(admitted.len(), 1, "{run:#}");
    let text = admitted[0]["text"].as_str().unwrap();
    assert!(
        text.contains("The keeper trims the lamp wick at dusk."),
        "{run:#}"
    );
    assert!(admitted[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("lighthouse.md"));
    let genuine = run["stages"][1]["output"]["chunks"][0]["evidence_ref"].clone();
    assert_eq!(admitted[0]["evidence_ref"], genuine);
    let rejected = run["evidence"]["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{run:#}");
    for r in rejected {
        assert_eq!(r["returned_by"], "forger");
        let reason = r["reason"].as_str().unwrap();
        assert!(
            reason.contains("signature") || reason.contains("malformed"),
            "{reason}"
        );
    }
    assert!(rejected[0]["reference"]
        .as_str()
        .unwrap()
        .starts_with("qe1.forged"));
    assert!(run["stages"][1]["detail"]
        .as_str()
        .unwrap()
        .contains("2 reference(s) refused"));

    let inventor = source_file(
        dir.path(),
        "inventor.py",
        r#"async def run(input, ctx):
    r = input["candidates"][0]["evidence_ref"]
    return {"chunks": [{"evidence_ref": r, "text": "made up"}]}
"#,
    );
    env.ok(&[
        "tools",
        "create",
        "inventor",
        "--type",
        "chunk",
        "--name",
        "Inventor",
        "--source",
        s(&inventor),
    ]);
    env.ok(&["pipeline", "edit", "forged", "--chunk-tools", "inventor"]);
    let (code, message) = fails(
        &env,
        &[
            "pipeline",
            "run",
            "keeper lamp",
            "--pipeline",
            "forged",
            "--draft",
        ],
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("output schema"), "{message}");
    assert!(message.contains("`chunks[0].text`"), "{message}");
    // The saved version still runs the forger.
    let saved = ok_json(
        &env,
        &["pipeline", "run", "keeper lamp", "--pipeline", "forged"],
    );
    assert_eq!(entries(&saved).len(), 1);
}

/// Two collections, `pub` (public) and `secret` (confidential), both mentioning zebras, a
/// lexical pipeline `lex`, and alice's personal key (both collections, ceiling internal).
struct KeyedLibrary {
    env: TestEnv,
    alice: Value,
    /// Alice's secret, shown once at creation.
    secret: String,
}

fn keyed_library() -> KeyedLibrary {
    let env = TestEnv::new();
    env.ok(&["collection", "add", "pub", "--sensitivity", "public"]);
    env.ok(&[
        "collection",
        "add",
        "secret",
        "--sensitivity",
        "confidential",
    ]);
    index_corpus(
        &env,
        "pub",
        "pub",
        &[("open.md", "# Open\n\nA zebra grazes in the public park.\n")],
    );
    index_corpus(
        &env,
        "secret",
        "secret",
        &[(
            "closed.md",
            "# Closed\n\nThe zebra project budget is confidential.\n",
        )],
    );
    lexical_pipeline(&env, "lex", "noop_chunk", None);
    let alice = ok_json(
        &env,
        &[
            "keys",
            "create",
            "alice",
            "--collections",
            "pub,secret",
            "--ceiling",
            "internal",
        ],
    );
    let secret = alice["secret"].as_str().unwrap().to_string();
    KeyedLibrary { env, alice, secret }
}

/// A service key with ceiling `restricted` that acts for alice; returns its secret.
fn service_key(env: &TestEnv) -> String {
    let svc = ok_json(
        env,
        &[
            "keys",
            "create",
            "svc",
            "--kind",
            "service",
            "--ceiling",
            "restricted",
            "--acts-for",
            "alice",
        ],
    );
    svc["secret"].as_str().unwrap().to_string()
}

/// `pipeline run zebra --pipeline lex` with extra arguments (`--as`, `--user`).
fn run_lex(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["pipeline", "run", "zebra", "--pipeline", "lex"]
        .map(String::from)
        .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The collections a run's evidence came from, sorted.
fn collections_of(run: &Value) -> Vec<String> {
    let mut c: Vec<String> = entries(run)
        .iter()
        .map(|e| e["collection"].as_str().unwrap().to_string())
        .collect();
    c.sort();
    c.dedup();
    c
}

#[test]
fn a_new_key_shows_its_secret_once_and_the_list_never_does() {
    let KeyedLibrary { env, alice, secret } = keyed_library();
    assert!(secret.starts_with("qk_"), "{alice:#}");
    assert_eq!(alice["key"]["name"], "alice");
    assert_eq!(alice["key"]["user"], "alice");
    assert!(secret.starts_with(alice["key"]["prefix"].as_str().unwrap()));
    let tail = secret.rsplit('_').next().unwrap();
    let listed = env.ok(&["keys", "list", "--json"]);
    assert!(
        !listed.contains(&secret) && !listed.contains(tail),
        "keys list shows no secret"
    );
}

#[test]
fn a_personal_key_sees_only_what_its_ceiling_allows() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let as_alice = ok_json(&env, &as_strs(&run_lex(&["--as", &secret])));
    assert_eq!(as_alice["principal"], "alice");
    assert_eq!(collections_of(&as_alice), ["pub"], "{as_alice:#}");
    let as_admin = ok_json(&env, &as_strs(&run_lex(&[])));
    assert_eq!(as_admin["principal"], "administrator");
    assert_eq!(collections_of(&as_admin), ["pub", "secret"], "{as_admin:#}");
}

#[test]
fn a_service_key_acts_for_a_user_and_never_sees_more_than_they_do() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let svc_secret = service_key(&env);
    let for_alice = ok_json(
        &env,
        &as_strs(&run_lex(&["--as", &svc_secret, "--user", "alice"])),
    );
    assert_eq!(for_alice["principal"], "svc for alice");
    assert_eq!(
        collections_of(&for_alice),
        ["pub"],
        "a service key never sees more than its user"
    );
    let (code, message) = fails(&env, &as_strs(&run_lex(&["--as", &svc_secret])));
    assert_eq!(
        code, "unauthorized",
        "a service key acts for a user: {message}"
    );
    let (code, _) = fails(
        &env,
        &as_strs(&run_lex(&["--as", &secret, "--user", "bob"])),
    );
    assert_eq!(code, "unauthorized", "a personal key acts for nobody else");
    let (code, _) = fails(&env, &as_strs(&run_lex(&["--as", "qk_00000000_deadbeef"])));
    assert_eq!(code, "unauthorized", "an unknown key");
}

#[test]
fn a_tool_test_runs_as_the_key_and_both_outcomes_are_audited() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let test = ok_json(
        &env,
        &[
            "tools",
            "test",
            "retrieve-lexical-focused",
            "--query",
            "zebra",
            "--as",
            &secret,
        ],
    );
    assert_eq!(test["principal"], "alice");
    let test_entries = test["evidence"]["entries"].as_array().unwrap();
    assert!(!test_entries.is_empty(), "{test:#}");
    assert!(
        test_entries.iter().all(|e| e["collection"] == "pub"),
        "{test:#}"
    );
    let (code, _) = fails(
        &env,
        &[
            "tools",
            "test",
            "retrieve-lexical-focused",
            "--input",
            "{}",
            "--as",
            &secret,
        ],
    );
    assert_eq!(code, "invalid_setting");
    let audit = ok_json(&env, &["audit", "-n", "100"]);
    let records = audit.as_array().unwrap();
    let has = |outcome: &str| {
        records.iter().any(|r| {
            r["principal"] == "alice" && r["action"] == "tool.test" && r["outcome"] == outcome
        })
    };
    assert!(has("ok"), "{audit:#}");
    assert!(has("error: invalid_setting"), "{audit:#}");
}

#[test]
fn a_revoked_key_is_refused_and_nobody_acts_for_its_user() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let svc_secret = service_key(&env);
    env.ok(&["keys", "revoke", "alice"]);
    let (code, message) = fails(&env, &as_strs(&run_lex(&["--as", &secret])));
    assert_eq!(code, "unauthorized", "{message}");
    assert!(message.contains("revoked"), "{message}");
    let (code, _) = fails(
        &env,
        &as_strs(&run_lex(&["--as", &svc_secret, "--user", "alice"])),
    );
    assert_eq!(
        code, "unauthorized",
        "with alice's only key revoked, nobody acts for her"
    );
    let keys = ok_json(&env, &["keys", "list"]);
    let alice_row = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "alice")
        .unwrap();
    assert!(alice_row["revoked_at"].is_i64(), "{keys:#}");

    // Key changes and refusals are audited, and the log filters by action and outcome.
    let revoked = ok_json(&env, &["audit", "--action", "key.revoke"]);
    let revoked = revoked.as_array().unwrap();
    assert_eq!(revoked.len(), 1, "{revoked:#?}");
    assert_eq!(revoked[0]["target"], "alice");
    assert_eq!(revoked[0]["principal"], "administrator");
    assert_eq!(revoked[0]["outcome"], "ok");
    let created = ok_json(
        &env,
        &["audit", "--action", "key.create", "--outcome", "ok"],
    );
    assert_eq!(
        created.as_array().unwrap().len(),
        2,
        "alice's key and the service key"
    );
    let failures = ok_json(&env, &["audit", "--outcome", "error"]);
    let failures = failures.as_array().unwrap();
    assert!(failures.len() >= 2, "{failures:#?}");
    assert!(failures
        .iter()
        .all(|r| r["outcome"].as_str().unwrap().starts_with("error")));
    assert!(failures.iter().any(|r| r["action"] == "auth"));
    let out = env
        .command(&["audit", "--outcome", "maybe"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("maybe"));
}

#[test]
fn key_secrets_are_stored_nowhere_in_the_library_not_even_the_wal() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let svc_secret = service_key(&env);
    ok_json(&env, &as_strs(&run_lex(&["--as", &secret])));
    let tail = secret.rsplit('_').next().unwrap();
    for name in ["quarry.db", "quarry.db-wal"] {
        let path = env.data.path().join(name);
        if let Ok(bytes) = std::fs::read(&path) {
            for needle in [secret.as_bytes(), tail.as_bytes(), svc_secret.as_bytes()] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{name} holds a key secret"
                );
            }
        } else {
            assert_ne!(
                name,
                "quarry.db",
                "the library database is at {}",
                path.display()
            );
        }
    }
}

#[test]
fn the_audit_log_says_who_ran_what_newest_first_without_the_question() {
    let KeyedLibrary { env, secret, .. } = keyed_library();
    let svc_secret = service_key(&env);
    ok_json(&env, &as_strs(&run_lex(&["--as", &secret])));
    ok_json(&env, &as_strs(&run_lex(&[])));
    ok_json(
        &env,
        &as_strs(&run_lex(&["--as", &svc_secret, "--user", "alice"])),
    );
    let audit = ok_json(&env, &["audit", "-n", "100"]);
    let records = audit.as_array().unwrap();
    for principal in ["alice", "administrator", "svc for alice"] {
        assert!(
            records.iter().any(|r| r["principal"] == principal
                && r["action"] == "pipeline.run"
                && r["outcome"] == "ok"),
            "{principal}: {audit:#}"
        );
    }
    for r in records {
        assert!(
            r["input_hash"].as_str().unwrap().starts_with("sha256:"),
            "{r}"
        );
        assert!(r["at_ms"].as_i64().unwrap() > 0);
    }
    // Newest first; the same input hashes the same; questions are not stored.
    let ids: Vec<i64> = records.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");
    let run_hashes: Vec<&str> = records
        .iter()
        .filter(|r| r["action"] == "pipeline.run" && r["outcome"] == "ok")
        .map(|r| r["input_hash"].as_str().unwrap())
        .collect();
    assert_eq!(run_hashes.len(), 3, "{audit:#}");
    assert!(run_hashes.iter().all(|h| *h == run_hashes[0]), "{audit:#}");
    let raw = serde_json::to_string(&audit).unwrap();
    assert!(
        !raw.contains("zebra"),
        "the audit log holds no query text: {raw}"
    );
    assert!(!raw.contains(&secret));
}

#[test]
fn tools_test_runs_each_type() {
    let env = TestEnv::new();
    index_corpus(
        &env,
        "corpus",
        "catalog",
        &[
            (
                "filters.md",
                "# Filters\n\nThe SKU_4471 filter fits every intake housing.\n",
            ),
            (
                "hoses.md",
                "# Hoses\n\nGarden hoses come in three lengths.\n",
            ),
        ],
    );
    lexical_pipeline(&env, "lex", "noop_chunk", None);

    let q = ok_json(
        &env,
        &[
            "tools",
            "test",
            "expand_multi_query",
            "--query",
            "SKU_4471 filter",
        ],
    );
    assert_eq!(q["tool_type"], "query");
    assert_eq!(
        q["output"],
        serde_json::json!({"kind": "query_variants", "queries": [
            {"query": "SKU_4471 filter", "weight": 1.0},
            {"query": "SKU_4471", "weight": 0.8},
        ]}),
        "{q:#}"
    );

    let chunk = ok_json(
        &env,
        &[
            "tools",
            "test",
            "noop_chunk",
            "--query",
            "SKU_4471",
            "--pipeline",
            "lex",
        ],
    );
    assert_eq!(chunk["pipeline"], "lex");
    assert_eq!(stage_names(&chunk), ["retrieval", "chunk"]);
    let admitted = chunk["evidence"]["entries"].as_array().unwrap();
    assert_eq!(admitted.len(), 1, "{chunk:#}");
    assert!(admitted[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("filters.md"));
    assert_eq!(admitted[0]["admitted_by"], "noop_chunk");
    assert_eq!(
        chunk["output"]["chunks"][0]["evidence_ref"],
        admitted[0]["evidence_ref"]
    );

    let search = ok_json(
        &env,
        &[
            "tools",
            "test",
            "search_documents",
            "--input",
            r#"{"query":"hoses lengths"}"#,
            "--pipeline",
            "lex",
        ],
    );
    assert_eq!(search["tool_type"], "action");
    let matches = search["output"]["matches"].as_array().unwrap();
    assert!(!matches.is_empty(), "{search:#}");
    assert!(
        matches[0]["path"].as_str().unwrap().ends_with("hoses.md"),
        "{search:#}"
    );
    let source_ref = matches[0]["sourceRef"].as_str().unwrap().to_string();
    assert!(source_ref.starts_with("qe1."), "{search:#}");
    // Source references point at documents: nothing is admitted, nothing refused.
    assert!(
        search["evidence"]["entries"].as_array().unwrap().is_empty(),
        "{search:#}"
    );
    assert!(
        search["evidence"]["rejected"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{search:#}"
    );

    // Bad input is refused against the derived input schema before the tool runs.
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "test",
            "search_documents",
            "--input",
            r#"{"limit":3}"#,
        ],
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("`query` is required"), "{message}");

    // A forged source reference: the ctx operation is refused and the call fails, naming why.
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "test",
            "fetch_document_chunks",
            "--input",
            r#"{"sources":[{"source_ref":"qe1.forged.x"}]}"#,
            "--pipeline",
            "lex",
        ],
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("source reference"), "{message}");
    assert!(message.contains("forged or altered"), "{message}");
    // A genuine reference from another run is refused too.
    let input = serde_json::json!({"sources": [{"source_ref": source_ref}]}).to_string();
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "test",
            "fetch_document_chunks",
            "--input",
            &input,
            "--pipeline",
            "lex",
        ],
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("another run"), "{message}");

    // Every test was audited, the failures with their code.
    let audit = ok_json(&env, &["audit"]);
    let outcomes: Vec<(String, String)> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["target"].as_str().unwrap().into(),
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        outcomes.contains(&("expand_multi_query".into(), "ok".into())),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&("fetch_document_chunks".into(), "error: tool_failed".into())),
        "{outcomes:?}"
    );
}

#[test]
fn a_library_created_without_python_derives_its_seeds_once_python_is_there() {
    let env = TestEnv::new();
    // The very first open (which seeds the library) finds no Python.
    let out = env
        .command(&["pipeline", "check", "default"])
        .env("QUARRY_PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("blocking: python:") && stdout.contains("not been validated"),
        "{stdout}"
    );
    let tool = ok_json(&env, &["tools", "show", "noop_chunk"]);
    assert!(
        tool["derived"]["manifest"].is_array(),
        "derived on the first open with Python: {tool:#}"
    );
    // The default pipeline got a new version whose snapshot holds the derived tools.
    let out = env.run(&["pipeline", "check", "default"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(blocking_lines(&stdout).is_empty(), "{stdout}");
    let shown = ok_json(&env, &["pipeline", "show", "default"]);
    assert_eq!(shown["pipeline"]["versions"], serde_json::json!([1, 2]));
}

#[test]
fn editing_settings_merges_into_the_saved_ones_unless_replaced() {
    let env = TestEnv::new();
    env.ok(&["tools", "duplicate", "retrieve-lexical-focused", "lex2"]);
    env.ok(&["tools", "edit", "lex2", "--settings", r#"{"limit":5}"#]);
    let tool = ok_json(&env, &["tools", "show", "lex2"]);
    assert_eq!(tool["settings"]["limit"], 5);
    assert_eq!(
        tool["settings"]["mode"], "lexical",
        "the fields left out keep their saved values"
    );

    // A field set to null goes back to its default; --replace starts from the defaults.
    env.ok(&[
        "tools",
        "edit",
        "lex2",
        "--settings",
        r#"{"limit":7}"#,
        "--replace",
    ]);
    let tool = ok_json(&env, &["tools", "show", "lex2"]);
    assert_eq!(tool["settings"]["limit"], 7);
    assert_eq!(tool["settings"]["mode"], "hybrid");
    let versions = env.ok(&["tools", "versions", "lex2"]);
    assert_eq!(versions.lines().count(), 3, "{versions}");
    env.ok(&["tools", "restore", "lex2", "2"]);
    let tool = ok_json(&env, &["tools", "show", "lex2"]);
    assert_eq!(
        (
            tool["settings"]["mode"].as_str(),
            tool["settings"]["limit"].as_i64()
        ),
        (Some("lexical"), Some(5))
    );
}

#[test]
fn a_mistyped_collection_label_is_refused_naming_the_field() {
    let env = TestEnv::new();
    let (code, message) = fails(
        &env,
        &["collection", "add", "typo", "--sensitivity", "confidental"],
    );
    assert_eq!(code, "invalid_setting", "{message}");
    assert!(message.contains("sensitivity"), "{message}");
    assert!(message.contains("confidental"), "{message}");
    let listed = env.ok(&["collection", "list"]);
    assert!(!listed.contains("typo"), "{listed}");
}

#[test]
fn saving_a_pipeline_that_cannot_run_warns_and_says_why() {
    let env = TestEnv::new();
    let source = source_file(
        env.docs(),
        "llm_rewrite.py",
        "async def run(input, ctx):\n    text = await ctx.llm(\"rewrite: \" + input[\"query\"])\n    return {\"kind\": \"query_variants\", \"queries\": [{\"query\": text, \"weight\": 1.0}]}\n",
    );
    env.ok(&[
        "tools",
        "create",
        "llm-rewrite",
        "--type",
        "query",
        "--source",
        s(&source),
    ]);
    env.ok(&[
        "pipeline",
        "create",
        "needs-model",
        "--query-tools",
        "llm-rewrite",
        "--retrieval",
        "retrieve-lexical-focused",
    ]);
    let out = env.run(&["pipeline", "save", "needs-model"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: version 1 cannot run") && stderr.contains("ctx.llm"),
        "{stderr}"
    );
}

#[test]
fn pipeline_run_and_tool_tests_take_the_conversation_so_far() {
    let env = TestEnv::new();
    index_corpus(
        &env,
        "notes",
        "notes",
        &[("lamp.md", "The lighthouse lamp needs a clean wick.\n")],
    );
    let source = source_file(
        env.docs(),
        "follow_up.py",
        "async def run(input, ctx):\n    earlier = [m[\"content\"] for m in input.get(\"history\") or [] if m[\"role\"] == \"user\"]\n    queries = [{\"query\": input[\"query\"], \"weight\": 1.0}]\n    queries += [{\"query\": e, \"weight\": 1.0} for e in earlier[-1:]]\n    return {\"kind\": \"query_variants\", \"queries\": queries}\n",
    );
    env.ok(&[
        "tools",
        "create",
        "follow-up",
        "--type",
        "query",
        "--source",
        s(&source),
    ]);
    lexical_pipeline(&env, "conversational", "noop_chunk", Some("follow-up"));
    let history = env.docs().join("history.json");
    write(
        &history,
        r#"[{"role": "user", "content": "the lighthouse lamp"}, {"role": "assistant", "content": "It burns paraffin [1]."}]"#,
    );
    let run = ok_json(
        &env,
        &[
            "pipeline",
            "run",
            "how often is it cleaned?",
            "--pipeline",
            "conversational",
            "--history",
            s(&history),
        ],
    );
    assert!(
        entries(&run)
            .iter()
            .any(|e| e["path"].as_str().unwrap().ends_with("lamp.md")),
        "{run}"
    );
    let test = ok_json(
        &env,
        &[
            "tools",
            "test",
            "follow-up",
            "--query",
            "how often is it cleaned?",
            "--history",
            s(&history),
        ],
    );
    assert_eq!(test["output"]["queries"][1]["query"], "the lighthouse lamp");

    // A history that is not a list of messages is refused, naming the file and the message.
    write(&history, r#"[{"role": "narrator", "content": "x"}]"#);
    let out = env.run(&[
        "pipeline",
        "run",
        "q",
        "--pipeline",
        "conversational",
        "--history",
        s(&history),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("history.json") && stderr.contains("[0]"),
        "{stderr}"
    );
}

#[test]
fn a_tool_declared_to_need_confirmation_says_it_cannot_be_direct_evidence() {
    let env = TestEnv::new();
    env.ok(&["tools", "duplicate", "fetch_neighbors", "neighbors-asking"]);
    let shown = env.ok(&["tools", "show", "neighbors-asking"]);
    assert!(
        shown.contains("direct evidence tool: can be one"),
        "{shown}"
    );
    env.ok(&[
        "tools",
        "edit",
        "neighbors-asking",
        "--requires-confirmation",
        "true",
    ]);
    let shown = env.ok(&["tools", "show", "neighbors-asking"]);
    assert!(
        shown.contains("needs the user's confirmation before each call")
            && shown.contains("direct evidence tool: cannot be one")
            && shown.contains("confirmation before each call, and a direct evidence tool"),
        "{shown}"
    );
    assert_eq!(
        ok_json(&env, &["tools", "show", "neighbors-asking"])["requires_confirmation"],
        true
    );
    // Only action tools can ask; the field is named.
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "edit",
            "retrieve-lexical-focused",
            "--requires-confirmation",
            "true",
        ],
    );
    assert_eq!(code, "invalid_tool", "{message}");
    assert!(message.contains("requires_confirmation"), "{message}");
}
