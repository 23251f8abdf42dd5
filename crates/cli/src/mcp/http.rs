//! Streamable HTTP on a loopback address. The SDK's service checks the `Host` header against
//! loopback names and the address the server bound, and the `Origin` header against this
//! server's own origins, so a web page (DNS rebinding, or a cross-site request) cannot drive
//! the library through the user's browser; each request still needs its key.
//!
//! Any local process can reach the port, so nothing a client holds is unbounded (issue 38):
//! connections are capped ([`Limits::max_connections`]) and time out waiting for a request
//! ([`Limits::idle_timeout`]); when descriptors run out, accepting backs off, with one log line
//! per episode; and [`super::gate`] keeps keyless callers from opening sessions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::gate::Gate;
use super::handler::{QuarryMcp, Shared};

/// What the HTTP server allows each client, and all of them together. `quarry mcp` sets each
/// from a hidden flag (tests lower them).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most connections open at once. At the cap a new connection closes the one idle the
    /// longest (no request under way), or is closed itself when every one is busy. Default
    /// 256, at most half the process's open-file limit.
    pub max_connections: usize,
    /// How long a connection may wait for a whole request head, new or between requests,
    /// before it is closed. Default 30 s.
    pub idle_timeout: Duration,
    /// How long a request body may take to arrive. Default 30 s.
    pub body_timeout: Duration,
    /// Most MCP sessions open at once (each holds about 100 KiB); one more is refused.
    /// Default 128.
    pub max_sessions: usize,
    /// Most MCP sessions per key; one more closes that key's oldest. Default 16.
    pub max_sessions_per_key: usize,
    /// Refused keys a source may present within a minute; past it, its attempts are answered
    /// 429 unchecked (and unaudited) until the minute is over. Default 10.
    pub failed_sign_ins_per_minute: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: default_max_connections(),
            idle_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_sessions: 128,
            max_sessions_per_key: 16,
            failed_sign_ins_per_minute: 10,
        }
    }
}

