//! The code-tool executor: CPython workers in separate processes, reused across calls.
//!
//! A worker is `python3 -I -S -c <worker.py>` with the protocol on its stdin and stdout (see
//! `worker.py`). It starts in a fresh network namespace where the OS allows one (root or
//! unprivileged user namespaces); everywhere, its audit hook refuses sockets, processes,
//! ctypes, file writes and reads outside the Python installation, and an address-space limit
//! caps its memory. The host enforces the time limit by killing the worker. A worker that
//! finished a call cleanly goes back to an idle pool, so a warm call costs a round trip over
//! a pipe, not a Python start-up. Workers are pooled per tool and caller (source hash and
//! principal): a tool could leave something behind in its interpreter (a patched module, a
//! stash), so no other tool or caller ever runs in the same process.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::environment::BwrapSetting;
use crate::error::{Error, Result};

const WORKER_SOURCE: &str = include_str!("worker.py");
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest message a worker may send (a tool's output included).
const MAX_LINE_BYTES: u64 = 32 * 1024 * 1024;
/// Idle workers kept in all (about 10 MB of memory each).
const MAX_IDLE: usize = 8;
/// Analysis parses source and runs none of it, so its workers are shared.
const ANALYSIS_OWNER: &str = "analysis";

/// How a worker is kept off the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkIsolation {
    /// bubblewrap: fresh user, mount, PID and network namespaces; only the Python
    /// installation and system libraries, read-only; an empty `/tmp`; no capabilities.
    /// Plus the audit hook.
    Sandbox,
    /// A fresh network namespace (only loopback, down) plus the audit hook.
    Namespace,
    /// The audit hook alone (the OS refused a namespace).
    AuditHookOnly,
}

/// The interpreter behind `python`, with the folders it reads from.
#[derive(Debug, Clone)]
struct Interpreter {
    executable: PathBuf,
    /// `sys.base_prefix`, `sys.prefix` and the executable's folder, resolved.
    roots: Vec<PathBuf>,
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

    /// Kills the process and reaps it; the worker is not used again.
    fn kill(&mut self) {
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
    interpreter: std::sync::OnceLock<std::result::Result<Interpreter, String>>,
    /// bubblewrap, where installed (`QUARRY_BWRAP` names it, or `none` turns it off).
    bwrap: Option<PathBuf>,
    /// The strongest isolation to try (tests use it to exercise the fallbacks).
    max_isolation: NetworkIsolation,
    /// Idle workers by (memory limit, owner), oldest first.
    idle: Mutex<Vec<((u64, String), Worker)>>,
}

/// Where Python is: `QUARRY_PYTHON`, else `python3` on the `PATH`.
pub fn python_command() -> PathBuf {
    crate::environment::python().unwrap_or_else(|| PathBuf::from("python3"))
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
            bwrap: find_bwrap(),
            max_isolation: NetworkIsolation::Sandbox,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The same executor, never isolating more strongly than `isolation` (for testing the
    /// fallbacks a system without bubblewrap or namespaces gets).
    pub fn with_max_isolation(mut self, isolation: NetworkIsolation) -> Executor {
        self.max_isolation = isolation;
        self
    }

    /// Whether Python can run tools here, and how the workers are kept off the network.
    pub fn check(&self) -> Result<NetworkIsolation> {
        let worker = self.take(256, ANALYSIS_OWNER)?;
        let isolation = worker.isolation;
        self.give_back(256, ANALYSIS_OWNER, worker);
        Ok(isolation)
    }

    /// Stops every idle worker (the next call starts a fresh one).
    pub fn stop_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, mut worker) in idle {
            worker.kill();
        }
    }

