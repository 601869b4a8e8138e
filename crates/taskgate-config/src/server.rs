//! `[server]`, `[logging]`, `[federation]` and `[progress]`: the front door and the gateway's
//! own behaviour.

use serde::{Deserialize, Serialize};

use crate::defaults;

/// `[server]`: the front door.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on (`TASKGATE_LISTEN` overrides).
    pub listen: String,
    /// Origins allowed to call the gateway (DNS-rebinding protection). A request with an
    /// `Origin` header not in this list gets 403; a request without `Origin` is allowed.
    /// Each entry is `scheme://host` (any port) or `scheme://host:port`; `"*"` allows all.
    pub allowed_origins: Vec<String>,
    /// Largest POST body in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Most client sessions open at once; `initialize` beyond it gets 503.
    pub max_sessions: usize,
    /// Messages a session may have queued; requests beyond it get 503.
    pub session_mailbox: usize,
    /// Messages buffered per outbound SSE stream; a notification that does not fit is dropped
    /// (and counted); the final response always fits.
    pub stream_buffer: usize,
    /// Bytes buffered per outbound SSE stream (a request's reply or the GET stream), as
    /// `stream_buffer`. One message always fits a stream that has nothing queued.
    pub stream_buffer_bytes: usize,
    /// How long a client may read nothing of a stream while notifications for it are dropped,
    /// in seconds; then it is judged to have stopped reading: the stream ends and its request
    /// is cancelled upstream. A client that reads, however slowly, keeps its call.
    pub stream_stall_secs: u64,
    /// Bytes buffered across all the outbound streams of one session, and the messages queued
    /// for it while it has no stream open.
    pub session_buffer_bytes: usize,
    /// Longest time a client may take to send a request's body, in milliseconds (408 after).
    pub body_timeout_ms: u64,
    /// How long a streamed method's reply (`tools/call`, `tasks/result`, …) to a client that
    /// accepts JSON and SSE waits for its first message, in milliseconds: a response that comes
    /// first within it is one JSON object; anything else, or nothing by then, starts the SSE
    /// stream. 0 starts the stream at once unless the response is already there.
    pub first_message_wait_ms: u64,
    /// How long a 2025-11-25 client's SSE reply stream that its connection left before the
    /// response (or that closed as its upstream's did) is held for the client to resume with
    /// `GET` and `Last-Event-ID`, in seconds; 0: replies carry no event ids and are not resumed.
    pub stream_resume_secs: u64,
    /// How long an upstream request that asked a 2026-07-28 client for input (an
    /// `input_required` result) waits for the client's retry before it is answered with an
    /// error and cancelled, in seconds.
    pub input_wait_secs: u64,
    /// Most connections open at once on each listener; 0 sizes it from the open-file limit
    /// (raised to its hard limit at start), keeping a quarter of the descriptors for upstreams,
    /// the store and the admin listener.
    pub max_connections: usize,
    /// Connections one source address may hold open on each listener; more are closed as they
    /// are accepted. 0 means a quarter of `max_connections` (at least 16). Connections from
    /// `trusted_proxies` are not counted: they carry many clients.
    pub max_connections_per_peer: usize,
    /// Requests from one client behind `trusted_proxies` (its address taken from the proxy's
    /// `forwarded_header`) whose reply has not started (the body still arriving, or the first
    /// message not sent yet); more get 429 at once. A client connecting directly has at most
    /// one per connection.
    pub max_unfinished_requests_per_peer: usize,
    /// The MCP endpoint's canonical URI as clients reach it (`https://gw.example.com/mcp`): the
    /// `resource` of the protected resource metadata (RFC 9728) and the audience OAuth access
    /// tokens must carry (RFC 8707). Needed with `[[tenant.oauth]]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Addresses (`10.0.0.5`) or networks (`10.0.0.0/8`, `fd00::/8`) of the load balancers or
    /// proxies in front: only their `X-Forwarded-For` and `Forwarded` headers name a client's
    /// source address; anyone else's are ignored.
    pub trusted_proxies: Vec<String>,
    /// The header the trusted proxies put the client's address in: `x-forwarded-for` or
    /// `forwarded` (RFC 7239). Only that one is read.
    pub forwarded_header: ForwardedHeader,
    /// After SIGTERM or SIGINT, how long requests in flight may take to finish before their
    /// streams are ended, in seconds.
    pub shutdown_grace_secs: u64,
    /// Client streams (SSE replies and GET streams) open at once, all tenants together.
    pub max_streams: usize,
    /// The share of each gateway-wide pool (sessions, tasks held, result bytes held, open
    /// streams) one tenant may take, in percent, when more than one tenant is configured;
    /// `limits.share_percent` overrides it per tenant.
    pub tenant_share_percent: u8,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// A second listener for the operators, e.g. `127.0.0.1:9090`: `/metrics`, `/healthz` and
    /// the detailed `/readyz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
    /// Whether the main listener serves `/metrics` and the detailed `/readyz` (otherwise its
    /// `/readyz` says ready or not, nothing more). Unset: only when there is no admin listener,
    /// the main one listens on a loopback address and no `trusted_proxies` forward to it (a
    /// public listener, or one a proxy makes public, never shows them unless this says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_metrics: Option<bool>,
    /// A session with no request for this many seconds, and no request in flight or GET stream
    /// open, is closed (its tasks live on). 0 keeps idle sessions forever.
    pub session_idle_timeout_secs: u64,
    /// A session with no request for this many seconds that holds nothing at its upstreams (no
    /// request in flight, no GET stream open, no subscription, no upstream request waiting for
    /// its answer) lets its upstream sessions go, and with them their stdio processes; its next
    /// call opens them again. 0 keeps them for the session's life.
    pub upstream_release_secs: u64,
    /// How often `taskgate serve` checks its configuration file for changes, in milliseconds
    /// (tenants reload on a change and on SIGHUP). 0 reloads on SIGHUP only.
    pub config_poll_ms: u64,
}

