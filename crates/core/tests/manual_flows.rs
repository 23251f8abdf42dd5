//! The tool manual's flows end to end through the library's public API, on real libraries
//! with a real Python worker: query tools receive the conversation, readiness gates applying
//! a revision, fetch_neighbors' radius, sensitivity labels and what each caller may read
//! (a property test over every path), pipelines narrowed to the caller, Optional input
//! bounds, chat runs in the audit log, the seeded modes, and fetch_source_document reading
//! the committed text.

mod common;

use proptest::prelude::*;
use quarry_core::audit::AuditQuery;
use quarry_core::auth::{NewKey, PrincipalKind, Scope, SENSITIVITY_LEVELS};
use quarry_core::orchestrator::{ChatOptions, DEFAULT_CONFIG};
use quarry_core::pipeline::{PipelineDefinition, TestInput};
use quarry_core::tools::ToolType;
use quarry_core::{Error, Library, Principal, RunOptions, SearchMode, SearchRequest};
use serde_json::json;

use common::{admin, code_tool, Fixture};

/// A lexical pipeline `name` over `collections` with these query tools, saved.
fn lexical_pipeline(library: &Library, name: &str, query_tools: &[&str], collections: &[&str]) {
    let definition = PipelineDefinition {
        query_tools: query_tools.iter().map(|s| s.to_string()).collect(),
        retrieval: Some("retrieve-lexical-focused".into()),
        chunk_tools: vec!["noop_chunk".into()],
        collections: collections.iter().map(|s| s.to_string()).collect(),
        ..PipelineDefinition::default()
    };
    library.create_pipeline(name, &definition).unwrap();
    library
        .save_pipeline(name, &Principal::administrator())
        .unwrap();
}

/// The extractive mode of the default configuration runs `pipeline` from now on.
fn extractive_mode_runs(library: &Library, pipeline: &str) {
    let mut draft = library.orchestrator_draft(DEFAULT_CONFIG).unwrap();
    for mode in draft.modes.iter_mut().filter(|m| m.name == "extractive") {
        mode.pipeline = Some(pipeline.into());
    }
    library
        .set_orchestrator_draft(DEFAULT_CONFIG, &draft)
        .unwrap();
    library
        .apply_orchestrator(DEFAULT_CONFIG, &Principal::administrator())
        .unwrap();
}

/// A key with `scope`, as the caller it authenticates.
fn caller(
    library: &Library,
    name: &str,
    collections: Option<Vec<String>>,
    ceiling: &str,
) -> Principal {
    let created = library
        .create_key(&NewKey {
            name: name.into(),
            kind: PrincipalKind::Personal,
            user: None,
            scope: Scope {
                collections,
                sensitivity_ceiling: ceiling.into(),
            },
            acts_for: None,
        })
        .unwrap();
    library.authenticate(&created.secret, None).unwrap()
}

