//! The assistant with real parts: the real SmolLM2 GGUF run by llama.cpp in-process, a real
//! library (SQLite, tantivy, MiniLM vectors), real code tools in the sandbox; and, for the
//! model-led path, scripted tool calls replayed by a loopback OpenAI-compatible server, so a
//! model's forged, expired or cross-conversation references can be aimed at the host.

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quarry_core::audit::AuditQuery;
use quarry_core::evidence::EvidenceSession;
use quarry_core::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use quarry_core::llm::{ChatBackend, ChatMessage, ChatRequest, ToolSpec};
use quarry_core::models::Models;
use quarry_core::orchestrator::{
    self, BackendConfig, ChatOptions, OrchestratorConfig, ToolChoice, TurnResult, DEFAULT_CONFIG,
};
use quarry_core::{Library, Principal, RunOptions};
use serde_json::{json, Value};

use common::{http, Fixture};

const PUMP: &str = "# XR-200 pump\n\nThe XR-200 pump needs an inlet pressure of 4 bar. \
Service the XR-200 pump every 600 hours and replace its seals yearly.\n";
const CACHE: &str =
    "# Caches\n\nAn LRU cache evicts the least recently used entry when it is full. \
Each read moves an entry to the front of the list.\n";
const FERNS: &str = "# Ferns\n\nFerns reproduce by spores, not seeds. \
The spores grow on the underside of the fronds.\n";

/// One collection `notes` of three short notes, indexed and embedded.
fn fixture() -> Fixture {
    let mut f = Fixture::new();
    f.add_collection(
        "notes",
        "internal",
        "",
        &[("pump.md", PUMP), ("cache.md", CACHE), ("ferns.md", FERNS)],
    );
    f.reindex();
    f.embed();
    f
}

/// The small chat model the tests load themselves (the default, which answers the seeded
/// configuration's modes, is bigger and slower).
const SMALL_MODEL: &str = "smollm2-135m-instruct-q4_1";

fn smollm2() -> Arc<EmbeddedBackend> {
    let models = Models::discover(std::path::Path::new("/nonexistent"));
    let config = EmbeddedConfig::installed(&models, SMALL_MODEL)
        .unwrap_or_else(|e| panic!("the SmolLM2 model is needed (run scripts/provision.sh): {e}"));
    EmbeddedBackend::shared(config).unwrap()
}

#[test]
fn the_system_prompt_is_evaluated_once_and_reused_with_the_same_answers() {
    let models = Models::discover(std::path::Path::new("/nonexistent"));
    let config = EmbeddedConfig::installed(&models, SMALL_MODEL).unwrap();
    // Backends of their own, so no other test's requests share their cache.
    let cached = EmbeddedBackend::load(config.clone()).unwrap();
    let fresh = EmbeddedBackend::load(config).unwrap();
    let system = "You answer questions about the user's notes. Use only the evidence you are \
                  given, keep answers short, and cite the passage each sentence comes from.";
    let request = |system: &str, question: &str| {
        let mut r = ChatRequest::new(vec![
            ChatMessage::system(system),
            ChatMessage::user(question),
        ]);
        r.max_tokens = 24;
        r
    };
    let first = cached
        .chat(&request(system, "What do ferns grow from?"), &mut |_| {})
        .unwrap();
    assert_eq!(first.usage.cached_prompt_tokens, 0);
    // The prompt on every core (all but one while another test's embedding lane runs beside
    // this one), generation on all but one.
    let threads = first.threads.expect("an embedded backend says its threads");
    assert_eq!(threads.generation, quarry_core::cores::all_but_one());
    assert!(
        threads.prompt == quarry_core::cores::all()
            || threads.prompt == quarry_core::cores::all_but_one(),
        "{threads:?}"
    );
    let second_request = request(system, "How often is the pump serviced?");
    let second = cached.chat(&second_request, &mut |_| {}).unwrap();
    assert!(
        second.usage.cached_prompt_tokens >= 16
            && second.usage.cached_prompt_tokens < second.usage.prompt_tokens,
        "{:?}",
        second.usage
    );
    // Greedy decoding from the restored state writes what a cold start writes.
    let cold = fresh.chat(&second_request, &mut |_| {}).unwrap();
    assert_eq!(cold.usage.cached_prompt_tokens, 0);
    assert_eq!(second.content, cold.content);
    // Another system prompt is evaluated in full.
    let other = cached
        .chat(
            &request(
                "You are terse. Answer in one word, never more, whatever is asked of you.",
                "Hi?",
            ),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(other.usage.cached_prompt_tokens, 0);
}

/// Every citation of a turn is an entry of its conversation's ledger, with the same passage.
#[test]
fn a_newer_request_to_judge_relevance_cuts_the_one_before_short() {
    let models = Models::discover(std::path::Path::new("/nonexistent"));
    let config = EmbeddedConfig::installed(&models, SMALL_MODEL).unwrap();
    let model = Arc::new(EmbeddedBackend::load(config).unwrap());
    // Many long passages with no time budget: seconds of work for the first request.
    let long: Vec<String> = (0..60)
        .map(|i| format!("Passage {i}. {}", PUMP.repeat(3)))
        .collect();
    let count = long.len();
    let first = {
        let model = Arc::clone(&model);
        std::thread::spawn(move || {
            model
                .judge_relevance("how do I prime the pump", &long, 128, Duration::MAX)
                .unwrap()
        })
    };
    // The user searches again while the first is judging (it holds the model by now).
    std::thread::sleep(Duration::from_millis(500));
    let passages = vec![PUMP.to_string(), FERNS.to_string()];
    let newer = model
        .judge_relevance("how do I prime the pump", &passages, 128, Duration::MAX)
        .unwrap();
    let first = first.join().unwrap();
    assert!(first.superseded, "{first:?}");
    let judged = first.scores.iter().filter(|s| s.is_some()).count();
    assert!(judged < count, "{judged} of {count}");
    assert!(
        first.scores[judged..].iter().all(Option::is_none),
        "{first:?}"
    );
    assert!(!newer.superseded);
    assert!(newer.scores.iter().all(Option::is_some), "{newer:?}");
}

fn assert_citations_resolve(library: &Library, result: &TurnResult) {
    let ledger = library
        .conversation_evidence(&Principal::administrator(), &result.conversation)
        .unwrap();
    for c in &result.citations {
        let item = ledger
            .iter()
            .find(|i| i.n == c.n)
            .unwrap_or_else(|| panic!("citation [{}] is not in the ledger", c.n));
        assert_eq!(item.chunk_id, c.chunk_id);
        assert!(item.text.starts_with(&c.snippet));
        assert!(
            result.answer.contains(&format!("[{}]", c.n)),
            "{}",
            result.answer
        );
    }
    // No marker in the text points anywhere else.
    let marker = regex::Regex::new(r"\[(\d+)\]").unwrap();
    for caps in marker.captures_iter(&result.answer) {
        let n: i64 = caps[1].parse().unwrap();
        assert!(
            result.citations.iter().any(|c| c.n == n),
            "[{n}] unresolved"
        );
    }
}

fn events<'a>(result: &'a TurnResult, kind: &str) -> Vec<&'a Value> {
    result
        .trace
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| &e.detail)
        .collect()
}

