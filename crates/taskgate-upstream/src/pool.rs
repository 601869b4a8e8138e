//! Connections to one HTTP upstream, kept by each thread that sends to it.
//!
//! hyper drives a connection on the runtime of the thread that opened it. A pool shared by
//! every thread has a worker's call ride a connection another thread opened, so that thread
//! wakes to write the request and again to read the response (BENCHMARKS.md, "Where a proxied
//! call's time goes"). Here each thread keeps its own idle connections, so a call's request and response
//! stay on the thread that took the client's request. The pool is hyper's HTTP/1 connection
//! API and a list per thread: a checkout takes the most recent idle connection, a return
//! pushes it, with no lock, no hash of the upstream's address and no task spawned per request.
//!
//! A connection is listed idle again when its response (head and body) is dropped. Its task
//! then reads the rest of a response left before its end if that has come (an SSE reader stops
//! at the message it waits for), or closes it; a checkout takes it only once it can take
//! another request, and only within `idle_timeout`, after which its own task closes it and
//! uncounts it. A request that meets a reused connection closed before the request was written
//! is sent again on another (what hyper's pooled client does); one that may have been written
//! is not.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_tls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

type Stream = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
type Sender = SendRequest<Full<Bytes>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One upstream's connections: how they are opened and how long they are kept idle. Each
/// thread lists its own idle ones, at most `max_idle` on all threads together; the requests in
/// flight are bounded across threads by `Connections` (`http/connections.rs`).
#[derive(Clone)]
pub(crate) struct PerThread(Arc<Pooling>);

struct Pooling {
    max_idle: usize,
    /// Idle connections listed now, on every thread.
    idle: AtomicUsize,
    idle_timeout: Duration,
    /// TCP with TLS for https.
    connector: HttpsConnector<HttpConnector>,
}

/// An idle connection: its sender, and what it shares with its task.
struct Idle {
    sender: Sender,
    state: Arc<ConnState>,
}

/// What a connection's sender and its task share: since when it is idle, in milliseconds from
/// the first time [`now_ms`] was asked, or [`IN_USE`]; whether it is counted among the idle
/// ones (`Pooling::idle`), so that whichever of a checkout, a thread's list and the
/// connection's task lets it go uncounts it, once.
struct ConnState {
    idle_since: AtomicU64,
    counted: AtomicBool,
}

