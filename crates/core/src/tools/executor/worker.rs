//! One worker process as the host sees it: its pipes and the threads that read them (bounded
//! lines, a bounded stderr), the message exchange of a call (with its byte and `ctx` budgets),
//! the watchdog that kills it at its deadline, and the counts that tell whether a tool left
//! something running.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{CallError, Confinement, MAX_LINE_BYTES};

/// How much of a garbled message an error quotes.
const EXCERPT_CHARS: usize = 200;
/// ...and a worker that writes more than this in all is killed.
const MAX_STDERR_BYTES: u64 = 4 * 1024 * 1024;
/// ctx operations one call may ask for.
const MAX_CTX_CALLS: usize = 10_000;
/// All a worker may send in one call: past it the worker is killed.
const MAX_CALL_BYTES: u64 = 64 * 1024 * 1024;
/// Messages read ahead of the host: a worker that writes faster than the host answers waits
/// on its own pipe instead of filling the host's memory.
const QUEUED_MESSAGES: usize = 4;
/// stderr is logged a line at a time, each cut to this...
const MAX_STDERR_LINE: u64 = 8 * 1024;

pub(super) struct Worker {
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    pub(super) lines: Receiver<String>,
    pub(super) confinement: Confinement,
    /// Why the host killed it from another thread (a flood on stderr), when it did.
    pub(super) killed_because: Arc<Mutex<Option<String>>>,
    /// Threads in its process tree when it was ready: more after a call means the tool left
    /// one running, and the worker is retired (counted by the host, which no tool can patch).
    pub(super) threads_at_start: usize,
    /// Its exit status once the host has reaped it.
    pub(super) exited: Option<std::process::ExitStatus>,
}

impl Worker {
    pub(super) fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message).expect("json");
        line.push(b'\n');
        self.stdin.write_all(&line)?;
        self.stdin.flush()
    }

    /// Kills the process group (the worker and anything it started) and reaps the worker;
    /// it is not used again.
    pub(super) fn kill(&mut self) -> Option<std::process::ExitStatus> {
        // Until it is reaped the worker's pid names its group, so the group is killed first.
        if self.exited.is_none() {
            kill_group(self.child.id());
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
        self.exited
    }

    /// Why the worker is gone: what the host killed it for, else its exit status. It is
    /// killed and reaped here if it was not already.
    pub(super) fn exit_reason(&mut self) -> String {
        let status = self.kill();
        if let Some(reason) = self
            .killed_because
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return reason;
        }
        // The kernel's answer to running past the memory limit can be a kill, not a MemoryError.
        format!(
            "the tool worker exited ({})",
            status.map_or("unknown status".into(), |s| s.to_string())
        )
    }

    /// Whether the tool left a thread or a process running (the worker must not serve again).
    pub(super) fn left_something_running(&self) -> bool {
        tree_threads(self.child.id()) > self.threads_at_start
    }
}

/// Kills the deadline's worker if the call is still running when it passes, whatever the
/// host is doing then (even blocked writing to a worker that stopped reading).
pub(super) struct Watchdog {
    pub(super) done: Option<mpsc::Sender<()>>,
    pub(super) fired: Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    pub(super) fn arm(pid: u32, deadline: Instant) -> Watchdog {
        let (done, finished) = mpsc::channel::<()>();
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = fired.clone();
        std::thread::spawn(move || {
            let wait = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(wait) {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                kill_group(pid);
            }
        });
        Watchdog {
            done: Some(done),
            fired,
        }
    }

    pub(super) fn fired(&self) -> bool {
        self.fired.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread, which then ends without killing.
        self.done.take();
    }
}

/// Reads the worker's stdout into lines on a thread of its own. Lines are bounded, and so is
/// the queue: a tool cannot make the host buffer more than `QUEUED_MESSAGES` lines of at most
/// `MAX_LINE_BYTES`.
pub(super) fn read_lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, lines) = mpsc::sync_channel(QUEUED_MESSAGES);
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

