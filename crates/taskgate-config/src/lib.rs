//! taskgate configuration: the TOML schema, its defaults (all in [`defaults`]), environment
//! overrides and a [`Config::validate`] that reports every problem at once with its location.
//!
//! See `config/taskgate.toml` for a documented example; a test loads it so it cannot rot.
//!
//! - [`Config`] (this file) and its sections: `server` (`[server]`, `[logging]`,
//!   `[federation]`, `[progress]`), `tasks` (`[tasks]`, `[store]`), `upstream`
//!   (`[[upstream]]`), `tenants` (`[[tenant]]`);
//! - [`defaults`]: every default value;
//! - `read`: reading a file (every section's problem at once) and the environment's overrides;
//!   `validate`: [`Config::validate`]; `problem`: what they report.

use serde::{Deserialize, Serialize};

mod admin;
pub mod defaults;
mod patterns;
mod problem;
pub mod profiles;
mod read;
mod server;
mod tasks;
mod tenants;
mod traces;
mod trust;
mod upstream;
mod validate;

pub use admin::{AdminConfig, AdminKey};
pub use problem::{ConfigError, Problem};
pub use profiles::ProfileConfig;
pub use server::{FederationConfig, ForwardedHeader, LogFormat, LoggingConfig, Network, ProgressConfig, ServerConfig};
pub use tasks::{StoreBackend, StoreConfig, TasksConfig};
pub use tenants::{
    glob, secure_url, ApiKeyConfig, EffectiveTaskLimits, JwtAlgorithm, JwtConfig, OAuthConfig, Rate, RatePer,
    SessionCapPolicy, TenantConfig, TenantLimits, ToolRate, ToolRules,
};
pub use traces::TracesConfig;
pub use trust::normal_audience;
pub use upstream::{
    ShareSessions, TaskSupportSetting, Transport, UpstreamConfig, UpstreamGrant, UpstreamOAuth, UpstreamProtocol,
};
pub use validate::resolve_listen;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The front door.
    #[serde(default)]
    pub server: ServerConfig,
    /// Logging.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// How upstream tools are federated.
    #[serde(default)]
    pub federation: FederationConfig,
    /// Tasks (basic/utilities/tasks).
    #[serde(default)]
    pub tasks: TasksConfig,
    /// Progress relaying (basic/utilities/progress).
    #[serde(default)]
    pub progress: ProgressConfig,
    /// Where task state lives.
    #[serde(default)]
    pub store: StoreConfig,
    /// The operator's view: who may use it, where.
    #[serde(default)]
    pub admin: AdminConfig,
    /// OpenTelemetry traces.
    #[serde(default)]
    pub traces: TracesConfig,
    /// The upstream MCP servers.
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<UpstreamConfig>,
    /// The tenants. With none, every request is served as one anonymous tenant that sees every
    /// upstream (local use); with some, only their credentials (or the one `anonymous` tenant).
    #[serde(default, rename = "tenant", skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantConfig>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn empty_file_is_the_defaults() {
        let c = Config::from_toml("", "t.toml", &no_env).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_location() {
        let err = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\nlistn = 1\n", "t.toml", &no_env).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("listn") && text.contains("line 3"), "{text}");
    }

    #[test]
    fn token_exchange_names_a_trusted_issuer_and_scopes_name_upstreams_of_an_oauth_tenant() {
        let text = r#"
            [[upstream]]
            name = "crm"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            [upstream.oauth]
            grant = "token_exchange"
            token_url = "https://login.example.com/token"
            client_id = "taskgate"
            client_secret_env = "SECRET"
            [[upstream]]
            name = "other"
            transport = "http"
            url = "http://127.0.0.1:2/mcp"
            [upstream.oauth]
            grant = "token_exchange"
            token_url = "https://login.example.com/token"
            issuer = "https://elsewhere.example.com"
            client_id = "taskgate"
            client_secret_env = "SECRET"
            [[tenant]]
            id = "keys-only"
            [tenant.tools.upstream_scopes]
            crm = "crm"
            [[tenant]]
            id = "acme"
            [[tenant.oauth]]
            issuer = "https://login.example.com"
            audience = "https://gw.example.com/mcp"
            [tenant.tools.upstream_scopes]
            crmm = "crm"
        "#;
        let env = |_: &str| Some("s".to_owned());
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(text, "t.toml", &env) else {
            panic!("expected invalid")
        };
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        for expected in [
            "upstream[0] (\"crm\").oauth.issuer",
            "upstream[1] (\"other\").oauth.issuer",
            "tenant[0] (\"keys-only\").tools.scopes",
            "tenant[1] (\"acme\").tools.upstream_scopes",
        ] {
            assert!(locations.contains(&expected), "{expected}: {locations:?}");
        }
        assert!(!locations.iter().any(|l| l.starts_with("tenant[1]") && l.ends_with(".scopes")), "{locations:?}");
    }

    #[test]
    fn tool_rates_are_read_with_their_scope_and_checked() {
        let text = r#"
            [[upstream]]
            name = "search"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            [[tenant]]
            id = "acme"
            anonymous = true
            [tenant.tools]
            rates = { "search__*" = { per_second = 2.0, burst = 5 }, "*__query" = { per_second = 1.0, burst = 1, per = "principal" } }
            upstream_rates = { search = { per_second = 10.0, burst = 20 } }
        "#;
        let config = Config::from_toml(text, "t.toml", &|_| None).expect("valid");
        let rules = config.tenants[0].tools.as_ref().unwrap();
        assert_eq!(rules.rates["search__*"], ToolRate { per_second: 2.0, burst: 5, per: RatePer::Tenant });
        assert_eq!(rules.rates["*__query"].per, RatePer::Principal);
        assert_eq!(rules.upstream_rates["search"].burst, 20);
        let bad = text
            .replace("burst = 5", "burst = 0")
            .replace("per_second = 10.0", "per_second = -1.0")
            .replace("upstream_rates = { search", "upstream_rates = { serch");
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(&bad, "t.toml", &|_| None) else {
            panic!("expected invalid")
        };
        let messages: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.location, p.message)).collect();
        for expected in [
            "tenant[0] (\"acme\").tools.rates.\"search__*\": burst must be at least 1",
            "tenant[0] (\"acme\").tools.upstream_rates: \"serch\" is no configured upstream",
            "tenant[0] (\"acme\").tools.upstream_rates.\"serch\": per_second must be a positive number",
        ] {
            assert!(messages.iter().any(|m| m == expected), "{expected}: {messages:?}");
        }
        let unknown = text.replace("per = \"principal\"", "per = \"session\"");
        assert!(Config::from_toml(&unknown, "t.toml", &|_| None).is_err(), "per is tenant or principal");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
            [server]
            listen = "nowhere"
            allowed_origins = ["localhost"]
            [federation]
            separator = " "
            [[upstream]]
            name = "a"
            transport = "http"
            [[upstream]]
            name = "a"
            transport = "stdio"
            url = "http://x:1/mcp"
        "#;
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(text, "t.toml", &no_env) else {
            panic!("expected invalid")
        };
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "server.listen",
                "server.allowed_origins[0]",
                "federation.separator",
                "upstream[0] (\"a\").url",
                "upstream[1] (\"a\").name",
                "upstream[1] (\"a\").command",
                "upstream[1] (\"a\").url",
            ]
        );
    }

    #[test]
    fn the_first_message_wait_is_bounded_by_the_keep_alive_cadence() {
        let parse =
            |ms: u64| Config::from_toml(&format!("[server]\nfirst_message_wait_ms = {ms}\n"), "t.toml", &no_env);
        assert_eq!(parse(0).unwrap().server.first_message_wait_ms, 0);
        assert_eq!(parse(15_000).unwrap().server.first_message_wait_ms, 15_000);
        assert_eq!(Config::default().server.first_message_wait_ms, 1_000);
        let Err(ConfigError::Invalid { problems, .. }) = parse(15_001) else { panic!("expected invalid") };
        assert_eq!(problems[0].location, "server.first_message_wait_ms");
        assert!(problems[0].message.contains("0 to 15000"), "{}", problems[0].message);
    }

    #[test]
    fn an_upstream_streams_idle_time_is_at_most_a_day() {
        let parse = |secs: u64| {
            let body = format!("[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\nstream_idle_secs = {secs}\n");
            Config::from_toml(&body, "t.toml", &no_env)
        };
        assert_eq!(parse(0).unwrap().upstreams[0].stream_idle_secs, 0);
        assert_eq!(parse(86_400).unwrap().upstreams[0].stream_idle_secs, 86_400);
        assert_eq!(UpstreamConfig::http("a", "http://h/mcp").stream_idle_secs, 30);
        let Err(ConfigError::Invalid { problems, .. }) = parse(86_401) else { panic!("expected invalid") };
        assert_eq!(problems[0].location, "upstream[0] (\"a\").stream_idle_secs");
    }

    #[test]
    fn a_tools_first_input_wait_is_read_by_tool_name_and_at_most_a_minute() {
        let parse = |ms: u64| {
            let body = format!(
                "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\ntool_first_input_wait_ms = {{ confirm = {ms} }}\n"
            );
            Config::from_toml(&body, "t.toml", &no_env)
        };
        assert_eq!(parse(60_000).unwrap().upstreams[0].tool_first_input_wait_ms["confirm"], 60_000);
        assert!(UpstreamConfig::http("a", "http://h/mcp").tool_first_input_wait_ms.is_empty(), "none by default");
        let Err(ConfigError::Invalid { problems, .. }) = parse(60_001) else { panic!("expected invalid") };
        assert_eq!(problems[0].location, "upstream[0] (\"a\").tool_first_input_wait_ms.confirm");
        assert!(problems[0].message.contains("at most 60000"), "{}", problems[0].message);
    }

    #[test]
    fn session_sharing_is_auto_by_default_and_its_idle_time_at_most_a_day() {
        let parse = |extra: &str| {
            let body = format!(
                "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n{extra}\n"
            );
            Config::from_toml(&body, "t.toml", &no_env)
        };
        let default = &parse("").unwrap().upstreams[0];
        assert_eq!((default.share_sessions, default.shared_idle_secs), (ShareSessions::Auto, 60));
        for (text, mode) in
            [("always", ShareSessions::Always), ("never", ShareSessions::Never), ("auto", ShareSessions::Auto)]
        {
            let parsed = parse(&format!("share_sessions = \"{text}\"\nshared_idle_secs = 0")).unwrap();
            assert_eq!((parsed.upstreams[0].share_sessions, parsed.upstreams[0].shared_idle_secs), (mode, 0));
        }
        let Err(ConfigError::Invalid { problems, .. }) = parse("share_sessions = \"sometimes\"") else {
            panic!("expected refused")
        };
        assert_eq!(problems[0].location, "upstream");
        assert!(problems[0].message.contains("sometimes") && problems[0].message.contains("line 5"), "{problems:?}");
        let Err(ConfigError::Invalid { problems, .. }) = parse("shared_idle_secs = 86401") else {
            panic!("expected invalid")
        };
        assert_eq!(problems[0].location, "upstream[0] (\"a\").shared_idle_secs");
    }

    #[test]
    fn an_upstreams_connections_are_bounded_and_leave_room_for_a_request() {
        let parse = |max: usize| {
            let body = format!(
                "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\nmax_connections = {max}\n"
            );
            Config::from_toml(&body, "t.toml", &no_env)
        };
        assert_eq!(parse(2).unwrap().upstreams[0].max_connections, 2);
        assert_eq!(UpstreamConfig::http("a", "http://h/mcp").max_connections, 256);
        for max in [0, 1, 65_536] {
            let Err(ConfigError::Invalid { problems, .. }) = parse(max) else { panic!("{max}: expected invalid") };
            assert_eq!(problems[0].location, "upstream[0] (\"a\").max_connections");
        }
    }

    #[test]
    fn store_keys_are_validated_with_their_location_and_never_echo_a_url() {
        let c = Config::from_toml(
            "[store]\nbackend = \"redis\"\nurl = \"redis://:pw@127.0.0.1:6379/0\"\n",
            "t.toml",
            &no_env,
        )
        .unwrap();
        assert_eq!(c.store.backend, StoreBackend::Redis);
        assert_eq!(Config::from_toml("", "t.toml", &no_env).unwrap().store, StoreConfig::file("taskgate-data"));
        let cases = [
            ("backend = \"redis\"", "store.url"),
            ("backend = \"redis\"\nurl = \"http://:secret@host\"", "store.url"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nurl_env = \"X\"", "store.url_env"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nlease_ms = 5", "store.lease_ms"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nkey_prefix = \"\"", "store.key_prefix"),
            ("backend = \"file\"\npath = \" \"", "store.path"),
            ("backend = \"memory\"\nurl = \"redis://h\"", "store.url"),
        ];
        for (body, location) in cases {
            let Err(ConfigError::Invalid { problems, .. }) =
                Config::from_toml(&format!("[store]\n{body}\n"), "t.toml", &no_env)
            else {
                panic!("{body} should be invalid")
            };
            assert_eq!(problems.iter().map(|p| p.location.as_str()).collect::<Vec<_>>(), [location], "{body}");
            assert!(problems.iter().all(|p| !p.message.contains("secret")), "{problems:?}");
        }
        let bad = Config::from_toml("[store]\nbackend = \"etcd\"\n", "t.toml", &no_env).unwrap_err().to_string();
        assert!(bad.contains("etcd") && bad.contains("line 2"), "{bad}");
        let env = |k: &str| (k == "REDIS_URL").then(|| "redis://127.0.0.1:1".to_string());
        let c =
            Config::from_toml("[store]\nbackend = \"redis\"\nurl_env = \"REDIS_URL\"\n", "t.toml", &no_env).unwrap();
        assert_eq!(c.store.redis_url(&env).as_deref(), Some("redis://127.0.0.1:1"));
    }

    #[test]
    fn environment_overrides_listen_and_log_level() {
        let env = |k: &str| match k {
            "TASKGATE_LISTEN" => Some("127.0.0.1:9999".to_string()),
            "TASKGATE_LOG" => Some("debug".to_string()),
            _ => None,
        };
        let c = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\n", "t.toml", &env).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:9999");
        assert_eq!(c.logging.level, "debug");
    }
}

