//! Binds the listener and wires the routes.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::FutureExt;

use actix_web::dev::{ServerHandle, Service};
use std::rc::Rc;
use std::sync::Arc;

use actix_web::{web, App, HttpServer};
use taskgate_core::Gateway;

use crate::{mcp_endpoint, operations};

/// Disables Nagle's algorithm on an accepted connection.
pub fn set_nodelay(connection: &dyn std::any::Any, _: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        let _ = tcp.set_nodelay(true);
    }
}

/// Counts a new connection against its source's share, or shuts it down at once (both ways:
/// nothing more is read from it, and what came with the handshake is refused below) when the
/// source holds its share.
fn admit_connection(
    peers: &Arc<crate::peers::Peers>,
    connection: &dyn std::any::Any,
    data: &mut actix_web::dev::Extensions,
) {
    use std::os::fd::AsRawFd;
    let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() else { return };
    let Ok(peer) = tcp.peer_addr() else { return };
    let place = peers.connect(peer.ip());
    if place.refused() {
        // SAFETY: shutdown only changes the state of this connection's own socket.
        unsafe { libc::shutdown(tcp.as_raw_fd(), libc::SHUT_RDWR) };
    }
    data.insert(Rc::new(place));
}

/// For a request on a trusted proxy's connection: a place among its client's unfinished
/// requests, or a 429 saying the client holds its share.
fn proxied_request_place(
    peers: &Arc<crate::peers::Peers>,
    req: &actix_web::dev::ServiceRequest,
) -> Result<Option<crate::peers::RequestPlace>, actix_web::Error> {
    let place = req.conn_data::<Rc<crate::peers::ConnectionPlace>>();
    if place.is_some_and(|p| p.refused()) {
        // Bytes that came with a refused connection's handshake: no request of it is served.
        let response = actix_web::HttpResponse::ServiceUnavailable().force_close().finish();
        return Err(actix_web::error::InternalError::from_response("peer share", response).into());
    }
    if !peers.behind_proxies() {
        return Ok(None);
    }
    let Some(peer) = req.peer_addr().filter(|_| place.is_some_and(|p| p.proxied())) else { return Ok(None) };
    peers.begin_request(peer.ip(), req.headers()).map(Some).map_err(|source| {
        let message = format!(
            "{source} has server.max_unfinished_requests_per_peer requests in progress; retry once one is answered"
        );
        let body = taskgate_protocol::Message::error(
            None,
            taskgate_protocol::ErrorObject::new(taskgate_protocol::codes::RATE_LIMITED, message),
        );
        let response = actix_web::HttpResponse::TooManyRequests()
            .insert_header(("Retry-After", "1"))
            .force_close()
            .content_type("application/json")
            .body(body.to_json());
        actix_web::error::InternalError::from_response("peer share", response).into()
    })
}

/// Raises the soft limit on open files to the hard limit (a gateway holds a descriptor per
/// client connection, upstream connection and stdio pipe) and returns the limit in force.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                tracing::debug!(from = limit.rlim_cur, to = limit.rlim_max, "raised the open-file limit");
                limit = raised;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every target
    let open_files = limit.rlim_cur as u64;
    open_files
}

/// Connections each listener holds at most: `server.max_connections`, or three quarters of
/// the open-file limit (the rest stays for upstreams, the store, stdio pipes and the admin
/// listener, so a flood of client connections never exhausts the descriptors).
pub fn connection_cap(configured: usize, open_files: u64) -> usize {
    match configured {
        0 => ((open_files.saturating_mul(3) / 4) as usize).max(16),
        n => n,
    }
}

/// The MCP endpoint's path.
pub const MCP_PATH: &str = "/mcp";
/// A profile's endpoint (a virtual server of a tenant: `[[tenant.profile]]`).
pub const PROFILE_PATH: &str = "/mcp/{profile}";

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
    /// The 2026-07-28 front door's state (exchanges waiting for a client's retry).
    pub front: Arc<crate::revision_2026::Front2026>,
}

