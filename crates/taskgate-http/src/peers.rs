//! One source address cannot take the listener: each holds at most
//! `server.max_connections_per_peer` connections (more are shut down as they are accepted, and
//! none of their requests is served), and a client behind a trusted proxy at most
//! `server.max_unfinished_requests_per_peer` requests whose reply has not started (the body
//! still arriving, or the first message not sent yet; more get 429 at once).
//!
//! A connection's source is its peer address (an IPv6 one by its /64, what one host is given).
//! Behind a load balancer, a request's source is the client address the proxy puts in its
//! header (`server.forwarded_header`: `X-Forwarded-For`, or `Forwarded` of RFC 7239; only that
//! one is read), only when the connection comes from one of `server.trusted_proxies`: walking
//! the header from the right (what the nearest proxy wrote), the first address that is not a
//! trusted proxy. An entry that is not an address there ends the walk (what is left of it was
//! written by the client), and the request counts under the proxy's own address, as one whose
//! header is missing does. Anyone else's forwarding headers are ignored. Connections from
//! trusted proxies are not counted per peer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use actix_web::http::header::HeaderMap;
use parking_lot::Mutex;
use taskgate_config::{ForwardedHeader, Network, ServerConfig};
use taskgate_core::metrics::Metrics;

/// What one source holds now.
#[derive(Default)]
struct Held {
    connections: usize,
    unfinished: usize,
}

/// The sources holding connections or requests now, and the limits.
pub struct Peers {
    held: Mutex<HashMap<IpAddr, Held>>,
    max_connections: usize,
    max_unfinished: usize,
    trusted: Vec<Network>,
    header: ForwardedHeader,
    metrics: Arc<Metrics>,
    /// When a refusal was last logged (ms since the start), so a flood logs once a while.
    last_warned: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

/// What a connection is to its source's share, kept with the connection's data (actix drops
/// it when the connection closes).
pub enum ConnectionPlace {
    /// Counted under its source; given back when the connection closes.
    Counted(Arc<Peers>, IpAddr),
    /// A trusted proxy's: not counted, its requests' sources are forwarded.
    Proxy,
    /// Over its source's share: shut down as it was accepted. Bytes that came with the
    /// handshake may still be read; no request of it is served.
    Refused,
}

impl ConnectionPlace {
    /// Whether the connection comes from a trusted proxy.
    pub fn proxied(&self) -> bool {
        matches!(self, ConnectionPlace::Proxy)
    }

    /// Whether the connection was refused.
    pub fn refused(&self) -> bool {
        matches!(self, ConnectionPlace::Refused)
    }
}

impl Drop for ConnectionPlace {
    fn drop(&mut self) {
        if let ConnectionPlace::Counted(peers, source) = self {
            peers.release(*source, |held| held.connections -= 1);
        }
    }
}

/// One unfinished request's place, given back when it is answered.
pub struct RequestPlace {
    peers: Arc<Peers>,
    source: IpAddr,
}

impl Drop for RequestPlace {
    fn drop(&mut self) {
        self.peers.release(self.source, |held| held.unfinished -= 1);
    }
}

impl Peers {
    /// The limits of `server`, for a listener that holds `max_connections` connections.
    pub fn new(server: &ServerConfig, max_connections: usize, metrics: Arc<Metrics>) -> Arc<Peers> {
        let max_connections_per_peer = match server.max_connections_per_peer {
            0 => (max_connections / 4).max(16),
            n => n,
        };
        // Validated with the configuration.
        let trusted = server.trusted_proxies.iter().filter_map(|p| Network::parse(p).ok()).collect();
        Arc::new(Peers {
            held: Mutex::new(HashMap::new()),
            max_connections: max_connections_per_peer,
            max_unfinished: server.max_unfinished_requests_per_peer,
            trusted,
            header: server.forwarded_header,
            metrics,
            last_warned: std::sync::atomic::AtomicU64::new(0),
            started: std::time::Instant::now(),
        })
    }

    /// Connections one source may hold.
    pub fn max_connections_per_peer(&self) -> usize {
        self.max_connections
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(ip))
    }

    /// Whether any proxy is trusted (otherwise no request is counted: a direct client has at
    /// most one unfinished request per connection).
    pub fn behind_proxies(&self) -> bool {
        !self.trusted.is_empty()
    }

