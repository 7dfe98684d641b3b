//! Lottery sales (docs/lottery.md): for the scarcest items the right to buy is
//! handed out before the sale. Buyers register in a window (`routes`; the registrations of
//! an item reaching an instance together share one Redis call, `intake`; the leader keeps the
//! buyer API able to find the activity meanwhile, `registration`, however long before the
//! pre-warm the window opens), the leader draws once per item when the window closes, in an order anyone can
//! recompute from the seed committed beforehand (`rules::draw_order`), and each winner gets a
//! code with a lifetime, checked and used by the buy script in the same step as the deduction.
//! Units a code leaves (it expired, its buyer bought less, his order was cancelled, ops revoked
//! him) go to the next on the waitlist (`draw`, the leader's job).
//!
//! Where things live: PostgreSQL holds the seed, the draw's result (every registrant's rank,
//! the codes) and the final statuses; Redis holds the registration list before the draw and
//! the live state after it (codes, used codes, the waitlist), all under the item's hash tag.

pub mod draw;
pub mod intake;
pub mod ops;
pub mod registration;
pub mod routes;
pub mod rules;
pub mod scripts;
pub mod store;

use base::{
    clock::{Clock, SwappableClock},
    redis::RedisStore,
};
use contract::{BuyerEvent, RegistrationEvent, SaleItem, UserId};
use std::sync::Arc;

use crate::events::BuyerEvents;
use rules::Status;

/// What every instance shares of the lottery: the clock registration windows, the draw's
/// moment and codes' lifetimes are judged by (tests move it instead of waiting minutes),
/// and the registrations' way to Redis.
pub struct Lottery {
    clock: Arc<SwappableClock>,
    pub intake: intake::RegistrationIntake,
}

impl Lottery {
    /// On the wall clock; registrations go to `redis` in calls of at most
    /// `registration_call_max`, each call's size observed in `call_sizes`.
    pub fn new(
        redis: RedisStore,
        registration_call_max: usize,
        call_sizes: prometheus::Histogram,
    ) -> Self {
        Self {
            clock: Arc::default(),
            intake: intake::RegistrationIntake::spawn(redis, registration_call_max, call_sizes),
        }
    }

    /// Reads the time from `clock` from now on.
    pub fn use_clock(&self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    /// The same clock, for the buy funnel's code checks.
    pub fn clock(&self) -> Arc<SwappableClock> {
        Arc::clone(&self.clock)
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// The one place the leader's and ops' changes of registrants' statuses pass through (the
/// draw, the waitlist's codes, a revocation, the settling): each buyer is told by a
/// `registration` event on his stream (docs/buyer-events.md), after the change is in the stores. The
/// event names the status; the page reads the rest (his code, his place) from
/// `/registrations/me`. A code that buys changes its buyer's status inside the buy script,
/// which does not pass here: his order's events tell his page.
pub fn registration_changed(events: &BuyerEvents, sale: SaleItem, changes: &[(i64, Status)]) {
    for (buyer, status) in changes {
        events.publish(
            sale.activity,
            UserId(*buyer),
            BuyerEvent::Registration(RegistrationEvent {
                item_id: sale.item.0,
                status: *status,
                code: None,
                code_valid_from_ms: None,
                code_expires_ms: None,
                waitlist_position: None,
            }),
        );
    }
}