#[test]
fn the_embedded_model_answers_from_retrieved_evidence_with_resolving_citations() {
    let f = fixture();
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("grounded".into());
    let mut streamed = String::new();
    let result = f
        .library
        .chat(
            "What inlet pressure does the XR-200 pump need?",
            &options,
            &mut |e| {
                if let orchestrator::TurnEvent::Token(t) = e {
                    streamed.push_str(t);
                }
            },
        )
        .unwrap();
    // Retrieval came first, run by the orchestrator, and admitted evidence.
    let invokes = events(&result, "tool.invoke");
    assert_eq!(invokes[0]["tool"], "run_pipeline");
    assert_eq!(invokes[0]["by"], "orchestrator");
    let results = events(&result, "tool.result");
    assert!(!results[0]["admitted"].as_array().unwrap().is_empty());
    assert!(results[0]["took_ms"].is_u64());
    // The model wrote the answer under the citation grammar, and it streamed.
    let generate = events(&result, "llm.generate");
    assert_eq!(generate.len(), 1);
    assert_eq!(generate[0]["constrained"], true);
    assert!(generate[0]["completion_tokens"].as_u64().unwrap() > 0);
    // The seeded mode's `auto`: the default, unless this machine measured a better one.
    let auto = quarry_core::llm::speed::choose(f.library.models()).model;
    assert_eq!(result.backend, format!("embedded {auto}"));
    assert!(!result.answer.is_empty());
    assert!(!streamed.is_empty());
    assert!(!result.citations.is_empty(), "{}", result.answer);
    assert_citations_resolve(&f.library, &result);
    // The pump document was retrieved and is in the ledger.
    let ledger = f
        .library
        .conversation_evidence(&Principal::administrator(), &result.conversation)
        .unwrap();
    assert!(ledger.iter().any(|i| i.text.contains("4 bar")));
    // Persisted: both messages, the citations with the answer, the trace.
    let messages = f
        .library
        .conversation_messages(&Principal::administrator(), &result.conversation)
        .unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].content, result.answer);
    assert!(messages[1].citations.is_some());

    // A second turn continues the conversation: same revision, evidence numbers kept.
    let mut next = options.clone();
    next.conversation = Some(result.conversation.clone());
    let second = f
        .library
        .chat("How often is it serviced?", &next, &mut |_| {})
        .unwrap();
    assert_eq!(second.turn, 2);
    assert_eq!(second.revision, result.revision);
    assert_citations_resolve(&f.library, &second);
    let after = f
        .library
        .conversation_evidence(&Principal::administrator(), &result.conversation)
        .unwrap();
    for item in &ledger {
        assert_eq!(
            after.iter().find(|i| i.n == item.n).unwrap().chunk_id,
            item.chunk_id
        );
    }
}

#[test]
fn grammar_constrained_tool_calls_parse_and_fit_their_schemas() {
    let backend = smollm2();
    let tools = vec![
        ToolSpec {
            name: "knowledge_search".into(),
            description: "Search the knowledge base.".into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "minLength": 1},
                "namespaces": {"type": "array", "items": {"type": "string", "enum": ["notes", "manuals"]}},
            }, "required": ["query"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "fetch_neighbors".into(),
            description: "Fetch chunks around an evidence reference.".into(),
            parameters: json!({"type": "object", "properties": {
                "evidence_ref": {"type": "string", "minLength": 1, "maxLength": 120},
                "radius": {"type": "integer", "minimum": 1, "maximum": 4},
            }, "required": ["evidence_ref", "radius"], "additionalProperties": false}),
        },
    ];
    for question in [
        "Find what my notes say about the XR-200 pump.",
        "Search for ferns and spores.",
        "Get the chunks next to reference qe1.abc, two on each side.",
    ] {
        let mut request = ChatRequest::new(vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user(question),
        ]);
        request.tools = tools.clone();
        request.require_tool = true;
        request.max_tokens = 200;
        let response = backend.chat(&request, &mut |_| {}).unwrap();
        assert_eq!(response.tool_calls.len(), 1, "{question}: {response:?}");
        let call = &response.tool_calls[0];
        let spec = tools
            .iter()
            .find(|t| t.name == call.name)
            .unwrap_or_else(|| panic!("unknown tool {}", call.name));
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| {
            panic!(
                "{question}: arguments are not JSON: {e}: {}",
                call.arguments
            )
        });
        quarry_core::tools::schema::validate(&arguments, &spec.parameters)
            .unwrap_or_else(|e| panic!("{question}: {e}: {arguments}"));
        assert_eq!(response.finish_reason, "tool_calls");
    }
}

#[test]
fn without_a_model_the_answer_is_extractive_and_still_cited() {
    let f = fixture();
    let mut options = ChatOptions::new(Principal::administrator());
    options.backend = Some(BackendConfig::Embedded {
        model: "/nonexistent/model.gguf".into(),
        threads: None,
    });
    let result = f
        .library
        .chat("How do ferns reproduce?", &options, &mut |_| {})
        .unwrap();
    assert_eq!(result.backend, "extractive");
    assert!(
        result.notices[0].contains("not available"),
        "{:?}",
        result.notices
    );
    assert!(result.answer.starts_with("From your library:"));
    assert!(
        result.answer.contains("**Ferns** **reproduce** by spores"),
        "{}",
        result.answer
    );
    // Passages sharing no word with the question are left out.
    assert!(!result.answer.contains("Caches"), "{}", result.answer);
    assert!(!result.citations.is_empty());
    assert_citations_resolve(&f.library, &result);
    assert!(events(&result, "llm.generate").is_empty());
}

