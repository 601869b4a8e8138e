//! `[[tenant]]`: who may call the gateway, with which credentials, seeing which upstreams, and
//! under which limits. These sections reload without a restart (SIGHUP or a file change).

pub use crate::patterns::glob;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::problem::Problem;
use crate::tasks::TasksConfig;

/// One tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Unique id; it is the `tenant` label of metrics and logs.
    pub id: String,
    /// The upstreams whose tools this tenant sees and may call, by name. Absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstreams: Option<Vec<String>>,
    /// The tools this tenant may list and call, by the gateway's names (globs: `*` any run of
    /// characters, `?` one). Absent: every tool of the upstreams it sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolRules>,
    /// Requests without an `Authorization` header are this tenant's, as principal `anonymous`.
    /// For local use; at most one tenant may set it.
    #[serde(default)]
    pub anonymous: bool,
    /// API keys, presented as `Authorization: Bearer <key>`; only their SHA-256 is stored.
    #[serde(default, rename = "api_key", skip_serializing_if = "Vec::is_empty")]
    pub api_keys: Vec<ApiKeyConfig>,
    /// JWT issuers whose bearer tokens name this tenant's principals.
    #[serde(default, rename = "jwt", skip_serializing_if = "Vec::is_empty")]
    pub jwts: Vec<JwtConfig>,
    /// OAuth 2.1 authorization servers whose access tokens name this tenant's principals (the
    /// gateway is their resource server: MCP authorization).
    #[serde(default, rename = "oauth", skip_serializing_if = "Vec::is_empty")]
    pub oauth: Vec<OAuthConfig>,
    /// Limits (each absent one falls back to the gateway-wide setting or is unlimited).
    #[serde(default)]
    pub limits: TenantLimits,
    /// Virtual servers: named sets of the tenant's tools, each at its own endpoint.
    #[serde(default, rename = "profile", skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<crate::ProfileConfig>,
}

impl TenantConfig {
    /// A tenant with no credentials and no limits.
    pub fn new(id: impl Into<String>) -> TenantConfig {
        TenantConfig {
            id: id.into(),
            upstreams: None,
            tools: None,
            anonymous: false,
            api_keys: Vec::new(),
            jwts: Vec::new(),
            oauth: Vec::new(),
            limits: TenantLimits::default(),
            profiles: Vec::new(),
        }
    }
}

/// `[tenant.tools]`: which tools a tenant may list and call, and how often.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRules {
    /// When not empty, a tool must match one of these.
    #[serde(default)]
    pub allow: Vec<String>,
    /// A tool that matches one of these is never listed or called (over `allow`).
    #[serde(default)]
    pub deny: Vec<String>,
    /// Scopes an OAuth access token must hold to call the tools a glob matches (glob →
    /// space-separated scopes). The tools stay listed; a call without the scopes is refused
    /// with 403 `insufficient_scope` naming them all, so the client can ask its authorization
    /// server for them (step-up authorization). Credentials that carry no scopes (API keys,
    /// configured JWTs) are held to `allow` and `deny` only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
    /// Scopes an OAuth access token must hold to call any tool of an upstream (upstream name
    /// → space-separated scopes), as for `scopes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream_scopes: BTreeMap<String, String>,
    /// Calls of the tools a glob matches (glob → rate), tenant-wide or per principal: each
    /// glob is one bucket, shared by every tool it matches. A call over it gets 429 with
    /// `Retry-After`, naming the tool and the glob.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rates: BTreeMap<String, ToolRate>,
    /// Calls of any tool of an upstream (upstream name → rate), as for `rates`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream_rates: BTreeMap<String, ToolRate>,
    /// Search mode at the tenant's own endpoint (`/mcp`): `tools/list` holds the tool-search
    /// meta-tools and the tools a session activated (profiles say so for theirs).
    #[serde(default)]
    pub search: bool,
}

