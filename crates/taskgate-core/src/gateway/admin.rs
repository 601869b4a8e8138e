//! The operator's view of a running gateway: its sessions, tasks, upstreams and store, and what
//! an operator may do to them (end a session, cancel a task, restart an upstream's processes).
//!
//! With a shared store (Redis) the view spans the replicas: tasks and session records come from
//! the store, and a session or task of another replica is ended or cancelled there through the
//! store's events, as a client's DELETE or `tasks/cancel` would be. What only a process knows
//! (idle time, open streams, processes, connections) is this replica's.

use serde_json::{json, Value};
use taskgate_store::{Page, SessionRecord, TaskFilter, TaskRecord};

use super::Gateway;
use crate::identity::Identity;
use crate::session::describe::Describe;
use crate::GatewayError;

/// The most items one page of the operator's view holds.
pub const MAX_PAGE: usize = 500;

fn store_error(e: taskgate_store::StoreError) -> GatewayError {
    match e {
        taskgate_store::StoreError::BadCursor => {
            GatewayError::InvalidParams("the cursor is not one a page of this listing gave".into())
        }
        e => crate::tasks::store_error(e),
    }
}

fn age_secs(now_ms: u64, then_ms: u64) -> u64 {
    now_ms.saturating_sub(then_ms) / 1000
}

/// A task as the operator sees it.
fn task_view(record: &TaskRecord, progress: Option<crate::tasks::LiveProgress>, now_ms: u64) -> Value {
    json!({
        "taskId": record.id,
        "tenant": record.owner.tenant,
        "principal": record.owner.principal,
        "status": record.status.as_str(),
        "statusMessage": record.status_message,
        "upstream": record.upstream,
        "tool": record.tool,
        "createdMs": record.created_at_ms,
        "lastUpdatedMs": record.last_updated_at_ms,
        "ageSecs": age_secs(now_ms, record.created_at_ms),
        "ttlMs": record.ttl_ms,
        "native": record.upstream_task_id.is_some(),
        "replica": record.replica,
        "progress": progress,
    })
}

/// A session record of another replica (or not loaded here).
fn record_view(id: &str, record: &SessionRecord, now_ms: u64) -> Value {
    let upstreams: Vec<Value> =
        record.upstream_sessions.keys().map(|u| json!({"upstream": u, "shared": false})).collect();
    json!({
        "sessionId": id,
        "tenant": record.owner.tenant,
        "principal": record.owner.principal,
        "protocolVersion": record.protocol_version,
        "client": client_view(&record.client_info),
        "createdMs": record.created_ms,
        "ageSecs": age_secs(now_ms, record.created_ms),
        "servedHere": false,
        "getStreamAt": record.stream,
        "subscriptions": record.subscriptions.len(),
        "upstreamSessions": upstreams,
    })
}

fn client_view(info: &Value) -> Value {
    json!({"name": info.get("name"), "version": info.get("version")})
}

impl Gateway {
    /// Whether replicas share the store (the view then spans them all).
    pub fn shares_store(&self) -> bool {
        self.shared.tasks.store().shared()
    }

    /// This process's replica id.
    pub fn replica(&self) -> &str {
        &self.shared.replica
    }

    /// The gateway's clock (a test's manual clock, or the system's).
    pub fn clock(&self) -> std::sync::Arc<dyn crate::clock::Clock> {
        self.shared.clock.clone()
    }

