//! `quarry mcp` driven by a real MCP client: the official Python SDK (`mcp`, installed into
//! `target/pydeps-mcp` by scripts/test.sh) runs `tests/mcp_client.py` against the real binary
//! over stdio and over Streamable HTTP, on the demo corpus with the real embedding model. The
//! tests fail, never skip, when the SDK or the model is missing.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

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
    assert_eq!(out.matches("ok: ").count(), 15, "{out}");

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
    address: SocketAddr,
    /// What it has written to stderr, line by line.
    log: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    fn start(env: &TestEnv) -> HttpServer {
        HttpServer::start_with(env, "127.0.0.1:0", &[], None)
    }

    /// Listens on `address` with `extra` arguments (the hidden limits), its open-file limit
    /// lowered to `open_files` when given.
    fn start_with(
        env: &TestEnv,
        address: &str,
        extra: &[&str],
        open_files: Option<u64>,
    ) -> HttpServer {
        let mut args = vec!["mcp", "--http", address];
        args.extend(extra);
        let mut command = env.command(&args);
        command.env_remove("QUARRY_KEY").stderr(Stdio::piped());
        if let Some(open_files) = open_files {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: open_files,
                        rlim_max: open_files,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (found, url) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("quarry mcp: listening on ") {
                    let _ = found.send(url.to_string());
                }
                eprintln!("server: {}", line.chars().take(300).collect::<String>());
                kept.lock().unwrap().push(line);
            }
        });
        let url: String = url
            .recv_timeout(Duration::from_secs(30))
            .expect("the server says where it listens");
        let address = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap();
        HttpServer {
            child,
            url,
            address,
            log,
        }
    }

    /// The log lines so far that contain `text`.
    fn logged(&self, text: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
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
    assert_eq!(out.matches("ok: ").count(), 16, "{out}");
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

// ---- issue 38: the HTTP server against local processes ----------------------------------------

/// An HTTP response read whole from a connection of its own.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// The JSON-RPC message answering `id` in an SSE or JSON body.
    fn message(&self, id: u64) -> Option<Value> {
        if let Ok(message) = serde_json::from_str::<Value>(&self.body) {
            return Some(message);
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == id)
    }
}

/// POSTs `body` to `/mcp` with `headers` on a connection of its own.
fn post(address: SocketAddr, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn initialize_body(client: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": client, "version": "1.0"}}})
    .to_string()
}

/// `initialize` with `key` (and `X-Quarry-User: user`) from `client`.
fn initialize(address: SocketAddr, key: Option<&str>, user: Option<&str>, client: &str) -> Answer {
    let bearer = key.map(|k| format!("Bearer {k}"));
    let mut headers = Vec::new();
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    if let Some(user) = user {
        headers.push(("X-Quarry-User", user));
    }
    post(address, &headers, &initialize_body(client))
}

/// An MCP session opened with `key` over raw HTTP.
struct RawSession {
    address: SocketAddr,
    bearer: String,
    id: String,
}

impl RawSession {
    fn open(address: SocketAddr, key: &str, client: &str) -> RawSession {
        let answer = initialize(address, Some(key), None, client);
        assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
        let session = RawSession {
            address,
            bearer: format!("Bearer {key}"),
            id: answer.header("mcp-session-id").expect("a session id"),
        };
        let notified = session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        assert_eq!(notified.status, 202, "{}", notified.body);
        session
    }

    fn send(&self, body: &str) -> Answer {
        post(
            self.address,
            &[
                ("Authorization", &self.bearer),
                ("Mcp-Session-Id", &self.id),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            body,
        )
    }

    /// `tools/list`: its answer, or the HTTP status when there is none (404: session gone).
    fn list_tools(&self) -> Result<Value, u16> {
        let answer =
            self.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).to_string());
        answer.message(7).ok_or(answer.status)
    }
}

/// Keyless `initialize` opened sessions (about 100 KiB each, kept five minutes, unlimited):
/// now every one is refused before the SDK sees it, and sessions are capped per key (a new one
/// closes the key's oldest) and in total.
#[test]
fn issue_38_keyless_initialize_opens_no_session_and_sessions_are_capped() {
    let library = mcp_library();
    let env = &library.env;
    let writer = env.json(&["keys", "create", "writer", "--collections", "demo"])["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let server = HttpServer::start_with(
        env,
        "127.0.0.1:0",
        &["--max-sessions", "3", "--max-sessions-per-key", "2"],
        None,
    );
    let started = Instant::now();
    for _ in 0..300 {
        let answer = initialize(server.address, None, None, "flood");
        assert_eq!(answer.status, 401, "{}\n{}", answer.head, answer.body);
        assert!(answer.header("mcp-session-id").is_none(), "{}", answer.head);
        assert!(answer.body.contains("Bearer"), "{}", answer.body);
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let revoked = initialize(server.address, Some(&library.revoked), None, "gone");
    assert_eq!(revoked.status, 401);
    assert!(revoked.body.contains("revoked"), "{}", revoked.body);

    // Had any keyless attempt opened a session, the total cap (3) would refuse these.
    let first = RawSession::open(server.address, &library.reader, "first");
    let second = RawSession::open(server.address, &library.reader, "second");
    let third = RawSession::open(server.address, &library.reader, "third");
    assert_eq!(
        first.list_tools().unwrap_err(),
        404,
        "the key's oldest session was closed"
    );
    for session in [&second, &third] {
        assert!(session.list_tools().unwrap()["result"]["tools"].is_array());
    }
    let _writer = RawSession::open(server.address, &writer, "writer");
    let refused = initialize(server.address, Some(&writer), None, "one too many");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.header("mcp-session-id").is_none());
    assert!(
        refused.body.contains("as many MCP sessions"),
        "{}",
        refused.body
    );
}