impl ServerConfig {
    /// Whether the main listener, bound to `listen`, serves `/metrics` and the detailed
    /// `/readyz`.
    pub fn serves_public_metrics(&self, listen: std::net::IpAddr) -> bool {
        self.public_metrics
            .unwrap_or(self.admin_listen.is_none() && listen.is_loopback() && self.trusted_proxies.is_empty())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: defaults::LISTEN.into(),
            allowed_origins: defaults::allowed_origins(),
            max_body_bytes: defaults::MAX_BODY_BYTES,
            max_sessions: defaults::MAX_SESSIONS,
            session_mailbox: defaults::SESSION_MAILBOX,
            stream_buffer: defaults::STREAM_BUFFER,
            stream_buffer_bytes: defaults::STREAM_BUFFER_BYTES,
            stream_stall_secs: defaults::STREAM_STALL_SECS,
            session_buffer_bytes: defaults::SESSION_BUFFER_BYTES,
            body_timeout_ms: defaults::BODY_TIMEOUT_MS,
            first_message_wait_ms: defaults::FIRST_MESSAGE_WAIT_MS,
            stream_resume_secs: defaults::STREAM_RESUME_SECS,
            input_wait_secs: defaults::INPUT_WAIT_SECS,
            max_connections: 0,
            shutdown_grace_secs: defaults::SHUTDOWN_GRACE_SECS,
            max_streams: defaults::MAX_STREAMS,
            tenant_share_percent: defaults::TENANT_SHARE_PERCENT,
            workers: 0,
            admin_listen: None,
            public_metrics: None,
            max_connections_per_peer: 0,
            max_unfinished_requests_per_peer: defaults::MAX_UNFINISHED_REQUESTS_PER_PEER,
            public_url: None,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            session_idle_timeout_secs: defaults::SESSION_IDLE_TIMEOUT_SECS,
            upstream_release_secs: defaults::UPSTREAM_RELEASE_SECS,
            config_poll_ms: defaults::CONFIG_POLL_MS,
        }
    }
}

