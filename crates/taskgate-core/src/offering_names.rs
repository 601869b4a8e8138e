//! Pure naming and paging for what upstreams offer besides tools: resources, resource
//! templates and prompts.
//!
//! - Prompt names follow tool names: `<upstream><separator><name>` for a prefixed upstream,
//!   bare otherwise.
//! - Resource URIs (and URI templates) of a prefixed upstream become
//!   `taskgate://<upstream>/<original URI>`: a valid URI of its own scheme whatever the
//!   original's scheme, unique across upstreams, and reversed by cutting the prefix (a template
//!   stays a template with the same variables, so its expansions reverse too). An unprefixed
//!   upstream's URIs pass unchanged.
//! - MCP Apps' UI resources keep their scheme (apps.mdx, UI Resource Format: "URI MUST start
//!   with `ui://` scheme"): a prefixed upstream's `ui://<rest>` becomes `ui://<upstream>/<rest>`,
//!   and the URIs its tools name in `_meta.ui.resourceUri` (and the deprecated
//!   `_meta["ui/resourceUri"]`) are rewritten the same way, so the URI a tool names is the one a
//!   read through the gateway serves.
//! - A name or URI that no prefix claims is tried on the unprefixed upstreams, in configuration
//!   order, until one knows it.
//! - Listings are federated one upstream page at a time: the gateway's cursor names the
//!   upstream and that upstream's own cursor.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

use crate::catalog::Naming;

/// The scheme of namespaced resource URIs.
pub const URI_SCHEME: &str = "taskgate://";

/// The scheme of MCP Apps' UI resources, kept through the gateway.
pub const UI_SCHEME: &str = "ui://";

/// The client-visible URI (or URI template) of an upstream's resource.
pub fn expose_uri(naming: &Naming, uri: &str) -> String {
    if !naming.prefix {
        uri.to_owned()
    } else if let Some(rest) = uri.strip_prefix(UI_SCHEME) {
        format!("{UI_SCHEME}{}/{rest}", naming.upstream)
    } else {
        format!("{URI_SCHEME}{}/{uri}", naming.upstream)
    }
}

/// Rewrites the UI resource a tool names (`_meta.ui.resourceUri`, and the deprecated
/// `_meta["ui/resourceUri"]`) to its client-visible URI.
pub fn expose_tool_ui(naming: &Naming, tool: &mut serde_json::Map<String, Value>) {
    if !naming.prefix {
        return;
    }
    let Some(Value::Object(meta)) = tool.get_mut("_meta") else { return };
    if let Some(Value::String(uri)) = meta.get_mut("ui/resourceUri") {
        *uri = expose_uri(naming, uri);
    }
    if let Some(Value::String(uri)) = meta.get_mut("ui").and_then(|ui| ui.get_mut("resourceUri")) {
        *uri = expose_uri(naming, uri);
    }
}

/// Whether a tool is for MCP Apps only (apps.mdx, Visibility: `_meta.ui.visibility` without
/// `"model"`; absent, it is `["model", "app"]`).
pub fn app_only(tool: &serde_json::Map<String, Value>) -> bool {
    match tool.get("_meta").and_then(|m| m.get("ui")).and_then(|ui| ui.get("visibility")) {
        Some(Value::Array(audiences)) => !audiences.iter().any(|a| a == "model"),
        _ => false,
    }
}

/// The client-visible name of an upstream's prompt.
pub fn expose_name(naming: &Naming, separator: &str, name: &str) -> String {
    if naming.prefix {
        format!("{}{separator}{name}", naming.upstream)
    } else {
        name.to_owned()
    }
}

/// The upstreams a client-visible URI may belong to, each with the URI it has there, in the
/// order to try them. Empty when the URI names no upstream the caller may use.
pub fn route_uri(naming: &[Naming], uri: &str) -> Vec<(String, String)> {
    if let Some(rest) = uri.strip_prefix(URI_SCHEME) {
        if let Some((upstream, original)) = rest.split_once('/') {
            if let Some(n) = naming.iter().find(|n| n.prefix && n.upstream == upstream) {
                return vec![(n.upstream.clone(), original.to_owned())];
            }
        }
        return Vec::new();
    }
    // A UI resource whose authority names a prefixed upstream is that upstream's, and only
    // its: reads, subscriptions and completions never fall through to another upstream's
    // app. An unprefixed upstream's own `ui://` URIs pass unchanged.
    let prefixed = uri.strip_prefix(UI_SCHEME).and_then(|rest| {
        let (upstream, original) = rest.split_once('/')?;
        let n = naming.iter().find(|n| n.prefix && n.upstream == upstream)?;
        Some((n.upstream.clone(), format!("{UI_SCHEME}{original}")))
    });
    if let Some(route) = prefixed {
        return vec![route];
    }
    naming.iter().filter(|n| !n.prefix).map(|n| (n.upstream.clone(), uri.to_owned())).collect()
}