fn paths(entries: impl IntoIterator<Item = std::path::PathBuf>) -> Vec<String> {
    entries
        .into_iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Adds the conversation's last question as a second stream.
const FOLLOW_UP: &str = r#"async def run(input, ctx):
    query = input["query"]
    earlier = [m["content"] for m in input.get("history") or [] if m.get("role") == "user"]
    queries = [{"query": query, "weight": 1.0}]
    if earlier:
        queries.append({"query": earlier[-1], "weight": 1.0})
    return {"kind": "query_variants", "queries": queries}
"#;

#[test]
fn a_follow_up_question_is_searched_with_the_conversation_and_the_run_is_audited() {
    let mut f = Fixture::new();
    f.add_collection(
        "notes",
        "internal",
        "",
        &[
            (
                "lamp.md",
                "# Lighthouse lamp\n\nThe lighthouse lamp burns paraffin and needs a clean wick.\n",
            ),
            (
                "pump.md",
                "# Pump\n\nThe bilge pump is serviced every month.\n",
            ),
        ],
    );
    f.reindex();
    let library = &f.library;
    library
        .create_tool(code_tool("follow-up", ToolType::Query, FOLLOW_UP))
        .unwrap();
    lexical_pipeline(library, "conversational", &["follow-up"], &[]);
    extractive_mode_runs(library, "conversational");

    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("extractive".into());
    let first = library
        .chat("tell me about the lighthouse lamp", &options, &mut |_| {})
        .unwrap();
    options.conversation = Some(first.conversation.clone());
    // "serviced" is only in pump.md: lamp.md is found through the conversation so far.
    let second = library
        .chat("how often is it serviced?", &options, &mut |_| {})
        .unwrap();
    let found = paths(second.evidence.iter().map(|e| e.path.clone()));
    assert!(
        found.iter().any(|p| p == "lamp.md"),
        "the follow-up is searched with the lamp question: {found:?}"
    );

    // Each chat search is in the audit log, naming its conversation.
    let runs = library
        .audit(&AuditQuery {
            action: Some("pipeline.run".into()),
            target: Some("conversational".into()),
            ..AuditQuery::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r
        .detail
        .as_deref()
        .unwrap_or("")
        .contains(&first.conversation)));

    // The tester gives a query tool the same history.
    let report = library
        .test_tool(
            "follow-up",
            &TestInput::Json(json!({
                "query": "how often is it serviced?",
                "history": [{"role": "user", "content": "tell me about the lighthouse lamp"}],
            })),
            &Principal::administrator(),
            None,
            None,
        )
        .unwrap();
    assert_eq!(
        report.output["queries"][1]["query"],
        "tell me about the lighthouse lamp"
    );
}

#[test]
fn a_revision_is_not_applied_while_its_pipeline_cannot_run() {
    let mut f = Fixture::new();
    f.add_collection("notes", "internal", "", &[("a.md", "alpha beta\n")]);
    f.reindex();
    let library = &f.library;
    // ctx.llm with no model: the pipeline saves (a draft may be saved mid-work) but cannot run.
    let rewrite = "async def run(input, ctx):\n    text = await ctx.llm(\"rewrite: \" + input[\"query\"])\n    return {\"kind\": \"query_variants\", \"queries\": [{\"query\": text, \"weight\": 1.0}]}\n";
    library
        .create_tool(code_tool("llm-rewrite", ToolType::Query, rewrite))
        .unwrap();
    lexical_pipeline(library, "needs-model", &["llm-rewrite"], &[]);
    let blocking = library
        .check_pipeline("needs-model", false, &Principal::administrator())
        .unwrap();
    assert!(!blocking.is_empty());

    let mut draft = library.orchestrator_draft(DEFAULT_CONFIG).unwrap();
    for mode in draft.modes.iter_mut().filter(|m| m.name == "extractive") {
        mode.pipeline = Some("needs-model".into());
    }
    library
        .set_orchestrator_draft(DEFAULT_CONFIG, &draft)
        .unwrap();
    let problems = library.orchestrator_problems(&draft);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("needs-model") && p.contains("ctx.llm")),
        "{problems:?}"
    );
    let before = library
        .orchestrator_revisions(DEFAULT_CONFIG)
        .unwrap()
        .len();
    let refused = library
        .apply_orchestrator(DEFAULT_CONFIG, &Principal::administrator())
        .unwrap_err();
    assert!(
        matches!(refused, Error::OrchestratorNotReady(_)),
        "{refused}"
    );
    assert!(refused
        .to_string()
        .contains("pipeline `needs-model` is not ready"));
    assert_eq!(
        library
            .orchestrator_revisions(DEFAULT_CONFIG)
            .unwrap()
            .len(),
        before,
        "nothing applied"
    );
}

