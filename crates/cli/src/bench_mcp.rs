//! `quarry bench mcp PATH`: what an MCP client pays. A `quarry mcp` server (this binary, over
//! stdio, as a desktop client launches it) on a fresh library of `PATH`, driven by a minimal
//! JSON-RPC client: startup to the `initialize` answer, the server's idle RSS, the first
//! `knowledge_search` (model load) and warm calls, beside the same search through
//! `quarry search` processes and inside this process.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
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

/// Runs the bench; `calls` warm calls are timed per method.
pub fn mcp_bench(path: &Path, calls: usize) -> Result<ExitCode> {
    let temp = tempfile::tempdir()?;
    {
        let mut library = Library::open(temp.path())?;
        library.add_source(path, "bench", &[], &[])?;
        let mut writer = library.writer()?;
        writer.index_all(&IndexOptions::default(), &|_| {})?;
        writer.embed_pending(&|_| {}, &std::sync::atomic::AtomicBool::new(false))?;
    }
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
        super::bench::percentile(&mut warm.clone(), 0.5),
        super::bench::percentile(&mut warm, 0.95),
        calls.max(1),
        results as f64 / calls.max(1) as f64
    );
    println!(
        "quarry search (a process)   p50 {:.0} ms, p95 {:.0} ms  (vector, top 5, 10 runs)",
        super::bench::percentile(&mut processes.clone(), 0.5),
        super::bench::percentile(&mut processes, 0.95)
    );
    println!(
        "the same search in-process  p50 {:.1} ms, p95 {:.1} ms",
        super::bench::percentile(&mut in_process.clone(), 0.5),
        super::bench::percentile(&mut in_process, 0.95)
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