    fn take(&self, memory_mb: u64, owner: &str) -> Result<Worker> {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = idle
                .iter()
                .rposition(|((m, o), _)| *m == memory_mb && o == owner)
            {
                return Ok(idle.remove(i).1);
            }
        }
        // The strongest isolation this system allows: bubblewrap, else a network namespace,
        // else the audit hook alone (each a step down when the one above cannot start).
        self.interpreter()?;
        let mut last = None;
        for isolation in [
            NetworkIsolation::Sandbox,
            NetworkIsolation::Namespace,
            NetworkIsolation::AuditHookOnly,
        ] {
            if (isolation == NetworkIsolation::Sandbox && self.bwrap.is_none())
                || isolation < self.max_isolation
            {
                continue;
            }
            match self.spawn(memory_mb, isolation) {
                Ok(worker) => return Ok(worker),
                Err(e) => {
                    tracing::debug!(?isolation, error = %e, "tool worker did not start");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn give_back(&self, memory_mb: u64, owner: &str, worker: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(((memory_mb, owner.to_string()), worker));
        if idle.len() > MAX_IDLE {
            idle.remove(0).1.kill();
        }
    }

    fn interpreter(&self) -> Result<Interpreter> {
        self.interpreter
            .get_or_init(|| {
                let out = Command::new(&self.python)
                    .args([
                        "-I",
                        "-S",
                        "-c",
                        "import sys; assert sys.version_info >= (3, 9)\n\
                         print(sys.executable); print(sys.base_prefix); print(sys.prefix)",
                    ])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run `{}`: {e}", self.python.display()))?;
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let lines: Vec<&str> = text.lines().map(str::trim).collect();
                if !out.status.success() || lines.len() < 3 || lines[0].is_empty() {
                    return Err(format!(
                        "`{}` is not Python 3.9 or later",
                        self.python.display()
                    ));
                }
                let executable =
                    std::fs::canonicalize(lines[0]).unwrap_or_else(|_| PathBuf::from(lines[0]));
                let mut roots: Vec<PathBuf> = [lines[1], lines[2]]
                    .iter()
                    .filter_map(|p| std::fs::canonicalize(p).ok())
                    .chain(executable.parent().map(PathBuf::from))
                    .collect();
                roots.sort();
                roots.dedup();
                Ok(Interpreter { executable, roots })
            })
            .clone()
            .map_err(|reason| Error::PythonUnavailable { reason })
    }

    fn spawn(&self, memory_mb: u64, wanted: NetworkIsolation) -> Result<Worker> {
        let interpreter = self.interpreter()?;
        let mut child = self
            .worker_command(&interpreter, memory_mb, wanted)
            .spawn()
            .map_err(|e| unavailable(format!("cannot start `{}`: {e}", self.python.display())))?;
        let stdin = child.stdin.take().expect("piped");
        let lines = read_lines(child.stdout.take().expect("piped"));
        log_lines(child.stderr.take().expect("piped"));
        self.await_ready(&mut child, &lines)?;
        let isolation = match wanted {
            NetworkIsolation::Namespace if !only_loopback(child.id()) => {
                NetworkIsolation::AuditHookOnly
            }
            other => other,
        };
        Ok(Worker {
            child,
            stdin,
            lines,
            isolation,
        })
    }

    /// The worker's command line, in bubblewrap when `wanted` is the sandbox, with an empty
    /// environment but for the worker's settings.
    fn worker_command(
        &self,
        interpreter: &Interpreter,
        memory_mb: u64,
        wanted: NetworkIsolation,
    ) -> Command {
        let mut command = match (&self.bwrap, wanted) {
            (Some(bwrap), NetworkIsolation::Sandbox) => {
                let mut command = Command::new(bwrap);
                command.args(sandbox_arguments(interpreter));
                command.arg(&interpreter.executable);
                command
            }
            _ => Command::new(&interpreter.executable),
        };
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
        if wanted == NetworkIsolation::Namespace {
            isolate_in_network_namespace(&mut command);
        }
        command
    }

    /// Waits for the worker's `ready`; one that does not say it in time is killed.
    fn await_ready(&self, child: &mut Child, lines: &Receiver<String>) -> Result<()> {
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
        Ok(())
    }

    /// Derives a code tool's shapes and evidence manifest from its source (see `worker.py`).
    pub fn analyze(
        &self,
        source: &str,
        tool_type: &str,
    ) -> Result<std::result::Result<Value, (String, u32, u32)>> {
        let mut worker = self.take(256, ANALYSIS_OWNER)?;
        let sent = worker.send(&json!({
            "op": "analyze",
            "source": source,
            "tool_type": tool_type,
            "ctx_operations": super::CTX_OPERATIONS,
        }));
        let reply = sent
            .ok()
            .and_then(|_| worker.lines.recv_timeout(Duration::from_secs(20)).ok());
        let Some(reply) = reply else {
            worker.kill();
            return Err(Error::PythonUnavailable {
                reason: "the tool worker stopped while analysing a tool".into(),
            });
        };
        self.give_back(256, ANALYSIS_OWNER, worker);
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

    /// Runs one call in a worker of `owner` (the tool and its caller). `ctx` answers the
    /// tool's ctx operations (name, args, kwargs), already checked by the caller against the
    /// manifest and authorization.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        owner: &str,
        source: &str,
        source_hash: &str,
        input: &Value,
        settings: &Value,
        timeout_ms: u64,
        memory_mb: u64,
        ctx: &mut dyn FnMut(&str, &Value, &Value) -> std::result::Result<Value, String>,
    ) -> Result<std::result::Result<CallOutcome, CallError>> {
        let mut worker = self.take(memory_mb, owner)?;
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
            let (line, message) = match next_message(&mut worker, deadline, timeout_ms) {
                Ok(next) => next,
                Err(e) => return Ok(Err(e)),
            };
            if message["op"] != "ctx" {
                return Ok(self.finish(worker, &line, &message, memory_mb, owner));
            }
            if let Err(e) = answer_ctx(&mut worker, &message, ctx) {
                return Ok(Err(e));
            }
        }
    }

    /// Ends a call on the worker's last message. A worker that returned a result and is
    /// still in step goes back to the pool; any other is killed.
    fn finish(
        &self,
        mut worker: Worker,
        line: &str,
        message: &Value,
        memory_mb: u64,
        owner: &str,
    ) -> CallResult {
        let failure = match message["op"].as_str() {
            Some("result") => None,
            Some("oversized") => Some(format!(
                "the tool's output is larger than {} MiB",
                MAX_LINE_BYTES >> 20
            )),
            _ => Some(format!("unexpected worker output: {line}")),
        };
        if let Some(failure) = failure {
            worker.kill();
            return Err(CallError::Worker(failure));
        }
        let isolation = worker.isolation;
        if message["fatal"] != true && in_step(&mut worker) {
            self.give_back(memory_mb, owner, worker);
        } else {
            worker.kill();
        }
        outcome_of(message, isolation, memory_mb)
    }
}

/// What a call returns: its outcome, or why it failed.
type CallResult = std::result::Result<CallOutcome, CallError>;

fn unavailable(reason: String) -> Error {
    Error::PythonUnavailable { reason }
}

/// Reads the worker's stdout into lines on a thread of its own. Lines are bounded: a tool
/// cannot make the host buffer more than `MAX_LINE_BYTES`.
fn read_lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = Vec::new();
            match (&mut reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(_) if line.len() as u64 > MAX_LINE_BYTES => {
                    let _ = tx.send(r#"{"op":"oversized"}"#.to_string());
                    break;
                }
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_string();
                    if tx.send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });
    lines
}

/// Forwards the worker's stderr to the debug log.
fn log_lines(stderr: ChildStderr) {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            tracing::debug!(target: "quarry::tools::worker", "{line}");
        }
    });
}

