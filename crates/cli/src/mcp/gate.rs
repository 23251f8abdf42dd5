//! What every HTTP request passes before rmcp's Streamable HTTP service sees it (issue 38):
//!
//! - its body is read whole within a time limit and a size limit (a slow or endless body holds
//!   no connection open);
//! - a request that would open an MCP session (`initialize`) or run without one carries a key
//!   that authenticates, so nothing is kept for a caller without one;
//! - a client (a source address) whose keys were refused [`Limits::failed_sign_ins_per_minute`]
//!   times in a minute is answered 429 without checking, except with a key that worked before;
//! - sessions are capped per key (a new one closes the key's oldest) and in total (a new one is
//!   refused), and `clientInfo` is bounded before the SDK stores it for the session's life.
//!
//! Requests within a session pass on: the session's id is the SDK's to check, and the handler
//! authenticates every MCP request again anyway.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::http::request::Parts;
use hyper::service::Service;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::service::TowerToHyperService;
use quarry_core::orchestrator::{client_label, MAX_CLIENT_NAME_CHARS};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use serde_json::{json, Value};

use super::handler::{acting_for, bearer, QuarryMcp, Shared, NO_KEY, UNAUTHORIZED};
use super::http::Limits;

/// A response body, as rmcp's service writes them.
pub type Body = BoxBody<Bytes, Infallible>;

/// rmcp's service, as hyper calls it.
type Mcp = TowerToHyperService<StreamableHttpService<QuarryMcp, LocalSessionManager>>;

/// The header carrying a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";
/// The largest request body: rmcp's own default.
const MAX_BODY_BYTES: usize = 4 << 20;
/// The largest `initialize`: the SDK keeps its parameters for the session's life.
const MAX_INITIALIZE_BYTES: usize = 64 << 10;
/// JSON-RPC's generic server error, for a limit reached.
const LIMIT_REACHED: i64 = -32000;
/// Sources whose failures are counted apart; beyond, new sources share one count.
const MAX_SOURCES: usize = 1024;
/// Keys remembered as having worked (their keyed hashes); beyond, the memory starts over.
const MAX_KNOWN_KEYS: usize = 1024;

/// Stands in front of rmcp's service; one per server, shared by its connections.
pub struct Gate {
    mcp: Mcp,
    sessions: Arc<LocalSessionManager>,
    shared: Arc<Shared>,
    limits: Limits,
    book: Mutex<SessionBook>,
    throttle: Throttle,
}

impl Gate {
    pub fn new(
        service: StreamableHttpService<QuarryMcp, LocalSessionManager>,
        sessions: Arc<LocalSessionManager>,
        shared: Arc<Shared>,
        limits: Limits,
    ) -> Gate {
        Gate {
            mcp: TowerToHyperService::new(service),
            sessions,
            shared,
            throttle: Throttle::new(limits.failed_sign_ins_per_minute),
            limits,
            book: Mutex::default(),
        }
    }

