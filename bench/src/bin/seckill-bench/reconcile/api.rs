//! The admin API as the reconciliation benchmark's ops user, and one report run timed
//! through it from the POST to its end, with the server's memory around it. Apart from the
//! benchmark's course so that the figures of one run are read in one place.

use anyhow::Context;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

use super::{
    figures::{Memory, RunFigures},
    probes::{self, RssSampler},
    RSS_EVERY,
};

/// Longest one run may take before the benchmark gives up.
const GIVE_UP: Duration = Duration::from_secs(300);

/// The admin API as an ops user.
#[derive(Clone)]
pub(super) struct Api {
    pub(super) http: reqwest::Client,
    pub(super) base_url: String,
    pub(super) token: String,
}

impl Api {
    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> anyhow::Result<Value> {
        let response = request.bearer_auth(&self.token).send().await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(status.is_success(), "{what} answered {status}: {text}");
        Ok(serde_json::from_str(&text)?)
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let request = self.http.post(format!("{}{path}", self.base_url));
        self.send(request.json(&body), &format!("POST {path}"))
            .await
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let request = self.http.get(format!("{}{path}", self.base_url));
        self.send(request, &format!("GET {path}")).await
    }

    /// One report run over `activity`, from the POST to its end (its status asked for
    /// every `poll`); the server's memory when its pid is given.
    pub(super) async fn report_run(
        &self,
        activity: i64,
        server: Option<u32>,
        poll: Duration,
    ) -> anyhow::Result<RunFigures> {
        let memory = server.map(|pid| {
            let reset = probes::reset_peak(pid);
            let before = probes::status_kb(pid, "VmRSS").unwrap_or(0);
            (pid, reset, before, RssSampler::start(pid, RSS_EVERY))
        });
        let started = Instant::now();
        let answer = self
            .post(
                "/admin/api/reconciliations",
                json!({ "activity_id": activity, "repair": false }),
            )
            .await?;
        let id = answer["id"].as_i64().context("the run's id")?;
        let run = loop {
            let run = self
                .get(&format!("/admin/api/reconciliations/{id}"))
                .await?;
            if run["status"] != "running" {
                break run;
            }
            anyhow::ensure!(started.elapsed() < GIVE_UP, "run {id} still running");
            tokio::time::sleep(poll).await;
        };
        let wall = started.elapsed();
        let memory = match memory {
            Some((pid, reset, before_kb, sampler)) => {
                let peak_kb = sampler.finish().await;
                Some(Memory {
                    before_kb,
                    peak_kb,
                    hwm_kb: reset.then(|| probes::status_kb(pid, "VmHWM")).flatten(),
                })
            }
            None => None,
        };
        anyhow::ensure!(
            run["status"] == "done",
            "run {id} ended {}: {}",
            run["status"],
            run["error"]
        );
        let at = |field: &str| {
            run[field]
                .as_str()
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
        };
        let server_side = match (at("started_at"), at("ended_at")) {
            (Some(start), Some(end)) => (end - start).to_std().ok(),
            _ => None,
        };
        Ok(RunFigures {
            wall,
            server: server_side,
            memory,
            findings: run["findings"].as_array().cloned().unwrap_or_default(),
        })
    }
}
