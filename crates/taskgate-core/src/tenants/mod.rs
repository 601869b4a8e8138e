//! Tenants: who is calling ([`auth`]), what they may see, and the limits the Supervisor enforces
//! for them ([`limits`]). The tenant table is swapped whole on a reload; the rate buckets and
//! task counts live on across reloads, so a new limit applies to the next request.

mod claims;
mod configured;
pub mod credentials;
mod jws;
pub mod limits;
pub mod oauth;
pub mod profiles;
mod refusal;
pub mod refused_tokens;
pub mod subjects;
pub mod tool_rates;
mod verified;

use std::collections::BTreeSet;

use foldhash::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use taskgate_config::{Config, EffectiveTaskLimits, Problem, Rate, TenantConfig, TenantLimits};

use crate::clock::Clock;
use crate::identity::Identity;
use crate::GatewayError;
use credentials::Credentials;
pub use credentials::{hash_key, AuthError, Verified};
pub use limits::{Bucket, Cap, Concurrency, RateLimiter, Rates, Refused, TaskPermit};

pub use crate::identity::IMPLICIT_TENANT;

/// One tenant's settings, as the gateway applies them.
#[derive(Debug, Clone)]
pub struct TenantPolicy {
    /// The tenant id.
    pub id: String,
    /// The upstreams it sees; `None`: all.
    pub upstreams: Option<BTreeSet<String>>,
    /// The tools it may list and call, by the gateway's names.
    pub tools: Option<taskgate_config::ToolRules>,
    /// Its limits as configured.
    pub limits: TenantLimits,
    /// ttl and pollInterval with the gateway's defaults applied.
    pub tasks: EffectiveTaskLimits,
    /// Largest POST body, the tenant's and the server's limit combined.
    pub max_body_bytes: usize,
    /// What of each gateway-wide pool the tenant may take.
    pub shares: Shares,
    /// Its virtual servers, by name.
    pub profiles: HashMap<String, Arc<profiles::Profile>>,
}

/// One tenant's share of the gateway-wide pools (issue: one tenant must not drain what all
/// share): `server.tenant_share_percent` of each (or its `limits.share_percent`), 100% when it
/// is the only tenant; its own limits apply when lower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    /// Sessions open at once.
    pub sessions: usize,
    /// Tasks held at once (live and finished until their ttl).
    pub tasks: usize,
    /// Bytes of task results held at once.
    pub result_bytes: usize,
    /// Client streams open at once.
    pub streams: usize,
    /// Its share of each pool, in percent: of an upstream's stdio processes too (each upstream
    /// its own `max_processes`).
    pub percent: usize,
}

impl Shares {
    fn new(tenant: &TenantConfig, config: &Config) -> Shares {
        let percent = match tenant.limits.share_percent {
            Some(p) => p.min(100),
            None if config.tenants.len() <= 1 => 100,
            None => config.server.tenant_share_percent.min(100),
        } as usize;
        let part = |pool: usize| (pool.saturating_mul(percent) / 100).max(1);
        Shares {
            sessions: part(config.server.max_sessions).min(tenant.limits.max_sessions.unwrap_or(usize::MAX)),
            tasks: part(config.tasks.max_tasks),
            result_bytes: part(config.tasks.max_result_bytes_total)
                .min(tenant.limits.max_result_bytes.unwrap_or(usize::MAX)),
            streams: part(config.server.max_streams),
            percent,
        }
    }
}

impl TenantPolicy {
    fn new(tenant: &TenantConfig, config: &Config) -> TenantPolicy {
        TenantPolicy {
            id: tenant.id.clone(),
            upstreams: tenant.upstreams.as_ref().map(|u| u.iter().cloned().collect()),
            tools: tenant.tools.clone(),
            limits: tenant.limits.clone(),
            tasks: tenant.limits.tasks(&config.tasks),
            max_body_bytes: tenant.limits.max_body_bytes.unwrap_or(usize::MAX).min(config.server.max_body_bytes),
            shares: Shares::new(tenant, config),
            profiles: tenant
                .profiles
                .iter()
                .map(|p| (p.name.clone(), Arc::new(profiles::Profile::new(p.clone()))))
                .collect(),
        }
    }

    /// What the endpoint of profile `name` serves (the tenant's own, `/mcp`, for `None`);
    /// `None` for a profile the tenant does not have.
    pub fn endpoint(&self, name: Option<&str>) -> Option<profiles::Endpoint> {
        match name {
            None => Some(profiles::Endpoint { profile: None, search: self.tools.as_ref().is_some_and(|t| t.search) }),
            Some(name) => {
                let profile = self.profiles.get(name)?.clone();
                Some(profiles::Endpoint { search: profile.config.search, profile: Some(profile) })
            }
        }
    }