    /// Answers one request from `peer`.
    pub async fn handle(&self, request: Request<Incoming>, peer: IpAddr) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = match read_body(body, self.limits.body_timeout).await {
            Ok(bytes) => bytes,
            Err(refused) => return refused,
        };
        let opens = parts.method == Method::POST && !parts.headers.contains_key(SESSION_HEADER);
        if !opens {
            return self.forward(parts, bytes).await;
        }
        // The JSON-RPC id, for the error's body; a large body is not parsed before the key
        // has worked.
        let small = (bytes.len() <= MAX_INITIALIZE_BYTES)
            .then(|| serde_json::from_slice::<Value>(&bytes).ok())
            .flatten();
        let id = small
            .as_ref()
            .and_then(|m| m.get("id"))
            .cloned()
            .unwrap_or(Value::Null);
        let owner = match self.admit(&parts, peer, &id).await {
            Ok(owner) => owner,
            Err(refused) => return refused,
        };
        let initialize = |m: &Value| m.get("method").and_then(Value::as_str) == Some("initialize");
        match small {
            Some(message) if initialize(&message) => {
                self.open_session(parts, message, &owner, &id).await
            }
            Some(_) => self.forward(parts, bytes).await,
            None => match serde_json::from_slice::<Value>(&bytes) {
                Ok(message) if initialize(&message) => refusal(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &id,
                    LIMIT_REACHED,
                    &format!(
                        "an initialize request is at most {} KiB",
                        MAX_INITIALIZE_BYTES >> 10
                    ),
                ),
                _ => self.forward(parts, bytes).await,
            },
        }
    }

    async fn forward(&self, parts: Parts, body: Bytes) -> Response<Body> {
        match self
            .mcp
            .call(Request::from_parts(parts, Full::new(body)))
            .await
        {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Authenticates the request's key (unless its source is throttled); the session owner it
    /// stands for, or the refusal.
    async fn admit(
        &self,
        parts: &Parts,
        peer: IpAddr,
        id: &Value,
    ) -> Result<String, Response<Body>> {
        let Some(secret) = bearer(&parts.headers) else {
            return Err(unauthorized(id, NO_KEY));
        };
        if let Err(wait) = self.throttle.check(peer, &secret) {
            let mut refused = refusal(
                StatusCode::TOO_MANY_REQUESTS,
                id,
                LIMIT_REACHED,
                &format!(
                    "too many refused keys from {peer}: try again in {} s",
                    wait.as_secs() + 1
                ),
            );
            refused
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(wait.as_secs() + 1));
            return Err(refused);
        }
        let user = acting_for(&parts.headers);
        let shared = self.shared.clone();
        let key = secret.clone();
        let source = format!("{peer} over MCP HTTP");
        let checked = tokio::task::spawn_blocking(move || {
            shared
                .library()
                .authenticate_from(&key, user.as_deref(), Some(&source))
        })
        .await;
        match checked {
            Ok(Ok(principal)) => {
                self.throttle.worked(&secret);
                // Sessions are counted per key: a service key acting for several users
                // (`key:ID@user`) is one key.
                Ok(principal
                    .id
                    .split_once('@')
                    .map_or(principal.id.as_str(), |(key, _)| key)
                    .to_string())
            }
            Ok(Err(e)) if e.code() == "unauthorized" => {
                if self.throttle.refused(peer) {
                    tracing::warn!(
                        "{peer} presented {} refused keys within a minute: its attempts are \
                         refused unchecked until the minute is over",
                        self.limits.failed_sign_ins_per_minute
                    );
                }
                Err(unauthorized(id, &e.to_string()))
            }
            Ok(Err(e)) => Err(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                UNAUTHORIZED.0.into(),
                &format!("the key could not be checked: {e}"),
            )),
            Err(e) => Err(refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                id,
                UNAUTHORIZED.0.into(),
                &format!("the key could not be checked: {e}"),
            )),
        }
    }

    /// Forwards an `initialize` of `owner` with its `clientInfo` bounded, within the session
    /// caps, and books the session it opened.
    async fn open_session(
        &self,
        parts: Parts,
        mut message: Value,
        owner: &str,
        id: &Value,
    ) -> Response<Body> {
        bound_client_info(&mut message);
        let live: HashSet<SessionId> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        let (reservation, evict) = match self.reserve(owner, &live) {
            Ok(reserved) => reserved,
            Err(whose) => return too_many_sessions(id, whose),
        };
        if let Some(oldest) = evict {
            tracing::debug!("closing session {oldest}: its key opened one session too many");
            if let Err(e) = self.sessions.close_session(&oldest).await {
                tracing::debug!("closing session {oldest} failed: {e}");
            }
        }
        let body = serde_json::to_vec(&message).expect("a JSON value serializes");
        let response = self.forward(parts, Bytes::from(body)).await;
        if let Some(session) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            self.book()
                .open
                .push((SessionId::from(session), owner.to_string()));
        }
        drop(reservation);
        response
    }

    /// Holds a place for one more session of `owner` while its `initialize` runs; with the
    /// session of `owner` to close to make room. `Err`: whose cap was reached.
    fn reserve(
        &self,
        owner: &str,
        live: &HashSet<SessionId>,
    ) -> Result<(Reservation<'_>, Option<SessionId>), &'static str> {
        let mut book = self.book();
        // Sessions the SDK has closed since (idle, deleted, failed) leave the book.
        book.open.retain(|(session, _)| live.contains(session));
        let owned = book.open.iter().filter(|(_, o)| o == owner).count()
            + book.opening.iter().filter(|o| *o == owner).count();
        let evict = if owned >= self.limits.max_sessions_per_key {
            // The key's oldest session makes room: a client that restarts without closing its
            // sessions is never locked out by its own leftovers.
            match book.open.iter().position(|(_, o)| o == owner) {
                Some(oldest) => Some(book.open.remove(oldest).0),
                None => return Err("this key"),
            }
        } else if live.len().max(book.open.len()) + book.opening.len() >= self.limits.max_sessions {
            return Err("this server");
        } else {
            None
        };
        book.opening.push(owner.to_string());
        Ok((
            Reservation {
                gate: self,
                owner: owner.to_string(),
            },
            evict,
        ))
    }

    fn book(&self) -> MutexGuard<'_, SessionBook> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sessions this server opened and whose key they belong to.
#[derive(Default)]
struct SessionBook {
    /// Open sessions, oldest first, with their owner.
    open: Vec<(SessionId, String)>,
    /// Owners whose `initialize` is under way.
    opening: Vec<String>,
}

/// A place held for a session being opened; dropping it gives the place back (the session, if
/// one opened, is in the book by then).
struct Reservation<'a> {
    gate: &'a Gate,
    owner: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut book = self.gate.book();
        if let Some(at) = book.opening.iter().position(|o| *o == self.owner) {
            book.opening.swap_remove(at);
        }
    }
}

