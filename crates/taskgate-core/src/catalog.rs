//! The federated tool catalog: which upstream owns which tool under which name, in a
//! deterministic order, with opaque cursors. Pure data: the [`crate::router::Router`] fills it.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use taskgate_protocol::mcp::{TaskSupport, ToolView};

/// Where a federated tool comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEntry {
    /// The owning upstream.
    pub upstream: String,
    /// The tool as the upstream lists it (its own name in `tool.name`).
    pub tool: ToolView,
    /// The upstream declares `tasks.requests.tools.call`: its tasks are native.
    pub native: bool,
    /// The upstream lists the tool. One it does not list is called plainly, never run as a
    /// task the gateway makes ([`Catalog::owner_of_unlisted`]).
    pub listed: bool,
}

/// How one upstream's tool names appear to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    /// The upstream's name.
    pub upstream: String,
    /// Whether its tools are prefixed with `<upstream><separator>`.
    pub prefix: bool,
}

/// Two upstreams offering the same client-visible tool name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The contested name.
    pub name: String,
    /// The upstream whose tool is kept (earlier in the configuration).
    pub kept: String,
    /// The upstream whose tool is hidden.
    pub hidden: String,
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool name {:?} is offered by both upstream '{}' and upstream '{}'; '{}' is listed first in the configuration and keeps it (set prefix = true on one of them)",
            self.name, self.kept, self.hidden, self.kept
        )
    }
}

/// The merged catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    separator: String,
    naming: Vec<Naming>,
    /// Each upstream's tools as last listed, and whether it supports tasks natively.
    tools: BTreeMap<String, (Vec<ToolView>, bool)>,
    /// Client-visible name → entry, sorted by name (the listing order).
    /// Shared with the calls in flight: resolving a tool copies a pointer, not its schema.
    entries: BTreeMap<String, Arc<ToolEntry>>,
    collisions: Vec<Collision>,
    /// Each upstream's server capabilities, as declared when it was last listed.
    capabilities: BTreeMap<String, Value>,
    /// Counts the rebuilds: what is derived from the entries (the search index) follows it.
    generation: u64,
}

/// A page of `tools/list`.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Tool objects with client-visible names.
    pub tools: Vec<Value>,
    /// The cursor of the next page, if any.
    pub next_cursor: Option<String>,
}

const CURSOR_PREFIX: &str = "tools:";

impl Catalog {
    /// An empty catalog for upstreams named in configuration order.
    pub fn new(separator: &str, naming: Vec<Naming>) -> Catalog {
        Catalog { separator: separator.to_owned(), naming, ..Catalog::default() }
    }

    /// The client-visible name of an upstream's tool.
    pub fn exposed_name(&self, naming: &Naming, tool: &str) -> String {
        if naming.prefix {
            format!("{}{}{}", naming.upstream, self.separator, tool)
        } else {
            tool.to_owned()
        }
    }

    /// Replaces one upstream's tools and rebuilds the merged view. Returns new collisions.
    pub fn set_tools(&mut self, upstream: &str, tools: Vec<ToolView>, native: bool) -> Vec<Collision> {
        // Listed again as it was: nothing changes (what follows the generation stays).
        if self.tools.get(upstream).is_some_and(|(held, n)| *n == native && *held == tools) {
            return Vec::new();
        }
        self.tools.insert(upstream.to_owned(), (tools, native));
        self.rebuild()
    }

    /// Forgets one upstream's tools (it is unreachable).
    pub fn clear_tools(&mut self, upstream: &str) {
        if self.tools.remove(upstream).is_some() {
            self.rebuild();
        }
    }

    /// Records the capabilities an upstream declared.
    pub fn set_capabilities(&mut self, upstream: &str, capabilities: Value) {
        self.capabilities.insert(upstream.to_owned(), capabilities);
    }

    /// The capabilities an upstream declared, once it has been listed.
    pub fn capabilities(&self, upstream: &str) -> Option<&Value> {
        self.capabilities.get(upstream)
    }

    /// The upstreams in configuration order, with whether their names are prefixed.
    pub fn naming(&self) -> &[Naming] {
        &self.naming
    }

    /// The separator between an upstream's name and its tools' and prompts' names.
    pub fn separator(&self) -> &str {
        &self.separator
    }

    /// True once the upstream's tools have been listed.
    pub fn has_tools(&self, upstream: &str) -> bool {
        self.tools.contains_key(upstream)
    }

