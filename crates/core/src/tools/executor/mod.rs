//! The code-tool executor: CPython workers in separate processes, reused across calls.
//!
//! A worker is `python3 -I -S -c <worker.py>` with the protocol on its stdin and stdout (see
//! `worker.py`). It starts in a fresh network namespace where the OS allows one (root or
//! unprivileged user namespaces); everywhere, its audit hook refuses sockets, processes,
//! ctypes, file writes and reads outside the Python installation, and a data limit caps its
//! memory. The host enforces the time limit by killing the worker. A worker that
//! finished a call cleanly goes back to an idle pool, so a warm call costs a round trip over
//! a pipe, not a Python start-up. Workers are pooled per tool and caller (source hash and
//! principal): a tool could leave something behind in its interpreter (a patched module, a
//! stash), so no other tool or caller ever runs in the same process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};

mod sandbox;
mod worker;

use sandbox::{find_bwrap, isolate_in_network_namespace, only_loopback, sandbox_arguments};
use worker::{excerpt, in_step, log_lines, read_lines, tree_threads, Exchange, Watchdog, Worker};

const WORKER_SOURCE: &str = include_str!("../worker.py");
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest message a worker may send (a tool's output included).
pub(super) const MAX_LINE_BYTES: u64 = 32 * 1024 * 1024;
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

/// How the operating system confines a worker, as the worker reported it when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Confinement {
    /// How it is kept off the network (and, in the sandbox, off the filesystem).
    pub network: NetworkIsolation,
    /// Whether its seccomp filters are installed (no programs, processes or sockets).
    pub seccomp: bool,
    /// The Landlock ABI confining its file access; 0 where the kernel has none.
    pub landlock: u32,
}

impl Confinement {
    /// Whether the kernel, not only Python's audit hook, holds the worker: bubblewrap's
    /// namespaces, or seccomp with Landlock (a tool that disarms the hook then still starts
    /// nothing, reaches no network and reads no user file).
    pub fn os_isolated(&self) -> bool {
        self.network == NetworkIsolation::Sandbox || (self.seccomp && self.landlock > 0)
    }

    /// What this system lacks for OS isolation, in words (empty where nothing is missing).
    pub fn missing(&self) -> String {
        let mut missing = Vec::new();
        if self.network != NetworkIsolation::Sandbox {
            missing.push("no bubblewrap sandbox");
        }
        if !self.seccomp {
            missing.push("no seccomp filters");
        }
        if self.landlock == 0 {
            missing.push("no Landlock");
        }
        missing.join(", ")
    }
}

/// The setting that lets the administrator run code tools where the OS cannot confine them.
pub const UNCONFINED_SETTING: &str = "QUARRY_UNCONFINED_CODE_TOOLS=admin";