#[test]
fn knowledge_search_mode_admits_its_results_before_the_model_answers() {
    let f = fixture();
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("knowledge".into());
    let result = f
        .library
        .chat(
            "How does an LRU cache evict entries?",
            &options,
            &mut |_| {},
        )
        .unwrap();
    let invokes = events(&result, "tool.invoke");
    assert_eq!(invokes[0]["tool"], "knowledge_search");
    let tool_result = events(&result, "tool.result")[0];
    assert!(!tool_result["admitted"].as_array().unwrap().is_empty());
    assert!(tool_result["gates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["gate"] == "content_safety"));
    assert!(result
        .evidence
        .iter()
        .any(|e| e.text.contains("least recently used")));
    assert!(result
        .evidence
        .iter()
        .all(|e| e.admitted_by == "knowledge_search"));
    assert_citations_resolve(&f.library, &result);
}

#[test]
fn configurations_have_drafts_and_immutable_revisions_and_chats_keep_theirs() {
    let f = fixture();
    let first = f
        .library
        .orchestrator_revision(DEFAULT_CONFIG, None)
        .unwrap();
    assert_eq!(first.revision, 1);
    assert_eq!(first.applied_by, "seed");
    assert!(first.tools.contains_key("fetch_document_chunks"));

    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("extractive".into());
    let started = f.library.chat("ferns", &options, &mut |_| {}).unwrap();
    assert_eq!(started.revision, 1);

    // Edit the draft: nothing changes until it is applied.
    let mut draft = f.library.orchestrator_draft(DEFAULT_CONFIG).unwrap();
    draft
        .modes
        .iter_mut()
        .for_each(|m| m.budget.evidence_tokens = 300);
    f.library
        .set_orchestrator_draft(DEFAULT_CONFIG, &draft)
        .unwrap();
    assert_eq!(
        f.library
            .orchestrator_revision(DEFAULT_CONFIG, None)
            .unwrap()
            .revision,
        1
    );
    let applied = f
        .library
        .apply_orchestrator(DEFAULT_CONFIG, &applier("alice"))
        .unwrap();
    assert_eq!(
        (applied.revision, applied.applied_by.as_str()),
        (2, "alice")
    );
    assert!(applied.applied_at > 0);
    assert_eq!(
        f.library
            .orchestrator_revisions(DEFAULT_CONFIG)
            .unwrap()
            .len(),
        2
    );

    // The running conversation keeps revision 1; a new one gets revision 2.
    let mut cont = options.clone();
    cont.conversation = Some(started.conversation.clone());
    assert_eq!(
        f.library
            .chat("spores", &cont, &mut |_| {})
            .unwrap()
            .revision,
        1
    );
    assert_eq!(
        f.library
            .chat("spores", &options, &mut |_| {})
            .unwrap()
            .revision,
        2
    );
    // Revision 1 is unchanged.
    let old = f
        .library
        .orchestrator_revision(DEFAULT_CONFIG, Some(1))
        .unwrap();
    assert_eq!(old.config.modes[0].budget.evidence_tokens, 600);

    // Bad drafts are refused, naming the field; an empty allow-list fails with the manual's words.
    let mut bad = draft.clone();
    bad.modes[1]
        .knowledge_search
        .as_mut()
        .unwrap()
        .namespaces
        .clear();
    assert_eq!(
        f.library
            .set_orchestrator_draft(DEFAULT_CONFIG, &bad)
            .unwrap_err()
            .to_string(),
        "at least one namespace must be configured under 'namespaces' at boot"
    );
    let mut bad = draft.clone();
    bad.modes[0]
        .direct_tools
        .push("retrieve-lexical-focused".into());
    f.library
        .set_orchestrator_draft(DEFAULT_CONFIG, &bad)
        .unwrap();
    let e = f
        .library
        .apply_orchestrator(DEFAULT_CONFIG, &applier("alice"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("only action tools"), "{e}");
    assert_eq!(
        f.library
            .orchestrator_revision(DEFAULT_CONFIG, None)
            .unwrap()
            .revision,
        2
    );
    // A snapshot: editing a tool later does not change the applied revision's copy.
    assert_eq!(
        serde_json::to_value(&applied.tools["fetch_neighbors"]).unwrap(),
        serde_json::to_value(
            &f.library
                .orchestrator_revision(DEFAULT_CONFIG, Some(2))
                .unwrap()
                .tools["fetch_neighbors"]
        )
        .unwrap()
    );
    let _ = OrchestratorConfig::seed();
}

#[test]
fn a_conversation_keeps_to_the_collections_it_began_with() {
    let mut f = fixture();
    let moss = "# Mosses\n\nMosses reproduce by spores, like ferns, from capsules on stalks.\n";
    f.add_collection("garden", "internal", "", &[("moss.md", moss)]);
    f.reindex();
    let admin = Principal::administrator();
    let mut options = ChatOptions::new(admin.clone());
    options.mode = Some("extractive".into());
    options.collections = Some(vec!["garden".into()]);
    let first = f
        .library
        .chat("How do ferns reproduce by spores?", &options, &mut |_| {})
        .unwrap();
    let collections = |r: &TurnResult| {
        let mut seen: Vec<String> = r.evidence.iter().map(|e| e.collection.clone()).collect();
        seen.dedup();
        seen
    };
    assert_eq!(collections(&first), ["garden"], "{:#?}", first.evidence);
    // A later turn that names no collections (the CLI's, a window restarted) keeps to them.
    let mut next = ChatOptions::new(admin.clone());
    next.conversation = Some(first.conversation.clone());
    let second = f
        .library
        .chat("Where do the spores grow?", &next, &mut |_| {})
        .unwrap();
    assert_eq!(collections(&second), ["garden"], "{:#?}", second.evidence);
    let header = f.library.conversation(&admin, &first.conversation).unwrap();
    assert_eq!(header.collections, Some(vec!["garden".to_string()]));
    // A new conversation without a pick searches every collection.
    let mut everywhere = ChatOptions::new(admin);
    everywhere.mode = Some("extractive".into());
    let open = f
        .library
        .chat(
            "How do ferns reproduce by spores?",
            &everywhere,
            &mut |_| {},
        )
        .unwrap();
    assert!(
        collections(&open).contains(&"notes".to_string()),
        "{:#?}",
        open.evidence
    );
}

#[test]
fn another_callers_conversation_is_not_found() {
    let f = fixture();
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("extractive".into());
    let result = f.library.chat("ferns", &options, &mut |_| {}).unwrap();
    let key = f
        .library
        .create_key(&quarry_core::auth::NewKey {
            name: "bob".into(),
            kind: quarry_core::auth::PrincipalKind::Personal,
            user: None,
            scope: quarry_core::Scope {
                collections: None,
                sensitivity_ceiling: "internal".into(),
            },
            acts_for: None,
        })
        .unwrap();
    let bob = f.library.authenticate(&key.secret, None).unwrap();
    let id = result.conversation.as_str();
    // Reading it is refused with the same error as opening it, part by part.
    let refused = |e: quarry_core::Error| {
        assert_eq!(e.code(), "conversation_not_found");
        assert!(e.to_string().contains(id), "{e}");
    };
    refused(f.library.conversation(&bob, id).unwrap_err());
    refused(f.library.conversation_messages(&bob, id).unwrap_err());
    refused(f.library.conversation_evidence(&bob, id).unwrap_err());
    refused(f.library.conversation_trace(&bob, id, None).unwrap_err());
    refused(f.library.conversation_trace(&bob, id, Some(1)).unwrap_err());
    // The owner reads all of it.
    let admin = Principal::administrator();
    assert_eq!(
        f.library.conversation_messages(&admin, id).unwrap().len(),
        2
    );
    assert_eq!(
        f.library.conversation_evidence(&admin, id).unwrap(),
        result.evidence
    );
    assert_eq!(
        f.library
            .conversation_trace(&admin, id, None)
            .unwrap()
            .len(),
        result.trace.len()
    );
    // Nor can bob continue it.
    let mut as_bob = ChatOptions::new(bob);
    as_bob.conversation = Some(result.conversation.clone());
    refused(f.library.chat("ferns", &as_bob, &mut |_| {}).unwrap_err());
}

// ---- the model-led path, with scripted tool calls over loopback -----------------------------

/// A loopback OpenAI-compatible server replaying one scripted SSE reply per request, and
/// recording every request body.
struct Script {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Script {
    /// The names of the tools offered in request `i`.
    fn offered(&self, i: usize) -> Vec<String> {
        self.requests.lock().unwrap()[i]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The contents of the `role: "tool"` messages of request `i`.
    fn tool_results(&self, i: usize) -> Vec<String> {
        self.requests.lock().unwrap()[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    }
}

fn sse_tool_call(name: &str, arguments: &Value) -> String {
    let args = arguments.to_string();
    let (a, b) = args.split_at(args.len() / 2);
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": a}}]}),
    ) + &chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}))
        + &format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        )
}

fn sse_answer(text: &str) -> String {
    format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": text}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    )
}

fn serve_script(replies: Vec<String>) -> Script {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for reply in replies {
            let (mut stream, _) = listener.accept().unwrap();
            let request = http::read_request(&stream).expect("a whole request");
            seen.lock()
                .unwrap()
                .push(serde_json::from_slice(&request.body).unwrap_or(Value::Null));
            // "ERR <json>" replies with a server error instead of a stream.
            let (status, kind, reply) = match reply.strip_prefix("ERR ") {
                Some(body) => (
                    "500 Internal Server Error",
                    "application/json",
                    body.to_string(),
                ),
                None => ("200 OK", "text/event-stream", reply),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                reply.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(reply.as_bytes()).unwrap();
        }
    });
    Script { url, requests }
}

