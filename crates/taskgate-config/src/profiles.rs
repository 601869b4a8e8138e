//! `[[tenant.profile]]`: virtual servers. A profile is a named set of a tenant's tools (globs
//! over the gateway's names, optionally renamed and described anew), served at its own endpoint
//! (`/mcp/<name>`) with its own identity; in search mode its `tools/list` holds tool-search
//! meta-tools and the tools a session activated.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::patterns::glob;

/// The meta-tool that searches the catalog (search mode).
pub const FIND_TOOLS: &str = "find_tools";
/// The meta-tool that activates tools for the session (search mode).
pub const USE_TOOLS: &str = "use_tools";

/// One virtual server of a tenant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// Its name: the endpoint is `/mcp/<name>` (letters, digits, `-` and `_`, at most 64).
    pub name: String,
    /// Shown as `serverInfo.title` (absent: "taskgate: <name>").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Sent as the `instructions` of `initialize` (and `server/discover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The tools it serves, by the gateway's names (globs); empty: every tool the tenant may
    /// call. The tenant's own rules (`[tenant.tools]`) apply first.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tools shown under another name (the gateway's name → the name shown); a call of the
    /// shown name reaches the tool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rename: BTreeMap<String, String>,
    /// Descriptions shown in place of the upstream's (the gateway's name → description).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub describe: BTreeMap<String, String>,
    /// Search mode: `tools/list` holds `find_tools` and `use_tools` and the tools the session
    /// activated; every tool of the profile can still be called by name.
    #[serde(default)]
    pub search: bool,
}

impl ProfileConfig {
    /// Whether the profile serves the tool the gateway names `name`.
    pub fn serves(&self, name: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|g| glob(g, name))
    }
}

/// Whether `name` can be a profile's name (a path segment as it is).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

/// Whether `name` can be a tool's name (SEP-986: 1 to 128 of `A-Z a-z 0-9 _ - .`).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// The problems of a tenant's profiles: (key under the tenant, message).
pub(crate) fn problems(profiles: &[ProfileConfig]) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, p) in profiles.iter().enumerate() {
        let at = |key: &str| format!("profile[{i}] ({:?}){key}", p.name);
        if !valid_name(&p.name) {
            problems.push((
                at(".name"),
                "must be 1 to 64 letters, digits, '-' or '_', starting with a letter or digit".into(),
            ));
        }
        if !names.insert(p.name.as_str()) {
            problems.push((at(".name"), "another profile of the tenant has this name".into()));
        }
        let mut shown = std::collections::BTreeSet::new();
        for (from, to) in &p.rename {
            if !valid_tool_name(to) {
                problems.push((
                    at(&format!(".rename.{from:?}")),
                    "a tool name is 1 to 128 letters, digits, '_', '-' or '.'".into(),
                ));
            }
            if !shown.insert(to.as_str()) {
                problems.push((at(&format!(".rename.{from:?}")), format!("another tool is shown as {to:?} too")));
            }
            if p.search && [FIND_TOOLS, USE_TOOLS].contains(&to.as_str()) {
                problems.push((at(&format!(".rename.{from:?}")), format!("{to:?} is a search meta-tool's name")));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_checked_by_name_and_renames() {
        let p = |name: &str, rename: &[(&str, &str)]| ProfileConfig {
            name: name.into(),
            rename: rename.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            search: true,
            ..ProfileConfig::default()
        };
        assert!(problems(&[p("code", &[("gh__create_issue", "open_issue")]), p("ops-2", &[])]).is_empty());
        let bad = problems(&[
            p("", &[]),
            p("a/b", &[]),
            p("same", &[]),
            p("same", &[("x", "shown"), ("y", "shown"), ("z", "bad name!"), ("w", FIND_TOOLS)]),
        ]);
        let keys: Vec<&str> = bad.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(bad.len(), 6, "{bad:?}");
        assert!(keys.iter().any(|k| k.contains("(\"same\").name")), "{keys:?}");
        assert!(p("all", &[]).serves("anything__at_all"));
        let some = ProfileConfig { tools: vec!["gh__*".into()], ..p("some", &[]) };
        assert!(some.serves("gh__create_issue") && !some.serves("fs__read"));
    }
}
