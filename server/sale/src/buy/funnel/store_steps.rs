//! Steps 7–12 of the funnel: the request's own task, where a buy reaches the stores: the
//! stored answer and the claim, the Redis deduction (or the database path), the challenge,
//! the group-committed pre-order, and what a lost answer or a refusal gives back.

use super::*;

impl Funnel {
    /// Steps 7–12: the request's own task, which sends the answer on `reply`. A success is
    /// answered at once and then kept for its replays (`kept_answers`); any other answer
    /// after a claim first frees the request id, so a retry runs the buy again.
    pub(super) async fn claimed(
        &self,
        claimed: &Arc<Claimed>,
        first: First<Answer>,
        reply: tokio::sync::oneshot::Sender<Answer>,
        on_the_way: OnTheWay,
    ) {
        let mode = self.deduction.mode(claimed.switches.deduction);
        // Counted until the pre-order is written, for the db → redis hand-over.
        let database_deduction =
            (mode == DeductionMode::Db).then(|| self.deduction.enter_database());
        let order = match self.through_redis(claimed, mode).await {
            Ok(order) => order,
            Err(answer) => {
                first.answered(&answer);
                // A client that hung up has nobody to answer; the same below.
                let _ = reply.send(answer);
                return;
            }
        };
        let answer = match self.write_preorder(&order, mode, on_the_way).await {
            Ok(Committed::This) => ordered(order.id),
            Ok(Committed::Earlier(id)) => ordered(id),
            Err(answer) => answer,
        };
        drop(database_deduction);
        first.answered(&answer);
        let call = claimed.call();
        if answer.status == 200 {
            let stored = answer.encode();
            let _ = reply.send(answer);
            self.kept.keep(Kept {
                sale: call.take.sale,
                key: self
                    .redis
                    .request_key(call.take.sale, call.take.buyer.0, call.request_id),
                stored,
                _listed: first,
            });
            return;
        }
        if let Err(error) = StockClient(&self.redis).release_claim(&call).await {
            quiet!(warn, "buy.keep_for_replay", error = %error, "could not free the request id of a refused buy");
        }
        let _ = reply.send(answer);
    }

    /// Steps 7–10 in Redis: the local token bucket, then the buy script: the stored answer,
    /// the windows, the claim and (on the Redis path) the deduction; the challenge, when it
    /// is on, between the windows and the claim. Returns the pre-order with the reservation
    /// it is made under, once its request id is claimed.
    pub(super) async fn through_redis(
        &self,
        claimed: &Arc<Claimed>,
        mode: DeductionMode,
    ) -> Passed<PreOrder> {
        let limits = &claimed.switches.limits;
        let order = &claimed.order;
        if self
            .hotkeys
            .limited(order.item_id, order.user_id, claimed.ip)
            .is_some()
        {
            let mut answer = self.counts.stop(Stage::HotkeyLimit, Outcome::RateLimited);
            answer.retry_after_s = Some(1);
            return Err(answer);
        }
        if !self.bucket.try_take(limits.local_rate_per_s) {
            return Err(self.rate_limited(limits.rate_window_s));
        }
        let call = claimed.call();
        let deducts = mode == DeductionMode::Redis;
        let steps = if claimed.switches.challenge_required {
            self.script(claimed, &call, Steps::Windows).await?;
            self.challenge(claimed).await?;
            if deducts {
                Steps::Deduct
            } else {
                Steps::Claim
            }
        } else if deducts {
            Steps::Buy
        } else {
            Steps::WindowsAndClaim
        };
        self.script(claimed, &call, steps).await?;
        let per_user_limit = call.per_user_limit;
        Ok(if deducts {
            claimed.order.clone()
        } else {
            PreOrder {
                reservation: Reservation::Database { per_user_limit },
                ..claimed.order.clone()
            }
        })
    }

    /// One call of the buy script, its answer counted at the stages it went through.
    pub(super) async fn script(
        &self,
        claimed: &Arc<Claimed>,
        call: &BuyCall<'_>,
        steps: Steps,
    ) -> Passed<()> {
        let order = &claimed.order;
        let windows = matches!(steps, Steps::Buy | Steps::Windows | Steps::WindowsAndClaim);
        let deducts = matches!(steps, Steps::Buy | Steps::Deduct);
        let answered = StockClient(&self.redis).buy(call, steps).await.map_err(|error| {
            // The script may have run with its reply lost: its claim and marker say so.
            quiet!(warn, "buy.script", error = %error, order = %order.id, "buy script failed; its answer is unknown");
            self.settle_unanswered(claimed, deducts);
            let stage = if deducts {
                Stage::Deduction
            } else {
                Stage::RateLimit
            };
            self.counts.stop(stage, Outcome::Degraded)
        })?;
        let answer = ScriptAnswer::read(answered)
            .map_err(|unknown| self.counts.unknown_answer("buy", unknown, order))?;
        if windows {
            self.counts.pass(Stage::Idempotency);
        }
        match answer {
            ScriptAnswer::Seen(stored) => {
                self.counts.count(Stage::Idempotency, Mark::Replay);
                return Err(self.replay(&stored));
            }
            ScriptAnswer::WindowFull => {
                return Err(self.rate_limited(claimed.switches.limits.rate_window_s))
            }
            _ if windows => self.counts.pass(Stage::RateLimit),
            _ => {}
        }
        match answer {
            ScriptAnswer::Deducted { stock_left } => {
                if stock_left == 0 {
                    self.catalogue
                        .mark_sold_out(order.activity_id, order.item_id);
                }
                self.counts.pass(Stage::Deduction);
                Ok(())
            }
            ScriptAnswer::Refused(refusal) => Err(self.refuse_deduction(order, refusal)),
            ScriptAnswer::RefusedHolder(refusal) => {
                let asked = Asked {
                    sale: order.sale_item(),
                    user_id: order.user_id,
                    request_id: &order.request_id,
                };
                Err(self
                    .unless_ordered(&asked, Stage::Deduction, || {
                        self.refuse_deduction(order, refusal)
                    })
                    .await)
            }
            _ => Ok(()),
        }
    }

