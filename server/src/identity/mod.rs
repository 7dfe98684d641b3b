//! Admin identity: password hashing, console sessions, admin API tokens, login rate
//! limiting and its rules, and the credentials check that turns an admin request into an
//! [`Actor`].
//!
//! [`Actor`]: contract::Actor

pub mod authenticate;
pub mod buyer_token;
pub(crate) mod password;
pub mod rules;
pub mod secret_token;
pub mod users;
