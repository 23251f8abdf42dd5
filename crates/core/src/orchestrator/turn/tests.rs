//! The turn over a stub context: a real [`Store`] in a temporary directory, a [`Retrieval`]
//! that embeds every query as the same canned vector, and a scripted backend, so admission,
//! the prompt and citation resolution are checked without models, Python or a full-text index.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::*;
use crate::context::testing::StubEngine;
use crate::context::Retrieval;
use crate::embed::Embedder;
use crate::ids::ChunkId;
use crate::llm::{BackendInfo, ChatRequest, ChatResponse, StreamEvent};
use crate::orchestrator::config::{OrchestratorConfig, DEFAULT_CONFIG};
use crate::orchestrator::{conversation, revisions};
use crate::retrieve::{SearchRequest, SearchResults};
use crate::store::test_support::{collection_with_source, write_document};
use crate::store::{now_unix, ChunkLocation, NewChunk, Store};
use crate::{Error, Principal};

const MODEL: &str = "stub-embedder";
const FERNS: &str = "Ferns reproduce by spores, not seeds.";
const PUMP: &str = "The XR-200 pump needs an inlet pressure of 4 bar.";

/// Every query embeds as `[1, 0, 0, 0]`; nothing else is offered.
struct CannedRetrieval;

impl Retrieval for CannedRetrieval {
    fn search(&self, _: &SearchRequest) -> Result<SearchResults> {
        Err(Error::Internal("the stub has no full-text index".into()))
    }

    fn embedder(&self, model: &str) -> Result<Arc<Embedder>> {
        Err(Error::Internal(format!(
            "the stub loads no model ({model})"
        )))
    }

    fn embed_query(&self, model: &str, _query: &str) -> Result<Arc<[f32]>> {
        assert_eq!(
            model, MODEL,
            "the query is embedded with the collection's model"
        );
        Ok(Arc::from(vec![1.0, 0.0, 0.0, 0.0]))
    }
}

/// The knowledge mode runs no pipeline.
struct NoPipelines;

impl PipelineCalls for NoPipelines {
    fn run_pipeline(
        &self,
        _: &ResolvedPipeline,
        _: &str,
        _: &Principal,
        _: &RunOptions,
    ) -> Result<PipelineRun> {
        panic!("the knowledge mode runs no pipeline")
    }

    fn call_action(
        &self,
        _: &ToolDefinition,
        _: &Value,
        _: &Principal,
        _: Option<&ResolvedPipeline>,
        _: &str,
    ) -> Result<ActionCall> {
        panic!("the knowledge mode has no direct tools")
    }
}

/// Answers every request with the same text, and keeps the requests.
struct ScriptedBackend {
    answer: String,
    requests: Mutex<Vec<ChatRequest>>,
    /// `stop`, or `length` for a draft the length limit cut.
    finish_reason: &'static str,
}

impl ScriptedBackend {
    /// A backend that always answers `answer`, ending for `finish_reason`.
    fn answering(answer: &str, finish_reason: &'static str) -> Arc<ScriptedBackend> {
        Arc::new(ScriptedBackend {
            answer: answer.into(),
            requests: Mutex::new(Vec::new()),
            finish_reason,
        })
    }
}

impl ChatBackend for ScriptedBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "scripted",
            model: "canned".into(),
            location: "memory".into(),
            supports_tools: false,
            supports_grammar: false,
            device: None,
        }
    }

    fn chat(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<ChatResponse> {
        self.requests.lock().unwrap().push(request.clone());
        on_event(StreamEvent::Token(&self.answer));
        Ok(ChatResponse {
            content: self.answer.clone(),
            finish_reason: self.finish_reason.into(),
            ..ChatResponse::default()
        })
    }
}

