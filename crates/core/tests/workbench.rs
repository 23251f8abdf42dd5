//! What the desktop workbench relies on, through the library's public API on real libraries
//! with a real Python worker: tool versions and restore, the live check that locates problems,
//! duplicating to another type, what saving a pipeline would change, and an evaluation that
//! reports progress, each query's scores, and stops when asked.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use quarry_core::cancel::Cancel;
use quarry_core::tools::ToolType;
use quarry_core::{run_evaluation, Error, EvalPlan, EvalProgress};
use serde_json::json;

use common::{code_tool, Fixture};

const QUERY_TOOL: &str = "from quarry import BaseModel, Field\n\n\nclass Settings(BaseModel):\n    boost: float = Field(1.5, gt=0, le=10)\n\n\nasync def run(input, ctx):\n    return {\"kind\": \"query_variants\", \"queries\": [{\"query\": input[\"query\"], \"weight\": ctx.settings[\"boost\"]}]}\n";

#[test]
fn every_save_is_a_version_and_an_old_one_can_be_restored() {
    let f = Fixture::new();
    let library = &f.library;
    let seeded = library.tools(None, None).unwrap();
    assert!(
        seeded.iter().all(|t| t.version == 1),
        "seeds start at version 1"
    );

    let tool = library
        .create_tool(code_tool("boost", ToolType::Query, QUERY_TOOL))
        .unwrap();
    let mut edited = tool.clone();
    edited.source = Some(QUERY_TOOL.replace("1.5", "2.5"));
    library.update_tool("boost", edited).unwrap();

    let versions = library.tool_versions("boost").unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        [2, 1]
    );
    let hash = |i: usize| {
        versions[i]
            .tool
            .derived
            .as_ref()
            .unwrap()
            .source_hash
            .clone()
    };
    assert_ne!(hash(0), hash(1));

    let restored = library.restore_tool_version("boost", 1).unwrap();
    assert_eq!(restored.source.as_deref(), Some(QUERY_TOOL));
    assert_eq!(library.tool_versions("boost").unwrap()[0].version, 3);
    let listed = library.tools(Some(ToolType::Query), Some("boost")).unwrap();
    assert_eq!(listed[0].version, 3);

    let missing = library.restore_tool_version("boost", 9).unwrap_err();
    assert!(missing.to_string().contains("no version 9"), "{missing}");
    // Deleting a tool takes its versions with it; nothing else is touched.
    library.delete_tool("boost").unwrap();
    assert!(matches!(
        library.tool_versions("boost"),
        Err(Error::ToolNotFound(_))
    ));
    assert_eq!(library.tool_versions("noop_chunk").unwrap().len(), 1);
}

#[test]
fn the_live_check_locates_problems_and_stores_nothing() {
    let f = Fixture::new();
    let library = &f.library;
    let broken = QUERY_TOOL.replace("async def run(input, ctx):", "async def run(input, ctx)");
    let check = library
        .check_tool(code_tool("draft", ToolType::Query, &broken))
        .unwrap();
    let problem = check.problem.expect("a syntax error");
    assert_eq!(
        (problem.field.as_str(), problem.line),
        ("source", Some(8)),
        "{problem:?}"
    );
    assert!(check.tool.is_none());

    let check = library
        .check_tool(code_tool("draft", ToolType::Query, QUERY_TOOL))
        .unwrap();
    assert!(check.problem.is_none(), "{:?}", check.problem);
    let derived = check.tool.unwrap().derived.unwrap();
    assert_eq!(
        derived.settings_schema["properties"]["boost"]["default"],
        1.5
    );
    assert!(
        matches!(library.tool("draft"), Err(Error::ToolNotFound(_))),
        "checking saves nothing"
    );

    // A retrieval setting out of range is reported at that setting.
    let mut retrieval = library.tool("retrieve-lexical-focused").unwrap();
    retrieval.settings["limit"] = json!(0);
    let problem = library.check_tool(retrieval).unwrap().problem.unwrap();
    assert_eq!(problem.field, "settings.limit");
    assert!(
        problem.message.contains("between 1 and 1000"),
        "{problem:?}"
    );
}