    fn rebuild(&mut self) -> Vec<Collision> {
        let before = std::mem::take(&mut self.collisions);
        self.generation += 1;
        self.entries.clear();
        for naming in &self.naming {
            let Some((tools, native)) = self.tools.get(&naming.upstream) else { continue };
            for tool in tools {
                let name = self.exposed_name(naming, &tool.name);
                if let Some(existing) = self.entries.get(&name) {
                    if existing.upstream != naming.upstream {
                        self.collisions.push(Collision {
                            name,
                            kept: existing.upstream.clone(),
                            hidden: naming.upstream.clone(),
                        });
                    }
                    continue;
                }
                let entry =
                    ToolEntry { upstream: naming.upstream.clone(), tool: tool.clone(), native: *native, listed: true };
                self.entries.insert(name, Arc::new(entry));
            }
        }
        self.collisions.iter().filter(|c| !before.contains(c)).cloned().collect()
    }

    /// Which rebuild of the entries this is.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every entry by its client-visible name, in listing order.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &Arc<ToolEntry>)> {
        self.entries.iter()
    }

    /// Current name collisions.
    pub fn collisions(&self) -> &[Collision] {
        &self.collisions
    }

    /// Looks up a client-visible tool name.
    pub fn resolve(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.entries.get(name)
    }

    /// The tools of prefixed upstreams whose own name is `name`, among those `visible`: what an
    /// MCP App's View means when it calls a tool of its server by the name the server gave it.
    pub fn by_original_name(
        &self,
        name: &str,
        visible: impl Fn(&str, &ToolEntry) -> bool,
    ) -> Vec<(String, Arc<ToolEntry>)> {
        self.entries
            .iter()
            .filter(|(exposed, e)| e.tool.name == name && exposed.as_str() != name && visible(exposed, e))
            .map(|(exposed, e)| (exposed.clone(), e.clone()))
            .collect()
    }

    /// The upstream a prefixed name points at, even when its tools are not listed (it is down).
    pub fn upstream_by_prefix(&self, name: &str) -> Option<&str> {
        self.naming
            .iter()
            .filter(|n| n.prefix)
            .find(|n| name.strip_prefix(n.upstream.as_str()).is_some_and(|rest| rest.starts_with(&self.separator)))
            .map(|n| n.upstream.as_str())
    }

    /// Where a call of a tool that no listing names goes, and its own name there: the upstream
    /// its prefix names, or the one unprefixed upstream `may` lets it reach (`None` when that
    /// is not exactly one). A server may serve tools it does not list (diagnostic hooks, tools
    /// made on demand); called directly it answers them, and through the gateway it does too,
    /// or says it does not know them.
    pub fn owner_of_unlisted(&self, name: &str, may: impl Fn(&str) -> bool) -> Option<(String, String)> {
        if let Some(upstream) = self.upstream_by_prefix(name) {
            let own = &name[upstream.len() + self.separator.len()..];
            return may(upstream).then(|| (upstream.to_owned(), own.to_owned()));
        }
        let mut unprefixed = self.naming.iter().filter(|n| !n.prefix && may(&n.upstream));
        match (unprefixed.next(), unprefixed.next()) {
            (Some(only), None) => Some((only.upstream.clone(), name.to_owned())),
            _ => None,
        }
    }

    /// Every tool (client-visible name, upstream) a call of `name` could reach in any
    /// catalog, among the upstreams `sees` lets through; what a call is held to (its scopes).
    /// This catalog answers for a name it lists, or lists under a prefixed upstream's own name
    /// (an MCP App View's call); a name it does not know may be a tool that only a catalog of
    /// other client capabilities lists, so it reaches every unprefixed upstream, the upstream
    /// its prefix names, and each prefixed upstream's tool of that own name (failing closed).
    pub fn reachable(&self, name: &str, sees: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        if let Some(entry) = self.resolve(name).filter(|e| sees(&e.upstream)) {
            return vec![(name.to_owned(), entry.upstream.clone())];
        }
        let by_prefix = self.upstream_by_prefix(name).filter(|u| sees(u)).map(|u| (name.to_owned(), u.to_owned()));
        let mut found: Vec<(String, String)> = self
            .by_original_name(name, |_, e| sees(&e.upstream))
            .into_iter()
            .map(|(exposed, e)| (exposed, e.upstream.clone()))
            .collect();
        if found.is_empty() {
            for naming in self.naming.iter().filter(|n| sees(&n.upstream)) {
                let exposed = if naming.prefix {
                    format!("{}{}{name}", naming.upstream, self.separator)
                } else {
                    name.to_owned()
                };
                found.push((exposed, naming.upstream.clone()));
            }
        }
        found.extend(by_prefix);
        found
    }

    /// Number of listed tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no tool is listed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One page, starting after the cursor's tool. Cursors name a position in the sorted
    /// listing, so they stay valid (stable) when tools are added or removed meanwhile.
    pub fn page(
        &self,
        cursor: Option<&str>,
        size: usize,
        visible: impl Fn(&str, &ToolEntry) -> bool,
        task_support: impl Fn(&ToolEntry) -> TaskSupport,
    ) -> Result<Page, String> {
        let start = match cursor {
            None => None,
            Some(c) => Some(
                decode_cursor(c).ok_or_else(|| format!("Invalid cursor: {c:?} is not a cursor this gateway issued"))?,
            ),
        };
        let all: Box<dyn Iterator<Item = (&String, &Arc<ToolEntry>)>> = match &start {
            None => Box::new(self.entries.iter()),
            Some(after) => Box::new(
                self.entries.range::<String, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            ),
        };
        // Only the requestor's tenant's upstreams: what it cannot see is not there for it.
        let mut iter = all.filter(|(name, entry)| visible(name, entry));
        let mut tools = Vec::with_capacity(size.min(self.entries.len()));
        let mut last = None;
        for (name, entry) in iter.by_ref().take(size) {
            let mut tool = entry.tool.renamed(name);
            let support = task_support(entry);
            if support != entry.tool.task_support || tool.get("execution").is_some() {
                tool["execution"]["taskSupport"] = Value::from(support.as_str());
            }
            tools.push(tool);
            last = Some(name.clone());
        }
        let next_cursor = match (iter.next(), last) {
            (Some(_), Some(last)) => Some(encode_cursor(&last)),
            _ => None,
        };
        Ok(Page { tools, next_cursor })
    }
}

