//! What the tests stand on, and nothing they assert: the server under test and how to call
//! it (`app`), what they set up (`fixtures`), the one way to wait (`wait`), and the stand-ins
//! that make a shared service fail for one test (`proxy` for a TCP service, also a load
//! balancer over several, `etcd`, `postgres_server` and `redis_server` for a private etcd,
//! PostgreSQL or Redis on a spare port, `rabbitmq_server` for a private RabbitMQ broker,
//! `redis_cluster` for a private Redis Cluster, with replicas that can take over), the real
//! binary as a process of its own (`serve_process`, for its log or a SIGKILL), a private
//! Prometheus (`prometheus`) for the tests of `deploy/`, and a queue's messages read as
//! RabbitMQ holds them (`amqp`), and HTTP spoken on a raw connection (`raw_http`).

pub(crate) mod amqp;
pub(crate) mod app;
pub(crate) mod etcd;
pub(crate) mod fixtures;
pub(crate) mod postgres_server;
pub(crate) mod prometheus;
pub(crate) mod proxy;
pub(crate) mod rabbitmq_server;
pub(crate) mod raw_http;
pub(crate) mod redis_cluster;
pub(crate) mod redis_server;
pub(crate) mod serve_process;
pub(crate) mod wait;

/// A loopback port nobody listens on right now, for a private service instance.
pub(crate) fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a spare loopback port")
}

/// SIGKILL to `child`, started in a process group of its own, and to every process of its
/// group at once (a server and its workers, as a crash of the machine would take them);
/// returns once `child` is gone.
pub(crate) async fn kill_group(child: &mut tokio::process::Child) {
    start_killing_group(child);
    let _ = child.wait().await;
}

/// The same without waiting, for a `Drop`.
pub(crate) fn start_killing_group(child: &tokio::process::Child) {
    if let Some(group) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
    }
}
