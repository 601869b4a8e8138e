//! Binds the listener and wires the routes.

use std::net::SocketAddr;

use actix_web::dev::{ServerHandle, Service};
use actix_web::{web, App, HttpServer};
use taskgate_core::Gateway;

use crate::{mcp_endpoint, operations};

/// Disables Nagle's algorithm on an accepted connection.
pub fn set_nodelay(connection: &dyn std::any::Any, _: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        let _ = tcp.set_nodelay(true);
    }
}

/// The MCP endpoint's path.
pub const MCP_PATH: &str = "/mcp";

/// A running front door.
pub struct Running {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// Stops the server.
    pub handle: ServerHandle,
    /// Completes when the server stops.
    pub server: actix_web::dev::Server,
    /// The admin listener (`server.admin_listen`), if configured: its address and server.
    pub admin: Option<(SocketAddr, actix_web::dev::Server)>,
}

/// Binds `gateway.config().server.listen` (or `listen` when given) and returns the server,
/// not yet polled: spawn or await `server`. Call inside an actix system.
pub fn serve(gateway: Gateway, listen: Option<SocketAddr>) -> std::io::Result<Running> {
    let config = gateway.config().clone();
    let addr = listen.unwrap_or_else(|| config.listen_addr());
    let workers = match config.server.workers {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        n => n,
    };
    let data = web::Data::new(gateway);
    let main_data = data.clone();
    let server = HttpServer::new(move || {
        let metrics = main_data.clone();
        App::new()
            .app_data(main_data.clone())
            // Every response is counted by HTTP method and status.
            .wrap_fn(move |req, srv| {
                let method = req.method().as_str().to_owned();
                let metrics = metrics.clone();
                let response = srv.call(req);
                async move {
                    let response = response.await?;
                    let status = response.status().as_u16().to_string();
                    metrics.metrics().http_responses.with_label_values(&[&method, &status]).inc();
                    Ok(response)
                }
            })
            .service(
                web::resource(MCP_PATH)
                    .route(web::post().to(mcp_endpoint::post))
                    .route(web::get().to(mcp_endpoint::get))
                    .route(web::delete().to(mcp_endpoint::delete))
                    .default_service(web::to(mcp_endpoint::other)),
            )
            .configure(operations::routes)
    })
    .workers(workers)
    // Responses are streamed in small writes (SSE events): without TCP_NODELAY, Nagle's
    // algorithm and the client's delayed ACK add ~40 ms to a call.
    .on_connect(set_nodelay)
    .disable_signals()
    .shutdown_timeout(5)
    .bind(addr)?;
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tracing::info!(%addr, "taskgate listening; MCP endpoint at http://{addr}{MCP_PATH}");
    let admin = match &config.server.admin_listen {
        Some(admin) => {
            let admin_data = data.clone();
            let admin = HttpServer::new(move || App::new().app_data(admin_data.clone()).configure(operations::routes))
                .workers(1)
                .disable_signals()
                .bind(admin.as_str())?;
            let admin_addr = admin.addrs()[0];
            tracing::info!(addr = %admin_addr, "admin listener: /metrics, /healthz, /readyz");
            Some((admin_addr, admin.run()))
        }
        None => None,
    };
    Ok(Running { addr, handle, server, admin })
}