/// `[logging]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// A `RUST_LOG`-style filter, e.g. `info,taskgate_upstream=debug` (`TASKGATE_LOG` overrides).
    pub level: String,
    /// `human` or `json`.
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig { level: defaults::LOG_LEVEL.into(), format: LogFormat::Human }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// `[federation]`: how upstream tools are merged into one catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FederationConfig {
    /// Between the upstream name and the tool name: `<upstream><separator><tool>`.
    pub separator: String,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Seconds to wait for an upstream's own `tools/list` when building the catalog; an upstream
    /// slower than this is left out of the listing until it answers.
    pub list_timeout_secs: u64,
    /// Tool catalogs kept at most: one per distinct set of client capabilities the gateway
    /// relays (roots, sampling, elicitation), because upstreams may offer tools only to clients
    /// that declare them. Clients beyond the cap see the catalog of a client declaring none.
    pub max_tool_catalogs: usize,
}

impl Default for FederationConfig {
    fn default() -> Self {
        FederationConfig {
            separator: defaults::SEPARATOR.into(),
            page_size: defaults::PAGE_SIZE,
            list_timeout_secs: defaults::LIST_TIMEOUT_SECS,
            max_tool_catalogs: defaults::MAX_TOOL_CATALOGS,
        }
    }
}

/// `[progress]`: how upstream progress notifications are relayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProgressConfig {
    /// Least time between two notifications for one token, in milliseconds: values arriving
    /// faster are coalesced (the latest wins; the last one before completion is always sent).
    /// 0 relays every value.
    pub min_interval_ms: u64,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig { min_interval_ms: defaults::PROGRESS_MIN_INTERVAL_MS }
    }
}

/// Which header trusted proxies name the client in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, ...`.
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// An address or a network (`10.0.0.5`, `10.0.0.0/8`, `fd00::/8`), as `server.trusted_proxies`
/// names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    pub fn parse(text: &str) -> Result<Network, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: std::net::IpAddr =
            addr.trim().parse().map_err(|_| format!("{text:?} is not an IP address or network"))?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= bits => p,
                _ => return Err(format!("{text:?}: the prefix length must be 0 to {bits}")),
            },
        };
        Ok(Network { addr, prefix })
    }

    /// Whether `ip` is in it (an IPv4 address mapped into IPv6 counts as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod network_tests {
    use super::Network;

    #[test]
    fn addresses_and_networks_match_what_they_name() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let single = Network::parse("10.0.0.5").unwrap();
        assert!(single.contains(ip("10.0.0.5")) && !single.contains(ip("10.0.0.6")));
        let net = Network::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.200.3.4")) && !net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.1.2.3")), "IPv4 mapped into IPv6");
        let all = Network::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("192.0.2.1")) && !all.contains(ip("2001:db8::1")));
        let v6 = Network::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        for bad in ["10.0.0.0/33", "nope", "10.0.0.0/x", "::/129"] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod public_metrics_tests {
    use super::ServerConfig;

    #[test]
    fn a_public_listener_shows_no_metrics_unless_told_to() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let mut server = ServerConfig::default();
        assert!(server.serves_public_metrics(ip("127.0.0.1")) && server.serves_public_metrics(ip("::1")));
        assert!(!server.serves_public_metrics(ip("0.0.0.0")) && !server.serves_public_metrics(ip("10.0.0.5")));
        server.trusted_proxies = vec!["127.0.0.1".into()];
        assert!(!server.serves_public_metrics(ip("127.0.0.1")), "a proxy on this machine makes it public");
        server.trusted_proxies.clear();
        server.admin_listen = Some("127.0.0.1:9090".into());
        assert!(!server.serves_public_metrics(ip("127.0.0.1")));
        server.public_metrics = Some(true);
        assert!(server.serves_public_metrics(ip("0.0.0.0")));
    }
}
