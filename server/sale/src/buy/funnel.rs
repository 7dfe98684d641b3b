//! The buy funnel (docs/buyer-api.md): each stage in order, cheapest first, each counted as
//! passed or stopped by reason in `seckill_funnel_requests_total`, each one method of
//! [`Funnel`] in this order: (1) admission, before the body is read, (2) validation, (3)
//! the buyer token, (4) the activity and item from the in-memory catalogue, (5) the phase,
//! (6) the local sold-out flag, (7) the stored answer of the request id, (8) the rate
//! limits, (9) the challenge, (10) the claim and deduction, (11) the pre-order, and (12)
//! the publish, which the pre-order writer starts for the whole batch (`preorders`) before
//! it answers. Steps 7, 8 and 10 are one Redis script (`lua/buy.lua`), so a buy costs one
//! Redis round trip (with the challenge on, two); a success's answer is stored after the
//! buyer has it, with the other answers waiting then, in one round trip (`kept_answers`).
//!
//! Replays win over cheap refusals: the phase and the sold-out flag refuse from memory
//! only a buyer who cannot have won (not in the item's holder set); a holder is sent to
//! the stored answer of his request id, and with none stored, through his rate windows
//! before PostgreSQL is asked for the order of that id. A refused request leaves nothing
//! behind: only a success is stored (an hour) and replayed byte for byte; a request refused
//! after its claim frees its request id again.
//!
//! The client's address is the one `base::client_address` resolves (behind trusted proxies,
//! the forwarded client), counted by its /64 when it is IPv6, in the windows and hot keys.
//! Hot keys (`hotkeys`): once the buyer token is checked, the request's item, buyer and
//! address are handed to the hot-key counter without waiting, and a buyer or address under a
//! `block` key is refused there; a `limit` key's bucket sits in front of the local bucket of
//! step 8.
//!
//! Steps 8–12 run in a task of their own: a client that hangs up cannot cut a request
//! between its deduction and its pre-order, so the answer is always stored for the replay.
//!
//! A deduction the funnel cannot account for is settled here when it can be, and by
//! reconciliation otherwise (`reconcile`): a deduction whose answer was lost is released
//! by its order id (the script's marker proves whether it happened); a pre-order whose
//! commit failed ambiguously is voided in PostgreSQL first, then released.

use crate::buy::stock_scripts::StockClient;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use contract::{ActivityKind, SaleItem};
use serde::Deserialize;
use sqlx::PgPool;
use std::{
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering},
    sync::{Arc, LazyLock},
    time::Duration,
};
use tokio::sync::Semaphore;
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    buy::settle::{self, Deduction},
    buy::traffic::ActivityTraffic,
    buy::{
        activity_cache::{CachedActivity, CachedItem, Catalogue, LookupError},
        challenge::Challenges,
        deduction::DeductionGate,
        holders::HolderSets,
        hot_keys::HotKeyGate,
        in_flight::{self, Entry, First, Running},
        kept_answers::{Kept, KeptAnswers},
        preorders::{self, OnTheWay, PreOrder, PreorderWriter, Reservation, Verdict},
        rules::{
            phase, valid_quantity, valid_request_id, Outcome, Phase, Refusal, ScriptAnswer,
            UnknownAnswer,
        },
        stages::{self, Mark, Stage, StageCounters},
        stock_scripts::{is_in_flight, BuyCall, CodeCheck, Steps, Units, Windows},
    },
    catalog::copies,
    catalog::rules::{valid_seat_code, MAX_PER_USER_LIMIT},
    identity::buyer_token::{Buyer, BuyerTokens},
    switches::{SwitchValues, Switches},
};
use base::slow_bodies;
use base::{
    client_address,
    clock::SwappableClock,
    config::{AsyncMode, BuySettings, DeductionMode},
    metrics::Metrics,
    quiet_log::quiet,
    redis::RedisStore,
    tally::{self, PathTotals, Tally},
    token_bucket::TokenBucket,
};

