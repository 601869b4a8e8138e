//! `[traces]`: OpenTelemetry traces over OTLP, off unless an endpoint is given.

use serde::{Deserialize, Serialize};

/// `[traces]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracesConfig {
    /// Where spans go: an OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`
    /// (protobuf). Unset: no traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The share of traces kept, 0.0 to 1.0, by trace id (a client's sampled flag does not
    /// override it).
    #[serde(default = "default_ratio")]
    pub sample_ratio: f64,
}

fn default_service_name() -> String {
    "taskgate".into()
}

fn default_ratio() -> f64 {
    1.0
}

impl Default for TracesConfig {
    fn default() -> Self {
        TracesConfig { otlp_endpoint: None, service_name: default_service_name(), sample_ratio: default_ratio() }
    }
}

impl TracesConfig {
    pub(crate) fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if let Some(endpoint) = &self.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                problems.push(("traces.otlp_endpoint".into(), format!("{endpoint:?} is not an http(s) URL")));
            }
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            problems.push(("traces.sample_ratio".into(), "between 0.0 and 1.0".into()));
        }
        if self.service_name.trim().is_empty() {
            problems.push(("traces.service_name".into(), "a name".into()));
        }
        problems
    }
}
