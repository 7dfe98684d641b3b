//! RabbitMQ as the order pipeline uses it: the topology (exchange, queues, dead-lettering,
//! delay queues), the message bodies, a confirming publisher per role, the buy path's
//! non-blocking publisher, and the batch consumer loop.

pub mod batch;
pub mod broker;
pub mod consume;
pub mod message;
pub mod publisher;
pub mod topology;