/// A client's name was stored whole in every `turn.start` and audit record: it is bounded
/// once at `initialize` (80 characters, no control characters), and an `initialize` too big
/// to keep for the session's life is refused.
#[test]
fn issue_38_the_client_name_is_bounded_once_at_initialize() {
    let library = mcp_library();
    let env = &library.env;
    let server = HttpServer::start(env);
    let too_big = initialize(
        server.address,
        Some(&library.reader),
        None,
        &"n".repeat(2 << 20),
    );
    assert_eq!(too_big.status, 413, "{}", too_big.body);
    assert!(too_big.header("mcp-session-id").is_none());

    let name = format!("evil\u{1b}]0;pwned\u{7}\u{202e}{}", "x".repeat(60_000));
    let session = RawSession::open(server.address, &library.reader, &name);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "knowledge_search", "arguments": {"query": "How does an LRU cache evict entries?"}}});
    let answer = session.send(&call.to_string());
    let message = answer.message(3).expect("an answer to tools/call");
    assert_eq!(message["result"]["isError"], false, "{message}");

    let bounded = format!("evil]0;pwned{}…", "x".repeat(80 - "evil]0;pwned".len()));
    let audit = mcp_audit(env);
    let detail = audit[0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("client {bounded}, session ")),
        "{detail}"
    );
    let conversations = env.json(&["chat", "--list", "--as", &library.reader]);
    let conversation = conversations
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["title"]
                .as_str()
                .unwrap()
                .starts_with("MCP session of evil")
        })
        .expect("the session's conversation");
    // It is kept apart from the user's own conversations by its client's (bounded) name.
    assert_eq!(conversation["client"], bounded.as_str(), "{conversation:#}");
    let shown = env.json(&[
        "chat",
        "--show",
        conversation["id"].as_str().unwrap(),
        "--as",
        &library.reader,
    ]);
    let start = shown["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "turn.start")
        .expect("a turn.start event");
    assert_eq!(start["detail"]["client"], bounded.as_str());
}