    /// Whether the tool the gateway names `name`, of `upstream`, is listed and called at
    /// `endpoint` (the tenant's rules, then the endpoint's).
    pub fn serves_at(&self, endpoint: &profiles::Endpoint, upstream: &str, name: &str) -> bool {
        self.may_call(upstream, name) && endpoint.serves(name)
    }

    /// A tenant no longer configured (removed by a reload while its session was open): it
    /// sees nothing.
    fn removed(id: &str, config: &Config) -> TenantPolicy {
        let mut policy = TenantPolicy::new(&TenantConfig::new(id), config);
        policy.upstreams = Some(BTreeSet::new());
        policy
    }

    /// Whether the tenant sees (and may call) an upstream's tools.
    pub fn sees(&self, upstream: &str) -> bool {
        self.upstreams.as_ref().is_none_or(|u| u.contains(upstream))
    }

    /// Whether the tenant may list and call the tool the gateway names `name`, of `upstream`.
    pub fn may_call(&self, upstream: &str, name: &str) -> bool {
        self.sees(upstream) && self.tools.as_ref().is_none_or(|rules| rules.permits(name))
    }
}

/// One configuration's tenants and credentials.
struct TenantTable {
    config: Config,
    tenants: HashMap<String, Arc<TenantPolicy>>,
    credentials: Credentials,
}

impl TenantTable {
    fn build(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        issuers: &Arc<oauth::Issuers>,
    ) -> Result<TenantTable, Vec<Problem>> {
        let credentials = Credentials::build(config, env, issuers)?;
        let mut tenants: HashMap<String, Arc<TenantPolicy>> =
            config.tenants.iter().map(|t| (t.id.clone(), Arc::new(TenantPolicy::new(t, config)))).collect();
        if config.tenants.is_empty() {
            let implicit = TenantConfig { anonymous: true, ..TenantConfig::new(IMPLICIT_TENANT) };
            tenants.insert(IMPLICIT_TENANT.into(), Arc::new(TenantPolicy::new(&implicit, config)));
        }
        Ok(TenantTable { config: config.clone(), tenants, credentials })
    }
}