    /// A buy script whose reply was lost may have claimed the request id and deducted: the
    /// deduction (found by its marker) is given back, then the request id freed. This order
    /// id never reaches the pre-order writer, so releasing it is always safe.
    pub(super) fn settle_unanswered(&self, claimed: &Arc<Claimed>, deducted: bool) {
        let (redis, claimed) = (self.redis.clone(), Arc::clone(claimed));
        let retrying = Arc::clone(&self.unanswered).try_acquire_owned().ok();
        tokio::spawn(async move {
            if deducted {
                let patience = match retrying {
                    Some(_) => UNANSWERED_PATIENCE,
                    None => Duration::ZERO,
                };
                settle::release_unanswered(&redis, &deduction(&claimed.order), patience).await;
            }
            if let Err(error) = StockClient(&redis).release_claim(&claimed.call()).await {
                tracing::debug!(error = %error, "a claim whose answer was lost stays until it expires");
            }
        });
    }

    /// Step 9: the human challenge, only while the switch asks for it.
    pub(super) async fn challenge(&self, claimed: &Claimed) -> Passed<()> {
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
                self.counts.pass(Stage::Challenge);
                Ok(())
            }
            Ok(false) => Err(self.counts.stop(Stage::Challenge, Outcome::ChallengeFailed)),
            Err(error) => {
                quiet!(warn, "buy.challenge", error = %error, "challenge check failed");
                Err(self.counts.stop(Stage::Challenge, Outcome::Degraded))
            }
        }
    }

    /// Step 11: the group-committed pre-order with its outbox row. A refusal by the
    /// database allocation is answered like a deduction refusal.
    pub(super) async fn write_preorder(
        &self,
        order: &PreOrder,
        mode: DeductionMode,
        on_the_way: OnTheWay,
    ) -> Passed<Committed> {
        let redis_deducted = matches!(order.reservation, Reservation::Redis { .. });
        match self.preorders.write(order.clone(), on_the_way).await {
            Ok(Verdict::Written) => {
                if mode == DeductionMode::Db {
                    self.counts.pass(Stage::Deduction);
                }
                self.counts.pass(Stage::Preorder);
                Ok(Committed::This)
            }
            Ok(Verdict::Refused(refusal)) => {
                if redis_deducted {
                    self.overruled(order, refusal).await;
                }
                Err(self.refuse_deduction(order, refusal))
            }
            Ok(Verdict::Duplicate(earlier)) => {
                // The request id was claimed twice (its first claim expired while PostgreSQL
                // was slow): this second deduction is owed back, and the buyer has his
                // first order.
                self.counts.count(Stage::Preorder, Mark::Duplicate);
                if redis_deducted {
                    self.give_back(order, Units::BackToStock).await;
                }
                earlier.map(Committed::Earlier).ok_or_else(in_progress)
            }
            Ok(Verdict::Voided) => Err(self.counts.stop(Stage::Preorder, Outcome::Degraded)),
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
                Err(self.counts.stop(Stage::Preorder, Outcome::Degraded))
            }
        }
    }

    /// The answer to a deduction refused by Redis or by the database allocation.
    pub(super) fn refuse_deduction(&self, order: &PreOrder, refusal: Refusal) -> Answer {
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
        self.counts.stop_with(Stage::Deduction, outcome, message)
    }

    /// PostgreSQL refused a pre-order that Redis had granted: Redis was off the truth (a
    /// deduction flip or a re-derivation raced an in-flight deduction). When the database
    /// has no stock left, the unit Redis just spent brings it closer to the truth, so it
    /// stays spent; a refusal on the buyer's limit gives the unit back for others.
    pub(super) async fn overruled(&self, order: &PreOrder, refusal: Refusal) {
        quiet!(warn, "buy.overruled", order = %order.id, activity = order.activity_id, item = order.item_id, ?refusal, "PostgreSQL overruled a Redis deduction");
        self.counts.count(Stage::Preorder, Mark::Overruled);
        let units = match refusal {
            Refusal::AlreadyPurchased | Refusal::LimitExceeded => Units::BackToStock,
            _ => Units::Kept,
        };
        self.give_back(order, units).await;
    }

    /// Gives back the Redis deduction of a batch member the database did not write. It can
    /// never commit (its order id is not in PostgreSQL, and never will be), so no void is
    /// needed.
    pub(super) async fn give_back(&self, order: &PreOrder, units: Units) {
        if let Err(error) = StockClient(&self.redis)
            .release_deduction(order.sale_item(), order.id, units)
            .await
        {
            quiet!(warn, "buy.give_back", error = %error, order = %order.id, "giving back a deduction PostgreSQL did not write failed; reconciliation releases it by its marker");
        }
    }

    pub(super) fn rate_limited(&self, window_s: u64) -> Answer {
        let mut answer = self.counts.stop(Stage::RateLimit, Outcome::RateLimited);
        answer.retry_after_s = Some(u32::try_from(window_s.max(1)).unwrap_or(u32::MAX));
        answer
    }

    /// A request id seen before: its stored answer, or, while its first request is still
    /// in flight, a prompt 409 asking to retry (a replay never waits holding a place).
    pub(super) fn replay(&self, stored: &[u8]) -> Answer {
        if is_in_flight(stored) {
            return in_progress();
        }
        Answer::decode(stored).unwrap_or_else(in_progress)
    }
}