#[test]
fn a_tool_is_duplicated_as_another_code_type_but_settings_never_become_code() {
    let f = Fixture::new();
    let library = &f.library;
    let refused = library
        .duplicate_tool(
            "retrieve-lexical-focused",
            "lexical-as-query",
            None,
            Some(ToolType::Query),
        )
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("cannot be duplicated as a `query` tool"),
        "{refused}"
    );
    assert!(library.tool("lexical-as-query").is_err());

    let copy = library
        .duplicate_tool("noop_chunk", "noop-as-query", None, Some(ToolType::Query))
        .unwrap();
    assert_eq!(copy.tool_type, ToolType::Query);
    assert_eq!(copy.source, library.tool("noop_chunk").unwrap().source);

    // The code is derived again for its new type: what that type needs is asked for.
    let refused = library
        .duplicate_tool("noop_chunk", "noop-as-action", None, Some(ToolType::Action))
        .unwrap_err();
    assert!(refused.to_string().contains("class Inputs"), "{refused}");
}

#[test]
fn a_pipeline_lists_what_saving_would_change() {
    let f = Fixture::new();
    let library = &f.library;
    let view = library.pipeline("default").unwrap();
    assert!(view.changes.is_empty(), "{:?}", view.changes);
    assert!(!view.unsaved_changes);

    let mut draft = view.draft.clone();
    draft.budget.max_evidence = 7;
    library.edit_pipeline("default", &draft).unwrap();
    let mut tool = library.tool("retrieve-hybrid-coverage").unwrap();
    tool.settings["limit"] = json!(9);
    library
        .update_tool("retrieve-hybrid-coverage", tool)
        .unwrap();

    let view = library.pipeline("default").unwrap();
    let paths: Vec<&str> = view.changes.iter().map(|c| c.path.as_str()).collect();
    assert!(paths.contains(&"pipeline.budget.max_evidence"), "{paths:?}");
    assert!(
        paths.contains(&"tools.retrieve-hybrid-coverage.settings.limit"),
        "{paths:?}"
    );
    assert!(view.unsaved_changes);
}

/// A tiny BEIR-layout set: three documents, two judged queries.
fn tiny_set(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    std::fs::write(
        dir.join("corpus.jsonl"),
        "{\"_id\": \"d1\", \"title\": \"Lighthouse\", \"text\": \"The keeper trims the wick at dusk.\"}\n\
         {\"_id\": \"d2\", \"title\": \"Orchard\", \"text\": \"Apple trees need cross-pollination.\"}\n\
         {\"_id\": \"d3\", \"title\": \"Bread\", \"text\": \"Feed the sourdough starter twice a day.\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"keeper wick\"}\n{\"_id\": \"q2\", \"text\": \"sourdough starter\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("qrels/test.tsv"),
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n",
    )
    .unwrap();
}

#[test]
fn an_evaluation_reports_each_query_and_stops_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    tiny_set(dir.path());
    let plan = EvalPlan {
        set: dir.path().to_path_buf(),
        modes: vec!["lexical".into()],
        per_query: true,
        ..EvalPlan::default()
    };
    let scored = AtomicUsize::new(0);
    let report = run_evaluation(
        &plan,
        &|p| {
            if let EvalProgress::Scoring { done, total, .. } = p {
                assert!(done <= total);
                scored.fetch_add(1, Ordering::Relaxed);
            }
        },
        &Cancel::new(),
    )
    .unwrap();
    assert_eq!(scored.load(Ordering::Relaxed), 2);
    assert_eq!((report.documents, report.judged_queries), (3, 2));
    let row = &report.rows[0];
    assert_eq!(row.name, "lexical");
    assert_eq!(row.per_query.len(), 2);
    assert_eq!(row.ndcg_at_10, 1.0, "each query finds its document first");
    let mean = row.per_query.iter().map(|q| q.ndcg_at_10).sum::<f64>() / 2.0;
    assert_eq!(mean, row.ndcg_at_10);

    let cancel = Cancel::new();
    cancel.cancel();
    let stopped = run_evaluation(&plan, &|_| {}, &cancel).unwrap_err();
    assert!(matches!(stopped, Error::Cancelled), "{stopped}");

    let bad = EvalPlan {
        modes: vec!["fuzzy".into()],
        ..plan
    };
    assert!(run_evaluation(&bad, &|_| {}, &Cancel::new()).is_err());
}
