//! `quarry mcp` driven by a real MCP client: the official Python SDK (`mcp`, installed into
//! `target/pydeps-mcp` by scripts/test.sh) runs `tests/mcp_client.py` against the real binary
//! over stdio and over Streamable HTTP, on the demo corpus with the real embedding model. The
//! tests fail, never skip, when the SDK or the model is missing.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A library with the demo corpus in `demo`, a confidential `private` collection, a key that
/// reads `demo` only, and a revoked key.
struct McpLibrary {
    env: TestEnv,
    reader: String,
    revoked: String,
    private_doc: String,
    notes: PathBuf,
}

fn mcp_library() -> McpLibrary {
    let env = TestEnv::new();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../seeds/demo");
    env.ok(&["source", "add", demo.to_str().unwrap(), "-c", "demo"]);
    let private = env.docs().join("private");
    let vault = private.join("vault.md");
    write(
        &vault,
        "# Vault\n\nThe vault combination is 7-4-1-9, kept by the quartermaster. \
         An LRU cache evicts the least recently used entry, says the quartermaster too.\n",
    );
    // A note in `demo` with a secret in it: the gates redact it before any client sees it.
    let notes = env.docs().join("notes");
    write(
        &notes.join("deploy.md"),
        "# Deploying the heliograph service\n\nThe heliograph deploy uses api_key = sk-live-4f9a8b7c6d5e4f3a2b1c0d9e and restarts nightly.\n",
    );
    env.ok(&["source", "add", notes.to_str().unwrap(), "-c", "demo"]);
    env.ok(&[
        "collection",
        "add",
        "private",
        "--sensitivity",
        "confidential",
    ]);
    env.ok(&["source", "add", private.to_str().unwrap(), "-c", "private"]);
    env.ok(&["index"]);
    let secret_of = |name: &str, collections: &str| {
        let created = env.json(&["keys", "create", name, "--collections", collections]);
        created["secret"].as_str().unwrap().to_string()
    };
    let reader = secret_of("reader", "demo");
    let revoked = secret_of("gone", "demo");
    env.ok(&["keys", "revoke", "gone"]);
    let doc = env.json(&["doc", "show", vault.to_str().unwrap()]);
    let private_doc = doc["document"]["id"].to_string();
    McpLibrary {
        env,
        reader,
        revoked,
        private_doc,
        notes,
    }
}

fn python_deps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-mcp")
}

/// Runs the Python client's scenario and fails, showing its output, unless every check passed.
fn run_client(library: &McpLibrary, scenario: &str, url: Option<&str>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let mut command = Command::new("python3");
    command
        .arg(&script)
        .arg(scenario)
        .env("PYTHONPATH", python_deps())
        .env("QUARRY_BIN", env!("CARGO_BIN_EXE_quarry"))
        .env("QUARRY_DATA_DIR", library.env.data.path())
        .env("READER_KEY", &library.reader)
        .env("REVOKED_KEY", &library.revoked)
        .env("PRIVATE_DOC", &library.private_doc)
        .env("NOTES_DIR", &library.notes)
        .env_remove("QUARRY_KEY");
    if let Some(url) = url {
        command.env("MCP_URL", url);
    }
    let out = command.output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the MCP client failed ({scenario}); is the SDK in {}? (scripts/test.sh installs it)\n--- stdout\n{stdout}\n--- stderr\n{}",
        python_deps().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The audit records of MCP calls.
fn mcp_audit(env: &TestEnv) -> Vec<Value> {
    env.json(&["audit", "--action", "mcp.call"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_real_client_over_stdio_searches_pages_and_reads_within_its_key() {
    let library = mcp_library();
    let out = run_client(&library, "stdio", None);
    assert_eq!(out.matches("ok: ").count(), 12, "{out}");

    let audit = mcp_audit(&library.env);
    assert!(audit.len() >= 8, "{audit:#?}");
    for record in &audit {
        assert_eq!(record["principal"], "reader", "{record:#}");
        let detail = record["detail"].as_str().unwrap();
        assert!(detail.contains("client quarry-test-client"), "{detail}");
    }
    assert!(audit.iter().any(|r| r["target"] == "knowledge_search"));
    assert!(audit
        .iter()
        .any(|r| r["outcome"].as_str().unwrap().starts_with("error")));
}

/// `quarry mcp --http 127.0.0.1:0`, stopped when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(env: &TestEnv) -> HttpServer {
        let mut child = env
            .command(&["mcp", "--http", "127.0.0.1:0"])
            .env_remove("QUARRY_KEY")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (found, url) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("quarry mcp: listening on ") {
                    let _ = found.send(url.to_string());
                }
                eprintln!("server: {line}");
            }
        });
        let url = url
            .recv_timeout(Duration::from_secs(30))
            .expect("the server says where it listens");
        HttpServer { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_client_over_http_needs_a_key_per_request_and_a_local_origin() {
    let library = mcp_library();
    let server = HttpServer::start(&library.env);
    let out = run_client(&library, "http", Some(&server.url));
    assert_eq!(out.matches("ok: ").count(), 13, "{out}");
    assert!(mcp_audit(&library.env).len() >= 8);
}

#[test]
fn the_server_refuses_to_start_without_a_key_with_a_revoked_key_or_off_loopback() {
    let library = mcp_library();
    let env = &library.env;
    let refused = |args: &[&str], key: Option<&str>| {
        let mut command = env.command(args);
        command.env_remove("QUARRY_KEY");
        if let Some(key) = key {
            command.env("QUARRY_KEY", key);
        }
        let out = command.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} should refuse to start"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing but the protocol goes to stdout"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refused(&["mcp"], None).contains("--admin"));
    assert!(refused(&["mcp"], Some(&library.revoked)).contains("revoked"));
    assert!(refused(&["mcp", "--http", "0.0.0.0:0"], None).contains("loopback"));
    assert!(refused(&["mcp", "--mode", "nope"], Some(&library.reader)).contains("no mode `nope`"));
}
