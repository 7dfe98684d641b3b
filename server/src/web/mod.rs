//! The binary's HTTP plumbing, beneath every route: who a request comes from (resolved once,
//! outermost), the listener's cap on open connections, the request counters and `/metrics`, and the health probes.

pub(crate) mod client_address;
pub(crate) mod connections;
pub(crate) mod health;
pub(crate) mod http_metrics;
