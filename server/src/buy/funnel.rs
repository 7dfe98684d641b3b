//! The buy funnel (docs/buyer-api.md): each stage in order, cheapest first, each counted as
//! passed or stopped by reason in `seckill_funnel_requests_total`, each one method of
//! [`Funnel`] in this order: (1) admission, (2) validation, (3) the buyer token, (4) the
//! activity and item from the in-memory catalogue, (5) the phase, (6) the local sold-out
//! flag, (7) the claim of the request id, (8) the rate limits, (9) the challenge, (10) the
//! deduction, (11) the pre-order, (12) the publish.
//!
//! Once a request id is claimed (step 7), every answer is stored under it, so a replay
//! gets the first answer byte for byte (success kept an hour, failures five minutes).
//! Steps 8–13 run in a task of their own: a client that hangs up cannot cut a request
//! between its deduction and its pre-order, so the answer is always stored for the replay.
//!
//! A deduction the funnel cannot account for is settled here when it can be, and by
//! reconciliation otherwise (`reconcile`): a deduction whose answer was lost is released
//! by its order id (the script's marker proves whether it happened); a pre-order whose
//! commit failed ambiguously is voided in PostgreSQL first, then released.

use axum::body::Bytes;
use axum::http::HeaderMap;
use contract::ActivityKind;
use serde::Deserialize;
use sqlx::PgPool;
use std::{
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering},
    sync::Arc,
    sync::Mutex,
    time::Duration,
    time::Instant,
};
use tracing::Instrument;
use uuid::Uuid;

use crate::buy::stock_scripts::{Units, IN_FLIGHT};
use crate::{
    buy::{
        activity_cache::{CachedActivity, CachedItem, Catalogue, LookupError},
        challenge::Challenges,
        deduction::DeductionGate,
        preorders::{PreOrder, PreorderWriter, Reservation, Verdict},
        rules::{
            phase, valid_quantity, valid_request_id, Outcome, Refusal, ScriptAnswer, UnknownAnswer,
        },
    },
    catalog::rules::{valid_seat_code, MAX_PER_USER_LIMIT},
    control::switches::{SwitchValues, Switches},
    identity::buyer_token::BuyerTokens,
    infra::{
        config::{AsyncMode, BuySettings, DeductionMode},
        metrics::Metrics,
        quiet_log::quiet,
        redis::RedisStore,
    },
    orders::mq::{message::OrderCreated, publisher::Publisher},
    reconcile::settle::{self, Deduction},
};

/// How long a claimed request id stays "in flight" if its request dies mid-way.
const IN_FLIGHT_MS: u64 = 10_000;
/// How long a replay waits for the first request with its id to finish.
const REPLAY_WAIT: Duration = Duration::from_secs(3);
const SUCCESS_TTL_S: u64 = 3600;
const FAILURE_TTL_S: u64 = 300;

/// Body of `POST /api/seckill/buy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BuyRequest {
    pub(crate) activity_id: i64,
    pub(crate) item_id: i64,
    pub(crate) quantity: i64,
    #[serde(default)]
    pub(crate) challenge_id: Option<String>,
    #[serde(default)]
    pub(crate) answer: Option<i64>,
}

/// Body of `POST /api/seckill/seats`: all these seats of a seated activity, or none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeatsRequest {
    pub(crate) activity_id: i64,
    pub(crate) seats: Vec<String>,
    #[serde(default)]
    pub(crate) challenge_id: Option<String>,
    #[serde(default)]
    pub(crate) answer: Option<i64>,
}

/// Which of the two buy endpoints a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
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
}