#[test]
fn fetch_neighbors_honours_its_max_radius_and_reports_the_radius_used() {
    let mut f = Fixture::new();
    let long: String = (0..30)
        .map(|i| format!("## Part {i}\n\nSection {i} of the manual, with its own words.\n\n"))
        .collect();
    f.add_collection("notes", "internal", "", &[("long.md", long)]);
    f.reindex();
    let library = &f.library;
    let session = admin(library);
    let lexical = library.tool("retrieve-lexical-focused").unwrap();
    let found = library
        .call_code_tool(
            &library.tool("search_documents").unwrap(),
            &json!({"query": "Section 15"}),
            &session,
            Some(&lexical),
        )
        .unwrap();
    let source_ref = found.output["matches"][0]["sourceRef"].clone();
    let page = library
        .call_code_tool(
            &library.tool("fetch_document_chunks").unwrap(),
            &json!({"sources": [{"source_ref": source_ref}]}),
            &session,
            Some(&lexical),
        )
        .unwrap()
        .output;
    let chunks = page["pages"][0]["chunks"].as_array().unwrap();
    let seventh = chunks
        .iter()
        .find(|c| c["ordinal"] == 7)
        .expect("a first page of 8");
    let reference = seventh["evidence_ref"].as_str().unwrap().to_string();

    let mut neighbors = library.tool("fetch_neighbors").unwrap();
    neighbors.settings = json!({"max_radius": 8});
    let out = library
        .call_code_tool(
            &neighbors,
            &json!({"evidence_ref": reference, "radius": 6}),
            &session,
            Some(&lexical),
        )
        .unwrap()
        .output;
    assert_eq!(out["radius"], 6, "{out}");
    assert_eq!(out["chunks"].as_array().unwrap().len(), 12, "{out}");
    let out = library
        .call_code_tool(
            &neighbors,
            &json!({"evidence_ref": reference, "radius": 20}),
            &session,
            Some(&lexical),
        )
        .unwrap()
        .output;
    assert_eq!(out["radius"], 8, "capped at the tool's max_radius: {out}");
}

/// The `sourceRef` of `search_documents`' best match for `query` (lexical).
fn source_ref_of(
    library: &Library,
    session: &quarry_core::evidence::EvidenceSession,
    query: &str,
) -> serde_json::Value {
    let found = library
        .call_code_tool(
            &library.tool("search_documents").unwrap(),
            &json!({ "query": query }),
            session,
            Some(&library.tool("retrieve-lexical-focused").unwrap()),
        )
        .unwrap()
        .output;
    found["matches"][0]["sourceRef"].clone()
}

/// Pages `source_ref` with `reader` to its end: each page's text and evidence references.
fn read_to_the_end(
    library: &Library,
    reader: &quarry_core::tools::ToolDefinition,
    source_ref: &serde_json::Value,
    session: &quarry_core::evidence::EvidenceSession,
) -> Vec<(String, Vec<String>)> {
    let mut pages = Vec::new();
    let mut cursor = serde_json::Value::Null;
    loop {
        let out = library
            .call_code_tool(
                reader,
                &json!({"sourceRef": source_ref, "cursor": cursor}),
                session,
                None,
            )
            .unwrap()
            .output;
        let refs = out["evidence_refs"].as_array().unwrap();
        pages.push((
            out["text"].as_str().unwrap().to_string(),
            refs.iter()
                .map(|r| r.as_str().unwrap().to_string())
                .collect(),
        ));
        cursor = out["cursor"].clone();
        if cursor.is_null() || pages.len() > 100 {
            return pages;
        }
    }
}

