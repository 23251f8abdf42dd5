//! `quarry mcp`: the library as a Model Context Protocol server, so other assistants and
//! editors search it through `knowledge_search` and the fetch tools, under a key.
//!
//! - `handler`: the MCP methods (tools and resources) over the engine's outside-agent
//!   sessions (`Library::agent_*`), each request authenticated;
//! - `http`: Streamable HTTP on a loopback address, with Host and Origin checks, capped and
//!   timed-out connections;
//! - `gate`: in front of the SDK over HTTP: keys before sessions, refused keys throttled,
//!   sessions capped, `clientInfo` bounded.
//!
//! stdout is the protocol on stdio: logs go to stderr (the CLI's subscriber), never stdout.

mod gate;
mod handler;
mod http;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use quarry_core::orchestrator::DEFAULT_CONFIG;
use quarry_core::Library;
use rmcp::ServiceExt;

use handler::{Identity, QuarryMcp, Shared};

/// `quarry mcp` arguments.
#[derive(Args)]
pub struct McpArgs {
    /// The orchestrator mode whose tools are offered (its pipeline, knowledge_search and
    /// direct evidence tools, under its gates and budgets)
    #[arg(long, default_value = "agent")]
    mode: String,
    /// The orchestrator configuration [default: default]
    #[arg(long)]
    config: Option<String>,
    /// Over stdio: serve as this API key (a personal key, or a service key with --user)
    #[arg(long, env = "QUARRY_KEY", hide_env_values = true)]
    key: Option<String>,
    /// With a service key: the user it acts for
    #[arg(long)]
    user: Option<String>,
    /// Over stdio without a key: serve as the administrator, who reads every collection
    #[arg(long)]
    admin: bool,
    /// Serve Streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of
    /// stdio; every request then carries its key as `Authorization: Bearer KEY`
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Over HTTP: most connections open at once [default: 256, at most half the open-file limit]
    #[arg(long, hide = true)]
    max_connections: Option<usize>,
    /// Over HTTP: seconds a connection may wait for a request before it is closed
    #[arg(long, hide = true, default_value_t = 30.0)]
    idle_timeout: f64,
    /// Over HTTP: most MCP sessions open at once
    #[arg(long, hide = true, default_value_t = 128)]
    max_sessions: usize,
    /// Over HTTP: most MCP sessions per key (one more closes the key's oldest)
    #[arg(long, hide = true, default_value_t = 16)]
    max_sessions_per_key: usize,
    /// Over HTTP: refused keys a client may present per minute before it is answered 429
    #[arg(long, hide = true, default_value_t = 10)]
    failed_sign_ins_per_minute: u32,
}

impl McpArgs {
    /// The HTTP server's limits from the (hidden) flags.
    fn limits(&self) -> Result<http::Limits> {
        let defaults = http::Limits::default();
        if !(self.idle_timeout.is_finite() && self.idle_timeout > 0.0) {
            bail!("--idle-timeout takes a positive number of seconds");
        }
        Ok(http::Limits {
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            idle_timeout: Duration::from_secs_f64(self.idle_timeout),
            max_sessions: self.max_sessions.max(1),
            max_sessions_per_key: self.max_sessions_per_key.max(1),
            failed_sign_ins_per_minute: self.failed_sign_ins_per_minute.max(1),
            ..defaults
        })
    }
}

/// Runs the server until the client leaves (stdio) or the process is stopped (HTTP).
pub fn run(args: McpArgs, library: Library) -> Result<()> {
    let identity = identity(&args, &library)?;
    let limits = args.limits()?;
    // Fails before serving when the configuration or mode does not exist.
    library
        .orchestrator_revision(args.config.as_deref().unwrap_or(DEFAULT_CONFIG), None)?
        .config
        .mode(&args.mode)?;
    let shared = Arc::new(Shared::new(library, args.config, args.mode, identity));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        match args.http {
            Some(address) => http::serve(shared, address, limits).await,
            None => serve_stdio(shared).await,
        }
    })
}

/// Who the server runs as: over stdio a key given now (checked again on every request, so a
/// revoked key stops working mid-session), or the administrator only when asked for by name;
/// over HTTP each request's bearer key.
fn identity(args: &McpArgs, library: &Library) -> Result<Identity> {
    if args.http.is_some() {
        if args.key.is_some() || args.admin {
            bail!("over HTTP every request carries its own key (Authorization: Bearer KEY); --key and --admin apply to stdio");
        }
        return Ok(Identity::BearerPerRequest);
    }
    match (&args.key, args.admin) {
        (Some(_), true) => bail!("give --key or --admin, not both"),
        (Some(key), false) => {
            library.authenticate(key, args.user.as_deref())?;
            Ok(Identity::Key {
                secret: key.clone(),
                user: args.user.clone(),
            })
        }
        (None, true) => Ok(Identity::Administrator),
        (None, false) => bail!(
            "quarry mcp needs a key (--key KEY or QUARRY_KEY; see `quarry keys create`) so the client sees only what that key may read; pass --admin to serve every collection as the administrator"
        ),
    }
}

async fn serve_stdio(shared: Arc<Shared>) -> Result<()> {
    let server = QuarryMcp::new(shared)
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session on stdio")?;
    server.waiting().await.context("serving MCP on stdio")?;
    Ok(())
}