/// A store with one collection embedded by [`MODEL`]: `ferns.md` (vector `[1, 0, 0, 0]`)
/// and `pump.md` (`[0, 1, 0, 0]`), and a `default` configuration whose only mode is the
/// seeded `knowledge` mode. Returns the chunk ids, ferns first.
fn seed(store: &mut Store) -> Vec<ChunkId> {
    let source = collection_with_source(store, "notes", "internal", MODEL, Path::new("/docs"));
    let mut chunk_ids = Vec::new();
    for (file, title, text) in [
        ("/docs/ferns.md", "Ferns", FERNS),
        ("/docs/pump.md", "Pump", PUMP),
    ] {
        let chunk = NewChunk {
            text: text.into(),
            heading_path: title.into(),
            location: ChunkLocation {
                line_start: Some(1),
                line_end: Some(1),
                ..ChunkLocation::default()
            },
            token_count: 10,
            reader_span: None,
        };
        let written = write_document(
            store,
            &source,
            Path::new(file),
            title,
            text.len() as i64,
            &[chunk],
        );
        chunk_ids.push(written[0].id);
    }
    let table = store.ensure_vector_table(MODEL, 4).unwrap();
    let vectors = vec![
        (chunk_ids[0], vec![1.0, 0.0, 0.0, 0.0]),
        (chunk_ids[1], vec![0.0, 1.0, 0.0, 0.0]),
    ];
    store
        .store_vectors(&table, source.collection_id, &vectors, &[], chunk_ids[1])
        .unwrap();

    let mut config = OrchestratorConfig::seed();
    config.modes.retain(|m| m.name == "knowledge");
    config.default_mode = "knowledge".into();
    store
        .insert_orchestrator_config_if_absent(DEFAULT_CONFIG, &config.to_json(), now_unix())
        .unwrap();
    revisions::apply(store, DEFAULT_CONFIG, "test").unwrap();
    chunk_ids
}

/// The seeded stub engine, answering through [`CannedRetrieval`].
struct Stub {
    engine: StubEngine,
    chunk_ids: Vec<ChunkId>,
}

impl Stub {
    fn new() -> Stub {
        let mut chunk_ids = Vec::new();
        let engine = StubEngine::new(|store| chunk_ids = seed(store));
        Stub { engine, chunk_ids }
    }

    fn ctx(&self) -> EngineContext<'_> {
        self.engine.engine(&CannedRetrieval)
    }
}

/// The turn said the documents do not answer.
fn assert_refused(result: &TurnResult) {
    assert!(
        result
            .answer
            .starts_with(crate::orchestrator::NOT_IN_EVIDENCE),
        "{}",
        result.answer
    );
}

/// The detail of the first `kind` event of the turn's trace.
fn traced<'r>(result: &'r TurnResult, kind: &str) -> &'r serde_json::Value {
    &result
        .trace
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in the trace"))
        .detail
}

