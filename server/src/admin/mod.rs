//! The admin side as a whole: the `/admin/api` router that gathers every capability's admin
//! routes, the console's backend, the cross-site request check in front of both, and the
//! audit log's route (the log itself is `sale::audit`).

mod audit_routes;
pub(crate) mod console;
pub(crate) mod console_site;
pub(crate) mod csrf;
pub mod routes;
