//! The code-tool executor: CPython workers in separate processes, reused across calls.
//!
//! A worker is `python3 -I -S -c <worker.py>` with the protocol on its stdin and stdout (see
//! `worker.py`). It starts in a fresh network namespace where the OS allows one (root or
//! unprivileged user namespaces); everywhere, its audit hook refuses sockets, processes,
//! ctypes, file writes and reads outside the Python installation, and an address-space limit
//! caps its memory. The host enforces the time limit by killing the worker. A worker that
//! finished a call cleanly goes back to an idle pool, so a warm call costs a round trip over
//! a pipe, not a Python start-up.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};

const WORKER_SOURCE: &str = include_str!("worker.py");
const START_TIMEOUT: Duration = Duration::from_secs(20);
const MAX_IDLE_PER_LIMIT: usize = 4;

/// How a worker is kept off the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkIsolation {
    /// A fresh network namespace (only loopback, down) plus the audit hook.
    Namespace,
    /// The audit hook alone (the OS refused a namespace).
    AuditHookOnly,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    isolation: NetworkIsolation,
}

impl Worker {
    fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message).expect("json");
        line.push(b'\n');
        self.stdin.write_all(&line)?;
        self.stdin.flush()
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One finished call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The tool's return value (not yet validated against its schema).
    pub output: Value,
    /// What it printed or logged.
    pub logs: Vec<String>,
    /// How the worker was isolated.
    pub isolation: NetworkIsolation,
}

/// Why a call failed.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The sandbox refused something (the message says what).
    Sandbox(String),
    /// The tool raised; `line` is in its source.
    Exception(String, Option<u32>),
    /// It ran past its memory limit.
    Memory(u64),
    /// It ran past its time limit.
    Timeout(u64),
    /// A ctx operation was refused and the tool let the error escape.
    Ctx(String),
    /// No Python, or the worker died.
    Worker(String),
}

/// Runs code tools. Cheap to create; workers start on first use.
pub struct Executor {
    python: PathBuf,
    /// The real interpreter behind `python` (which may be a shim needing the environment),
    /// so workers can start with an empty environment.
    interpreter: std::sync::OnceLock<std::result::Result<PathBuf, String>>,
    idle: Mutex<HashMap<u64, Vec<Worker>>>,
}