/// How long a successful answer is kept for replays.
const SUCCESS_TTL_S: u64 = 3600;
/// What a replay of a request in flight on another instance is told to wait before retrying.
const IN_PROGRESS_RETRY_S: u32 = 1;
/// How long a replay of a request in flight on this instance waits for its answer.
const REPLAY_WAIT: Duration = Duration::from_secs(3);
/// How long the buy path keeps trying to give back a deduction whose answer was lost: longer
/// than a Redis failover takes.
const UNANSWERED_PATIENCE: Duration = Duration::from_secs(30);
/// Deductions whose answers were lost that are retried at once. During an outage every
/// request loses its answer; beyond these, each gets one try and reconciliation the rest.
const UNANSWERED_RETRIED: usize = 64;

/// Body of `POST /api/seckill/buy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuyRequest {
    pub activity_id: i64,
    pub item_id: i64,
    pub quantity: i64,
    #[serde(default)]
    pub challenge_id: Option<String>,
    #[serde(default)]
    pub answer: Option<i64>,
    /// A lottery activity's code (docs/lottery.md); none for first come.
    #[serde(default)]
    pub code: Option<String>,
}

/// Body of `POST /api/seckill/seats`: all these seats of a seated activity, or none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeatsRequest {
    pub activity_id: i64,
    pub seats: Vec<String>,
    #[serde(default)]
    pub challenge_id: Option<String>,
    #[serde(default)]
    pub answer: Option<i64>,
}

/// Which of the two buy endpoints a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    Units,
    Seats,
}

/// A validated request, whichever endpoint it came through.
struct Purchase {
    activity_id: i64,
    /// Named by a units request; a seats request buys its activity's ticket item.
    item_id: Option<i64>,
    quantity: i64,
    seats: Vec<String>,
    challenge_id: Option<String>,
    answer: Option<i64>,
    code: Option<String>,
}

fn parse(ask: Ask, body: &[u8]) -> Result<Purchase, String> {
    let invalid = |error: serde_json::Error| format!("invalid body: {error}");
    let purchase = match ask {
        Ask::Units => {
            let request: BuyRequest = serde_json::from_slice(body).map_err(invalid)?;
            if request
                .code
                .as_deref()
                .is_some_and(|code| !crate::lottery::rules::well_formed_code(code))
            {
                return Err("code is malformed".into());
            }
            Purchase {
                activity_id: request.activity_id,
                item_id: Some(request.item_id),
                quantity: request.quantity,
                seats: Vec::new(),
                challenge_id: request.challenge_id,
                answer: request.answer,
                code: request.code,
            }
        }
        Ask::Seats => {
            let request: SeatsRequest = serde_json::from_slice(body).map_err(invalid)?;
            let mut distinct = std::collections::HashSet::new();
            if let Some(bad) = request
                .seats
                .iter()
                .find(|seat| !valid_seat_code(seat) || !distinct.insert(seat.as_str()))
            {
                return Err(format!("seat `{bad}` is malformed or listed twice"));
            }
            Purchase {
                activity_id: request.activity_id,
                item_id: None,
                quantity: i64::try_from(request.seats.len()).unwrap_or(i64::MAX),
                seats: request.seats,
                challenge_id: request.challenge_id,
                answer: request.answer,
                code: None,
            }
        }
    };
    if !valid_quantity(purchase.quantity, MAX_PER_USER_LIMIT) {
        return Err("quantity must be between 1 and the per-user limit".into());
    }
    Ok(purchase)
}

/// A stage's result: what the next stage needs, or the request's answer (a refusal, or
/// a replay's first answer).
type Passed<T> = Result<T, Answer>;

/// The activity item a request buys, as the catalogue has it.
struct Target {
    activity_id: i64,
    item_id: i64,
    per_user_limit: i64,
    price_cents: i64,
}

