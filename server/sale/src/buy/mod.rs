//! The buy path: the buyer API's routes and the funnel every buy request runs through, cheapest
//! check first (admission, validation, token, activity and phase from memory, Bloom filter and
//! null cache, local sold-out flag, idempotent replay, rate limits, challenge, stock deduction
//! in Redis or PostgreSQL, the group-committed pre-order with its outbox row, the publish).
//! The in-memory activity cache, the challenge, the deduction gate with its redis/db hand-over
//! and the pre-order writer live here too.

pub mod activity_cache;
pub mod bloom;
pub mod challenge;
pub mod deduction;
pub mod funnel;
pub mod holders;
pub mod hot_keys;
pub mod in_flight;
pub mod kept_answers;
pub mod preorders;
pub mod routes;
pub mod rules;
pub mod settle;
pub mod stages;
pub mod stock_scripts;
pub mod traffic;
