//! The admin API as a whole: the `/admin/api` router that gathers every capability's admin
//! routes, and the audit log's route (the log itself is `sale::audit`). The cross-site check
//! in front of it and the console are the `seckill` crate's (`server/src/console/`).

mod audit_routes;
pub mod routes;