/// A rate of tool calls (`[tenant.tools] rates`, `upstream_rates`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRate {
    /// Calls per second, sustained.
    pub per_second: f64,
    /// Calls allowed at once after a quiet period (at least 1).
    pub burst: u32,
    /// Whose calls share the bucket: the whole tenant's (`"tenant"`, the default) or each
    /// principal's (`"principal"`).
    #[serde(default)]
    pub per: RatePer,
}

/// Whose calls one rate bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RatePer {
    #[default]
    Tenant,
    Principal,
}

impl ToolRate {
    /// The rate, as the limits' buckets take it.
    pub fn rate(&self) -> Rate {
        Rate { per_second: self.per_second, burst: self.burst }
    }
}

impl ToolRules {
    /// Whether the tool named `name` (the gateway's name) may be listed and called.
    pub fn permits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|g| glob(g, name))) && !self.deny.iter().any(|g| glob(g, name))
    }

    /// The scopes a call of the tool `name` of `upstream` needs (sorted, each once).
    pub fn scopes_for(&self, upstream: &str, name: &str) -> Vec<&str> {
        let by_tool = self.scopes.iter().filter(|(g, _)| glob(g, name)).map(|(_, s)| s.as_str());
        let by_upstream = self.upstream_scopes.get(upstream).map(String::as_str);
        let mut all: Vec<&str> = by_tool.chain(by_upstream).flat_map(str::split_whitespace).collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

#[cfg(test)]
mod glob_tests {
    use super::{glob, ToolRules};

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("demo__*", "demo__echo") && glob("*__delete*", "files__delete_all") && glob("a?c", "abc"));
        assert!(!glob("demo__*", "other__echo") && !glob("a?c", "abbc") && glob("*", "") && !glob("x", ""));
        // A name holding a `*` is matched by the pattern's wildcard, not by the character.
        assert!(glob("files__*", "files__*x") && glob("*x", "*x") && glob("a*b", "a*b"));
        let rules = ToolRules { allow: vec!["demo__*".into()], deny: vec!["*__slow".into()], ..ToolRules::default() };
        assert!(rules.permits("demo__echo") && !rules.permits("demo__slow") && !rules.permits("local__echo"));
        assert!(ToolRules::default().permits("anything"));
    }

    #[test]
    fn the_scopes_of_a_call_are_its_tool_globs_and_its_upstream() {
        let rules = ToolRules {
            scopes: [
                ("db__*".to_owned(), "db:read".to_owned()),
                ("db__drop_*".to_owned(), "db:write db:read".to_owned()),
            ]
            .into(),
            upstream_scopes: [("db".to_owned(), "db".to_owned())].into(),
            ..ToolRules::default()
        };
        assert_eq!(rules.scopes_for("db", "db__drop_table"), ["db", "db:read", "db:write"]);
        assert_eq!(rules.scopes_for("db", "db__query"), ["db", "db:read"]);
        assert_eq!(rules.scopes_for("files", "files__read"), Vec::<&str>::new());
    }
}

/// `[[tenant.api_key]]`: one API key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// The principal the key authenticates (a user or service name).
    pub principal: String,
    /// Lower-case hex SHA-256 of the key (`taskgate hash-key` prints it).
    pub sha256: String,
}

/// A JWT signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JwtAlgorithm {
    /// HMAC with SHA-256 and a shared secret.
    HS256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 and the issuer's public key.
    RS256,
}

/// `[[tenant.jwt]]`: bearer tokens signed by one issuer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// `HS256` or `RS256`; a token whose header names another algorithm is refused.
    pub algorithm: JwtAlgorithm,
    /// HS256: the shared secret (at least 32 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// HS256: the environment variable holding the shared secret (preferred over `secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// RS256: the PEM public key (`-----BEGIN PUBLIC KEY-----…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// RS256: a file holding the PEM public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_file: Option<String>,
    /// The `aud` the token must carry (a string or one of an array).
    pub audience: String,
    /// When set, `iss` must equal it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The claim naming the principal.
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// When set, this claim must equal the tenant's id (for an issuer shared by tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_claim: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