/// The listening sockets of a gateway, bound before anything else starts (a port in use is
/// said before any upstream process is started).
pub struct Listeners {
    main: std::net::TcpListener,
    /// The admin listener's sockets: one per address its host name resolves to.
    admin: Vec<std::net::TcpListener>,
}

/// Connections a listener queues before they are accepted (actix-web's own default).
const BACKLOG: i32 = 2048;

/// `addr` bound, with [`BACKLOG`] (the standard library's own is 128).
fn bound(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind(addr)?;
    // SAFETY: listen on a socket this function owns; a listening socket takes a new backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(listener)
}

impl Listeners {
    /// Binds `config.server.listen` (or `listen` when given) and `server.admin_listen`; an
    /// error names the address that could not be had.
    pub fn bind(config: &taskgate_config::Config, listen: Option<SocketAddr>) -> std::io::Result<Listeners> {
        let addr = listen.unwrap_or_else(|| config.listen_addr());
        let named =
            |addr: &str, e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"));
        let main = bound(addr).map_err(|e| named(&addr.to_string(), e))?;
        let mut admin = Vec::new();
        if let Some(at) = &config.server.admin_listen {
            use std::net::ToSocketAddrs;
            // Every address the name stands for (`localhost`: IPv4 and IPv6), as actix binds them.
            // Those that can be had; an error only when none can.
            let mut refused = None;
            for addr in at.to_socket_addrs().map_err(|e| named(at, e))? {
                match bound(addr) {
                    Ok(listener) => admin.push(listener),
                    Err(e) => refused = Some(named(at, e)),
                }
            }
            if let (true, Some(e)) = (admin.is_empty(), refused) {
                return Err(e);
            }
        }
        Ok(Listeners { main, admin })
    }
}

/// The MCP endpoint's methods at `path`.
fn mcp_resource(path: &str) -> actix_web::Resource {
    web::resource(path)
        .route(web::post().to(mcp_endpoint::post))
        .route(web::get().to(mcp_endpoint::get))
        .route(web::delete().to(mcp_endpoint::delete))
        .route(web::method(actix_web::http::Method::OPTIONS).to(crate::cors::preflight))
        .default_service(web::to(mcp_endpoint::other))
}

/// Binds `gateway.config().server.listen` (or `listen` when given) and returns the server,
/// not yet polled: spawn or await `server`. Call inside an actix system.
pub fn serve(gateway: Gateway, listen: Option<SocketAddr>) -> std::io::Result<Running> {
    let listeners = Listeners::bind(gateway.config(), listen)?;
    serve_on(gateway, listeners)
}

