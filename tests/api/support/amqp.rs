//! RabbitMQ as the tests see it, apart from the server's own link: a connection of the
//! test's own, and the bodies of the messages a queue holds, read without taking them.

use lapin::{options::BasicGetOptions, Connection, ConnectionProperties};
use secrecy::ExposeSecret;

use crate::support::app::TestApp;

impl TestApp {
    /// A connection of the test's own to the deployment's broker (and vhost).
    pub(crate) async fn amqp_connection(&self) -> Connection {
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio);
        Connection::connect(self.state.settings.amqp_url.expose_secret(), properties)
            .await
            .expect("RabbitMQ")
    }

    /// The bodies of the messages ready in `queue` (none when it is not declared). They are
    /// read unacked on a connection of the test's own, which then closes: RabbitMQ puts
    /// every one back.
    pub(crate) async fn browse(&self, queue: &str) -> Vec<Vec<u8>> {
        let connection = self.amqp_connection().await;
        let channel = connection.create_channel().await.expect("a channel");
        let mut bodies = Vec::new();
        // A queue not declared yet closes the channel: nothing in it.
        while let Ok(Some(message)) = channel
            .basic_get(queue, BasicGetOptions { no_ack: false })
            .await
        {
            bodies.push(message.delivery.data);
        }
        let _ = connection.close(200, "browsed").await;
        bodies
    }
}
