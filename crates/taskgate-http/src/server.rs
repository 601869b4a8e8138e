//! Binds the listener and wires the routes.

use std::net::SocketAddr;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use taskgate_core::Gateway;

use crate::mcp_endpoint;

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
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .service(
                web::resource(MCP_PATH)
                    .route(web::post().to(mcp_endpoint::post))
                    .route(web::get().to(mcp_endpoint::get))
                    .route(web::delete().to(mcp_endpoint::delete))
                    .default_service(web::to(mcp_endpoint::other)),
            )
            .route("/healthz", web::get().to(|| async { HttpResponse::Ok().content_type("text/plain").body("ok\n") }))
    })
    .workers(workers)
    .disable_signals()
    .shutdown_timeout(5)
    .bind(addr)?;
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tracing::info!(%addr, "taskgate listening; MCP endpoint at http://{addr}{MCP_PATH}");
    Ok(Running { addr, handle, server })
}