impl ConnState {
    fn uncount(&self, pooling: &Pooling) {
        if self.counted.swap(false, Ordering::AcqRel) {
            pooling.idle.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

const IN_USE: u64 = u64::MAX;

/// One thread's idle connections to one upstream, uncounted when dropped (the thread ends).
struct List {
    pooling: Weak<Pooling>,
    idle: Vec<Idle>,
}

impl Drop for List {
    fn drop(&mut self) {
        if let Some(pooling) = self.pooling.upgrade() {
            for idle in &self.idle {
                idle.state.uncount(&pooling);
            }
        }
    }
}

thread_local! {
    /// This thread's idle connections, by upstream. The list of an upstream gone (a reload
    /// removed it) is dropped when this thread next sends to an upstream it has no list for;
    /// its connections are closed by their tasks after the idle timeout meanwhile.
    static IDLE: RefCell<Vec<List>> = const { RefCell::new(Vec::new()) };
}

/// A failed exchange: connecting, or sending the request and reading the response's head.
pub(crate) enum PoolError {
    Connect(BoxError),
    Send(hyper::Error),
}

/// A connection in use by one response: listed idle again when dropped.
pub(crate) struct Lease {
    sender: Option<Sender>,
    state: Arc<ConnState>,
    pooling: Arc<Pooling>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(sender) = self.sender.take() else { return };
        if !sender.is_closed() {
            park(&self.pooling, Idle { sender, state: self.state.clone() });
        }
    }
}

/// Lists a connection among this thread's idle ones, unless `max_idle` are counted on all
/// threads (after this thread's closed and expired ones make room); otherwise it closes. The
/// rest of its response may be unread yet: a checkout takes it only once it can take a request.
fn park(pooling: &Arc<Pooling>, idle: Idle) {
    idle.state.idle_since.store(now_ms(), Ordering::Relaxed);
    // A thread shutting down has no lists left: the connection just closes.
    let _ = IDLE.try_with(|lists| {
        let mut lists = lists.borrow_mut();
        let me = Arc::as_ptr(pooling);
        let at = match lists.iter().position(|list| list.pooling.as_ptr() == me) {
            Some(at) => at,
            None => {
                lists.push(List { pooling: Arc::downgrade(pooling), idle: Vec::new() });
                lists.len() - 1
            }
        };
        let list = &mut lists[at].idle;
        let over = pooling.idle.fetch_add(1, Ordering::Relaxed) >= pooling.max_idle;
        idle.state.counted.store(true, Ordering::Release);
        if over {
            let (now, timeout) = (now_ms(), pooling.idle_timeout.as_millis() as u64);
            list.retain(|i| {
                let since = i.state.idle_since.load(Ordering::Relaxed);
                let gone = i.sender.is_closed() || now.saturating_sub(since) >= timeout;
                if gone {
                    i.state.uncount(pooling);
                }
                !gone
            });
            if pooling.idle.load(Ordering::Relaxed) > pooling.max_idle {
                idle.state.uncount(pooling);
                return;
            }
        }
        list.push(idle);
    });
}

impl PerThread {
    /// Connections kept idle at most `idle_timeout`, at most `max_idle` of them.
    pub(crate) fn new(max_idle: usize, idle_timeout: Duration) -> PerThread {
        // Made once for every upstream: reading the system's trusted certificates costs about
        // half a billion instructions.
        static TLS: OnceLock<hyper_tls::native_tls::TlsConnector> = OnceLock::new();
        let tls =
            TLS.get_or_init(|| hyper_tls::native_tls::TlsConnector::new().expect("the system's TLS connector builds"));
        PerThread::with_tls(max_idle, idle_timeout, tls.clone())
    }

    /// The same, trusting what `tls` trusts.
    fn with_tls(max_idle: usize, idle_timeout: Duration, tls: hyper_tls::native_tls::TlsConnector) -> PerThread {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        // https too: the TLS connector wraps this one.
        http.enforce_http(false);
        let connector = HttpsConnector::from((http, tls.into()));
        let max_idle = max_idle.max(1);
        PerThread(Arc::new(Pooling { max_idle, idle: AtomicUsize::new(0), idle_timeout, connector }))
    }

    /// Sends `request` (its URI in origin form, its `Host` set) to the server at `address` (an
    /// absolute URI: scheme and authority) on one of this thread's idle connections, or a new
    /// one; returns the response once its head has arrived.
    pub(crate) async fn send(
        &self,
        address: &hyper::Uri,
        mut request: hyper::Request<Full<Bytes>>,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, Lease), PoolError> {
        loop {
            let (mut sender, state, reused) = match self.idle() {
                Some(Idle { sender, state }) => (sender, state, true),
                None => {
                    let (sender, state) = self.connect(address).await?;
                    (sender, state, false)
                }
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    return Ok((response, Lease { sender: Some(sender), state, pooling: self.0.clone() }));
                }
                Err(mut e) => match e.take_message() {
                    // Not written: a closed idle connection, safe to send again.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(PoolError::Send(e.into_error())),
                },
            }
        }
    }

    /// This thread's most recently used idle connection that can take a request now and is
    /// within the idle timeout (its task may not have run yet to close it), marked in use. One
    /// whose task has not run since its response was dropped is passed over, not waited for:
    /// a later checkout takes it once its task has read the rest of that response.
    fn idle(&self) -> Option<Idle> {
        IDLE.with(|lists| {
            let mut lists = lists.borrow_mut();
            // A live `Arc` never shares its address with another allocation's `Weak`: the
            // `Weak` keeps its allocation (not its value) until it is dropped.
            let me = Arc::as_ptr(&self.0);
            let Some(list) = lists.iter_mut().find(|list| list.pooling.as_ptr() == me) else {
                lists.retain(|list| list.pooling.strong_count() > 0);
                return None;
            };
            let (now, timeout) = (now_ms(), self.0.idle_timeout.as_millis() as u64);
            let mut at = list.idle.len();
            while at > 0 {
                at -= 1;
                let idle = &list.idle[at];
                let since = idle.state.idle_since.load(Ordering::Relaxed);
                if idle.sender.is_closed() || now.saturating_sub(since) >= timeout {
                    list.idle.remove(at).state.uncount(&self.0);
                } else if idle.sender.is_ready() {
                    let idle = list.idle.remove(at);
                    idle.state.uncount(&self.0);
                    idle.state.idle_since.store(IN_USE, Ordering::Relaxed);
                    return Some(idle);
                }
                // Its task has not run since its response was dropped: left for a later
                // checkout (or to be found closed).
            }
            None
        })
    }

    /// A new connection, driven by a task on this thread's runtime, ready for a request.
    async fn connect(&self, address: &hyper::Uri) -> Result<(Sender, Arc<ConnState>), PoolError> {
        use tower_service::Service;
        let mut connector = self.0.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await.map_err(PoolError::Connect)?;
        let stream = connector.call(address.clone()).await.map_err(PoolError::Connect)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(stream).await.map_err(|e| PoolError::Connect(Box::new(e)))?;
        let state = Arc::new(ConnState { idle_since: AtomicU64::new(IN_USE), counted: AtomicBool::new(false) });
        tokio::spawn(drive(connection, state.clone(), Arc::downgrade(&self.0)));
        sender.ready().await.map_err(|e| PoolError::Connect(Box::new(e)))?;
        Ok((sender, state))
    }
}

/// Drives one connection until it ends, or until it has been idle for `idle_timeout`: closing
/// it then, before the common servers' keep-alive (5 s) closes it under a request. The timer is
/// set once per `idle_timeout`, not per request. An idle connection that ends is uncounted at
/// once, whether or not its thread sends again.
async fn drive(connection: Connection<Stream, Full<Bytes>>, state: Arc<ConnState>, pooling: Weak<Pooling>) {
    let mut connection: Pin<Box<Connection<Stream, Full<Bytes>>>> = Box::pin(connection);
    let Some(idle_timeout) = pooling.upgrade().map(|p| p.idle_timeout) else { return };
    let mut wait = idle_timeout;
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "an upstream connection ended with an error");
                }
                break;
            }
            () = tokio::time::sleep(wait) => {}
        }
        let since = state.idle_since.load(Ordering::Relaxed);
        if since == IN_USE {
            wait = idle_timeout;
            continue;
        }
        let idle = Duration::from_millis(now_ms().saturating_sub(since));
        if idle >= idle_timeout {
            // Dropping it closes the socket; its sender, if still listed, reads closed.
            break;
        }
        wait = idle_timeout - idle;
    }
    if let Some(pooling) = pooling.upgrade() {
        state.uncount(&pooling);
    }
}