/// The worker's next message, raw and parsed. Running out of time, the worker's exit and
/// garbled output each end the call.
fn next_message(
    worker: &mut Worker,
    deadline: Instant,
    timeout_ms: u64,
) -> std::result::Result<(String, Value), CallError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let line = match worker.lines.recv_timeout(remaining) {
        Ok(line) => line,
        Err(RecvTimeoutError::Timeout) => {
            worker.kill();
            return Err(CallError::Timeout(timeout_ms));
        }
        Err(RecvTimeoutError::Disconnected) => {
            let status = worker.child.wait().ok();
            // The kernel's answer to running past RLIMIT_AS can be a kill, not a MemoryError.
            return Err(CallError::Worker(format!(
                "the tool worker exited ({})",
                status.map_or("unknown status".into(), |s| s.to_string())
            )));
        }
    };
    match serde_json::from_str(&line) {
        Ok(message) => Ok((line, message)),
        Err(_) => {
            worker.kill();
            Err(CallError::Worker(format!("garbled worker output: {line}")))
        }
    }
}

/// Answers one ctx operation the tool asked for.
fn answer_ctx(
    worker: &mut Worker,
    message: &Value,
    ctx: &mut dyn FnMut(&str, &Value, &Value) -> std::result::Result<Value, String>,
) -> std::result::Result<(), CallError> {
    let name = message["name"].as_str().unwrap_or("");
    let reply = match ctx(name, &message["args"], &message["kwargs"]) {
        Ok(value) => json!({"op": "ctx_result", "ok": true, "value": value}),
        Err(error) => json!({"op": "ctx_result", "ok": false, "error": error}),
    };
    if worker.send(&reply).is_err() {
        worker.kill();
        return Err(CallError::Worker("the tool worker exited".into()));
    }
    Ok(())
}

