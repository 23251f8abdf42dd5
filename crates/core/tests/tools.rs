//! Code tools, the sandbox, evidence references and authorization, on real libraries with a
//! real Python worker.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

use quarry_core::auth::{NewKey, PrincipalKind, Scope};
use quarry_core::evidence::EvidenceSession;
use quarry_core::tools::{Executor, Limits, NetworkIsolation, ToolDefinition, ToolType};
use quarry_core::{Library, LibraryOptions, Principal, RunOptions, SearchMode, SearchRequest};
use serde_json::{json, Value};

use common::{admin, code_tool, reindex, session, Fixture};

/// A library with one collection `notes` indexed (full text only) from `files`.
fn fixture(files: &[(&str, String)]) -> Fixture {
    let mut f = Fixture::new();
    f.add_collection("notes", "internal", "", files);
    f.reindex();
    f
}

/// [`fixture`] with one note `a.md`, and the administrator's session on it.
fn one_note(text: &str) -> (Fixture, EvidenceSession) {
    let f = fixture(&[("a.md", text.to_string())]);
    let s = admin(&f.library);
    (f, s)
}

/// Runs a tool with the lexical seed as the retrieval of its environment.
fn call(
    library: &Library,
    session: &EvidenceSession,
    tool: &ToolDefinition,
    input: Value,
) -> quarry_core::Result<Value> {
    let lexical = library.tool("retrieve-lexical-focused").unwrap();
    library
        .call_code_tool(tool, &input, session, Some(&lexical))
        .map(|r| r.output)
}

fn action(library: &Library, slug: &str, source_body: &str) -> ToolDefinition {
    limited_action(library, slug, source_body, Limits::default())
}

/// An action tool whose `run` body is `source_body` (with `os` and `sys` imported).
fn limited_action(
    library: &Library,
    slug: &str,
    source_body: &str,
    limits: Limits,
) -> ToolDefinition {
    let source = format!(
        "from quarry import BaseModel\nimport os, sys\nclass Inputs(BaseModel):\n    pass\nclass Output(BaseModel):\n    value: str = ''\nasync def run(input, ctx):\n{source_body}\n"
    );
    let mut tool = code_tool(slug, ToolType::Action, &source);
    tool.limits = Some(limits);
    library.create_tool(tool).unwrap()
}

/// Calls `tool` with no input; the call must be refused.
fn refused(library: &Library, s: &EvidenceSession, tool: &ToolDefinition) -> (String, String) {
    error_of(call(library, s, tool, json!({})))
}

fn error_of(result: quarry_core::Result<Value>) -> (String, String) {
    let e = result.expect_err("the call must be refused");
    (e.code().to_string(), e.to_string())
}

fn long_document(sections: usize) -> String {
    (0..sections)
        .map(|i| format!("## Section {i}\n\nParagraph {i} talks about turbine blade number {i} and its maintenance.\n\n"))
        .collect()
}

// ---- the sandbox ---------------------------------------------------------------------------

#[test]
fn every_escape_is_refused_with_a_clear_error() {
    let (f, s) = one_note("# A\n\nplain text");
    let escapes = [
        ("socket", "    import socket\n    socket.create_connection(('127.0.0.1', 9))", "network access"),
        ("ssh", "    return {'value': open(os.path.expanduser('~/.ssh/id_rsa')).read()}", "reading"),
        ("etc", "    return {'value': open('/etc/hostname').read()}", "reading"),
        ("pathlib", "    import pathlib\n    return {'value': pathlib.Path('/etc/hostname').read_text()}", "reading"),
        ("list", "    return {'value': str(os.listdir(os.path.expanduser('~')))}", "listing"),
        ("list-cwd", "    return {'value': str(os.listdir())}", "listing"),
        ("write", "    open('/tmp/quarry-escape', 'w').write('x')", "writing a file"),
        ("sqlite", "    import sqlite3\n    sqlite3.connect('/tmp/quarry-escape.db')", "sqlite3"),
        ("spawn", "    os.system('true')", "starting a process"),
        ("subprocess", "    import subprocess\n    subprocess.run(['true'])", "starting a process"),
        ("ctypes", "    import ctypes", "ctypes"),
        ("rlimit", "    import resource\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))", "sandbox limits"),
        // Patching what the hook might look up does not disarm it.
        (
            "patched-hook",
            "    import __main__, posixpath\n    __main__._refuse = lambda what: None\n    __main__.REFUSED_PREFIXES = ()\n    __main__.WRITE_FLAGS = 0\n    posixpath.realpath = lambda p, **k: '/usr'\n    open('/tmp/quarry-escape', 'w')",
            "writing a file",
        ),
    ];
    // Every tier: bubblewrap where installed (CI installs it), a network namespace, the hook
    // alone. The hook answers first in each, so the messages are the same.
    for isolation in [
        NetworkIsolation::Sandbox,
        NetworkIsolation::Namespace,
        NetworkIsolation::AuditHookOnly,
    ] {
        let options = LibraryOptions {
            executor: Executor::default().with_max_isolation(isolation),
            ..LibraryOptions::default()
        };
        let library = f.reopen(options);
        let got = library.executor().check().unwrap();
        assert!(got >= isolation, "{got:?} is stronger than {isolation:?}");
        for (slug, body, expected) in &escapes {
            let tool = action(&library, &format!("escape-{slug}-{}", got as u8), body);
            let (code, message) = refused(&library, &s, &tool);
            assert_eq!(code, "tool_failed", "{slug} ({got:?}): {message}");
            assert!(
                message.contains("refused by the sandbox"),
                "{slug} ({got:?}): {message}"
            );
            assert!(message.contains(expected), "{slug} ({got:?}): {message}");
        }
    }
    assert!(!Path::new("/tmp/quarry-escape").exists());
    assert!(!Path::new("/tmp/quarry-escape.db").exists());
    // scripts/setup.sh installs bubblewrap; as root (this workplace and its CI) it always
    // works, elsewhere it needs unprivileged user namespaces.
    let best = Executor::default().check().unwrap();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if root {
        assert_eq!(best, NetworkIsolation::Sandbox, "bubblewrap works here");
    } else {
        eprintln!("strongest isolation here: {best:?}");
    }
}

#[test]
fn memory_and_time_limits_end_the_call_and_the_next_call_works() {
    let (f, s) = one_note("# A\n\nplain text");
    let hog = limited_action(
        &f.library,
        "hog",
        "    blocks = [bytearray(50_000_000) for _ in range(40)]\n    return {'value': str(len(blocks))}",
        Limits { timeout_ms: 10_000, memory_mb: 200 },
    );
    let (code, message) = refused(&f.library, &s, &hog);
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("memory limit of 200 MB") || message.contains("exited"),
        "{message}"
    );

    let spin = limited_action(
        &f.library,
        "spin",
        "    while True:\n        pass",
        Limits {
            timeout_ms: 300,
            memory_mb: 256,
        },
    );
    let (code, message) = refused(&f.library, &s, &spin);
    assert_eq!(code, "tool_timeout", "{message}");
    assert!(message.contains("300 ms"));

    // Killed workers are replaced: the seeded tools still run.
    let out = call(
        &f.library,
        &s,
        &f.library.tool("noop_chunk").unwrap(),
        json!({"query": "q", "candidates": []}),
    )
    .unwrap();
    assert_eq!(out, json!({"chunks": []}));
}

