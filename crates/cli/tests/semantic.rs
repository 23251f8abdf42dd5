//! Semantic search end to end with the real ONNX Runtime and the real MiniLM model (installed by
//! `quarry models fetch --defaults`, which scripts/test.sh runs): the embedding lane, vector and
//! hybrid search, model switching and mismatch, missing or corrupt models, the rerank path on a
//! cross-encoder the test builds, hub downloads from a local server, and the Cranfield eval.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::{http, write, TestEnv};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn installed_models() -> PathBuf {
    let dir = repo_root().join("models/cache");
    assert!(
        dir.join("all-minilm-l6-v2-int8/model.onnx").is_file(),
        "the embedding model is not installed; run `bash scripts/test.sh` (or `cargo run -p quarry-cli -- models fetch --defaults`)"
    );
    dir
}

/// Paragraphs on unrelated subjects; none shares a word with the queries below.
fn write_everyday_corpus(docs: &Path) {
    write(
        &docs.join("car.md"),
        "# Fixing a car that will not start\n\nWhen the engine cranks but never fires, check the \
         battery terminals for corrosion, listen for the fuel pump, and pull a spark plug to see \
         whether it sparks. A mechanic measures the battery voltage before replacing the starter motor.\n",
    );
    write(
        &docs.join("bread.md"),
        "# Baking sourdough at home\n\nFeed the starter the night before, mix flour, water and salt, \
         fold the dough every half hour, then let it rise slowly in the fridge before baking it in a hot oven.\n",
    );
    write(
        &docs.join("stars.md"),
        "# How stars shine\n\nNuclear fusion in the core of a star turns hydrogen into helium. The \
         energy released travels outwards for thousands of years before it leaves the surface as light.\n",
    );
    write(
        &docs.join("tomatoes.md"),
        "# Growing tomatoes\n\nTomato plants want full sun, deep watering twice a week and a stake \
         to climb. Pinch out the side shoots so the plant puts its strength into the fruit.\n",
    );
}

