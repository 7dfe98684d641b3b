//! Child processes the benchmarks start and stop: a `seckill` server or worker with the
//! benchmark's environment, and a measured tool. A child still running when its handle is
//! dropped (an error on the way) is killed, so no run leaves a server behind.

use anyhow::Context;
use std::{
    net::{SocketAddr, TcpStream},
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};
use tokio::process::{Child, Command};

/// Environment variables a `seckill` child must not inherit from the caller: the benchmark
/// decides its settings file, deduction mode, limits and whether hot keys are counted.
const NOT_INHERITED: [&str; 5] = [
    "SECKILL_CONFIG",
    "SECKILL_DEDUCTION",
    "SECKILL_BUY_USER_RATE",
    "SECKILL_BUY_MAX_IN_FLIGHT",
    "SECKILL_HOTKEYS",
];

/// Refuses a port something already listens on (another run, a developer's server).
pub fn ensure_free(address: SocketAddr) -> anyhow::Result<()> {
    let taken = TcpStream::connect_timeout(&address, Duration::from_millis(500)).is_ok();
    anyhow::ensure!(!taken, "something already listens on {address}");
    Ok(())
}

/// A `seckill` command with the benchmark's environment `env` (name, value) on top of the
/// caller's, less [`NOT_INHERITED`].
pub fn seckill(bin: &Path, args: &[&str], env: &[(String, String)]) -> Command {
    let mut command = Command::new(bin);
    command.args(args).kill_on_drop(true);
    for name in NOT_INHERITED {
        command.env_remove(name);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
}

/// Runs a short `seckill` CLI command to the end; its stdout, or an error with its stderr.
pub async fn output(mut command: Command, stdin: Option<&str>) -> anyhow::Result<String> {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().context("starting seckill")?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        pipe.write_all(text.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    anyhow::ensure!(
        out.status.success(),
        "{:?} failed ({}): {}",
        command.as_std().get_args().collect::<Vec<_>>(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A long-running child (server, worker) whose output goes to a log file.
pub struct Daemon {
    child: Child,
    pid: u32,
    label: String,
    log: std::path::PathBuf,
}

impl Daemon {
    pub fn spawn(mut command: Command, label: &str, log: &Path) -> anyhow::Result<Self> {
        let file = std::fs::File::create(log)?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let child = command
            .spawn()
            .with_context(|| format!("starting {label}"))?;
        let pid = child.id().context("no pid")?;
        Ok(Self {
            child,
            pid,
            label: label.to_owned(),
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fails when the child has exited, naming its log.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!(
                "{} exited ({status}); log: {}\n{}",
                self.label,
                self.log.display(),
                tail(&self.log)
            ),
        }
    }

    /// Waits until `ready` holds, polling every 20 ms, for at most `within`.
    pub async fn wait_until<F, Fut>(&mut self, within: Duration, mut ready: F) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + within;
        while !ready().await {
            self.ensure_running()?;
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} not ready within {within:?}; log: {}\n{}",
                self.label,
                self.log.display(),
                tail(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// SIGTERM (the graceful shutdown), then SIGKILL after 10 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_err()
            {
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

/// The last lines of a log, for an error message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A user of `role` (a `merchant` user belongs to `merchant`, created if new) and an admin
/// API token for it, through the `seckill admin` CLI against the database of `env`.
pub async fn api_token(
    bin: &Path,
    env: &[(String, String)],
    username: &str,
    role: &str,
    merchant: Option<&str>,
) -> anyhow::Result<String> {
    let mut create = vec![
        "admin",
        "create-user",
        "--username",
        username,
        "--role",
        role,
    ];
    if let Some(merchant) = merchant {
        create.extend(["--merchant", merchant]);
    }
    output(seckill(bin, &create, env), Some("bench-password-1\n")).await?;
    let token = output(
        seckill(
            bin,
            &["admin", "token", "--username", username, "--label", "bench"],
            env,
        ),
        None,
    )
    .await?;
    Ok(token.trim().to_owned())
}