#[test]
fn workers_are_reused_between_calls() {
    let (f, s) = one_note("# A\n\nplain text");
    // A call counter kept in a stdlib module: 1 in a fresh worker, 2 in a reused one.
    let tool = action(&f.library, "counter", "    import json\n    json.calls = getattr(json, 'calls', 0) + 1\n    return {'value': str(json.calls)}");
    assert_eq!(
        call(&f.library, &s, &tool, json!({})).unwrap()["value"],
        "1"
    );
    assert_eq!(
        call(&f.library, &s, &tool, json!({})).unwrap()["value"],
        "2",
        "the second call ran in the same warm worker"
    );
}

#[test]
fn nothing_a_call_leaves_behind_reaches_another_caller() {
    let f = fixture(&[("a.md", "# A\n\nplain text".into())]);
    let tool = action(
        &f.library,
        "stash",
        "    import json\n    seen = getattr(json, 'stash', 'nothing')\n    json.stash = 'left by an earlier call'\n    return {'value': seen}",
    );
    let admin = admin(&f.library);
    assert_eq!(
        call(&f.library, &admin, &tool, json!({})).unwrap()["value"],
        "nothing"
    );
    // The same tool for the same caller may reuse its warm worker…
    assert_eq!(
        call(&f.library, &admin, &tool, json!({})).unwrap()["value"],
        "left by an earlier call"
    );
    // …but another caller never runs in it.
    let alice = Principal {
        id: "key:7".into(),
        label: "alice".into(),
        ..Principal::administrator()
    };
    let alice = session(&f.library, alice);
    assert_eq!(
        call(&f.library, &alice, &tool, json!({})).unwrap()["value"],
        "nothing"
    );
    // A task left running is cancelled; one that will not stop retires the worker.
    let stubborn = action(
        &f.library,
        "stubborn",
        "    import asyncio\n    async def forever():\n        while True:\n            try:\n                await asyncio.sleep(10)\n            except asyncio.CancelledError:\n                pass\n    asyncio.get_running_loop().create_task(forever())\n    import json\n    json.calls = getattr(json, 'calls', 0) + 1\n    return {'value': str(json.calls)}",
    );
    for _ in 0..2 {
        let value = call(&f.library, &admin, &stubborn, json!({})).unwrap()["value"].clone();
        assert_eq!(
            value, "1",
            "a worker with a task that would not stop is not reused"
        );
    }
    // Likewise a thread that outlives its call.
    let threaded = action(
        &f.library,
        "threaded",
        "    import threading, time\n    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n    import json\n    json.calls = getattr(json, 'calls', 0) + 1\n    return {'value': str(json.calls)}",
    );
    for _ in 0..2 {
        let value = call(&f.library, &admin, &threaded, json!({})).unwrap()["value"].clone();
        assert_eq!(value, "1", "a worker with a live thread is not reused");
    }
}

#[test]
fn undeclared_ctx_operations_are_refused_by_the_host() {
    let (f, s) = one_note("# A\n\nturbine");
    // `c` aliases ctx, so static analysis does not see the search: the manifest is empty.
    let tool = action(
        &f.library,
        "sneaky",
        "    c = ctx\n    await c.search('turbine')\n    return {}",
    );
    assert!(tool.derived.as_ref().unwrap().manifest.is_empty());
    let (code, message) = refused(&f.library, &s, &tool);
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("ctx.search is not declared in this tool's evidence manifest"),
        "{message}"
    );
    // getattr on ctx is refused when saving.
    let err = f
        .library
        .create_tool(code_tool("dyn", ToolType::Action, "from quarry import BaseModel\nclass Inputs(BaseModel):\n    pass\nclass Output(BaseModel):\n    pass\nasync def run(input, ctx):\n    return await getattr(ctx, 'search')('x')\n"))
        .unwrap_err();
    assert_eq!(err.code(), "invalid_tool_source");
    assert!(err.to_string().contains("line 7"), "{err}");
}

/// A one-shot HTTP server on loopback answering `body`.
fn serve_once(body: &'static str) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    (origin, handle)
}

#[test]
fn egress_goes_only_to_allowlisted_origins_through_the_host() {
    let (f, s) = one_note("# A\n\nplain");
    let (allowed, server) = serve_once("hello from the allowlist");
    let source = "from quarry import BaseModel\nclass Inputs(BaseModel):\n    url: str\nclass Output(BaseModel):\n    value: str = ''\nasync def run(input, ctx):\n    r = await ctx.http_get(input['url'])\n    return {'value': r['body']}\n";
    let mut tool = code_tool("fetcher", ToolType::Action, source);
    tool.egress = Some(vec![allowed.clone()]);
    // The test server is on loopback: the administrator confirms it (issue 38).
    let confirmed = quarry_core::tools::SaveOptions {
        allow_private_egress: true,
    };
    let tool = f.library.create_tool_with(tool, confirmed).unwrap();
    let out = call(
        &f.library,
        &s,
        &tool,
        json!({"url": format!("{allowed}/page")}),
    )
    .unwrap();
    assert_eq!(out["value"], "hello from the allowlist");
    server.join().unwrap();

    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let outside = format!("http://{}/x", other.local_addr().unwrap());
    let (code, message) = error_of(call(&f.library, &s, &tool, json!({"url": outside})));
    assert_eq!(code, "tool_failed");
    assert!(
        message.contains("not in this tool's allowlist"),
        "{message}"
    );
    assert!(
        message.contains(&allowed),
        "the message lists the allowlist: {message}"
    );
}

// ---- saving code tools -----------------------------------------------------------------------

#[test]
fn saving_validates_the_source_and_derives_its_shapes() {
    let f = fixture(&[("a.md", "# A\n\nplain".into())]);
    let err = f
        .library
        .create_tool(code_tool(
            "bad",
            ToolType::Query,
            "async def run(input, ctx):\n    x = [\n    return 1\n",
        ))
        .unwrap_err();
    assert_eq!(err.code(), "invalid_tool_source");
    assert!(err.to_string().contains("line 2"), "{err}");
    assert!(err.to_string().contains("column"), "{err}");
    let err = f
        .library
        .create_tool(code_tool(
            "noinputs",
            ToolType::Action,
            "async def run(input, ctx):\n    return {}\n",
        ))
        .unwrap_err();
    assert!(err.to_string().contains("class Inputs(BaseModel)"), "{err}");
    let err = f
        .library
        .create_tool(code_tool(
            "sync",
            ToolType::Chunk,
            "def run(input, ctx):\n    return {}\n",
        ))
        .unwrap_err();
    assert!(
        err.to_string().contains("line 1") && err.to_string().contains("async def run"),
        "{err}"
    );

    let tool = f.library.tool("fetch_document_chunks").unwrap();
    let derived = tool.derived.as_ref().unwrap();
    assert_eq!(derived.manifest, vec!["fetch_document_chunks".to_string()]);
    assert!(derived.source_hash.starts_with("sha256:"));
    assert_eq!(
        derived.settings_schema["properties"]["page_size"]["default"],
        8
    );
    let input = derived.input_schema.as_ref().unwrap();
    assert_eq!(input["additionalProperties"], false, "strict input schema");
    assert_eq!(
        input["properties"]["sources"]["items"]["properties"]["cursor"]["anyOf"][1]["type"],
        "null"
    );
    assert_eq!(
        derived.output_schema["additionalProperties"], false,
        "strict output schema"
    );

    let mut with_model = f.library.tool("noop_chunk").unwrap();
    with_model.model = Some("some-model".into());
    let err = f.library.update_tool("noop_chunk", with_model).unwrap_err();
    assert!(
        err.to_string().contains("only when the code uses ctx.llm"),
        "{err}"
    );
    let mut uses_llm = code_tool("llm-user", ToolType::Query, "async def run(input, ctx):\n    await ctx.llm('x')\n    return {'kind': 'query_variants', 'queries': []}\n");
    uses_llm.model = Some("some-model".into());
    assert!(f.library.create_tool(uses_llm).unwrap().uses_llm());
}

