//! A private etcd for tests that need etcd to go away: the Debian `etcd` binary on spare
//! loopback ports with a data folder of its own, stoppable and restartable with its data
//! (never the shared one at `ETCD_ENDPOINTS`), alone or as a member of a three-member
//! cluster (to take its quorum away). Killed and removed when dropped.

use super::{spare_port, wait};
use std::{path::PathBuf, process::Stdio, time::Duration};
use tokio::process::{Child, Command};

pub(crate) struct EtcdInstance {
    name: String,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    /// `--initial-cluster`: every member's name and peer URL.
    initial_cluster: String,
    child: Option<Child>,
}

fn binary() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into())
}

impl EtcdInstance {
    fn new(name: &str) -> Self {
        let data_dir = std::env::temp_dir().join(format!(
            "seckill-test-etcd-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let peer_port = spare_port();
        Self {
            name: name.to_owned(),
            data_dir,
            client_port: spare_port(),
            peer_port,
            initial_cluster: format!("{name}=http://127.0.0.1:{peer_port}"),
            child: None,
        }
    }

    pub(crate) async fn start() -> Self {
        let mut instance = Self::new("test");
        instance.launch(instance.client_port).await;
        instance
    }

    /// Three members of one cluster; returns once each answers. Members start together: a
    /// new cluster answers only once a quorum of it runs.
    pub(crate) async fn cluster() -> Vec<Self> {
        let mut members: Vec<Self> = ["m1", "m2", "m3"].into_iter().map(Self::new).collect();
        let initial_cluster = members
            .iter()
            .map(|member| member.initial_cluster.clone())
            .collect::<Vec<_>>()
            .join(",");
        for member in &mut members {
            member.initial_cluster = initial_cluster.clone();
            member.spawn(member.client_port);
        }
        for member in &members {
            member.answering(member.client_port).await;
        }
        members
    }

    /// What the servers under test are configured with.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Kills the process (as a crash would), keeping its data.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts it again on its own port with the data it had.
    pub(crate) async fn restart(&mut self) {
        self.stop().await;
        self.launch(self.client_port).await;
    }

    /// Starts it on another port with its data, unseen by the servers under test: a way to
    /// change the store while they are cut off from it. Returns that endpoint.
    pub(crate) async fn start_hidden(&mut self) -> String {
        self.stop().await;
        let port = spare_port();
        self.launch(port).await;
        format!("http://127.0.0.1:{port}")
    }

    async fn launch(&mut self, client_port: u16) {
        self.spawn(client_port);
        self.answering(client_port).await;
    }

    fn spawn(&mut self, client_port: u16) {
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(binary())
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", self.data_dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg("--log-level=error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the etcd binary runs (set ETCD_BIN if it is not /usr/bin/etcd)");
        self.child = Some(child);
    }

    async fn answering(&self, client_port: u16) {
        let client = format!("http://127.0.0.1:{client_port}");
        wait::until(
            &format!("private etcd answering on {client}"),
            Duration::from_secs(20),
            || async {
                match etcd_client::Client::connect([client.as_str()], None).await {
                    Ok(mut connected) => connected.status().await.map(drop),
                    Err(error) => Err(error),
                }
            },
        )
        .await;
    }
}

impl Drop for EtcdInstance {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
