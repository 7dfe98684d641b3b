//! RabbitMQ as the order pipeline uses it: the topology (exchange, queues, dead-lettering,
//! delay queues), the message bodies, a confirming publisher per role, the buy path's
//! non-blocking publisher, and the batch consumer loop.

pub(crate) mod batch;
pub mod broker;
pub(crate) mod consume;
pub mod message;
pub(crate) mod publisher;
pub mod topology;