impl Target {
    /// The pre-order a claimed `purchase` makes, to be deducted in Redis unless the
    /// deduction gate sends it to the database.
    fn pre_order(
        &self,
        user_id: i64,
        request_id: &str,
        purchase: &Purchase,
        switches: &SwitchValues,
    ) -> PreOrder {
        PreOrder {
            // Time-ordered: orders' primary key then grows at its right edge, where a
            // sale's inserts and the consumer's completions find the same few hot pages,
            // instead of a cold leaf per order (a full page in the WAL after a checkpoint).
            // The 74 random bits keep it unguessable.
            id: Uuid::now_v7(),
            activity_id: self.activity_id,
            item_id: self.item_id,
            user_id,
            quantity: purchase.quantity,
            amount_cents: self.price_cents.saturating_mul(purchase.quantity),
            request_id: request_id.to_owned(),
            seats: purchase.seats.clone(),
            reservation: Reservation::Redis {
                per_user_limit: self.per_user_limit,
            },
            recorded: switches.async_mode == AsyncMode::Record,
        }
    }
}

/// What steps 7–12 need of a request; owned, for the task they run in.
struct Claimed {
    switches: Arc<SwitchValues>,
    /// The client's address as windows and hot keys count it (an IPv6 client by its /64),
    /// and as the rate windows key it.
    ip: IpAddr,
    client: String,
    challenge_id: Option<String>,
    challenge_answer: Option<i64>,
    /// Under `Reservation::Redis`, with the item's per-user limit.
    order: PreOrder,
    /// A lottery buy's code with the lottery clock's time when the request came.
    code: Option<(String, i64)>,
}

impl Claimed {
    /// The request as the buy script takes it.
    fn call(&self) -> BuyCall<'_> {
        let limits = &self.switches.limits;
        BuyCall {
            take: self.order.holding(),
            request_id: &self.order.request_id,
            client: &self.client,
            windows: Windows {
                length_s: limits.rate_window_s,
                per_buyer: limits.per_user_per_window,
                per_address: limits.per_ip_per_window,
                per_item: limits.per_item_per_window,
            },
            per_user_limit: self.order.reservation.per_user_limit(),
            order: self.order.id,
            seats: &self.order.seats,
            code: self.code.as_ref().map(|(code, now_ms)| CodeCheck {
                code,
                now_ms: *now_ms,
            }),
        }
    }
}

/// How a pre-order came out of the writer, for the answer.
enum Committed {
    /// Written now.
    This,
    /// Its request id had an order already, committed earlier: the answer names that one.
    Earlier(Uuid),
}

/// A finished answer: what the client gets, and what a replay gets again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub retry_after_s: Option<u32>,
    pub body: Bytes,
}

impl Answer {
    fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            retry_after_s: None,
            body: Bytes::from(value.to_string()),
        }
    }

    pub fn refusal(outcome: Outcome, message: &str) -> Self {
        // The storm's answers are one of these, thousands a second: serialised once.
        static STANDARD: LazyLock<Vec<Bytes>> = LazyLock::new(|| {
            Outcome::ALL
                .iter()
                .map(|outcome| Answer::serialised(*outcome, outcome.message()).body)
                .collect()
        });
        if message == outcome.message() {
            return Self {
                status: outcome.status(),
                retry_after_s: None,
                body: STANDARD[outcome as usize].clone(),
            };
        }
        Self::serialised(outcome, message)
    }

    fn serialised(outcome: Outcome, message: &str) -> Self {
        Self::json(
            outcome.status(),
            serde_json::json!({ "code": outcome.code(), "message": message }),
        )
    }

    /// `"<status> <retry-after or 0>\n<body>"`, the form kept in Redis.
    fn encode(&self) -> Vec<u8> {
        let mut bytes =
            format!("{} {}\n", self.status, self.retry_after_s.unwrap_or(0)).into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    fn decode(stored: &[u8]) -> Option<Self> {
        let newline = stored.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&stored[..newline]).ok()?;
        let (status, retry) = head.split_once(' ')?;
        let retry_after_s = retry.parse::<u32>().ok().filter(|s| *s > 0);
        Some(Self {
            status: status.parse().ok()?,
            retry_after_s,
            body: Bytes::copy_from_slice(&stored[newline + 1..]),
        })
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Step 1: requests in flight on this instance, against a limit that can change live.
struct Admission {
    in_flight: AtomicU64,
}

/// A request's place in flight; leaving frees it.
struct Admitted<'a>(&'a AtomicU64);