#[test]
fn fetch_source_document_reads_the_committed_text_once_with_its_structure() {
    let mut f = Fixture::new();
    let manual: String = (0..30)
        .map(|i| {
            format!(
                "## Valve {i}\n\nValve {i} opens at **{} bar**; check it every {i} weeks.\n\n\
                 - seal ring {i}\n- spring {i}\n\n```sh\nvalve --test {i}\n```\n\n",
                2 + i
            )
        })
        .collect();
    let guide = "<html><body><h1>Guide</h1><p>Unpack the valve kit.</p>\
                 <h2>Setup</h2><p>Tighten the flange by hand.</p><pre>flange --check</pre></body></html>";
    f.add_collection(
        "notes",
        "internal",
        "",
        &[("valves.md", manual.clone()), ("guide.html", guide.into())],
    );
    f.reindex();
    let library = &f.library;
    let session = admin(library);
    let lexical = library.tool("retrieve-lexical-focused").unwrap();
    let source_of = |query: &str| source_ref_of(library, &session, query);
    let mut reader = library.tool("fetch_source_document").unwrap();
    reader.settings = json!({"page_chars": 500});

    // The Markdown file comes back as written: every byte once, no chunk overlap repeated.
    let valves = source_of("seal ring");
    let pages = read_to_the_end(library, &reader, &valves, &session);
    assert!(pages.len() > 5, "{} pages", pages.len());
    let texts: Vec<&str> = pages.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts.concat(), manual);
    assert!(texts.iter().all(|t| t.chars().count() <= 500));
    // Each page's references are chunks on that page's lines, and together they are all of them.
    let mut ordinals = std::collections::BTreeSet::new();
    let mut line = 1u32;
    for (text, refs) in &pages {
        let last_line = line + text.trim_end().matches('\n').count() as u32;
        assert!(!refs.is_empty(), "page at line {line} cites nothing");
        for reference in refs {
            let entry = library
                .revalidate_evidence(&session, reference, "test")
                .unwrap();
            let (start, end) = (
                entry.location.line_start.unwrap(),
                entry.location.line_end.unwrap(),
            );
            assert!(
                start <= last_line && end >= line,
                "chunk {start}-{end} is not on the page of lines {line}-{last_line}"
            );
            ordinals.insert(entry.ordinal);
        }
        line += text.matches('\n').count() as u32;
    }
    let last = *ordinals.last().unwrap();
    assert_eq!(
        ordinals.len() as i64,
        last + 1,
        "every chunk is on a page: {ordinals:?}"
    );

    // HTML is read as its blocks, headings as Markdown headings and preformatted text fenced.
    let guide_pages = read_to_the_end(library, &reader, &source_of("flange"), &session);
    assert_eq!(guide_pages.len(), 1);
    let (text, refs) = &guide_pages[0];
    assert!(
        text.contains("## Setup\n\nTighten the flange by hand.\n\n```\nflange --check\n```"),
        "{text}"
    );
    assert!(!text.contains("<p>"), "{text}");
    assert!(!refs.is_empty());

    // A chunk cursor is not a reading cursor, and a reading cursor goes stale with its revision.
    let chunk_page = library
        .call_code_tool(
            &library.tool("fetch_document_chunks").unwrap(),
            &json!({"sources": [{"source_ref": valves}]}),
            &session,
            Some(&lexical),
        )
        .unwrap()
        .output;
    let chunk_cursor = chunk_page["pages"][0]["cursor"].clone();
    assert!(chunk_cursor.is_string(), "{chunk_page}");
    let refused = library
        .call_code_tool(
            &reader,
            &json!({"source_ref": valves, "cursor": chunk_cursor}),
            &session,
            None,
        )
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("where a reading cursor was expected"),
        "{refused}"
    );
    let first = library
        .call_code_tool(&reader, &json!({ "source_ref": valves }), &session, None)
        .unwrap()
        .output;
    std::fs::write(f.docs.path().join("valves.md"), "## Valve\n\nReplaced.\n").unwrap();
    f.reindex();
    let library = &f.library;
    let stale = library
        .call_code_tool(
            &reader,
            &json!({"source_ref": valves, "cursor": first["cursor"]}),
            &session,
            None,
        )
        .unwrap_err();
    assert!(stale.to_string().contains("superseded"), "{stale}");
}

#[test]
fn a_library_indexed_before_reader_texts_reads_each_file_once_more_and_then_pages_it() {
    let mut f = Fixture::new();
    let note = "# Boiler\n\n- Bleed the **radiators** in autumn.\n- Check the pressure: 1.5 bar.\n";
    f.add_collection("notes", "internal", "", &[("boiler.md", note)]);
    f.reindex();
    // As a library written before reader texts were kept: its revisions have none.
    let db = rusqlite::Connection::open(f.data.path().join("quarry.db")).unwrap();
    db.execute("DELETE FROM revision_texts", []).unwrap();
    drop(db);
    let session = admin(&f.library);
    let reader = f.library.tool("fetch_source_document").unwrap();
    // Until the next scan, the page joins the chunks (the Markdown marks are gone).
    let first_page = |library: &Library| {
        let source_ref = source_ref_of(library, &session, "radiators");
        library
            .call_code_tool(
                &reader,
                &json!({ "source_ref": source_ref }),
                &session,
                None,
            )
            .unwrap()
            .output
    };
    let joined = first_page(&f.library);
    assert!(joined["text"].as_str().unwrap().contains("radiators"));
    assert!(!joined["text"].as_str().unwrap().contains("**"), "{joined}");

    let scan = |library: &mut Library| {
        library
            .writer()
            .unwrap()
            .index_all(&quarry_core::IndexOptions::default(), &|_| {})
            .unwrap()
    };
    let upgrade = scan(&mut f.library);
    assert_eq!(
        (upgrade.files_indexed, upgrade.files_reread_for_text),
        (1, 1),
        "read again for its text, and said why"
    );
    let next = scan(&mut f.library);
    assert_eq!(
        (next.files_indexed, next.files_reread_for_text),
        (0, 0),
        "and only once"
    );
    let page = first_page(&f.library);
    assert_eq!(page["text"], note);
    assert!(page["cursor"].is_null());
}

