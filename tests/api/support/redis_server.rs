//! A private Redis for tests that need Redis to go away: the Debian `redis-server` on a
//! spare loopback port, without persistence, killable and restartable on the same port
//! (never the shared one at `REDIS_URL`). A restarted instance is empty. Killed when dropped.

use super::{spare_port, wait};
use std::{process::Stdio, time::Duration};
use tokio::process::{Child, Command};

pub(crate) struct RedisInstance {
    port: u16,
    child: Option<Child>,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "/usr/bin/redis-server".into())
}

impl RedisInstance {
    pub(crate) async fn start() -> Self {
        let mut instance = Self {
            port: spare_port(),
            child: None,
        };
        instance.launch().await;
        instance
    }

    /// What the servers under test are configured with.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the process with SIGKILL, as a crash would; returns once it is gone.
    pub(crate) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Makes the server answer nobody for `seconds` (`DEBUG SLEEP`, as a fork or a slow
    /// disk would); returns when it answers again.
    pub(crate) async fn freeze(&self, seconds: f64) {
        let mut connection = self.harness_connection().await.expect("private Redis");
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query_async::<()>(&mut connection)
            .await
            .expect("DEBUG SLEEP");
    }

    /// Starts it again, empty, on its own port; returns once it answers PING.
    pub(crate) async fn restart(&mut self) {
        self.kill().await;
        self.launch().await;
    }

    async fn launch(&mut self) {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // `DEBUG SLEEP`, for the tests of a Redis that stops answering for a while.
            .args(["--enable-debug-command", "local"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server runs (set REDIS_SERVER_BIN if it is not /usr/bin/redis-server)");
        self.child = Some(child);
        wait::until(
            &format!("private Redis answering on {}", self.url()),
            Duration::from_secs(20),
            || async { self.harness_connection().await.map(drop) },
        )
        .await;
    }

    /// Command connections from anyone but the test itself: the servers under test. A
    /// subscription (the hot-key reports) is left out: it reconnects on its own schedule,
    /// and commands never go through it.
    pub(crate) async fn other_clients(&self) -> redis::RedisResult<usize> {
        let mut connection = self.harness_connection().await?;
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await?;
        Ok(clients
            .lines()
            .filter(|client| {
                let mut fields = client.split(' ');
                let subscribed = |field: &str| {
                    ["sub=", "psub=", "ssub="].iter().any(|count| {
                        field
                            .strip_prefix(count)
                            .is_some_and(|channels| channels != "0")
                    })
                };
                !fields.any(|field| field == HARNESS || subscribed(field))
            })
            .count())
    }

    /// A connection of the test's own, named so that [`Self::other_clients`] leaves it out.
    async fn harness_connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&HARNESS["name=".len()..])
            .query_async::<()>(&mut connection)
            .await?;
        Ok(connection)
    }
}

/// How `CLIENT LIST` shows the test's own connections.
const HARNESS: &str = "name=test-harness";

impl Drop for RedisInstance {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