fn agent_options(url: &str) -> ChatOptions {
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("agent".into());
    options.backend = Some(BackendConfig::Openai {
        base_url: url.into(),
        model: "scripted".into(),
        api_key_env: None,
        grammar: false,
    });
    options
}

#[test]
fn forged_expired_and_cross_conversation_references_in_model_tool_calls_are_rejected() {
    let f = fixture();
    let admin = Principal::administrator();
    // A reference from another conversation of the same caller.
    let other = f
        .library
        .run_pipeline(
            "default",
            "ferns spores",
            &admin,
            &RunOptions {
                conversation: Some("another-conversation".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let foreign_source = other.evidence.entries[0].source_ref.clone();
    // An expired reference issued for the right conversation is made below, once its id is known.
    let forged = "qe1.eyJrIjoiYyJ9.AAAAAAAAAAAAAAAAAAAAAAAAAAA";

    // Turn 1: the model runs the pipeline (qualifying the conversation) and answers.
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "XR-200 pump pressure"})),
        sse_answer("The pump needs 4 bar [1]. Also see [99]."),
    ]);
    let first = f
        .library
        .chat("pump pressure?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    assert!(
        f.library
            .conversation(&admin, &first.conversation)
            .unwrap()
            .qualified
    );
    assert_citations_resolve(&f.library, &first);
    assert!(!first.answer.contains("[99]"), "{}", first.answer);
    assert_eq!(events(&first, "citation.rejected").len(), 1);
    // The tools offered in round 1 did not include direct tools (not yet qualified).
    let offered = script.offered(0);
    assert!(offered.contains(&"run_pipeline".to_string()));
    assert!(
        !offered.contains(&"fetch_document_chunks".to_string()),
        "{offered:?}"
    );

    let expired = EvidenceSession::in_conversation(
        f.library.evidence_key().unwrap(),
        admin.clone(),
        &first.conversation,
    )
    .unwrap()
    .with_ttl_secs(-10)
    .issue_source(first.evidence[0].document_id, first.evidence[0].revision_id);
    let ledger_before = f
        .library
        .conversation_evidence(&Principal::administrator(), &first.conversation)
        .unwrap();

    // Turn 2: the model pages with a forged, a foreign and an expired reference.
    let script = serve_script(vec![
        sse_tool_call(
            "fetch_document_chunks",
            &json!({"sources": [{"source_ref": forged}]}),
        ),
        sse_tool_call(
            "fetch_document_chunks",
            &json!({"sources": [{"source_ref": foreign_source}]}),
        ),
        sse_tool_call(
            "fetch_document_chunks",
            &json!({"sources": [{"source_ref": expired}]}),
        ),
        sse_answer("Nothing more [1]."),
    ]);
    let mut options = agent_options(&script.url);
    options.conversation = Some(first.conversation.clone());
    let second = f
        .library
        .chat("more from that document?", &options, &mut |_| {})
        .unwrap();
    let results = events(&second, "tool.result");
    assert_eq!(results.len(), 3, "{:#?}", second.trace);
    for r in &results {
        assert_eq!(r["tool"], "fetch_document_chunks");
        assert_eq!(r["is_error"], true, "{r}");
        assert!(r["admitted"].as_array().unwrap().is_empty());
        let error = r["error"].as_str().unwrap().to_lowercase();
        assert!(
            error.contains("reject") || error.contains("expired"),
            "{error}"
        );
    }
    // The model saw the refusals as tool results.
    let tool_messages = script.tool_results(3);
    assert_eq!(tool_messages.len(), 3);
    assert!(tool_messages.iter().all(|m| m.starts_with("Error:")));
    // Nothing was admitted.
    assert_eq!(
        f.library
            .conversation_evidence(&Principal::administrator(), &first.conversation)
            .unwrap(),
        ledger_before
    );
    assert_citations_resolve(&f.library, &second);
}