#[test]
fn a_mistyped_sensitivity_label_is_refused_and_nothing_is_created() {
    let mut f = Fixture::new();
    let refused = f
        .library
        .create_collection("typo", "confidental", "english")
        .unwrap_err();
    assert!(
        refused.to_string().contains("`confidental` is not one of"),
        "{refused}"
    );
    assert!(f.library.collections().unwrap().is_empty());
}

#[test]
fn a_pipeline_is_narrowed_to_the_collections_its_caller_may_read() {
    let mut f = Fixture::new();
    f.add_collection(
        "open",
        "public",
        "open",
        &[("o.md", "the shared harbour schedule\n")],
    );
    f.add_collection(
        "closed",
        "restricted",
        "closed",
        &[("c.md", "the secret harbour schedule\n")],
    );
    f.add_collection(
        "other",
        "public",
        "other",
        &[("x.md", "an unrelated note\n")],
    );
    f.reindex();
    let library = &f.library;
    lexical_pipeline(library, "both", &[], &["open", "closed"]);

    let reader = caller(library, "reader", None, "internal");
    let run = library
        .run_pipeline("both", "harbour schedule", &reader, &RunOptions::default())
        .unwrap();
    assert_eq!(
        paths(run.evidence.entries.iter().map(|e| e.path.clone())),
        ["o.md"]
    );
    let retrieval = run.stages.iter().find(|s| s.stage == "retrieval").unwrap();
    assert!(
        retrieval
            .detail
            .contains("narrowed to the caller's collections: 1 of the pipeline's 2 left out"),
        "{}",
        retrieval.detail
    );

    let outsider = caller(library, "outsider", Some(vec!["other".into()]), "public");
    let run = library
        .run_pipeline(
            "both",
            "harbour schedule",
            &outsider,
            &RunOptions::default(),
        )
        .unwrap();
    assert!(run.evidence.entries.is_empty());

    let admin_run = library
        .run_pipeline(
            "both",
            "harbour schedule",
            &Principal::administrator(),
            &RunOptions::default(),
        )
        .unwrap();
    assert_eq!(admin_run.evidence.entries.len(), 2);
}

#[test]
fn optional_inputs_keep_their_bounds() {
    let mut f = Fixture::new();
    f.add_collection("notes", "internal", "", &[("a.md", "cache eviction\n")]);
    f.reindex();
    let library = &f.library;
    let refused = library
        .test_tool(
            "search_documents",
            &TestInput::Json(json!({"query": "cache", "limit": -3})),
            &Principal::administrator(),
            None,
            None,
        )
        .unwrap_err();
    assert!(
        refused.to_string().contains("`limit` must be at least 1"),
        "{refused}"
    );
    library
        .test_tool(
            "search_documents",
            &TestInput::Json(json!({"query": "cache", "limit": null})),
            &Principal::administrator(),
            None,
            None,
        )
        .unwrap();
}

#[test]
fn a_tool_test_names_the_audit_record_it_wrote() {
    let mut f = Fixture::new();
    f.add_collection("notes", "internal", "", &[("a.md", "cache eviction\n")]);
    f.reindex();
    let library = &f.library;
    let test = |query: &str| {
        library
            .test_tool(
                "retrieve-lexical-focused",
                &TestInput::Query(query.into()),
                &Principal::administrator(),
                None,
                None,
            )
            .unwrap()
    };
    let first = test("cache");
    // Another test of the same tool meanwhile: the first still names its own record, not
    // the tool's newest (what the desktop's Test tab once showed).
    let second = test("eviction");
    let (mine, newest) = (first.audit_id.unwrap(), second.audit_id.unwrap());
    assert_ne!(mine, newest);
    let record = library
        .audit_record(mine)
        .unwrap()
        .expect("the first test's record");
    assert_eq!(
        (
            record.action.as_str(),
            record.target.as_str(),
            record.outcome.as_str()
        ),
        ("tool.test", "retrieve-lexical-focused", "ok")
    );
    assert_eq!(
        record.input_hash,
        quarry_core::audit::input_hash(&json!({"query": "cache"}))
    );
    assert!(library.audit_record(newest + 1).unwrap().is_none());
}

