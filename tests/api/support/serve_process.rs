//! The real `seckill serve` binary as a process of its own, for tests that need what only a
//! process has: its log on a pipe, counted line by line, or a death by SIGKILL (no task
//! left running, no graceful shutdown, its leases left to expire). It joins the deployment
//! of the settings it is given (same database, stores and prefixes, the same tunables) on a
//! port of its own, with a node id and switch snapshot of its own. Killed when dropped.

use super::{spare_port, wait};
use base::config::Settings;
use reqwest::Client;
use secrecy::ExposeSecret;
use std::{
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::{Child, Command},
    task::JoinHandle,
};

pub(crate) struct ServeProcess {
    pub(crate) address: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
    config: PathBuf,
}

/// The tunables of `settings` the tests change, as the process's configuration file: the
/// process then runs its jobs on the same beat as the instances in the test's own process.
fn configuration(settings: &Settings, snapshot: &std::path::Path) -> String {
    let pipeline = &settings.pipeline;
    let reconcile = &settings.reconcile;
    let control = &settings.control;
    let buy = &settings.buy;
    let idle_expiry = pipeline
        .idle_queue_expiry_ms
        .map_or(String::new(), |ms| format!("idle_queue_expiry_ms = {ms}\n"));
    format!(
        "[control]\nsnapshot_path = {snapshot:?}\nlease_ttl_s = {}\nheartbeat_ms = {}\n\
         [pipeline]\n{idle_expiry}timeout_scan_interval_ms = {}\nrelay_grace_ms = {}\n\
         relay_interval_ms = {}\nconfirm_timeout_ms = {}\n\
         [reconcile]\ninterval_ms = {}\nmarker_grace_ms = {}\n\
         [buy]\nper_ip_per_window = {}\nper_item_per_window = {}\nper_user_per_window = {}\n\
         [payment]\ndelay_ms = {}\n",
        control.lease_ttl_s,
        control.heartbeat_ms,
        pipeline.timeout_scan_interval_ms,
        pipeline.relay_grace_ms,
        pipeline.relay_interval_ms,
        pipeline.confirm_timeout_ms,
        reconcile.interval_ms,
        reconcile.marker_grace_ms,
        buy.per_ip_per_window,
        buy.per_item_per_window,
        buy.per_user_per_window,
        settings.payment.delay_ms,
    )
}

impl ServeProcess {
    /// Starts it, logging at info, every line it writes kept; returns once `/healthz`
    /// answers (through `client`).
    pub(crate) async fn start(settings: &Settings, client: &Client) -> Self {
        Self::start_with_env(settings, client, &[]).await
    }

    /// [`Self::start`] with more environment variables (a fault point, for one).
    pub(crate) async fn start_with_env(
        settings: &Settings,
        client: &Client,
        env: &[(&str, &str)],
    ) -> Self {
        let port = spare_port();
        let id = uuid::Uuid::new_v4().simple();
        let config = std::env::temp_dir().join(format!("seckill-test-serve-{id}.toml"));
        let snapshot = std::env::temp_dir()
            .join("seckill-test-snapshots")
            .join(format!("{id}.json"));
        std::fs::write(&config, configuration(settings, &snapshot))
            .expect("write the process's configuration");
        let mut child = Command::new(env!("CARGO_BIN_EXE_seckill-under-test"))
            .arg("serve")
            .env("SECKILL_CONFIG", &config)
            .env("SECKILL_BIND", format!("127.0.0.1:{port}"))
            .env("DATABASE_URL", settings.database_url.expose_secret())
            .env("REDIS_URL", settings.redis_url.expose_secret())
            .env("SECKILL_REDIS_PREFIX", &settings.redis_prefix)
            .env("AMQP_URL", settings.amqp_url.expose_secret())
            .env("SECKILL_AMQP_PREFIX", &settings.amqp_prefix)
            .env("ETCD_ENDPOINTS", settings.etcd_endpoints.join(","))
            .env("SECKILL_ETCD_PREFIX", &settings.etcd_prefix)
            .env("SECKILL_JWT_SECRET", settings.jwt_secret.expose_secret())
            .env("SECKILL_PAY_SECRET", settings.pay_secret.expose_secret())
            .env("SECKILL_SALE_DIR", &settings.sale_page.dir)
            .env("SECKILL_DB_MAX_CONNECTIONS", "8")
            .env_remove("SECKILL_NODE_ID")
            .env_remove("SECKILL_LOG_JSON")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the seckill binary runs");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            keep_lines(child.stdout.take().expect("stdout"), lines.clone()),
            keep_lines(child.stderr.take().expect("stderr"), lines.clone()),
        ];
        let process = Self {
            address: format!("http://127.0.0.1:{port}"),
            child,
            lines,
            readers,
            config,
        };
        let healthz = format!("{}/healthz", process.address);
        wait::until("seckill serve answers", wait::PATIENCE, || async {
            client
                .get(&healthz)
                .send()
                .await
                .map(|response| response.status().as_u16() == 200)
                .unwrap_or(false)
        })
        .await;
        process
    }

    pub(crate) fn line_count(&self) -> usize {
        self.lines.lock().expect("lines").len()
    }

    /// Whether the process leads the singleton jobs, as its `/metrics` says.
    pub(crate) async fn leads(&self, client: &Client) -> bool {
        super::app::metric_at(client, &self.address, "seckill_control_leader").await == 1.0
    }

    /// Waits until the process ends by itself (a fault point aborting it, for one).
    pub(crate) async fn exited(&mut self) -> std::process::ExitStatus {
        self.child.wait().await.expect("the process is waited for")
    }

    /// SIGKILL, as a crash would; returns once the process is gone.
    pub(crate) async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Kills the process and returns every line it wrote, once both pipes are drained.
    pub(crate) async fn finish(mut self) -> Vec<String> {
        self.kill().await;
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        std::mem::take(&mut *self.lines.lock().expect("lines"))
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

fn keep_lines(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    lines: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().expect("lines").push(line);
        }
    })
}