/// The upstreams a client-visible prompt name may belong to, each with the name it has there.
pub fn route_name(naming: &[Naming], separator: &str, name: &str) -> Vec<(String, String)> {
    let prefixed = naming.iter().filter(|n| n.prefix).find_map(|n| {
        let rest = name.strip_prefix(n.upstream.as_str())?.strip_prefix(separator)?;
        Some((n.upstream.clone(), rest.to_owned()))
    });
    prefixed
        .into_iter()
        .chain(naming.iter().filter(|n| !n.prefix).map(|n| (n.upstream.clone(), name.to_owned())))
        .collect()
}

/// Rewrites every resource URI in a result to its client-visible form: `uri` of resource
/// contents, embedded resources and resource links, wherever they appear.
pub fn expose_uris_in(naming: &Naming, value: &mut Value) {
    if !naming.prefix {
        return;
    }
    match value {
        Value::Object(map) => {
            let is_resource = map.contains_key("text")
                || map.contains_key("blob")
                || map.get("type").is_some_and(|t| t == "resource_link");
            if is_resource {
                if let Some(Value::String(uri)) = map.get_mut("uri") {
                    *uri = expose_uri(naming, uri);
                }
            }
            for (key, v) in map.iter_mut() {
                if key != "_meta" {
                    expose_uris_in(naming, v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| expose_uris_in(naming, v)),
        _ => {}
    }
}

/// A position in a federated listing: the upstream to ask next and its own cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub upstream: String,
    pub cursor: Option<String>,
    /// How many entries of that upstream page the client has had already.
    pub skip: usize,
}

impl ListCursor {
    /// An opaque cursor for `kind` (`resources`, `templates`, `prompts`).
    pub fn encode(&self, kind: &str) -> String {
        let inner = match self.skip {
            0 => serde_json::json!([self.upstream, self.cursor]),
            skip => serde_json::json!([self.upstream, self.cursor, skip]),
        };
        URL_SAFE_NO_PAD.encode(format!("{kind}:{inner}"))
    }

    /// A short cursor standing for one the session keeps (`n`), for when the upstream's own
    /// cursor would make this one longer than a client may send back.
    pub fn encode_stashed(kind: &str, n: u64) -> String {
        URL_SAFE_NO_PAD.encode(format!("{kind}:{n}"))
    }

    /// Reads a cursor this gateway issued for `kind`.
    pub fn decode(kind: &str, cursor: &str) -> Option<CursorRef> {
        let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
        let inner: Value = serde_json::from_str(text.strip_prefix(kind)?.strip_prefix(':')?).ok()?;
        if let Some(n) = inner.as_u64() {
            return Some(CursorRef::Stashed(n));
        }
        let upstream = inner.get(0)?.as_str()?.to_owned();
        let cursor = match inner.get(1)? {
            Value::Null => None,
            Value::String(c) => Some(c.clone()),
            _ => return None,
        };
        let skip = match inner.get(2) {
            None => 0,
            Some(skip) => usize::try_from(skip.as_u64()?).ok()?,
        };
        Some(CursorRef::At(ListCursor { upstream, cursor, skip }))
    }
}

/// Long listing positions a session keeps, standing for them with short cursors: the most
/// recent [`Stash::MAX`], by number (a client that sends back a cursor of one forgotten gets
/// -32602 and lists again).
#[derive(Debug)]
pub struct Stash {
    kept: std::collections::VecDeque<(u64, ListCursor)>,
    next: u64,
}

impl Default for Stash {
    fn default() -> Stash {
        Stash { kept: Default::default(), next: 1 }
    }
}

impl Stash {
    /// Positions kept at most per session.
    pub const MAX: usize = 64;

    /// Keeps `cursor` (the oldest kept goes once there are [`Stash::MAX`]): its number.
    pub fn keep(&mut self, cursor: ListCursor) -> u64 {
        let n = self.next;
        self.next += 1;
        if self.kept.len() >= Stash::MAX {
            self.kept.pop_front();
        }
        self.kept.push_back((n, cursor));
        n
    }

    /// The position kept as number `n`, if still kept.
    pub fn get(&self, n: u64) -> Option<&ListCursor> {
        self.kept.iter().find(|(k, _)| *k == n).map(|(_, c)| c)
    }
}

/// What a client's cursor stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorRef {
    /// The position itself.
    At(ListCursor),
    /// A position the session keeps under this number.
    Stashed(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stash_keeps_the_most_recent_positions() {
        let mut stash = Stash::default();
        let at = |n: usize| ListCursor { upstream: format!("u{n}"), cursor: None, skip: 0 };
        let first = stash.keep(at(0));
        assert_eq!(stash.get(first), Some(&at(0)));
        let numbers: Vec<u64> = (1..=Stash::MAX).map(|n| stash.keep(at(n))).collect();
        assert_eq!(stash.get(first), None, "the oldest went");
        assert_eq!(stash.get(numbers[0]), Some(&at(1)));
        assert_eq!(stash.get(*numbers.last().unwrap()), Some(&at(Stash::MAX)));
        assert_eq!(stash.get(u64::MAX), None);
    }
    use serde_json::json;

    fn naming() -> Vec<Naming> {
        vec![
            Naming { upstream: "docs".into(), prefix: true },
            Naming { upstream: "plain".into(), prefix: false },
            Naming { upstream: "more".into(), prefix: false },
        ]
    }

    #[test]
    fn uris_are_namespaced_reversibly() {
        let n = &naming();
        for uri in ["file:///etc/hosts", "https://x.test/a?b=c#d", "demo://echo/{text}", "weird"] {
            let exposed = expose_uri(&n[0], uri);
            assert!(exposed.starts_with("taskgate://docs/"), "{exposed}");
            assert_eq!(route_uri(n, &exposed), vec![("docs".to_string(), uri.to_string())]);
        }
        // A template's expansion reverses too.
        let expanded = expose_uri(&n[0], "demo://echo/{text}").replace("{text}", "hi");
        assert_eq!(route_uri(n, &expanded), vec![("docs".to_string(), "demo://echo/hi".to_string())]);
        // Unprefixed upstreams keep their URIs and are tried in order.
        assert_eq!(expose_uri(&n[1], "file:///a"), "file:///a");
        assert_eq!(
            route_uri(n, "file:///a"),
            vec![("plain".to_string(), "file:///a".to_string()), ("more".to_string(), "file:///a".to_string())]
        );
        // A namespaced URI of an unknown or unprefixed upstream belongs to nobody.
        assert!(route_uri(n, "taskgate://nobody/file:///a").is_empty());
        assert!(route_uri(n, "taskgate://plain/file:///a").is_empty());
        assert!(route_uri(n, "taskgate://docs").is_empty());
    }

    #[test]
    fn ui_resources_keep_their_scheme_and_tools_name_them_as_exposed() {
        let n = &naming();
        let exposed = expose_uri(&n[0], "ui://get-time/mcp-app.html");
        assert_eq!(exposed, "ui://docs/get-time/mcp-app.html");
        // Only the upstream it names: never another upstream's app.
        assert_eq!(route_uri(n, &exposed), vec![("docs".to_string(), "ui://get-time/mcp-app.html".to_string())]);
        // Unprefixed upstreams' own `ui://` URIs pass unchanged and are tried in order.
        assert_eq!(expose_uri(&n[1], "ui://get-time/mcp-app.html"), "ui://get-time/mcp-app.html");
        assert_eq!(route_uri(n, "ui://get-time/mcp-app.html")[0].1, "ui://get-time/mcp-app.html");
        assert_eq!(route_uri(n, "ui://get-time/mcp-app.html").len(), 2);

        let mut tool = json!({"name": "t", "_meta": {"ui": {"resourceUri": "ui://w/a", "visibility": ["app"]},
            "ui/resourceUri": "ui://w/a"}});
        expose_tool_ui(&n[0], tool.as_object_mut().unwrap());
        assert_eq!(tool["_meta"]["ui"]["resourceUri"], "ui://docs/w/a");
        assert_eq!(tool["_meta"]["ui/resourceUri"], "ui://docs/w/a");
        assert_eq!(tool["_meta"]["ui"]["visibility"], json!(["app"]));
        let mut plain = tool.clone();
        expose_tool_ui(&n[1], plain.as_object_mut().unwrap());
        assert_eq!(plain, tool);
    }

    #[test]
    fn app_only_tools_are_those_the_model_does_not_see() {
        let tool = |meta: Value| json!({"name": "t", "_meta": meta}).as_object().unwrap().clone();
        assert!(app_only(&tool(json!({"ui": {"visibility": ["app"]}}))));
        assert!(app_only(&tool(json!({"ui": {"visibility": []}}))));
        assert!(!app_only(&tool(json!({"ui": {"visibility": ["model", "app"]}}))));
        assert!(!app_only(&tool(json!({"ui": {"visibility": ["model"]}}))));
        // Absent, visibility is ["model", "app"].
        assert!(!app_only(&tool(json!({"ui": {"resourceUri": "ui://a/b"}}))));
        assert!(!app_only(&tool(json!({"ui": {"visibility": "app"}}))));
        assert!(!app_only(&tool(json!(null))));
    }

    #[test]
    fn prompt_names_follow_tool_names() {
        let n = &naming();
        assert_eq!(expose_name(&n[0], "__", "greet"), "docs__greet");
        assert_eq!(expose_name(&n[1], "__", "greet"), "greet");
        assert_eq!(route_name(n, "__", "docs__greet")[0], ("docs".to_string(), "greet".to_string()));
        assert_eq!(route_name(n, "__", "greet").len(), 2);
        assert_eq!(route_name(n, "__", "greet")[0], ("plain".to_string(), "greet".to_string()));
    }

    #[test]
    fn uris_in_results_are_exposed() {
        let n = &naming();
        let mut read =
            json!({"contents": [{"uri": "demo://readme", "text": "x"}, {"uri": "demo://b", "blob": "AA=="}]});
        expose_uris_in(&n[0], &mut read);
        assert_eq!(read["contents"][0]["uri"], "taskgate://docs/demo://readme");
        assert_eq!(read["contents"][1]["uri"], "taskgate://docs/demo://b");
        let mut prompt = json!({"messages": [{"role": "user", "content": {"type": "resource", "resource": {"uri": "demo://r", "text": "t"}}},
            {"role": "user", "content": {"type": "resource_link", "uri": "demo://l", "name": "l"}}]});
        expose_uris_in(&n[0], &mut prompt);
        assert_eq!(prompt["messages"][0]["content"]["resource"]["uri"], "taskgate://docs/demo://r");
        assert_eq!(prompt["messages"][1]["content"]["uri"], "taskgate://docs/demo://l");
        let mut plain = read.clone();
        expose_uris_in(&n[1], &mut plain);
        assert_eq!(plain, read);
    }

    #[test]
    fn cursors_round_trip_and_are_kind_bound() {
        let c = ListCursor { upstream: "docs".into(), cursor: Some("page-2".into()), skip: 0 };
        assert_eq!(ListCursor::decode("resources", &c.encode("resources")), Some(CursorRef::At(c.clone())));
        assert_eq!(ListCursor::decode("prompts", &c.encode("resources")), None);
        let start = ListCursor { upstream: "more".into(), cursor: None, skip: 0 };
        assert_eq!(ListCursor::decode("prompts", &start.encode("prompts")), Some(CursorRef::At(start)));
        let mid = ListCursor { upstream: "docs".into(), cursor: None, skip: 40 };
        assert_eq!(ListCursor::decode("resources", &mid.encode("resources")), Some(CursorRef::At(mid)));
        let stashed = ListCursor::encode_stashed("templates", 7);
        assert_eq!(ListCursor::decode("templates", &stashed), Some(CursorRef::Stashed(7)));
        assert_eq!(ListCursor::decode("resources", &stashed), None);
        for bad in ["", "!!", "cHJvbXB0czpbMV0"] {
            assert_eq!(ListCursor::decode("prompts", bad), None, "{bad}");
        }
    }
}