fn encode_cursor(after: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_PREFIX}{after}"))
}

fn decode_cursor(cursor: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    String::from_utf8(bytes).ok()?.strip_prefix(CURSOR_PREFIX).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(names: &[&str]) -> Vec<ToolView> {
        names
            .iter()
            .map(|n| ToolView::from_value(json!({"name": n, "inputSchema": {"type": "object"}})).unwrap())
            .collect()
    }

    fn naming(list: &[(&str, bool)]) -> Vec<Naming> {
        list.iter().map(|(u, p)| Naming { upstream: u.to_string(), prefix: *p }).collect()
    }

    fn native(e: &ToolEntry) -> TaskSupport {
        e.tool.task_support
    }

    fn names(page: &Page) -> Vec<String> {
        page.tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn prefixes_and_sorts_deterministically() {
        let mut c = Catalog::new("__", naming(&[("b", true), ("a", true), ("plain", false)]));
        c.set_tools("b", tools(&["z", "y"]), false);
        c.set_tools("a", tools(&["x"]), false);
        c.set_tools("plain", tools(&["echo"]), false);
        let page = c.page(None, 10, |_, _| true, native).unwrap();
        assert_eq!(names(&page), ["a__x", "b__y", "b__z", "echo"]);
        assert_eq!(page.next_cursor, None);
        let entry = c.resolve("b__y").unwrap();
        assert_eq!((entry.upstream.as_str(), entry.tool.name.as_str()), ("b", "y"));
        assert_eq!(c.upstream_by_prefix("a__gone"), Some("a"));
        assert_eq!(c.upstream_by_prefix("plain__x"), None);
    }

    #[test]
    fn finds_tools_by_their_upstreams_own_names() {
        let mut c = Catalog::new("__", naming(&[("a", true), ("b", true), ("plain", false)]));
        c.set_tools("a", tools(&["refresh", "only-a"]), false);
        c.set_tools("b", tools(&["refresh"]), false);
        c.set_tools("plain", tools(&["echo"]), false);
        let exposed = |found: Vec<(String, Arc<ToolEntry>)>| found.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(exposed(c.by_original_name("only-a", |_, _| true)), ["a__only-a"]);
        assert_eq!(exposed(c.by_original_name("refresh", |_, _| true)), ["a__refresh", "b__refresh"]);
        assert_eq!(exposed(c.by_original_name("refresh", |_, e| e.upstream == "b")), ["b__refresh"]);
        // What a call can reach: the tool listed, else a prefixed upstream's tool of that own
        // name, else (unknown here, perhaps listed only to other clients) every candidate.
        assert_eq!(c.reachable("a__only-a", |_| true), [("a__only-a".to_owned(), "a".to_owned())]);
        assert_eq!(c.reachable("only-a", |_| true), [("a__only-a".to_owned(), "a".to_owned())]);
        let unknown = c.reachable("ghost", |u| u != "b");
        assert_eq!(unknown, [("a__ghost".to_owned(), "a".to_owned()), ("ghost".to_owned(), "plain".to_owned())]);
        let prefixed = c.reachable("b__ghost", |_| true);
        assert!(prefixed.contains(&("b__ghost".to_owned(), "b".to_owned())), "{prefixed:?}");
        // A name that is already client-visible is not its own alias; an unknown one has none.
        assert!(c.by_original_name("echo", |_, _| true).is_empty());
        assert!(c.by_original_name("nothing", |_, _| true).is_empty());
    }

    #[test]
    fn pages_show_only_visible_upstreams_and_cursors_skip_the_rest() {
        let mut c = Catalog::new("__", naming(&[("a", true), ("b", true)]));
        c.set_tools("a", tools(&["1", "2", "3"]), false);
        c.set_tools("b", tools(&["1", "2", "3"]), false);
        let only_b = |_: &str, e: &ToolEntry| e.upstream == "b";
        let first = c.page(None, 2, only_b, native).unwrap();
        assert_eq!(names(&first), ["b__1", "b__2"]);
        let second = c.page(first.next_cursor.as_deref(), 2, only_b, native).unwrap();
        assert_eq!((names(&second), second.next_cursor), (vec!["b__3".to_string()], None));
    }

    #[test]
    fn pages_cover_everything_once_and_survive_changes() {
        let mut c = Catalog::new(".", naming(&[("u", true)]));
        let all: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
        c.set_tools("u", tools(&all.iter().map(String::as_str).collect::<Vec<_>>()), false);
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = c.page(cursor.as_deref(), 10, |_, _| true, native).unwrap();
            seen.extend(names(&page));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), 25);
        let first = c.page(None, 10, |_, _| true, native).unwrap();
        // Removing a tool already listed does not shift the next page.
        c.set_tools("u", tools(&all[1..].iter().map(String::as_str).collect::<Vec<_>>()), false);
        let second = c.page(first.next_cursor.as_deref(), 10, |_, _| true, native).unwrap();
        assert_eq!(names(&second)[0], "u.t10");
    }

    #[test]
    fn bad_cursors_are_rejected() {
        let c = Catalog::new("__", naming(&[("u", true)]));
        for bad in ["", "!!", "bm90LWEtY3Vyc29y"] {
            assert!(c.page(Some(bad), 10, |_, _| true, native).is_err(), "{bad}");
        }
    }

    #[test]
    fn collisions_name_both_upstreams_and_keep_the_first() {
        let mut c = Catalog::new("__", naming(&[("one", false), ("two", false)]));
        c.set_tools("one", tools(&["search"]), false);
        let new = c.set_tools("two", tools(&["search", "other"]), false);
        assert_eq!(new, vec![Collision { name: "search".into(), kept: "one".into(), hidden: "two".into() }]);
        assert!(new[0].to_string().contains("'one'") && new[0].to_string().contains("'two'"));
        assert_eq!(c.resolve("search").unwrap().upstream, "one");
        assert_eq!(c.len(), 2);
        // Reported once, not again on an unrelated refresh.
        assert!(c.set_tools("two", tools(&["search", "other"]), false).is_empty());
        c.clear_tools("one");
        assert!(c.collisions().is_empty());
        assert_eq!(c.resolve("search").unwrap().upstream, "two");
    }

    #[test]
    fn task_support_is_written_when_it_differs() {
        let mut c = Catalog::new("__", naming(&[("u", true)]));
        c.set_tools("u", tools(&["t"]), false);
        let page = c.page(None, 10, |_, _| true, |_| TaskSupport::Optional).unwrap();
        assert_eq!(page.tools[0]["execution"], json!({"taskSupport": "optional"}));
        let page = c.page(None, 10, |_, _| true, native).unwrap();
        assert!(page.tools[0].get("execution").is_none());
    }
}
