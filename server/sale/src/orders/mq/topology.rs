//! The pipeline's RabbitMQ topology, named under `settings.amqp_prefix` so
//! deployments and tests sharing one broker never see each other's messages, and declared
//! idempotently whenever a channel opens (a broker that lost it gets it back).
//!
//! With the default prefix `seckill`:
//! * exchange `seckill.order` (direct): key `create` → quorum queue `seckill.order.create`,
//!   key `pay-timeout` → quorum queue `seckill.order.pay-timeout`;
//! * both quorum queues carry `x-delivery-limit` and dead-letter into the fanout exchange
//!   `seckill.order.dlx` → quorum queue `seckill.order.dead` (the message keeps its routing key);
//! * pay-timeout delay: one quorum queue per distinct delay, `seckill.order.pay-delay.{N}s`,
//!   with `x-message-ttl` = N s, dead-lettering into `seckill.order` with key `pay-timeout`.
//!   One queue per delay, because a TTL only expires messages at the head of a queue.
//!
//! Declarations are serialised within the process: a channel that re-declares a quorum
//! queue another channel is still creating gets `declare-ok` before the queue runs, and
//! consuming from it then crashes the whole connection (RabbitMQ 3.10, `noproc`).

use lapin::{
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, LongString, ShortString},
    BasicProperties, Channel, ExchangeKind,
};
use std::sync::Arc;
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::orders::mq::message::{CreateOrders, OrderCreated, PayTimeouts};

/// Outbox topic of a pre-order waiting for the create-order consumer.
pub const CREATE_ORDER_TOPIC: &str = "order.create";
use base::config::PipelineSettings;

/// Routing key of create-order messages on the order exchange.
pub const CREATE_KEY: &str = "create";
/// Routing key of due pay timeouts on the order exchange.
pub const PAY_TIMEOUT_KEY: &str = "pay-timeout";

/// The names of one deployment's exchanges and queues, and how they are declared.
#[derive(Clone, Debug)]
pub struct Topology {
    pub exchange: String,
    pub dead_exchange: String,
    pub create_queue: String,
    pub pay_timeout_queue: String,
    pub dead_queue: String,
    delivery_limit: u32,
    idle_expiry_ms: Option<u64>,
    declaring: Arc<Mutex<()>>,
}

/// One message ready to be published.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub exchange: String,
    pub routing_key: String,
    pub payload: Vec<u8>,
    /// The event id: the order id of a message of one order, the first order's of a
    /// batch; shown in the console's DLQ.
    pub message_id: String,
}

impl Outgoing {
    /// Persistent JSON with its message id.
    pub fn properties(&self) -> BasicProperties {
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(self.message_id.as_str().into())
    }
}

/// A message's id: its first order's.
fn first_id(mut orders: impl Iterator<Item = Uuid>) -> String {
    orders.next().map(|id| id.to_string()).unwrap_or_default()
}

impl Topology {
    pub fn new(prefix: &str, settings: &PipelineSettings) -> Self {
        Self {
            exchange: format!("{prefix}.order"),
            dead_exchange: format!("{prefix}.order.dlx"),
            create_queue: format!("{prefix}.order.create"),
            pay_timeout_queue: format!("{prefix}.order.pay-timeout"),
            dead_queue: format!("{prefix}.order.dead"),
            delivery_limit: settings.delivery_limit,
            idle_expiry_ms: settings.idle_queue_expiry_ms,
            declaring: Arc::default(),
        }
    }

    /// The TTL queue that holds pay timeouts for `seconds` before they come due.
    pub fn delay_queue(&self, seconds: u32) -> String {
        format!("{}.pay-delay.{seconds}s", self.exchange)
    }

    /// One create-order message for committed pre-orders (at least one).
    pub fn orders_created(&self, events: &[OrderCreated]) -> Outgoing {
        let body = CreateOrders::Batch {
            orders: events.to_vec(),
        };
        Outgoing {
            exchange: self.exchange.clone(),
            routing_key: CREATE_KEY.to_owned(),
            payload: serde_json::to_vec(&body).expect("create-order messages serialise"),
            message_id: first_id(events.iter().map(|event| event.order_id)),
        }
    }

    /// An outbox row's message: its topic decides the routing key. `None` for a topic this
    /// pipeline does not carry.
    pub fn outbox_message(
        &self,
        topic: &str,
        event_id: Uuid,
        payload: &serde_json::Value,
    ) -> Option<Outgoing> {
        (topic == CREATE_ORDER_TOPIC).then(|| Outgoing {
            exchange: self.exchange.clone(),
            routing_key: CREATE_KEY.to_owned(),
            payload: payload.to_string().into_bytes(),
            message_id: event_id.to_string(),
        })
    }

    /// One message with the pay timeouts of `order_ids` (at least one), into the delay
    /// queue of `seconds` (through the default exchange, which routes by queue name).
    pub fn pay_timeouts(&self, order_ids: &[Uuid], seconds: u32) -> Outgoing {
        let body = PayTimeouts::Batch {
            order_ids: order_ids.to_vec(),
        };
        Outgoing {
            exchange: String::new(),
            routing_key: self.delay_queue(seconds),
            payload: serde_json::to_vec(&body).expect("pay-timeout messages serialise"),
            message_id: first_id(order_ids.iter().copied()),
        }
    }

    /// A dead letter sent back where it came from: the order exchange, its routing key.
    pub fn requeued(&self, routing_key: &str, payload: Vec<u8>, message_id: String) -> Outgoing {
        Outgoing {
            exchange: self.exchange.clone(),
            routing_key: routing_key.to_owned(),
            payload,
            message_id,
        }
    }

