//! Pipeline runs and tool tests over a stub context: a real store in a temp dir, a stub
//! retrieval that returns canned hits and records what it was asked, no models, no Python,
//! no full-text index. The fixture serves `eval`'s tests too.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use super::run::{run_resolved, test_tool, RunOptions, TestInput};
use super::{Budget, PipelineDefinition, ResolvedPipeline};
use crate::auth::{Principal, Scope};
use crate::context::testing::StubEngine;
use crate::context::{EngineContext, Retrieval};
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::fulltext::Snippet;
use crate::ids::{ChunkId, DocumentId};
use crate::retrieve::{Hit, SearchMode, SearchRequest, SearchResults, StageScores};
use crate::store::test_support::{self, collection_with_source};
use crate::store::{ChunkLocation, NewChunk, Store};
use crate::tools::{self, ToolDefinition, ToolType};

/// Returns its hits for any request, and keeps every request.
pub(crate) struct StubRetrieval {
    pub hits: Vec<Hit>,
    pub requests: RefCell<Vec<SearchRequest>>,
}

impl Retrieval for StubRetrieval {
    fn search(&self, request: &SearchRequest) -> Result<SearchResults> {
        self.requests.borrow_mut().push(request.clone());
        Ok(SearchResults {
            hits: self.hits.clone(),
            took_us: 1,
            mode: request.settings.mode,
            trace: Vec::new(),
            readiness: Vec::new(),
            certainty: None,
        })
    }

    fn embedder(&self, model: &str) -> Result<Arc<Embedder>> {
        Err(Error::Internal(format!(
            "no embedder for {model} in a stub"
        )))
    }
}

/// A store with collections `notes` (internal) and `secret` (restricted), one document in
/// each: `/notes/note.md` has chunks "note 0" … "note 3", `/secret/secret.md` has "secret 0".
pub(crate) struct Fixture {
    pub stub: StubEngine,
    /// Chunk ids of `notes`, in document order.
    pub notes: Vec<ChunkId>,
    /// The chunk id of `secret`.
    pub secret: ChunkId,
}

impl Fixture {
    pub fn new() -> Fixture {
        let (mut notes, mut secret) = (Vec::new(), ChunkId(0));
        let stub = StubEngine::new(|store| {
            notes = write_document(store, "notes", "internal", "note", 4);
            secret = write_document(store, "secret", "restricted", "secret", 1)[0];
        });
        Fixture {
            stub,
            notes,
            secret,
        }
    }

    pub fn engine<'a>(&'a self, retrieval: &'a StubRetrieval) -> EngineContext<'a> {
        self.stub.engine(retrieval)
    }

    /// A retrieval that finds these chunks, best first, scored 1.0, 0.75, 0.5, …
    pub fn stub(&self, chunk_ids: &[ChunkId]) -> StubRetrieval {
        StubRetrieval {
            hits: chunk_ids
                .iter()
                .enumerate()
                .map(|(i, &id)| self.hit(i + 1, id, 1.0 - i as f32 * 0.25))
                .collect(),
            requests: RefCell::new(Vec::new()),
        }
    }

    /// A hit on a chunk, with the chunk's own path (`/gone.md` for one not in the store).
    fn hit(&self, rank: usize, chunk_id: ChunkId, score: f32) -> Hit {
        let chunk = self.stub.store.chunks_by_id(&[chunk_id]).unwrap().pop();
        Hit {
            rank,
            score,
            scores: StageScores::default(),
            chunk_id,
            document_id: chunk.as_ref().map_or(DocumentId(0), |c| c.document_id),
            path: chunk.map_or_else(|| PathBuf::from("/gone.md"), |c| c.path),
            title: None,
            collection: String::new(),
            heading_path: String::new(),
            location: ChunkLocation::default(),
            snippet: Snippet {
                text: format!("snippet of {chunk_id}"),
                highlights: Vec::new(),
            },
            mtime_ns: None,
            also_at: Vec::new(),
        }
    }
}

/// Writes one document of `chunks` chunks into a new collection; returns the chunk ids.
fn write_document(
    store: &mut Store,
    collection: &str,
    sensitivity: &str,
    word: &str,
    chunks: usize,
) -> Vec<ChunkId> {
    let root = PathBuf::from(format!("/{collection}"));
    let source = collection_with_source(store, collection, sensitivity, "test-model", &root);
    let chunks: Vec<NewChunk> = (0..chunks)
        .map(|i| NewChunk {
            text: format!("{word} {i}"),
            heading_path: String::new(),
            location: ChunkLocation::default(),
            token_count: 2,
            reader_span: None,
        })
        .collect();
    let path = root.join(format!("{word}.md"));
    test_support::write_document(store, &source, &path, word, 1, &chunks)
        .iter()
        .map(|c| c.id)
        .collect()
}

fn retrieval_tool(slug: &str) -> ToolDefinition {
    ToolDefinition {
        slug: slug.into(),
        name: slug.into(),
        description: String::new(),
        tool_type: ToolType::Retrieval,
        settings: json!({"mode": "lexical", "limit": 7, "max_per_document": 3}),
        limits: None,
        egress: None,
        model: None,
        requires_confirmation: false,
        source: None,
        derived: None,
    }
}

