//! Steps 1–6 of the funnel: everything a buy can be answered from this instance's memory,
//! before it costs a store anything (admission, the body, validation, the buyer token, a hot
//! key's block, the catalogue, the phase, the sold-out flag).

use super::*;

impl Funnel {
    /// Step 1: a place among the requests in flight on this instance.
    pub(super) fn admit(&self, switches: &SwitchValues) -> Passed<Admitted<'_>> {
        let admitted = self
            .admission
            .enter(switches.limits.max_in_flight)
            .ok_or_else(|| self.counts.stop(Stage::Admission, Outcome::Overloaded))?;
        Ok(admitted)
    }

    /// Step 2 begins: the body, read only now that the request holds a place in flight, no
    /// more of it than `max_body_bytes`; the router's patience with slow bodies
    /// (`base::slow_bodies`) ends one that does not arrive in time, and its place is freed
    /// with the answer.
    pub(super) async fn read_body(&self, body: Body) -> Passed<Bytes> {
        axum::body::to_bytes(body, self.settings.max_body_bytes)
            .await
            .map_err(|error| {
                let why = if slow_bodies::too_slow(&error) {
                    slow_bodies::TOO_SLOW
                } else {
                    "the request body is too large or was cut off"
                };
                self.counts
                    .stop_with(Stage::Validate, Outcome::BadRequest, why)
            })
    }

    /// Step 2: the request id, the body's shape.
    pub(super) fn validate<'h>(
        &self,
        ask: Ask,
        headers: &'h HeaderMap,
        body: &[u8],
    ) -> Passed<(&'h str, Purchase)> {
        let refuse = |message: &str| {
            self.counts
                .stop_with(Stage::Validate, Outcome::BadRequest, message)
        };
        let request_id = header(headers, "x-request-id")
            .filter(|id| valid_request_id(id))
            .ok_or_else(|| {
                refuse("an X-Request-ID header of 1-64 letters, digits, - or _ is required")
            })?;
        let purchase = parse(ask, body).map_err(|message| refuse(&message))?;
        Ok((request_id, purchase))
    }

    /// Step 3: the buyer token.
    pub(super) fn authenticate(&self, headers: &HeaderMap) -> Passed<Buyer> {
        let buyer = self
            .tokens
            .verify(header(headers, "authorization"))
            .ok_or_else(|| self.counts.stop(Stage::Auth, Outcome::Unauthenticated))?;
        Ok(buyer)
    }

    /// Step 3 ends: a buyer or an address blocked as a hot key is refused until the key lapses.
    pub(super) fn check_blocked(&self, user_id: i64, client: IpAddr) -> Passed<()> {
        match self.hotkeys.refusal(Some(user_id), client) {
            None => Ok(()),
            Some(refusal) => {
                let mut answer = self.counts.stop_with(
                    Stage::HotkeyBlock,
                    Outcome::RateLimited,
                    match refusal.kind {
                        contract::HotKeyKind::Ip => "this address is sending too many requests",
                        _ => "this buyer is sending too many requests",
                    },
                );
                answer.retry_after_s =
                    Some(u32::try_from(refusal.retry_after_s).unwrap_or(u32::MAX));
                Err(answer)
            }
        }
    }

    /// Step 4: the activity and the item bought, from the in-memory catalogue. A rehearsal's
    /// shadow activity exists only for its own synthetic buyers (`rehearsal`, from their
    /// tokens), and they for it alone.
    pub(super) async fn look_up(
        &self,
        ask: Ask,
        purchase: &Purchase,
        rehearsal: Option<i64>,
    ) -> Passed<(Arc<CachedActivity>, Target)> {
        let looked_up = match purchase.item_id {
            Some(item_id) => {
                self.catalogue
                    .activity_for_item(purchase.activity_id, item_id)
                    .await
            }
            None => self.catalogue.activity(purchase.activity_id).await,
        };
        let activity = looked_up
            .and_then(|activity| {
                if activity.shown_to(rehearsal) {
                    Ok(activity)
                } else {
                    Err(LookupError::Missing)
                }
            })
            .map_err(|error| match error {
                LookupError::Missing => self.counts.stop(Stage::Catalogue, Outcome::ItemNotFound),
                error => {
                    quiet!(warn, "buy.lookup", error = %error, "activity lookup failed");
                    self.counts.stop(Stage::Catalogue, Outcome::Degraded)
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
                return Err(self.counts.stop_with(Stage::Catalogue, outcome, message))
            }
        };
        // A lottery sells to code holders only, and a first-come sale takes no code: both
        // told from memory, before any store is asked.
        match (&activity.lottery, &purchase.code) {
            (Some(_), None) => {
                return Err(self.counts.stop(Stage::Catalogue, Outcome::NotQualified))
            }
            (None, Some(_)) => {
                return Err(self.counts.stop_with(
                    Stage::Catalogue,
                    Outcome::BadRequest,
                    "this activity sells to whoever comes first: send no code",
                ))
            }
            _ => {}
        }
        self.counts.pass(Stage::Catalogue);
        Ok((activity, target))
    }

    /// Step 5: the entry switches and the activity's times, then the item's own limit.
    /// After the start, a holder of the item may be a winner replaying his request.
    pub(super) async fn check_phase(
        &self,
        switches: &SwitchValues,
        activity: &CachedActivity,
        target: &Target,
        quantity: i64,
        asked: &Asked<'_>,
        claim: &(dyn Fn() -> Arc<Claimed> + Sync),
    ) -> Passed<()> {
        let now = phase(
            activity.starts_at,
            activity.ends_at,
            chrono::Utc::now(),
            switches.entry_open_for(activity.id),
        );
        match Outcome::from_phase(now) {
            None => {}
            Some(refusal) if now == Phase::Upcoming => {
                return Err(self.counts.stop(Stage::Phase, refusal))
            }
            Some(refusal) => {
                return Err(self
                    .unless_replay(Stage::Phase, refusal, asked, claim)
                    .await)
            }
        }
        if !valid_quantity(quantity, target.per_user_limit) {
            return Err(self.counts.stop_with(
                Stage::Phase,
                Outcome::BadRequest,
                "quantity must be between 1 and the per-user limit",
            ));
        }
        self.counts.pass(Stage::Phase);
        Ok(())
    }

    /// Step 6: an item this instance saw sell out is refused without asking Redis, unless
    /// the buyer holds some of it. Not a lottery's (`reserved`): a live code's units are
    /// reserved for it, and a unit given back goes to the next code, so a code holder is
    /// never told `SOLD_OUT`.
    pub(super) async fn check_sold_out_flag(
        &self,
        reserved: bool,
        asked: &Asked<'_>,
        claim: &(dyn Fn() -> Arc<Claimed> + Sync),
    ) -> Passed<()> {
        let sale = asked.sale;
        if !reserved && self.catalogue.is_sold_out(sale.activity.0, sale.item.0) {
            return Err(self
                .unless_replay(Stage::SoldOutFlag, Outcome::SoldOut, asked, claim)
                .await);
        }
        self.counts.pass(Stage::SoldOutFlag);
        Ok(())
    }

    /// A local refusal at `stage`, unless the buyer holds units of the item and his request
    /// id has an answer stored (or answered here, on its way to Redis), or an order in
    /// PostgreSQL: then that answer, byte for byte.
    ///
    /// The stored answer is looked up by the buy script's windows step (`claim` makes the
    /// request as the script takes it): a replay is answered before any window, so it is
    /// never refused; a fresh request id goes through the buyer's windows and counts in
    /// them like any buy, and only one they admit costs a PostgreSQL query. A holder sending
    /// fresh ids cannot spend more of the pool than his window allows.
    pub(super) async fn unless_replay(
        &self,
        stage: Stage,
        refusal: Outcome,
        asked: &Asked<'_>,
        claim: &(dyn Fn() -> Arc<Claimed> + Sync),
    ) -> Answer {
        let key = self
            .redis
            .request_key(asked.sale, asked.user_id, asked.request_id);
        if let Some(answer) = self.running.answered(&key) {
            self.counts.count(Stage::Idempotency, Mark::Replay);
            return answer;
        }
        match self.holders.holds(asked.sale, asked.user_id).await {
            Ok(false) => return self.counts.stop(stage, refusal),
            Ok(true) => {}
            Err(error) => {
                quiet!(warn, "buy.replay_lookup", error = %error, "a holder's replay could not be looked up");
                return self.counts.stop(stage, Outcome::Degraded);
            }
        }
        let claimed = claim();
        if let Err(answer) = self.script(&claimed, &claimed.call(), Steps::Windows).await {
            return answer;
        }
        self.unless_ordered(asked, stage, || self.counts.stop(stage, refusal))
            .await
    }

    /// A holder refused with no answer stored under his request id may still have won with
    /// it (the answer never reached Redis: it failed then, or the instance that answered him
    /// died before storing it). PostgreSQL has his order if he did: then that order, as his
    /// first answer said it; else the refusal.
    pub(super) async fn unless_ordered(
        &self,
        asked: &Asked<'_>,
        stage: Stage,
        refusal: impl FnOnce() -> Answer,
    ) -> Answer {
        match preorders::order_of_request(&self.db, asked.sale, asked.user_id, asked.request_id)
            .await
        {
            Ok(Some(order)) => {
                self.counts.count(Stage::Idempotency, Mark::Replay);
                ordered(order)
            }
            Ok(None) => refusal(),
            Err(error) => {
                quiet!(warn, "buy.replay_lookup", error = %error, "a holder's order could not be looked up");
                self.counts.stop(stage, Outcome::Degraded)
            }
        }
    }
}
