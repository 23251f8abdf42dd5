//! The MCP methods over the engine's outside-agent sessions. Every request is authenticated
//! first (a missing, unknown or revoked key gets an MCP error, never data); each caller gets
//! one session (a conversation of theirs) per MCP session, whose id binds the evidence
//! references the tools return.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use quarry_core::llm::ToolSpec;
use quarry_core::orchestrator::client_label;
use quarry_core::{DocumentId, Library, Principal};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, InitializeRequestParams, InitializeResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

/// The URI scheme of documents read as resources.
const DOCUMENT_URI: &str = "quarry://doc/";
/// JSON-RPC's range for server-defined errors: the caller is not authenticated.
pub const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);
/// The header naming the user a service key acts for, over HTTP.
pub const USER_HEADER: &str = "x-quarry-user";

/// Who requests run as.
pub enum Identity {
    /// The administrator (stdio with `--admin`).
    Administrator,
    /// A key given at start (stdio), authenticated again on every request.
    Key {
        secret: String,
        user: Option<String>,
    },
    /// Each HTTP request's `Authorization: Bearer` key.
    BearerPerRequest,
}

/// What every MCP session of this server shares.
pub struct Shared {
    /// The library is one SQLite connection: requests take turns (each is short next to the
    /// client's own think time).
    library: Mutex<Library>,
    config: Option<String>,
    mode: String,
    identity: Identity,
    /// Sessions of requests that come without an MCP session (stateless HTTP), by principal:
    /// their references then hold across that caller's requests to this server.
    stateless: Mutex<HashMap<String, String>>,
}

impl Shared {
    pub fn library(&self) -> std::sync::MutexGuard<'_, Library> {
        // A panicked request leaves nothing half-written in the handle (SQLite rolls back).
        self.library.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn new(library: Library, config: Option<String>, mode: String, identity: Identity) -> Self {
        Shared {
            library: Mutex::new(library),
            config,
            mode,
            identity,
            stateless: Mutex::new(HashMap::new()),
        }
    }
}

/// One MCP session's handler.
#[derive(Clone)]
pub struct QuarryMcp {
    shared: Arc<Shared>,
    /// This MCP session's engine session for each principal that used it.
    sessions: Arc<Mutex<HashMap<String, String>>>,
    /// The client's name from its `initialize`, bounded once there (`client_label`).
    client: Arc<OnceLock<String>>,
}

/// An authenticated request: who asks, in which engine session, from which client.
struct Caller {
    principal: Principal,
    session: String,
    client: String,
}

impl QuarryMcp {
    pub fn new(shared: Arc<Shared>) -> Self {
        QuarryMcp {
            shared,
            sessions: Arc::default(),
            client: Arc::default(),
        }
    }

    /// Serves one request: authenticates it, finds (or starts) the caller's engine session,
    /// then runs `work` as that caller, all in one task off the async threads and under one
    /// hold of the library (SQLite, ONNX Runtime and Python workers block).
    async fn as_caller<T: Send + 'static>(
        &self,
        context: &RequestContext<RoleServer>,
        work: impl FnOnce(&Library, &Caller) -> Result<T, ErrorData> + Send + 'static,
    ) -> Result<T, ErrorData> {
        let credentials = self.credentials(context)?;
        let client = self.client_name(context);
        let parts = context.extensions.get::<::http::request::Parts>();
        // Without an MCP session (stateless HTTP) there is nothing per-session to hang state
        // on: such requests share one engine session per caller for the server's life.
        let sessions = parts
            .is_none_or(|p| p.headers.contains_key("mcp-session-id"))
            .then(|| self.sessions.clone());
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let library = shared.library();
            let principal = match credentials {
                None => Principal::administrator(),
                Some((secret, user)) => library
                    .authenticate(&secret, user.as_deref())
                    .map_err(|e| ErrorData::new(UNAUTHORIZED, e.to_string(), None))?,
            };
            let mut map = match &sessions {
                Some(sessions) => sessions.lock().unwrap_or_else(|e| e.into_inner()),
                None => shared.stateless.lock().unwrap_or_else(|e| e.into_inner()),
            };
            let session = match map.get(&principal.id) {
                Some(session) => session.clone(),
                None => {
                    let started = library
                        .start_agent_session(
                            &principal,
                            shared.config.as_deref(),
                            &shared.mode,
                            &client,
                        )
                        .map_err(engine_error)?;
                    map.insert(principal.id.clone(), started.id.clone());
                    started.id
                }
            };
            drop(map);
            let caller = Caller {
                principal,
                session,
                client,
            };
            work(&library, &caller)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
    }

    /// The request's key and, for a service key, the user it acts for (`None`: the
    /// administrator); a request without one is refused here.
    fn credentials(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<(String, Option<String>)>, ErrorData> {
        match &self.shared.identity {
            Identity::Administrator => Ok(None),
            Identity::Key { secret, user } => Ok(Some((secret.clone(), user.clone()))),
            Identity::BearerPerRequest => {
                let headers = context
                    .extensions
                    .get::<::http::request::Parts>()
                    .map(|p| &p.headers);
                let secret = headers
                    .and_then(bearer)
                    .ok_or_else(|| ErrorData::new(UNAUTHORIZED, NO_KEY, None))?;
                Ok(Some((secret, headers.and_then(acting_for))))
            }
        }
    }

    /// The client's name: as bounded at its `initialize`, else (a request without a session)
    /// from the peer information the SDK keeps, bounded now.
    fn client_name(&self, context: &RequestContext<RoleServer>) -> String {
        match self.client.get() {
            Some(name) => name.clone(),
            None => {
                let info = context.peer.peer_info();
                client_label(info.as_ref().map_or("", |i| i.client_info.name.as_str()))
            }
        }
    }
}