// ---- seeded tool behaviour -----------------------------------------------------------------

#[test]
fn expand_multi_query_keeps_the_normalised_query_and_adds_one_identifier_variant() {
    let (f, s) = one_note("# A\n\nplain");
    let tool = f.library.tool("expand_multi_query").unwrap();
    let input = |q: &str| json!({"query": q, "history": [], "variants": []});
    let out = call(
        &f.library,
        &s,
        &tool,
        input("  How do I  service the XR-200   pump and SKU_4471? "),
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"kind": "query_variants", "queries": [
            {"query": "How do I service the XR-200 pump and SKU_4471?", "weight": 1.0},
            {"query": "XR-200 SKU_4471", "weight": 0.8},
        ]})
    );
    let out = call(&f.library, &s, &tool, input("how do ferns reproduce")).unwrap();
    assert_eq!(
        out["queries"],
        json!([{"query": "how do ferns reproduce", "weight": 1.0}])
    );
}

#[test]
fn seeded_retrieval_tools_have_the_described_settings() {
    let f = fixture(&[("a.md", "# A\n\nplain".into())]);
    let lexical = f
        .library
        .tool("retrieve-lexical-focused")
        .unwrap()
        .retrieval_settings()
        .unwrap();
    assert_eq!(lexical.mode, SearchMode::Lexical);
    assert!(lexical.rerank.is_none());
    let coverage = f
        .library
        .tool("retrieve-hybrid-coverage")
        .unwrap()
        .retrieval_settings()
        .unwrap();
    assert_eq!(coverage.mode, SearchMode::Hybrid);
    assert_eq!(
        coverage.rerank.as_ref().unwrap().model,
        "jina-reranker-v2-base-multilingual"
    );
    let recall = f
        .library
        .tool("retrieve-high-recall")
        .unwrap()
        .retrieval_settings()
        .unwrap();
    assert!(recall.lexical_candidates > coverage.lexical_candidates);
    assert!(recall.vector_candidates > coverage.vector_candidates);
    assert!(recall.ann_breadth > coverage.ann_breadth);
    assert!(
        recall.rerank.as_ref().unwrap().candidates > coverage.rerank.as_ref().unwrap().candidates
    );
    assert!(recall.limit > coverage.limit);
}

/// `n` distinct issued references (for chunk ids that need not exist: selection tools never
/// read the library).
fn refs(s: &EvidenceSession, library: &Library, n: usize) -> Vec<String> {
    let template = library
        .chunks_by_id(&library.chunk_ids().unwrap()[..1])
        .unwrap()
        .remove(0);
    (0..n)
        .map(|i| {
            let mut chunk = template.clone();
            chunk.id = quarry_core::ChunkId(10_000 + i as i64);
            s.issue_chunk(&chunk)
        })
        .collect()
}

fn selected(out: &Value) -> Vec<String> {
    out["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["evidence_ref"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn llm_select_and_expand_dedupes_and_keeps_the_first_thirty_in_order() {
    let (f, s) = one_note("# A\n\nplain");
    let tool = f.library.tool("llm_select_and_expand").unwrap();
    assert!(
        tool.derived.as_ref().unwrap().manifest.is_empty(),
        "no LLM, no fetch"
    );
    let r = refs(&s, &f.library, 40);
    let mut candidates: Vec<Value> = r
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"evidence_ref": e, "score": i as f64}))
        .collect();
    candidates.insert(3, json!({"evidence_ref": r[0], "score": 99.0}));
    let out = call(
        &f.library,
        &s,
        &tool,
        json!({"query": "q", "candidates": candidates}),
    )
    .unwrap();
    assert_eq!(selected(&out), r[..30].to_vec());
}