#[test]
fn the_seeded_grounded_mode_offers_only_what_it_can_use() {
    let f = Fixture::new();
    let revision = f
        .library
        .orchestrator_revision(DEFAULT_CONFIG, None)
        .unwrap();
    let grounded = revision
        .config
        .modes
        .iter()
        .find(|m| m.name == "grounded")
        .unwrap();
    // One round led by the orchestrator: the model never gets to call a direct tool.
    assert!(
        grounded.direct_tools.is_empty(),
        "{:?}",
        grounded.direct_tools
    );
}

/// What every read path returns to `who`, as (collection, sensitivity) of each chunk.
fn everything_read(library: &Library, who: &Principal) -> Vec<(String, String)> {
    let collections = library.collections().unwrap();
    let label = |name: &str| {
        collections
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.sensitivity.clone())
            .unwrap()
    };
    let mut seen = Vec::new();
    let mut request = SearchRequest::new("harbour schedule");
    request.settings.mode = SearchMode::Lexical;
    for hit in library.search_as(who, request).unwrap().hits {
        seen.push(hit.collection.clone());
    }
    let run = library
        .run_pipeline("all", "harbour schedule", who, &RunOptions::default())
        .unwrap();
    seen.extend(run.evidence.entries.iter().map(|e| e.collection.clone()));
    let test = library
        .test_tool(
            "retrieve-lexical-focused",
            &TestInput::Query("harbour schedule".into()),
            who,
            Some("all"),
            None,
        )
        .unwrap();
    seen.extend(test.evidence.entries.iter().map(|e| e.collection.clone()));
    let mut options = ChatOptions::new(who.clone());
    options.mode = Some("extractive".into());
    let chat = library
        .chat("harbour schedule", &options, &mut |_| {})
        .unwrap();
    seen.extend(chat.evidence.iter().map(|e| e.collection.clone()));
    seen.into_iter()
        .map(|c| {
            let l = label(&c);
            (c, l)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, .. ProptestConfig::default() })]

    /// For random labels, scopes and ceilings, no read path gives a caller a chunk outside its
    /// collections or above its ceiling, and the administrator sees everything.
    #[test]
    fn no_path_reads_outside_the_callers_scope(
        labels in proptest::collection::vec(0..SENSITIVITY_LEVELS.len(), 3),
        listed in proptest::collection::vec(any::<bool>(), 3),
        limit_to_listed in any::<bool>(),
        ceiling in 0..SENSITIVITY_LEVELS.len(),
    ) {
        let mut f = Fixture::new();
        let names = ["north", "south", "east"];
        for (i, name) in names.iter().enumerate() {
            let file = format!("{name}.md");
            f.add_collection(
                name,
                SENSITIVITY_LEVELS[labels[i]],
                name,
                &[(file.as_str(), format!("the {name} harbour schedule\n"))],
            );
        }
        f.reindex();
        let library = &f.library;
        lexical_pipeline(library, "all", &[], &[]);
        extractive_mode_runs(library, "all");

        let allowed: Vec<String> = names
            .iter()
            .zip(&listed)
            .filter(|(_, on)| **on)
            .map(|(n, _)| n.to_string())
            .collect();
        let scope = limit_to_listed.then(|| allowed.clone());
        let who = caller(library, "prop", scope.clone(), SENSITIVITY_LEVELS[ceiling]);
        for (collection, label) in everything_read(library, &who) {
            let rank = SENSITIVITY_LEVELS.iter().position(|l| *l == label).unwrap();
            prop_assert!(rank <= ceiling, "{collection} ({label}) is above {}", SENSITIVITY_LEVELS[ceiling]);
            if let Some(scope) = &scope {
                prop_assert!(scope.contains(&collection), "{collection} is outside {scope:?}");
            }
        }
        let admin_sees: std::collections::BTreeSet<String> = everything_read(library, &Principal::administrator())
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        prop_assert_eq!(admin_sees.len(), 3);
    }
}