    /// Declares the exchanges, the create, pay-timeout and dead queues and their bindings.
    /// Idempotent: re-declaring with the same arguments changes nothing.
    pub async fn declare(&self, channel: &Channel) -> Result<(), lapin::Error> {
        let _one_at_a_time = self.declaring.lock().await;
        let durable = ExchangeDeclareOptions {
            durable: true,
            // A deployment whose queues expire (tests) lets its exchanges go with them.
            auto_delete: self.idle_expiry_ms.is_some(),
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                &self.exchange,
                ExchangeKind::Direct,
                durable,
                FieldTable::default(),
            )
            .await?;
        channel
            .exchange_declare(
                &self.dead_exchange,
                ExchangeKind::Fanout,
                durable,
                FieldTable::default(),
            )
            .await?;
        self.declare_queue(channel, &self.dead_queue, self.quorum())
            .await?;
        self.bind(channel, &self.dead_queue, &self.dead_exchange, "")
            .await?;
        for (queue, key) in [
            (&self.create_queue, CREATE_KEY),
            (&self.pay_timeout_queue, PAY_TIMEOUT_KEY),
        ] {
            self.declare_queue(channel, queue, self.consumed()).await?;
            self.bind(channel, queue, &self.exchange, key).await?;
        }
        Ok(())
    }

    /// Declares the delay queue of `seconds`.
    pub async fn declare_delay(&self, channel: &Channel, seconds: u32) -> Result<(), lapin::Error> {
        let _one_at_a_time = self.declaring.lock().await;
        let mut arguments = self.quorum();
        arguments.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(i64::from(seconds) * 1000),
        );
        arguments.insert("x-dead-letter-exchange".into(), text(&self.exchange));
        arguments.insert("x-dead-letter-routing-key".into(), text(PAY_TIMEOUT_KEY));
        self.declare_queue(channel, &self.delay_queue(seconds), arguments)
            .await
    }

    /// Arguments of every queue: quorum, and the idle expiry when one is configured.
    fn quorum(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        arguments.insert("x-queue-type".into(), text("quorum"));
        if let Some(ms) = self.idle_expiry_ms {
            arguments.insert(
                "x-expires".into(),
                AMQPValue::LongLongInt(i64::try_from(ms).unwrap_or(i64::MAX)),
            );
        }
        arguments
    }

    /// Arguments of a consumed queue: poison messages dead-letter after the delivery limit.
    fn consumed(&self) -> FieldTable {
        let mut arguments = self.quorum();
        arguments.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(self.delivery_limit)),
        );
        arguments.insert("x-dead-letter-exchange".into(), text(&self.dead_exchange));
        arguments
    }

    async fn declare_queue(
        &self,
        channel: &Channel,
        queue: &str,
        arguments: FieldTable,
    ) -> Result<(), lapin::Error> {
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel.queue_declare(queue, options, arguments).await?;
        Ok(())
    }

    async fn bind(
        &self,
        channel: &Channel,
        queue: &str,
        exchange: &str,
        key: &str,
    ) -> Result<(), lapin::Error> {
        channel
            .queue_bind(
                queue,
                exchange,
                key,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
    }
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

/// A header's text value, whichever string type the broker used.
pub fn header_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => Some(text.to_string()),
        AMQPValue::ShortString(text) => Some(text.to_string()),
        _ => None,
    }
}

/// A header's integer value, whichever width the broker used.
pub fn header_integer(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::Timestamp(n) => i64::try_from(*n).ok(),
        _ => None,
    }
}

/// A field of a header table.
pub fn field<'a>(table: &'a FieldTable, name: &str) -> Option<&'a AMQPValue> {
    table.inner().get(&ShortString::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prefix_gives_the_names_of_the_spec() {
        let topology = Topology::new("seckill", &PipelineSettings::default());
        assert_eq!(topology.exchange, "seckill.order");
        assert_eq!(topology.create_queue, "seckill.order.create");
        assert_eq!(topology.dead_queue, "seckill.order.dead");
        assert_eq!(topology.pay_timeout_queue, "seckill.order.pay-timeout");
        assert_eq!(topology.delay_queue(900), "seckill.order.pay-delay.900s");
    }

    #[test]
    fn pay_timeouts_go_to_the_delay_queue_of_their_activity() {
        let topology = Topology::new("t1", &PipelineSettings::default());
        let orders = [Uuid::new_v4(), Uuid::new_v4()];
        let message = topology.pay_timeouts(&orders, 60);
        assert_eq!(message.exchange, "");
        assert_eq!(message.routing_key, "t1.order.pay-delay.60s");
        assert_eq!(message.message_id, orders[0].to_string());
        let body: PayTimeouts = serde_json::from_slice(&message.payload).expect("json");
        assert_eq!(body.order_ids(), orders);
    }

    #[test]
    fn only_create_order_rows_have_a_route() {
        let topology = Topology::new("t1", &PipelineSettings::default());
        let id = Uuid::new_v4();
        let payload = serde_json::json!({ "order_id": id });
        let message = topology
            .outbox_message(CREATE_ORDER_TOPIC, id, &payload)
            .expect("routed");
        assert_eq!(message.routing_key, CREATE_KEY);
        assert_eq!(message.message_id, id.to_string());
        assert!(topology.outbox_message("other", id, &payload).is_none());
    }
}