/// Refused keys per source, and keys that worked.
struct Throttle {
    limit: u32,
    window: Duration,
    state: Mutex<ThrottleState>,
}

struct ThrottleState {
    /// Per source: when its count started and how many keys it had refused since.
    refused: HashMap<IpAddr, (Instant, u32)>,
    /// Keyed hashes of keys that authenticated: a client whose key works is not locked out
    /// by another's flood from the same address (on loopback, every local process shares one).
    known: HashSet<u64>,
    hasher: RandomState,
}

impl Throttle {
    fn new(limit: u32) -> Throttle {
        Throttle {
            limit,
            window: Duration::from_secs(60),
            state: Mutex::new(ThrottleState {
                refused: HashMap::new(),
                known: HashSet::new(),
                hasher: RandomState::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, ThrottleState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The count a source's failures go to: its own, or (once many sources are counted) one
    /// shared by the rest.
    fn bucket(state: &ThrottleState, source: IpAddr) -> IpAddr {
        if state.refused.len() < MAX_SOURCES || state.refused.contains_key(&source) {
            source
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }
    }

    /// `Err(wait)` when `source` is throttled and `secret` has not worked before.
    fn check(&self, source: IpAddr, secret: &str) -> Result<(), Duration> {
        let state = self.state();
        if state.known.contains(&state.hasher.hash_one(secret)) {
            return Ok(());
        }
        match state.refused.get(&Self::bucket(&state, source)) {
            Some((since, count)) if *count >= self.limit && since.elapsed() < self.window => {
                Err(self.window.saturating_sub(since.elapsed()))
            }
            _ => Ok(()),
        }
    }

    /// Counts a refused key from `source`; `true` when this one reached the limit.
    fn refused(&self, source: IpAddr) -> bool {
        let mut state = self.state();
        if state.refused.len() >= MAX_SOURCES {
            let window = self.window;
            state
                .refused
                .retain(|_, (since, _)| since.elapsed() < window);
        }
        let bucket = Self::bucket(&state, source);
        let (since, count) = state.refused.entry(bucket).or_insert((Instant::now(), 0));
        if since.elapsed() >= self.window {
            (*since, *count) = (Instant::now(), 0);
        }
        *count += 1;
        *count == self.limit
    }

    /// Remembers a key that authenticated.
    fn worked(&self, secret: &str) {
        let mut state = self.state();
        if state.known.len() >= MAX_KNOWN_KEYS {
            state.known.clear();
        }
        let hash = state.hasher.hash_one(secret);
        state.known.insert(hash);
    }
}

/// Reads a request body whole, within `timeout` and [`MAX_BODY_BYTES`].
async fn read_body(body: Incoming, timeout: Duration) -> Result<Bytes, Response<Body>> {
    let read = tokio::time::timeout(timeout, Limited::new(body, MAX_BODY_BYTES).collect()).await;
    match read {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: the request body is over 4 MiB",
        )),
        Ok(Err(e)) => Err(plain(
            StatusCode::BAD_REQUEST,
            &format!("Bad Request: reading the body failed: {e}"),
        )),
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            "Request Timeout: the request body did not arrive in time",
        )),
    }
}

