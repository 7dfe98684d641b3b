//! The link to etcd: a client created lazily and kept, so an instance starts and serves
//! with etcd away. Handlers never call etcd; only the control-plane tasks do.

use etcd_client::{Client, ConnectOptions};
use prometheus::HistogramVec;
use std::{future::Future, sync::Arc, time::Duration};
use tokio::sync::Mutex;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct EtcdLink {
    endpoints: Arc<[String]>,
    client: Arc<Mutex<Option<Client>>>,
    calls: HistogramVec,
}

/// The etcd calls the timings tell apart.
#[derive(Clone, Copy, Debug)]
pub enum EtcdCall {
    /// A read (the switch board's, a watcher's full reload, the live instances).
    Get,
    /// A node report written under its lease.
    Put,
    /// A flip: the value and its note in one transaction.
    Txn,
    /// A lease granted or kept alive (heartbeats, the election).
    Lease,
}

impl EtcdCall {
    fn label(self) -> &'static str {
        match self {
            Self::Get => "etcd.get",
            Self::Put => "etcd.put",
            Self::Txn => "etcd.txn",
            Self::Lease => "etcd.lease",
        }
    }
}

impl EtcdLink {
    pub fn new(endpoints: Vec<String>, metrics: &Metrics) -> Self {
        Self {
            endpoints: endpoints.into(),
            client: Arc::default(),
            calls: metrics.dependency_calls.clone(),
        }
    }

    /// Runs one etcd call, timed into `seckill_dependency_call_duration_seconds`.
    pub async fn timed<T>(
        &self,
        call: EtcdCall,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        let started = std::time::Instant::now();
        let outcome = request.await;
        let result = if outcome.is_ok() { "ok" } else { "error" };
        self.calls
            .with_label_values(&[call.label(), result])
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    /// A connected client (clones share one channel), connecting first if needed.
    pub async fn client(&self) -> Result<Client, etcd_client::Error> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(3));
        let client = Client::connect(self.endpoints.as_ref(), Some(options)).await?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Whether etcd answers now (a status call on the first endpoint that replies).
    pub async fn probe(&self) -> Result<(), etcd_client::Error> {
        let mut client = self.client().await?;
        client.status().await.map(|_| ())
    }
}