/// `[[tenant.oauth]]`: an OAuth 2.1 authorization server whose JWT access tokens (RFC 9068)
/// the gateway accepts, its keys read from its metadata's `jwks_uri`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The issuer identifier: its metadata is at `<issuer>/.well-known/oauth-authorization-server`
    /// (RFC 8414) or `/.well-known/openid-configuration` (OpenID Connect Discovery).
    pub issuer: String,
    /// The `aud` a token must carry (RFC 8707: a token for another resource is refused).
    /// Absent: `server.public_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Scopes every token must hold (a token without one gets 403 `insufficient_scope`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_scopes: Vec<String>,
    /// The claim naming the principal.
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// When set, this claim must equal the tenant's id (for an issuer shared by tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_claim: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// The issuer's JWKS, when its metadata is not to be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// Opaque access tokens are checked by token introspection (RFC 7662) at the server's
    /// `introspection_endpoint`, the gateway authenticating as this client...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introspection_client_id: Option<String>,
    /// ...with the secret in this environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introspection_secret_env: Option<String>,
    /// How this server's opaque tokens begin (`"at_"`): only tokens that do are sent to it for
    /// introspection. Needed when another server introspects too, or a tenant has API keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque_token_prefix: Option<String>,
}

fn default_principal_claim() -> String {
    "sub".into()
}

fn default_leeway() -> u64 {
    30
}

/// A token bucket, as GCRA: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Requests per second, sustained.
    pub per_second: f64,
    /// Requests allowed at once after a quiet period (at least 1).
    pub burst: u32,
}

/// What a new session does when its tenant is at its session cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionCapPolicy {
    /// Refused (429 with `Retry-After`).
    #[default]
    Refuse,
    /// The principal's own longest-idle session makes room.
    ReclaimIdle,
}

/// `[tenant.limits]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantLimits {
    /// Tasks not yet terminal, across the tenant; a task beyond it is refused (-32002).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_tasks: Option<usize>,
    /// Tasks not yet terminal, per principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_tasks_per_principal: Option<usize>,
    /// Largest ttl granted (ms); default `tasks.max_ttl_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ttl_ms: Option<u64>,
    /// ttl of a task whose request names none (ms); default `tasks.default_ttl_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_ttl_ms: Option<u64>,
    /// `pollInterval` suggested to this tenant (ms); default `tasks.poll_interval_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Requests across the tenant (polling methods excepted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Requests per principal (polling methods excepted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal_rate: Option<Rate>,
    /// `tasks/get` and `tasks/list` across the tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_rate: Option<Rate>,
    /// `tasks/get` and `tasks/list` per principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal_poll_rate: Option<Rate>,
    /// Sessions open at once for the tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<usize>,
    /// What a new session does when the tenant has all the sessions it may (`max_sessions`, or
    /// its share of `server.max_sessions`): `refuse` (429 with `Retry-After`, the default), or
    /// `reclaim_idle` (the principal's own longest-idle session, with no stream open and nothing
    /// in flight, is closed to make room; refused as above when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_max_sessions: Option<SessionCapPolicy>,
    /// Largest POST body (bytes); never more than `server.max_body_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
    /// Bytes of task results the tenant may hold at once; default its share of
    /// `tasks.max_result_bytes_total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<usize>,
    /// The share of each gateway-wide pool this tenant may take, in percent; default
    /// `server.tenant_share_percent` (100 when it is the only tenant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_percent: Option<u8>,
}

/// The limits in force for a tenant once the gateway-wide defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveTaskLimits {
    /// ttl when none is requested; `None` means unlimited.
    pub default_ttl_ms: Option<u64>,
    /// Largest ttl; `None` means uncapped.
    pub max_ttl_ms: Option<u64>,
    /// Smallest ttl granted.
    pub min_ttl_ms: u64,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
}