    /// Sessions, a page at a time: from the store's records with a shared store (every
    /// replica's), else this process's, sorted by id. `tenant` filters.
    pub async fn admin_sessions(
        &self,
        tenant: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Value>, GatewayError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let now = self.shared.clock.now_ms();
        let store = self.shared.tasks.store();
        if store.shared() {
            let page = store.scan_sessions(cursor, limit).await.map_err(store_error)?;
            let mut items = Vec::new();
            for (id, record) in page.items {
                if tenant.is_some_and(|t| t != record.owner.tenant) {
                    continue;
                }
                items.push(match self.sessions.entry(&id) {
                    Some(_) => self.session_here(&id, now).await.unwrap_or_else(|| record_view(&id, &record, now)),
                    None => record_view(&id, &record, now),
                });
            }
            return Ok(Page { items, next_cursor: page.next_cursor });
        }
        let mut ids: Vec<String> = self
            .sessions
            .entries()
            .into_iter()
            .filter(|(id, e)| cursor.is_none_or(|c| id.as_str() > c) && tenant.is_none_or(|t| *e.identity.tenant == *t))
            .map(|(id, _)| id)
            .collect();
        let more = ids.len() > limit;
        ids.truncate(limit);
        let mut items = Vec::new();
        for id in &ids {
            if let Some(view) = self.session_here(id, now).await {
                items.push(view);
            }
        }
        let next_cursor = if more { ids.last().cloned() } else { None };
        Ok(Page { items, next_cursor })
    }