#[test]
fn iterative_context_chunk_orders_by_score_with_stable_ties_and_keeps_eighty() {
    let (f, s) = one_note("# A\n\nplain");
    let tool = f.library.tool("iterative-context-chunk").unwrap();
    let r = refs(&s, &f.library, 100);
    // Scores in tiers of ten: ties within a tier must keep their input order.
    let mut candidates: Vec<Value> = r
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"evidence_ref": e, "score": (i % 10) as f64}))
        .collect();
    candidates.push(json!({"evidence_ref": r[9], "score": 100.0})); // a duplicate: first copy wins
    let out = call(
        &f.library,
        &s,
        &tool,
        json!({"query": "q", "candidates": candidates}),
    )
    .unwrap();
    let got = selected(&out);
    let mut expected: Vec<(usize, &String)> = r.iter().enumerate().collect();
    expected.sort_by_key(|e| std::cmp::Reverse(e.0 % 10));
    let expected: Vec<String> = expected
        .into_iter()
        .map(|(_, e)| e.clone())
        .take(80)
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn noop_chunk_returns_the_issued_references_unchanged() {
    let (f, s) = one_note("# A\n\nplain");
    let r = refs(&s, &f.library, 5);
    let candidates: Vec<Value> = [3, 1, 1, 4, 0]
        .iter()
        .map(|&i| json!({"evidence_ref": r[i], "score": 0.5}))
        .collect();
    let out = call(
        &f.library,
        &s,
        &f.library.tool("noop_chunk").unwrap(),
        json!({"query": "q", "candidates": candidates}),
    )
    .unwrap();
    assert_eq!(
        selected(&out),
        [3, 1, 1, 4, 0]
            .iter()
            .map(|&i| r[i].clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn action_tools_search_fetch_and_page_within_one_revision() {
    let mut f = fixture(&[
        (
            "manual.md",
            format!("# Turbine manual\n\n{}", long_document(20)),
        ),
        ("other.md", "# Other\n\nA note about turbine noise.".into()),
    ]);
    let s = admin(&f.library);
    let lib = &f.library;

    // search_documents: one match per document, with a snippet and an opaque sourceRef.
    let out = call(
        lib,
        &s,
        &lib.tool("search_documents").unwrap(),
        json!({"query": "turbine"}),
    )
    .unwrap();
    let matches = out["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 2);
    let manual = matches
        .iter()
        .find(|m| m["path"].as_str().unwrap().ends_with("manual.md"))
        .unwrap();
    let source_ref = manual["sourceRef"].as_str().unwrap().to_string();
    assert!(
        manual.get("source_ref").is_none(),
        "the manual's spelling only"
    );
    assert!(source_ref.starts_with("qe1."));

    // fetch_document_chunks: pages of eight with a cursor, in document order.
    let fetch = lib.tool("fetch_document_chunks").unwrap();
    let page = |cursor: Value| {
        call(
            lib,
            &s,
            &fetch,
            json!({"sources": [{"source_ref": source_ref, "cursor": cursor}]}),
        )
        .unwrap()
    };
    let first = page(Value::Null);
    let chunks = first["pages"][0]["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), 8);
    let ordinals: Vec<i64> = chunks
        .iter()
        .map(|c| c["ordinal"].as_i64().unwrap())
        .collect();
    assert_eq!(ordinals, (0..8).collect::<Vec<_>>());
    let cursor = first["pages"][0]["cursor"].clone();
    assert!(cursor.is_string());
    let second = page(cursor.clone());
    assert_eq!(second["pages"][0]["chunks"][0]["ordinal"], 8);

    // fetch_neighbors: radius capped at the tool's max_radius, four unless set.
    let middle = second["pages"][0]["chunks"][2]["evidence_ref"]
        .as_str()
        .unwrap()
        .to_string();
    let out = call(
        lib,
        &s,
        &lib.tool("fetch_neighbors").unwrap(),
        json!({"evidence_ref": middle, "radius": 10}),
    )
    .unwrap();
    assert_eq!(out["radius"], 4);
    let around: Vec<i64> = out["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ordinal"].as_i64().unwrap())
        .collect();
    assert_eq!(around, vec![6, 7, 8, 9, 11, 12, 13, 14]);

    // fetch_source_document: a bounded page of text with its references and a cursor.
    let out = call(
        lib,
        &s,
        &lib.tool("fetch_source_document").unwrap(),
        json!({"source_ref": source_ref}),
    )
    .unwrap();
    assert!(out["text"].as_str().unwrap().contains("Paragraph 0"));
    assert!(!out["evidence_refs"].as_array().unwrap().is_empty());
    assert!(out["text"].as_str().unwrap().chars().count() <= 4000);

    // context_expansion: references from one bounded batch of searches.
    let out = call(
        lib,
        &s,
        &lib.tool("context_expansion").unwrap(),
        json!({"queries": ["turbine blade", "noise", "maintenance", "manual", "extra"]}),
    )
    .unwrap();
    assert_eq!(out["queries_run"], 4, "at most four queries");
    let got = out["evidence_refs"].as_array().unwrap();
    assert!(!got.is_empty() && got.len() <= 12);

    // The document changes: its old source reference and cursor point at a superseded revision.
    std::fs::write(
        f.docs.path().join("manual.md"),
        format!("# Turbine manual v2\n\n{}", long_document(12)),
    )
    .unwrap();
    reindex(&mut f.library);
    let lib = &f.library;
    let (code, message) = error_of(call(
        lib,
        &s,
        &fetch,
        json!({"sources": [{"source_ref": source_ref, "cursor": cursor}]}),
    ));
    assert_eq!(code, "tool_failed");
    assert!(message.contains("superseded revision"), "{message}");
    let (_, message) = error_of(call(
        lib,
        &s,
        &lib.tool("fetch_neighbors").unwrap(),
        json!({"evidence_ref": middle}),
    ));
    assert!(message.contains("superseded"), "{message}");
}

// ---- evidence references -------------------------------------------------------------------

#[test]
fn forged_foreign_expired_and_stale_references_are_rejected() {
    let mut f = fixture(&[("a.md", "# Alpha\n\nThe alpha document about gears.".into())]);
    let s = admin(&f.library);
    let chunk = f
        .library
        .chunks_by_id(&f.library.chunk_ids().unwrap())
        .unwrap()
        .remove(0);
    let good = s.issue_chunk(&chunk);
    let entry = f.library.revalidate_evidence(&s, &good, "test").unwrap();
    assert_eq!(entry.text, chunk.text, "the text comes from the library");

    let reason = |reference: &str, by: &EvidenceSession| {
        f.library
            .revalidate_evidence(by, reference, "t")
            .unwrap_err()
            .to_string()
    };
    // Altered claims keep the old MAC: forged.
    let mut parts: Vec<String> = good.split('.').map(String::from).collect();
    let flipped = if parts[1].as_bytes()[5] == b'A' {
        "B"
    } else {
        "A"
    };
    parts[1].replace_range(5..6, flipped);
    assert!(reason(&parts.join("."), &s).contains("invalid signature"));
    assert!(reason("qe1.abc.def", &s).contains("invalid signature"));
    assert!(reason("made-up", &s).contains("malformed"));
    // Issued to someone else, or in another run.
    let alice = Principal {
        id: "key:99".into(),
        label: "alice".into(),
        ..Principal::administrator()
    };
    let other_principal = session(&f.library, alice);
    assert!(reason(&good, &other_principal).contains("not issued to this caller"));
    let other_run = admin(&f.library);
    assert!(reason(&good, &other_run).contains("another run"));
    // A reference from another library (another key) is forged as far as this one knows.
    let stranger = fixture(&[("b.md", "# B\n\nbeta".into())]);
    let foreign = admin(&stranger.library);
    assert!(reason(&foreign.issue_chunk(&chunk), &s).contains("invalid signature"));
    // Expired.
    let short = s.clone().with_ttl_secs(0);
    assert!(reason(&short.issue_chunk(&chunk), &s).contains("expired"));
    // A source reference is not a chunk reference.
    let source = s.issue_source(chunk.document_id, chunk.revision_id);
    assert!(reason(&source, &s).contains("source reference was given where a evidence reference"));
    // Stale: the file changed, so the reference points at a superseded revision.
    std::fs::write(
        f.docs.path().join("a.md"),
        "# Alpha\n\nThe alpha document, rewritten.",
    )
    .unwrap();
    reindex(&mut f.library);
    let stale = f
        .library
        .revalidate_evidence(&s, &good, "t")
        .unwrap_err()
        .to_string();
    assert!(stale.contains("superseded"), "{stale}");
    // Gone: the source is removed.
    let source_id = f.library.sources().unwrap()[0].id;
    f.library.remove_source(source_id).unwrap();
    let gone = f
        .library
        .revalidate_evidence(&s, &good, "t")
        .unwrap_err()
        .to_string();
    assert!(gone.contains("no longer in the library"), "{gone}");
}

// ---- authorization -------------------------------------------------------------------------

const LABELS: [&str; 4] = ["public", "internal", "confidential", "restricted"];

/// Six collections across the four labels, each with two documents that all mention zebras.
fn scoped_library() -> (tempfile::TempDir, tempfile::TempDir, Library) {
    let mut f = Fixture::new();
    for c in 0..6 {
        let name = format!("c{c}");
        let files: Vec<(String, String)> = (0..2)
            .map(|d| (format!("d{d}.md"), format!("# {name} doc {d}\n\nZebras graze in collection {name}, document {d}. Stripes and savanna.")))
            .collect();
        let files: Vec<(&str, &String)> = files.iter().map(|(n, t)| (n.as_str(), t)).collect();
        f.add_collection(&name, LABELS[c % 4], &name, &files);
    }
    f.reindex();
    (f.data, f.docs, f.library)
}

mod property {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// One library for every case (building one per case would dominate the run).
    struct Shared {
        _dirs: (tempfile::TempDir, tempfile::TempDir),
        library: Library,
    }
    static LIBRARY: OnceLock<std::sync::Mutex<Shared>> = OnceLock::new();

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]
        /// Whatever the principal's collections and ceiling, no search hit, pipeline evidence
        /// or document match ever comes from outside its scope.
        #[test]
        fn nothing_outside_the_callers_scope_is_ever_returned(
            allowed in proptest::collection::vec(any::<bool>(), 6),
            all_collections in any::<bool>(),
            ceiling in 0usize..4,
            query in prop::sample::select(vec!["zebra", "stripes savanna", "c3 document", "graze", "doc 1"]),
        ) {
            let shared = LIBRARY.get_or_init(|| {
                let (a, b, l) = scoped_library();
                l.create_pipeline("lexical", &quarry_core::pipeline::PipelineDefinition {
                    query_tools: vec!["expand_multi_query".into()],
                    retrieval: Some("retrieve-lexical-focused".into()),
                    chunk_tools: vec!["noop_chunk".into()],
                    ..Default::default()
                }).unwrap();
                l.save_pipeline("lexical", &Principal::administrator()).unwrap();
                std::sync::Mutex::new(Shared { _dirs: (a, b), library: l })
            });
            let shared = shared.lock().unwrap();
            let library = &shared.library;
            let scope = Scope {
                collections: (!all_collections).then(|| (0..6).filter(|&c| allowed[c]).map(|c| format!("c{c}")).collect()),
                sensitivity_ceiling: LABELS[ceiling].into(),
            };
            let readable: HashSet<String> = (0..6)
                .filter(|&c| scope.allows_named(&format!("c{c}"), LABELS[c % 4]))
                .map(|c| format!("c{c}"))
                .collect();
            let principal = Principal { id: "key:1".into(), label: "p".into(), scope: scope.clone(), kind: PrincipalKind::Personal };

            let mut request = SearchRequest::new(query).with_mode(SearchMode::Lexical);
            request.scope = Some(scope.clone());
            request.settings.limit = 50;
            request.settings.max_per_document = 0;
            let hits = library.search(&request).unwrap().hits;
            for hit in &hits {
                prop_assert!(readable.contains(&hit.collection), "search returned {}", hit.collection);
            }
            // Everything readable that matches is found: the filter is not simply "nothing".
            if query == "zebra" {
                let found: HashSet<String> = hits.iter().map(|h| h.collection.clone()).collect();
                prop_assert_eq!(&found, &readable);
            }

            let run = library.run_pipeline("lexical", query, &principal, &RunOptions::default()).unwrap();
            for entry in &run.evidence.entries {
                prop_assert!(readable.contains(&entry.collection), "pipeline admitted {}", entry.collection);
            }

            let session = session(library, principal.clone());
            let out = call(library, &session, &library.tool("search_documents").unwrap(), json!({"query": query, "limit": 50})).unwrap();
            for m in out["matches"].as_array().unwrap() {
                let path = m["path"].as_str().unwrap();
                let collection = Path::new(path).parent().unwrap().file_name().unwrap().to_str().unwrap();
                prop_assert!(readable.contains(collection), "search_documents returned {path}");
            }
        }
    }
}

#[test]
fn keys_are_hashed_scoped_and_service_keys_never_exceed_their_user() {
    let (data, _docs, library) = scoped_library();
    let alice = library
        .create_key(&NewKey {
            name: "alice".into(),
            kind: PrincipalKind::Personal,
            user: None,
            scope: Scope {
                collections: Some(vec!["c0".into(), "c1".into(), "c2".into(), "c4".into()]),
                sensitivity_ceiling: "internal".into(),
            },
            acts_for: None,
        })
        .unwrap();
    // A second key of alice's: one restricted collection. Her keys' ceilings are not pooled:
    // c2 (confidential) stays out of reach, since neither key alone allows it.
    library
        .create_key(&NewKey {
            name: "alice-archive".into(),
            kind: PrincipalKind::Personal,
            user: Some("alice".into()),
            scope: Scope {
                collections: Some(vec!["c3".into()]),
                sensitivity_ceiling: "restricted".into(),
            },
            acts_for: None,
        })
        .unwrap();
    let service = library
        .create_key(&NewKey {
            name: "indexer".into(),
            kind: PrincipalKind::Service,
            user: None,
            scope: Scope {
                collections: None,
                sensitivity_ceiling: "restricted".into(),
            },
            acts_for: Some(vec!["alice".into()]),
        })
        .unwrap();
    drop(library);
    for file in ["quarry.db", "quarry.db-wal"] {
        if let Ok(bytes) = std::fs::read(data.path().join(file)) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(&alice.secret) && !text.contains(&service.secret),
                "{file} holds a secret"
            );
        }
    }
    let library = Library::open(data.path()).unwrap();
    let p = library.authenticate(&alice.secret, None).unwrap();
    assert_eq!(p.label, "alice");
    let s = library
        .authenticate(&service.secret, Some("alice"))
        .unwrap();
    assert_eq!(s.label, "indexer for alice");
    let readable = |scope: &Scope| -> Vec<String> {
        (0..6)
            .filter(|&c| scope.allows_named(&format!("c{c}"), LABELS[c % 4]))
            .map(|c| format!("c{c}"))
            .collect()
    };
    assert_eq!(readable(&p.scope), ["c0", "c1", "c4"]);
    assert_eq!(
        readable(&s.scope),
        ["c0", "c1", "c3", "c4"],
        "a service key acting for alice sees what one of her keys allows, no more"
    );
    assert_eq!(
        library
            .authenticate(&service.secret, None)
            .unwrap_err()
            .code(),
        "unauthorized"
    );
    assert_eq!(
        library
            .authenticate(&service.secret, Some("mallory"))
            .unwrap_err()
            .code(),
        "unauthorized"
    );
    // The same key with its last digit changed (to another digit, whatever it was).
    let (head, last) = alice.secret.split_at(alice.secret.len() - 1);
    let wrong = format!("{head}{}", if last == "0" { "1" } else { "0" });
    assert_eq!(
        library.authenticate(&wrong, None).unwrap_err().code(),
        "unauthorized"
    );
    library.revoke_key("alice").unwrap();
    assert!(library
        .authenticate(&alice.secret, None)
        .unwrap_err()
        .to_string()
        .contains("revoked"));
    library.revoke_key("alice-archive").unwrap();
    assert!(
        library
            .authenticate(&service.secret, Some("alice"))
            .is_err(),
        "alice has no active key left"
    );
}