impl TenantLimits {
    /// The ttl and polling settings for this tenant over the gateway's `[tasks]`.
    pub fn tasks(&self, tasks: &TasksConfig) -> EffectiveTaskLimits {
        let (default_ttl_ms, max_ttl_ms) = if tasks.unlimited_ttl {
            (self.default_ttl_ms, self.max_ttl_ms)
        } else {
            let max = self.max_ttl_ms.unwrap_or(tasks.max_ttl_ms);
            (Some(self.default_ttl_ms.unwrap_or(tasks.default_ttl_ms).min(max)), Some(max))
        };
        EffectiveTaskLimits {
            default_ttl_ms,
            max_ttl_ms,
            // Never above what the operator grants by default or at most.
            min_ttl_ms: tasks.min_ttl_ms.min(max_ttl_ms.unwrap_or(u64::MAX)).min(default_ttl_ms.unwrap_or(u64::MAX)),
            poll_interval_ms: self.poll_interval_ms.unwrap_or(tasks.poll_interval_ms),
        }
    }
}

/// Checks the tenants against each other and the known upstreams.
pub(crate) fn validate(tenants: &[TenantConfig], upstreams: &BTreeSet<&str>, bad: &mut dyn FnMut(String, String)) {
    let mut ids = BTreeMap::new();
    let mut principals_by_hash = BTreeMap::new();
    let mut anonymous = None;
    for (i, t) in tenants.iter().enumerate() {
        let at = |field: &str| format!("tenant[{i}] ({:?}).{field}", t.id);
        if t.id.is_empty() || !t.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            bad(at("id"), "must be non-empty and use only A-Z a-z 0-9 _ -".into());
        }
        if let Some(first) = ids.insert(t.id.clone(), i) {
            bad(at("id"), format!("duplicates tenant[{first}]; ids must be unique"));
        }
        if t.anonymous {
            if let Some(first) = anonymous.replace(i) {
                bad(at("anonymous"), format!("tenant[{first}] is already the anonymous tenant; only one may be"));
            }
        }
        if !t.anonymous && t.api_keys.is_empty() && t.jwts.is_empty() && t.oauth.is_empty() {
            bad(
                at("api_key"),
                "the tenant has no credentials: add an api_key, jwt or oauth, or set anonymous = true".into(),
            );
        }
        for (j, name) in t.upstreams.iter().flatten().enumerate() {
            if !upstreams.contains(name.as_str()) {
                bad(format!("{}[{j}]", at("upstreams")), format!("{name:?} is not a configured upstream"));
            }
        }
        for (j, key) in t.api_keys.iter().enumerate() {
            let at = |field: &str| format!("tenant[{i}] ({:?}).api_key[{j}].{field}", t.id);
            if key.principal.is_empty() {
                bad(at("principal"), "must be non-empty".into());
            }
            let hex =
                key.sha256.len() == 64 && key.sha256.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
            if !hex {
                bad(at("sha256"), "must be 64 lower-case hex digits (run `taskgate hash-key <key>`)".into());
            } else if let Some((ti, kj)) = principals_by_hash.insert(key.sha256.clone(), (i, j)) {
                bad(at("sha256"), format!("the same key is already tenant[{ti}].api_key[{kj}]; keys must be unique"));
            }
        }
        for (j, jwt) in t.jwts.iter().enumerate() {
            let at = |field: &str| format!("tenant[{i}] ({:?}).jwt[{j}].{field}", t.id);
            match jwt.algorithm {
                JwtAlgorithm::HS256 => {
                    if jwt.secret.is_none() == jwt.secret_env.is_none() {
                        bad(at("secret"), "HS256 needs exactly one of secret or secret_env".into());
                    }
                    if jwt.public_key.is_some() || jwt.public_key_file.is_some() {
                        bad(at("public_key"), "public keys are for RS256".into());
                    }
                    if jwt.secret.as_ref().is_some_and(|s| s.len() < 32) {
                        bad(at("secret"), "an HS256 secret must be at least 32 bytes".into());
                    }
                }
                JwtAlgorithm::RS256 => {
                    if jwt.public_key.is_none() == jwt.public_key_file.is_none() {
                        bad(at("public_key"), "RS256 needs exactly one of public_key or public_key_file".into());
                    }
                    if jwt.secret.is_some() || jwt.secret_env.is_some() {
                        bad(at("secret"), "secrets are for HS256".into());
                    }
                }
            }
            if jwt.audience.is_empty() {
                bad(at("audience"), "must be non-empty".into());
            }
            if jwt.principal_claim.is_empty() {
                bad(at("principal_claim"), "must be non-empty".into());
            }
        }
        for (j, oauth) in t.oauth.iter().enumerate() {
            let at = |field: &str| format!("tenant[{i}] ({:?}).oauth[{j}].{field}", t.id);
            for (field, url) in [("issuer", Some(&oauth.issuer)), ("jwks_uri", oauth.jwks_uri.as_ref())] {
                if let Some(url) = url {
                    if let Err(why) = secure_url(url) {
                        bad(at(field), why);
                    }
                }
            }
            if oauth.audience.as_ref().is_some_and(String::is_empty) {
                bad(at("audience"), "must be non-empty (or absent: server.public_url)".into());
            }
            if oauth.principal_claim.is_empty() {
                bad(at("principal_claim"), "must be non-empty".into());
            }
            if oauth.introspection_client_id.is_some() != oauth.introspection_secret_env.is_some() {
                bad(
                    at("introspection_client_id"),
                    "introspection needs both introspection_client_id and introspection_secret_env".into(),
                );
            }
        }
        let l = &t.limits;
        let at = |field: &str| format!("tenant[{i}] ({:?}).limits.{field}", t.id);
        for (field, value) in [
            ("max_concurrent_tasks", l.max_concurrent_tasks.map(|v| v as u64)),
            ("max_concurrent_tasks_per_principal", l.max_concurrent_tasks_per_principal.map(|v| v as u64)),
            ("max_ttl_ms", l.max_ttl_ms),
            ("default_ttl_ms", l.default_ttl_ms),
            ("poll_interval_ms", l.poll_interval_ms),
            ("max_sessions", l.max_sessions.map(|v| v as u64)),
        ] {
            if value == Some(0) {
                bad(at(field), "must be at least 1".into());
            }
        }
        if let (Some(default), Some(max)) = (l.default_ttl_ms, l.max_ttl_ms) {
            if default > max {
                bad(at("default_ttl_ms"), format!("{default} exceeds max_ttl_ms ({max})"));
            }
        }
        if l.max_body_bytes.is_some_and(|b| b < 1024) {
            bad(at("max_body_bytes"), "must be at least 1024".into());
        }
        for (field, rate) in [
            ("rate", l.rate),
            ("principal_rate", l.principal_rate),
            ("poll_rate", l.poll_rate),
            ("principal_poll_rate", l.principal_poll_rate),
        ] {
            if let Some(rate) = rate {
                if !(rate.per_second.is_finite() && rate.per_second > 0.0) {
                    bad(at(field), "per_second must be a positive number".into());
                }
                if rate.burst == 0 {
                    bad(at(field), "burst must be at least 1".into());
                }
            }
        }
    }
}

/// Problems with a location, for [`validate`]'s callers.
pub(crate) fn collect(tenants: &[TenantConfig], upstreams: &BTreeSet<&str>) -> Vec<Problem> {
    let mut problems = Vec::new();
    validate(tenants, upstreams, &mut |location, message| problems.push(Problem { location, message }));
    problems
}

/// An authorization server's URL must be https, or http on a loopback host (a test or a
/// sidecar): OAuth 2.1 section 1.5 ("Communication security").
pub fn secure_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("{url:?} is not an https:// URL"));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host =
        host.rsplit_once(':').map_or(host, |(h, p)| if p.chars().all(|c| c.is_ascii_digit()) { h } else { host });
    let loopback = host == "localhost"
        || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(format!("{url:?} must be https:// (http:// only on a loopback host)"))
    }
}