    /// Sessions per tenant: (served here, at other replicas only), counting at most `max`
    /// records of a shared store; no session actor is asked.
    pub async fn admin_session_counts(
        &self,
        max: usize,
    ) -> Result<std::collections::BTreeMap<String, (usize, usize)>, GatewayError> {
        let mut counts: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
        let store = self.shared.tasks.store();
        if !store.shared() {
            for (tenant, here) in self.sessions.count_by_tenant() {
                counts.insert(tenant.to_string(), (here, 0));
            }
            return Ok(counts);
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        while seen.len() < max {
            let page = store.scan_sessions(cursor.as_deref(), MAX_PAGE).await.map_err(store_error)?;
            for (id, record) in page.items {
                let here = self.sessions.contains(&id);
                if !seen.insert(id) {
                    continue; // a Redis scan may meet a record twice
                }
                let entry = counts.entry(record.owner.tenant).or_default();
                if here {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(counts)
    }

    /// A session this process serves, as the operator sees it.
    async fn session_here(&self, id: &str, now_ms: u64) -> Option<Value> {
        let entry = self.sessions.entry(id)?;
        let described = entry.addr.send(Describe).await.ok()?;
        let processes = described
            .upstream_sessions
            .iter()
            .filter(|u| !u.shared)
            .filter(|u| {
                self.shared
                    .connectors
                    .get(&u.upstream)
                    .is_some_and(|c| c.config().transport == taskgate_config::Transport::Stdio)
            })
            .count();
        let last_seen = entry.last_seen_ms.load(std::sync::atomic::Ordering::Relaxed);
        Some(json!({
            "sessionId": id,
            "tenant": &*entry.identity.tenant,
            "principal": &*entry.identity.principal,
            "protocolVersion": entry.protocol_version,
            "client": client_view(&described.client_info),
            "createdMs": entry.created_ms,
            "ageSecs": age_secs(now_ms, entry.created_ms),
            "idleSecs": age_secs(now_ms, last_seen),
            "servedHere": true,
            "replica": self.shared.replica,
            "getStream": described.get_stream,
            "requests": described.requests,
            "relayed": described.relayed,
            "logLevel": described.log_level,
            "upstreamSessions": described.upstream_sessions,
            "processes": processes,
        }))
    }

    /// Tasks matching `filter`, newest first (a Redis store: in no order), a page at a time,
    /// with the last progress of those that report any.
    pub async fn admin_tasks(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Value>, GatewayError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let now = self.shared.clock.now_ms();
        let page = self.shared.tasks.store().scan_tasks(filter, cursor, limit).await.map_err(store_error)?;
        let board = &self.shared.tasks.board;
        let items = page
            .items
            .iter()
            .map(|r| {
                if r.status.is_terminal() {
                    // Its end may not have been heard of here (a lost event): its progress goes.
                    board.forget(&r.id);
                    return task_view(r, None, now);
                }
                task_view(r, board.of(&r.id), now)
            })
            .collect();
        Ok(Page { items, next_cursor: page.next_cursor })
    }

    /// Every upstream as this replica sees it: revision, health, sessions, processes,
    /// connections and streams.
    pub async fn admin_upstreams(&self) -> Vec<Value> {
        let (_, states) = self.readiness().await;
        let m = &self.shared.metrics;
        let mut names: Vec<&String> = self.shared.connectors.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let connector = &self.shared.connectors[name];
                let config = connector.config();
                let health = states.iter().find(|s| &s.name == name);
                let sessions = |shared: &str| m.upstream_sessions.with_label_values(&[name, shared]).get();
                let (pooled, pooled_idle) = connector.pooled_sessions();
                json!({
                    "name": name,
                    "transport": match config.transport {
                        taskgate_config::Transport::Stdio => "stdio",
                        _ => "http",
                    },
                    "protocolVersion": connector.protocol_version(),
                    "required": config.required,
                    "reachable": health.is_some_and(|h| h.reachable),
                    "error": health.and_then(|h| h.error.clone()),
                    "sessions": {
                        "own": sessions("false"),
                        "shared": sessions("true"),
                        "pooled": pooled,
                        "pooledIdle": pooled_idle,
                    },
                    "processes": connector.running_processes(),
                    "maxProcesses": config.max_processes,
                    "connections": m.upstream_connections.with_label_values(&[name]).get(),
                    "maxConnections": config.max_connections,
                    "streams": m.upstream_streams.with_label_values(&[name]).get(),
                    "replica": self.shared.replica,
                })
            })
            .collect()
    }

    /// The store: its backend, where it is, whether it answers, what it holds and its leases.
    pub async fn admin_store(&self) -> Value {
        let store = self.shared.tasks.store();
        let health = self.store_health().await;
        let info = store.describe().await;
        json!({
            "reachable": health.is_ok(),
            "error": health.err(),
            "store": info.as_ref().ok(),
            "describeError": info.as_ref().err().map(ToString::to_string),
            "replica": self.shared.replica,
            "tasksRunHere": self.shared.tasks.live_actors(),
            "progressReported": self.shared.tasks.board.len(),
        })
    }

    /// Ends a session for an operator: here, in the store and at every replica serving it, as
    /// its client's DELETE would. Its owner is the session's.
    pub async fn admin_end_session(&self, id: &str) -> Result<Value, GatewayError> {
        let owner = match self.sessions.entry(id) {
            Some(entry) => entry.identity.clone(),
            None => {
                let record = self.shared.tasks.store().session(id).await.map_err(store_error)?;
                let record = record.ok_or(GatewayError::SessionNotFound)?;
                Identity { tenant: record.owner.tenant.into(), principal: record.owner.principal.into() }
            }
        };
        self.end_session(id, &owner).await?;
        Ok(json!({"sessionId": id, "tenant": &*owner.tenant, "principal": &*owner.principal, "ended": true}))
    }

    /// Cancels a task for an operator, as its requestor's `tasks/cancel` would (at whichever
    /// replica runs it).
    pub async fn admin_cancel_task(&self, id: &str) -> Result<Value, GatewayError> {
        let record = self.shared.tasks.store().get(id).await.map_err(store_error)?;
        let record = record.ok_or_else(crate::tasks::not_found)?;
        let owner =
            Identity { tenant: record.owner.tenant.clone().into(), principal: record.owner.principal.clone().into() };
        self.shared.tasks.clone().cancel(owner, id.to_owned()).await
    }

    /// Stops every process of a stdio upstream at this replica (and, with a shared store, at
    /// every replica); sessions start new ones at their next request. How many were running
    /// here.
    pub fn admin_restart_upstream(&self, name: &str) -> Result<Value, GatewayError> {
        let connector = self
            .shared
            .connectors
            .get(name)
            .ok_or_else(|| GatewayError::InvalidParams(format!("no upstream {name}")))?;
        if connector.config().transport != taskgate_config::Transport::Stdio {
            return Err(GatewayError::InvalidParams(format!("{name} is an HTTP upstream: it has no processes")));
        }
        let stopped = connector.restart_processes();
        if self.shared.tasks.store().shared() {
            self.shared.tasks.publish(taskgate_store::StoreEvent::UpstreamRestart { upstream: name.to_owned() });
        }
        Ok(json!({"upstream": name, "stopping": stopped, "replica": self.shared.replica}))
    }
}
