//! One source address cannot take a listener: each holds at most
//! `server.max_connections_per_peer` connections (more are closed as they are accepted, before
//! a byte is read), and a client behind a trusted proxy at most
//! `server.max_unfinished_requests_per_peer` requests not answered yet (more get 429 at once).
//!
//! A connection's source is its peer address. Behind a load balancer, a request's source is
//! the client address the proxy puts in `X-Forwarded-For` (or `Forwarded`, RFC 7239), only when
//! the connection comes from one of `server.trusted_proxies`: the right-most address that is
//! not itself a trusted proxy. Anyone else's forwarding headers are ignored (a client could
//! write any address there). Connections from trusted proxies are not counted per peer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use actix_web::http::header::HeaderMap;
use parking_lot::Mutex;
use taskgate_config::{Network, ServerConfig};
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
    metrics: Arc<Metrics>,
}

/// One connection's place, given back when the connection closes (actix keeps it with the
/// connection's data).
pub struct ConnectionPlace {
    peers: Arc<Peers>,
    /// `None` for a trusted proxy's connection (not counted).
    source: Option<IpAddr>,
}

/// Whether a connection comes from a trusted proxy (its requests' sources are forwarded).
impl ConnectionPlace {
    pub fn proxied(&self) -> bool {
        self.source.is_none()
    }
}

impl Drop for ConnectionPlace {
    fn drop(&mut self) {
        if let Some(source) = self.source {
            self.peers.release(source, |held| held.connections -= 1);
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
            metrics,
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

    /// A place for a new connection from `peer`, or `None` when its source holds its share.
    pub fn connect(self: &Arc<Self>, peer: IpAddr) -> Option<ConnectionPlace> {
        if self.trusted(peer) {
            return Some(ConnectionPlace { peers: self.clone(), source: None });
        }
        let mut held = self.held.lock();
        let counts = held.entry(peer).or_default();
        if counts.connections >= self.max_connections {
            drop(held);
            self.metrics.peer_refusals.with_label_values(&["connections"]).inc();
            return None;
        }
        counts.connections += 1;
        Some(ConnectionPlace { peers: self.clone(), source: Some(peer) })
    }

    /// A place for a request from the client `headers` name (the connection is a trusted
    /// proxy's), or the source that holds its share.
    pub fn begin_request(self: &Arc<Self>, peer: IpAddr, headers: &HeaderMap) -> Result<RequestPlace, IpAddr> {
        let source = self.forwarded_source(peer, headers);
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

    /// The client a trusted proxy forwards for: the right-most address of `X-Forwarded-For`
    /// (else of `Forwarded`'s `for=`) that is not a trusted proxy; the peer when there is none.
    pub fn forwarded_source(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut hops: Vec<IpAddr> = Vec::new();
        for value in headers.get_all("x-forwarded-for") {
            let Ok(text) = value.to_str() else { return peer };
            hops.extend(text.split(',').filter_map(|hop| parse_hop(hop.trim())));
        }
        if hops.is_empty() {
            for value in headers.get_all("forwarded") {
                let Ok(text) = value.to_str() else { return peer };
                for element in text.split(',') {
                    let found = element.split(';').find_map(|pair| {
                        let (key, value) = pair.trim().split_once('=')?;
                        key.trim().eq_ignore_ascii_case("for").then(|| parse_hop(value.trim().trim_matches('"')))?
                    });
                    hops.extend(found);
                }
            }
        }
        hops.into_iter().rev().find(|hop| !self.trusted(*hop)).unwrap_or(peer)
    }

    /// Sources holding something now (for tests and the log).
    pub fn sources(&self) -> usize {
        self.held.lock().len()
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
        let server = ServerConfig {
            max_connections_per_peer: per_peer,
            max_unfinished_requests_per_peer: unfinished,
            trusted_proxies: trusted.iter().map(|s| (*s).to_owned()).collect(),
            ..ServerConfig::default()
        };
        Peers::new(&server, 1000, Arc::new(Metrics::new()))
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
        let a = p.connect(ip("192.0.2.1")).unwrap();
        let _b = p.connect(ip("192.0.2.1")).unwrap();
        assert!(p.connect(ip("192.0.2.1")).is_none(), "its share is taken");
        assert!(p.connect(ip("192.0.2.2")).is_some(), "another source is not held back");
        drop(a);
        assert!(p.connect(ip("192.0.2.1")).is_some());
        assert_eq!(peers(&[], 0, 10).max_connections_per_peer(), 250, "a quarter of the listener");
    }

    #[test]
    fn trusted_proxies_are_not_counted_and_forward_their_clients_sources() {
        let p = peers(&["10.0.0.0/8"], 1, 2);
        let proxy = ip("10.1.2.3");
        let _c1 = p.connect(proxy).unwrap();
        let c2 = p.connect(proxy).unwrap();
        assert!(c2.proxied());
        // The right-most hop that is not a trusted proxy is the client.
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.9.9.9")]);
        assert_eq!(p.forwarded_source(proxy, &h), ip("198.51.100.7"));
        let h = headers(&[("forwarded", r#"for=192.0.2.60;proto=http, for="[2001:db8::1]:4711""#)]);
        assert_eq!(p.forwarded_source(proxy, &h), ip("2001:db8::1"));
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
        let c = p.connect(ip("192.0.2.1")).unwrap();
        let r = p.begin_request(ip("10.0.0.1"), &headers(&[("x-forwarded-for", "192.0.2.1")])).unwrap();
        assert_eq!(p.sources(), 1);
        drop((c, r));
        assert_eq!(p.sources(), 0);
    }
}
