//! What the tests stand on, and nothing they assert: the server under test and how to call
//! it (`app`), what they set up (`fixtures`), the one way to wait (`wait`), and the stand-ins
//! that make a shared service fail for one test (`proxy` for a TCP service, also a load
//! balancer over several, `etcd`, `postgres_server` and `redis_server` for a private etcd,
//! PostgreSQL or Redis on a spare port, `rabbitmq_server` for a private RabbitMQ broker,
//! `redis_cluster` for a private Redis Cluster, with replicas that can take over), the real
//! binary as a process of its own (`serve_process`, for its log or a SIGKILL), a private
//! Prometheus (`prometheus`) for the tests of `deploy/`, and a queue's messages read as
//! RabbitMQ holds them (`amqp`), HTTP spoken on a raw connection (`raw_http`), and Debian's nginx in front of a
//! deployment's instances (`balancer`), rendered from `deploy/nginx/seckill.conf`.

pub(crate) mod amqp;
pub(crate) mod app;
pub(crate) mod balancer;
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

use std::sync::atomic::{AtomicU32, Ordering};

/// A loopback port nobody listens on right now, for a private service instance, taken below
/// the kernel's ephemeral range. A port found with `bind(0)` is free only until the next
/// `bind(0)` or outgoing connection of any test, which the kernel may give the same number: a
/// service started on it a moment later then fails to bind (seen: a private etcd whose port a
/// test's HTTP server had taken, the etcd client then speaking HTTP/2 to that server). Below
/// the range the kernel hands out nothing by itself, and this process hands each port out
/// once, walking from an offset of its own so that two test processes at once rarely meet.
pub(crate) fn spare_port() -> u16 {
    static WALKED: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(ephemeral_ports_from() - LOWEST_SPARE_PORT);
    let offset = std::process::id() % span;
    (0..span)
        .map(|_| WALKED.fetch_add(1, Ordering::Relaxed))
        .map(|step| LOWEST_SPARE_PORT + u16::try_from((offset + step) % span).expect("in span"))
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a spare loopback port below the ephemeral range")
}

/// Where `spare_port` starts: above the ports of well-known services.
const LOWEST_SPARE_PORT: u16 = 10_000;

/// The first port of the kernel's ephemeral range (`net.ipv4.ip_local_port_range`; Linux's
/// default where it cannot be read).
pub(crate) fn ephemeral_ports_from() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|&from: &u16| from > LOWEST_SPARE_PORT + 1_000)
        .unwrap_or(32_768)
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
