//! A private RabbitMQ for tests that kill the broker: Debian's `rabbitmq-server` on spare
//! loopback ports (AMQP, Erlang distribution, and an `epmd` of its own, so the shared
//! broker's node registry is never asked), its own node name, configuration, data and log
//! folders under a temporary folder, no plugins. Killable with SIGKILL (the Erlang VM,
//! `beam.smp`, as a crash would) and restartable on the same port and data, which then
//! recovers its durable queues. Never the shared one at `AMQP_URL`. Killed and removed
//! when dropped.
//!
//! Booting takes seconds on a busy box (the Erlang VM and the broker's start-up steps); the
//! instance answers once the AMQP listener greets a client, the last step of the boot.

use super::{kill_group, spare_port, start_killing_group, wait};
use std::{path::PathBuf, process::Stdio, time::Duration};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
};

/// How long a boot may take on the loaded 2-core box before the test fails.
const BOOT: Duration = Duration::from_secs(45);

pub(crate) struct RabbitInstance {
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    node_name: String,
    folder: PathBuf,
    /// The node registry the broker's Erlang VM registers with.
    epmd: Child,
    /// The `rabbitmq-server` script and the VM it starts, one process group.
    broker: Option<Child>,
}

/// The broker's start script (the Debian wrapper in `/usr/sbin` would switch to the
/// `rabbitmq` user and the machine's configuration), or `RABBITMQ_SERVER_BIN`.
fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("RABBITMQ_SERVER_BIN") {
        return path.into();
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/rabbitmq/lib")
        .expect("RabbitMQ under /usr/lib/rabbitmq/lib (or set RABBITMQ_SERVER_BIN)")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.join("sbin/rabbitmq-server").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("a rabbitmq_server-* folder")
        .join("sbin/rabbitmq-server")
}

impl RabbitInstance {
    /// Writes its configuration, starts its `epmd` and the broker; returns once the broker
    /// greets an AMQP client.
    pub(crate) async fn start() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let folder = std::env::temp_dir().join("seckill-test-rabbitmq").join(&id);
        std::fs::create_dir_all(&folder).expect("the broker's folder");
        let port = spare_port();
        // Only the listed plugins start: none (an empty file), so nothing else opens a port.
        std::fs::write(folder.join("enabled_plugins"), "").expect("plugins file");
        // Read instead of the machine's rabbitmq-env.conf, which names the shared node.
        std::fs::write(folder.join("rabbitmq-env.conf"), "").expect("env file");
        std::fs::write(
            folder.join("rabbitmq.conf"),
            format!("listeners.tcp.1 = 127.0.0.1:{port}\n"),
        )
        .expect("configuration file");
        let epmd_port = spare_port();
        let epmd = Command::new("epmd")
            .args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("epmd runs (Erlang's node registry, installed with RabbitMQ)");
        let mut instance = Self {
            port,
            dist_port: spare_port(),
            epmd_port,
            node_name: format!("seckill-test-{}@localhost", &id[..12]),
            folder,
            epmd,
            broker: None,
        };
        instance.launch().await;
        instance
    }

    /// What the servers under test are configured with: its default vhost, as guest (a
    /// loopback client may log in as guest).
    pub(crate) fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// SIGKILL to the script and the Erlang VM at once; returns once the VM is gone (its
    /// port helpers exit by themselves when it is).
    pub(crate) async fn kill(&mut self) {
        if let Some(mut broker) = self.broker.take() {
            kill_group(&mut broker).await;
        }
    }

    /// Starts it again on the same port and data; returns once it greets a client (after
    /// it has recovered its queues).
    pub(crate) async fn restart(&mut self) {
        self.kill().await;
        self.launch().await;
    }

    async fn launch(&mut self) {
        let folder = &self.folder;
        let log = std::fs::File::create(folder.join("console.log")).expect("console log");
        let broker = Command::new(binary())
            // The Erlang cookie is written under HOME, a crash dump in the working folder.
            .current_dir(folder)
            .env("HOME", folder)
            .env("RABBITMQ_NODENAME", &self.node_name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("RABBITMQ_CONF_ENV_FILE", folder.join("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", folder.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", folder.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", folder.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", folder.join("log"))
            // Distribution on loopback only; no scheduler busy-waits, which would burn the
            // cores the test and the other services need.
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none",
            )
            .env_remove("ERL_FLAGS")
            .env_remove("RABBITMQ_ENABLED_PLUGINS")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("console log"))
            .stderr(log)
            // Its own process group, so a kill takes the VM with the script.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("rabbitmq-server runs (set RABBITMQ_SERVER_BIN if it is elsewhere)");
        self.broker = Some(broker);
        let what = format!(
            "private RabbitMQ greeting AMQP clients on port {} (its console: {})",
            self.port,
            folder.join("console.log").display()
        );
        wait::until(&what, BOOT, || greets(self.port)).await;
    }
}

/// Whether a broker on `port` answers the AMQP protocol header with its first frame (a
/// method frame, type 1: `connection.start`).
async fn greets(port: u16) -> bool {
    let greeting = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"AMQP\x00\x00\x09\x01").await?;
        let mut frame_type = [0u8; 1];
        stream.read_exact(&mut frame_type).await?;
        Ok::<_, std::io::Error>(frame_type[0] == 1)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), greeting).await,
        Ok(Ok(true))
    )
}

impl Drop for RabbitInstance {
    fn drop(&mut self) {
        if let Some(broker) = self.broker.as_ref() {
            start_killing_group(broker);
        }
        let _ = self.epmd.start_kill();
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}