#[test]
fn direct_tools_need_a_qualifying_pipeline_and_page_from_its_references() {
    let f = fixture();
    // Before any pipeline, a direct tool call is refused even if the model makes it.
    let script = serve_script(vec![
        sse_tool_call(
            "fetch_neighbors",
            &json!({"evidence_ref": "qe1.x.y", "radius": 1}),
        ),
        sse_answer("I cannot tell."),
    ]);
    let first = f
        .library
        .chat("neighbors?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let refused = events(&first, "tool.result")[0];
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("qualifying pipeline"),
        "{refused}"
    );

    // After the pipeline qualifies the conversation, paging with its own source reference works.
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "XR-200 pump"})),
        sse_answer("ok [1]."),
    ]);
    let mut options = agent_options(&script.url);
    options.conversation = Some(first.conversation.clone());
    let second = f.library.chat("pump?", &options, &mut |_| {}).unwrap();
    let source_ref = second.evidence[0].source_ref.clone();
    let script = serve_script(vec![
        sse_tool_call(
            "fetch_document_chunks",
            &json!({"sources": [{"source_ref": source_ref}]}),
        ),
        sse_answer("Done [1]."),
    ]);
    let mut options = agent_options(&script.url);
    options.conversation = Some(first.conversation.clone());
    let third = f
        .library
        .chat("the rest of it?", &options, &mut |_| {})
        .unwrap();
    let paged = events(&third, "tool.result")[0];
    assert_eq!(paged["is_error"], false, "{paged}");
    assert_eq!(paged["tool"], "fetch_document_chunks");
    // The tool result the model saw carries admitted text and citation numbers.
    let tool_message = &script.tool_results(1)[0];
    assert!(tool_message.contains("\"cite\":\"["), "{tool_message}");
}

#[test]
fn the_tool_filter_gate_vetoes_calls_outside_the_profile() {
    let f = fixture();
    apply_edited(&f.library, |draft| {
        let agent = draft.modes.iter_mut().find(|m| m.name == "agent").unwrap();
        agent.profile = "restricted".into();
        agent.tool_choice = ToolChoice::Model;
    });
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "pump"})),
        sse_tool_call(
            "fetch_neighbors",
            &json!({"evidence_ref": "qe1.x.y", "radius": 1}),
        ),
        sse_answer("ok [1]."),
    ]);
    let result = f
        .library
        .chat("pump?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let results = events(&result, "tool.result");
    assert_eq!(results[0]["is_error"], false);
    let vetoed = results[1];
    assert_eq!(vetoed["is_error"], true);
    assert!(
        vetoed["gates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "tool_filter" && g["decision"] == "veto"),
        "{vetoed}"
    );
    // The restricted profile was never offered the direct tools.
    let offered = script.offered(1);
    assert!(
        !offered.contains(&"fetch_neighbors".to_string()),
        "{offered:?}"
    );
}

#[test]
fn secrets_in_documents_are_redacted_before_the_model_sees_them() {
    let mut f = Fixture::new();
    f.add_collection(
        "ops",
        "internal",
        "",
        &[(
            "deploy.md",
            "# Deploy notes\n\nThe deploy server password = hunter2-secret and the AWS key is AKIAABCDEFGHIJKLMNOP for the pump telemetry.\n",
        )],
    );
    f.reindex();
    let library = &f.library;
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "deploy server password"})),
        sse_answer("See [1]."),
    ]);
    let result = library
        .chat("deploy password?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let tool_message = script.tool_results(1).remove(0);
    assert!(!tool_message.contains("hunter2"), "{tool_message}");
    assert!(
        !tool_message.contains("AKIAABCDEFGHIJKLMNOP"),
        "{tool_message}"
    );
    assert!(tool_message.contains("[REDACTED]"));
    let gates = &events(&result, "tool.result")[0]["gates"];
    assert!(
        gates
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "content_safety" && g["decision"] == "redact"),
        "{gates}"
    );
    // The ledger keeps the redacted text too, so citations never show the secret.
    assert!(result.evidence.iter().all(|e| !e.text.contains("hunter2")));
}

#[test]
fn code_tools_reach_their_own_model_through_ctx_llm() {
    use quarry_core::pipeline::{TestInput, ToolTestReport};
    use quarry_core::tools::{ToolDefinition, ToolType};
    let f = fixture();
    let source = r#"from quarry import BaseModel
class Inputs(BaseModel):
    question: str
class Output(BaseModel):
    verdict: str = ''
    text: str = ''
async def run(input, ctx):
    schema = {'type': 'object', 'properties': {'verdict': {'type': 'string', 'enum': ['yes', 'no']}}, 'required': ['verdict']}
    r = await ctx.llm('Is the sky blue? ' + input['question'], max_tokens=24, json_schema=schema)
    return {'verdict': r['json']['verdict'], 'text': r['text']}
"#;
    let mut tool = ToolDefinition {
        slug: "ask_model".into(),
        name: "Ask the model".into(),
        description: String::new(),
        tool_type: ToolType::Action,
        settings: json!({}),
        // The process's one SmolLM2 answers one request at a time, and this binary's other
        // tests share it: a generous limit keeps the test about reaching the model, not about
        // how busy the machine is.
        limits: Some(quarry_core::tools::Limits {
            timeout_ms: 120_000,
            ..Default::default()
        }),
        egress: None,
        model: Some(SMALL_MODEL.into()),
        requires_confirmation: false,
        source: Some(source.into()),
        derived: None,
    };
    tool = f.library.create_tool(tool).unwrap();
    assert!(tool
        .derived
        .as_ref()
        .unwrap()
        .manifest
        .contains(&"llm".to_string()));
    let report: ToolTestReport = f
        .library
        .test_tool(
            "ask_model",
            &TestInput::Json(json!({"question": "Answer yes or no."})),
            &Principal::administrator(),
            None,
            None,
        )
        .unwrap();
    let verdict = report.output["verdict"].as_str().unwrap();
    assert!(verdict == "yes" || verdict == "no", "{}", report.output);
    let text: Value = serde_json::from_str(report.output["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["verdict"], verdict);
}

#[test]
fn a_bad_model_file_is_a_clear_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let not_gguf = dir.path().join("notes.gguf");
    std::fs::write(&not_gguf, "just text").unwrap();
    let e = EmbeddedBackend::load(EmbeddedConfig::for_file(&not_gguf))
        .err()
        .unwrap();
    assert_eq!(e.code(), "llm_failed");
    assert!(
        e.to_string().contains("notes.gguf") && e.to_string().contains("not a GGUF file"),
        "{e}"
    );
    // A truncated copy of the real model: llama.cpp refuses it, and nothing panics.
    let models = Models::discover(std::path::Path::new("/nonexistent"));
    let real = EmbeddedConfig::installed(&models, SMALL_MODEL)
        .unwrap()
        .model_path;
    let bytes = std::fs::read(&real).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    let e = EmbeddedBackend::load(EmbeddedConfig::for_file(&truncated))
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("truncated.gguf") && e.to_string().contains("cannot load"),
        "{e}"
    );
    let missing = EmbeddedBackend::load(EmbeddedConfig::for_file(&dir.path().join("gone.gguf")))
        .err()
        .unwrap();
    assert!(missing.to_string().contains("does not exist"), "{missing}");
}