#[cfg(test)]
mod tenant_tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const KEY: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn tenants_parse_with_keys_jwts_and_limits() {
        let text = format!(
            r#"
            [[upstream]]
            name = "search"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            [[tenant]]
            id = "acme"
            upstreams = ["search"]
            [[tenant.api_key]]
            principal = "ci"
            sha256 = "{KEY}"
            [[tenant.jwt]]
            algorithm = "HS256"
            secret_env = "ACME_JWT_SECRET"
            audience = "taskgate"
            [tenant.limits]
            max_concurrent_tasks = 10
            rate = {{ per_second = 5.0, burst = 10 }}
            "#
        );
        let c = Config::from_toml(&text, "t.toml", &no_env).unwrap();
        let t = &c.tenants[0];
        assert_eq!(t.api_keys[0].principal, "ci");
        assert_eq!(t.jwts[0].principal_claim, "sub");
        assert_eq!(t.limits.rate, Some(Rate { per_second: 5.0, burst: 10 }));
        let tasks = t.limits.tasks(&c.tasks);
        assert_eq!((tasks.default_ttl_ms, tasks.max_ttl_ms), (Some(3_600_000), Some(86_400_000)));
    }

    #[test]
    fn tenant_problems_are_reported_with_locations() {
        let text = format!(
            r#"
            [[tenant]]
            id = "a"
            upstreams = ["nowhere"]
            anonymous = true
            [[tenant.api_key]]
            principal = "p"
            sha256 = "XYZ"
            [[tenant]]
            id = "a"
            anonymous = true
            [[tenant.jwt]]
            algorithm = "RS256"
            secret = "short"
            audience = ""
            [tenant.limits]
            max_concurrent_tasks = 0
            default_ttl_ms = 10
            max_ttl_ms = 5
            rate = {{ per_second = 0.0, burst = 0 }}
            [[tenant]]
            id = "b"
            [[tenant.api_key]]
            principal = "x"
            sha256 = "{KEY}"
            [[tenant]]
            id = "c"
            [[tenant.api_key]]
            principal = "y"
            sha256 = "{KEY}"
            "#
        );
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(&text, "t.toml", &no_env) else {
            panic!("expected invalid")
        };
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "tenant[0] (\"a\").upstreams[0]",
                "tenant[0] (\"a\").api_key[0].sha256",
                "tenant[1] (\"a\").id",
                "tenant[1] (\"a\").anonymous",
                "tenant[1] (\"a\").jwt[0].public_key",
                "tenant[1] (\"a\").jwt[0].secret",
                "tenant[1] (\"a\").jwt[0].audience",
                "tenant[1] (\"a\").limits.max_concurrent_tasks",
                "tenant[1] (\"a\").limits.default_ttl_ms",
                "tenant[1] (\"a\").limits.rate",
                "tenant[1] (\"a\").limits.rate",
                "tenant[3] (\"c\").api_key[0].sha256",
            ]
        );
    }
}

#[cfg(test)]
mod secret_header_tests {
    use super::Config;

    #[test]
    fn upstream_headers_come_from_the_environment_or_a_file_and_a_missing_one_is_a_problem_where_named() {
        let dir = std::env::temp_dir().join(format!("taskgate-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let text = format!(
            "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
             headers_env = {{ Authorization = \"A_TOKEN\" }}\nheaders_file = {{ X-Key = {:?} }}\n",
            file.display().to_string()
        );
        let env = |k: &str| (k == "A_TOKEN").then(|| "Bearer from-env".to_owned());
        let config = Config::from_toml(&text, "t.toml", &env).unwrap();
        let headers = &config.upstreams[0].headers;
        assert_eq!(headers["Authorization"], "Bearer from-env");
        assert_eq!(headers["X-Key"], "from-a-file");
        let (_, problems) = Config::read(&text, "t.toml", &|_| None).unwrap();
        assert_eq!(problems[0].location, "upstream[0] (\"a\").headers_env.Authorization", "{problems:?}");
        assert!(problems[0].message.contains("A_TOKEN"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
