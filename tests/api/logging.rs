//! What the server writes to its log in a storm: the real `seckill serve` binary as a
//! process of its own, its output on a pipe, counted line by line. With Redis away, ten
//! thousand failing buys and a run of failing status reads write a few dozen lines at most,
//! and the lines written inside a request name its request id.

use crate::support::{
    app::{spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, storm_settings, token, Sale},
    redis_server::RedisInstance,
    spare_port, wait,
};
use futures::{stream, StreamExt};
use secrecy::ExposeSecret;
use std::{
    process::Stdio,
    sync::{Arc, Mutex},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::{Child, Command},
    task::JoinHandle,
};

/// "A few dozen": what a storm may write at most, background jobs' lines included.
const MOST_LINES: usize = 48;

/// A `seckill serve` process sharing `app`'s database, stores and prefixes, on a port of
/// its own, logging at info; every line it writes is kept.
struct ServeProcess {
    address: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
    _config: std::path::PathBuf,
}

impl ServeProcess {
    async fn start(app: &TestApp) -> Self {
        let settings = &app.state.settings;
        let port = spare_port();
        let config = std::env::temp_dir().join(format!(
            "seckill-test-serve-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        let snapshot = std::env::temp_dir()
            .join("seckill-test-snapshots")
            .join(format!("{}.json", uuid::Uuid::new_v4().simple()));
        std::fs::write(
            &config,
            format!(
                "[control]\nsnapshot_path = {snapshot:?}\n[pipeline]\nidle_queue_expiry_ms = 30000\n"
            ),
        )
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
            .env("SECKILL_DB_MAX_CONNECTIONS", "8")
            .env_remove("SECKILL_NODE_ID")
            .env_remove("SECKILL_LOG_JSON")
            .env("RUST_LOG", "info")
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
            _config: config,
        };
        let client = &app.client;
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

    fn line_count(&self) -> usize {
        self.lines.lock().expect("lines").len()
    }

    /// Kills the process and returns every line it wrote, once both pipes are drained.
    async fn finish(mut self) -> Vec<String> {
        let _ = self.child.kill().await;
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        let _ = std::fs::remove_file(&self._config);
        std::mem::take(&mut *self.lines.lock().expect("lines"))
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

/// A buy sent to `address` as buyer `user` with `request_id`: its status.
async fn buy_at(app: &TestApp, address: &str, sale: &Sale, user: i64, request_id: &str) -> u16 {
    app.client
        .post(format!("{address}/api/seckill/buy"))
        .bearer_auth(token(app, user))
        .header("x-request-id", request_id)
        .json(&buy_body(sale, 1))
        .send()
        .await
        .map(|response| response.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_storm_of_failing_requests_writes_a_few_dozen_log_lines() {
    let mut redis = RedisInstance::start().await;
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.redis_url = url.into();
    })
    .await;
    let sale = open_sale(&app, 100_000, 1).await;
    let serve = ServeProcess::start(&app).await;
    let address = serve.address.clone();
    let first = buy_at(&app, &address, &sale, 1, "before-the-storm").await;
    assert_eq!(first, 200, "a buy through the process before the storm");
    let before = serve.line_count();

    redis.kill().await;
    let statuses: Vec<u16> = stream::iter(0..10_000i64)
        .map(|n| {
            let (app, address, sale) = (&app, &address, &sale);
            async move { buy_at(app, address, sale, 1_000 + n, &format!("storm-{n}")).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let failed = statuses.iter().filter(|status| **status == 503).count();
    assert_eq!(failed, 10_000, "every buy fails with Redis away");
    let status_path = format!("{address}/api/activities/{}/status", sale.activity_id);
    for _ in 0..200 {
        let response = app.client.get(&status_path).send().await.expect("sent");
        assert_eq!(response.status(), 503, "status with Redis away");
    }

    let lines = serve.finish().await;
    let storm = &lines[before..];
    assert!(
        storm.len() <= MOST_LINES,
        "{} lines for a storm of 10,200 failing requests; the first ones:\n{}",
        storm.len(),
        storm[..storm.len().min(60)].join("\n")
    );
    assert!(
        storm
            .iter()
            .any(|line| line.contains("WARN") || line.contains("ERROR")),
        "the outage is not logged at all:\n{}",
        storm.join("\n")
    );
    assert!(
        storm.iter().any(|line| line.contains("storm-")),
        "no line names the request it was written in:\n{}",
        storm.join("\n")
    );
}