#[test]
fn action_tools_cannot_put_their_own_text_beside_a_reference() {
    let f = fixture(&[(
        "a.md",
        "# Gears\n\nGears transmit torque between shafts.".into(),
    )]);
    let source = "from quarry import BaseModel\nclass Inputs(BaseModel):\n    pass\nclass Chunk(BaseModel):\n    evidence_ref: str\n    text: str\nclass Output(BaseModel):\n    chunks: list[Chunk]\nasync def run(input, ctx):\n    hits = await ctx.search('gears')\n    return {'chunks': [{'evidence_ref': hits[0]['evidence_ref'], 'text': 'Gears are made of cheese.'},\n                       {'evidence_ref': 'qe1.forged.ref', 'text': 'Also made up.'}]}\n";
    f.library
        .create_tool(code_tool("liar", ToolType::Action, source))
        .unwrap();
    let context = quarry_core::pipeline::PipelineDefinition {
        retrieval: Some("retrieve-lexical-focused".into()),
        ..Default::default()
    };
    f.library.create_pipeline("lexical", &context).unwrap();
    let report = f
        .library
        .test_tool(
            "liar",
            &quarry_core::pipeline::TestInput::Json(json!({})),
            &Principal::administrator(),
            Some("lexical"),
            None,
        )
        .unwrap();
    let chunks = report.output["chunks"].as_array().unwrap();
    assert_eq!(
        chunks[0]["text"].as_str().unwrap(),
        report.evidence.entries[0].text,
        "the text is the admitted chunk's own"
    );
    assert!(!chunks[0]["text"].as_str().unwrap().contains("cheese"));
    assert_eq!(chunks[1]["text"], "", "a refused reference keeps no text");
    assert_eq!(report.evidence.entries.len(), 1);
    assert_eq!(report.evidence.rejected.len(), 1);
}

