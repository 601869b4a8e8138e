//! [`Config::validate`], which reports every problem at once with its location, and the checks
//! of what a configuration names on this machine (stdio commands).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::defaults;
use crate::problem::Problem;
use crate::tasks::StoreBackend;
use crate::tenants;
use crate::upstream::Transport;
use crate::Config;

impl Config {
    /// The stdio upstreams whose command is not there to run: one with a `/` is taken as a file,
    /// any other is looked for in the directories of `path` (the `PATH` the gateway will run
    /// with; `check-config` passes its own).
    pub fn command_problems(&self, path: Option<&str>) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let Some(command) = up.command.as_deref().filter(|_| up.transport == Transport::Stdio) else { continue };
            if !command_found(command, path) {
                let message = if command.contains('/') {
                    format!("{command:?} is not an executable file")
                } else {
                    format!("{command:?} is not found on PATH: install it, or give its full path")
                };
                problems.push(Problem { location: format!("upstream[{i}] ({:?}).command", up.name), message });
            }
        }
        problems
    }

    /// The listen address; valid after [`Config::validate`].
    pub fn listen_addr(&self) -> SocketAddr {
        resolve_listen(&self.server.listen).expect("validated listen address")
    }

    fn validate_store(&self, bad: &mut dyn FnMut(String, String)) {
        let store = &self.store;
        match store.backend {
            StoreBackend::File if store.path.trim().is_empty() => {
                bad("store.path".into(), "the file store needs a data directory, e.g. path = \"taskgate-data\"".into())
            }
            StoreBackend::Redis => {
                match (&store.url, &store.url_env) {
                    (None, None) => bad(
                        "store.url".into(),
                        "the redis store needs url = \"redis://host:6379\" (or url_env naming a variable)".into(),
                    ),
                    (Some(_), Some(_)) => bad("store.url_env".into(), "give url or url_env, not both".into()),
                    (Some(url), None) if !valid_redis_url(url) => {
                        bad("store.url".into(), "must start with redis:// or rediss:// (TLS) and name a host".into())
                    }
                    _ => {}
                }
                if store.key_prefix.is_empty() {
                    bad("store.key_prefix".into(), "must be non-empty, e.g. \"taskgate:\"".into());
                }
                if store.lease_ms < 100 {
                    bad("store.lease_ms".into(), format!("{} is too short; use at least 100", store.lease_ms));
                }
                if store.timeout_ms == 0 {
                    bad("store.timeout_ms".into(), "must be at least 1".into());
                }
            }
            _ => {}
        }
        if store.backend != StoreBackend::Redis && (store.url.is_some() || store.url_env.is_some()) {
            bad("store.url".into(), "url and url_env are for backend = \"redis\"".into());
        }
    }

    /// Checks everything and returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let mut problems = Vec::new();
        let mut bad = |location: String, message: String| problems.push(Problem { location, message });

        if let Some(url) = &self.server.public_url {
            let parsed = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
            if parsed.is_none_or(|rest| rest.is_empty() || rest.contains('#') || rest.contains('?')) {
                bad("server.public_url".into(), format!("{url:?} is not an http(s) URL without a query or fragment"));
            }
        }
        for (i, up) in self.upstreams.iter().enumerate() {
            if let Some(oauth) = &up.oauth {
                if let Err(why) = crate::tenants::secure_url(&oauth.token_url) {
                    bad(format!("upstream[{i}] ({:?}).oauth.token_url", up.name), why);
                }
                if up.transport != crate::Transport::Http {
                    bad(format!("upstream[{i}] ({:?}).oauth", up.name), "is for HTTP upstreams".into());
                }
                let exchanges = oauth.grant == crate::UpstreamGrant::TokenExchange;
                let trusted = |issuer: &str| self.tenants.iter().any(|t| t.oauth.iter().any(|o| o.issuer == issuer));
                match &oauth.issuer {
                    Some(issuer) if exchanges && !trusted(issuer) => bad(
                        format!("upstream[{i}] ({:?}).oauth.issuer", up.name),
                        format!("{issuer:?} is the issuer of no [[tenant.oauth]]: its callers' tokens are the ones exchanged"),
                    ),
                    None if exchanges => bad(
                        format!("upstream[{i}] ({:?}).oauth.issuer", up.name),
                        "token_exchange needs the issuer (a [[tenant.oauth]] issuer) whose callers' tokens are exchanged at token_url".into(),
                    ),
                    _ => {}
                }
                if exchanges && oauth.max_cached_tokens == 0 {
                    bad(format!("upstream[{i}] ({:?}).oauth.max_cached_tokens", up.name), "must be at least 1".into());
                }
            }
        }
        for (i, tenant) in self.tenants.iter().enumerate() {
            for (key, message) in crate::profiles::problems(&tenant.profiles) {
                bad(format!("tenant[{i}] ({:?}).{key}", tenant.id), message);
            }
            let Some(rules) = &tenant.tools else { continue };
            let at = |key: &str| format!("tenant[{i}] ({:?}).tools.{key}", tenant.id);
            for upstream in rules.upstream_scopes.keys() {
                if !self.upstreams.iter().any(|u| &u.name == upstream) {
                    bad(at("upstream_scopes"), format!("{upstream:?} is no configured upstream"));
                }
            }
            for upstream in rules.upstream_rates.keys() {
                if !self.upstreams.iter().any(|u| &u.name == upstream) {
                    bad(at("upstream_rates"), format!("{upstream:?} is no configured upstream"));
                }
            }
            for glob in rules.rates.keys().filter(|g| g.starts_with("upstream:")) {
                bad(
                    at(&format!("rates.{glob:?}")),
                    "a glob may not start with \"upstream:\" (upstream_rates names upstreams)".into(),
                );
            }
            let rates = rules.rates.iter().map(|(g, r)| (format!("rates.{g:?}"), r));
            let upstream_rates = rules.upstream_rates.iter().map(|(u, r)| (format!("upstream_rates.{u:?}"), r));
            for (key, rate) in rates.chain(upstream_rates) {
                if !(rate.per_second.is_finite() && rate.per_second > 0.0) {
                    bad(at(&key), "per_second must be a positive number".into());
                }
                if rate.burst == 0 {
                    bad(at(&key), "burst must be at least 1".into());
                }
            }
            let scoped = !rules.scopes.is_empty() || !rules.upstream_scopes.is_empty();
            if scoped && tenant.oauth.is_empty() {
                bad(
                    at("scopes"),
                    "scopes are those of OAuth access tokens: the tenant needs a [[tenant.oauth]] (API keys carry none)"
                        .into(),
                );
            }
        }
        let oauth = self.tenants.iter().any(|t| t.oauth.iter().any(|o| o.audience.is_none()));
        if oauth && self.server.public_url.is_none() {
            bad("server.public_url".into(), "[[tenant.oauth]] needs it (or an audience of its own): the gateway's canonical URI, e.g. https://gw.example.com/mcp".into());
        }
        for (i, proxy) in self.server.trusted_proxies.iter().enumerate() {
            if let Err(why) = crate::server::Network::parse(proxy) {
                bad(format!("server.trusted_proxies[{i}]"), why);
            }
        }
        for (key, why) in self.admin.problems(self.server.admin_listen.is_some()) {
            bad(key, why);
        }
        for (key, why) in self.traces.problems() {
            bad(key, why);
        }
        if let Some(admin) = &self.server.admin_listen {
            if let Err(why) = resolve_listen(admin) {
                bad("server.admin_listen".into(), format!("{why}, like 127.0.0.1:9090 or localhost:9090"));
            }
        }
        if let Err(why) = resolve_listen(&self.server.listen) {
            bad("server.listen".into(), format!("{why}, like 127.0.0.1:8080 or localhost:8080"));
        }
        for (i, origin) in self.server.allowed_origins.iter().enumerate() {
            if origin != "*" && !valid_origin(origin) {
                bad(
                    format!("server.allowed_origins[{i}]"),
                    format!("{origin:?} is not an origin like http://localhost or https://app.example.com:8443"),
                );
            }
        }
        if self.server.first_message_wait_ms > defaults::MAX_FIRST_MESSAGE_WAIT_MS {
            bad(
                "server.first_message_wait_ms".into(),
                format!(
                    "{} is longer than an idle SSE reply is ever silent; use 0 to {}",
                    self.server.first_message_wait_ms,
                    defaults::MAX_FIRST_MESSAGE_WAIT_MS
                ),
            );
        }
        if self.server.stream_resume_secs > 3_600 {
            bad(
                "server.stream_resume_secs".into(),
                format!("{} holds a left stream too long; use 0 to 3600", self.server.stream_resume_secs),
            );
        }
        if self.server.tenant_share_percent > 100 {
            bad(
                "server.tenant_share_percent".into(),
                format!("{} is a percentage; use 1 to 100", self.server.tenant_share_percent),
            );
        }
        for (i, t) in self.tenants.iter().enumerate() {
            if t.limits.share_percent.is_some_and(|p| p == 0 || p > 100) {
                bad(format!("tenant[{i}] ({:?}).limits.share_percent", t.id), "use 1 to 100".into());
            }
        }
        if self.server.max_body_bytes < 1024 {
            bad(
                "server.max_body_bytes".into(),
                format!("{} is too small; use at least 1024", self.server.max_body_bytes),
            );
        }
        for (key, value) in [
            ("server.max_sessions", self.server.max_sessions),
            ("server.session_mailbox", self.server.session_mailbox),
            ("server.stream_buffer", self.server.stream_buffer),
            ("server.stream_buffer_bytes", self.server.stream_buffer_bytes),
            ("server.session_buffer_bytes", self.server.session_buffer_bytes),
            ("server.body_timeout_ms", self.server.body_timeout_ms as usize),
            ("server.stream_stall_secs", self.server.stream_stall_secs as usize),
            ("server.max_unfinished_requests_per_peer", self.server.max_unfinished_requests_per_peer),
            ("server.input_wait_secs", self.server.input_wait_secs as usize),
            ("server.max_streams", self.server.max_streams),
            ("server.tenant_share_percent", self.server.tenant_share_percent as usize),
            ("federation.page_size", self.federation.page_size),
            ("federation.list_timeout_secs", self.federation.list_timeout_secs as usize),
        ] {
            if value == 0 {
                bad(key.into(), "must be at least 1".into());
            }
        }
        for (key, value) in [
            ("tasks.default_ttl_ms", self.tasks.default_ttl_ms),
            ("tasks.max_ttl_ms", self.tasks.max_ttl_ms),
            ("tasks.poll_interval_ms", self.tasks.poll_interval_ms),
            ("tasks.page_size", self.tasks.page_size as u64),
            ("tasks.max_tasks", self.tasks.max_tasks as u64),
            ("tasks.sweep_interval_ms", self.tasks.sweep_interval_ms),
        ] {
            if value == 0 {
                bad(key.into(), "must be at least 1".into());
            }
        }
        if !self.tasks.unlimited_ttl && self.tasks.default_ttl_ms > self.tasks.max_ttl_ms {
            bad(
                "tasks.default_ttl_ms".into(),
                format!("{} exceeds tasks.max_ttl_ms ({})", self.tasks.default_ttl_ms, self.tasks.max_ttl_ms),
            );
        }
        self.validate_store(&mut bad);
        if self.federation.page_size > 10_000 {
            bad(
                "federation.page_size".into(),
                format!("{} is too large; use at most 10000", self.federation.page_size),
            );
        }
        if self.federation.separator.is_empty() || !self.federation.separator.chars().all(tool_name_char) {
            bad(
                "federation.separator".into(),
                format!(
                    "{:?} must be non-empty and use only A-Z a-z 0-9 _ - . (tool-name characters)",
                    self.federation.separator
                ),
            );
        }

        let mut seen = BTreeMap::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let at = |field: &str| format!("upstream[{i}] ({:?}).{field}", up.name);
            if up.name.is_empty() || !up.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                bad(at("name"), "must be non-empty and use only A-Z a-z 0-9 _ -".into());
            }
            if let Some(first) = seen.insert(up.name.clone(), i) {
                bad(at("name"), format!("duplicates upstream[{first}]; names must be unique"));
            }
            match up.transport {
                Transport::Http => {
                    match &up.url {
                        None => bad(at("url"), "an http upstream needs url = \"http://host:port/mcp\"".into()),
                        Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 => {
                            bad(at("url"), format!("{url:?} is not an http:// or https:// URL"))
                        }
                        Some(_) => {}
                    }
                    if up.command.is_some() || !up.args.is_empty() || !up.env.is_empty() {
                        bad(at("command"), "command, args and env are for stdio upstreams".into());
                    }
                }
                Transport::Stdio => {
                    if up.command.as_deref().is_none_or(str::is_empty) {
                        bad(at("command"), "a stdio upstream needs command = \"program\"".into());
                    }
                    if up.url.is_some()
                        || !up.headers.is_empty()
                        || !up.headers_env.is_empty()
                        || !up.headers_file.is_empty()
                    {
                        bad(at("url"), "url and headers are for http upstreams".into());
                    }
                    if up.max_processes == 0 {
                        bad(at("max_processes"), "must be at least 1".into());
                    }
                }
            }
            if up.timeout_secs == 0 {
                bad(at("timeout_secs"), "must be at least 1".into());
            }
            if up.max_message_bytes < 1024 {
                bad(at("max_message_bytes"), "must be at least 1024".into());
            }
            if up.resume_wait_max_ms > 300_000 {
                bad(at("resume_wait_max_ms"), "must be at most 300000 (five minutes)".into());
            }
            for (tool, wait) in &up.tool_first_input_wait_ms {
                if *wait > 60_000 {
                    bad(at(&format!("tool_first_input_wait_ms.{tool}")), "must be at most 60000 (a minute)".into());
                }
            }
            if up.stream_idle_secs > 86_400 {
                bad(at("stream_idle_secs"), "must be at most 86400 (a day)".into());
            }
            if up.shared_idle_secs > 86_400 {
                bad(at("shared_idle_secs"), "must be at most 86400 (a day)".into());
            }
            if !(2..=65_535).contains(&up.max_connections) {
                bad(at("max_connections"), "must be 2 to 65535 (a stream and a request at least)".into());
            }
        }
        let names = self.upstreams.iter().map(|u| u.name.as_str()).collect();
        problems.extend(tenants::collect(&self.tenants, &names));
        crate::trust::validate(&self.tenants, self.server.public_url.as_deref(), &mut |location, message| {
            problems.push(Problem { location, message })
        });
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// Characters MCP recommends for tool names (server/tools, "Tool names").
fn tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn valid_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
}

