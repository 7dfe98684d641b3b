//! A private Redis Cluster for tests: Debian's `redis-server` started in cluster mode on
//! spare loopback ports, as masters (and replicas of them) with their slots assigned by
//! `redis-cli --cluster create`, without persistence; a master can be failed over to its
//! replica. Killed (and their files removed) when dropped.

use super::{ephemeral_ports_from, spare_port, wait};
use std::{path::PathBuf, process::Stdio, time::Duration};
use tokio::process::{Child, Command};

pub(crate) struct RedisCluster {
    ports: Vec<u16>,
    children: Vec<Child>,
    dir: PathBuf,
}

/// A spare port whose cluster bus port (10,000 above it) is spare too, and below the
/// ephemeral range like the port itself.
fn spare_node_port() -> u16 {
    loop {
        let port = spare_port();
        if u32::from(port) + 10_000 < u32::from(ephemeral_ports_from())
            && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            return port;
        }
    }
}

fn binary(name: &str) -> String {
    std::env::var("REDIS_SERVER_BIN")
        .map(|server| server.replace("redis-server", name))
        .unwrap_or_else(|_| format!("/usr/bin/{name}"))
}

impl RedisCluster {
    /// `masters` masters with every slot assigned; returns once the cluster says it is ok.
    pub(crate) async fn start(masters: usize) -> Self {
        Self::start_with_replicas(masters, 0).await
    }

    /// `masters` masters with every slot assigned and `replicas` replicas of each; returns
    /// once every node sees every slot served and every replica is in sync with its master.
    pub(crate) async fn start_with_replicas(masters: usize, replicas: usize) -> Self {
        let ports: Vec<u16> = (0..masters * (1 + replicas))
            .map(|_| spare_node_port())
            .collect();
        let dir = std::env::temp_dir().join(format!("seckill-cluster-{}", ports[0]));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        // With replicas, a master that stops answering is failed over after 2 s rather
        // than the default 15 s.
        let node_timeout_ms = if replicas > 0 { "2000" } else { "15000" };
        let mut children = Vec::new();
        for port in &ports {
            let child = Command::new(binary("redis-server"))
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-node-timeout", node_timeout_ms])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("redis-server runs");
            children.push(child);
        }
        let cluster = Self {
            ports,
            children,
            dir,
        };
        for url in cluster.urls() {
            wait::until(
                &format!("cluster node {url} answering"),
                Duration::from_secs(20),
                || async { cluster.node_info(&url).await.is_ok() },
            )
            .await;
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new(binary("redis-cli"))
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .expect("redis-cli runs");
        assert!(created.success(), "redis-cli --cluster create failed");
        let nodes = cluster.ports.len();
        for url in cluster.urls() {
            wait::until(
                &format!("cluster state ok on {url}"),
                Duration::from_secs(30),
                // What the node said, so that a cluster that never forms says why.
                || async {
                    let info = cluster.node_info(&url).await.map_err(|e| e.to_string())?;
                    if info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && info.contains(&format!("cluster_known_nodes:{nodes}"))
                    {
                        Ok(())
                    } else {
                        Err(info
                            .lines()
                            .filter(|line| {
                                ["cluster_state", "cluster_slots_ok", "cluster_known_nodes"]
                                    .iter()
                                    .any(|field| line.starts_with(field))
                            })
                            .collect::<Vec<_>>()
                            .join(" "))
                    }
                },
            )
            .await;
        }
        for url in cluster.urls() {
            wait::until(
                &format!("{url} a master or a replica in sync"),
                Duration::from_secs(30),
                || async {
                    let info: String = query(&url, redis::cmd("INFO").arg("replication"))
                        .await
                        .unwrap_or_default();
                    info.contains("role:master")
                        || (info.contains("master_link_status:up")
                            && info.contains("master_sync_in_progress:0"))
                },
            )
            .await;
        }
        cluster
    }

    /// Every node's URL, as a cluster client takes them.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    async fn node_info(&self, url: &str) -> redis::RedisResult<String> {
        query(url, redis::cmd("CLUSTER").arg("INFO")).await
    }

    /// `command` sent to the node on `port` itself, not routed by the cluster.
    pub(crate) async fn on_node<T: redis::FromRedisValue>(
        &self,
        port: u16,
        command: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        query(&format!("redis://127.0.0.1:{port}/"), command).await
    }

