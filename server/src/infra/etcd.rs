//! The link to etcd: a client created lazily and kept, so an instance starts and serves
//! with etcd away. Handlers never call etcd; only the control-plane tasks do.

use etcd_client::{Client, ConnectOptions};
use std::{sync::Arc, time::Duration};
use tokio::sync::Mutex;

#[derive(Clone)]
pub struct EtcdLink {
    endpoints: Arc<[String]>,
    client: Arc<Mutex<Option<Client>>>,
}

impl EtcdLink {
    pub(crate) fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints: endpoints.into(),
            client: Arc::default(),
        }
    }

    /// A connected client (clones share one channel), connecting first if needed.
    pub(crate) async fn client(&self) -> Result<Client, etcd_client::Error> {
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
    pub(crate) async fn probe(&self) -> Result<(), etcd_client::Error> {
        let mut client = self.client().await?;
        client.status().await.map(|_| ())
    }
}
