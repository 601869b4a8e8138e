//! [`Prometheus`]: Debian's Prometheus server scraping gateways every second, with taskgate's
//! alerting rules loaded, on a free loopback port with a directory of its own, stopped when
//! dropped. Tests ask it what a dashboard or an alert would, over its HTTP API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running Prometheus.
pub struct Prometheus {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    child: Child,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Prometheus scraping `targets` (`host:port` each, path `/metrics`) as the job `taskgate`
    /// every second, evaluating the rules in `rules` every second. Returns once it is ready.
    pub async fn scraping(targets: &[String], rules: &Path) -> Prometheus {
        let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("prometheus is installed (Debian package prometheus; .ci/run installs it)");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - \"{}\"\n\
             scrape_configs:\n  - job_name: taskgate\n    metrics_path: /metrics\n    static_configs:\n      - targets: [{}]\n",
            rules.display(),
            targets.join(", ")
        );
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus =
            Prometheus { url: format!("http://127.0.0.1:{port}"), child, http: reqwest::Client::new(), _dir: dir };
        let ready = format!("{}/-/ready", prometheus.url);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        for _ in 0..600 {
            tick.tick().await;
            if prometheus.http.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
                return prometheus;
            }
        }
        panic!("prometheus was not ready in 30 s: {}", prometheus.log());
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's `data` (`resultType` and `result`); panics on an error, which is
    /// an expression Prometheus cannot evaluate.
    pub async fn query(&self, expr: &str) -> Value {
        let response = self
            .http
            .get(format!(
                "{}/api/v1/query?{}",
                self.url,
                form_urlencoded::Serializer::new(String::new()).append_pair("query", expr).finish()
            ))
            .send()
            .await
            .expect("prometheus answers");
        let body: Value = serde_json::from_slice(&response.bytes().await.expect("an answer")).expect("a JSON answer");
        assert_eq!(body["status"], "success", "{expr}: {body}");
        body["data"].clone()
    }

    /// The series an instant query returns.
    pub async fn series(&self, expr: &str) -> Vec<Value> {
        self.query(expr).await["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `expr` returns at least one series (a scrape brought it), or panics after
    /// `within`.
    pub async fn until_present(&self, expr: &str, within: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + within;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let series = self.series(expr).await;
            if !series.is_empty() {
                return series;
            }
            assert!(tokio::time::Instant::now() < deadline, "{expr} returned nothing within {within:?}");
        }
    }

    /// The rule groups as Prometheus evaluates them (`/api/v1/rules`).
    pub async fn rules(&self) -> Vec<Value> {
        let answer = self.http.get(format!("{}/api/v1/rules", self.url)).send().await.unwrap();
        let body: Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        body["data"]["groups"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