/// Where Python is: `QUARRY_PYTHON`, else `python3` on the `PATH`.
pub fn python_command() -> PathBuf {
    std::env::var_os("QUARRY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

impl Default for Executor {
    fn default() -> Self {
        Executor::new(python_command())
    }
}

impl Executor {
    /// An executor that starts workers with `python`.
    pub fn new(python: PathBuf) -> Executor {
        Executor {
            python,
            interpreter: std::sync::OnceLock::new(),
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Whether Python can run tools here, and how the workers are kept off the network.
    pub fn check(&self) -> Result<NetworkIsolation> {
        let worker = self.take(256)?;
        let isolation = worker.isolation;
        self.give_back(256, worker);
        Ok(isolation)
    }

    /// Stops every idle worker (the next call starts a fresh one).
    pub fn stop_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for worker in idle.into_values().flatten() {
            worker.kill();
        }
    }

    fn take(&self, memory_mb: u64) -> Result<Worker> {
        if let Some(worker) = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&memory_mb)
            .and_then(Vec::pop)
        {
            return Ok(worker);
        }
        match self.spawn(memory_mb, true) {
            Ok(worker) => Ok(worker),
            Err(e @ Error::PythonUnavailable { .. }) if self.interpreter().is_err() => Err(e),
            // Some systems allow the namespace but not Python inside it: fall back to the hook.
            Err(_) => self.spawn(memory_mb, false),
        }
    }

    fn give_back(&self, memory_mb: u64, worker: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let pool = idle.entry(memory_mb).or_default();
        if pool.len() < MAX_IDLE_PER_LIMIT {
            pool.push(worker);
        } else {
            worker.kill();
        }
    }

    fn interpreter(&self) -> Result<PathBuf> {
        self.interpreter
            .get_or_init(|| {
                let out = Command::new(&self.python)
                    .args([
                        "-I",
                        "-S",
                        "-c",
                        "import sys; assert sys.version_info >= (3, 8); print(sys.executable)",
                    ])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run `{}`: {e}", self.python.display()))?;
                let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || path.is_empty() {
                    return Err(format!(
                        "`{}` is not Python 3.8 or later",
                        self.python.display()
                    ));
                }
                Ok(PathBuf::from(path))
            })
            .clone()
            .map_err(|reason| Error::PythonUnavailable { reason })
    }

    fn spawn(&self, memory_mb: u64, isolate_network: bool) -> Result<Worker> {
        let unavailable = |reason: String| Error::PythonUnavailable { reason };
        let mut command = Command::new(self.interpreter()?);
        command
            .args(["-I", "-S", "-c", WORKER_SOURCE])
            .env_clear()
            .env("QUARRY_TOOL_MEMORY_MB", memory_mb.to_string())
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONIOENCODING", "utf-8")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if isolate_network {
            isolate_in_network_namespace(&mut command);
        }
        let mut child = command
            .spawn()
            .map_err(|e| unavailable(format!("cannot start `{}`: {e}", self.python.display())))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                tracing::debug!(target: "quarry::tools::worker", "{line}");
            }
        });
        let ready = lines.recv_timeout(START_TIMEOUT).map_err(|_| {
            let status = child.try_wait().ok().flatten();
            let _ = child.kill();
            unavailable(format!(
                "`{}` did not start a tool worker ({})",
                self.python.display(),
                status.map_or("no answer".to_string(), |s| s.to_string())
            ))
        })?;
        let ready: Value = serde_json::from_str(&ready)
            .map_err(|_| unavailable(format!("unexpected worker output: {ready}")))?;
        if ready["op"] != "ready" {
            return Err(unavailable(format!("unexpected worker output: {ready}")));
        }
        let isolation = if isolate_network && only_loopback(child.id()) {
            NetworkIsolation::Namespace
        } else {
            NetworkIsolation::AuditHookOnly
        };
        Ok(Worker {
            child,
            stdin,
            lines,
            isolation,
        })
    }

    /// Derives a code tool's shapes and evidence manifest from its source (see `worker.py`).
    pub fn analyze(
        &self,
        source: &str,
        tool_type: &str,
    ) -> Result<std::result::Result<Value, (String, u32, u32)>> {
        let mut worker = self.take(256)?;
        let sent = worker.send(&json!({"op": "analyze", "source": source, "tool_type": tool_type}));
        let reply = sent
            .ok()
            .and_then(|_| worker.lines.recv_timeout(Duration::from_secs(20)).ok());
        let Some(reply) = reply else {
            worker.kill();
            return Err(Error::PythonUnavailable {
                reason: "the tool worker stopped while analysing a tool".into(),
            });
        };
        self.give_back(256, worker);
        let reply: Value = serde_json::from_str(&reply)
            .map_err(|e| Error::Internal(format!("worker reply: {e}")))?;
        if reply["ok"] == true {
            Ok(Ok(reply))
        } else {
            let e = &reply["error"];
            Ok(Err((
                e["message"]
                    .as_str()
                    .unwrap_or("invalid source")
                    .to_string(),
                e["line"].as_u64().unwrap_or(1) as u32,
                e["column"].as_u64().unwrap_or(1) as u32,
            )))
        }
    }

    /// Runs one call. `ctx` answers the tool's ctx operations (name, args, kwargs), already
    /// checked by the caller against the manifest and authorization.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        source: &str,
        source_hash: &str,
        input: &Value,
        settings: &Value,
        timeout_ms: u64,
        memory_mb: u64,
        ctx: &mut dyn FnMut(&str, &Value, &Value) -> std::result::Result<Value, String>,
    ) -> Result<std::result::Result<CallOutcome, CallError>> {
        let mut worker = self.take(memory_mb)?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let request = json!({
            "op": "run", "source": source, "source_hash": source_hash,
            "input": input, "settings": settings,
        });
        if worker.send(&request).is_err() {
            worker.kill();
            return Ok(Err(CallError::Worker("the tool worker exited".into())));
        }
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = match worker.lines.recv_timeout(remaining) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    worker.kill();
                    return Ok(Err(CallError::Timeout(timeout_ms)));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = worker.child.wait().ok();
                    // The kernel's answer to running past RLIMIT_AS can be a kill, not a MemoryError.
                    return Ok(Err(CallError::Worker(format!(
                        "the tool worker exited ({})",
                        status.map_or("unknown status".into(), |s| s.to_string())
                    ))));
                }
            };
            let message: Value = match serde_json::from_str(&line) {
                Ok(m) => m,
                Err(_) => {
                    worker.kill();
                    return Ok(Err(CallError::Worker(format!(
                        "garbled worker output: {line}"
                    ))));
                }
            };
            match message["op"].as_str() {
                Some("ctx") => {
                    let name = message["name"].as_str().unwrap_or("");
                    let reply = match ctx(name, &message["args"], &message["kwargs"]) {
                        Ok(value) => json!({"op": "ctx_result", "ok": true, "value": value}),
                        Err(error) => json!({"op": "ctx_result", "ok": false, "error": error}),
                    };
                    if worker.send(&reply).is_err() {
                        worker.kill();
                        return Ok(Err(CallError::Worker("the tool worker exited".into())));
                    }
                }
                Some("result") => {
                    let logs = message["logs"]
                        .as_array()
                        .map(|l| {
                            l.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    let isolation = worker.isolation;
                    if message["fatal"] == true {
                        worker.kill();
                    } else {
                        self.give_back(memory_mb, worker);
                    }
                    if message["ok"] == true {
                        return Ok(Ok(CallOutcome {
                            output: message["output"].clone(),
                            logs,
                            isolation,
                        }));
                    }
                    let error = &message["error"];
                    let text = error["message"].as_str().unwrap_or("failed").to_string();
                    let line = error["line"].as_u64().map(|l| l as u32);
                    return Ok(Err(match error["kind"].as_str() {
                        Some("sandbox") => CallError::Sandbox(text),
                        Some("memory") => CallError::Memory(memory_mb),
                        Some("ctx") => CallError::Ctx(text),
                        _ => CallError::Exception(text, line),
                    }));
                }
                _ => {
                    worker.kill();
                    return Ok(Err(CallError::Worker(format!(
                        "unexpected worker output: {line}"
                    ))));
                }
            }
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop_idle();
    }
}

/// Whether the process sees no network interface but loopback (a fresh namespace).
fn only_loopback(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .map(|table| {
            table
                .lines()
                .skip(2)
                .filter_map(|l| l.split(':').next())
                .all(|name| name.trim() == "lo")
        })
        .unwrap_or(false)
}

#[cfg(target_os = "linux")]
fn isolate_in_network_namespace(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe syscalls run between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNET) != 0
                && libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0
            {
                // No namespace here: the audit hook still refuses every socket.
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn isolate_in_network_namespace(_command: &mut Command) {}
