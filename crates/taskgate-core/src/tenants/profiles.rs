//! Virtual servers ([`taskgate_config::ProfileConfig`]) as the gateway applies them: which of a
//! tenant's tools an endpoint serves, under which names and descriptions, and whether in
//! search mode.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use taskgate_config::profiles::{FIND_TOOLS, USE_TOOLS};
use taskgate_config::ProfileConfig;

/// One profile, with its renames looked up both ways.
#[derive(Debug)]
pub struct Profile {
    pub config: ProfileConfig,
    /// The name shown → the gateway's name.
    gateway_names: BTreeMap<String, String>,
}

impl Profile {
    pub fn new(config: ProfileConfig) -> Profile {
        let gateway_names = config.rename.iter().map(|(gateway, shown)| (shown.clone(), gateway.clone())).collect();
        Profile { config, gateway_names }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }
}

/// What one endpoint of a tenant serves: its own (`/mcp`, every tool it may call) or a
/// profile's (`/mcp/<name>`), in search mode or not.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    pub profile: Option<Arc<Profile>>,
    pub search: bool,
}

impl Endpoint {
    /// The profile's name, if a profile's.
    pub fn profile_name(&self) -> Option<&str> {
        self.profile.as_deref().map(Profile::name)
    }

    /// Whether it serves the tool the gateway names `name` (the tenant's rules apart): the
    /// profile's globs take it, and no other tool is shown under its name.
    pub fn serves(&self, name: &str) -> bool {
        match &self.profile {
            None => true,
            Some(p) => p.config.serves(name) && p.gateway_names.get(name).is_none_or(|renamed| renamed == name),
        }
    }

    /// The gateway's name of the tool a client names `name` here.
    pub fn gateway_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.profile.as_ref().and_then(|p| p.gateway_names.get(name)).map_or(name, String::as_str)
    }

    /// The name a client sees for the tool the gateway names `name`.
    pub fn shown_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.profile.as_ref().and_then(|p| p.config.rename.get(name)).map_or(name, String::as_str)
    }

    /// A tool object (named as the gateway names it) as this endpoint shows it: renamed, its
    /// description replaced where the profile says.
    pub fn show(&self, tool: &mut Value) {
        let Some(profile) = &self.profile else { return };
        let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else { return };
        if let Some(description) = profile.config.describe.get(&name) {
            tool["description"] = Value::from(description.as_str());
        }
        if let Some(shown) = profile.config.rename.get(&name) {
            tool["name"] = Value::from(shown.as_str());
        }
    }

    /// Whether a request is search mode's `find_tools` here (the front door answers it).
    pub fn finds_tools(&self, method: &str, params: Option<&Value>) -> bool {
        self.search
            && method == taskgate_protocol::mcp::methods::TOOLS_CALL
            && params.and_then(|p| p.get("name")).and_then(Value::as_str) == Some(FIND_TOOLS)
    }

    /// Whether `name` is one of the search meta-tools here.
    pub fn is_meta_tool(&self, name: &str) -> bool {
        self.search && (name == FIND_TOOLS || name == USE_TOOLS)
    }
}

/// The search mode's two meta-tools, as `tools/list` shows them.
pub fn meta_tools() -> [Value; 2] {
    [
        json!({
            "name": FIND_TOOLS,
            "title": "Find tools",
            "description": "Search every tool this server can call for the ones that fit a need, described in plain words. Returns the best matches with their descriptions and input schemas; call one by its name, or activate it with use_tools to have it listed.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What you need to do, in plain words"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": crate::tool_search::MAX_RESULTS, "description": "How many matches to return (default 5)"}
                },
                "required": ["query"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        json!({
            "name": USE_TOOLS,
            "title": "Use tools",
            "description": "Activate tools found with find_tools for this session: they are then listed in tools/list (the list changes) and can be called like any tool.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 64, "description": "The tools' names, as find_tools gave them"}
                },
                "required": ["names"]
            },
            "annotations": {"readOnlyHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
    ]
}

/// The resource identifier of a profile's endpoint (RFC 9728, RFC 8707): the gateway's
/// (`server.public_url`, the tenant's own `/mcp`) with the profile's name after it.
pub fn resource_of(public_url: &str, profile: &str) -> String {
    format!("{}/{profile}", public_url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_serves_its_tools_under_their_shown_names() {
        let config = ProfileConfig {
            name: "code".into(),
            tools: vec!["gh__*".into(), "fs__read".into()],
            rename: [("gh__create_issue".to_string(), "open_issue".to_string())].into(),
            describe: [("fs__read".to_string(), "Read a file of the project".to_string())].into(),
            ..ProfileConfig::default()
        };
        let endpoint = Endpoint { profile: Some(Arc::new(Profile::new(config))), search: false };
        assert!(endpoint.serves("gh__create_issue") && endpoint.serves("fs__read") && !endpoint.serves("fs__write"));
        assert_eq!(endpoint.gateway_name("open_issue"), "gh__create_issue");
        assert_eq!(endpoint.gateway_name("fs__read"), "fs__read");
        assert_eq!(endpoint.shown_name("gh__create_issue"), "open_issue");
        let mut tool = json!({"name": "gh__create_issue", "description": "Create"});
        endpoint.show(&mut tool);
        assert_eq!(tool, json!({"name": "open_issue", "description": "Create"}));
        let mut tool = json!({"name": "fs__read", "description": "upstream's"});
        endpoint.show(&mut tool);
        assert_eq!(tool["description"], "Read a file of the project");
        assert!(!endpoint.is_meta_tool(FIND_TOOLS));
        assert!(Endpoint { search: true, ..Endpoint::default() }.is_meta_tool(USE_TOOLS));
        // A shown name that is another tool's gateway name hides that tool here.
        let config = ProfileConfig {
            name: "x".into(),
            rename: [("gh__a".to_string(), "gh__b".to_string())].into(),
            ..ProfileConfig::default()
        };
        let endpoint = Endpoint { profile: Some(Arc::new(Profile::new(config))), search: false };
        assert!(!endpoint.serves("gh__b") && endpoint.serves("gh__a"));
        assert!(Endpoint::default().serves("anything"));
    }
}