/// The interpreter behind `python`, with the folders it reads from.
#[derive(Debug, Clone)]
pub(super) struct Interpreter {
    executable: PathBuf,
    /// `sys.base_prefix`, `sys.prefix` and the executable's folder, resolved.
    roots: Vec<PathBuf>,
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
    /// Whether workers install seccomp filters and Landlock (off only to test what a system
    /// without them gets).
    kernel_confinement: bool,
    /// Whether the administrator may run code tools where the OS cannot confine them
    /// ([`UNCONFINED_SETTING`]).
    unconfined_admin: bool,
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
            kernel_confinement: true,
            unconfined_admin: crate::environment::unconfined_code_tools_for_admin(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The same executor with workers that install neither seccomp filters nor Landlock:
    /// what a system without them (macOS, an old kernel) gets, for testing the rules there.
    pub fn without_kernel_confinement(mut self) -> Executor {
        self.kernel_confinement = false;
        self
    }

    /// The same executor, letting the administrator run code tools without OS isolation
    /// (or not), whatever [`UNCONFINED_SETTING`] says.
    pub fn with_unconfined_admin(mut self, allowed: bool) -> Executor {
        self.unconfined_admin = allowed;
        self
    }

    /// The same executor, never isolating more strongly than `isolation` (for testing the
    /// fallbacks a system without bubblewrap or namespaces gets).
    pub fn with_max_isolation(mut self, isolation: NetworkIsolation) -> Executor {
        self.max_isolation = isolation;
        self
    }

    /// Whether Python can run tools here, and how the workers are kept off the network.
    pub fn check(&self) -> Result<NetworkIsolation> {
        Ok(self.confinement()?.network)
    }

    /// Whether Python can run tools here, and how the OS confines the workers.
    pub fn confinement(&self) -> Result<Confinement> {
        let worker = self.take(256, ANALYSIS_OWNER)?;
        let confinement = worker.confinement;
        self.give_back(256, ANALYSIS_OWNER, worker);
        Ok(confinement)
    }

    /// Whether a caller may run code tools under `confinement`: anyone where the OS confines
    /// the workers; where it cannot, only the administrator, and only with
    /// [`UNCONFINED_SETTING`]. The error says what is missing and what is at stake.
    pub fn may_run(&self, confinement: &Confinement, administrator: bool) -> Result<()> {
        if confinement.os_isolated() || (administrator && self.unconfined_admin) {
            return Ok(());
        }
        let missing = confinement.missing();
        Err(Error::Unauthorized(if administrator {
            format!(
                "this system cannot confine code tools ({missing}): a tool could read every \
                 file this account can, start programs and reach the network. Install \
                 bubblewrap, or set {UNCONFINED_SETTING} to run them anyway as the administrator"
            )
        } else {
            format!(
                "code tools need isolation by the operating system, which this system lacks \
                 ({missing}); only the administrator may run them here"
            )
        }))
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
            while let Some(i) = idle
                .iter()
                .rposition(|((m, o), _)| *m == memory_mb && o == owner)
            {
                let mut worker = idle.remove(i).1;
                // An idle worker can die: bubblewrap's --die-with-parent ties it to the thread
                // that started it, and a pipeline run's thread ends. A dead one is reaped and
                // another taken, so the next call never meets it.
                if matches!(worker.child.try_wait(), Ok(None)) {
                    return Ok(worker);
                }
                worker.kill();
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
        let killed_because = Arc::new(Mutex::new(None));
        log_lines(
            child.stderr.take().expect("piped"),
            child.id(),
            killed_because.clone(),
        );
        let ready = self.await_ready(&mut child, &lines)?;
        let network = match wanted {
            NetworkIsolation::Namespace if !only_loopback(child.id()) => {
                NetworkIsolation::AuditHookOnly
            }
            other => other,
        };
        let confinement = Confinement {
            network,
            seccomp: ready["seccomp"] == true,
            landlock: ready["landlock"].as_u64().unwrap_or(0) as u32,
        };
        let threads_at_start = tree_threads(child.id());
        Ok(Worker {
            child,
            stdin,
            lines,
            confinement,
            killed_because,
            threads_at_start,
            exited: None,
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
        // The kernel's filters, which the worker installs before any tool code runs.
        #[cfg(target_os = "linux")]
        if let Some(filters) = super::confine::worker_filters().filter(|_| self.kernel_confinement)
        {
            command.env("QUARRY_SECCOMP", filters);
        }
        if !self.kernel_confinement {
            command.env("QUARRY_LANDLOCK", "off");
        }
        // Its own process group, so whatever it starts is killed with it.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        if wanted == NetworkIsolation::Namespace {
            isolate_in_network_namespace(&mut command);
        }
        command
    }

    /// Waits for the worker's `ready` and returns it; one that does not say it in time is
    /// killed.
    fn await_ready(&self, child: &mut Child, lines: &Receiver<String>) -> Result<Value> {
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
        Ok(ready)
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

    /// Runs one call in a worker of `owner` (the tool and its caller; `administrator` when
    /// the caller is, see [`Executor::may_run`]). `ctx` answers the tool's ctx operations
    /// (name, args, kwargs), already checked by the caller against the manifest and
    /// authorization.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        owner: &str,
        administrator: bool,
        source: &str,
        source_hash: &str,
        input: &Value,
        settings: &Value,
        timeout_ms: u64,
        memory_mb: u64,
        ctx: &mut dyn FnMut(&str, &Value, &Value) -> std::result::Result<Value, String>,
    ) -> Result<std::result::Result<CallOutcome, CallError>> {
        let mut worker = self.take(memory_mb, owner)?;
        if let Err(refused) = self.may_run(&worker.confinement, administrator) {
            self.give_back(memory_mb, owner, worker);
            return Err(refused);
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let watchdog = Watchdog::arm(worker.child.id(), deadline);
        let request = json!({
            "op": "run", "source": source, "source_hash": source_hash,
            "input": input, "settings": settings,
        });
        let mut exchange = Exchange::default();
        let result = if worker.send(&request).is_err() {
            Err(CallError::Worker(worker.exit_reason()))
        } else {
            loop {
                let (line, message) = match exchange.next_message(&mut worker, deadline, timeout_ms)
                {
                    Ok(next) => next,
                    Err(e) => break Err(e),
                };
                if message["op"] != "ctx" {
                    break Ok((line, message));
                }
                if let Err(e) = exchange.answer_ctx(&mut worker, &message, ctx) {
                    break Err(e);
                }
            }
        };
        let fired = watchdog.fired();
        drop(watchdog);
        let killed = worker
            .killed_because
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match result {
            // Whatever the host saw last, a call the watchdog ended ran out of time...
            _ if fired => {
                worker.kill();
                Ok(Err(CallError::Timeout(timeout_ms)))
            }
            // ...and one whose worker the host stopped failed for that reason.
            _ if killed.is_some() => {
                worker.kill();
                Ok(Err(CallError::Worker(killed.unwrap_or_default())))
            }
            Ok((line, message)) => Ok(self.finish(worker, &line, &message, memory_mb, owner)),
            Err(e) => {
                worker.kill();
                Ok(Err(e))
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
            _ => Some(format!("unexpected worker output: {}", excerpt(line))),
        };
        if let Some(failure) = failure {
            worker.kill();
            return Err(CallError::Worker(failure));
        }
        let isolation = worker.confinement.network;
        if message["fatal"] != true && !worker.left_something_running() && in_step(&mut worker) {
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
