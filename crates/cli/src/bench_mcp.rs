//! `quarry bench mcp PATH`: what an MCP client pays. A `quarry mcp` server (this binary, over
//! stdio, as a desktop client launches it) on a fresh library of `PATH`, driven by a minimal
//! JSON-RPC client: startup to the `initialize` answer, the server's idle RSS, the first
//! `knowledge_search` (model load) and warm calls, beside the same search through
//! `quarry search` processes and inside this process.
//!
//! `--flood` (issue 38): `quarry mcp --http` on loopback, a keyed client calling
//! `knowledge_search` (each call on a new connection, the hard case) before and while other
//! threads make keyless `initialize` attempts and hold idle connections; the client's latency
//! and failures, what the attackers got, and the server's RSS and peak RSS.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_core::auth::{NewKey, PrincipalKind, Scope};
use quarry_core::bench::percentile;
use quarry_core::{IndexOptions, Library, SearchMode, SearchRequest};
use serde_json::{json, Value};

/// Questions cycled through the timed calls (the demo corpus answers them; any corpus is
/// searched all the same).
const QUESTIONS: &[&str] = &[
    "How does an LRU cache evict entries?",
    "What does the borrow checker enforce?",
    "Which mission flew by Pluto?",
    "How do I reset my password?",
    "What is a lifetime in Rust?",
    "When did Voyager 1 launch?",
];

/// A fresh library of `path`, indexed and embedded.
fn fresh_library(path: &Path) -> Result<tempfile::TempDir> {
    let temp = tempfile::tempdir()?;
    let mut library = Library::open(temp.path())?;
    library.add_source(path, "bench", &[], &[])?;
    let mut writer = library.writer()?;
    writer.index_all(&IndexOptions::default(), &|_| {})?;
    writer.embed_pending(&|_| {}, &AtomicBool::new(false))?;
    Ok(temp)
}

