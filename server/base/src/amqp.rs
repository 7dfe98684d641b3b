//! The link to RabbitMQ: one long-lived connection, opened lazily and re-opened when it
//! drops, so the server starts and serves while RabbitMQ is away (the outbox keeps what
//! could not be published).
//!
//! The connect runs in a task of its own that every caller shares: callers wait with
//! their own timeouts, and one giving up must not cancel a connect the others (and the
//! next caller) are waiting for. A broker busy declaring queues can take seconds to
//! answer, and a connect that every impatient caller restarted would never finish.

use futures::{
    future::{BoxFuture, Shared},
    FutureExt,
};
use lapin::{Connection, ConnectionProperties};
use secrecy::{ExposeSecret, SecretString};
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

/// Longest a connect may take before it counts as failed and the next caller tries again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type Connecting = Shared<BoxFuture<'static, Result<Arc<Connection>, lapin::Error>>>;

#[derive(Default)]
struct Slot {
    open: Option<Arc<Connection>>,
    connecting: Option<Connecting>,
}

#[derive(Clone)]
pub struct AmqpLink {
    url: SecretString,
    slot: Arc<Mutex<Slot>>,
}

impl AmqpLink {
    pub fn new(url: SecretString) -> Self {
        Self {
            url,
            slot: Arc::default(),
        }
    }

    /// The open connection, connecting first if there is none or it has closed.
    pub async fn connection(&self) -> Result<Arc<Connection>, lapin::Error> {
        let connecting = {
            let mut slot = self
                .slot
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(connection) = slot.open.as_ref() {
                if connection.status().connected() {
                    return Ok(connection.clone());
                }
            }
            slot.connecting
                .get_or_insert_with(|| self.connect())
                .clone()
        };
        let result = connecting.clone().await;
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Only this attempt: a newer one started after it failed belongs to its own callers.
        if slot
            .connecting
            .as_ref()
            .is_some_and(|current| current.ptr_eq(&connecting))
        {
            slot.connecting = None;
        }
        if let Ok(connection) = &result {
            slot.open = Some(connection.clone());
        }
        result
    }

    fn connect(&self) -> Connecting {
        let url = self.url.clone();
        let task = tokio::spawn(async move {
            let properties = ConnectionProperties::default()
                .with_executor(tokio_executor_trait::Tokio::current())
                .with_reactor(tokio_reactor_trait::Tokio);
            match tokio::time::timeout(
                CONNECT_TIMEOUT,
                Connection::connect(url.expose_secret(), properties),
            )
            .await
            {
                Ok(connected) => connected.map(Arc::new),
                Err(_) => Err(lapin::Error::IOError(Arc::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "RabbitMQ did not complete the connection handshake in time",
                )))),
            }
        });
        async move {
            task.await.unwrap_or_else(|join| {
                Err(lapin::Error::IOError(Arc::new(std::io::Error::other(
                    join.to_string(),
                ))))
            })
        }
        .boxed()
        .shared()
    }
}