#[test]
fn apply_works_on_a_fresh_library() {
    let f = Fixture::new();
    let library = &f.library;
    let applied = library
        .apply_orchestrator(DEFAULT_CONFIG, &applier("carol"))
        .unwrap();
    // The seed is revision 1, applied on first use; this is revision 2.
    assert_eq!(
        (applied.revision, applied.applied_by.as_str()),
        (2, "carol")
    );
    assert!(applied.pipelines.contains_key("default"));
}

#[test]
fn applying_a_configuration_is_audited_with_who_applied_which_revision() {
    let f = Fixture::new();
    let library = &f.library;
    let carol = Principal {
        label: "carol".into(),
        ..Principal::administrator()
    };
    let applied = library.apply_orchestrator(DEFAULT_CONFIG, &carol).unwrap();
    assert_eq!(applied.revision, 2);
    assert_eq!(applied.applied_by, "carol");
    let records = library.audit(&AuditQuery::newest(10)).unwrap();
    let record = records
        .iter()
        .find(|r| r.action == "orchestrator.apply")
        .unwrap_or_else(|| panic!("no audit record of the apply: {records:#?}"));
    assert_eq!(record.principal, "carol");
    assert_eq!(record.target, DEFAULT_CONFIG);
    assert_eq!(record.outcome, "ok");
    assert_eq!(record.detail.as_deref(), Some("revision 2"));
    assert_eq!(
        record.input_hash,
        quarry_core::audit::input_hash(&json!({ "config": DEFAULT_CONFIG }))
    );

    // A refused apply is recorded too, with its error.
    let e = library
        .apply_orchestrator("nonexistent", &carol)
        .unwrap_err();
    let records = library.audit(&AuditQuery::newest(10)).unwrap();
    let refused = records
        .iter()
        .find(|r| r.action == "orchestrator.apply" && r.target == "nonexistent")
        .unwrap_or_else(|| panic!("no audit record of the refused apply: {records:#?}"));
    assert_eq!(refused.principal, "carol");
    assert_eq!(refused.outcome, format!("error: {}", e.code()));
}

#[test]
fn a_server_that_refuses_tools_is_answered_the_grounded_way_from_then_on() {
    let f = fixture();
    let script = serve_script(vec![
        r#"ERR {"error":{"message":"tools param requires --jinja flag"}}"#.to_string(),
        sse_answer("An answer with no evidence behind it."),
        sse_answer("The pump needs 4 bar [1]."),
        sse_answer("Every 600 hours [2]."),
    ]);
    let mut options = agent_options(&script.url);
    let first = f
        .library
        .chat("XR-200 pump pressure?", &options, &mut |_| {})
        .unwrap();
    assert!(
        first.notices.iter().any(|n| n.contains("--jinja")),
        "{:?}",
        first.notices
    );
    // The ungrounded answer was discarded: the orchestrator retrieved and asked again.
    assert_eq!(events(&first, "tool.invoke")[0]["by"], "orchestrator");
    assert!(first.answer.contains("4 bar"), "{}", first.answer);
    assert_citations_resolve(&f.library, &first);
    // The next turn (a new backend handle for the same server) remembers: no tools are sent.
    options.conversation = Some(first.conversation.clone());
    let second = f
        .library
        .chat("How often is it serviced?", &options, &mut |_| {})
        .unwrap();
    assert!(second.notices.is_empty(), "{:?}", second.notices);
    assert!(script.requests.lock().unwrap()[3].get("tools").is_none());
    assert_citations_resolve(&f.library, &second);
}

#[test]
fn a_vetoed_result_is_neither_admitted_nor_qualifying() {
    let f = fixture();
    limit_output(
        &f.library,
        200,
        quarry_core::orchestrator::gates::GateAction::Veto,
    );
    // Orchestrator-led (extractive): each passage is short enough, the whole result is not.
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("extractive".into());
    let result = f.library.chat("pump", &options, &mut |_| {}).unwrap();
    let tool_result = events(&result, "tool.result")[0];
    assert_eq!(tool_result["vetoed"], true, "{tool_result}");
    assert!(tool_result["admitted"].as_array().unwrap().is_empty());
    assert!(f
        .library
        .conversation_evidence(&Principal::administrator(), &result.conversation)
        .unwrap()
        .is_empty());
    assert!(result.citations.is_empty());
    assert!(
        result.notices.iter().any(|n| n.contains("withheld")),
        "{:?}",
        result.notices
    );
    assert!(
        !f.library
            .conversation(&Principal::administrator(), &result.conversation)
            .unwrap()
            .qualified
    );
    // Model-led: the vetoed pipeline does not unlock the direct tools.
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "XR-200 pump"})),
        sse_tool_call(
            "fetch_neighbors",
            &json!({"evidence_ref": "qe1.x.y", "radius": 1}),
        ),
        sse_answer("Nothing."),
    ]);
    let result = f
        .library
        .chat("pump?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let results = events(&result, "tool.result");
    assert_eq!(results[0]["vetoed"], true);
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("qualifying pipeline"),
        "{}",
        results[1]
    );
    assert!(!script.offered(1).contains(&"fetch_neighbors".to_string()));
    assert!(script.tool_results(1)[0].starts_with("Error: the result was withheld"));
}