/// The administrator's turn on "How do ferns reproduce?", the backend opened by `open`.
fn ask_about_ferns(
    ctx: &EngineContext<'_>,
    open: &OpenBackend<'_>,
    on_event: &mut dyn FnMut(TurnEvent<'_>),
) -> TurnResult {
    let options = ChatOptions::new(Principal::administrator());
    run(
        ctx,
        &NoPipelines,
        "How do ferns reproduce?",
        &options,
        open,
        on_event,
    )
    .unwrap()
}

#[test]
fn knowledge_search_results_are_admitted_as_evidence_shown_to_the_model_and_cited() {
    let stub = Stub::new();
    let (ctx, chunk_ids) = (stub.ctx(), &stub.chunk_ids);
    let backend =
        ScriptedBackend::answering("Ferns reproduce by spores [1]. Pumps are loud [7].", "stop");
    let scripted: Arc<dyn ChatBackend> = backend.clone();
    let open = |_: &BackendConfig| Ok(Some(scripted.clone()));
    let mut tokens = String::new();
    let mut on_event = |e: TurnEvent<'_>| {
        if let TurnEvent::Token(t) = e {
            tokens.push_str(t);
        }
    };

    let result = ask_about_ferns(&ctx, &open, &mut on_event);

    // knowledge_search ran first, and admitted both passages, nearest first.
    assert_eq!(result.mode, "knowledge");
    assert_eq!(result.backend, "scripted canned");
    let admitted: Vec<(i64, ChunkId, &str, &str)> = result
        .evidence
        .iter()
        .map(|i| (i.n, i.chunk_id, i.text.as_str(), i.admitted_by.as_str()))
        .collect();
    assert_eq!(
        admitted,
        vec![
            (1, chunk_ids[0], FERNS, "knowledge_search"),
            (2, chunk_ids[1], PUMP, "knowledge_search"),
        ]
    );
    let tool_result = traced(&result, "tool.result");
    assert_eq!(tool_result["tool"], "knowledge_search");
    assert_eq!(tool_result["by"], "orchestrator");
    assert_eq!(tool_result["admitted"], serde_json::json!([1, 2]));
    assert_eq!(tool_result["is_error"], false);

    // The model was shown the sentences that answer, numbered as in the ledger; the pump's
    // sentence shares no word with the question, so the selection left it out, and says so.
    let requests = backend.requests.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let prompt = &requests[0].messages.last().unwrap().content;
    assert!(prompt.contains(&format!("[1] {FERNS}")), "{prompt}");
    assert!(!prompt.contains(PUMP), "{prompt}");
    let selected = traced(&result, "evidence.selected");
    assert_eq!(selected["passages"], serde_json::json!([1]));
    assert_eq!(selected["considered"], 2);
    assert_eq!(selected["shown"][0]["text"], FERNS);
    assert_eq!(selected["support"]["answers"], true);
    // What the model wrote before the check is in the trace.
    let checked = traced(&result, "answer.checked");
    assert_eq!(
        checked["draft"],
        "Ferns reproduce by spores [1]. Pumps are loud [7]."
    );

    // [1] resolves to the ferns passage; [7] is in no ledger, so it is removed and recorded.
    assert_eq!(tokens, "Ferns reproduce by spores [1]. Pumps are loud [7].");
    assert_eq!(
        result.answer,
        "Ferns reproduce by spores [1]. Pumps are loud ."
    );
    assert_eq!(result.citations.len(), 1);
    let citation = &result.citations[0];
    assert_eq!(
        (citation.n, citation.chunk_id, citation.snippet.as_str()),
        (1, chunk_ids[0], FERNS)
    );
    assert_eq!(citation.path, Path::new("/docs/ferns.md"));
    assert_eq!(citation.locator, "/docs/ferns.md lines 1-1");
    let rejected = traced(&result, "citation.rejected");
    assert_eq!(rejected["citations"], serde_json::json!(["7"]));

    // Persisted: the question, and the answer with its citations.
    let messages = conversation::messages_of(ctx.store, &result.conversation).unwrap();
    let stored: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(
        stored,
        vec![
            ("user", "How do ferns reproduce?"),
            ("assistant", result.answer.as_str()),
        ]
    );
    assert_eq!(
        messages[1].citations.as_ref().unwrap()[0]["chunk_id"],
        chunk_ids[0].0
    );
}

#[test]
fn an_unopenable_backend_falls_back_to_the_extractive_answer_from_the_same_evidence() {
    let stub = Stub::new();
    let (ctx, chunk_ids) = (stub.ctx(), &stub.chunk_ids);
    let open = |_: &BackendConfig| -> Result<Option<Arc<dyn ChatBackend>>> {
        Err(Error::LlmUnavailable("no model here".into()))
    };

    let result = ask_about_ferns(&ctx, &open, &mut |_| {});

    assert_eq!(result.backend, "extractive");
    assert_eq!(result.notices.len(), 1, "{:?}", result.notices);
    assert!(
        result.notices[0].contains("is not available"),
        "{:?}",
        result.notices
    );
    assert_eq!(result.citations[0].chunk_id, chunk_ids[0]);
    assert!(result.answer.contains("[1]"), "{}", result.answer);
}

