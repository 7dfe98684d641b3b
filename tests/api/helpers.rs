//! `spawn_app()`: one isolated server per test, plus helpers to make users and call the API.

use contract::Role;
use reqwest::{header::AUTHORIZATION, Client, Response};
use seckill::{
    cli::create_user,
    control::ControlPlane,
    identity::{secret_token, users},
    infra::config::Settings,
    startup::Application,
    state::AppState,
};
use secrecy::ExposeSecret;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use std::sync::Once;
use uuid::Uuid;

pub struct TestApp {
    pub address: String,
    pub db: PgPool,
    pub state: AppState,
    pub client: Client,
    /// The instance's control plane (watcher, heartbeat, election).
    pub control: ControlPlane,
    /// The HTTP server task; aborting it and the control plane is a crash of the instance.
    pub server: tokio::task::AbortHandle,
}

/// An admin API caller: a user with a bearer token.
pub struct Caller {
    pub token: String,
    pub username: String,
    pub password: String,
}

static TRACING: Once = Once::new();

/// The server part of `DATABASE_URL` with another database name.
fn database_url(base: &str, name: &str) -> String {
    let (server, _) = base
        .rsplit_once('/')
        .expect("DATABASE_URL has a database part");
    format!("{server}/{name}")
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// `spawn_app` with settings adjusted first (limits, and the switches' start-up values).
pub async fn spawn_app_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    TRACING.call_once(|| {
        if std::env::var("TEST_LOG").is_ok() {
            seckill::infra::telemetry::init();
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
    // Each test declares its own quorum queues (a few file descriptors each in the broker);
    // the broker drops them 30 s after the test's consumers are gone.
    settings.pipeline.idle_queue_expiry_ms = Some(30_000);
    adjust(&mut settings);
    serve(settings).await
}

/// A switch snapshot file of its own, so no test starts from another's switches.
fn snapshot_path() -> std::path::PathBuf {
    std::env::temp_dir()
        .join("seckill-test-snapshots")
        .join(format!("{}.json", Uuid::new_v4().simple()))
}

async fn serve(settings: Settings) -> TestApp {
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
    pub async fn spawn_sibling(&self, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let mut settings = Settings::clone(&self.state.settings);
        settings.bind = "127.0.0.1:0".parse().expect("address");
        settings.control.node_id = None;
        settings.control.snapshot_path = snapshot_path();
        adjust(&mut settings);
        serve(settings).await
    }

    /// A console session for `caller`, as the login page would set it.
    pub async fn console_session(&self, caller: &Caller) -> String {
        self.state
            .auth
            .login(&caller.username, &caller.password, None)
            .await
            .expect("login")
            .token
    }

    /// Calls a console server function with `session`'s cookie and a form body.
    pub async fn console_call(&self, path: &str, session: &str, form: &[(&str, &str)]) -> Response {
        self.client
            .post(format!("{}{path}", self.address))
            .header("Cookie", format!("seckill_session={session}"))
            .form(form)
            .send()
            .await
            .unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    /// A console page rendered on the server for `session`.
    pub async fn console_page(&self, path: &str, session: &str) -> String {
        self.client
            .get(format!("{}{path}", self.address))
            .header("Cookie", format!("seckill_session={session}"))
            .send()
            .await
            .unwrap_or_else(|error| panic!("{path}: {error}"))
            .text()
            .await
            .expect("html")
    }

    /// Stops the instance as a crash would: no graceful shutdown, its leases left to expire.
    pub fn kill(&self) {
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
    /// A user of `role` (merchants belong to `merchant`) with a fresh API token.
    pub async fn caller(&self, role: Role, merchant: Option<&str>) -> Caller {
        let username = format!("{}-{}", role, &Uuid::new_v4().simple().to_string()[..8]);
        let password = format!("pw-{}", Uuid::new_v4().simple());
        let actor = create_user(&self.db, &username, &password, role, merchant)
            .await
            .expect("create user");
        let token = secret_token::generate();
        users::create_api_token(
            &self.db,
            actor.user_id,
            &secret_token::digest(&token),
            "test",
        )
        .await
        .expect("create token");
        Caller {
            token,
            username,
            password,
        }
    }

    pub async fn get(&self, path: &str, caller: Option<&Caller>) -> Response {
        let mut request = self.client.get(format!("{}{path}", self.address));
        if let Some(caller) = caller {
            request = request.header(AUTHORIZATION, format!("Bearer {}", caller.token));
        }
        request.send().await.expect("request sent")
    }

    pub async fn send_json(
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

    pub async fn post_json(&self, path: &str, caller: Option<&Caller>, body: &Value) -> Response {
        self.send_json(reqwest::Method::POST, path, caller, body)
            .await
    }

    /// Rows in a table of this test's database; used to prove that refused calls changed nothing.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.db)
            .await
            .expect("count")
    }
}

/// The JSON body and status of a response.
pub async fn json(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

/// Waits until `check` holds, polling every 100 ms; panics naming `what` after `patience`.
pub async fn eventually<F, Fut>(what: &str, patience: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {patience:?} waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