/// Checks that a configuration's credentials can be loaded (keys read, secrets present),
/// reporting every problem; `check-config` runs it too.
pub fn check_credentials(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Vec<Problem>> {
    let mut problems = Credentials::build(config, env, &Arc::new(oauth::Issuers::default())).err().unwrap_or_default();
    // The Redis URL may come from the environment too (it can hold a password).
    let store = &config.store;
    if store.backend == taskgate_config::StoreBackend::Redis && store.redis_url(env).is_none() {
        if let Some(variable) = &store.url_env {
            problems.push(Problem {
                location: "store.url_env".into(),
                message: format!("the variable {variable:?} is not set"),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The tenants in force, the rate buckets and the task counts.
pub struct Tenancy {
    table: RwLock<Arc<TenantTable>>,
    /// Request rates.
    pub rates: RateLimiter,
    /// Tokens refused per client source this second.
    pub refused_tokens: refused_tokens::RefusedTokens,
    /// Tool calls' rates, where no shared store keeps them.
    pub tool_rates: tool_rates::ToolRateLimiter,
    /// Concurrent tasks.
    pub concurrency: Concurrency,
    /// The authorization servers' keys, kept across reloads.
    pub issuers: Arc<oauth::Issuers>,
    /// The callers' access tokens, for upstreams called with each caller's own identity.
    pub subjects: Arc<subjects::Subjects>,
    clock: Arc<dyn Clock>,
}

/// How many callers' tokens to keep: as many as the upstream that keeps the most exchanged
/// tokens (0 when no upstream exchanges them).
fn subjects_bound(config: &Config) -> usize {
    let exchanging = config.upstreams.iter().filter_map(|u| u.oauth.as_ref());
    let exchanging = exchanging.filter(|o| o.grant == taskgate_config::UpstreamGrant::TokenExchange);
    exchanging.map(|o| o.max_cached_tokens).max().unwrap_or(0)
}

/// Whether a method counts in the polling buckets.
pub fn is_poll(method: &str) -> bool {
    taskgate_protocol::method::row(method).is_some_and(|row| row.poll)
}

impl Tenancy {
    /// The tenants of `config`, reading secrets from the process environment.
    pub fn new(config: &Config, clock: Arc<dyn Clock>) -> Result<Tenancy, Vec<Problem>> {
        let issuers = Arc::new(oauth::Issuers::default());
        let table = TenantTable::build(config, &|k| std::env::var(k).ok(), &issuers)?;
        issuers.install(&table.credentials.issuers_in_force());
        let subjects = Arc::new(subjects::Subjects::new(clock.clone()));
        subjects.set_bound(subjects_bound(config));
        Ok(Tenancy {
            table: RwLock::new(Arc::new(table)),
            rates: RateLimiter::default(),
            tool_rates: Default::default(),
            refused_tokens: Default::default(),
            concurrency: Concurrency::default(),
            issuers,
            subjects,
            clock,
        })
    }

    /// Replaces the tenants (and their credentials and limits) with those of `config`, or
    /// keeps the current ones and returns every problem.
    pub fn reload(&self, config: &Config) -> Result<(), Vec<Problem>> {
        let table = TenantTable::build(config, &|k| std::env::var(k).ok(), &self.issuers)?;
        // Only now, the configuration accepted, do its issuers (and their jwks_uri) take effect.
        self.issuers.install(&table.credentials.issuers_in_force());
        *self.table.write() = Arc::new(table);
        self.subjects.set_bound(subjects_bound(config));
        self.subjects.retain_tenants(|t| config.tenants.iter().any(|c| c.id == t));
        Ok(())
    }

    /// The tenant ids in force.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<_> = self.table.read().tenants.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The identity an `Authorization` header value authenticates.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Verified, AuthError> {
        let table = self.table.read().clone();
        table.credentials.authenticate(authorization, self.clock.now_ms() / 1000)
    }

    /// Whether `authorization` holds a JWT verified lately (still passing without a check).
    pub fn verified_lately(&self, authorization: Option<&str>) -> bool {
        let token = authorization.and_then(|h| h.trim().split_once(' ')).map_or("", |(_, t)| t.trim());
        let table = self.table.read();
        table.credentials.verified_lately(token, self.clock.now_ms() / 1000)
    }

    /// The current second.
    pub fn now_secs(&self) -> u64 {
        self.clock.now_ms() / 1000
    }

    /// What a refusal says, in the words of the credentials this configuration takes: a
    /// gateway that takes only OAuth access tokens never asks for an API key.
    pub fn refusal_text(&self, e: &AuthError) -> String {
        let table = self.table.read();
        let c = &table.credentials;
        let (keys, jwts, oauth) = c.kinds();
        match e {
            AuthError::Missing if oauth && !keys && !jwts => "send Authorization: Bearer <access token> of an authorization server this server's protected resource metadata names".into(),
            AuthError::Missing if keys && !jwts && !oauth => "send Authorization: Bearer <API key>".into(),
            AuthError::UnknownKey if !keys => "the bearer token is not valid: it is no token this server takes".into(),
            _ => e.to_string(),
        }
    }

    /// Whether any tenant has a profile named `name` (its endpoint is a protected resource of
    /// its own, RFC 9728).
    pub fn has_profile(&self, name: &str) -> bool {
        self.table.read().tenants.values().any(|t| t.profiles.contains_key(name))
    }

    /// The scopes and issuers of the configured authorization servers (for the protected
    /// resource metadata and the challenges).
    pub fn oauth(&self) -> (Vec<String>, Vec<String>) {
        let table = self.table.read();
        (table.credentials.oauth_issuers(), table.credentials.oauth_scopes())
    }

    /// Asks the one authorization server whose opaque tokens `token` looks like about it (RFC
    /// 7662) and keeps its answer; `source` is the client that sent it. Not asked when the
    /// client has had its share of the server's introspections this second, or they are spent.
    pub async fn introspect(&self, token: &str, source: Option<std::net::IpAddr>) -> Result<(), oauth::NotAsked> {
        let Some((issuer, client, secret)) = self.table.read().credentials.introspector_for(token) else {
            return Ok(()); // no server's: refused as an unknown key
        };
        issuer.may_introspect(source, self.clock.now_ms() / 1000)?;
        match self.issuers.introspect(&issuer, &client, &secret, token).await {
            Ok(Some(claims)) => self.issuers.remember(token, Some((issuer.url.clone(), claims))),
            Ok(None) => self.issuers.remember(token, None),
            // Nothing is kept: the token is asked about again.
            Err(why) => {
                if let Some(suppressed) = crate::logs::limiter().allow("introspection_failed") {
                    tracing::warn!(issuer = %issuer.url, %why, suppressed, "token introspection failed");
                }
            }
        }
        Ok(())
    }

    /// The issuers that introspect opaque tokens.
    pub fn introspecting(&self) -> Vec<String> {
        self.table.read().credentials.introspectors().into_iter().map(|(i, _, _)| i.url.clone()).collect()
    }

    /// The policy of a tenant (one removed by a reload sees nothing).
    pub fn policy(&self, tenant: &str) -> Arc<TenantPolicy> {
        let table = self.table.read();
        match table.tenants.get(tenant) {
            Some(policy) => policy.clone(),
            None => Arc::new(TenantPolicy::removed(tenant, &table.config)),
        }
    }

    /// The rates that apply to a request of `identity`.
    fn rates_for(&self, identity: &Identity, method: &str) -> Rates {
        let policy = self.policy(&identity.tenant);
        let poll = is_poll(method);
        let l = &policy.limits;
        if poll {
            Rates { tenant: l.poll_rate, principal: l.principal_poll_rate, poll }
        } else {
            Rates { tenant: l.rate, principal: l.principal_rate, poll }
        }
    }

    /// Admits one request by rate, or refuses it with when to retry.
    pub fn admit_request(&self, identity: &Identity, method: &str) -> Result<(), Refused> {
        let rates = self.rates_for(identity, method);
        self.rates.check(&identity.tenant, &identity.principal, &rates, self.clock.now_ms())
    }

    /// The buckets of a request as every replica shares them (a shared store counts them),
    /// each with the bucket kind it stands for; empty when no rate applies.
    pub fn shared_buckets(&self, identity: &Identity, method: &str) -> Vec<(Bucket, Rate, taskgate_store::RateBucket)> {
        let rates = self.rates_for(identity, method);
        let (tenant_kind, principal_kind) =
            if rates.poll { (Bucket::TenantPoll, Bucket::PrincipalPoll) } else { (Bucket::Tenant, Bucket::Principal) };
        let mut buckets = Vec::with_capacity(2);
        // The principal's first: its refusal is the more specific answer.
        if let Some(rate) = rates.principal {
            let name = format!("{}:{}\u{0}{}", principal_kind.label(), identity.tenant, identity.principal);
            buckets.push((
                principal_kind,
                rate,
                taskgate_store::RateBucket { name, per_second: rate.per_second, burst: rate.burst },
            ));
        }
        if let Some(rate) = rates.tenant {
            let name = format!("{}:{}", tenant_kind.label(), identity.tenant);
            buckets.push((
                tenant_kind,
                rate,
                taskgate_store::RateBucket { name, per_second: rate.per_second, burst: rate.burst },
            ));
        }
        buckets
    }

    /// A tenant's caps on tasks not yet terminal.
    pub fn caps(&self, tenant: &str) -> taskgate_store::Caps {
        let policy = self.policy(tenant);
        taskgate_store::Caps {
            tenant: policy.limits.max_concurrent_tasks,
            principal: policy.limits.max_concurrent_tasks_per_principal,
        }
    }

    /// Admits one more task under the tenant's caps.
    pub fn admit_task(&self, identity: &Identity) -> Result<TaskPermit, Cap> {
        let policy = self.policy(&identity.tenant);
        let l = &policy.limits;
        self.concurrency.acquire(identity, l.max_concurrent_tasks, l.max_concurrent_tasks_per_principal)
    }

    /// The place of a task admitted before, now run by this process (after a restart or a
    /// takeover): counted under the caps whatever they are now, never refused.
    pub fn readmit_task(&self, identity: &Identity) -> TaskPermit {
        self.concurrency.acquire(identity, None, None).expect("no cap, no refusal")
    }
}

impl Cap {
    /// The metric label and config key of the cap.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Tenant(_) => "max_concurrent_tasks",
            Cap::Principal(_) => "max_concurrent_tasks_per_principal",
        }
    }

    /// The JSON-RPC error for a task refused by this cap.
    pub fn error(self, identity: &Identity) -> GatewayError {
        let (who, n) = match self {
            Cap::Tenant(n) => (format!("tenant \"{}\"", identity.tenant), n),
            Cap::Principal(n) => (format!("principal \"{}\"", identity.principal), n),
        };
        GatewayError::LimitExceeded(format!(
            "{who} already has its maximum of {n} tasks in progress (limits.{}); no task was created, retry when one finishes",
            self.label()
        ))
    }
}

/// The JSON-RPC error for a refused rate check.
pub fn rate_error(identity: &Identity, refused: &Refused) -> GatewayError {
    let who = match refused.bucket {
        Bucket::Tenant | Bucket::TenantPoll => format!("tenant \"{}\"", identity.tenant),
        Bucket::Principal | Bucket::PrincipalPoll => format!("principal \"{}\"", identity.principal),
    };
    let what = match refused.bucket {
        Bucket::Tenant | Bucket::Principal => "requests",
        Bucket::TenantPoll | Bucket::PrincipalPoll => "polls (tasks/get, tasks/list)",
    };
    GatewayError::RateLimited {
        what: format!(
            "{who} exceeds its rate of {} {what} per second (burst {}; limits.{})",
            refused.rate.per_second,
            refused.rate.burst,
            refused.bucket.label().replace("tenant_", "")
        ),
        retry_after_ms: refused.retry_after_ms,
    }
}