impl Admission {
    fn enter(&self, limit: u64) -> Option<Admitted<'_>> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let admitted = Admitted(&self.in_flight);
        (before < limit).then_some(admitted)
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The stage counters (`stages`), and the answers of the stages that stop a request.
struct StageCounts(StageCounters);

impl StageCounts {
    fn pass(&self, stage: Stage) {
        self.count(stage, Mark::Pass);
    }

    /// Counts what happened at `stage` besides passing or stopping (`REPLAY`, `OVERRULED`).
    fn count(&self, stage: Stage, mark: Mark) {
        self.0.count(stage, mark);
    }

    fn stop(&self, stage: Stage, outcome: Outcome) -> Answer {
        self.stop_with(stage, outcome, outcome.message())
    }

    fn stop_with(&self, stage: Stage, outcome: Outcome, message: &str) -> Answer {
        self.count(stage, Mark::Stop(outcome));
        Answer::refusal(outcome, message)
    }

    /// A stock script answered a code it does not document: no refusal can be read into it,
    /// so it is answered like any other internal failure, and counted apart for ops.
    fn unknown_answer(&self, script: &str, unknown: UnknownAnswer, order: &PreOrder) -> Answer {
        quiet!(
            error, "buy.script_unknown_answer",
            script, error = %unknown, order = %order.id, activity = order.activity_id,
            item = order.item_id, "stock script out of step with the server; the deduction is unknown"
        );
        self.0
            .metrics()
            .stock_script_unknown_answers
            .with_label_values(&[script])
            .inc();
        self.stop(Stage::Deduction, Outcome::Degraded)
    }
}

pub struct Funnel {
    settings: BuySettings,
    switches: Switches,
    admission: Admission,
    bucket: TokenBucket,
    /// The in-memory catalogue, shared with the pre-warm, readiness and reconciliation
    /// (`SaleState::catalogue`), which refresh or read it.
    catalogue: Arc<Catalogue>,
    pub challenges: Challenges,
    /// Which layer deducts now, and the db → redis hand-over's state (`SaleState::deduction`).
    deduction: Arc<DeductionGate>,
    /// Hot-key counting and the reactions to keys in force.
    hotkeys: Arc<dyn HotKeyGate>,
    /// Who holds units of the items this instance refuses from memory.
    holders: HolderSets,
    /// The requests running here, for their replays to wait on.
    running: Arc<Running<Answer>>,
    /// Successful answers on their way to Redis, for replays.
    kept: KeptAnswers,
    tokens: Arc<BuyerTokens>,
    preorders: PreorderWriter,
    redis: RedisStore,
    /// For voiding a pre-order whose commit failed ambiguously before giving its units back.
    db: PgPool,
    /// Permits to keep retrying the release of a deduction whose answer was lost.
    unanswered: Arc<Semaphore>,
    /// The time a lottery code's lifetime is judged by (`SaleState::lottery`'s clock).
    lottery_clock: Arc<SwappableClock>,
    counts: StageCounts,
    /// What finished requests cost the stores, per outcome.
    path: PathTotals,
    /// Buy requests per activity, for the impact of a flip.
    traffic: ActivityTraffic,
}

/// What a funnel is made of; named, because most of these are handles of one type family.
pub struct FunnelParts {
    pub settings: BuySettings,
    pub switches: Switches,
    pub catalogue: Arc<Catalogue>,
    pub deduction: Arc<DeductionGate>,
    pub hotkeys: Arc<dyn HotKeyGate>,
    pub tokens: Arc<BuyerTokens>,
    pub preorders: PreorderWriter,
    pub redis: RedisStore,
    pub db: PgPool,
    pub metrics: Metrics,
    pub lottery_clock: Arc<SwappableClock>,
}

impl Funnel {
    pub fn new(parts: FunnelParts) -> Self {
        let FunnelParts {
            settings,
            switches,
            catalogue,
            deduction,
            hotkeys,
            tokens,
            preorders,
            redis,
            db,
            metrics,
            lottery_clock,
        } = parts;
        Self {
            admission: Admission {
                in_flight: AtomicU64::new(0),
            },
            bucket: TokenBucket::new(),
            deduction,
            challenges: Challenges::new(redis.clone()),
            running: Running::new(),
            kept: KeptAnswers::start(redis.clone(), SUCCESS_TTL_S, PathTotals::of(&metrics)),
            holders: HolderSets::new(
                redis.clone(),
                db.clone(),
                Duration::from_millis(settings.sold_out_flag_ms),
                metrics.holder_set_refreshes.clone(),
                metrics.holder_set_entries_read.clone(),
            ),
            settings,
            switches,
            catalogue,
            hotkeys,
            tokens,
            preorders,
            redis,
            db,
            unanswered: Arc::new(Semaphore::new(UNANSWERED_RETRIED)),
            lottery_clock,
            path: PathTotals::of(&metrics),
            counts: StageCounts(StageCounters::new(metrics)),
            traffic: ActivityTraffic::default(),
        }
    }