/// Forwards the worker's stderr to the debug log, a bounded line at a time; a worker that
/// writes more than `MAX_STDERR_BYTES` is killed, and `killed_because` says why.
pub(super) fn log_lines(stderr: ChildStderr, pid: u32, killed_because: Arc<Mutex<Option<String>>>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut total = 0u64;
        loop {
            let mut line = Vec::new();
            match (&mut reader)
                .take(MAX_STDERR_LINE)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
            if total > MAX_STDERR_BYTES {
                *killed_because.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                    "the tool wrote more than {} MiB to stderr; its worker was stopped",
                    MAX_STDERR_BYTES >> 20
                ));
                kill_group(pid);
                break;
            }
            let text = String::from_utf8_lossy(&line);
            tracing::debug!(target: "quarry::tools::worker", "{}", text.trim_end());
        }
    });
}

/// What one call has exchanged so far, to hold it to its bounds.
#[derive(Default)]
pub(super) struct Exchange {
    pub(super) bytes: u64,
    pub(super) ctx_calls: usize,
}

impl Exchange {
    /// The worker's next message, raw and parsed. Running out of time, the worker's exit,
    /// garbled output and sending more than a call may each end the call.
    pub(super) fn next_message(
        &mut self,
        worker: &mut Worker,
        deadline: Instant,
        timeout_ms: u64,
    ) -> std::result::Result<(String, Value), CallError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let line = match worker.lines.recv_timeout(remaining) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => return Err(CallError::Timeout(timeout_ms)),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(CallError::Worker(worker.exit_reason()))
            }
        };
        self.bytes += line.len() as u64;
        if self.bytes > MAX_CALL_BYTES {
            return Err(CallError::Worker(format!(
                "the tool sent more than {} MiB in one call; its worker was stopped",
                MAX_CALL_BYTES >> 20
            )));
        }
        serde_json::from_str(&line)
            .map(|message| (line.clone(), message))
            .map_err(|_| CallError::Worker(format!("garbled worker output: {}", excerpt(&line))))
    }

    /// Answers one ctx operation the tool asked for.
    pub(super) fn answer_ctx(
        &mut self,
        worker: &mut Worker,
        message: &Value,
        ctx: &mut dyn FnMut(&str, &Value, &Value) -> std::result::Result<Value, String>,
    ) -> std::result::Result<(), CallError> {
        self.ctx_calls += 1;
        if self.ctx_calls > MAX_CTX_CALLS {
            return Err(CallError::Worker(format!(
                "the tool asked for more than {MAX_CTX_CALLS} ctx operations in one call"
            )));
        }
        let name = message["name"].as_str().unwrap_or("");
        let reply = match ctx(name, &message["args"], &message["kwargs"]) {
            Ok(value) => json!({"op": "ctx_result", "ok": true, "value": value}),
            Err(error) => json!({"op": "ctx_result", "ok": false, "error": error}),
        };
        // A worker that stopped reading blocks this write until the watchdog kills it.
        worker
            .send(&reply)
            .map_err(|_| CallError::Worker(worker.exit_reason()))
    }
}

/// The start of a long message, for an error that must stay small.
pub(super) fn excerpt(text: &str) -> String {
    let count = text.chars().count();
    if count <= EXCERPT_CHARS {
        return text.to_string();
    }
    let start: String = text.chars().take(EXCERPT_CHARS).collect();
    format!("{start} …[{count} characters in all]")
}

/// Kills a worker's process group (itself and what it started).
fn kill_group(pid: u32) {
    #[cfg(unix)]
    // SAFETY: kill(2) with a negative pid signals the process group; no memory is touched.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Threads in a process and all its descendants, from `/proc` (0 where there is none).
pub(super) fn tree_threads(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut count = tasks.len();
    for task in tasks {
        let children = std::fs::read_to_string(format!(
            "/proc/{pid}/task/{}/children",
            task.to_string_lossy()
        ))
        .unwrap_or_default();
        count += children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .map(tree_threads)
            .sum::<usize>();
    }
    count
}

/// Whether the worker's next line answers a fresh nonce: nothing a call wrote is left in the
/// pipe to be mistaken for the next call's messages.
pub(super) fn in_step(worker: &mut Worker) -> bool {
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