/// Retrieval `lex` over `collections`, admitting at most `max_evidence` chunks.
pub(crate) fn lexical_pipeline(collections: &[&str], max_evidence: usize) -> ResolvedPipeline {
    ResolvedPipeline {
        name: "lex".into(),
        version: None,
        pipeline: PipelineDefinition {
            retrieval: Some("lex".into()),
            collections: collections.iter().map(|c| c.to_string()).collect(),
            budget: Budget {
                max_query_variants: 4,
                max_evidence,
            },
            ..Default::default()
        },
        tools: [("lex".to_string(), retrieval_tool("lex"))].into(),
    }
}

#[test]
fn a_run_searches_as_configured_traces_each_stage_and_admits_within_the_budget() {
    let f = Fixture::new();
    let n = &f.notes;
    // Best first: chunk 3, a chunk that has left the index, then 1, 2, 0.
    let stub = f.stub(&[n[3], ChunkId(999_999), n[1], n[2], n[0]]);
    let run = run_resolved(
        &f.engine(&stub),
        &lexical_pipeline(&["notes"], 2),
        "  turbine  ",
        &Principal::administrator(),
        &RunOptions::default(),
    )
    .unwrap();

    let requests = stub.requests.borrow();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.query, "turbine");
    let variants: Vec<(&str, f32)> = request
        .variants
        .iter()
        .map(|v| (v.text.as_str(), v.weight))
        .collect();
    assert_eq!(variants, [("turbine", 1.0)]);
    assert_eq!(request.collections, ["notes"]);
    assert_eq!(request.settings.mode, SearchMode::Lexical);
    assert_eq!(request.settings.limit, 7);
    assert_eq!(request.settings.max_per_document, 3);
    assert_eq!(request.scope, Some(Scope::unrestricted()));

    let stages: Vec<(&str, Option<&str>)> = run
        .stages
        .iter()
        .map(|s| (s.stage, s.tool.as_deref()))
        .collect();
    assert_eq!(stages, [("retrieval", Some("lex")), ("evidence", None)]);
    // The vanished chunk is no candidate.
    assert_eq!(run.stages[0].detail, "4 candidate(s), lexical mode");
    assert_eq!(
        run.stages[1].detail,
        "2 chunk(s) admitted to the ledger (budget 2), 0 reference(s) refused"
    );

    let admitted: Vec<(ChunkId, &str, Option<f32>, &str)> = run
        .evidence
        .entries
        .iter()
        .map(|e| (e.chunk_id, e.text.as_str(), e.score, e.admitted_by.as_str()))
        .collect();
    assert_eq!(
        admitted,
        [
            (n[3], "note 3", Some(1.0), "pipeline"),
            (n[1], "note 1", Some(0.5), "pipeline"),
        ]
    );
    assert!(run.evidence.rejected.is_empty());
    assert_eq!(run.query, "turbine");
    assert_eq!(run.principal, "administrator");
}

#[test]
fn a_blocking_problem_stops_the_run_before_it_searches() {
    let f = Fixture::new();
    let stub = f.stub(&f.notes);
    let err = run_resolved(
        &f.engine(&stub),
        &lexical_pipeline(&["nowhere"], 5),
        "turbine",
        &Principal::administrator(),
        &RunOptions::default(),
    )
    .unwrap_err();
    match err {
        Error::PipelineNotReady { pipeline, problems } => {
            assert_eq!(pipeline, "lex");
            assert_eq!(
                problems,
                ["the pipeline searches collection `nowhere`, which does not exist"]
            );
        }
        other => panic!("expected pipeline_not_ready, got {other:?}"),
    }
    assert!(stub.requests.borrow().is_empty());
}

#[test]
fn the_tool_tester_lists_refused_references_with_their_reason() {
    let f = Fixture::new();
    tools::create(
        &f.stub.store,
        &f.stub.executor,
        retrieval_tool("lex"),
        tools::SaveOptions::default(),
    )
    .unwrap();
    // The stub ignores scopes, as a retrieval bug would: the tester must still refuse what
    // the caller may not read, and say so.
    let stub = f.stub(&[f.notes[0], f.secret, f.notes[2]]);
    let mut reader = Principal::administrator();
    reader.id = "key:reader".into();
    reader.label = "reader".into();
    reader.scope = Scope {
        collections: Some(vec!["notes".into()]),
        sensitivity_ceiling: "internal".into(),
    };
    let report = test_tool(
        &f.engine(&stub),
        "lex",
        &TestInput::Query("turbine".into()),
        &reader,
        None,
        None,
    )
    .unwrap();

    assert_eq!(report.principal, "reader");
    assert_eq!(report.pipeline, None);
    assert_eq!(report.output["candidates"].as_array().unwrap().len(), 3);
    let admitted: Vec<ChunkId> = report.evidence.entries.iter().map(|e| e.chunk_id).collect();
    assert_eq!(admitted, [f.notes[0], f.notes[2]]);
    let refused: Vec<(&str, &str)> = report
        .evidence
        .rejected
        .iter()
        .map(|r| (r.returned_by.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        refused,
        [(
            "lex",
            "evidence reference rejected: the caller may not read that collection"
        )]
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["evidence"]["rejected"][0]["reason"],
        "evidence reference rejected: the caller may not read that collection"
    );
}
