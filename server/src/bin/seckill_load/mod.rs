//! The modules of `seckill-load`: the command line, the plan of who buys what,
//! the HTTP side, the bounded load loop, the tally of what came back, the invariant
//! check against PostgreSQL and Redis, and the report.

pub mod args;
pub mod check;
pub mod http;
pub mod plan;
pub mod report;
pub mod runner;
pub mod tally;