/// Adds `tool` to the seeded agent mode's direct tools and applies the configuration.
fn attach_to_agent_and_apply(library: &Library, tool: &str) -> quarry_core::Result<()> {
    let mut draft = library.orchestrator_draft(DEFAULT_CONFIG)?;
    for mode in draft.modes.iter_mut().filter(|m| m.name == "agent") {
        mode.direct_tools.push(tool.into());
    }
    library.set_orchestrator_draft(DEFAULT_CONFIG, &draft)?;
    library
        .apply_orchestrator(DEFAULT_CONFIG, &Principal::administrator())
        .map(|_| ())
}

#[test]
fn an_action_tool_that_returns_free_text_cannot_become_a_direct_evidence_tool() {
    let mut f = Fixture::new();
    f.add_collection(
        "notes",
        "internal",
        "",
        &[("pump.md", "The pump needs 4 bar.\n")],
    );
    f.reindex();
    let library = &f.library;
    let made_up = "from quarry import BaseModel, Field\n\n\nclass Inputs(BaseModel):\n    question: str = Field(..., min_length=1)\n\n\nclass Output(BaseModel):\n    answer: str\n\n\nasync def run(input, ctx):\n    return {\"answer\": \"99 bar, made up\"}\n";
    let tool = library
        .create_tool(code_tool("oracle", ToolType::Action, made_up))
        .unwrap();
    let problems = tool.direct_evidence_problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("returns no evidence_ref")),
        "{problems:?}"
    );
    // Every seeded action tool keeps the contract.
    for slug in [
        "search_documents",
        "fetch_source_document",
        "fetch_document_chunks",
        "fetch_neighbors",
        "context_expansion",
    ] {
        let seeded = library.tool(slug).unwrap();
        assert!(
            seeded.direct_evidence_problems().is_empty(),
            "{slug}: {:?}",
            seeded.direct_evidence_problems()
        );
    }

    let refused = attach_to_agent_and_apply(library, "oracle").unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("`oracle` cannot be a direct evidence tool"),
        "{refused}"
    );
    // A query tool is refused with its own reason.
    let problems = library
        .tool("expand_multi_query")
        .unwrap()
        .direct_evidence_problems();
    assert!(problems[0].contains("only action tools"), "{problems:?}");
}

#[test]
fn an_action_tool_declared_to_need_confirmation_is_never_a_direct_evidence_tool() {
    let f = Fixture::new();
    let library = &f.library;
    let mut asking = library.tool("fetch_neighbors").unwrap();
    asking.slug = "neighbors_asking".into();
    asking.requires_confirmation = true;
    let asking = library.create_tool(asking).unwrap();
    assert!(asking.requires_confirmation, "the declaration is stored");
    let problems = asking.direct_evidence_problems();
    assert_eq!(
        problems.len(),
        1,
        "otherwise it keeps the contract: {problems:?}"
    );
    assert!(problems[0].contains("confirmation"), "{problems:?}");

    let refused = attach_to_agent_and_apply(library, "neighbors_asking")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("`neighbors_asking` cannot be a direct evidence tool")
            && refused.contains("confirmation"),
        "{refused}"
    );
    // Declared otherwise, the same tool is accepted.
    let mut answering = library.tool("neighbors_asking").unwrap();
    answering.requires_confirmation = false;
    library.update_tool("neighbors_asking", answering).unwrap();
    library
        .apply_orchestrator(DEFAULT_CONFIG, &Principal::administrator())
        .unwrap();

    // Only an action tool can ask: a query tool runs inside a pipeline, with no one to ask.
    let mut query = library.tool("expand_multi_query").unwrap();
    query.slug = "asking_query".into();
    query.requires_confirmation = true;
    let refused = library.create_tool(query).unwrap_err().to_string();
    assert!(refused.contains("requires_confirmation"), "{refused}");
    assert!(library.tool("asking_query").is_err(), "nothing was created");
}
