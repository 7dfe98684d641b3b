//! A private Prometheus for the tests of `deploy/`: the Debian `prometheus` binary on a spare
//! loopback port with a data folder of its own, scraping the servers under test every second
//! and evaluating the project's rule files; queried through its HTTP API. Killed and its
//! folder removed when dropped. Also where the Prometheus binaries and `deploy/` are found.

use super::{spare_port, wait};
use serde_json::Value;
use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};
use tokio::process::{Child, Command};

/// The repository's `deploy/prometheus` folder.
pub(crate) fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .canonicalize()
        .expect("the deploy folder beside tests/")
}

pub(crate) fn promtool() -> String {
    std::env::var("PROMTOOL_BIN").unwrap_or_else(|_| "/usr/bin/promtool".into())
}

fn binary() -> String {
    std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "/usr/bin/prometheus".into())
}

/// A folder of its own under the system's temp folder, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "seckill-test-{what}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).expect("create a temp folder");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) struct PrometheusInstance {
    address: String,
    http: reqwest::Client,
    _child: Child,
    _dir: TempDir,
}

impl PrometheusInstance {
    /// Scrapes `targets` (host:port) as job `seckill`, found through a file-based discovery
    /// file as in `deploy/prometheus/prometheus.yml`, and evaluates `deploy/`'s rule files;
    /// both every second. Returns once it answers `/-/ready`.
    pub(crate) async fn start(targets: &[&str]) -> Self {
        let dir = TempDir::new("prometheus");
        let rules = deploy_dir().join("prometheus/rules");
        let targets_file = dir.0.join("targets.json");
        let discovered = serde_json::json!([{ "targets": targets }]);
        std::fs::write(&targets_file, discovered.to_string()).expect("write the targets file");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             rule_files:\n  - {recording}\n  - {alerts}\n\
             scrape_configs:\n  - job_name: seckill\n    file_sd_configs:\n      - files: ['{targets}']\n",
            recording = rules.join("recording.yml").display(),
            alerts = rules.join("alerts.yml").display(),
            targets = targets_file.display(),
        );
        let config_file = dir.0.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write the config");
        let port = spare_port();
        let address = format!("http://127.0.0.1:{port}");
        let child = Command::new(binary())
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect(
                "the prometheus binary runs (set PROMETHEUS_BIN if it is not /usr/bin/prometheus)",
            );
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let ready = format!("{address}/-/ready");
        wait::until(
            &format!("private Prometheus ready on {address}"),
            Duration::from_secs(30),
            || async {
                match http.get(&ready).send().await {
                    Ok(response) if response.status().is_success() => Ok(()),
                    Ok(response) => Err(format!("{}", response.status())),
                    Err(error) => Err(error.to_string()),
                }
            },
        )
        .await;
        Self {
            address,
            http,
            _child: child,
            _dir: dir,
        }
    }

    /// Evaluates `expr` at the current time: the result array, or the error Prometheus gave.
    pub(crate) async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let response = self
            .http
            .get(format!("{}/api/v1/query", self.address))
            .query(&[("query", expr)])
            .send()
            .await
            .map_err(|error| format!("request: {error}"))?;
        let body: Value = response
            .json()
            .await
            .map_err(|error| format!("answer: {error}"))?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        match &body["data"]["result"] {
            Value::Array(samples) => Ok(samples.clone()),
            // A scalar or string result: one value.
            other => Ok(vec![other.clone()]),
        }
    }

    /// The rule groups as `/api/v1/rules` reports them (each rule's query, health, last error).
    pub(crate) async fn rule_groups(&self) -> Vec<Value> {
        let body: Value = self
            .http
            .get(format!("{}/api/v1/rules", self.address))
            .send()
            .await
            .expect("rules request")
            .json()
            .await
            .expect("rules answer");
        body["data"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}