fn parse(ask: Ask, body: &[u8]) -> Result<Purchase, String> {
    let invalid = |error: serde_json::Error| format!("invalid body: {error}");
    let purchase = match ask {
        Ask::Units => {
            let request: BuyRequest = serde_json::from_slice(body).map_err(invalid)?;
            Purchase {
                activity_id: request.activity_id,
                item_id: Some(request.item_id),
                quantity: request.quantity,
                seats: Vec::new(),
                challenge_id: request.challenge_id,
                answer: request.answer,
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
type Stage<T> = Result<T, Answer>;

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
            id: Uuid::new_v4(),
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

/// What steps 8–12 need of a request whose id is claimed; owned, for the task they run in.
struct Claimed {
    switches: Arc<SwitchValues>,
    client: IpAddr,
    challenge_id: Option<String>,
    challenge_answer: Option<i64>,
    /// Under `Reservation::Redis`, with the item's per-user limit.
    order: PreOrder,
}

/// A finished answer: what the client gets, and what a replay gets again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after_s: Option<u32>,
    pub(crate) body: Bytes,
}

impl Answer {
    fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            retry_after_s: None,
            body: Bytes::from(value.to_string()),
        }
    }

    pub(crate) fn refusal(outcome: Outcome, message: &str) -> Self {
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

/// The per-instance token bucket in front of Redis (step 8). Its rate is passed on every
/// take, so a limit changed in etcd applies to the next request.
struct TokenBucket {
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    fn new() -> Self {
        Self {
            state: Mutex::new((f64::INFINITY, Instant::now())),
        }
    }

    fn try_take(&self, rate_per_s: u64) -> bool {
        let rate = rate_per_s.max(1) as f64;
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(rate);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
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

/// The stage counters of `seckill_funnel_requests_total`: every request is counted at each
/// stage it passes, and at the stage that stops it, by the code it is answered with.
struct StageCounts(Metrics);

impl StageCounts {
    fn pass(&self, stage: &str) {
        self.count(stage, "pass");
    }

    /// Counts what happened at `stage` besides passing or stopping (`REPLAY`, `OVERRULED`).
    fn count(&self, stage: &str, outcome: &str) {
        self.0.funnel.with_label_values(&[stage, outcome]).inc();
    }

    fn stop(&self, stage: &str, outcome: Outcome) -> Answer {
        self.stop_with(stage, outcome, outcome.message())
    }

    fn stop_with(&self, stage: &str, outcome: Outcome, message: &str) -> Answer {
        self.count(stage, outcome.code());
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
            .stock_script_unknown_answers
            .with_label_values(&[script])
            .inc();
        self.stop("deduction", Outcome::Degraded)
    }
}

pub struct Funnel {
    settings: BuySettings,
    switches: Switches,
    admission: Admission,
    bucket: TokenBucket,
    pub catalogue: Catalogue,
    pub challenges: Challenges,
    /// Which layer deducts now, and the db → redis hand-over's state.
    pub deduction: DeductionGate,
    tokens: BuyerTokens,
    preorders: PreorderWriter,
    publisher: Publisher,
    redis: RedisStore,
    /// For voiding a pre-order whose commit failed ambiguously before giving its units back.
    db: PgPool,
    counts: StageCounts,
}

/// What a funnel is made of; named, because most of these are handles of one type family.
pub(crate) struct FunnelParts {
    pub(crate) settings: BuySettings,
    pub(crate) switches: Switches,
    pub(crate) catalogue: Catalogue,
    pub(crate) tokens: BuyerTokens,
    pub(crate) preorders: PreorderWriter,
    pub(crate) publisher: Publisher,
    pub(crate) redis: RedisStore,
    pub(crate) db: PgPool,
    pub(crate) metrics: Metrics,
}

impl Funnel {
    pub(crate) fn new(parts: FunnelParts) -> Self {
        let FunnelParts {
            settings,
            switches,
            catalogue,
            tokens,
            preorders,
            publisher,
            redis,
            db,
            metrics,
        } = parts;
        Self {
            admission: Admission {
                in_flight: AtomicU64::new(0),
            },
            bucket: TokenBucket::new(),
            deduction: DeductionGate::new(switches.current().deduction),
            challenges: Challenges::new(redis.clone()),
            settings,
            switches,
            catalogue,
            tokens,
            preorders,
            publisher,
            redis,
            db,
            counts: StageCounts(metrics),
        }
    }

    /// Buy requests in flight on this instance now (admission's count).
    pub(crate) fn in_flight(&self) -> u64 {
        self.admission.in_flight.load(Ordering::Acquire)
    }

    pub(crate) fn tokens(&self) -> &BuyerTokens {
        &self.tokens
    }

    /// Pre-orders waiting for the group-commit writer now.
    pub(crate) fn preorders_queued(&self) -> usize {
        self.preorders.queued()
    }

    /// Runs a buy (`Ask::Units`) or seats (`Ask::Seats`) request through the whole funnel.
    pub(crate) async fn buy(
        self: &Arc<Self>,
        ask: Ask,
        headers: &HeaderMap,
        client: IpAddr,
        body: &[u8],
    ) -> Answer {
        match self.run(ask, headers, client, body).await {
            Ok(answer) | Err(answer) => answer,
        }
    }

    /// The stages in order; the first that stops the request answers it.
    async fn run(
        self: &Arc<Self>,
        ask: Ask,
        headers: &HeaderMap,
        client: IpAddr,
        body: &[u8],
    ) -> Stage<Answer> {
        // One snapshot for the whole request: a flip applies from the next request on.
        let snapshot = self.switches.current();
        let switches = snapshot.as_ref();
        let _in_flight = self.admit(switches)?;
        let (request_id, purchase) = self.validate(ask, headers, body)?;
        let user_id = self.authenticate(headers)?;
        let (activity, target) = self.look_up(ask, &purchase).await?;
        self.check_phase(switches, &activity, &target, purchase.quantity)?;
        self.check_sold_out_flag(&target)?;
        let request_key = self.claim(user_id, request_id).await?;
        let order = target.pre_order(user_id, request_id, &purchase, switches);
        let claimed = Claimed {
            switches: snapshot.clone(),
            client,
            challenge_id: purchase.challenge_id,
            challenge_answer: purchase.answer,
            order,
        };
        let funnel = Arc::clone(self);
        let finished = tokio::spawn(
            async move {
                let answer = match funnel.claimed(&claimed).await {
                    Ok(answer) | Err(answer) => answer,
                };
                funnel.keep_for_replay(&request_key, &answer).await;
                answer
            }
            // Its lines name the request, like the rest of the request's.
            .instrument(tracing::Span::current()),
        );
        Ok(finished
            .await
            .unwrap_or_else(|_| self.counts.stop("preorder", Outcome::Degraded)))
    }

    /// Step 1: a place among the requests in flight on this instance.
    fn admit(&self, switches: &SwitchValues) -> Stage<Admitted<'_>> {
        let admitted = self
            .admission
            .enter(switches.limits.max_in_flight)
            .ok_or_else(|| self.counts.stop("admission", Outcome::Overloaded))?;
        self.counts.pass("admission");
        Ok(admitted)
    }

    /// Step 2: the request id, the body's size and shape.
    fn validate<'h>(
        &self,
        ask: Ask,
        headers: &'h HeaderMap,
        body: &[u8],
    ) -> Stage<(&'h str, Purchase)> {
        let refuse = |message: &str| {
            self.counts
                .stop_with("validate", Outcome::BadRequest, message)
        };
        let request_id = header(headers, "x-request-id")
            .filter(|id| valid_request_id(id))
            .ok_or_else(|| {
                refuse("an X-Request-ID header of 1-64 letters, digits, - or _ is required")
            })?;
        if body.len() > self.settings.max_body_bytes {
            return Err(refuse("the request body is too large"));
        }
        let purchase = parse(ask, body).map_err(|message| refuse(&message))?;
        self.counts.pass("validate");
        Ok((request_id, purchase))
    }

    /// Step 3: the buyer token.
    fn authenticate(&self, headers: &HeaderMap) -> Stage<i64> {
        let user_id = self
            .tokens
            .buyer(header(headers, "authorization"))
            .ok_or_else(|| self.counts.stop("auth", Outcome::Unauthenticated))?;
        self.counts.pass("auth");
        Ok(user_id)
    }

    /// Step 4: the activity and the item bought, from the in-memory catalogue.
    async fn look_up(&self, ask: Ask, purchase: &Purchase) -> Stage<(Arc<CachedActivity>, Target)> {
        let looked_up = match purchase.item_id {
            Some(item_id) => {
                self.catalogue
                    .activity_for_item(purchase.activity_id, item_id)
                    .await
            }
            None => self.catalogue.activity(purchase.activity_id).await,
        };
        let activity = looked_up.map_err(|error| match error {
            LookupError::Missing => self.counts.stop("catalogue", Outcome::ItemNotFound),
            error => {
                quiet!(warn, "buy.lookup", error = %error, "activity lookup failed");
                self.counts.stop("catalogue", Outcome::Degraded)
            }
        })?;
        let target = match target(&activity, ask, purchase.item_id) {
            Ok(item) => Target {
                activity_id: activity.id,
                item_id: item.item_id,
                per_user_limit: item.per_user_limit,
                price_cents: item.price_cents,
            },
            Err((outcome, message)) => {
                return Err(self.counts.stop_with("catalogue", outcome, message))
            }
        };
        self.counts.pass("catalogue");
        Ok((activity, target))
    }

    /// Step 5: the entry switches and the activity's times, then the item's own limit.
    fn check_phase(
        &self,
        switches: &SwitchValues,
        activity: &CachedActivity,
        target: &Target,
        quantity: i64,
    ) -> Stage<()> {
        if let Some(refusal) = Outcome::from_phase(phase(
            activity.starts_at,
            activity.ends_at,
            chrono::Utc::now(),
            switches.entry_open_for(activity.id),
        )) {
            return Err(self.counts.stop("phase", refusal));
        }
        if !valid_quantity(quantity, target.per_user_limit) {
            return Err(self.counts.stop_with(
                "phase",
                Outcome::BadRequest,
                "quantity must be between 1 and the per-user limit",
            ));
        }
        self.counts.pass("phase");
        Ok(())
    }

    /// Step 6: an item this instance saw sell out is refused without asking Redis.
    fn check_sold_out_flag(&self, target: &Target) -> Stage<()> {
        if self
            .catalogue
            .is_sold_out(target.activity_id, target.item_id)
        {
            return Err(self.counts.stop("sold_out_flag", Outcome::SoldOut));
        }
        self.counts.pass("sold_out_flag");
        Ok(())
    }

    /// Step 7: claims the request id for this buyer; returns the key its answer is kept
    /// under. A request id seen before is answered with its first answer.
    async fn claim(&self, user_id: i64, request_id: &str) -> Stage<String> {
        let request_key = self.redis.request_key(user_id, request_id);
        match self.redis.claim_request(&request_key, IN_FLIGHT_MS).await {
            Ok(None) => {
                self.counts.pass("idempotency");
                Ok(request_key)
            }
            Ok(Some(stored)) => {
                self.counts.count("idempotency", "REPLAY");
                Err(self.replay(&request_key, stored).await)
            }
            Err(error) => {
                quiet!(warn, "buy.claim", error = %error, "request claim failed");
                Err(self.counts.stop("idempotency", Outcome::Degraded))
            }
        }
    }

    /// Keeps a claimed request's answer for its replays (success an hour, failures less).
    async fn keep_for_replay(&self, request_key: &str, answer: &Answer) {
        let ttl = if answer.status == 200 {
            SUCCESS_TTL_S
        } else {
            FAILURE_TTL_S
        };
        if let Err(error) = self
            .redis
            .store_response(request_key, &answer.encode(), ttl)
            .await
        {
            quiet!(warn, "buy.keep_for_replay", error = %error, "could not keep the response for replay");
        }
    }

    /// Steps 8–12, once the request id is this request's own.
    async fn claimed(&self, claimed: &Claimed) -> Stage<Answer> {
        self.rate_limit(claimed).await?;
        self.challenge(claimed).await?;
        let mode = self.deduction.mode(claimed.switches.deduction);
        // Counted until the pre-order is written, for the db → redis hand-over.
        let _database_deduction =
            (mode == DeductionMode::Db).then(|| self.deduction.enter_database());
        let order = self.deduct(&claimed.order, mode).await?;
        self.write_preorder(&order, mode).await?;
        self.publish(&order);
        Ok(Answer::json(
            200,
            serde_json::json!({ "order_id": order.id, "status": "PRE_CREATED" }),
        ))
    }

    /// Step 8: the local token bucket, then the buyer, address and item windows in Redis.
    async fn rate_limit(&self, claimed: &Claimed) -> Stage<()> {
        let limits = &claimed.switches.limits;
        if !self.bucket.try_take(limits.local_rate_per_s) {
            return Err(self.rate_limited(limits.rate_window_s));
        }
        let order = &claimed.order;
        let windows = [
            limits.per_user_per_window,
            limits.per_ip_per_window,
            limits.per_item_per_window,
        ];
        match self
            .redis
            .hit_rate_windows(
                order.activity_id,
                order.item_id,
                order.user_id,
                &claimed.client.to_string(),
                limits.rate_window_s,
                windows,
            )
            .await
        {
            Ok(0) => {
                self.counts.pass("rate_limit");
                Ok(())
            }
            Ok(_) => Err(self.rate_limited(limits.rate_window_s)),
            Err(error) => {
                quiet!(warn, "buy.rate_windows", error = %error, "rate windows failed");
                Err(self.counts.stop("rate_limit", Outcome::Degraded))
            }
        }
    }

    /// Step 9: the human challenge, only while the switch asks for it.
    async fn challenge(&self, claimed: &Claimed) -> Stage<()> {
        if !claimed.switches.challenge_required {
            return Ok(());
        }
        let passed = match (claimed.challenge_id.as_deref(), claimed.challenge_answer) {
            (Some(id), Some(answer)) => {
                self.challenges
                    .check(id, claimed.order.user_id, answer)
                    .await
            }
            _ => Ok(false),
        };
        match passed {
            Ok(true) => {
                self.counts.pass("challenge");
                Ok(())
            }
            Ok(false) => Err(self.counts.stop("challenge", Outcome::ChallengeFailed)),
            Err(error) => {
                quiet!(warn, "buy.challenge", error = %error, "challenge check failed");
                Err(self.counts.stop("challenge", Outcome::Degraded))
            }
        }
    }

    /// Step 10: deducts in Redis, or leaves the deduction to the database allocation of
    /// step 11; returns the pre-order with the reservation it was made under.
    async fn deduct(&self, order: &PreOrder, mode: DeductionMode) -> Stage<PreOrder> {
        let per_user_limit = order.reservation.per_user_limit();
        match mode {
            DeductionMode::Redis => {
                self.deduct_in_redis(order, per_user_limit).await?;
                Ok(order.clone())
            }
            DeductionMode::Db => Ok(PreOrder {
                reservation: Reservation::Database { per_user_limit },
                ..order.clone()
            }),
        }
    }

    /// Step 11: the group-committed pre-order with its outbox row. A refusal by the
    /// database allocation is answered like a deduction refusal.
    async fn write_preorder(&self, order: &PreOrder, mode: DeductionMode) -> Stage<()> {
        let redis_deducted = matches!(order.reservation, Reservation::Redis { .. });
        match self.preorders.write(order.clone()).await {
            Ok(Verdict::Written) => {
                if mode == DeductionMode::Db {
                    self.counts.pass("deduction");
                }
                self.counts.pass("preorder");
                Ok(())
            }
            Ok(Verdict::Refused(refusal)) => {
                if redis_deducted {
                    self.overruled(order, refusal).await;
                }
                Err(self.refuse_deduction(order, refusal))
            }
            Err(error) => {
                // The commit may have happened all the same (a connection lost on COMMIT):
                // only a void in PostgreSQL makes it certain that it never will.
                quiet!(error, "buy.preorder", error = %error, order = %order.id, "pre-order not written; voiding it and giving the stock back");
                if redis_deducted {
                    let (db, redis, deduction) =
                        (self.db.clone(), self.redis.clone(), deduction(order));
                    tokio::spawn(
                        async move { settle::void_and_release(&db, &redis, &deduction).await },
                    );
                }
                Err(self.counts.stop("preorder", Outcome::Degraded))
            }
        }
    }

    /// Step 12: offers the event to the publisher; in `record` mode the outbox row waits
    /// for an ops replay instead.
    fn publish(&self, order: &PreOrder) {
        if !order.recorded {
            self.publisher.offer(OrderCreated {
                order_id: order.id,
                activity_id: order.activity_id,
                item_id: order.item_id,
                user_id: order.user_id,
                quantity: order.quantity,
                amount_cents: order.amount_cents,
            });
        }
    }

    /// Step 10 on the Redis path: the Lua deduction (units or seats).
    async fn deduct_in_redis(&self, order: &PreOrder, limit: i64) -> Result<(), Answer> {
        let (script, answered) = if order.seats.is_empty() {
            let answered = self
                .redis
                .deduct_stock(order.holding(), limit, order.id)
                .await;
            ("deduct_stock", answered)
        } else {
            let answered = self
                .redis
                .take_seats(
                    order.sale_item(),
                    order.buyer(),
                    limit,
                    order.id,
                    &order.seats,
                )
                .await;
            ("take_seats", answered)
        };
        let answer = answered.map_err(|error| {
            // The script may have run with its reply lost; its marker says so. This order
            // id never reaches the pre-order writer, so releasing it is always safe.
            quiet!(warn, "buy.deduction", error = %error, order = %order.id, "deduction failed; its answer is unknown");
            let (redis, deduction) = (self.redis.clone(), deduction(order));
            tokio::spawn(async move { settle::release_unanswered(&redis, &deduction).await });
            self.counts.stop("deduction", Outcome::Degraded)
        })?;
        match ScriptAnswer::read(answer) {
            Ok(ScriptAnswer::Deducted { stock_left }) => {
                if stock_left == 0 {
                    self.catalogue
                        .mark_sold_out(order.activity_id, order.item_id);
                }
                self.counts.pass("deduction");
                Ok(())
            }
            Ok(ScriptAnswer::Refused(refusal)) => Err(self.refuse_deduction(order, refusal)),
            Err(unknown) => Err(self.counts.unknown_answer(script, unknown, order)),
        }
    }

    /// The answer to a deduction refused by Redis or by the database allocation.
    fn refuse_deduction(&self, order: &PreOrder, refusal: Refusal) -> Answer {
        let seats = !order.seats.is_empty();
        match refusal {
            Refusal::SoldOut if !seats => self
                .catalogue
                .mark_sold_out(order.activity_id, order.item_id),
            Refusal::NotPrewarmed => quiet!(
                warn,
                "buy.not_prewarmed",
                activity = order.activity_id,
                item = order.item_id,
                "stock missing from Redis; pre-warm the activity"
            ),
            _ => {}
        }
        let (outcome, message) = refusal.answer(seats);
        self.counts.stop_with("deduction", outcome, message)
    }

    /// PostgreSQL refused a pre-order that Redis had granted: Redis was off the truth (a
    /// deduction flip or a re-derivation raced an in-flight deduction). When the database
    /// has no stock left, the unit Redis just spent brings it closer to the truth, so it
    /// stays spent; a refusal on the buyer's limit gives the unit back for others.
    async fn overruled(&self, order: &PreOrder, refusal: Refusal) {
        quiet!(warn, "buy.overruled", order = %order.id, activity = order.activity_id, item = order.item_id, ?refusal, "PostgreSQL overruled a Redis deduction");
        self.counts.count("preorder", "OVERRULED");
        let units = match refusal {
            Refusal::AlreadyPurchased | Refusal::LimitExceeded => Units::BackToStock,
            _ => Units::Kept,
        };
        // The batch rolled this member back: it can never commit, so no void is needed.
        if let Err(error) = self
            .redis
            .release_deduction(order.sale_item(), order.id, units)
            .await
        {
            quiet!(warn, "buy.release_overruled", error = %error, order = %order.id, "releasing an overruled deduction failed; reconciliation releases it by its marker");
        }
    }

    fn rate_limited(&self, window_s: u64) -> Answer {
        let mut answer = self.counts.stop("rate_limit", Outcome::RateLimited);
        answer.retry_after_s = Some(u32::try_from(window_s.max(1)).unwrap_or(u32::MAX));
        answer
    }

    /// A request id seen before: its first answer, once that answer exists.
    async fn replay(&self, key: &str, mut stored: Vec<u8>) -> Answer {
        let started = Instant::now();
        while stored == IN_FLIGHT && started.elapsed() < REPLAY_WAIT {
            tokio::time::sleep(Duration::from_millis(5)).await;
            match self.redis.get_bytes(key).await {
                Ok(Some(value)) => stored = value,
                Ok(None) => break,
                Err(_) => break,
            }
        }
        Answer::decode(&stored).unwrap_or_else(|| {
            Answer::json(
                409,
                serde_json::json!({
                    "code": "REQUEST_IN_PROGRESS",
                    "message": "the first request with this X-Request-ID has not finished; retry shortly"
                }),
            )
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_answers_decode_to_the_same_bytes() {
        let mut answer = Answer::refusal(Outcome::RateLimited, "slow down");
        answer.retry_after_s = Some(1);
        assert_eq!(Answer::decode(&answer.encode()), Some(answer));
        let ok = Answer::json(
            200,
            serde_json::json!({"order_id": "x", "status": "PRE_CREATED"}),
        );
        assert_eq!(Answer::decode(&ok.encode()), Some(ok));
        assert_eq!(Answer::decode(IN_FLIGHT), None);
    }

    #[test]
    fn an_undocumented_script_code_answers_503_and_is_counted() {
        let counts = StageCounts(Metrics::new());
        let order = PreOrder {
            id: Uuid::new_v4(),
            activity_id: 1,
            item_id: 2,
            user_id: 3,
            quantity: 1,
            amount_cents: 100,
            request_id: "r-1".into(),
            seats: Vec::new(),
            reservation: Reservation::Redis { per_user_limit: 1 },
            recorded: false,
        };
        let answer = counts.unknown_answer("deduct_stock", UnknownAnswer(-7), &order);
        assert_eq!(answer.status, 503);
        let body: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
        assert_eq!(body["code"], "DEGRADED");
        let text = counts.0.render();
        for counted in [
            r#"seckill_stock_script_unknown_answers_total{script="deduct_stock"} 1"#,
            r#"seckill_funnel_requests_total{outcome="DEGRADED",stage="deduction"} 1"#,
        ] {
            assert!(text.contains(counted), "{counted} missing from:\n{text}");
        }
    }

    #[test]
    fn the_token_bucket_admits_its_rate_then_refuses() {
        let bucket = TokenBucket::new();
        assert!((0..3).all(|_| bucket.try_take(3)));
        assert!(!bucket.try_take(3));
    }
}
