//! The upstream sessions a client session holds, by upstream, and the state it keeps at them
//! (a log level, resource subscriptions), which makes them its own.

use foldhash::{HashMap, HashMapExt};
use taskgate_upstream::UpstreamSession;

pub(super) struct Upstreams {
    sessions: HashMap<String, UpstreamSession>,
    /// It has set a log level or subscribed to a resource (state an upstream keeps per
    /// session): its upstream sessions are its own, never shared.
    private: bool,
    /// The level the client set with `logging/setLevel`, for upstream sessions opened later.
    log_level: Option<String>,
    /// It subscribed to a resource: state its upstream session keeps, so it keeps that session.
    subscribed: bool,
}

impl Upstreams {
    pub fn new() -> Upstreams {
        Upstreams { sessions: HashMap::new(), private: false, log_level: None, subscribed: false }
    }

    pub fn get(&self, upstream: &str) -> Option<&UpstreamSession> {
        self.sessions.get(upstream)
    }

    /// The session held for `upstream`, to use apart from this table.
    pub fn session(&self, upstream: &str) -> Option<UpstreamSession> {
        self.sessions.get(upstream).cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &UpstreamSession)> {
        self.sessions.iter()
    }

    pub fn values(&self) -> impl Iterator<Item = &UpstreamSession> {
        self.sessions.values()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Whether it holds a session pooled among client sessions.
    pub fn holds_pooled(&self) -> bool {
        self.sessions.values().any(UpstreamSession::is_pooled)
    }

    pub fn insert(&mut self, upstream: &str, session: UpstreamSession) {
        self.sessions.insert(upstream.to_owned(), session);
    }

    /// Lets `upstream`'s session go.
    pub fn remove(&mut self, upstream: &str) -> Option<UpstreamSession> {
        self.sessions.remove(upstream)
    }

    /// Lets every session go: each ends when no task still runs on it.
    pub fn clear(&mut self) {
        self.sessions = HashMap::new();
    }

    /// Lets every session go, handing them over.
    pub fn drain(&mut self) -> Vec<UpstreamSession> {
        self.sessions.drain().map(|(_, s)| s).collect()
    }

    /// Keeps the sessions `keep` says to keep.
    pub fn retain(&mut self, keep: impl FnMut(&String, &mut UpstreamSession) -> bool) {
        self.sessions.retain(keep);
    }

    /// Whether its upstream sessions are its own (it keeps state at them).
    pub fn is_private(&self) -> bool {
        self.private
    }

    /// The session is about to keep state at its upstreams: its shared upstream sessions are
    /// let go (calls in flight on them finish there), their upstreams named to open again as
    /// its own. `None` when they already are.
    pub fn go_private(&mut self) -> Option<Vec<String>> {
        if self.private {
            return None;
        }
        self.private = true;
        let shared: Vec<String> =
            self.sessions.iter().filter(|(_, s)| s.is_shared()).map(|(name, _)| name.clone()).collect();
        for name in &shared {
            self.sessions.remove(name);
        }
        Some(shared)
    }

    /// The level the client set, if any.
    pub fn log_level(&self) -> Option<&str> {
        self.log_level.as_deref()
    }

    /// The client set a level (the caller went private first).
    pub fn set_level(&mut self, level: Option<String>) {
        self.private |= level.is_some();
        self.log_level = level;
    }

    /// Whether it subscribed to a resource.
    pub fn subscribed(&self) -> bool {
        self.subscribed
    }

    /// It subscribed to a resource (the caller went private first).
    pub fn subscribe(&mut self) {
        self.subscribed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_kept_at_upstreams_makes_them_its_own_once() {
        let mut upstreams = Upstreams::new();
        assert!(!upstreams.is_private());
        assert_eq!(upstreams.go_private(), Some(vec![]));
        assert!(upstreams.is_private());
        assert_eq!(upstreams.go_private(), None, "once");
        upstreams.subscribe();
        assert!(upstreams.subscribed());
        let mut restored = Upstreams::new();
        restored.set_level(Some("debug".into()));
        assert!(restored.is_private(), "a level restored from the record is state kept upstream");
        assert_eq!(restored.log_level(), Some("debug"));
        restored.set_level(None);
        assert!(restored.is_private(), "private stays");
    }
}