/// 256, or half the open-file limit when that is lower: past it, accepting would fail with
/// `EMFILE` before the cap could act, and the library needs descriptors too.
fn default_max_connections() -> usize {
    #[cfg(unix)]
    let open_files = {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the limit into the struct we own and pass by pointer.
        match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
            0 => usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX),
            _ => 1024,
        }
    };
    #[cfg(not(unix))]
    let open_files = 1024;
    (open_files / 2).clamp(8, 256)
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn serve(shared: Arc<Shared>, address: SocketAddr, limits: Limits) -> Result<()> {
    if !address.ip().is_loopback() {
        bail!(
            "quarry mcp serves HTTP on loopback addresses only (127.0.0.1 or ::1), not {address}"
        );
    }
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {address}"))?;
    let bound = listener.local_addr()?;
    let port = bound.port();
    // The loopback names, and the address bound (127.0.0.2 is loopback too; it was refused).
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    let mut origins = vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ];
    let own_origin = format!("http://{bound}");
    if !origins.contains(&own_origin) {
        hosts.push(bound.to_string());
        origins.push(own_origin);
    }
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    let sessions = Arc::new(LocalSessionManager::default());
    let factory = shared.clone();
    let service = StreamableHttpService::new(
        move || Ok(QuarryMcp::new(factory.clone())),
        sessions.clone(),
        config,
    );
    let gate = Arc::new(Gate::new(service, sessions, shared, limits.clone()));
    let connections = Arc::new(Connections::new(limits.max_connections));
    // Tests and launchers read the address from here (port 0 picks a free one).
    eprintln!("quarry mcp: listening on http://{bound}/mcp");
    let stop = stop_signal();
    tokio::pin!(stop);
    let mut backoff = Backoff::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => return Ok(()),
        };
        let (stream, peer) = match accepted {
            Ok(connection) => {
                backoff.recovered();
                connection
            }
            Err(e) => {
                // Out of descriptors (EMFILE), the error repeats at once: retrying in a loop
                // spun a core and logged 150-300 MB/s.
                let pause = backoff.failed(&e);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue,
                    _ = &mut stop => return Ok(()),
                }
            }
        };
        let Some((id, connection)) = connections.admit() else {
            continue;
        };
        let gate = gate.clone();
        let connections = connections.clone();
        let idle_timeout = limits.idle_timeout;
        tokio::spawn(async move {
            let this = connection.clone();
            let service = service_fn(move |request| {
                let busy = Busy::enter(this.clone());
                let gate = gate.clone();
                async move {
                    let response = gate.handle(request, peer.ip()).await;
                    // The connection is busy until the response's body is written or dropped
                    // (an SSE stream can outlive this future by minutes).
                    Ok::<_, Infallible>(response.map(|body| {
                        body.map_frame(move |frame| {
                            let _busy = &busy;
                            frame
                        })
                        .boxed()
                    }))
                }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(idle_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(served);
            let result = tokio::select! {
                result = served.as_mut() => result,
                _ = connection.close.notified() => {
                    served.as_mut().graceful_shutdown();
                    served.await
                }
            };
            connections.leave(id);
            if let Err(e) = result {
                tracing::debug!("an HTTP connection ended with an error: {e}");
            }
        });
    }
}

/// The open connections, to cap them and to find the one idle the longest.
struct Connections {
    limit: usize,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    /// Whether new connections are being closed for want of room (logged once per episode).
    full: AtomicBool,
}

struct Connection {
    /// Requests under way (their responses not yet written).
    busy: AtomicUsize,
    /// Since when no request has been under way.
    idle_since: Mutex<Instant>,
    /// Asks the connection to close once its requests are done.
    close: Notify,
}

impl Connections {
    fn new(limit: usize) -> Connections {
        Connections {
            limit: limit.max(1),
            next: AtomicU64::new(0),
            open: Mutex::default(),
            full: AtomicBool::new(false),
        }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes room for a new connection: at the cap, the one idle the longest is asked to
    /// close (an idle connection costs its holder nothing, so a flood of them must not starve
    /// a client that is using the server). `None`: every connection is busy, the new one
    /// closes at once.
    fn admit(&self) -> Option<(u64, Arc<Connection>)> {
        let mut open = self.open();
        if open.len() >= self.limit {
            let idlest = open
                .iter()
                .filter(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
                .min_by_key(|(_, c)| *c.idle_since.lock().unwrap_or_else(|e| e.into_inner()))
                .map(|(id, _)| *id);
            let Some(idlest) = idlest else {
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "{} connections are open and busy: closing new ones until one ends",
                        open.len()
                    );
                }
                return None;
            };
            if let Some(closing) = open.remove(&idlest) {
                closing.close.notify_one();
            }
        }
        self.full.store(false, Ordering::Relaxed);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: Notify::new(),
        });
        open.insert(id, connection.clone());
        Some((id, connection))
    }

    fn leave(&self, id: u64) {
        self.open().remove(&id);
    }
}

/// A request under way on a connection.
struct Busy(Arc<Connection>);

impl Busy {
    fn enter(connection: Arc<Connection>) -> Busy {
        connection.busy.fetch_add(1, Ordering::AcqRel);
        Busy(connection)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Pauses between failed accepts: 50 ms, doubling up to 1 s, with one warning when failures
/// start and one line when they end.
struct Backoff {
    failures: u64,
    pause: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            failures: 0,
            pause: Self::FIRST,
        }
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MOST: Duration = Duration::from_secs(1);

    fn failed(&mut self, error: &std::io::Error) -> Duration {
        if self.failures == 0 {
            tracing::warn!(
                "accepting a connection failed ({error}); retrying with pauses of up to 1 s \
                 until it works again"
            );
        }
        self.failures += 1;
        let pause = self.pause;
        self.pause = (pause * 2).min(Self::MOST);
        pause
    }

    fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::warn!(
                "accepting connections again after {} failed attempts",
                self.failures
            );
        }
        *self = Backoff::default();
    }
}

async fn stop_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler installs");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
