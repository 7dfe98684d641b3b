//! Admin identity: password hashing, console sessions, admin API tokens, login rate
//! limiting and its rules, the credentials check that turns an admin request into an
//! [`Actor`], and the one gate every admin route and console call asks ([`authorize`]).
//!
//! [`Actor`]: contract::Actor

pub mod authenticate;
mod authorize;
pub mod buyer_token;
pub mod password;
pub mod rules;
pub mod secret_token;
pub mod users;

pub use authorize::authorize;