    /// A place for a new connection from `peer`: counted, a proxy's, or refused when its
    /// source holds its share.
    pub fn connect(self: &Arc<Self>, peer: IpAddr) -> ConnectionPlace {
        if self.trusted(peer) {
            return ConnectionPlace::Proxy;
        }
        let source = host(peer);
        let mut held = self.held.lock();
        let counts = held.entry(source).or_default();
        if counts.connections >= self.max_connections {
            drop(held);
            self.metrics.peer_refusals.with_label_values(&["connections"]).inc();
            self.warn(|| {
                tracing::warn!(%source, limit = self.max_connections, "a source holds its share of connections (server.max_connections_per_peer); more from it are closed as they are accepted. If it is a load balancer, list it in server.trusted_proxies");
            });
            return ConnectionPlace::Refused;
        }
        counts.connections += 1;
        ConnectionPlace::Counted(self.clone(), source)
    }

    /// Logs at most once every 10 s.
    fn warn(&self, log: impl FnOnce()) {
        use std::sync::atomic::Ordering;
        let now = self.started.elapsed().as_millis() as u64 + 10_000;
        let last = self.last_warned.load(Ordering::Relaxed);
        if now >= last + 10_000
            && self.last_warned.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            log();
        }
    }

    /// A place for a request from the client `headers` name (the connection is a trusted
    /// proxy's), or the source that holds its share.
    pub fn begin_request(self: &Arc<Self>, peer: IpAddr, headers: &HeaderMap) -> Result<RequestPlace, IpAddr> {
        let source = host(self.forwarded_source(peer, headers));
        let mut held = self.held.lock();
        let counts = held.entry(source).or_default();
        if counts.unfinished >= self.max_unfinished {
            drop(held);
            self.metrics.peer_refusals.with_label_values(&["unfinished_requests"]).inc();
            return Err(source);
        }
        counts.unfinished += 1;
        Ok(RequestPlace { peers: self.clone(), source })
    }

    fn release(&self, source: IpAddr, give_back: impl FnOnce(&mut Held)) {
        let mut held = self.held.lock();
        if let Some(counts) = held.get_mut(&source) {
            give_back(counts);
            if counts.connections == 0 && counts.unfinished == 0 {
                held.remove(&source);
            }
        }
    }

    /// The client a request comes from, as its share of anything is counted: the peer, or the
    /// client a trusted proxy forwards for; an IPv6 address as its /64.
    pub fn client_source(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        host(self.forwarded_source(peer, headers))
    }

    /// The client a trusted proxy forwards for (see the module's documentation); the peer
    /// when the header names none.
    pub fn forwarded_source(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut hops: Vec<Option<IpAddr>> = Vec::new();
        let name = match self.header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        };
        for value in headers.get_all(name) {
            let Ok(text) = value.to_str() else { return peer };
            for element in text.split(',') {
                hops.push(match self.header {
                    ForwardedHeader::XForwardedFor => parse_hop(element.trim()),
                    ForwardedHeader::Forwarded => element.split(';').find_map(|pair| {
                        let (key, value) = pair.trim().split_once('=')?;
                        key.trim().eq_ignore_ascii_case("for").then(|| parse_hop(value.trim().trim_matches('"')))?
                    }),
                });
            }
        }
        for hop in hops.into_iter().rev() {
            match hop {
                Some(ip) if self.trusted(ip) => continue,
                Some(ip) => return ip,
                // Not an address: what is left of the header is not the proxies'.
                None => return peer,
            }
        }
        peer
    }

    /// Sources holding something now (for tests and the log).
    pub fn sources(&self) -> usize {
        self.held.lock().len()
    }
}