#[test]
fn a_result_over_the_output_length_gate_reaches_the_model_as_json_with_its_best_passages() {
    let f = fixture();
    limit_output(
        &f.library,
        400,
        quarry_core::orchestrator::gates::GateAction::Truncate,
    );
    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "pump pressure service"})),
        sse_answer("See [1]. Also [2]."),
    ]);
    let result = f
        .library
        .chat("pump?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let seen = script.tool_results(1).remove(0);
    assert!(seen.chars().count() <= 400, "{seen}");
    // Cut by whole passages, not by characters: the model (or an MCP client) parses it.
    let parsed: Value = serde_json::from_str(&seen).expect("still JSON");
    let shown = parsed["evidence"].as_array().unwrap();
    assert_eq!(shown.len(), 1, "{seen}");
    assert_eq!(shown[0]["cite"], "[1]", "{seen}");
    assert!(parsed["left_out"].is_string(), "{seen}");
    // What the model never saw is not admitted, so it cannot be cited: [2] is rejected.
    assert_eq!(
        result.evidence.iter().map(|e| e.n).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(events(&result, "tool.result")[0]["admitted"], json!([1]));
    assert_eq!(
        events(&result, "citation.rejected")[0]["citations"],
        json!(["2"])
    );
    assert_eq!(result.citations.len(), 1);
    assert_citations_resolve(&f.library, &result);
    let gates = &events(&result, "tool.result")[0]["gates"];
    assert!(
        gates
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "output_length"
                && g["decision"] == "truncate"
                && g["reason"].as_str().unwrap().contains("output length gate")),
        "{gates}"
    );
}

#[test]
fn a_stopped_answer_keeps_what_was_written_and_says_so() {
    let f = fixture();
    let mut options = ChatOptions::new(Principal::administrator());
    options.mode = Some("grounded".into());
    let stop = options.cancel.clone();
    let mut streamed = String::new();
    let result = f
        .library
        .chat(
            "What inlet pressure does the XR-200 pump need?",
            &options,
            &mut |e| {
                if let orchestrator::TurnEvent::Token(t) = e {
                    streamed.push_str(t);
                    // The stop button, pressed at the first token.
                    stop.cancel();
                }
            },
        )
        .unwrap();
    assert!(result.stopped);
    assert!(!result.answer.is_empty());
    assert_eq!(result.answer, streamed, "what was written is what is kept");
    assert!(
        result.completion_tokens <= 2,
        "{}",
        result.completion_tokens
    );
    assert!(
        result.notices.iter().any(|n| n.starts_with("stopped")),
        "{:?}",
        result.notices
    );
    let generate = events(&result, "llm.generate");
    assert_eq!(generate[0]["finish_reason"], "cancelled");
    let messages = f
        .library
        .conversation_messages(&Principal::administrator(), &result.conversation)
        .unwrap();
    assert_eq!(messages[1].content, result.answer);
}

#[test]
fn a_stopped_server_answer_closes_the_stream() {
    let f = fixture();
    // The answer streamed a word an event, as servers do.
    let words = "The pump needs 4 bar [1]. It is serviced every 600 hours [1].";
    let mut events_text: String = words
        .split_inclusive(' ')
        .map(|w| {
            let delta = json!({"choices": [{"index": 0, "delta": {"content": w}}]});
            format!("data: {delta}\n\n")
        })
        .collect();
    events_text.push_str("data: [DONE]\n\n");
    let script = serve_script(vec![events_text]);
    let mut options = agent_options(&script.url);
    options.mode = Some("grounded".into());
    let stop = options.cancel.clone();
    let result = f
        .library
        .chat("What does the pump need?", &options, &mut |e| {
            if let orchestrator::TurnEvent::Token(_) = e {
                stop.cancel();
            }
        })
        .unwrap();
    assert!(result.stopped);
    assert!(
        result.answer.len() < "The pump needs 4 bar [1].".len(),
        "{}",
        result.answer
    );
    assert_eq!(
        events(&result, "llm.generate")[0]["finish_reason"],
        "cancelled"
    );
}

#[test]
fn conversations_are_renamed_deleted_and_their_last_turn_taken_back() {
    let f = fixture();
    let admin = Principal::administrator();
    let mut options = ChatOptions::new(admin.clone());
    options.mode = Some("grounded".into());
    options.backend = Some(BackendConfig::Extractive);
    let first = f
        .library
        .chat(
            "What inlet pressure does the XR-200 pump need?",
            &options,
            &mut |_| {},
        )
        .unwrap();
    options.conversation = Some(first.conversation.clone());
    let second = f
        .library
        .chat("How do ferns reproduce?", &options, &mut |_| {})
        .unwrap();
    let id = first.conversation.as_str();
    let ledger_before = f.library.conversation_evidence(&admin, id).unwrap();

    // Regenerate / edit and resend: the last turn is taken back whole, its question returned.
    let question = f.library.take_back_last_turn(&admin, id).unwrap();
    assert_eq!(question, second.question);
    let messages = f.library.conversation_messages(&admin, id).unwrap();
    assert_eq!(messages.len(), 2);
    assert!(messages.iter().all(|m| m.turn == 1));
    let ledger = f.library.conversation_evidence(&admin, id).unwrap();
    let first_turns: Vec<_> = ledger_before.iter().filter(|i| i.turn == 1).collect();
    assert_eq!(ledger.iter().collect::<Vec<_>>(), first_turns);
    assert!(f
        .library
        .conversation_trace(&admin, id, Some(2))
        .unwrap()
        .is_empty());
    let again = f
        .library
        .chat("How do ferns spread?", &options, &mut |_| {})
        .unwrap();
    assert_eq!(again.turn, 2);

    // Renamed (trimmed), and never by another caller; an empty title is refused by name.
    let renamed = f
        .library
        .rename_conversation(&admin, id, "  Pump notes ")
        .unwrap();
    assert_eq!(renamed.title, "Pump notes");
    let empty = f.library.rename_conversation(&admin, id, " ").unwrap_err();
    assert!(empty.to_string().contains("title"), "{empty}");
    let mut other = Principal::administrator();
    other.id = "someone-else".into();
    assert_eq!(
        f.library
            .rename_conversation(&other, id, "mine")
            .unwrap_err()
            .code(),
        "conversation_not_found"
    );
    assert_eq!(
        f.library
            .delete_conversation(&other, id)
            .unwrap_err()
            .code(),
        "conversation_not_found"
    );
    // Deleted with everything in it.
    f.library.delete_conversation(&admin, id).unwrap();
    assert!(f.library.conversations(&admin).unwrap().is_empty());
    assert_eq!(
        f.library
            .conversation_messages(&admin, id)
            .unwrap_err()
            .code(),
        "conversation_not_found"
    );
}

