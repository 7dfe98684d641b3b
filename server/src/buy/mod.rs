//! The buy path: the buyer API's routes and the funnel every buy request runs through, cheapest
//! check first (admission, validation, token, activity and phase from memory, Bloom filter and
//! null cache, local sold-out flag, idempotent replay, rate limits, challenge, stock deduction
//! in Redis or PostgreSQL, the group-committed pre-order with its outbox row, the publish).
//! The in-memory activity cache, the challenge, the deduction gate with its redis/db hand-over
//! and the pre-order writer live here too.

pub(crate) mod activity_cache;
pub(crate) mod bloom;
pub mod challenge;
pub(crate) mod deduction;
pub(crate) mod funnel;
pub(crate) mod holders;
pub mod hot_keys;
pub(crate) mod in_flight;
pub(crate) mod kept_answers;
pub(crate) mod preorders;
pub(crate) mod routes;
pub(crate) mod rules;
pub(crate) mod settle;
pub(crate) mod stages;
pub mod stock_scripts;