/// What a request without a key is told.
pub const NO_KEY: &str = "unauthorized: send a Quarry API key as `Authorization: Bearer KEY`";

/// The key in a request's `Authorization: Bearer KEY` header.
pub fn bearer(headers: &::http::HeaderMap) -> Option<String> {
    headers
        .get(::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|secret| !secret.is_empty())
        .map(str::to_string)
}

/// The user a service key acts for, from the request's `X-Quarry-User` header.
pub fn acting_for(headers: &::http::HeaderMap) -> Option<String> {
    headers
        .get(USER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// An engine error as an MCP error, keeping its code.
fn engine_error(error: quarry_core::Error) -> ErrorData {
    let data = Some(serde_json::json!({ "code": error.code() }));
    match error.kind() {
        quarry_core::ErrorKind::NotFound => ErrorData::resource_not_found(error.to_string(), data),
        quarry_core::ErrorKind::InvalidInput => ErrorData::invalid_params(error.to_string(), data),
        _ => ErrorData::internal_error(error.to_string(), data),
    }
}

/// An engine tool as an MCP tool: its input schema is what the engine validates against.
fn mcp_tool(spec: ToolSpec) -> Tool {
    let schema = match spec.parameters {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema)).with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

impl ServerHandler for QuarryMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("quarry", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Quarry searches the user's own indexed documents. Call the search tool first; \
             results carry evidence_ref and sourceRef references that the fetch tools accept \
             back in this session (fetch tools unlock once run_pipeline has returned evidence). \
             Cited documents are readable as quarry://doc/ID resources.",
        )
    }

    /// The SDK's own `initialize`, keeping the client's name bounded once for every later
    /// call of the session (the trace and the audit log record it on each).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let _ = self.client.set(client_label(&request.client_info.name));
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let specs = self
            .as_caller(&context, |library, caller| {
                library
                    .agent_tools(&caller.principal, &caller.session)
                    .map_err(engine_error)
            })
            .await?;
        Ok(ListToolsResult::with_all_items(
            specs.into_iter().map(mcp_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let tool = request.name.to_string();
        let call = self
            .as_caller(&context, move |library, caller| {
                library
                    .agent_call(
                        &caller.principal,
                        &caller.session,
                        &caller.client,
                        &tool,
                        &arguments,
                    )
                    .map_err(engine_error)
            })
            .await?;
        let content = vec![ContentBlock::text(call.text)];
        Ok(if call.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let documents = self
            .as_caller(&context, |library, caller| {
                library
                    .agent_documents(&caller.principal, &caller.session)
                    .map_err(engine_error)
            })
            .await?;
        Ok(ListResourcesResult::with_all_items(
            documents
                .into_iter()
                .map(|d| {
                    let path = d.path.display().to_string();
                    Resource::new(format!("{DOCUMENT_URI}{}", d.document_id), path.clone())
                        .with_title(d.title.unwrap_or(path))
                        .with_description(format!("collection {}", d.collection))
                        .with_mime_type("text/plain")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let document = self
            .as_caller(&context, move |library, caller| {
                let id = request
                    .uri
                    .strip_prefix(DOCUMENT_URI)
                    .and_then(|id| id.parse::<i64>().ok())
                    .ok_or_else(|| {
                        ErrorData::resource_not_found(
                            format!(
                                "`{}` is not a Quarry document (quarry://doc/ID)",
                                request.uri
                            ),
                            None,
                        )
                    })?;
                library
                    .agent_document(
                        &caller.principal,
                        &caller.session,
                        &caller.client,
                        DocumentId::from(id),
                    )
                    .map_err(engine_error)
            })
            .await?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(document.text, uri)]).into())
    }
}
