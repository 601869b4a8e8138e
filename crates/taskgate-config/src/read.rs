//! Reading a configuration: TOML text into a [`Config`], the environment's overrides on top.
//! A file that does not fit the schema is read again section by section, so that every section's
//! problem is reported at once.

use std::path::Path;

use crate::problem::{ConfigError, Problem};
use crate::Config;

impl Config {
    /// Parses TOML text, applies `env` overrides and validates; `path` names the source in errors.
    pub fn from_toml(text: &str, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let (config, problems) = Config::read(text, path, env)?;
        if !problems.is_empty() {
            return Err(ConfigError::Invalid { path: path.into(), problems });
        }
        Ok(config)
    }

    /// Every problem of a configuration's text at once: what does not fit the schema (each
    /// section read on its own, so one wrong key does not hide the others) and what
    /// [`Config::validate`] finds in the sections that could be read. The configuration comes
    /// back with defaults where a section could not be read. An error only when the text is not
    /// TOML at all (nothing after a syntax error can be read).
    pub fn read(
        text: &str,
        path: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Config, Vec<Problem>), ConfigError> {
        let (mut config, mut problems, unread) = match toml::from_str::<Config>(text) {
            Ok(config) => (config, Vec::new(), Vec::new()),
            Err(whole) => {
                let table: toml::Table = toml::from_str(text)
                    .map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
                let (config, mut problems, unread) = read_sections(text, &table);
                if problems.is_empty() {
                    problems.push(Problem { location: "(file)".into(), message: whole.message().to_owned() });
                }
                (config, problems, unread)
            }
        };
        config.apply_env(env);
        problems.extend(config.resolve_secret_headers(env));
        if let Err(found) = config.validate() {
            let read = |p: &Problem| !unread.iter().any(|section: &String| p.location.starts_with(section.as_str()));
            problems.extend(found.into_iter().filter(read));
        }
        Ok((config, problems))
    }

    /// [`Config::from_toml`] without validation, for a caller that adds to the configuration
    /// (the demo adds its built-in upstreams) and validates after.
    pub fn parse_unvalidated(
        text: &str,
        path: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        config.apply_env(env);
        Ok(config)
    }

    /// Reads, parses and validates a file, with overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: name.clone(), source })?;
        Config::from_toml(&text, &name, &|key| std::env::var(key).ok())
    }

    /// Reads the upstream headers kept out of the file (`headers_env`, `headers_file`) into
    /// `headers`; each one that cannot be read is a problem where it is named.
    pub fn resolve_secret_headers(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (i, up) in self.upstreams.iter_mut().enumerate() {
            let at = |kind: &str, header: &str| format!("upstream[{i}] ({:?}).{kind}.{header}", up.name);
            for (header, variable) in &up.headers_env {
                match env(variable) {
                    Some(value) => {
                        up.headers.insert(header.clone(), value);
                    }
                    None => problems.push(Problem {
                        location: at("headers_env", header),
                        message: format!("the environment variable {variable:?} is not set"),
                    }),
                }
            }
            if let Some(oauth) = &mut up.oauth {
                match env(&oauth.client_secret_env) {
                    Some(secret) => oauth.client_secret = Some(secret),
                    None => problems.push(Problem {
                        location: format!("upstream[{i}] ({:?}).oauth.client_secret_env", up.name),
                        message: format!("the environment variable {:?} is not set", oauth.client_secret_env),
                    }),
                }
            }
            for (header, file) in &up.headers_file {
                match std::fs::read_to_string(file) {
                    Ok(value) => {
                        up.headers.insert(header.clone(), value.trim_end_matches(['\r', '\n']).to_owned());
                    }
                    Err(e) => problems.push(Problem {
                        location: at("headers_file", header),
                        message: format!("cannot read {file}: {e}"),
                    }),
                }
            }
        }
        problems
    }

    /// Environment overrides: `TASKGATE_LISTEN` and `TASKGATE_LOG`.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        if let Some(listen) = env("TASKGATE_LISTEN") {
            self.server.listen = listen;
        }
        if let Some(level) = env("TASKGATE_LOG") {
            self.logging.level = level;
        }
    }
}

/// Reads the section `key` of `text` into `slot`, every other part of the text ignored: a
/// problem in it comes with its line and key, as in a whole file.
macro_rules! read_section {
    ($text:expr, $key:literal, $slot:expr) => {{
        #[derive(serde::Deserialize)]
        struct Only<T> {
            #[serde(rename = $key)]
            section: T,
        }
        match toml::from_str::<Only<_>>($text) {
            Ok(only) => {
                $slot = only.section;
                Ok(())
            }
            Err(e) => Err(e.to_string().trim_end().to_owned()),
        }
    }};
}

/// The sections of a configuration read one by one from its text (each keeps its problem's line
/// and key), into a configuration with defaults where one cannot be read; the problem of each
/// that cannot, and the sections left unread (their validation problems would be about defaults,
/// not about the file).
fn read_sections(text: &str, table: &toml::Table) -> (Config, Vec<Problem>, Vec<String>) {
    let mut config = Config::default();
    let (mut problems, mut unread) = (Vec::new(), Vec::new());
    let mut section = |location: &str, outcome: Result<(), String>| {
        if let Err(message) = outcome {
            problems.push(Problem { location: location.into(), message });
            unread.push(location.to_owned());
        }
    };
    for key in table.keys() {
        match key.as_str() {
            "server" => section(key, read_section!(text, "server", config.server)),
            "logging" => section(key, read_section!(text, "logging", config.logging)),
            "federation" => section(key, read_section!(text, "federation", config.federation)),
            "tasks" => section(key, read_section!(text, "tasks", config.tasks)),
            "progress" => section(key, read_section!(text, "progress", config.progress)),
            "store" => section(key, read_section!(text, "store", config.store)),
            "upstream" => section(key, read_section!(text, "upstream", config.upstreams)),
            "tenant" => section(key, read_section!(text, "tenant", config.tenants)),
            other => section(
                other,
                Err("unknown section; the sections are server, logging, federation, tasks, progress, store, \
                     [[upstream]] and [[tenant]]"
                    .into()),
            ),
        }
    }
    (config, problems, unread)
}