/// Milliseconds since the first time this was asked.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl PoolError {
    /// The error, for its chain of causes.
    pub(crate) fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            PoolError::Connect(e) => e.as_ref(),
            PoolError::Send(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;

    /// What the test server saw, by connection number.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Accepted(usize),
        Request(usize),
        Closed(usize),
    }

    #[derive(Clone, Copy)]
    enum Serve {
        /// Answers every request and keeps the connection.
        KeepAlive,
        /// Answers, then closes the connection without saying so.
        CloseAfterAnswer,
        /// Reads the request and closes without answering.
        CloseUnanswered,
        /// Answers the first request; reads the second and closes without answering.
        AnswerOnce,
        /// Answers with a body that never ends.
        Endless,
        /// Answers with a chunked body, its end written with its first chunk.
        Chunked,
    }

    /// An HTTP/1.1 server on loopback reporting what it sees; returns its address.
    async fn server(serve: Serve) -> (hyper::Uri, mpsc::UnboundedReceiver<Seen>) {
        serve_on(serve, None).await
    }

    /// The test certificate (localhost and 127.0.0.1) and its key.
    const CERTIFICATE: &[u8] = include_bytes!("testdata/localhost.crt");
    const KEY: &[u8] = include_bytes!("testdata/localhost.key");

    /// The same over TLS with the test certificate.
    async fn tls_server(serve: Serve) -> (hyper::Uri, mpsc::UnboundedReceiver<Seen>) {
        let identity = hyper_tls::native_tls::Identity::from_pkcs8(CERTIFICATE, KEY).unwrap();
        let acceptor = hyper_tls::native_tls::TlsAcceptor::new(identity).unwrap();
        serve_on(serve, Some(tokio_native_tls::TlsAcceptor::from(acceptor))).await
    }

    async fn serve_on(
        serve: Serve,
        tls: Option<tokio_native_tls::TlsAcceptor>,
    ) -> (hyper::Uri, mpsc::UnboundedReceiver<Seen>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let address: hyper::Uri = format!("{scheme}://{}", listener.local_addr().unwrap()).parse().unwrap();
        let (seen, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for n in 0.. {
                let (socket, _) = listener.accept().await.unwrap();
                let seen = seen.clone();
                let _ = seen.send(Seen::Accepted(n));
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => answer(socket, n, serve, seen).await,
                        Some(tls) => match tls.accept(socket).await {
                            Ok(socket) => answer(socket, n, serve, seen).await,
                            Err(_) => {
                                let _ = seen.send(Seen::Closed(n));
                            }
                        },
                    }
                });
            }
        });
        (address, events)
    }

    /// Serves connection `n`.
    async fn answer(
        mut socket: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        n: usize,
        serve: Serve,
        seen: mpsc::UnboundedSender<Seen>,
    ) {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut answered = 0;
        loop {
            while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buffer.len() < end + 4 + length {
                    break;
                }
                buffer.drain(..end + 4 + length);
                let _ = seen.send(Seen::Request(n));
                answered += 1;
                if matches!(serve, Serve::CloseUnanswered) || matches!(serve, Serve::AnswerOnce if answered > 1) {
                    let _ = seen.send(Seen::Closed(n));
                    return;
                }
                if let Serve::Endless = serve {
                    let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n";
                    socket.write_all(head).await.unwrap();
                    socket.flush().await.unwrap();
                    // Nothing more until the client goes.
                    while socket.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
                    let _ = seen.send(Seen::Closed(n));
                    return;
                }
                if let Serve::Chunked = serve {
                    let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
                    socket.write_all(answer).await.unwrap();
                    socket.flush().await.unwrap();
                    continue;
                }
                socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
                socket.flush().await.unwrap();
                if let Serve::CloseAfterAnswer = serve {
                    drop(socket);
                    let _ = seen.send(Seen::Closed(n));
                    return;
                }
            }
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    let _ = seen.send(Seen::Closed(n));
                    return;
                }
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// The same server on a thread and runtime of its own, for tests whose threads each run
    /// theirs.
    fn server_on_a_thread(serve: Serve) -> (hyper::Uri, mpsc::UnboundedReceiver<Seen>) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            runtime().block_on(async {
                tx.send(server(serve).await).unwrap();
                std::future::pending::<()>().await
            })
        });
        rx.recv().unwrap()
    }

    fn request(address: &hyper::Uri) -> hyper::Request<Full<Bytes>> {
        let mut request = hyper::Request::new(Full::new(Bytes::from_static(b"{}")));
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = hyper::Uri::from_static("/mcp");
        request.headers_mut().insert(hyper::header::HOST, address.authority().unwrap().as_str().parse().unwrap());
        request
    }

    /// Sends one request and reads its response whole.
    async fn exchange(pool: &PerThread, address: &hyper::Uri) -> Result<Bytes, String> {
        use http_body_util::BodyExt;
        let (response, lease) = pool.send(address, request(address)).await.map_err(|e| e.as_error().to_string())?;
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        drop(lease);
        Ok(body)
    }

    async fn next(events: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("the server saw something").unwrap()
    }

    #[tokio::test]
    async fn a_thread_sends_its_requests_on_the_connection_it_opened() {
        let (address, mut events) = server(Serve::KeepAlive).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        }
        let seen: Vec<Seen> = vec![next(&mut events).await, next(&mut events).await, next(&mut events).await];
        assert_eq!(seen, [Seen::Accepted(0), Seen::Request(0), Seen::Request(0)]);
        assert_eq!(next(&mut events).await, Seen::Request(0));
        assert!(events.try_recv().is_err(), "one connection, three requests");
    }

    #[test]
    fn each_thread_keeps_connections_of_its_own() {
        let rt = runtime;
        let (address, mut events) = server_on_a_thread(Serve::KeepAlive);
        let pool = PerThread::new(4, Duration::from_secs(60));
        // The first thread's connection is idle and open while the second sends: a pool shared
        // by both would hand it to the second.
        let (first_done, second_done) =
            (std::sync::Arc::new(std::sync::Barrier::new(2)), std::sync::Arc::new(std::sync::Barrier::new(2)));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (pool, address) = (pool.clone(), address.clone());
                let (first_done, second_done) = (first_done.clone(), second_done.clone());
                std::thread::spawn(move || {
                    if i == 1 {
                        first_done.wait();
                    }
                    // Kept until both are done: its connections stay open.
                    let runtime = rt();
                    runtime.block_on(async {
                        for _ in 0..2 {
                            let sent = tokio::time::timeout(Duration::from_secs(10), exchange(&pool, &address));
                            assert_eq!(sent.await.expect("answered").unwrap(), "ok");
                        }
                    });
                    if i == 0 {
                        first_done.wait();
                    }
                    second_done.wait();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let mut requests = std::collections::BTreeMap::new();
        rt().block_on(async {
            // A thread's connections close when it ends.
            while requests.values().sum::<usize>() < 4 {
                if let Seen::Request(n) = next(&mut events).await {
                    *requests.entry(n).or_insert(0) += 1;
                }
            }
        });
        assert_eq!(
            requests.into_values().collect::<Vec<_>>(),
            [2, 2],
            "one connection per thread, two requests on each"
        );
    }

    #[tokio::test]
    async fn a_request_meeting_a_closed_idle_connection_goes_on_a_new_one() {
        let (address, mut events) = server(Serve::CloseAfterAnswer).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        assert_eq!(next(&mut events).await, Seen::Accepted(0));
        assert_eq!(next(&mut events).await, Seen::Request(0));
        assert_eq!(next(&mut events).await, Seen::Closed(0));
        // The idle connection is closed at the server; the request is not lost for it.
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        assert_eq!(next(&mut events).await, Seen::Accepted(1));
        assert_eq!(next(&mut events).await, Seen::Request(1));
    }

    #[tokio::test]
    async fn a_request_the_server_may_have_read_is_not_sent_again() {
        let (address, mut events) = server(Serve::CloseUnanswered).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        let error = exchange(&pool, &address).await.unwrap_err();
        assert!(error.contains("connection closed"), "{error}");
        assert_eq!(next(&mut events).await, Seen::Accepted(0));
        assert_eq!(next(&mut events).await, Seen::Request(0));
        assert_eq!(next(&mut events).await, Seen::Closed(0));
        assert!(events.try_recv().is_err(), "sent once");
    }

    #[tokio::test]
    async fn a_connection_idle_for_the_idle_timeout_is_closed() {
        let (address, mut events) = server(Serve::KeepAlive).await;
        let pool = PerThread::new(4, Duration::from_millis(100));
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        assert_eq!(next(&mut events).await, Seen::Accepted(0));
        assert_eq!(next(&mut events).await, Seen::Request(0));
        // The gateway closes it (the server never would).
        assert_eq!(next(&mut events).await, Seen::Closed(0));
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        assert_eq!(next(&mut events).await, Seen::Accepted(1));
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_are_kept_idle() {
        let (address, mut events) = server(Serve::KeepAlive).await;
        let pool = PerThread::new(1, Duration::from_secs(60));
        // Two requests at once need two connections.
        let (a, b) = tokio::join!(pool.send(&address, request(&address)), pool.send(&address, request(&address)));
        let (a, b) = (a.ok().unwrap(), b.ok().unwrap());
        let mut accepted = 0;
        while accepted < 2 {
            if let Seen::Accepted(_) = next(&mut events).await {
                accepted += 1;
            }
        }
        drop((a, b));
        // One stays idle; the other is closed.
        loop {
            match next(&mut events).await {
                Seen::Closed(_) => break,
                Seen::Request(_) => continue,
                Seen::Accepted(n) => panic!("connection {n} opened"),
            }
        }
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        assert!(matches!(next(&mut events).await, Seen::Request(_)), "the idle one is used");
    }

    #[test]
    fn a_connection_closed_idle_on_a_thread_that_sends_no_more_leaves_room_for_others() {
        let rt = runtime;
        let (address, mut events) = server_on_a_thread(Serve::KeepAlive);
        // Room for one idle connection on all threads together.
        let pool = PerThread::new(1, Duration::from_millis(200));
        // A thread sends once and then nothing more, its runtime (and list) alive: its idle
        // connection is closed by its task after the idle timeout.
        let (done, until_done) = tokio::sync::oneshot::channel::<()>();
        let quiet = {
            let (pool, address) = (pool.clone(), address.clone());
            std::thread::spawn(move || {
                rt().block_on(async {
                    assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
                    let _ = until_done.await;
                })
            })
        };
        rt().block_on(async {
            assert_eq!(next(&mut events).await, Seen::Accepted(0));
            assert_eq!(next(&mut events).await, Seen::Request(0));
            assert_eq!(next(&mut events).await, Seen::Closed(0));
            // Another thread can keep its connection idle and use it again.
            for _ in 0..3 {
                assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
            }
            let seen = [next(&mut events).await, next(&mut events).await, next(&mut events).await];
            assert_eq!(seen, [Seen::Accepted(1), Seen::Request(1), Seen::Request(1)]);
            assert_eq!(next(&mut events).await, Seen::Request(1));
        });
        done.send(()).unwrap();
        quiet.join().unwrap();
    }

    #[tokio::test]
    async fn an_https_upstream_is_reached_over_tls_on_a_reused_connection() {
        let (address, mut events) = tls_server(Serve::KeepAlive).await;
        let trusting = hyper_tls::native_tls::TlsConnector::builder()
            .add_root_certificate(hyper_tls::native_tls::Certificate::from_pem(CERTIFICATE).unwrap())
            .build()
            .unwrap();
        let pool = PerThread::with_tls(4, Duration::from_secs(60), trusting);
        for _ in 0..2 {
            assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        }
        assert_eq!(next(&mut events).await, Seen::Accepted(0));
        assert_eq!(next(&mut events).await, Seen::Request(0));
        assert_eq!(next(&mut events).await, Seen::Request(0));
    }

    #[tokio::test]
    async fn an_https_upstream_whose_certificate_is_not_trusted_is_refused_saying_why() {
        let (address, _events) = tls_server(Serve::KeepAlive).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        let (request, address) = (request(&address), address);
        let Err(PoolError::Connect(e)) = pool.send(&address, request).await else { panic!("sent") };
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert!(text.contains("certificate verify failed"), "{text}");
    }

    #[tokio::test]
    async fn a_request_a_reused_connection_may_have_carried_is_not_sent_again() {
        let (address, mut events) = server(Serve::AnswerOnce).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
        let error = exchange(&pool, &address).await.unwrap_err();
        assert!(error.contains("connection closed"), "{error}");
        let seen = [next(&mut events).await, next(&mut events).await, next(&mut events).await];
        assert_eq!(seen, [Seen::Accepted(0), Seen::Request(0), Seen::Request(0)]);
        assert_eq!(next(&mut events).await, Seen::Closed(0));
        assert!(events.try_recv().is_err(), "sent once, on the reused connection");
    }

    #[tokio::test]
    async fn a_response_left_before_its_end_never_holds_up_the_next_request() {
        use http_body_util::BodyExt;
        let (address, mut events) = server(Serve::Endless).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        for _ in 0..2 {
            let sent = tokio::time::timeout(Duration::from_secs(10), pool.send(&address, request(&address)));
            let Ok((mut response, lease)) = sent.await.expect("answered") else { panic!("sent") };
            let first = response.body_mut().frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(first, "ok");
            drop((response, lease));
        }
        let mut seen = Vec::new();
        while seen.len() < 5 {
            seen.push(next(&mut events).await);
        }
        // The first connection was let go, the second request went on a new one.
        for event in [Seen::Accepted(0), Seen::Request(0), Seen::Closed(0), Seen::Accepted(1), Seen::Request(1)] {
            assert!(seen.contains(&event), "{event:?} in {seen:?}");
        }
    }

    #[tokio::test]
    async fn a_connection_whose_response_was_left_before_its_end_is_kept_until_its_task_has_read_the_rest() {
        use http_body_util::BodyExt;
        let (address, mut events) = server(Serve::Chunked).await;
        let pool = PerThread::new(4, Duration::from_secs(60));
        for _ in 0..10 {
            // What an SSE reader does: it stops at the message it waits for, and the stream's
            // end, already come, is read by the connection's task once it runs. Until then the
            // next checkout passes over that connection, and a later one takes it.
            let sent = tokio::time::timeout(Duration::from_secs(10), pool.send(&address, request(&address)));
            let Ok((mut response, lease)) = sent.await.expect("answered") else { panic!("sent") };
            let first = response.body_mut().frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(first, "ok");
            drop((response, lease));
        }
        let (mut accepted, mut requests) = (0, 0);
        while requests < 10 {
            match next(&mut events).await {
                Seen::Accepted(_) => accepted += 1,
                Seen::Request(_) => requests += 1,
                Seen::Closed(n) => panic!("connection {n} closed"),
            }
        }
        assert_eq!(accepted, 2, "two connections taking turns");
    }

    #[tokio::test]
    async fn clients_calling_at_once_keep_reusing_the_connections_they_opened() {
        let (address, mut events) = server(Serve::KeepAlive).await;
        let pool = PerThread::new(64, Duration::from_secs(60));
        // Sixteen clients, each calling again as soon as its answer is read: a connection whose
        // task has not yet run since its answer must not cost a new one.
        let clients = (0..16).map(|_| async {
            for _ in 0..50 {
                assert_eq!(exchange(&pool, &address).await.unwrap(), "ok");
            }
        });
        futures_util::future::join_all(clients).await;
        let (mut accepted, mut requests) = (0, 0);
        while requests < 16 * 50 {
            match next(&mut events).await {
                Seen::Accepted(_) => accepted += 1,
                Seen::Request(_) => requests += 1,
                Seen::Closed(n) => panic!("connection {n} closed"),
            }
        }
        assert!(accepted <= 16, "{accepted} connections for 16 clients");
    }
}
