//! The admin side as a whole: the `/admin/api` router that gathers every capability's admin
//! routes, the console's backend, the cross-site request check in front of both, and the
//! audit log of switch flips and operator actions.

pub(crate) mod audit;
mod audit_routes;
mod authorize;
pub(crate) mod console;
pub(crate) mod console_site;
pub(crate) mod csrf;
pub(crate) mod ops_audit;
pub(crate) mod reason;
pub mod routes;
pub(crate) use authorize::authorize;
