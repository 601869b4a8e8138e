//! `[admin]`: who may use the operator's view (the admin API and page), and where it is served.

use serde::{Deserialize, Serialize};

/// `[admin]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// The operators: each a name (in the audit trail) and the SHA-256 of its token. With none,
    /// the admin API and page answer 404.
    #[serde(default, rename = "key", skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<AdminKey>,
    /// Serve the admin API and page on the main listener too (default: only on
    /// `server.admin_listen`).
    #[serde(default)]
    pub on_main_listener: bool,
    /// How often the admin page is brought up to date, in milliseconds (at least 100).
    #[serde(default = "default_refresh_ms")]
    pub refresh_ms: u64,
}

fn default_refresh_ms() -> u64 {
    1000
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { keys: Vec::new(), on_main_listener: false, refresh_ms: default_refresh_ms() }
    }
}

/// `[[admin.key]]`: one operator's token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminKey {
    /// Who holds it (the audit trail names it).
    pub name: String,
    /// Lower-case hex SHA-256 of the token (`taskgate hash-key` prints it).
    pub sha256: String,
}

impl AdminConfig {
    /// Problems with the section: (key, why).
    pub(crate) fn problems(&self, admin_listen: bool) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        for (i, key) in self.keys.iter().enumerate() {
            if key.name.trim().is_empty() || key.name.len() > 64 || key.name.chars().any(char::is_control) {
                problems.push((format!("admin.key[{i}].name"), "a name of 1 to 64 printable characters".into()));
            }
            let hex =
                key.sha256.len() == 64 && key.sha256.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
            if !hex {
                problems.push((
                    format!("admin.key[{i}].sha256"),
                    "64 lower-case hex digits: the SHA-256 of the token (`taskgate hash-key` prints it)".into(),
                ));
            }
            if self.keys[..i].iter().any(|k| k.name == key.name) {
                problems.push((format!("admin.key[{i}].name"), format!("{:?} is named twice", key.name)));
            }
        }
        if self.refresh_ms < 100 {
            problems.push(("admin.refresh_ms".into(), "at least 100".into()));
        }
        if self.on_main_listener && self.keys.is_empty() {
            problems.push(("admin.on_main_listener".into(), "no [[admin.key]]: no one could use it".into()));
        }
        if !self.keys.is_empty() && !admin_listen && !self.on_main_listener {
            problems.push((
                "admin.key".into(),
                "the admin API is served on server.admin_listen: set it (or admin.on_main_listener = true)".into(),
            ));
        }
        problems
    }
}