/// Runs the bench; `calls` warm calls are timed per method.
pub fn mcp_bench(path: &Path, calls: usize) -> Result<ExitCode> {
    let temp = fresh_library(path)?;
    let exe = std::env::current_exe()?;
    let questions = || QUESTIONS.iter().cycle().take(calls.max(1));

    let started = Instant::now();
    let mut server = Server::start(&exe, temp.path())?;
    let startup_ms = started.elapsed().as_secs_f64() * 1e3;
    let idle_rss = server.rss();
    let (first_ms, _) = server.knowledge_search(QUESTIONS[0])?;
    let mut warm = Vec::new();
    let mut results = 0;
    for question in questions() {
        let (ms, found) = server.knowledge_search(question)?;
        warm.push(ms);
        results += found;
    }
    let warm_rss = server.rss();
    drop(server);

    let mut processes = Vec::new();
    for question in questions().take(10) {
        let started = Instant::now();
        let out = Command::new(&exe)
            .arg("--data-dir")
            .arg(temp.path())
            .args(["search", "--mode", "vector", "-n", "5", question])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() && out.status.code() != Some(1) {
            bail!(
                "quarry search failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        processes.push(started.elapsed().as_secs_f64() * 1e3);
    }

    let library = Library::open(temp.path())?;
    let search = |q: &str| {
        let mut request = SearchRequest::new(q);
        request.settings.mode = SearchMode::Vector;
        request.settings.limit = 5;
        library.search(&request)
    };
    search(QUESTIONS[0])?;
    let mut in_process = Vec::new();
    for question in questions() {
        let started = Instant::now();
        search(question)?;
        in_process.push(started.elapsed().as_secs_f64() * 1e3);
    }

    println!("corpus                      {}", path.display());
    println!("server start → initialized  {startup_ms:.0} ms");
    println!(
        "server idle RSS             {idle_rss} (after initialize), {warm_rss} (after the calls)"
    );
    println!("first knowledge_search      {first_ms:.0} ms (loads the embedding model)");
    println!(
        "knowledge_search via MCP    p50 {:.1} ms, p95 {:.1} ms  ({} calls, {:.1} results each)",
        percentile(&mut warm.clone(), 0.5),
        percentile(&mut warm, 0.95),
        calls.max(1),
        results as f64 / calls.max(1) as f64
    );
    println!(
        "quarry search (a process)   p50 {:.0} ms, p95 {:.0} ms  (vector, top 5, 10 runs)",
        percentile(&mut processes.clone(), 0.5),
        percentile(&mut processes, 0.95)
    );
    println!(
        "the same search in-process  p50 {:.1} ms, p95 {:.1} ms",
        percentile(&mut in_process.clone(), 0.5),
        percentile(&mut in_process, 0.95)
    );
    Ok(ExitCode::SUCCESS)
}

/// `quarry mcp --admin` over pipes, and the requests a client sends.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    fn start(exe: &Path, data_dir: &Path) -> Result<Server> {
        let mut child = Command::new(exe)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["mcp", "--admin", "--mode", "agent"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting quarry mcp")?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut server = Server {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "quarry-bench", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(server)
    }

    /// Milliseconds for one call, and how many results it returned.
    fn knowledge_search(&mut self, query: &str) -> Result<(f64, usize)> {
        let started = Instant::now();
        let response = self.request(
            "tools/call",
            json!({"name": "knowledge_search", "arguments": {"query": query}}),
        )?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let text = response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        if response["result"]["isError"] == true {
            bail!("knowledge_search failed: {text}");
        }
        let found = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v["results"].as_array().map(Vec::len))
            .unwrap_or(0);
        Ok((ms, found))
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("quarry mcp closed its output while answering {method}");
            }
            let message: Value = serde_json::from_str(&line)
                .with_context(|| format!("quarry mcp wrote a line that is not JSON: {line}"))?;
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    bail!("{method} failed: {error}");
                }
                return Ok(message);
            }
        }
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        writeln!(self.stdin, "{message}")?;
        Ok(self.stdin.flush()?)
    }

    /// The server's resident memory.
    fn rss(&self) -> String {
        super::bench::process_status(&self.child.id().to_string(), "VmRSS:")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- --flood: the HTTP server under keyless and idle connections ----------------------------

/// Runs the flood bench: `calls` keyed calls before the flood, then as many as fit while
/// `keyless` keyless attempts and `idle` idle connections are made.
pub fn flood_bench(path: &Path, calls: usize, keyless: usize, idle: usize) -> Result<ExitCode> {
    raise_open_file_limit();
    let temp = fresh_library(path)?;
    let secret = Library::open(temp.path())?
        .create_key(&NewKey {
            name: "bench".into(),
            kind: PrincipalKind::Personal,
            user: None,
            scope: Scope {
                collections: None,
                sensitivity_ceiling: "restricted".into(),
            },
            acts_for: None,
        })?
        .secret;
    let server = HttpServer::start(&std::env::current_exe()?, temp.path())?;
    let mut client = KeyedClient::initialize(server.address, &secret)?;
    client.knowledge_search(QUESTIONS[0])?;
    let mut before = Vec::new();
    for question in QUESTIONS.iter().cycle().take(calls.max(1)) {
        before.push(client.knowledge_search(question)?);
    }
    let rss_before = server.status("VmRSS:");
    let peak_before = server.status("VmHWM:");
    let log_before = server.log_lines.load(Ordering::Relaxed);

    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicBool::new(false));
    let idle_thread = {
        let (address, done, opened) = (server.address, done.clone(), opened.clone());
        std::thread::spawn(move || hold_idle_connections(address, idle, &opened, &done))
    };
    let (tally, attempts) = mpsc::channel();
    let attackers: Vec<_> = (0..4)
        .map(|i| {
            let (address, tally) = (server.address, tally.clone());
            let share = keyless / 4 + usize::from(i < keyless % 4);
            std::thread::spawn(move || {
                for _ in 0..share {
                    let _ = tally.send(keyless_attempt(address));
                }
            })
        })
        .collect();
    drop(tally);
    let mut during = Vec::new();
    let mut failures = Vec::new();
    let finished =
        |attackers: &[std::thread::JoinHandle<()>]| attackers.iter().all(|t| t.is_finished());
    for question in QUESTIONS.iter().cycle() {
        if during.len() + failures.len() >= calls.max(1)
            && finished(&attackers)
            && opened.load(Ordering::Relaxed)
        {
            break;
        }
        match client.knowledge_search(question) {
            Ok(ms) => during.push(ms),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let flood_secs = started.elapsed().as_secs_f64();
    let mut answers: std::collections::BTreeMap<String, usize> = Default::default();
    for answer in attempts {
        *answers.entry(answer).or_default() += 1;
    }
    let rss_during = server.status("VmRSS:");
    // The server accepts (and, at its cap, closes) the last idle connections.
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    let (opened, closed_by_server) = idle_thread.join().expect("the idle thread ends")?;
    let peak = server.status("VmHWM:");
    let log_lines = server.log_lines.load(Ordering::Relaxed) - log_before;

    let summary = |times: &mut Vec<f64>| {
        format!(
            "p50 {:.1} ms, p90 {:.1} ms ({} calls)",
            percentile(&mut times.clone(), 0.5),
            percentile(times, 0.9),
            times.len()
        )
    };
    println!("corpus                        {}", path.display());
    println!("keyed knowledge_search before {}", summary(&mut before));
    println!(
        "keyed knowledge_search during {}, {} failed{}",
        summary(&mut during),
        failures.len(),
        failures
            .first()
            .map(|f| format!(" (first: {f})"))
            .unwrap_or_default()
    );
    println!(
        "keyless attempts              {keyless} (flood over in {flood_secs:.1} s): {}",
        answers
            .iter()
            .map(|(answer, n)| format!("{n} {answer}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "idle connections              {opened} opened, {closed_by_server} closed by the server by the end"
    );
    println!(
        "server RSS                    {rss_before} before, {rss_during} during; peak {peak_before} \
         before, {peak} after"
    );
    println!("server log lines (flood)      {log_lines}");
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The bench holds a socket per idle connection: lift its open-file limit to the hard one.
#[cfg(unix)]
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls read or write only the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(not(unix))]
fn raise_open_file_limit() {}

/// Opens `count` connections that send nothing (then sets `opened`) and holds them until
/// `done`; how many opened, and how many the server had closed by then.
fn hold_idle_connections(
    address: SocketAddr,
    count: usize,
    opened: &AtomicBool,
    done: &AtomicBool,
) -> Result<(usize, usize)> {
    let mut held = Vec::new();
    for _ in 0..count {
        if let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_secs(5)) {
            held.push(stream);
        }
    }
    opened.store(true, Ordering::Relaxed);
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut closed = 0;
    for stream in &mut held {
        stream.set_nonblocking(true)?;
        // A connection the server closed reads its end (or a reset); an open one would block.
        match stream.read(&mut [0u8; 64]) {
            Ok(_) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed += 1,
        }
    }
    Ok((held.len(), closed))
}

/// One keyless `initialize` on a connection of its own: what it got (`HTTP 401`, `a session`,
/// `no connection`…).
fn keyless_attempt(address: SocketAddr) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "flood", "version": "0"}}});
    match post(address, &[], &initialize) {
        Ok(response) if response.header(SESSION).is_some() => "opened a session".into(),
        Ok(response) => format!("HTTP {}", response.status),
        Err(_) => "found no connection".into(),
    }
}