/// [`serve`] on listeners bound already.
pub fn serve_on(gateway: Gateway, listeners: Listeners) -> std::io::Result<Running> {
    let config = gateway.config().clone();
    let addr = listeners.main.local_addr()?;
    let workers = match config.server.workers {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        n => n,
    };
    let connections = connection_cap(config.server.max_connections, raise_open_file_limit());
    let peers = crate::peers::Peers::new(&config.server, connections, gateway.shared_metrics());
    let front = web::Data::new(crate::revision_2026::Front2026::new(&config, gateway.replica(), gateway.clock()));
    let front_state = front.clone().into_inner();
    // 2026-07-28 retries other replicas pass on to this one, for the exchanges it holds.
    let (relayed, first_wait) =
        (front.clone().into_inner(), Duration::from_millis(config.server.first_message_wait_ms));
    gateway.serve_forwarded_retries(Arc::new(move |identity, request| {
        crate::revision_2026::serve_relayed(relayed.clone(), identity, request, first_wait).boxed_local()
    }));
    let data = web::Data::new(gateway);
    let main_data = data.clone();
    let accepted = peers.clone();
    let per_peer = peers.max_connections_per_peer();
    let public_operations = operations::public_routes(config.server.serves_public_metrics(addr.ip()));
    let admin_on_main = config.admin.on_main_listener.then(|| crate::admin::Shared::new().routes());
    let server = HttpServer::new(move || {
        let metrics = main_data.clone();
        let peers = peers.clone();
        App::new()
            .app_data(main_data.clone())
            .app_data(front.clone())
            .app_data(web::Data::from(peers.clone()))
            // Every response is counted by HTTP method and status, and one to a browser of an
            // allowed origin carries the CORS headers. A client behind a trusted proxy holds at
            // most its share of unfinished requests.
            .wrap_fn(move |req, srv| {
                let method = req.method().as_str().to_owned();
                let metrics = metrics.clone();
                let origin = req.headers().get(actix_web::http::header::ORIGIN).cloned();
                let place = match proxied_request_place(&peers, &req) {
                    Ok(place) => place,
                    Err(refused) => return futures_util::future::Either::Left(std::future::ready(Err(refused))),
                };
                let response = srv.call(req);
                futures_util::future::Either::Right(async move {
                    let mut response = response.await?;
                    drop(place);
                    if let Some(origin) = origin {
                        crate::cors::annotate(
                            &origin,
                            response.headers_mut(),
                            &metrics.config().server.allowed_origins,
                        );
                    }
                    let status = response.status().as_u16().to_string();
                    metrics.metrics().http_responses.with_label_values(&[&method, &status]).inc();
                    Ok(response)
                })
            })
            // The tenant's own endpoint, and its profiles' (virtual servers): two resources,
            // so that the common one is matched as a static path.
            .service(mcp_resource(MCP_PATH))
            .service(mcp_resource(PROFILE_PATH))
            .configure(public_operations.clone())
            .configure(|routes| {
                if let Some(admin) = &admin_on_main {
                    admin(routes);
                }
            })
            .route("/.well-known/oauth-protected-resource", web::get().to(operations::protected_resource))
            .route("/.well-known/oauth-protected-resource/{path:.*}", web::get().to(operations::protected_resource))
    })
    .workers(workers)
    // actix counts connections per worker.
    .max_connections(connections.div_ceil(workers).max(1))
    // Responses are streamed in small writes (SSE events): without TCP_NODELAY, Nagle's
    // algorithm and the client's delayed ACK add ~40 ms to a call. A source holding its share
    // of connections has the new one shut down at once, and none of its requests served.
    .on_connect(move |connection, data| {
        set_nodelay(connection, data);
        admit_connection(&accepted, connection, data);
    })
    // A client gone (EOF on its connection) ends what the gateway streams to it at once, not
    // at the next write: a GET stream whose client left holds nothing (its session lets its
    // pooled upstream sessions go). HTTP clients do not half-close while awaiting a response.
    .h1_allow_half_closed(false)
    .disable_signals()
    // The graceful drain happens before the server is stopped (see `taskgate serve`).
    .shutdown_timeout(1)
    .listen(listeners.main)?;
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tracing::info!(%addr, max_connections = connections, max_connections_per_peer = per_peer, "taskgate listening; MCP endpoint at http://{addr}{MCP_PATH}");
    let admin = match listeners.admin.is_empty() {
        false => {
            let admin_data = data.clone();
            let admin_routes = crate::admin::Shared::new().routes();
            let admin = HttpServer::new(move || {
                App::new().app_data(admin_data.clone()).configure(operations::routes).configure(admin_routes.clone())
            })
            .workers(1)
            .disable_signals();
            let mut admin = admin;
            for listener in listeners.admin {
                admin = admin.listen(listener)?;
            }
            let admin_addr = admin.addrs()[0];
            if config.admin.keys.is_empty() {
                tracing::info!(addr = %admin_addr, "admin listener: /metrics, /healthz, /readyz (no [[admin.key]]: no /admin/)");
            } else {
                tracing::info!(addr = %admin_addr, "admin listener: /metrics, /healthz, /readyz, /admin/");
            }
            Some((admin_addr, admin.run()))
        }
        true => None,
    };
    Ok(Running { addr, handle, server, admin, front: front_state })
}