    /// Buy requests in flight on this instance now (admission's count).
    pub fn in_flight(&self) -> u64 {
        self.admission.in_flight.load(Ordering::Acquire)
    }

    /// Buy requests per activity since the start, and in flight now.
    pub fn traffic(&self) -> &ActivityTraffic {
        &self.traffic
    }

    /// Pre-orders waiting for the group-commit writer now.
    pub fn preorders_queued(&self) -> usize {
        self.preorders.queued()
    }

    /// Runs a buy (`Ask::Units`) or seats (`Ask::Seats`) request through the whole funnel.
    /// The body is read only once the request is admitted.
    pub async fn buy(
        self: &Arc<Self>,
        ask: Ask,
        headers: &HeaderMap,
        client: IpAddr,
        body: Body,
    ) -> Answer {
        let tally = Arc::new(Tally::default());
        let run = stages::scoped(self.run(ask, headers, client, body));
        let answer = match tally::scoped(tally.clone(), run).await {
            Ok(answer) | Err(answer) => answer,
        };
        self.path
            .finished(tally::Outcome::of_status(answer.status), &tally);
        answer
    }

    /// The stages in order; the first that stops the request answers it.
    async fn run(
        self: &Arc<Self>,
        ask: Ask,
        headers: &HeaderMap,
        client: IpAddr,
        body: Body,
    ) -> Passed<Answer> {
        // One snapshot for the whole request: a flip applies from the next request on.
        let snapshot = self.switches.current();
        let switches = snapshot.as_ref();
        let in_flight = self.admit(switches)?;
        // Until it hands its pre-order over, or is answered without one: a batch waits
        // for company only while some request may still bring it.
        let on_the_way = self.preorders.on_the_way();
        let body = self.read_body(body).await?;
        let (request_id, purchase) = self.validate(ask, headers, &body)?;
        let Buyer {
            id: user_id,
            rehearsal,
        } = self.authenticate(headers)?;
        // Only the token says whose traffic this is: the stages passed so far are counted
        // now, with a rehearsal's apart from the sale's.
        if copies::is_rehearsal(rehearsal) {
            stages::mark_rehearsal();
        }
        for stage in [Stage::Admission, Stage::Validate, Stage::Auth] {
            self.counts.pass(stage);
        }
        // Counted only once the token is checked: a key no request may heat without a
        // buyer's token behind it (anyone could otherwise block an address or an item).
        // A rehearsal's synthetic buyer heats nothing: its load is no real sale's traffic.
        let client = client_address::counted(client);
        if !copies::is_rehearsal(rehearsal) {
            self.hotkeys
                .sample(purchase.item_id, Some(user_id), Some(client));
        }
        self.check_blocked(user_id, client)?;
        let (activity, target) = self.look_up(ask, &purchase, rehearsal).await?;
        let _counted = self.traffic.enter(target.activity_id);
        let lottery = activity.lottery.is_some();
        let asked = Asked {
            sale: SaleItem::new(target.activity_id, target.item_id),
            user_id,
            request_id,
        };
        // What steps 7–12 take, made only for a request that gets that far (or a holder's
        // that a local refusal sends through his windows first).
        let claim = || {
            Arc::new(Claimed {
                switches: snapshot.clone(),
                ip: client,
                client: client.to_string(),
                challenge_id: purchase.challenge_id.clone(),
                challenge_answer: purchase.answer,
                order: target.pre_order(user_id, request_id, &purchase, switches),
                code: purchase
                    .code
                    .clone()
                    .map(|code| (code, self.lottery_clock.now_ms())),
            })
        };
        self.check_phase(
            switches,
            &activity,
            &target,
            purchase.quantity,
            &asked,
            &claim,
        )
        .await?;
        self.check_sold_out_flag(lottery, &asked, &claim).await?;
        let key = self.redis.request_key(asked.sale, user_id, request_id);
        let first = match self.running.enter(key) {
            Entry::First(first) => first,
            Entry::Replay(answer) => {
                // Waiting for an answer is no work: the place in flight goes to others.
                drop((in_flight, on_the_way));
                self.counts.count(Stage::Idempotency, Mark::Replay);
                let answer = in_flight::wait_for(answer, REPLAY_WAIT).await;
                return Err(answer.unwrap_or_else(in_progress));
            }
        };
        let claimed = claim();
        let funnel = Arc::clone(self);
        let (reply, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(tally::carried(stages::carried(
            async move { funnel.claimed(&claimed, first, reply, on_the_way).await }
                // Its lines name the request, like the rest of the request's.
                .instrument(tracing::Span::current()),
        )));
        Ok(answered
            .await
            .unwrap_or_else(|_| self.counts.stop(Stage::Preorder, Outcome::Degraded)))
    }
}

/// The answer to a buy that got its pre-order: one per successful buy, so written out
/// directly rather than built as a JSON value first (a hyphenated id needs no escaping).
fn ordered(order: Uuid) -> Answer {
    Answer {
        status: 200,
        retry_after_s: None,
        body: Bytes::from(format!(
            r#"{{"order_id":"{order}","status":"PRE_CREATED"}}"#
        )),
    }
}

/// The answer to a replay whose first request has not finished.
fn in_progress() -> Answer {
    let mut answer = Answer::json(
        409,
        serde_json::json!({
            "code": "REQUEST_IN_PROGRESS",
            "message": "the first request with this X-Request-ID has not finished; retry shortly"
        }),
    );
    answer.retry_after_s = Some(IN_PROGRESS_RETRY_S);
    answer
}

/// Who asks for which item under which request id: what a local refusal needs to tell a
/// winner's replay from anyone else.
struct Asked<'a> {
    sale: SaleItem,
    user_id: i64,
    request_id: &'a str,
}

/// What a pre-order deducted in Redis, as reconciliation settles it.
fn deduction(order: &PreOrder) -> Deduction {
    Deduction {
        sale: order.sale_item(),
        order: order.id,
        buyer: order.buyer(),
        units: order.quantity,
    }
}

/// The item a request buys: the named one of a standard activity, or the ticket of a
/// seated one; asking the wrong endpoint is a bad request.
fn target(
    activity: &CachedActivity,
    ask: Ask,
    item_id: Option<i64>,
) -> Result<&CachedItem, (Outcome, &'static str)> {
    match (activity.kind, ask) {
        (ActivityKind::Standard, Ask::Units) => item_id
            .and_then(|id| activity.item(id))
            .ok_or((Outcome::ItemNotFound, Outcome::ItemNotFound.message())),
        (ActivityKind::Seated, Ask::Seats) => activity
            .items
            .first()
            .ok_or((Outcome::ItemNotFound, Outcome::ItemNotFound.message())),
        (ActivityKind::Seated, Ask::Units) => Err((
            Outcome::BadRequest,
            "seated activities sell seats: use /api/seckill/seats",
        )),
        (ActivityKind::Standard, Ask::Seats) => Err((
            Outcome::BadRequest,
            "this activity has no seats: use /api/seckill/buy",
        )),
    }
}

mod memory_steps;
mod store_steps;
#[cfg(test)]
mod tests;