/// Whether `command` is an executable file: itself when it names a path, else in a directory
/// of `path`.
fn command_found(command: &str, path: Option<&str>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable =
        |file: &std::path::Path| file.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if command.contains('/') {
        return runnable(std::path::Path::new(command));
    }
    path.unwrap_or_default()
        .split(':')
        .filter(|dir| !dir.is_empty())
        .any(|dir| runnable(&std::path::Path::new(dir).join(command)))
}

/// `HOST:PORT` as the address to listen on: the host an IP address, or a name resolved as the
/// system resolves it (`localhost` from its hosts file), its first IPv4 address if it has one.
pub fn resolve_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?} is not HOST:PORT"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{text:?} is not HOST:PORT"));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| format!("{text:?}: the host {host:?} does not resolve ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{text:?}: the host {host:?} resolves to no address"))
}

/// A Redis URL the client can use: `redis://` or `rediss://` with a host. The URL itself is
/// never echoed in a problem (it may hold a password).
fn valid_redis_url(url: &str) -> bool {
    let rest = url.strip_prefix("redis://").or_else(|| url.strip_prefix("rediss://"));
    rest.is_some_and(|r| r.rsplit('@').next().is_some_and(|host| !host.is_empty() && !host.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_is_an_address_or_a_name_that_resolves() {
        assert_eq!(resolve_listen("127.0.0.1:8080").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(resolve_listen("[::1]:8080").unwrap().to_string(), "[::1]:8080");
        assert_eq!(resolve_listen("localhost:8080").unwrap().to_string(), "127.0.0.1:8080");
        for bad in ["everywhere", "localhost", ":8080", "localhost:http", "localhost:70000", ""] {
            assert!(resolve_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_command_is_found_as_a_path_or_on_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("taskgate-command-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (runnable, plain) = (dir.join("server"), dir.join("notes"));
        std::fs::write(&runnable, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&runnable, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&plain, "").unwrap();
        let path = format!("/nonexistent::{}", dir.display());
        assert!(command_found("server", Some(&path)));
        assert!(!command_found("notes", Some(&path)), "not executable");
        assert!(!command_found("server", Some("/nonexistent")));
        assert!(!command_found("server", None));
        assert!(command_found(&runnable.display().to_string(), None));
        assert!(!command_found(&plain.display().to_string(), None));
        assert!(!command_found(&dir.display().to_string(), None), "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
