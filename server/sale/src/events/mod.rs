//! Buyer events (docs/buyer-events.md): what a buyer waits for, pushed to his sale page instead of
//! polled. Whoever changes an order's state (the create-order consumer, the payment, the
//! pay timeout, a void) or a registration's publishes through [`BuyerEvents`] after its
//! commit; the event goes into the buyer's log of the activity in Redis and is announced on
//! one Redis channel in the same script (`log`); every instance's one subscriber hands it to
//! the buyer's stream if it holds one (`hub`); `GET /api/events` serves the stream and
//! resumes it from the log with `Last-Event-ID` (`routes`). The same streams carry the
//! sale's units left as they move (`units`), read once a second for the whole instance.
//! Why Redis pub/sub and not RabbitMQ: docs/buyer-events.md.

pub mod hub;
pub mod log;
mod publisher;
pub mod routes;
pub mod rules;
pub mod units;

pub use hub::Hub;
pub use publisher::BuyerEvents;