    /// The port of the replica of the master on `master`.
    pub(crate) async fn replica_of(&self, master: u16) -> u16 {
        let id: String = self
            .on_node(master, redis::cmd("CLUSTER").arg("MYID"))
            .await
            .expect("master id");
        // One line per replica, as CLUSTER NODES writes it: `<id> <ip:port@bus> ...`.
        let replicas: Vec<String> = self
            .on_node(master, redis::cmd("CLUSTER").arg("REPLICAS").arg(&id))
            .await
            .expect("replicas");
        replicas
            .first()
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|address| address.split(['@', ',']).next())
            .and_then(|address| address.rsplit_once(':'))
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or_else(|| panic!("a replica of {master}: {replicas:?}"))
    }

    /// Fails the master serving `key` over to its replica (`CLUSTER FAILOVER` sent to the
    /// replica: the master stops taking writes, the replica catches up and takes its slots);
    /// returns the new master's port once it serves the slot and every node says the cluster is ok.
    pub(crate) async fn fail_over(&self, key: &str) -> u16 {
        let replica = self.replica_of(self.master_of(key).await).await;
        let _: () = self
            .on_node(replica, redis::cmd("CLUSTER").arg("FAILOVER"))
            .await
            .expect("CLUSTER FAILOVER");
        self.taken_over(key, replica, None).await;
        replica
    }

    /// Kills the master serving `key` (SIGKILL, as a crash would); returns its replica's port
    /// once the other masters have agreed it failed and the replica serves its slots.
    pub(crate) async fn crash_master(&mut self, key: &str) -> u16 {
        let master = self.master_of(key).await;
        let replica = self.replica_of(master).await;
        let at = self
            .ports
            .iter()
            .position(|port| *port == master)
            .expect("a node of the cluster");
        let _ = self.children[at].kill().await;
        self.taken_over(key, replica, Some(master)).await;
        replica
    }

    /// Waits until `replica` serves `key`'s slot and every node but `gone` says the cluster
    /// is ok.
    async fn taken_over(&self, key: &str, replica: u16, gone: Option<u16>) {
        wait::until(
            "the replica serves the slot",
            Duration::from_secs(30),
            || async { self.master_of(key).await == replica },
        )
        .await;
        let alive = self.ports.iter().filter(|port| Some(**port) != gone);
        for url in alive.map(|port| format!("redis://127.0.0.1:{port}/")) {
            wait::until(
                &format!("cluster state ok on {url} after the failover"),
                Duration::from_secs(30),
                || async {
                    self.node_info(&url)
                        .await
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                },
            )
            .await;
        }
    }

    /// The port of the master that serves `key`'s slot. In the middle of a failover a node's
    /// map may leave the slot out for a moment: each node that answers is asked in turn, and
    /// all of them again until one names a master.
    pub(crate) async fn master_of(&self, key: &str) -> u16 {
        let named = std::sync::Mutex::new(None);
        wait::until(
            &format!("a node names the master of {key}"),
            Duration::from_secs(30),
            || async {
                for url in self.urls() {
                    if let Some(port) = slot_master(&url, key).await {
                        *named.lock().expect("not poisoned") = Some(port);
                        return true;
                    }
                }
                false
            },
        )
        .await;
        named
            .into_inner()
            .expect("not poisoned")
            .expect("a master named")
    }
}

/// The port of the master serving `key`'s slot in the map of the node at `url`, if that
/// node answers and its map covers the slot.
async fn slot_master(url: &str, key: &str) -> Option<u16> {
    let client = redis::Client::open(url).ok()?;
    let mut connection = client.get_multiplexed_async_connection().await.ok()?;
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut connection)
        .await
        .ok()?;
    // Each entry: [first slot, last slot, [host, port, id], ...].
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut connection)
        .await
        .ok()?;
    ranges.into_iter().find_map(|range| match range {
        redis::Value::Array(fields) if fields.len() >= 3 => {
            let first: i64 = redis::from_redis_value(&fields[0]).ok()?;
            let last: i64 = redis::from_redis_value(&fields[1]).ok()?;
            let master: Vec<redis::Value> = redis::from_redis_value(&fields[2]).ok()?;
            let port = redis::from_redis_value(master.get(1)?).ok()?;
            (first..=last).contains(&slot).then_some(port)
        }
        _ => None,
    })
}

/// `command` on one node's own connection.
async fn query<T: redis::FromRedisValue>(url: &str, command: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    command.query_async(&mut connection).await
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