fn hit_names(v: &serde_json::Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            Path::new(h["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn hybrid_search_finds_the_meaning_that_lexical_search_misses() {
    installed_models();
    let env = TestEnv::new();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    let out = env.command(&["index"]).output().unwrap();
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("embedded"));
    let status = env.status();
    assert_eq!(
        status["embeddings"][0]["embedded"],
        status["embeddings"][0]["total"]
    );
    assert_eq!(status["embeddings"][0]["model"], "all-minilm-l6-v2-int8");

    // No document contains "automobile" or "troubleshooting": BM25 has nothing.
    let lexical = env.run(&["search", "--mode", "lexical", "automobile troubleshooting"]);
    assert_eq!(
        lexical.status.code(),
        Some(1),
        "lexical search found something"
    );
    for mode in ["vector", "hybrid"] {
        let v = env.json(&["search", "--mode", mode, "automobile troubleshooting"]);
        assert_eq!(hit_names(&v)[0], "car.md", "{mode}: {v}");
        assert!(v["hits"][0]["scores"]["similarity"].as_f64().unwrap() > 0.2);
        assert!(v["hits"][0]["scores"]["lexical_rank"].is_null());
    }
    let v = env.json(&[
        "search",
        "--mode",
        "vector",
        "where does starlight come from",
    ]);
    assert_eq!(hit_names(&v)[0], "stars.md");
    // Hybrid keeps exact keyword matches on top and explains every stage.
    let v = env.json(&["search", "sourdough"]);
    assert_eq!(hit_names(&v)[0], "bread.md");
    let hit = &v["hits"][0]["scores"];
    assert_eq!(hit["lexical_rank"], 1);
    assert!(hit["vector_rank"].as_u64().is_some());
    let stages: Vec<&str> = v["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["lexical", "vector", "pages", "fusion", "fold"]);
    let explained = env.ok(&["search", "--explain", "sourdough"]);
    assert!(explained.contains("lexical #1"), "{explained}");
    assert!(explained.contains("stages (hybrid mode)"), "{explained}");
    // Settings are validated by name.
    let bad = env.run(&[
        "search",
        "x",
        "--settings",
        r#"{"fusion":{"method":"rrf","k":0}}"#,
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`fusion.k`"));
    // RRF and a weighted query variant stream are accepted and still rank the car first.
    let v = env.json(&[
        "search",
        "automobile troubleshooting",
        "--settings",
        r#"{"fusion":{"method":"rrf","k":60},"freshness":{"half_life_days":30,"weight":0.2}}"#,
    ]);
    assert_eq!(hit_names(&v)[0], "car.md");
    assert!(v["hits"][0]["scores"]["freshness"].as_f64().unwrap() > 0.99);
}

/// The rerank stage of a search's trace.
fn rerank_stage(v: &serde_json::Value) -> String {
    let trace = v["trace"].as_array().unwrap();
    let stage = trace.iter().find(|t| t["stage"] == "rerank");
    stage.unwrap_or_else(|| panic!("no rerank stage: {v:#}"))["detail"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_deep_search_has_the_chat_model_judge_the_candidates_when_the_first_search_is_unsure() {
    installed_models();
    let env = TestEnv::new();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    env.ok(&["index"]);
    let small = "smollm2-135m-instruct-q4_1";
    let query = "automobile troubleshooting";

    // Always, no time budget: the real model reads every candidate and its judgement is
    // blended by position.
    let settings = format!(r#"{{"rerank": {{"model": "{small}", "candidates": 10}}}}"#);
    let v = env.json(&["search", query, "--settings", &settings]);
    let detail = rerank_stage(&v);
    let hits = v["hits"].as_array().unwrap();
    assert!(
        detail.starts_with(&format!(
            "chat model {small} judged {} of {}",
            hits.len(),
            hits.len()
        )),
        "{detail}"
    );
    assert!(detail.contains("certainty"), "{detail}");
    for pair in hits.windows(2) {
        assert!(
            pair[0]["score"].as_f64() >= pair[1]["score"].as_f64(),
            "{v:#}"
        );
    }
    for hit in hits {
        let judged = hit["scores"]["judged"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&judged), "{hit:#}");
        assert_eq!(hit["score"], hit["scores"]["rerank"]);
    }
    let certainty = v["certainty"]["value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&certainty), "{v:#}");
    // `--deep always` is the same judge within its 2.5 s budget (on a busy machine it may
    // leave the last candidates unjudged, and says so).
    let deep = env.json(&["search", query, "--deep", "always", "--rerank", small]);
    let detail = rerank_stage(&deep);
    assert!(
        detail.starts_with(&format!("chat model {small} judged")),
        "{detail}"
    );
    assert!(
        !detail.contains("unjudged") || detail.contains("left unjudged by the time budget"),
        "{detail}"
    );

    // Unsure only: a search at least this sure is left as it was, and costs no model time.
    let sure = env.json(&[
        "search",
        query,
        "--settings",
        &format!(r#"{{"rerank": {{"model": "{small}", "when": "unsure", "unsure_below": 0.0}}}}"#),
    ]);
    assert!(
        rerank_stage(&sure).starts_with("skipped: the first search is sure"),
        "{sure:#}"
    );
    assert!(sure["hits"][0]["scores"]["judged"].is_null());
    assert_eq!(hit_names(&sure)[0], "car.md");

    // A chat model that is not installed is named, with the command that installs it; the
    // search still answers from its first ranking.
    let missing = env.json(&[
        "search",
        query,
        "--deep",
        "always",
        "--rerank",
        "qwen2.5-3b-instruct-q4_k_m",
    ]);
    let issue = &missing["readiness"][0];
    assert_eq!(issue["component"], "reranker", "{missing:#}");
    assert!(
        issue["message"]
            .as_str()
            .unwrap()
            .contains("quarry models fetch qwen2.5-3b-instruct-q4_k_m"),
        "{missing:#}"
    );
    assert_eq!(hit_names(&missing)[0], "car.md");
}

#[test]
fn the_embedding_lane_resumes_and_follows_every_change() {
    installed_models();
    let env = TestEnv::new();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    env.ok(&["index", "--no-embed"]);
    let status = env.status();
    assert_eq!(status["embeddings"][0]["embedded"], 0);
    // Full text works at once; a vector-only search says why it cannot run yet.
    assert_eq!(env.search_paths("sourdough").len(), 1);
    let vector = env.run(&["search", "--mode", "vector", "bread"]);
    assert_eq!(vector.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&vector.stderr).contains("no vectors yet"));
    // A hybrid search degrades to lexical and says so.
    let hybrid = env.run(&["search", "sourdough"]);
    assert!(hybrid.status.success());
    assert!(String::from_utf8_lossy(&hybrid.stderr).contains("no vectors yet"));

    env.ok(&["index"]);
    let embedded = |env: &TestEnv| {
        let s = env.status();
        (
            s["embeddings"][0]["embedded"].as_i64().unwrap(),
            s["embeddings"][0]["total"].as_i64().unwrap(),
        )
    };
    let (done, total) = embedded(&env);
    assert_eq!(done, total);
    assert!(total >= 4);
    // An index run with nothing new embeds nothing.
    let again = env.command(&["index"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains("embedded"));

    // A changed file: its old vectors go with its old chunks, its new text is embedded.
    write(
        &env.docs().join("tomatoes.md"),
        "# Keeping bees\n\nA hive needs a sheltered spot, a water source nearby and an inspection \
         every week in spring to spot a queen cell before the colony swarms.\n",
    );
    write(&env.docs().join("stars.md"), "");
    std::fs::remove_file(env.docs().join("stars.md")).unwrap();
    env.ok(&["index"]);
    let (done, total) = embedded(&env);
    assert_eq!(done, total);
    let v = env.json(&["search", "--mode", "vector", "honey insects", "-n", "3"]);
    assert_eq!(hit_names(&v)[0], "tomatoes.md");
    assert!(!hit_names(&v).contains(&"stars.md".to_string()));
}

/// A second embedding model: the MiniLM files under another id.
fn import_minilm_copy(env: &TestEnv, models: &Path) {
    let copy = env.data.path().join("minilm-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for f in [
        "model.onnx",
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(
            installed_models().join("all-minilm-l6-v2-int8").join(f),
            copy.join(f),
        )
        .unwrap();
    }
    let out = env
        .command(&[
            "models",
            "import",
            copy.to_str().unwrap(),
            "--kind",
            "embedding",
        ])
        .env("QUARRY_MODELS_DIR", models_path(models))
        .output()
        .unwrap();
    assert_ok(&out);
}

fn models_path(first: &Path) -> std::ffi::OsString {
    std::env::join_paths([first.to_path_buf(), installed_models()]).unwrap()
}

/// Runs quarry with `models` searched (and installed into) before the checkout's models.
fn runner<'a>(env: &'a TestEnv, models: &'a Path) -> impl Fn(&[&str]) -> std::process::Output + 'a {
    move |args| {
        env.command(args)
            .env("QUARRY_MODELS_DIR", models_path(models))
            .output()
            .unwrap()
    }
}

/// Fails the test, showing stderr, unless the command succeeded.
fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A library of `corpus` in `collection`, indexed and embedded, with its own models folder
/// searched (and installed into) first.
fn indexed_library(corpus: fn(&Path), collection: &str) -> (TestEnv, tempfile::TempDir) {
    let env = TestEnv::new();
    let models = tempfile::tempdir().unwrap();
    corpus(env.docs());
    env.add_docs_source(collection);
    let out = runner(&env, models.path())(&["index"]);
    assert_ok(&out);
    (env, models)
}

#[test]
fn switching_models_re_embeds_while_the_old_vectors_serve_and_mismatches_are_refused() {
    let (env, models) = indexed_library(write_everyday_corpus, "everyday");
    let run = runner(&env, models.path());
    import_minilm_copy(&env, models.path());
    let listed = String::from_utf8_lossy(&run(&["models", "list"]).stdout).into_owned();
    assert!(listed.contains("minilm-copy"), "{listed}");

    let mismatch = run(&["search", "car", "--model", "minilm-copy"]);
    assert_eq!(mismatch.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&mismatch.stderr);
    assert!(stderr.contains("error[model_mismatch]"), "{stderr}");
    assert!(stderr.contains("all-minilm-l6-v2-int8"), "{stderr}");

    assert!(run(&["models", "use", "minilm-copy", "-c", "everyday"])
        .status
        .success());
    let status: serde_json::Value =
        serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["embeddings"][0]["model"], "all-minilm-l6-v2-int8");
    assert_eq!(status["embeddings"][0]["pending_model"], "minilm-copy");
    assert_eq!(status["embeddings"][0]["embedded"], 0);
    // The old vectors keep serving until the new ones are complete.
    let served = run(&[
        "search",
        "--mode",
        "vector",
        "--model",
        "all-minilm-l6-v2-int8",
        "automobile troubleshooting",
        "--json",
    ]);
    assert_ok(&served);
    let v: serde_json::Value = serde_json::from_slice(&served.stdout).unwrap();
    assert_eq!(hit_names(&v)[0], "car.md");

    assert!(run(&["index"]).status.success());
    let status: serde_json::Value =
        serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["embeddings"][0]["model"], "minilm-copy");
    assert!(status["embeddings"][0]["pending_model"].is_null());
    assert_eq!(
        status["embeddings"][0]["embedded"],
        status["embeddings"][0]["total"]
    );
    let now = run(&[
        "search",
        "--mode",
        "vector",
        "--model",
        "minilm-copy",
        "automobile troubleshooting",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&now.stdout).unwrap();
    assert_eq!(hit_names(&v)[0], "car.md");
    assert_eq!(
        run(&["search", "car", "--model", "all-minilm-l6-v2-int8"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn missing_or_corrupt_models_and_runtime_are_clear_errors_and_lose_nothing() {
    installed_models();
    let env = TestEnv::new();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    let empty = tempfile::tempdir().unwrap();
    let with_models = |dirs: std::ffi::OsString, args: &[&str]| {
        env.command(args)
            .env("QUARRY_MODELS_DIR", dirs)
            .env_remove("ORT_DYLIB_PATH")
            .output()
            .unwrap()
    };
    // No model anywhere: full text is indexed, the warning names the fix.
    let out = with_models(empty.path().into(), &["index"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("quarry models fetch all-minilm-l6-v2-int8"),
        "{stderr}"
    );
    assert_eq!(env.search_paths("sourdough").len(), 1);

    // The embedding model present but the runtime library missing.
    let model_only = tempfile::tempdir().unwrap();
    let copy = model_only.path().join("all-minilm-l6-v2-int8");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(installed_models().join("all-minilm-l6-v2-int8")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let out = with_models(model_only.path().into(), &["index"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("runtime_unavailable"), "{stderr}");
    assert!(
        stderr.contains("quarry models fetch onnxruntime"),
        "{stderr}"
    );

    // A truncated model file, found before the good one: named, with the command that fixes it.
    let onnx = copy.join("model.onnx");
    let bytes = std::fs::read(&onnx).unwrap();
    std::fs::write(&onnx, &bytes[..bytes.len() / 2]).unwrap();
    let dirs = std::env::join_paths([model_only.path().to_path_buf(), installed_models()]).unwrap();
    let out = with_models(dirs.clone(), &["search", "--mode", "vector", "bread"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error[model_file_bad]"), "{stderr}");
    assert!(stderr.contains(&onnx.display().to_string()), "{stderr}");
    assert!(stderr.contains("truncated"), "{stderr}");
    // Same size, flipped bytes: the checksum catches it.
    let mut flipped = bytes.clone();
    flipped[1000] ^= 0xff;
    std::fs::write(&onnx, &flipped).unwrap();
    let out = with_models(dirs, &["index"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sha256"));
    // Nothing indexed was lost along the way.
    assert_eq!(env.status()["stats"]["documents_indexed"], 4);
}

/// Builds the tiny cross-encoder with the `onnx` package (scripts/setup.sh installs it into
/// target/pydeps).
fn build_tiny_cross_encoder(out: &Path, words: &[&str]) {
    let pythonpath = std::env::var_os("QUARRY_TEST_PYTHONPATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/pydeps"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_cross_encoder.py");
    let status = Command::new("python3")
        .arg(&script)
        .arg(installed_models().join("all-minilm-l6-v2-int8"))
        .arg(out)
        .args(words)
        .env("PYTHONPATH", &pythonpath)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "building the test cross-encoder failed; is the onnx package in {}? (scripts/setup.sh installs it)",
        pythonpath.display()
    );
}

fn write_stone_corpus(docs: &Path) {
    write(
        &docs.join("one.md"),
        "# Stone walls\n\nA dry stone wall of granite and slate holds without mortar.\n",
    );
    write(
        &docs.join("three.md"),
        "# Granite\n\nGranite, granite everywhere: the granite quarry ships stone blocks.\n",
    );
    write(
        &docs.join("none.md"),
        "# Slate roofs\n\nSlate stone splits into thin sheets for roofs.\n",
    );
}

#[test]
fn reranking_runs_a_real_cross_encoder_and_says_when_one_is_missing() {
    let (env, models) = indexed_library(write_stone_corpus, "stone");
    let run = runner(&env, models.path());
    let built = env.data.path().join("granite-counter");
    build_tiny_cross_encoder(&built, &["granite"]);
    let out = run(&[
        "models",
        "import",
        built.to_str().unwrap(),
        "--kind",
        "reranker",
    ]);
    assert_ok(&out);

    let out = run(&["search", "stone", "--rerank", "granite-counter", "--json"]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hit_names(&v), ["three.md", "one.md", "none.md"]);
    let rerank: Vec<f64> = v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["scores"]["rerank"].as_f64().unwrap())
        .collect();
    // The model counts "granite" tokens (the title line is not part of the chunk text here
    // only when the chunker puts it there; either way the order and the zero are fixed).
    assert!(
        rerank[0] >= 4.0 && rerank[1] >= 1.0 && rerank[2] == 0.0,
        "{rerank:?}"
    );
    assert_eq!(
        v["trace"].as_array().unwrap().last().unwrap()["stage"],
        "rerank"
    );
    // A minimum rerank score drops what the cross-encoder rejects.
    let out = run(&[
        "search",
        "stone",
        "--settings",
        r#"{"rerank":{"model":"granite-counter","candidates":10,"min_score":0.5}}"#,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hit_names(&v), ["three.md", "one.md"]);

    // A reranker that is not installed: results still come, and the trace and readiness say so.
    let out = run(&["search", "stone", "--rerank", "bge-reranker-base", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"].as_array().unwrap().len(), 3);
    assert_eq!(v["readiness"][0]["component"], "reranker");
    assert!(v["readiness"][0]["message"]
        .as_str()
        .unwrap()
        .contains("quarry models fetch bge-reranker-base"));
    let detail = v["trace"].as_array().unwrap().last().unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.starts_with("NOT APPLIED"), "{detail}");
}

/// A minimal hub: serves files under `/{repo}/resolve/{revision}/{path}` with `X-Linked-Etag`
/// (the sha256, as the hub sends for LFS files) and byte ranges. The first request for each
/// file in `cut_first` is cut off halfway.
struct FakeHub {
    url: String,
    ranges_seen: Arc<Mutex<Vec<String>>>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn fake_hub(
    files: HashMap<String, Vec<u8>>,
    cut_first: Vec<String>,
    wrong_hash_for: Option<String>,
) -> FakeHub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let ranges_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges_seen.clone();
    std::thread::spawn(move || {
        let mut cut = cut_first;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some(request) = http::read_request(&stream) else {
                continue;
            };
            let path = request.path.clone();
            let mut range_start = 0usize;
            if let Some(v) = request.header("range") {
                let v = v.to_ascii_lowercase();
                if let Some(v) = v.strip_prefix("bytes=") {
                    seen.lock().unwrap().push(format!("{path} {v}"));
                    range_start = v.trim_end_matches('-').parse().unwrap_or(0);
                }
            }
            let Some(body) = files.get(&path) else {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            };
            let mut hash = sha256_hex(body);
            if wrong_hash_for.as_deref() == Some(path.as_str()) {
                hash = "0".repeat(64);
            }
            let part = &body[range_start.min(body.len())..];
            let status = if range_start > 0 {
                "206 Partial Content"
            } else {
                "200 OK"
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nX-Linked-Etag: \"{hash}\"\r\nConnection: close\r\n\r\n",
                part.len()
            );
            let _ = stream.write_all(head.as_bytes());
            if let Some(i) = cut.iter().position(|c| c == &path) {
                cut.remove(i);
                let _ = stream.write_all(&part[..part.len() / 2]);
                let _ = stream.flush();
                continue; // dropped: the client sees a short body
            }
            let _ = stream.write_all(part);
        }
    });
    FakeHub { url, ranges_seen }
}

#[test]
fn hub_downloads_resume_after_a_cut_and_are_checked_against_the_hub_hash() {
    let env = TestEnv::new();
    let built = env.data.path().join("built");
    build_tiny_cross_encoder(&built, &["granite"]);
    let base = "/Xenova/ms-marco-MiniLM-L-6-v2/resolve/main";
    let mut files = HashMap::new();
    files.insert(
        format!("{base}/onnx/model.onnx"),
        std::fs::read(built.join("model.onnx")).unwrap(),
    );
    for f in [
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        files.insert(format!("{base}/{f}"), std::fs::read(built.join(f)).unwrap());
    }
    let models = tempfile::tempdir().unwrap();
    let fetch = |hub: &FakeHub| {
        env.command(&["models", "fetch", "ms-marco-minilm-l6-v2"])
            .env("QUARRY_MODELS_DIR", models_path(models.path()))
            .env("QUARRY_HF_ENDPOINT", &hub.url)
            .output()
            .unwrap()
    };

    // A wrong hash from the server: refused, nothing installed.
    let bad = fake_hub(
        files.clone(),
        vec![],
        Some(format!("{base}/tokenizer.json")),
    );
    let out = fetch(&bad);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    assert!(!models.path().join("ms-marco-minilm-l6-v2").exists());

    // Cut off halfway through the model: the first attempt fails and says to resume…
    let hub = fake_hub(files.clone(), vec![format!("{base}/onnx/model.onnx")], None);
    let out = fetch(&hub);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("resume"), "{stderr}");
    // …and the second continues from where it stopped.
    let out = fetch(&hub);
    assert_ok(&out);
    let ranges = hub.ranges_seen.lock().unwrap().clone();
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    assert!(
        ranges[0].starts_with(&format!("{base}/onnx/model.onnx ")),
        "{ranges:?}"
    );
    let installed = models.path().join("ms-marco-minilm-l6-v2");
    assert_eq!(
        std::fs::read(installed.join("model.onnx")).unwrap(),
        std::fs::read(built.join("model.onnx")).unwrap()
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(installed.join("quarry-model.json")).unwrap())
            .unwrap();
    assert_eq!(record["origin"], "hub:Xenova/ms-marco-MiniLM-L-6-v2@main");

    // The downloaded reranker works.
    write_stone_corpus(env.docs());
    env.add_docs_source("stone");
    let run = runner(&env, models.path());
    assert!(run(&["index"]).status.success());
    let out = run(&["search", "stone", "--rerank", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hit_names(&v)[0], "three.md");
    assert!(run(&["models", "remove", "ms-marco-minilm-l6-v2"])
        .status
        .success());
    assert!(!installed.exists());
}

fn cranfield() -> PathBuf {
    let shared = repo_root().join("../shared/data/cranfield");
    if shared.join("corpus.jsonl").is_file() {
        return shared;
    }
    repo_root().join("tests/data/cranfield")
}

#[test]
fn cranfield_eval_scores_every_mode_well_above_chance() {
    installed_models();
    let env = TestEnv::new();
    let work = env.data.path().join("eval");
    let out = env
        .command(&[
            "eval",
            "--beir",
            cranfield().to_str().unwrap(),
            "--keep",
            work.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert_ok(&out);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let score = |name: &str, metric: &str| {
        rows.iter().find(|r| r["name"] == name).unwrap()[metric]
            .as_f64()
            .unwrap()
    };
    eprintln!("{}", serde_json::to_string_pretty(&rows).unwrap());
    assert_eq!(rows[0]["queries"], 225);
    // Random ranking of 1,400 documents scores about 0.01 nDCG@10.
    for mode in ["lexical", "vector", "hybrid"] {
        assert!(score(mode, "ndcg_at_10") > 0.25, "{mode}: {rows:?}");
        assert!(score(mode, "recall_at_100") > 0.5, "{mode}: {rows:?}");
        assert!(score(mode, "mrr_at_10") > 0.3, "{mode}: {rows:?}");
    }
    // The default fusion is at least as good as the better single stream.
    let best_single = score("lexical", "ndcg_at_10").max(score("vector", "ndcg_at_10"));
    assert!(score("hybrid", "ndcg_at_10") >= best_single, "{rows:?}");
}

/// `quarry eval --json` rows of `set` with `args`, by name.
fn eval_rows(env: &TestEnv, set: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let work = env.data.path().join("eval");
    let mut all = vec![
        "eval",
        "--beir",
        set.to_str().unwrap(),
        "--keep",
        work.to_str().unwrap(),
        "--json",
    ];
    all.extend_from_slice(args);
    let out = env.command(&all).output().unwrap();
    assert_ok(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ndcg(rows: &[serde_json::Value], name: &str) -> f64 {
    rows.iter().find(|r| r["name"] == name).unwrap()["ndcg_at_10"]
        .as_f64()
        .unwrap()
}

#[test]
fn long_pages_rank_at_least_as_well_as_whole_document_bm25_on_the_toolchain_books() {
    let set = repo_root().join("tests/data/rust-docs-qa");
    // The set judges pages of the Cargo Book and the Rust Reference that ship with the
    // toolchain; a toolchain without them (or with other pages) cannot run it.
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let html = PathBuf::from(String::from_utf8(sysroot.stdout).unwrap().trim())
        .join("share/doc/rust/html");
    let qrels = std::fs::read_to_string(set.join("qrels/test.tsv")).unwrap();
    for line in qrels.lines().skip(1) {
        let page = line.split('\t').nth(1).unwrap();
        assert!(
            html.join(page).is_file(),
            "{page} is not in {}: install rustup's rust-docs component",
            html.display()
        );
    }
    let env = TestEnv::new();
    let corpus = env.data.path().join("corpus.jsonl");
    let rows = eval_rows(
        &env,
        &set,
        &[
            "--mode",
            "lexical",
            "--baseline",
            "--export-corpus",
            corpus.to_str().unwrap(),
        ],
    );
    eprintln!("{}", serde_json::to_string_pretty(&rows).unwrap());
    assert_eq!(rows[0]["queries"], 72);
    // Tuned on one half, reported on the other: the halves share no judged page.
    let group = |name: &str| {
        rows[1]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap_or_else(|| panic!("no group {name}: {rows:?}"))
            .clone()
    };
    assert_eq!(group("tuning")["queries"], 36);
    assert_eq!(group("held_out")["queries"], 36);
    assert_eq!(group("held_out/no_overlap")["queries"], 12);
    // The text a baseline outside Quarry ranks: one line per judged page's document.
    let exported = std::fs::read_to_string(&corpus).unwrap();
    let ids: Vec<String> = exported
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 230, "{exported:.300}");
    assert!(ids.iter().any(|id| id == "cargo/reference/profiles.html"));
    assert!(ids.iter().any(|id| id == "cargo/print.html"));
    let by_fragment = eval_rows(
        &env,
        &set,
        &[
            "--mode",
            "lexical",
            "--settings",
            r#"{"page_evidence": null}"#,
        ],
    );
    // Measured 0.641 against 0.634 for whole-document BM25 and 0.469 ranking a page by its
    // best chunk alone.
    assert!(
        ndcg(&rows, "lexical") >= ndcg(&rows, "document bm25") - 0.01,
        "{rows:?}"
    );
    assert!(
        ndcg(&rows, "lexical") > ndcg(&by_fragment, "lexical") + 0.1,
        "{rows:?} {by_fragment:?}"
    );
}

#[test]
fn identifier_queries_find_their_one_exact_match_first_in_hybrid_search() {
    installed_models();
    let env = TestEnv::new();
    let set = repo_root().join("tests/data/identifiers");
    let eval = |settings: &str| {
        let out = env
            .command(&[
                "eval",
                "--beir",
                set.to_str().unwrap(),
                "--mode",
                "lexical,hybrid",
                "--settings",
                settings,
                "--keep",
                env.data.path().join("eval").to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap();
        assert_ok(&out);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        eprintln!("{settings}: {}", serde_json::to_string(&rows).unwrap());
        rows
    };
    let mrr = |rows: &[serde_json::Value], mode: &str| {
        rows.iter().find(|r| r["name"] == mode).unwrap()["mrr_at_10"]
            .as_f64()
            .unwrap()
    };
    let rows = eval("{}");
    assert_eq!(rows[0]["queries"], 60);
    // Every query's one document first, in hybrid as in lexical.
    assert_eq!(mrr(&rows, "lexical"), 1.0, "{rows:?}");
    assert_eq!(mrr(&rows, "hybrid"), 1.0, "{rows:?}");
    // Fusion alone, leaning on the vector stream, lets the identical neighbours outrank the
    // match: the set tests something. (At the default even weighting, pages weighed whole,
    // the lexical stream alone carries it: 1.0.)
    let fused_only = eval(
        r#"{"identifiers_first": false, "fusion": {"method": "weighted", "lexical_weight": 0.3}}"#,
    );
    assert!(mrr(&fused_only, "hybrid") < 1.0, "{fused_only:?}");
}

/// An OpenAI-compatible embeddings server on loopback whose "model" counts words: each
/// lower-case word adds one to a slot picked by its hash (64 numbers a vector).
fn word_count_server() -> String {
    fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; 64];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 3)
        {
            let hash = word
                .to_lowercase()
                .bytes()
                .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
            v[hash as usize % 64] += 1.0;
        }
        v
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some(request) = http::read_request(&stream) else {
                continue;
            };
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            let data: Vec<serde_json::Value> = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, t)| serde_json::json!({"index": i, "embedding": vector(t.as_str().unwrap())}))
                .collect();
            let answer =
                serde_json::json!({"data": data, "usage": {"prompt_tokens": 5}}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    url
}

#[test]
fn a_collection_embedded_by_a_server_is_searched_by_its_vectors() {
    let env = TestEnv::new();
    let models = tempfile::tempdir().unwrap();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    let run = runner(&env, models.path());
    let url = word_count_server();

    let out = run(&[
        "models", "serve", "words", "--url", &url, "--model", "w", "--batch", "3",
    ]);
    assert_ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("registered words (64 numbers a vector)"),
        "{said}"
    );
    let listed = String::from_utf8_lossy(&run(&["models", "list"]).stdout).into_owned();
    assert!(
        listed.contains(&format!("served:openai {url} (w)")),
        "{listed}"
    );
    // A second model under the same id would mix its vectors with the first's.
    let again = run(&["models", "serve", "words", "--url", &url, "--model", "w2"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already installed"));
    // Nothing listening: said at once, with the address.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let refused = run(&["models", "serve", "gone", "--url", &nowhere, "--model", "w"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&nowhere) && stderr.contains("is the server running?"),
        "{stderr}"
    );

    assert_ok(&run(&["models", "use", "words", "-c", "everyday"]));
    assert_ok(&run(&["index"]));
    let status: serde_json::Value =
        serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["embeddings"][0]["model"], "words");
    assert_eq!(
        status["embeddings"][0]["embedded"],
        status["embeddings"][0]["total"]
    );
    let found = run(&[
        "search",
        "--mode",
        "vector",
        "feed the starter, then flour, water and salt",
        "--json",
    ]);
    assert_ok(&found);
    let v: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert_eq!(hit_names(&v)[0], "bread.md");
}

/// ONNX Runtime with its CUDA execution provider and none of NVIDIA's libraries (the pinned
/// `onnxruntime-gpu` wheel's own files), which scripts/test.sh puts in `target/ort-cuda`.
fn runtime_with_cuda() -> PathBuf {
    let library = repo_root().join("target/ort-cuda/libonnxruntime.so.1.31.1");
    assert!(
        library.is_file(),
        "{} is missing; run `bash scripts/ort-cuda-for-tests.sh target/ort-cuda`",
        library.display()
    );
    library
}

/// The top hit's similarity for `query` by vector search, with `env_vars` set.
fn top_similarity(env: &TestEnv, query: &str, env_vars: &[(&str, &Path)]) -> (String, f64) {
    let mut cmd = env.command(&["search", "--mode", "vector", "--json", query]);
    for (name, value) in env_vars {
        cmd.env(name, value);
    }
    let out = cmd.output().unwrap();
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let similarity = v["hits"][0]["scores"]["similarity"].as_f64().unwrap();
    (hit_names(&v)[0].clone(), similarity)
}

#[test]
fn a_runtime_with_cuda_and_no_usable_gpu_embeds_on_the_cpu_and_says_why() {
    installed_models();
    let cuda_runtime = runtime_with_cuda();
    let env = TestEnv::new();
    write_everyday_corpus(env.docs());
    env.add_docs_source("everyday");
    let with_cuda = [("ORT_DYLIB_PATH", cuda_runtime.as_path())];

    // `models list` says the runtime offers CUDA and that the CPU stands behind it.
    let mut list = env.command(&["models", "list"]);
    list.env("ORT_DYLIB_PATH", &cuda_runtime);
    let listed = list.output().unwrap();
    assert_ok(&listed);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("embedding models run on CUDA 0")
            && listed.contains("the CPU if the GPU cannot be used"),
        "{listed}"
    );

    // Indexing tries the GPU, cannot load the CUDA provider's libraries here, and embeds every
    // chunk on the CPU, saying so in its progress (stdout) and its warning (stderr).
    let mut index = env.command(&["index", "--progress", "json"]);
    index.env("ORT_DYLIB_PATH", &cuda_runtime);
    let out = index.output().unwrap();
    assert_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("embedding on the CPU: the GPU could not be used")
            && stderr.contains("libonnxruntime_providers_cuda.so"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last_embedding = stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "embedding")
        .unwrap_or_else(|| panic!("no embedding progress: {stdout}"));
    assert_eq!(last_embedding["device"], "CPU", "{last_embedding}");
    assert_eq!(last_embedding["done"], true);
    let status = env.status();
    assert_eq!(
        status["embeddings"][0]["embedded"],
        status["embeddings"][0]["total"]
    );

    // A query embedded through the CUDA build on the CPU matches the CPU build's.
    let (top, on_cpu_build) = top_similarity(&env, "automobile troubleshooting", &[]);
    let (top_cuda, on_cuda_build) = top_similarity(&env, "automobile troubleshooting", &with_cuda);
    assert_eq!((top.as_str(), top_cuda.as_str()), ("car.md", "car.md"));
    assert!(
        (on_cpu_build - on_cuda_build).abs() < 1e-3,
        "{on_cpu_build} vs {on_cuda_build}"
    );

    // Asked for by name, CUDA is not silently replaced: the error names the setting, on
    // either build.
    for runtime in [None, Some(cuda_runtime.as_path())] {
        let mut search = env.command(&["search", "--mode", "vector", "automobile"]);
        search.env("QUARRY_EMBED_DEVICE", "cuda");
        if let Some(runtime) = runtime {
            search.env("ORT_DYLIB_PATH", runtime);
        }
        let out = search.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("QUARRY_EMBED_DEVICE"), "{stderr}");
        let why = if runtime.is_some() {
            "CUDA device 0 cannot run the model"
        } else {
            "has no CUDA execution provider"
        };
        assert!(stderr.contains(why), "{stderr}");
    }
    let mut bad = env.command(&["search", "--mode", "vector", "automobile"]);
    bad.env("QUARRY_EMBED_DEVICE", "tpu");
    let out = bad.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("`tpu` is not `auto`, `cpu`, `cuda`"),
        "{stderr}"
    );
}