/// A `result` message as the call's outcome: the output and logs, or the tool's error.
fn outcome_of(message: &Value, isolation: NetworkIsolation, memory_mb: u64) -> CallResult {
    if message["ok"] == true {
        let logs = message["logs"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        return Ok(CallOutcome {
            output: message["output"].clone(),
            logs,
            isolation,
        });
    }
    let error = &message["error"];
    let text = error["message"].as_str().unwrap_or("failed").to_string();
    let line = error["line"].as_u64().map(|l| l as u32);
    Err(match error["kind"].as_str() {
        Some("sandbox") => CallError::Sandbox(text),
        Some("memory") => CallError::Memory(memory_mb),
        Some("ctx") => CallError::Ctx(text),
        _ => CallError::Exception(text, line),
    })
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop_idle();
    }
}

/// bubblewrap on the `PATH` (or `QUARRY_BWRAP`; `none` turns it off).
fn find_bwrap() -> Option<PathBuf> {
    match crate::environment::bwrap() {
        BwrapSetting::Off => None,
        BwrapSetting::At(path) => Some(path),
        BwrapSetting::Search => crate::environment::on_path("bwrap"),
    }
}

/// bubblewrap's arguments: new namespaces of every kind, the system libraries and the Python
/// installation read-only, nothing of the user's files, an empty `/tmp`, no capabilities, and
/// the whole sandbox killed with its parent.
fn sandbox_arguments(interpreter: &Interpreter) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind-try",
        "/etc/ld.so.cache",
        "/etc/ld.so.cache",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
    ]
    .iter()
    .map(Into::into)
    .collect();
    // Merged-/usr systems link these into /usr; others have them as folders.
    for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64"] {
        let path = std::path::Path::new(top);
        match std::fs::read_link(path) {
            Ok(target) => {
                args.extend(["--symlink".into(), target.into_os_string(), top.into()]);
            }
            Err(_) if path.is_dir() => {
                args.extend(["--ro-bind".into(), top.into(), top.into()]);
            }
            Err(_) => {}
        }
    }
    for root in &interpreter.roots {
        if !root.starts_with("/usr") {
            args.extend([
                "--ro-bind".into(),
                root.clone().into_os_string(),
                root.clone().into_os_string(),
            ]);
        }
    }
    args.push("--".into());
    args
}

/// Whether the worker's next line answers a fresh nonce: nothing a call wrote is left in the
/// pipe to be mistaken for the next call's messages.
fn in_step(worker: &mut Worker) -> bool {
    let nonce = crate::auth::random_hex(8).unwrap_or_default();
    if worker.send(&json!({"op": "sync", "nonce": nonce})).is_err() {
        return false;
    }
    worker
        .lines
        .recv_timeout(Duration::from_secs(2))
        .ok()
        .and_then(|line| serde_json::from_str::<Value>(&line).ok())
        .is_some_and(|reply| reply["op"] == "synced" && reply["nonce"] == nonce.as_str())
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
