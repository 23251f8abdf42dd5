//! Streamable HTTP on a loopback address. The SDK's service checks the `Host` header against
//! loopback names and the `Origin` header against this server's own origins, so a web page
//! (DNS rebinding, or a cross-site request) cannot drive the library through the user's
//! browser; each request still needs its key.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::handler::{QuarryMcp, Shared};

/// Serves until Ctrl-C or SIGTERM.
pub async fn serve(shared: Arc<Shared>, address: SocketAddr) -> Result<()> {
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
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins([
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ])
        .enforce_origin_validation();
    let service = StreamableHttpService::new(
        move || Ok(QuarryMcp::new(shared.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    // Tests and launchers read the address from here (port 0 picks a free one).
    eprintln!("quarry mcp: listening on http://{bound}/mcp");
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(connection) => connection,
                    Err(e) => {
                        tracing::warn!("accepting a connection failed: {e}");
                        continue;
                    }
                };
                let service = TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let served = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!("an HTTP connection ended with an error: {e}");
                    }
                });
            }
            _ = &mut stop => return Ok(()),
        }
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