/// Bounds what an `initialize` says of its client, which the SDK keeps for the session's
/// life: the name as the engine records it, the title and version cut, nothing else.
fn bound_client_info(message: &mut Value) {
    let Some(info) = message
        .pointer_mut("/params/clientInfo")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    info.retain(|field, _| matches!(field.as_str(), "name" | "title" | "version"));
    for (field, most) in [
        ("name", MAX_CLIENT_NAME_CHARS),
        ("title", 80),
        ("version", 40),
    ] {
        if let Some(Value::String(text)) = info.get_mut(field) {
            *text = match field {
                "name" => client_label(text),
                _ => text
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(most)
                    .collect(),
            };
        }
    }
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text)).boxed()
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(full(text.to_string()))
        .expect("a valid response")
}

/// A JSON-RPC error as an HTTP error.
fn refusal(status: StatusCode, id: &Value, code: i64, message: &str) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(full(body.to_string()))
        .expect("a valid response")
}

fn unauthorized(id: &Value, message: &str) -> Response<Body> {
    let mut response = refusal(StatusCode::UNAUTHORIZED, id, UNAUTHORIZED.0.into(), message);
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn too_many_sessions(id: &Value, whose: &str) -> Response<Body> {
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        LIMIT_REACHED,
        &format!("{whose} has as many MCP sessions open as it may: close one (DELETE) first"),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("10"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_info_keeps_a_bounded_name_title_and_version_only() {
        let mut message = json!({"method": "initialize", "params": {"clientInfo": {
            "name": "x".repeat(1_000_000),
            "version": format!("1.0\u{1b}[2J{}", "9".repeat(100)),
            "icons": [{"src": "y".repeat(10_000)}],
            "websiteUrl": "http://example.test",
        }}});
        bound_client_info(&mut message);
        let info = &message["params"]["clientInfo"];
        assert_eq!(info.as_object().unwrap().len(), 2, "{info}");
        assert_eq!(
            info["name"].as_str().unwrap().chars().count(),
            MAX_CLIENT_NAME_CHARS + 1
        );
        assert!(info["version"].as_str().unwrap().starts_with("1.0[2J999"));
        assert_eq!(info["version"].as_str().unwrap().chars().count(), 40);
    }

    #[test]
    fn refused_keys_throttle_their_source_but_not_a_key_that_worked() {
        let throttle = Throttle::new(3);
        let (attacker, other) = (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2]));
        throttle.worked("qk_good");
        assert!(!throttle.refused(attacker));
        assert!(!throttle.refused(attacker));
        assert!(throttle.check(attacker, "qk_guess").is_ok());
        assert!(throttle.refused(attacker), "the third reaches the limit");
        assert!(throttle.check(attacker, "qk_guess").is_err());
        assert!(throttle.check(attacker, "qk_good").is_ok());
        assert!(throttle.check(other, "qk_guess").is_ok());
    }
}
