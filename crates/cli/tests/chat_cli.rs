//! `quarry chat` and `quarry orchestrator` through the binary, on the bundled demo corpus with
//! the real embedding model and the real SmolLM2 model (both provisioned by
//! scripts/provision.sh; the tests fail, never skip, without them).

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn demo_library() -> TestEnv {
    let env = TestEnv::new();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../seeds/demo");
    env.ok(&["source", "add", demo.to_str().unwrap(), "-c", "demo"]);
    env.ok(&["index"]);
    env
}

fn chat_json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["chat"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&env.ok(&all)).expect("chat --json prints JSON")
}

/// Every citation number appears in the answer and is an entry of the conversation's ledger.
fn assert_cited_from_ledger(env: &TestEnv, result: &Value) {
    let shown = env.ok(&[
        "chat",
        "--show",
        result["conversation"].as_str().unwrap(),
        "--json",
    ]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let ledger = shown["evidence"].as_array().unwrap();
    let citations = result["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "{result:#}");
    for c in citations {
        let n = c["n"].as_i64().unwrap();
        let entry = ledger
            .iter()
            .find(|e| e["n"] == n)
            .unwrap_or_else(|| panic!("[{n}] is not in the ledger"));
        assert_eq!(entry["chunk_id"], c["chunk_id"]);
        assert_eq!(entry["path"], c["path"]);
        assert!(result["answer"]
            .as_str()
            .unwrap()
            .contains(&format!("[{n}]")));
        assert!(
            Path::new(c["path"].as_str().unwrap()).is_file(),
            "citations open a real file"
        );
    }
}

#[test]
fn one_shot_chat_on_the_demo_library_gives_a_cited_answer_with_the_embedded_model() {
    let env = demo_library();
    let result = chat_json(&env, &["How does an LRU cache evict entries?"]);
    assert_eq!(result["mode"], "grounded");
    // The seeded mode answers with `auto`: the trace says which model that stood for and
    // why, and that model answered (the default where nothing better is measured).
    let chosen = result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "model.chosen")
        .expect("the automatic choice is traced")["detail"]
        .clone();
    assert!(chosen["why"].as_str().unwrap().contains("the"), "{chosen}");
    assert_eq!(
        result["backend"],
        format!("embedded {}", chosen["model"].as_str().unwrap())
    );
    assert!(!result["answer"].as_str().unwrap().is_empty());
    assert_cited_from_ledger(&env, &result);
    let kinds: Vec<&str> = result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    // The trace shows what the model was shown, what it wrote before the check, and the answer
    // (with the best sentence quoted beside it when the model's words leave out what it names:
    // the model's words vary with the CPU).
    let kinds: Vec<&str> = kinds
        .into_iter()
        .filter(|k| *k != "answer.quoted")
        .collect();
    assert_eq!(
        kinds,
        [
            "turn.start",
            "model.chosen",
            "tool.invoke",
            "tool.result",
            "evidence.selected",
            "llm.generate",
            "answer.checked",
            "answer"
        ]
    );
    let selected = &result["trace"][4]["detail"];
    assert!(
        selected["shown"].as_array().is_some_and(|s| !s.is_empty()),
        "{selected}"
    );
    assert!(selected["shown_chars"].as_u64() < selected["admitted_chars"].as_u64());
    assert!(result["trace"][6]["detail"]["draft"].is_string());
    assert!(
        result["basis"].as_str().unwrap().starts_with("found in"),
        "{}",
        result["basis"]
    );
    // A second question continues the conversation.
    let id = result["conversation"].as_str().unwrap();
    // ... with the default log filter: llama.cpp's loader warnings (this model's
    // "control-looking token") stay out of the way unless -v asks for them.
    let out = env
        .command(&["chat", "And what is its capacity?", "-c", id, "--json"])
        .env_remove("QUARRY_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("llama-cpp-2") && !stderr.contains("control-looking"),
        "llama.cpp's log reached the terminal: {stderr}"
    );
    let next: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(next["conversation"], id);
    assert_eq!(next["turn"], 2);
    let list = env.ok(&["chat", "--list"]);
    assert!(list.contains(id), "{list}");
}

#[test]
fn the_extractive_backend_needs_no_model_and_streams_plain_text() {
    let env = demo_library();
    let out = env.ok(&[
        "chat",
        "What is ownership in Rust?",
        "--backend",
        "extractive",
    ]);
    assert!(out.starts_with("From your library:"), "{out}");
    assert!(out.contains("[1]"), "{out}");
    assert!(
        out.contains("/seeds/demo/"),
        "citations are listed with their files: {out}"
    );
}

#[test]
fn chat_errors_name_what_is_wrong() {
    let env = demo_library();
    let out = env.run(&["chat", "x", "--backend", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend `nonsense`"));
    let out = env.run(&["chat", "x", "--backend", "openai"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--backend openai needs --base-url"));
    let out = env.run(&["chat", "x", "-c", "c-0000"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[conversation_not_found]"));
    let out = env.run(&["chat", "x", "--mode", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no mode `nope`"));
    // An unreachable server: the turn still answers, extractively, with a notice.
    let result = chat_json(
        &env,
        &[
            "caching",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    );
    assert_eq!(result["backend"], "extractive", "{result:#}");
    assert!(result["answer"]
        .as_str()
        .unwrap()
        .starts_with("From your library:"));
    let notice = result["notices"][0].as_str().unwrap();
    assert!(notice.contains("127.0.0.1:9"), "{notice}");
    assert_cited_from_ledger(&env, &result);
}

#[test]
fn orchestrator_drafts_apply_as_revisions_and_bad_files_are_named() {
    let env = TestEnv::new();
    let shown = env.ok(&["orchestrator", "show"]);
    assert!(shown.contains("mode grounded"), "{shown}");
    assert!(shown.contains("revision 1 by seed"), "{shown}");
    let config: Value = serde_json::from_str(&env.ok(&["orchestrator", "show", "--json"])).unwrap();
    assert_eq!(config["default_mode"], "grounded");

    let file = env.docs().join("orchestrator.json");
    let mut edited = config.clone();
    edited["default_mode"] = "extractive".into();
    write(&file, serde_json::to_vec_pretty(&edited).unwrap());
    env.ok(&["orchestrator", "edit", "--file", file.to_str().unwrap()]);
    let shown = env.ok(&["orchestrator", "show"]);
    assert!(shown.contains("unapplied changes"), "{shown}");
    assert!(
        shown.contains(r#"changed default_mode: "grounded" → "extractive""#),
        "{shown}"
    );
    let applied = env.ok(&["orchestrator", "apply"]);
    assert!(applied.contains("revision 2"), "{applied}");
    let revisions = env.ok(&["orchestrator", "revisions"]);
    assert!(
        revisions.starts_with("revision 2  by administrator"),
        "{revisions}"
    );
    assert!(revisions.contains("revision 1  by seed"), "{revisions}");
    // The apply is in the audit log, by whom and which revision it made.
    let audit: Value = serde_json::from_str(&env.ok(&["audit", "--json"])).unwrap();
    let apply = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "orchestrator.apply")
        .unwrap_or_else(|| panic!("no orchestrator.apply record: {audit:#}"));
    assert_eq!(apply["principal"], "administrator");
    assert_eq!(apply["target"], "default");
    assert_eq!(apply["detail"], "revision 2");
    let old: Value =
        serde_json::from_str(&env.ok(&["orchestrator", "show", "--revision", "1", "--json"]))
            .unwrap();
    assert_eq!(old["default_mode"], "grounded");

    // Bad files: not JSON, an unknown field, an empty allow-list.
    write(&file, "{ not json");
    let out = env.run(&["orchestrator", "edit", "--file", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("orchestrator.json is not a valid configuration"),
        "{err}"
    );
    let mut unknown = config.clone();
    unknown["modes"][0]["budgett"] = Value::from(1);
    write(&file, serde_json::to_vec(&unknown).unwrap());
    let err = String::from_utf8_lossy(
        &env.run(&["orchestrator", "edit", "--file", file.to_str().unwrap()])
            .stderr,
    )
    .into_owned();
    assert!(err.contains("budgett"), "{err}");
    let mut empty = config.clone();
    empty["modes"][1]["knowledge_search"]["namespaces"] = Value::Array(vec![]);
    write(&file, serde_json::to_vec(&empty).unwrap());
    let err = String::from_utf8_lossy(
        &env.run(&["orchestrator", "edit", "--file", file.to_str().unwrap()])
            .stderr,
    )
    .into_owned();
    assert!(
        err.contains("at least one namespace must be configured under 'namespaces' at boot"),
        "{err}"
    );
    // Nothing was lost: the draft is still the edited one.
    let draft: Value = serde_json::from_str(&env.ok(&["orchestrator", "show", "--json"])).unwrap();
    assert_eq!(draft, edited);
}

/// llama.cpp's `llama-server` (built by scripts/llama-server.sh) serving SmolLM2 on loopback.
struct LlamaServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn models_measure_times_prompt_and_generation_on_the_threads_asked_and_keeps_the_figures() {
    let env = TestEnv::new();
    let checkout_models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/cache");
    let mine = tempfile::tempdir().unwrap();
    let models_dir = std::env::join_paths([mine.path().to_path_buf(), checkout_models]).unwrap();
    let measure = |threads: &str| {
        env.command(&[
            "models",
            "measure",
            "smollm2-135m-instruct-q4_1",
            "--threads",
            threads,
            "--json",
        ])
        .env("QUARRY_MODELS_DIR", &models_dir)
        .output()
        .unwrap()
    };
    let out = measure("1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let speed = &report["measured"][0];
    assert_eq!(speed["model"], "smollm2-135m-instruct-q4_1", "{report:#}");
    assert_eq!(speed["threads"], 1, "{report:#}");
    assert_eq!(speed["prompt_threads"], 1, "{report:#}");
    assert!(speed["prompt_tokens_per_sec"].as_f64().unwrap() > 0.0);
    assert!(speed["generation_tokens_per_sec"].as_f64().unwrap() > 0.0);
    assert!(report["auto"]["model"].is_string(), "{report:#}");
    // Kept in the first models folder, beside the measurements at other thread counts.
    let kept: Value =
        serde_json::from_slice(&std::fs::read(mine.path().join("chat-speed.json")).unwrap())
            .unwrap();
    assert_eq!(kept[0]["prompt_threads"], 1, "{kept:#}");

    let refused = measure("0");
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--threads"));

    // The list says where `auto`'s model runs, as QUARRY_LLM_DEVICE asks, and why.
    let list = |device: &str| {
        let out = env
            .command(&["models", "list"])
            .env("QUARRY_MODELS_DIR", &models_dir)
            .env("QUARRY_LLM_DEVICE", device)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = list("cpu");
    assert!(
        listed.contains("it runs on CPU: QUARRY_LLM_DEVICE=cpu"),
        "{listed}"
    );
    let listed = list("Vulkan9");
    assert!(
        listed.contains(
            "it cannot load: invalid setting `QUARRY_LLM_DEVICE`: no device is called `Vulkan9`"
        ),
        "{listed}"
    );
}

fn llama_server() -> LlamaServer {
    use std::io::{Read, Write};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let binary = root.join("target/llama-server/bin/llama-server");
    assert!(
        binary.is_file(),
        "llama-server is missing: run `bash scripts/llama-server.sh`"
    );
    let model = root.join("models/cache/smollm2-135m-instruct-q4_1/model.gguf");
    assert!(
        model.is_file(),
        "SmolLM2 is missing: run `bash scripts/provision.sh`"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(&binary)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-m"])
        .arg(&model)
        .args(["--alias", "smollm2", "-c", "4096", "-np", "1", "-t", "1"])
        .args(["--jinja", "--no-webui"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("llama-server starts");
    let server = LlamaServer { child, port };
    eventually(120, "llama-server to report healthy", || {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ =
            s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply.starts_with("HTTP/1.1 200")
    });
    server
}

#[test]
fn chat_works_against_a_real_openai_compatible_server() {
    let env = demo_library();
    let server = llama_server();
    let url = format!("http://127.0.0.1:{}/v1", server.port);
    let result = chat_json(
        &env,
        &[
            "How does an LRU cache evict entries?",
            "--backend",
            "openai",
            "--base-url",
            &url,
            "--model",
            "smollm2",
            "--grammar",
        ],
    );
    assert_eq!(result["backend"], "openai smollm2", "{result:#}");
    let event = |kind: &str| {
        result["trace"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == kind)
            .cloned()
    };
    let generate = event("llm.generate").expect("the server generated the answer");
    assert_eq!(generate["detail"]["constrained"], true);
    assert!(generate["detail"]["completion_tokens"].as_u64().unwrap() > 0);
    // What a 135M model writes depends on the CPU's arithmetic: either its answer is held by
    // the passages and cited from the ledger, or the answer check dropped every sentence of it
    // and the turn says the passages do not answer.
    if result["answer"] == "The passages found do not answer this." {
        let checked = event("answer.checked").expect("the check says why");
        assert_eq!(
            checked["detail"]["dropped"], checked["detail"]["sentences"],
            "{result:#}"
        );
    } else {
        assert!(
            result["notices"].as_array().unwrap().is_empty(),
            "{result:#}"
        );
        assert_cited_from_ledger(&env, &result);
    }
}

/// A grounded-QA set over a folder of two notes: two questions they answer, one they do not.
fn grounded_set(env: &TestEnv) -> std::path::PathBuf {
    std::fs::write(
        env.docs().join("pumps.md"),
        "# Pumps\n\nThe primary coolant pump runs at a pressure of 42 bar.\n\nThe primary coolant pump is serviced every 90 days by the night shift.\n",
    )
    .unwrap();
    std::fs::write(
        env.docs().join("ferns.md"),
        "# Ferns\n\nFerns reproduce by spores released from sori under the fronds.\n",
    )
    .unwrap();
    let set = env.data.path().join("set");
    std::fs::create_dir_all(&set).unwrap();
    std::fs::write(
        set.join("corpora.json"),
        serde_json::json!({"sources": [{"name": "notes", "folder": env.docs()}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        set.join("questions.jsonl"),
        [
            r#"{"id": "p1", "source": "notes", "file": "pumps.md", "question": "What pressure does the primary coolant pump run at?", "facts": ["42 bar"]}"#,
            r#"{"id": "p2", "source": "notes", "file": "pumps.md", "question": "How often is the primary coolant pump serviced?", "facts": ["90 days"]}"#,
            r#"{"id": "n1", "question": "What is the capital of Peru?", "facts": []}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    set
}

#[test]
fn eval_chat_scores_facts_citations_refusals_and_time_per_backend() {
    let env = TestEnv::new();
    let set = grounded_set(&env);
    let report = env.json(&[
        "eval",
        "--chat",
        set.to_str().unwrap(),
        "--backend",
        "extractive",
        "--backend",
        "embedded:smollm2-135m-instruct-q4_1",
        "--per-query",
    ]);
    assert_eq!(report["questions"], 3, "{report:#}");
    assert_eq!(report["documents"], 2, "{report:#}");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report:#}");

    // The extractive answer quotes the sentence that holds the fact, and cites it.
    let extractive = &rows[0];
    assert_eq!(extractive["backend"], "extractive (no LLM)");
    assert_eq!(extractive["answerable"], 2);
    assert_eq!(extractive["fact_retrieved"], 2, "{extractive:#}");
    assert_eq!(extractive["correct"], 2, "{extractive:#}");
    assert_eq!(extractive["supported"], 2, "{extractive:#}");
    assert!(extractive["citation_precision"].as_f64().unwrap() > 0.0);
    assert_eq!(extractive["unanswerable"], 1);
    assert!(extractive["first_token_ms_p50"].is_null());

    // The embedded model generates: it has a time to first token, and every answer is
    // scored by what it says.
    let embedded = &rows[1];
    assert_eq!(embedded["backend"], "embedded smollm2-135m-instruct-q4_1");
    assert!(embedded["first_token_ms_p50"].as_u64().unwrap() > 0);
    assert_eq!(embedded["fell_back"], 0, "{embedded:#}");
    let facts = [("p1", "42 bar"), ("p2", "90 days")];
    for answer in embedded["answers"].as_array().unwrap() {
        let text = answer["answer"].as_str().unwrap().to_lowercase();
        assert!(!text.trim().is_empty(), "{answer:#}");
        let fact = facts.iter().find(|(id, _)| answer["id"] == *id);
        assert_eq!(
            answer["correct"],
            fact.is_some_and(|(_, f)| text.contains(f)),
            "{answer:#}"
        );
        assert!(answer["supporting_citations"].as_u64() <= answer["citations"].as_u64());
    }
}

#[test]
fn eval_chat_names_a_bad_set_line_and_a_bad_backend() {
    let env = TestEnv::new();
    let set = grounded_set(&env);
    let questions = set.join("questions.jsonl");
    let text = std::fs::read_to_string(&questions).unwrap();
    std::fs::write(&questions, text.replace(", \"facts\": [\"90 days\"]", "")).unwrap();
    let out = env.run(&["eval", "--chat", set.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("questions.jsonl") && err.contains("line 2") && err.contains("facts"),
        "{err}"
    );

    let out = env.run(&["eval", "--chat", set.to_str().unwrap(), "--backend", "gpt"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--backend") && err.contains("`gpt`"), "{err}");
}
