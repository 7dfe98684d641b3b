//! The optional probes around a funnel measurement: a `perf` profile of the server, and
//! PostgreSQL wait sampling of the bench database's busy backends. Each runs beside the
//! load and hands its readings over when stopped.

use sqlx::{Connection, PgConnection};
use std::{
    path::PathBuf,
    process::Stdio,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};
use tokio::{process::Command, task::JoinHandle};

use crate::run::Run;

/// The optional probes around a measurement.
#[derive(Clone, Copy)]
pub(super) struct Probes {
    pub(super) perf: bool,
    pub(super) pgwait: bool,
}

impl Probes {
    pub(super) const NONE: Self = Self {
        perf: false,
        pgwait: false,
    };
    pub(super) const PERF: Self = Self {
        perf: true,
        pgwait: false,
    };
    pub(super) const PGWAIT: Self = Self {
        perf: false,
        pgwait: true,
    };
    pub(super) const BOTH: Self = Self {
        perf: true,
        pgwait: true,
    };
}

/// A sampling profile of the server process alone (its threads, user and kernel side).
pub(super) struct Perf {
    child: tokio::process::Child,
    data: PathBuf,
}

impl Perf {
    pub(super) fn start(run: &Run, name: &str, pid: u32) -> anyhow::Result<Self> {
        let data = run.file(&format!("{name}.perf.data"));
        let child = Command::new("perf")
            .args(["record", "-p", &pid.to_string(), "-F", "999", "-o"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { child, data })
    }

    /// Stops the recording; returns the per-symbol report (also kept with the per-library
    /// one) and deletes the raw data.
    pub(super) async fn finish(mut self, run: &Run, name: &str) -> String {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        let _ = self.child.wait().await;
        let report = |sort: &str, limit: &str| {
            let mut command = Command::new("perf");
            command
                .arg("report")
                .arg("-i")
                .arg(&self.data)
                .args(["--stdio", "--sort", sort, "--percent-limit", limit])
                .stderr(Stdio::null());
            command
        };
        let by_dso = report("dso", "1").output().await;
        let by_symbol = report("dso,sym", "0").output().await;
        let _ = std::fs::remove_file(&self.data);
        let text = |out: std::io::Result<std::process::Output>| {
            out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let by_symbol = text(by_symbol);
        let _ = std::fs::write(run.file(&format!("{name}.perf-dso.txt")), text(by_dso));
        let _ = std::fs::write(run.file(&format!("{name}.perf-sym.txt")), &by_symbol);
        by_symbol
    }
}

/// PostgreSQL wait sampling: ten times a second, what each busy backend of the bench
/// database is doing (on CPU, waiting for a row lock, flushing WAL, waiting for the
/// client's next statement), over one connection.
pub(super) struct PgWait {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<String>>,
}

impl PgWait {
    pub(super) fn start(url: String, db: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut samples = Vec::new();
                let Ok(mut connection) = PgConnection::connect(&url).await else {
                    return samples;
                };
                while !stop.load(Ordering::Relaxed) {
                    let busy: Vec<String> = sqlx::query_scalar(
                        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' (' || state || ')'
                         FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
                         AND pid <> pg_backend_pid() AND state <> 'idle'",
                    )
                    .bind(&db)
                    .fetch_all(&mut connection)
                    .await
                    .unwrap_or_default();
                    samples.extend(busy);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                samples
            }
        });
        Self { stop, task }
    }

    pub(super) async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}
