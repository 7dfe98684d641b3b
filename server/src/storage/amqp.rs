//! The link to RabbitMQ: one long-lived connection, opened lazily and re-opened when it
//! drops, so the server starts and serves while RabbitMQ is away (the outbox keeps what
//! could not be published).

use lapin::{Connection, ConnectionProperties};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use tokio::sync::Mutex;

#[derive(Clone)]
pub struct AmqpLink {
    url: SecretString,
    connection: Arc<Mutex<Option<Arc<Connection>>>>,
}

impl AmqpLink {
    pub fn new(url: SecretString) -> Self {
        Self {
            url,
            connection: Arc::default(),
        }
    }

    /// The open connection, connecting first if there is none or it has closed.
    pub async fn connection(&self) -> Result<Arc<Connection>, lapin::Error> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            if connection.status().connected() {
                return Ok(connection.clone());
            }
        }
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio);
        let connection = Arc::new(Connection::connect(self.url.expose_secret(), properties).await?);
        *slot = Some(connection.clone());
        Ok(connection)
    }
}