#[test]
fn an_outside_agents_calls_are_turns_of_its_session_with_references_and_a_trace() {
    let stub = Stub::new();
    let (ctx, chunk_ids) = (stub.ctx(), &stub.chunk_ids);
    let admin = Principal::administrator();
    let session = start_agent_session(&ctx, &admin, None, "knowledge", "unit-client").unwrap();
    let offered: Vec<String> = agent_tools(&ctx, &NoPipelines, &admin, &session.id)
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(offered, ["knowledge_search"]);

    let call = |arguments: Value| {
        agent_call(
            &ctx,
            &NoPipelines,
            &admin,
            &session.id,
            "unit-client",
            "knowledge_search",
            &arguments,
        )
        .unwrap()
    };
    let found = call(serde_json::json!({"query": "ferns"}));
    assert!(!found.is_error, "{}", found.text);
    let admitted: Vec<ChunkId> = found.admitted.iter().map(|i| i.chunk_id).collect();
    assert_eq!(admitted, [chunk_ids[0], chunk_ids[1]]);
    // Each result carries the references of the passage admitted for it.
    let output: Value = serde_json::from_str(&found.text).unwrap();
    for (result, item) in output["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&found.admitted)
    {
        assert_eq!(result["content"], item.text.as_str());
        assert_eq!(result["evidence_ref"], item.evidence_ref.as_str());
        assert_eq!(result["sourceRef"], item.source_ref.as_str());
        assert!(
            result.get("source_ref").is_none(),
            "the manual's spelling only"
        );
    }

    let empty = call(serde_json::json!({"query": "   "}));
    assert!(empty.is_error);
    assert_eq!(empty.text, r#"Error: "query argument required""#);
    let unknown = agent_call(
        &ctx,
        &NoPipelines,
        &admin,
        &session.id,
        "unit-client",
        "fetch_everything",
        &serde_json::json!({}),
    )
    .unwrap();
    assert!(unknown.is_error && unknown.text.contains("no tool `fetch_everything`"));

    // One call, one turn: the call as the question, what the client read as the reply.
    let messages = conversation::messages_of(ctx.store, &session.id).unwrap();
    let turns: Vec<(i64, &str)> = messages.iter().map(|m| (m.turn, m.role.as_str())).collect();
    assert_eq!(
        turns,
        [
            (1, "user"),
            (1, "assistant"),
            (2, "user"),
            (2, "assistant"),
            (3, "user"),
            (3, "assistant")
        ]
    );
    assert_eq!(messages[1].content, found.text);
    let trace = conversation::trace_of(ctx.store, &session.id, Some(1)).unwrap();
    let start = trace.iter().find(|e| e.kind == "turn.start").unwrap();
    assert_eq!(start.detail["client"], "unit-client");
    assert_eq!(start.detail["via"], "mcp");
    let result = trace.iter().find(|e| e.kind == "tool.result").unwrap();
    assert_eq!(result.detail["by"], "mcp");

    // Cited documents are readable whole, within the caller's scope only.
    let cited = cited_documents(&ctx, &admin, &session.id).unwrap();
    assert_eq!(cited.len(), 2);
    let ferns = read_document(&ctx, &admin, &session.id, cited[0].document_id).unwrap();
    assert_eq!(ferns.text, FERNS);
    let outsider = Principal {
        kind: crate::auth::PrincipalKind::Personal,
        id: "key:9".into(),
        label: "outsider".into(),
        scope: crate::Scope {
            collections: Some(vec!["elsewhere".into()]),
            sensitivity_ceiling: "internal".into(),
        },
    };
    let theirs = start_agent_session(&ctx, &outsider, None, "knowledge", "x").unwrap();
    let refused = read_document(&ctx, &outsider, &theirs.id, cited[0].document_id).unwrap_err();
    assert_eq!(refused.code(), "document_not_found");
    // Another caller's session is not theirs to use.
    let foreign = agent_tools(&ctx, &NoPipelines, &outsider, &session.id).unwrap_err();
    assert_eq!(foreign.code(), "conversation_not_found");
}

#[test]
fn evidence_that_does_not_hold_the_questions_words_is_refused_before_the_model_runs() {
    let stub = Stub::new();
    let ctx = stub.ctx();
    let backend = ScriptedBackend::answering("Ethanol boils at 78 degrees [1].", "stop");
    let scripted: Arc<dyn ChatBackend> = backend.clone();
    let open = |_: &BackendConfig| Ok(Some(scripted.clone()));
    let options = ChatOptions::new(Principal::administrator());
    let result = run(
        &ctx,
        &NoPipelines,
        "What is the boiling point of ethanol at sea level?",
        &options,
        &open,
        &mut |_| {},
    )
    .unwrap();

    // The model never ran: the refusal names what no passage mentions, and offers the
    // closest passages as "see also".
    assert!(backend.requests.lock().unwrap().is_empty());
    assert_refused(&result);
    assert!(result.answer.contains("“ethanol”"), "{}", result.answer);
    assert_eq!(result.basis, "not in your documents");
    assert!(!result.citations.is_empty());
    let refused = traced(&result, "answer.refused");
    assert_eq!(
        refused["missing"],
        serde_json::json!(["boiling", "point", "ethanol", "sea", "level"])
    );
}

#[test]
fn a_draft_the_check_empties_becomes_a_refusal_with_the_reason_when_nothing_is_quotable() {
    let stub = Stub::new();
    let ctx = stub.ctx();
    // The stub has no embedder: nothing is close enough in meaning to quote.
    let scripted: Arc<dyn ChatBackend> =
        ScriptedBackend::answering("Ferns reproduce by the FERN_SEED_42 protocol [1].", "stop");
    let open = |_: &BackendConfig| Ok(Some(scripted.clone()));
    let result = ask_about_ferns(&ctx, &open, &mut |_| {});
    assert_refused(&result);
    let checked = traced(&result, "answer.checked");
    assert_eq!(
        checked["changes"][0]["reason"],
        "`FERN_SEED_42` in no passage shown"
    );
    assert!(result
        .notices
        .iter()
        .any(|n| n.contains("FERN_SEED_42") && n.contains("in no passage shown")));
}

#[test]
fn a_draft_cut_by_the_length_limit_before_any_citation_is_not_an_answer() {
    let stub = Stub::new();
    let ctx = stub.ctx();
    // A backend that runs on until the length limit without citing anything.
    let rambling: Arc<dyn ChatBackend> = ScriptedBackend::answering(
        "Evidence: 12345678901234567890123456789012345678901234567890",
        "length",
    );
    let open = |_: &BackendConfig| Ok(Some(rambling.clone()));
    let result = ask_about_ferns(&ctx, &open, &mut |_| {});
    // No embedder in the stub, so nothing is quotable: the turn refuses, and says why.
    assert_refused(&result);
    let refused = traced(&result, "answer.refused");
    assert!(refused["reason"]
        .as_str()
        .unwrap()
        .starts_with("the model's answer ran to the length limit"));
}

#[test]
fn a_draft_that_only_restates_a_question_asking_for_a_name_quotes_the_sentence_naming_it() {
    let stub = Stub::new();
    let ctx = stub.ctx();
    let question = "Which inlet pressure does the pump need?";
    let scripted: Arc<dyn ChatBackend> =
        ScriptedBackend::answering("The pump needs an inlet pressure. [2]", "stop");
    let open = |_: &BackendConfig| Ok(Some(scripted.clone()));
    let options = ChatOptions::new(Principal::administrator());
    let result = run(&ctx, &NoPipelines, question, &options, &open, &mut |_| {}).unwrap();
    assert!(result.answer.contains(PUMP), "{}", result.answer);
    let checked = traced(&result, "answer.checked");
    assert_eq!(
        checked["changes"][0]["reason"],
        "it only restates the question"
    );
    assert_eq!(
        traced(&result, "answer.quoted")["chosen"],
        "the sentence naming what the question asks for"
    );
    // A draft that makes up a name is not rescued by a sentence naming another: with nothing
    // close enough in meaning to quote (the stub has no embedder), the turn refuses.
    let inventing: Arc<dyn ChatBackend> =
        ScriptedBackend::answering("The pump needs an inlet pressure of 9 bar. [2]", "stop");
    let open = |_: &BackendConfig| Ok(Some(inventing.clone()));
    let result = run(&ctx, &NoPipelines, question, &options, &open, &mut |_| {}).unwrap();
    assert_refused(&result);
}