/// Connections that never sent a request stayed open for good: at the cap a new connection
/// closes the one idle the longest, idle ones time out, and a keyed client is served all along.
#[test]
fn issue_38_idle_connections_are_capped_and_time_out() {
    let library = mcp_library();
    let server = HttpServer::start_with(
        &library.env,
        "127.0.0.1:0",
        &["--idle-timeout", "1.5", "--max-connections", "50"],
        None,
    );
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(server.address).unwrap())
        .collect();
    let closed = |idle: &[TcpStream]| {
        idle.iter()
            .filter(|stream| {
                let mut stream: &TcpStream = stream;
                stream.set_nonblocking(true).unwrap();
                // Closed by the server: its end (or a reset) reads; an open one would block.
                !matches!(stream.read(&mut [0u8; 8]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(1);
    while closed(&idle) < 150 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        closed(&idle) >= 150,
        "only {} of 200 idle connections were closed",
        closed(&idle)
    );
    // Served while 50 idle connections are held (it takes the place of one).
    let session = RawSession::open(server.address, &library.reader, "keyed");
    assert!(session.list_tools().is_ok());
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        closed(&idle),
        200,
        "idle connections outlived the idle timeout"
    );
    assert!(session.list_tools().is_ok());
}

/// Out of file descriptors, the accept loop spun a core and logged 150-300 MB/s: it now backs
/// off with one line per episode, and serves again once descriptors are free.
#[test]
fn issue_38_accepting_backs_off_when_descriptors_run_out() {
    let library = mcp_library();
    let server = HttpServer::start_with(
        &library.env,
        "127.0.0.1:0",
        &["--max-connections", "1000"],
        Some(96),
    );
    let held: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(server.address).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let failures = server.logged("accepting a connection failed");
    assert_eq!(failures, 1, "one line per episode");
    assert!(server.log.lock().unwrap().len() < 20, "the log stays quiet");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.logged("accepting connections again") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.logged("accepting connections again"), 1);
    let session = RawSession::open(server.address, &library.reader, "after");
    assert!(session.list_tools().is_ok());
}

/// Every refused key wrote an audit row (~2,100/s, unauthenticated): repeats within a minute
/// count up one row, a client past 10 refusals a minute is answered 429 unchecked (a key that
/// worked before still works), and the log has a retention shown in Status.
#[test]
fn issue_38_refused_keys_are_coalesced_and_throttled() {
    let library = mcp_library();
    let env = &library.env;
    let server = HttpServer::start(env);
    let known = RawSession::open(server.address, &library.reader, "before");
    let guesses = [
        "qk_00000000_0000000000000000000000000000000000000000",
        "qk_11111111_1111111111111111111111111111111111111111",
        "not a key",
    ];
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..500 {
        let answer = initialize(server.address, Some(guesses[i % 3]), None, "guesser");
        *statuses.entry(answer.status).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(401, 10), (429, 490)].into(), "{statuses:?}");
    let refusals = env.json(&["audit", "--action", "auth"]);
    let refusals = refusals.as_array().unwrap();
    assert_eq!(refusals.len(), 3, "{refusals:#?}");
    let counted: i64 = refusals.iter().map(|r| r["count"].as_i64().unwrap()).sum();
    assert_eq!(counted, 10);
    for record in refusals {
        assert!(
            record["detail"]
                .as_str()
                .unwrap()
                .starts_with("from 127.0.0.1 over MCP HTTP: "),
            "{record}"
        );
    }
    // The reader's key worked before the flood: it is checked, and opens a session.
    RawSession::open(server.address, &library.reader, "during");
    assert!(known.list_tools().is_ok());

    let status = env.status();
    let (records, events) = (&status["audit"]["records"], &status["audit"]["events"]);
    assert_eq!(
        events.as_u64().unwrap() - records.as_u64().unwrap(),
        7,
        "{status:#}"
    );
    assert_eq!(status["audit"]["retention"]["days"], 365);
    let set = env.json(&["audit", "retention", "--days", "30", "--records", "100"]);
    assert_eq!(set["retention"], json!({"days": 30, "records": 100}));
    let shown = env.ok(&["status"]);
    assert!(
        shown.contains("keeps 30 days, at most 100 records"),
        "{shown}"
    );
}

/// A service key acted for anyone named in `X-Quarry-User`: now only for the users it was
/// created for, and `keys create` says so plainly.
#[test]
fn issue_38_a_service_key_acts_only_for_its_users() {
    let library = mcp_library();
    let env = &library.env;
    for user in ["alice", "bob"] {
        env.ok(&["keys", "create", user, "--collections", "demo"]);
    }
    let refused = env.run(&["keys", "create", "bot", "--kind", "service"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("acts_for"));
    let created = env.ok(&[
        "keys",
        "create",
        "bot",
        "--kind",
        "service",
        "--acts-for",
        "alice",
    ]);
    assert!(created.contains("acts only for alice"), "{created}");
    let anyone = env.ok(&[
        "keys",
        "create",
        "any",
        "--kind",
        "service",
        "--acts-for",
        "*",
    ]);
    assert!(anyone.contains("acts for ANY user"), "{anyone}");
    let listed = env.ok(&["keys", "list"]);
    assert!(listed.contains("(acts only for alice)"), "{listed}");
    assert!(listed.contains("(acts for ANY user"), "{listed}");
    let bot = env.json(&[
        "keys",
        "create",
        "bot2",
        "--kind",
        "service",
        "--acts-for",
        "alice",
    ])["secret"]
        .as_str()
        .unwrap()
        .to_string();

    let server = HttpServer::start(env);
    let for_alice = initialize(server.address, Some(&bot), Some("alice"), "bot");
    assert_eq!(for_alice.status, 200, "{}", for_alice.body);
    let for_bob = initialize(server.address, Some(&bot), Some("bob"), "bot");
    assert_eq!(for_bob.status, 401, "{}", for_bob.body);
    assert!(
        for_bob.body.contains("may not act for `bob`"),
        "{}",
        for_bob.body
    );
}

/// `--http 127.0.0.2:PORT` started, then refused every request (403): the loopback address it
/// binds is one of its own hosts and origins.
#[test]
fn issue_38_a_server_on_another_loopback_address_accepts_its_own_host() {
    let library = mcp_library();
    let server = HttpServer::start_with(&library.env, "127.0.0.2:0", &[], None);
    assert!(
        server.url.starts_with("http://127.0.0.2:"),
        "{}",
        server.url
    );
    let session = RawSession::open(server.address, &library.reader, "second loopback");
    assert!(session.list_tools().is_ok());
    let origin = format!("http://{}", server.address);
    let bearer = format!("Bearer {}", library.reader);
    let body = initialize_body("page");
    let own = post(
        server.address,
        &[("Authorization", &bearer), ("Origin", &origin)],
        &body,
    );
    assert_eq!(own.status, 200, "{}", own.body);
    let foreign = post(
        server.address,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
        &body,
    );
    assert_eq!(foreign.status, 403);
}