#[test]
fn knowledge_search_answers_a_model_with_its_manuals_own_strings_and_field_order() {
    let f = fixture();
    // An explicit allow-list, so the tool's schema has an enum the generic check would use.
    apply_edited(&f.library, |draft| {
        for mode in draft.modes.iter_mut().filter(|m| m.name == "agent") {
            mode.knowledge_search.as_mut().unwrap().namespaces = vec!["notes".into()];
        }
    });
    // Empty query, then a namespace outside the allow-list, then a good call: the model reads
    // the manual's error strings (not the generic argument check's), then the manual's JSON.
    let script = serve_script(vec![
        sse_tool_call("knowledge_search", &json!({"query": ""})),
        sse_tool_call(
            "knowledge_search",
            &json!({"query": "pump", "namespaces": ["nowhere"]}),
        ),
        sse_tool_call(
            "knowledge_search",
            &json!({"query": "XR-200 pump pressure"}),
        ),
        sse_answer("4 bar [1]."),
    ]);
    let result = f
        .library
        .chat("pump pressure?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    assert!(result.answer.contains("4 bar"), "{}", result.answer);
    let seen = script.tool_results(3);
    assert_eq!(seen[0], "Error: \"query argument required\"");
    assert!(
        seen[1].contains("no valid namespaces selected"),
        "{}",
        seen[1]
    );
    let json = &seen[2];
    assert!(json.starts_with("{\"query\":"), "{json}");
    let order = [
        "\"rank\"",
        "\"namespace\"",
        "\"similarity\"",
        "\"source\"",
        "\"chunk_idx\"",
        "\"content\"",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|k| json.find(k).unwrap_or_else(|| panic!("{k} in {json}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{json}");
}

/// An action tool that keeps the contract's shape (strict schemas, evidence references) but
/// writes its own words beside them: a made-up pressure and a summary.
const EMBELLISHER: &str = r#"from quarry import BaseModel, Field


class Inputs(BaseModel):
    query: str = Field(..., min_length=1)


class Passage(BaseModel):
    evidence_ref: str
    text: str
    title: str


class Output(BaseModel):
    passages: list[Passage]
    summary: str
    pressure_bar: int


async def run(input, ctx):
    hits = await ctx.search(input["query"], top_k=1)
    return {
        "passages": [
            {"evidence_ref": h["evidence_ref"], "text": "The XR-200 pump needs 99 bar.", "title": h["title"]}
            for h in hits
        ] + [
            # The model's own query, beside a valid reference.
            {"evidence_ref": h["evidence_ref"], "text": input["query"], "title": h["title"]}
            for h in hits
        ],
        "summary": "The XR-200 pump runs at 99 bar, made up.",
        "pressure_bar": 99,
    }
"#;

#[test]
fn a_direct_tools_own_words_never_reach_the_model_and_a_committed_page_does() {
    let f = fixture();
    let tool = common::code_tool("embellisher", quarry_core::ToolType::Action, EMBELLISHER);
    f.library.create_tool(tool).unwrap();
    apply_edited(&f.library, |draft| {
        let agent = draft.modes.iter_mut().find(|m| m.name == "agent").unwrap();
        agent.direct_tools.push("embellisher".into());
    });

    let script = serve_script(vec![
        sse_tool_call("run_pipeline", &json!({"query": "XR-200 pump"})),
        sse_tool_call("embellisher", &json!({"query": "XR-200 pump pressure"})),
        sse_answer("The pump needs 4 bar [1]."),
    ]);
    let first = f
        .library
        .chat("pump pressure?", &agent_options(&script.url), &mut |_| {})
        .unwrap();
    let seen: Value = serde_json::from_str(&script.tool_results(2)[1]).unwrap();
    // Beside the reference: the passage Quarry admitted, not the tool's sentence nor the
    // model's own query.
    for passage in seen["passages"].as_array().unwrap() {
        let text = passage["text"].as_str().unwrap();
        assert!(text.contains("inlet pressure of 4 bar"), "{seen}");
        assert!(!text.contains("pump pressure"), "{seen}");
        assert!(passage["cite"].as_str().unwrap().starts_with('['), "{seen}");
        // The title came from the library, so it stays.
        assert_eq!(passage["title"], "XR-200 pump", "{seen}");
    }
    // The summary and the figure did not, so they are withheld.
    assert!(seen.get("summary").is_none(), "{seen}");
    assert!(seen.get("pressure_bar").is_none(), "{seen}");
    assert!(!seen.to_string().contains("99 bar"), "{seen}");
    assert!(
        seen["withheld"].as_str().unwrap().contains("summary"),
        "{seen}"
    );
    let result = events(&first, "tool.result")[1];
    assert!(
        result["warnings"][0].as_str().unwrap().contains("summary"),
        "{result}"
    );

    // fetch_source_document shows the model the committed page itself, heading and all.
    let source_ref = first.evidence[0].source_ref.clone();
    let script = serve_script(vec![
        sse_tool_call("fetch_source_document", &json!({"sourceRef": source_ref})),
        sse_answer("Done [1]."),
    ]);
    let mut options = agent_options(&script.url);
    options.conversation = Some(first.conversation.clone());
    f.library
        .chat("the whole note?", &options, &mut |_| {})
        .unwrap();
    let page: Value = serde_json::from_str(&script.tool_results(1)[0]).unwrap();
    assert_eq!(page["text"], PUMP, "{page}");
    assert!(page["cite"].as_str().unwrap().starts_with('['), "{page}");
    assert!(page.get("withheld").is_none(), "{page}");
}

/// Edits the default configuration's draft with `edit` and applies it as an administrator.
fn apply_edited(library: &Library, edit: impl FnOnce(&mut OrchestratorConfig)) {
    let mut draft = library.orchestrator_draft(DEFAULT_CONFIG).unwrap();
    edit(&mut draft);
    library
        .set_orchestrator_draft(DEFAULT_CONFIG, &draft)
        .unwrap();
    library
        .apply_orchestrator(DEFAULT_CONFIG, &applier("admin"))
        .unwrap();
}

/// Applies an output length gate of `max_chars` that takes `action`.
fn limit_output(
    library: &Library,
    max_chars: usize,
    action: quarry_core::orchestrator::gates::GateAction,
) {
    apply_edited(library, |draft| {
        draft.gates.output_length =
            Some(quarry_core::orchestrator::gates::OutputLength { max_chars, action });
    });
}

/// An administrator who signs what they apply with `label`.
fn applier(label: &str) -> Principal {
    Principal {
        label: label.into(),
        ..Principal::administrator()
    }
}
