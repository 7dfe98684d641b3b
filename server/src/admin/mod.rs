//! The admin side as a whole: the `/admin/api` router that gathers every capability's admin
//! routes, the console's backend, and the audit log of switch flips and operator actions.

pub mod audit;
mod audit_routes;
mod authorize;
pub mod console;
pub mod ops_audit;
pub mod reason;
pub mod routes;
pub use authorize::authorize;