#[test]
fn a_conversation_carries_references_from_a_pipeline_run_to_later_fetches() {
    let f = fixture(&[(
        "manual.md",
        format!("# Turbine manual\n\n{}", long_document(12)),
    )]);
    let context = quarry_core::pipeline::PipelineDefinition {
        retrieval: Some("retrieve-lexical-focused".into()),
        chunk_tools: vec!["noop_chunk".into()],
        ..Default::default()
    };
    f.library.create_pipeline("lexical", &context).unwrap();
    f.library
        .save_pipeline("lexical", &Principal::administrator())
        .unwrap();
    let admin = Principal::administrator();
    let options = RunOptions {
        conversation: Some("chat-1".into()),
        ..Default::default()
    };
    let run = f
        .library
        .run_pipeline("lexical", "turbine blade", &admin, &options)
        .unwrap();
    let source_ref = run.evidence.entries[0].source_ref.clone();
    let fetch = |conversation: Option<&str>, who: &Principal| {
        f.library.test_tool(
            "fetch_document_chunks",
            &quarry_core::pipeline::TestInput::Json(
                json!({"sources": [{"source_ref": source_ref}]}),
            ),
            who,
            Some("lexical"),
            conversation,
        )
    };
    let page = fetch(Some("chat-1"), &admin).unwrap();
    assert_eq!(
        page.output["pages"][0]["chunks"].as_array().unwrap().len(),
        8
    );
    assert!(page.output["pages"][0]["cursor"].is_string());
    let err = fetch(None, &admin).unwrap_err().to_string();
    assert!(err.contains("another run or conversation"), "{err}");
    let err = fetch(Some("chat-2"), &admin).unwrap_err().to_string();
    assert!(err.contains("another run or conversation"), "{err}");
    let bob = Principal {
        id: "key:5".into(),
        label: "bob".into(),
        ..Principal::administrator()
    };
    let err = fetch(Some("chat-1"), &bob).unwrap_err().to_string();
    assert!(err.contains("not issued to this caller"), "{err}");
}

#[test]
fn a_collection_outside_the_scope_is_not_found_like_a_missing_one() {
    let (_data, _docs, library) = scoped_library();
    let scope = Scope {
        collections: Some(vec!["c0".into()]),
        sensitivity_ceiling: "restricted".into(),
    };
    for name in ["c1", "no-such-collection"] {
        let mut request = SearchRequest::new("zebra").with_mode(SearchMode::Lexical);
        request.scope = Some(scope.clone());
        request.collections = vec![name.into()];
        let err = library.search(&request).unwrap_err();
        assert_eq!(err.code(), "collection_not_found", "{name}");
    }
}

#[test]
fn hostile_queries_are_refused_by_name_on_every_path_even_on_a_small_stack() {
    let (f, s) = one_note("# Gears\n\nGears transmit torque between shafts.");
    let hostile = [
        format!("{}gears", "(".repeat(3_000)),
        format!("{}gears", "NOT ".repeat(2_000)),
    ];
    let refused = |what: &str, result: quarry_core::Result<()>| {
        let err = result.expect_err(what);
        assert!(
            err.code() == "invalid_query" || err.to_string().contains("invalid query"),
            "{what}: {err}"
        );
    };
    let lexical = quarry_core::pipeline::PipelineDefinition {
        retrieval: Some("retrieve-lexical-focused".into()),
        ..Default::default()
    };
    f.library.create_pipeline("lexical", &lexical).unwrap();
    f.library
        .save_pipeline("lexical", &Principal::administrator())
        .unwrap();
    let searcher = code_tool(
        "searcher",
        ToolType::Action,
        "from quarry import BaseModel\nclass Inputs(BaseModel):\n    q: str\n\
         class Output(BaseModel):\n    count: int\n\
         async def run(input, ctx):\n    return {'count': len(await ctx.search(input['q']))}\n",
    );
    let searcher = f.library.create_tool(searcher).unwrap();
    let admin = Principal::administrator();
    for query in &hostile {
        // The desktop's worker threads have far smaller stacks than a main thread.
        let reader = Library::open(f.data.path()).unwrap();
        let request = SearchRequest::new(query.clone()).with_mode(SearchMode::Lexical);
        let searched = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || reader.search(&request).map(|_| ()))
            .unwrap()
            .join()
            .expect("the search thread did not overflow its stack");
        refused("search", searched);
        let run = f
            .library
            .run_pipeline("lexical", query, &admin, &RunOptions::default());
        refused("pipeline run", run.map(|_| ()));
        let test = f.library.test_tool(
            "retrieve-lexical-focused",
            &quarry_core::pipeline::TestInput::Query(query.clone()),
            &admin,
            None,
            None,
        );
        refused("retrieval tool test", test.map(|_| ()));
        let from_tool = call(&f.library, &s, &searcher, json!({ "q": query }));
        refused("ctx.search", from_tool.map(|_| ()));
    }
    // The library still answers.
    let hits = f
        .library
        .search(&SearchRequest::new("gears").with_mode(SearchMode::Lexical))
        .unwrap();
    assert_eq!(hits.hits.len(), 1);
}

// ---- the host never hangs or floods (issue 17, items 6 to 9) -------------------------------

/// Runs `f` on a thread and fails the test, instead of hanging it, when it does not return
/// within a minute (the attacks below hung the host forever before).
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = done.send(f());
    });
    match result.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: the host hung"),
        // The thread panicked: fail with its message.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(thread.join().expect_err("it did not send"))
        }
    }
}

/// Calls an action tool whose body is `body`, with `limits`, on a fresh library.
fn attack(slug: &'static str, body: &'static str, limits: Limits) -> (String, String) {
    within_a_minute(slug, move || {
        let (f, s) = one_note("# A\n\nplain text");
        let tool = limited_action(&f.library, slug, body, limits);
        refused(&f.library, &s, &tool)
    })
}

#[test]
fn a_tool_that_floods_requests_without_reading_replies_times_out_on_time() {
    // Before: the host blocked writing replies into a full pipe and the limit never fired.
    let (code, message) = attack(
        "flood",
        "    channel = next(c.cell_contents for c in ctx.search.__closure__ if hasattr(c.cell_contents, 'send'))\n    request = {'op': 'ctx', 'name': 'search_documents', 'args': ['x' * 100], 'kwargs': {}}\n    for _ in range(2000):\n        channel.send(request)\n    import time\n    time.sleep(120)",
        Limits {
            timeout_ms: 1_000,
            memory_mb: 256,
        },
    );
    assert_eq!(code, "tool_timeout", "{message}");
}