/// The source an address counts under: itself, or an IPv6 address's /64 (one host's).
fn host(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    hop.rsplit_once(':')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn peers(trusted: &[&str], per_peer: usize, unfinished: usize) -> Arc<Peers> {
        peers_reading(trusted, per_peer, unfinished, ForwardedHeader::XForwardedFor)
    }

    fn peers_reading(trusted: &[&str], per_peer: usize, unfinished: usize, header: ForwardedHeader) -> Arc<Peers> {
        let server = ServerConfig {
            max_connections_per_peer: per_peer,
            max_unfinished_requests_per_peer: unfinished,
            trusted_proxies: trusted.iter().map(|s| (*s).to_owned()).collect(),
            forwarded_header: header,
            ..ServerConfig::default()
        };
        Peers::new(&server, 1000, Arc::new(Metrics::new()))
    }

    #[test]
    fn the_forwarded_header_of_rfc_7239_is_read_when_configured() {
        let p = peers_reading(&["10.0.0.0/8"], 1, 2, ForwardedHeader::Forwarded);
        let proxy = ip("10.1.2.3");
        let h = headers(&[("forwarded", r#"for=192.0.2.60;proto=http, for="[2001:db8::1]:4711";by=x"#)]);
        assert_eq!(p.forwarded_source(proxy, &h), ip("2001:db8::1"));
        let h = headers(&[("forwarded", "for=192.0.2.60"), ("x-forwarded-for", "198.51.100.1")]);
        assert_eq!(p.forwarded_source(proxy, &h), ip("192.0.2.60"));
        assert_eq!(p.forwarded_source(proxy, &headers(&[("forwarded", "for=unknown")])), proxy);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_holds_its_share_of_connections_and_gives_them_back() {
        let p = peers(&[], 2, 10);
        let a = p.connect(ip("192.0.2.1"));
        let _b = p.connect(ip("192.0.2.1"));
        assert!(p.connect(ip("192.0.2.1")).refused(), "its share is taken");
        assert!(!p.connect(ip("192.0.2.2")).refused(), "another source is not held back");
        drop(a);
        assert!(!p.connect(ip("192.0.2.1")).refused());
        // One IPv6 host is its /64.
        let _c = p.connect(ip("2001:db8:1:2::1"));
        let _d = p.connect(ip("2001:db8:1:2::2"));
        assert!(p.connect(ip("2001:db8:1:2:ffff::3")).refused());
        assert!(!p.connect(ip("2001:db8:1:3::1")).refused());
        assert_eq!(peers(&[], 0, 10).max_connections_per_peer(), 250, "a quarter of the listener");
    }

    #[test]
    fn trusted_proxies_are_not_counted_and_forward_their_clients_sources() {
        let p = peers(&["10.0.0.0/8"], 1, 2);
        let proxy = ip("10.1.2.3");
        let _c1 = p.connect(proxy);
        let c2 = p.connect(proxy);
        assert!(c2.proxied());
        // The right-most hop that is not a trusted proxy is the client.
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.9.9.9")]);
        assert_eq!(p.forwarded_source(proxy, &h), ip("198.51.100.7"));
        // Only the configured header is read.
        let h = headers(&[("forwarded", r#"for=192.0.2.60;proto=http, for="[2001:db8::1]:4711""#)]);
        assert_eq!(p.forwarded_source(proxy, &h), proxy);
        // An entry that is not an address ends the walk: what the client wrote before it is not taken.
        let h = headers(&[("x-forwarded-for", "203.0.113.9, unknown, 10.9.9.9")]);
        assert_eq!(p.forwarded_source(proxy, &h), proxy);
        assert_eq!(p.forwarded_source(proxy, &headers(&[("x-forwarded-for", "garbage")])), proxy);
        // Unfinished requests per forwarded client.
        let h = headers(&[("x-forwarded-for", "198.51.100.7")]);
        let r1 = p.begin_request(proxy, &h).unwrap();
        let _r2 = p.begin_request(proxy, &h).unwrap();
        assert_eq!(p.begin_request(proxy, &h).err(), Some(ip("198.51.100.7")));
        let other = headers(&[("x-forwarded-for", "198.51.100.8")]);
        assert!(p.begin_request(proxy, &other).is_ok());
        drop(r1);
        assert!(p.begin_request(proxy, &h).is_ok());
    }

    #[test]
    fn everything_given_back_leaves_nothing_held() {
        let p = peers(&["10.0.0.1"], 5, 5);
        let c = p.connect(ip("192.0.2.1"));
        let r = p.begin_request(ip("10.0.0.1"), &headers(&[("x-forwarded-for", "192.0.2.1")])).unwrap();
        assert_eq!(p.sources(), 1);
        drop((c, r));
        assert_eq!(p.sources(), 0);
    }
}
