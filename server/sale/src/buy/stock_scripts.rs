//! The buy path's Redis scripts (`lua/`): the one-round-trip buy (stored answer, rate
//! windows, claim and deduction of units or seats, leaving a marker under the order id),
//! the release of a claim whose request was refused after it, and the give-back of a
//! deduction whose pre-order will never commit. Each runs as one EVALSHA,
//! with every key it touches under the item's hash tag.

use crate::{lottery::scripts::LotteryKeys, orders::Holding};
use contract::SaleItem;
use uuid::Uuid;

use base::{
    lua::{BUY, RELEASE_CLAIM, RELEASE_DEDUCTION},
    redis::RedisStore,
};

/// How the value `lua/buy.lua` stores under a request id while its request is in flight
/// begins; no stored answer begins so.
const IN_FLIGHT: &[u8] = b"\0in-flight ";

/// The in-flight marker of the request making pre-order `order`: unique to that request, so
/// it frees its request id (`lua/release_claim.lua`) without touching anyone else's claim.
pub fn in_flight_marker(order: Uuid) -> Vec<u8> {
    [IN_FLIGHT, order.to_string().as_bytes()].concat()
}

/// Whether a value stored under a request id is an in-flight marker.
pub fn is_in_flight(stored: &[u8]) -> bool {
    stored.starts_with(IN_FLIGHT)
}

/// How long a claimed request id stays "in flight" if its request dies mid-way: longer than
/// a pre-order can take to commit, so a replay cannot deduct twice while the first one may
/// still commit (and should it all the same, PostgreSQL skips the second order).
pub const IN_FLIGHT_MS: u64 = 10_000;

/// What a released deduction does with its units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    BackToStock,
    /// Redis counted units PostgreSQL did not have: spending them brings Redis back to the
    /// truth.
    Kept,
}

/// The steps of `lua/buy.lua` one call runs (the stored answer is always looked up first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steps {
    /// Windows, claim and deduction: a whole buy in one round trip.
    Buy,
    /// The windows only, before the challenge.
    Windows,
    /// Claim and deduction, after the challenge.
    Deduct,
    /// Windows and claim: PostgreSQL deducts.
    WindowsAndClaim,
    /// The claim only: after the challenge, PostgreSQL deducting.
    Claim,
}

impl Steps {
    fn letters(self) -> &'static str {
        match self {
            Steps::Buy => "wcd",
            Steps::Windows => "w",
            Steps::Deduct => "cd",
            Steps::WindowsAndClaim => "wc",
            Steps::Claim => "c",
        }
    }
}

/// The three rate windows of one item a buy request goes through: per buyer, per client
/// address and for the whole item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub length_s: u64,
    pub per_buyer: u64,
    pub per_address: u64,
    pub per_item: u64,
}

/// One buy request as `lua/buy.lua` sees it.
#[derive(Clone, Copy, Debug)]
pub struct BuyCall<'a> {
    /// The units asked for; a seat buy takes one per seat instead.
    pub take: Holding,
    pub request_id: &'a str,
    pub client: &'a str,
    pub windows: Windows,
    pub per_user_limit: i64,
    /// The pre-order the deduction is for; its id names the deduction's marker.
    pub order: Uuid,
    /// The chosen seats of a seat buy; empty for units.
    pub seats: &'a [String],
    /// A lottery buy's code, checked and used in the same call; `None` for first come.
    pub code: Option<CodeCheck<'a>>,
}

/// A lottery code as the buy script checks it: the buyer's own for the item, live at `now_ms`.
#[derive(Clone, Copy, Debug)]
pub struct CodeCheck<'a> {
    pub code: &'a str,
    /// The time its lifetime is judged by (the lottery's clock), ms since the epoch.
    pub now_ms: i64,
}

/// A typed client over the Redis connection for the buy path's stock scripts: these scripts and keys are
/// reached only through it.
#[derive(Clone, Copy)]
pub struct StockClient<'a>(pub &'a RedisStore);

impl StockClient<'_> {
    /// The counters of an item's three rate windows a buy goes through: the buyer's, the
    /// client address's and the whole item's.
    pub fn window_keys(&self, sale: SaleItem, buyer: i64, client: &str) -> [String; 3] {
        [
            self.0.item_key(sale, format_args!("rl:user:{buyer}")),
            self.0.item_key(sale, format_args!("rl:ip:{client}")),
            self.0.item_key(sale, "rl:item"),
        ]
    }

    /// Runs `steps` of one buy request (`lua/buy.lua`): the script's code and its value.
    pub async fn buy(
        &self,
        call: &BuyCall<'_>,
        steps: Steps,
    ) -> redis::RedisResult<(i64, Vec<u8>)> {
        let sale = call.take.sale;
        let buyer = call.take.buyer.0;
        let [per_buyer, per_address, per_item] = self.window_keys(sale, buyer, call.client);
        let lottery = LotteryKeys::of(self.0, sale);
        // A first-come buy sends its letters as they are, without an allocation.
        let letters: std::borrow::Cow<str> = match call.code {
            Some(_) => format!("{}q", steps.letters()).into(),
            None => steps.letters().into(),
        };
        BUY.key(self.0.request_key(sale, buyer, call.request_id))
            .key(per_buyer)
            .key(per_address)
            .key(per_item)
            .key(self.0.stock_key(sale))
            .key(self.0.bought_key(sale))
            .key(self.0.pending_key(sale))
            .key(self.0.fence_key(sale))
            .key(self.0.seats_key(sale))
            .key(self.0.holders_log_key(sale))
            .key(lottery.codes)
            .key(lottery.used)
            .arg(letters.as_ref())
            .arg(in_flight_marker(call.order))
            .arg(IN_FLIGHT_MS)
            .arg(call.windows.length_s)
            .arg(call.windows.per_buyer)
            .arg(call.windows.per_address)
            .arg(call.windows.per_item)
            .arg(buyer)
            .arg(call.take.quantity)
            .arg(call.per_user_limit)
            .arg(call.order.to_string())
            .arg(call.code.map_or("", |check| check.code))
            .arg(call.code.map_or(0, |check| check.now_ms))
            .arg(call.seats)
            .invoke_async(&mut self.0.connection())
            .await
    }

    /// Frees the request id of `call`, refused after its claim, if it still holds this
    /// request's own marker (`lua/release_claim.lua`).
    pub async fn release_claim(&self, call: &BuyCall<'_>) -> redis::RedisResult<()> {
        let _: i64 = RELEASE_CLAIM
            .key(
                self.0
                    .request_key(call.take.sale, call.take.buyer.0, call.request_id),
            )
            .arg(in_flight_marker(call.order))
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(())
    }

    /// Gives back the deduction of pre-order `order`, which will never commit, once
    /// (`lua/release_deduction.lua`): the units released, or `None` when nothing was owed.
    /// `Units::Kept` leaves the units deducted (PostgreSQL had none left for them).
    pub async fn release_deduction(
        &self,
        sale: SaleItem,
        order: Uuid,
        units: Units,
    ) -> redis::RedisResult<Option<i64>> {
        let released: i64 = RELEASE_DEDUCTION
            .key(self.0.stock_key(sale))
            .key(self.0.bought_key(sale))
            .key(self.0.seats_key(sale))
            .key(self.0.pending_key(sale))
            .arg(order.to_string())
            .arg(match units {
                Units::BackToStock => "1",
                Units::Kept => "0",
            })
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok((released >= 0).then_some(released))
    }
}