const SESSION: &str = "mcp-session-id";

/// A keyed client over Streamable HTTP, one connection per request.
struct KeyedClient {
    address: SocketAddr,
    secret: String,
    session: String,
    next_id: u64,
}

impl KeyedClient {
    fn initialize(address: SocketAddr, secret: &str) -> Result<KeyedClient> {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "quarry-bench", "version": env!("CARGO_PKG_VERSION")}}});
        let bearer = format!("Bearer {secret}");
        let response = post(address, &[("Authorization", &bearer)], &initialize)?;
        let session = response
            .header(SESSION)
            .with_context(|| format!("initialize opened no session: HTTP {}", response.status))?
            .to_string();
        let client = KeyedClient {
            address,
            secret: secret.to_string(),
            session,
            next_id: 0,
        };
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(client)
    }

    fn send(&self, message: &Value) -> Result<HttpResponse> {
        let bearer = format!("Bearer {}", self.secret);
        post(
            self.address,
            &[
                ("Authorization", &bearer),
                ("Mcp-Session-Id", &self.session),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            message,
        )
    }

    /// Milliseconds for one call.
    fn knowledge_search(&mut self, query: &str) -> Result<f64> {
        self.next_id += 1;
        let started = Instant::now();
        let response = self.send(&json!({"jsonrpc": "2.0", "id": self.next_id,
            "method": "tools/call",
            "params": {"name": "knowledge_search", "arguments": {"query": query}}}))?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let answer = response
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == self.next_id)
            .with_context(|| format!("no answer to tools/call: HTTP {}", response.status))?;
        if answer.get("error").is_some() || answer["result"]["isError"] == true {
            bail!("knowledge_search failed: {answer}");
        }
        Ok(ms)
    }
}

/// `quarry mcp --http 127.0.0.1:0` on the library, its stderr drained and counted.
struct HttpServer {
    child: Child,
    address: SocketAddr,
    log_lines: Arc<AtomicUsize>,
}

impl HttpServer {
    fn start(exe: &Path, data_dir: &Path) -> Result<HttpServer> {
        let mut child = Command::new(exe)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["mcp", "--http", "127.0.0.1:0", "--mode", "agent"])
            .env_remove("QUARRY_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting quarry mcp --http")?;
        let stderr = child.stderr.take().expect("piped");
        let log_lines = Arc::new(AtomicUsize::new(0));
        let (found, address) = mpsc::channel();
        let counted = log_lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match line.strip_prefix("quarry mcp: listening on http://") {
                    Some(rest) => {
                        let _ = found.send(rest.trim_end_matches("/mcp").to_string());
                    }
                    None => {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let address = address
            .recv_timeout(Duration::from_secs(60))
            .context("quarry mcp --http did not say where it listens")?
            .parse()
            .context("the server's address")?;
        Ok(HttpServer {
            child,
            address,
            log_lines,
        })
    }

    /// A field of the server's /proc status (`VmRSS:`, `VmHWM:`).
    fn status(&self, field: &str) -> String {
        super::bench::process_status(&self.child.id().to_string(), field)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response, its body de-chunked.
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// POSTs `message` to `/mcp` on a connection of its own (`Connection: close`), and reads the
/// whole response.
fn post(address: SocketAddr, headers: &[(&str, &str)], message: &Value) -> Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = message.to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<HttpResponse> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the response has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("the response has no status")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A chunked body's data (a truncated one as far as it goes).
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let after = &rest[eol + 2..];
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        let take = size.min(after.len());
        body.extend_from_slice(&after[..take]);
        rest = after[take..]
            .strip_prefix(b"\r\n")
            .unwrap_or(&after[take..]);
    }
    body
}
