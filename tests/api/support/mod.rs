//! What the tests stand on, and nothing they assert: the server under test and how to call
//! it (`app`), what they set up (`fixtures`), the one way to wait (`wait`), and the stand-ins
//! that make a shared service fail for one test (`proxy` for a TCP service, also a load
//! balancer over several, `etcd`, `postgres_server` and `redis_server` for a private etcd,
//! PostgreSQL or Redis on a spare port, `redis_cluster` for a private Redis Cluster, with
//! replicas that can take over), and a private Prometheus (`prometheus`) for the tests of
//! `deploy/`.

pub(crate) mod app;
pub(crate) mod etcd;
pub(crate) mod fixtures;
pub(crate) mod postgres_server;
pub(crate) mod prometheus;
pub(crate) mod proxy;
pub(crate) mod redis_cluster;
pub(crate) mod redis_server;
pub(crate) mod wait;

/// A loopback port nobody listens on right now, for a private service instance.
pub(crate) fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a spare loopback port")
}