#[test]
fn a_tool_that_floods_stderr_is_stopped_without_the_host_buffering_it() {
    // Before: 1 GiB of stderr without a newline took the host to 1.6 GB.
    let (code, message) = attack(
        "stderr-flood",
        "    chunk = b'x' * (1 << 20)\n    for _ in range(1024):\n        os.write(2, chunk)",
        Limits {
            timeout_ms: 30_000,
            memory_mb: 256,
        },
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("MiB to stderr"), "{message}");
}

#[test]
fn a_tool_that_floods_the_protocol_is_stopped_at_the_per_call_bound() {
    // Before: 8 MiB lines pushed continuously took the host from 151 MB to 1.1 GB.
    let (code, message) = attack(
        "stdout-flood",
        "    channel = next(c.cell_contents for c in ctx.search.__closure__ if hasattr(c.cell_contents, 'send'))\n    line = {'op': 'ctx', 'name': 'no_such_operation', 'args': ['x' * (8 << 20)], 'kwargs': {}}\n    for _ in range(64):\n        channel.send(line)\n    import time\n    time.sleep(120)",
        Limits {
            timeout_ms: 30_000,
            memory_mb: 512,
        },
    );
    assert_eq!(code, "tool_failed", "{message}");
    assert!(message.contains("MiB in one call"), "{message}");
}

