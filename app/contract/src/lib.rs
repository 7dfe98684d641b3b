//! The JSON contract of `/admin/api` (docs/admin-api.md) and of the console's server
//! functions: what the server answers and the console shows, typed (enums as enums, ids as
//! newtypes), and the permission table both sides consult. It compiles for the server and
//! for the browser, so it depends on neither Leptos nor any store and does no I/O.

mod audit;
mod baselines;
mod catalog;
mod changes;
mod console_error;
mod control;
mod dashboard;
mod events;
mod hotkeys;
mod ids;
mod lottery;
mod money;
mod orders;
mod page;
mod pipeline;
mod prewarm;
mod readiness;
mod reconcile;
mod rehearsal;
mod roles;
mod sale_page;
mod session;

pub use audit::*;
pub use baselines::*;
pub use catalog::*;
pub use changes::*;
pub use console_error::*;
pub use control::*;
pub use dashboard::*;
pub use events::*;
pub use hotkeys::*;
pub use ids::*;
pub use lottery::*;
pub use money::*;
pub use orders::*;
pub use page::*;
pub use pipeline::*;
pub use prewarm::*;
pub use readiness::*;
pub use reconcile::*;
pub use rehearsal::*;
pub use roles::*;
pub use sale_page::*;
pub use session::*;
