//! A private PostgreSQL for tests that kill PostgreSQL: Debian's server binaries on a spare
//! loopback port with a data folder of its own, killable with SIGKILL (the postmaster and
//! every backend, as a crash of the machine's database would) and restartable on the same
//! data, which then goes through crash recovery. Never the shared one at `DATABASE_URL`.
//! Killed and removed when dropped.

use super::{kill_group, spare_port, start_killing_group, wait};
use sqlx::{Connection, Executor, PgConnection};
use std::{path::PathBuf, process::Stdio, time::Duration};
use tokio::process::{Child, Command};

pub(crate) struct PostgresInstance {
    port: u16,
    data_dir: PathBuf,
    /// The server runs as `postgres` when the tests run as root (PostgreSQL refuses root).
    owner: Option<(u32, u32)>,
    child: Option<Child>,
}

/// The newest installed major version's binaries, or `PG_BIN_DIR`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN_DIR") {
        return dir.into();
    }
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server binaries under /usr/lib/postgresql (or set PG_BIN_DIR)")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    let newest = versions.last().expect("a PostgreSQL version installed");
    PathBuf::from(format!("/usr/lib/postgresql/{newest}/bin"))
}

/// uid and gid of `postgres` when this process is root, else none.
fn owner() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let output = std::process::Command::new("id").args(args).output().ok()?;
        String::from_utf8(output.stdout).ok()?.trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    Some((
        id(&["-u", "postgres"]).expect("a postgres user"),
        id(&["-g", "postgres"]).expect("a postgres group"),
    ))
}

impl PostgresInstance {
    /// initdb into a new folder, then start; returns once it takes connections.
    pub(crate) async fn start() -> Self {
        let data_dir = std::env::temp_dir()
            .join("seckill-test-pg")
            .join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::create_dir_all(&data_dir).expect("data folder");
        let owner = owner();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&data_dir, Some(uid), Some(gid)).expect("chown data folder");
        }
        let mut initdb = Command::new(bin_dir().join("initdb"));
        initdb
            .arg("-D")
            .arg(&data_dir)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let done = initdb.output().await.expect("initdb runs");
        assert!(
            done.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let mut instance = Self {
            port: spare_port(),
            data_dir,
            owner,
            child: None,
        };
        instance.launch().await;
        instance
    }

    /// A new database on it, for an app to be configured with; its URL.
    pub(crate) async fn create_database(&self, name: &str) -> String {
        let mut admin = PgConnection::connect(&self.url("postgres"))
            .await
            .expect("private PostgreSQL answers");
        admin
            .execute(format!(r#"CREATE DATABASE "{name}""#).as_str())
            .await
            .expect("create database");
        self.url(name)
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// SIGKILL to the postmaster and every backend at once; returns once they are gone.
    pub(crate) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(&mut child).await;
        }
    }

    /// Starts it again on the same data and port; returns once it takes connections (after
    /// its crash recovery).
    pub(crate) async fn restart(&mut self) {
        self.kill().await;
        self.launch().await;
    }

    async fn launch(&mut self) {
        let mut server = Command::new(bin_dir().join("postgres"));
        server
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.data_dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=60",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so a kill takes the backends with the postmaster.
            .process_group(0)
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.owner {
            server.uid(uid).gid(gid);
        }
        self.child = Some(server.spawn().expect("postgres runs"));
        let url = self.url("postgres");
        wait::until(
            &format!("private PostgreSQL answering on port {}", self.port),
            Duration::from_secs(30),
            || async { PgConnection::connect(&url).await.map(drop) },
        )
        .await;
    }
}

impl Drop for PostgresInstance {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            start_killing_group(child);
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