#[test]
fn a_garbled_30_mb_output_is_audited_as_an_excerpt_and_a_hash() {
    // Before: three such test runs grew quarry.db by 95 MB.
    within_a_minute("garbled", || {
        let (f, _) = one_note("# A\n\nplain text");
        let tool = limited_action(
            &f.library,
            "garble",
            "    channel = next(c.cell_contents for c in ctx.search.__closure__ if hasattr(c.cell_contents, 'send'))\n    channel.writer.write(b'<' * 30_000_000 + b'\\n')\n    channel.writer.flush()\n    import time\n    time.sleep(120)",
            Limits {
                timeout_ms: 20_000,
                memory_mb: 512,
            },
        );
        let db = f.data.path().join("quarry.db");
        let size_before = std::fs::metadata(&db).unwrap().len();
        let refused = f.library.test_tool(
            &tool.slug,
            &quarry_core::pipeline::TestInput::Json(json!({})),
            &Principal::administrator(),
            None,
            None,
        );
        let message = refused
            .expect_err("garbled output fails the call")
            .to_string();
        assert!(message.contains("garbled worker output"), "{message:.300}");
        assert!(
            message.len() < 1_000,
            "the error quotes an excerpt, not the output"
        );
        let records = f
            .library
            .audit(&quarry_core::audit::AuditQuery {
                action: Some("tool.test".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        let detail = records[0].detail.clone().unwrap_or_default();
        assert!(detail.len() < 3_000, "{} bytes of detail", detail.len());
        assert!(detail.contains("garbled worker output"), "{detail}");
        let grown = std::fs::metadata(&db)
            .unwrap()
            .len()
            .saturating_sub(size_before);
        assert!(grown < 1 << 20, "quarry.db grew by {grown} bytes");
    });
}

#[test]
fn a_thread_left_running_retires_the_worker_even_with_the_workers_own_check_patched() {
    let (f, s) = one_note("# A\n\nplain text");
    // A counter in a stdlib module tells a reused worker (2) from a fresh one (1).
    let tool = action(
        &f.library,
        "leaves-a-thread",
        "    import json, threading, time, __main__\n    json.calls = getattr(json, 'calls', 0) + 1\n    if json.calls == 3:\n        __main__._back_to_one_thread = lambda: True\n        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n    return {'value': str(json.calls)}",
    );
    let calls = || call(&f.library, &s, &tool, json!({})).unwrap()["value"].clone();
    assert_eq!(calls(), "1");
    assert_eq!(calls(), "2", "a clean call keeps its worker");
    assert_eq!(calls(), "3", "this call leaves a thread running");
    assert_eq!(
        calls(),
        "1",
        "the worker that kept a thread running was retired by the host"
    );
}

/// The audit hook disarmed the way that worked once: a refused operation's traceback reaches
/// the hook's frame, whose `refuse` gets a harmless body. Then the body `attempts` runs, each
/// line adding what happened to `results`.
fn with_the_hook_disarmed(attempts: &str) -> String {
    format!(
        "    results = []\n    try:\n        open('/etc/hostname')\n    except Exception as error:\n        tb = error.__traceback__\n        while tb.tb_next:\n            tb = tb.tb_next\n        def harmless():\n            violation = None\n            def refuse(what):\n                return violation\n            return refuse\n        tb.tb_frame.f_back.f_locals['refuse'].__code__ = harmless().__code__\n{attempts}\n    return {{'value': ' | '.join(results)}}"
    )
}

#[test]
fn with_the_audit_hook_disarmed_the_kernel_still_refuses_programs_processes_and_files() {
    let attempts = "    import posix\n    def read(path):\n        with open(path, 'rb') as f:\n            return len(f.read(16))\n    for name, attempt in [\n        ('passwd read', lambda: read('/etc/passwd')),\n        ('database read', lambda: read(DATABASE)),\n        ('home listed', lambda: posix.listdir(DOCS)),\n        ('spawn', lambda: posix.posix_spawn('/bin/sh', ['sh', '-c', 'sleep 600'], {})),\n        ('fork', lambda: posix.fork() if hasattr(posix, 'fork') else (_ for _ in ()).throw(OSError(1, 'no fork'))),\n        ('system', lambda: posix.system('true')),\n    ]:\n        try:\n            results.append(name + ' ran: ' + str(attempt()))\n        except Exception as e:\n            results.append(name + ' refused: ' + type(e).__name__ + ' ' + str(getattr(e, 'errno', '')))\n    import threading\n    seen = []\n    worker = threading.Thread(target=lambda: seen.append('thread ran'))\n    worker.start()\n    worker.join()\n    results.extend(seen)";
    for isolation in [NetworkIsolation::Sandbox, NetworkIsolation::AuditHookOnly] {
        let (f, _) = one_note("# A\n\nplain text");
        let library = f.reopen(LibraryOptions {
            executor: Executor::default().with_max_isolation(isolation),
            ..LibraryOptions::default()
        });
        let s = admin(&library);
        let attempts = attempts
            .replace(
                "DATABASE",
                &format!("{:?}", f.data.path().join("quarry.db").to_str().unwrap()),
            )
            .replace("DOCS", &format!("{:?}", f.docs.path().to_str().unwrap()));
        let tool = action(&library, "disarm", &with_the_hook_disarmed(&attempts));
        let out = call(&library, &s, &tool, json!({})).unwrap();
        let value = out["value"].as_str().unwrap().to_string();
        // The hook really was disarmed (a spawn got as far as the kernel)...
        assert!(
            !value.contains("SandboxViolation"),
            "{isolation:?}: {value}"
        );
        // ...and the kernel refused every file outside Python and the system libraries (the
        // library's database with its evidence key among them)...
        for read in [
            "passwd read refused",
            "database read refused",
            "home listed refused",
        ] {
            assert!(value.contains(read), "{isolation:?}: {value}");
        }
        // ...and every new program and process, but not a thread.
        assert!(value.contains("spawn refused"), "{isolation:?}: {value}");
        assert!(value.contains("fork refused"), "{isolation:?}: {value}");
        assert!(!value.contains("system ran: 0"), "{isolation:?}: {value}");
        assert!(value.contains("thread ran"), "{isolation:?}: {value}");
    }
}

/// A tool that starts `COUNT` threads which, once all have started, each allocate `EACH` MB
/// in 20 KB pieces (the sizes glibc serves from per-thread arenas) and hold it until all have
/// tried.
const THREADS_ALLOCATING: &str = "    import threading\n    got, failed = [], []\n    go = threading.Barrier(COUNT, timeout=20)\n    gate = threading.Barrier(COUNT + 1, timeout=20)\n    def grab():\n        go.wait()\n        try:\n            got.append([bytes(20_000) for _ in range(EACH * 52)])\n        except MemoryError:\n            failed.append(1)\n        gate.wait()\n    workers = []\n    for _ in range(COUNT):\n        t = threading.Thread(target=grab)\n        try:\n            t.start()\n        except RuntimeError as e:\n            gate.abort()\n            return {'value': f'thread {len(workers)} refused: {e}'}\n        workers.append(t)\n    gate.wait()\n    for t in workers:\n        t.join()\n    return {'value': f'{len(got)} allocated, {len(failed)} refused'}";

fn threads_allocating(count: usize, each_mb: usize, memory_mb: u64) -> String {
    let body = THREADS_ALLOCATING
        .replace("COUNT", &count.to_string())
        .replace("EACH", &each_mb.to_string());
    within_a_minute("threads", move || {
        let (f, s) = one_note("# A\n\nplain text");
        let tool = limited_action(
            &f.library,
            "threads",
            &body,
            Limits {
                timeout_ms: 30_000,
                memory_mb,
            },
        );
        let out = call(&f.library, &s, &tool, json!({})).unwrap();
        out["value"].as_str().unwrap().to_string()
    })
}

#[test]
fn the_memory_limit_leaves_room_for_threads() {
    // Before: under RLIMIT_AS a fourth thread could not start (each reserves a malloc arena
    // of address space it never uses).
    assert_eq!(threads_allocating(32, 1, 256), "32 allocated, 0 refused");
}

#[test]
fn the_memory_limit_holds_for_the_worker_as_a_whole() {
    // Ten workers of 60 MB under a 256 MB limit: whatever runs in the sandbox shares it (new
    // processes are refused by the kernel, so every thread is in the one limited process).
    let value = threads_allocating(10, 60, 256);
    let allocated: usize = value.split(' ').next().unwrap().parse().expect(&value);
    assert!(allocated <= 4, "{value}");
    assert!(
        value.ends_with(&format!("{} refused", 10 - allocated)),
        "{value}"
    );
}

#[test]
fn in_a_user_namespace_of_its_own_the_worker_runs_a_bounded_number_of_tasks() {
    // bubblewrap gives the worker its own user namespace, where RLIMIT_NPROC counts only the
    // sandbox's tasks (Linux 5.14 and later; a root user outside is exempt from the count).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap(), numbers.next().unwrap());
    let (f, s) = one_note("# A\n\nplain text");
    assert_eq!(
        f.library.executor().check().unwrap(),
        NetworkIsolation::Sandbox
    );
    let tool = action(
        &f.library,
        "tasks",
        "    import resource\n    return {'value': str(resource.getrlimit(resource.RLIMIT_NPROC))}",
    );
    let value = call(&f.library, &s, &tool, json!({})).unwrap()["value"].clone();
    if version >= (5, 14) {
        assert_eq!(value, "(128, 128)");
    } else {
        assert_ne!(
            value, "(128, 128)",
            "an older kernel counts the user's every process"
        );
    }
}

/// A library whose workers the OS does not confine (the hook alone: no namespaces, seccomp or
/// Landlock, as on macOS or an old kernel), the administrator allowed to run them or not, and
/// a personal key.
fn unconfined_library(admin_allowed: bool) -> (Fixture, Library, Principal) {
    let f = fixture(&[("a.md", "# A\n\nplain text".to_string())]);
    let key = f
        .library
        .create_key(&NewKey {
            name: "alice".into(),
            kind: PrincipalKind::Personal,
            user: None,
            scope: Scope {
                collections: None,
                sensitivity_ceiling: "restricted".into(),
            },
            acts_for: None,
        })
        .unwrap();
    let library = f.reopen(LibraryOptions {
        executor: Executor::default()
            .with_max_isolation(NetworkIsolation::AuditHookOnly)
            .without_kernel_confinement()
            .with_unconfined_admin(admin_allowed),
        ..LibraryOptions::default()
    });
    let alice = library.authenticate(&key.secret, None).unwrap();
    (f, library, alice)
}

#[test]
fn without_os_isolation_code_tools_run_only_for_an_administrator_who_allowed_it() {
    let pipeline = quarry_core::pipeline::PipelineDefinition {
        query_tools: vec!["expand_multi_query".into()],
        retrieval: Some("retrieve-lexical-focused".into()),
        chunk_tools: vec!["noop_chunk".into()],
        ..Default::default()
    };
    for admin_allowed in [false, true] {
        let (_f, library, alice) = unconfined_library(admin_allowed);
        let confinement = library.executor().confinement().unwrap();
        assert!(!confinement.os_isolated(), "{confinement:?}");
        let tool = action(&library, "echo", "    return {'value': 'ran'}");
        // A personal key is refused, naming what is missing, whatever the setting...
        let (code, message) = error_of(call(
            &library,
            &session(&library, alice.clone()),
            &tool,
            json!({}),
        ));
        assert_eq!(code, "unauthorized", "{message}");
        assert!(
            message.contains("isolation by the operating system"),
            "{message}"
        );
        assert!(
            message.contains("no seccomp filters, no Landlock"),
            "{message}"
        );
        // ...and the administrator only with the setting, which says what is lost.
        let as_admin = call(&library, &admin(&library), &tool, json!({}));
        if admin_allowed {
            assert_eq!(as_admin.unwrap()["value"], "ran");
        } else {
            let (code, message) = error_of(as_admin);
            assert_eq!(code, "unauthorized", "{message}");
            assert!(
                message.contains("QUARRY_UNCONFINED_CODE_TOOLS=admin"),
                "{message}"
            );
            assert!(message.contains("read every file"), "{message}");
        }
        // `pipeline check` calls it blocking for the key, not degraded; a run is refused.
        library.create_pipeline("coded", &pipeline).unwrap();
        let for_alice = library.check_pipeline("coded", true, &alice).unwrap();
        let sandbox = for_alice.iter().find(|p| p.component == "sandbox").unwrap();
        assert_eq!(
            sandbox.severity,
            quarry_core::pipeline::Severity::Blocking,
            "{sandbox:?}"
        );
        let run = library.run_pipeline(
            "coded",
            "text",
            &alice,
            &RunOptions {
                draft: true,
                ..Default::default()
            },
        );
        assert_eq!(run.unwrap_err().code(), "pipeline_not_ready");
        let for_admin = library
            .check_pipeline("coded", true, &Principal::administrator())
            .unwrap();
        let sandbox = for_admin.iter().find(|p| p.component == "sandbox").unwrap();
        let expected = if admin_allowed {
            quarry_core::pipeline::Severity::Degraded
        } else {
            quarry_core::pipeline::Severity::Blocking
        };
        assert_eq!(sandbox.severity, expected, "{sandbox:?}");
    }
}
