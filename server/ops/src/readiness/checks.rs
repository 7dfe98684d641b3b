//! The readiness verdicts as plain functions: what was read goes in, one
//! [`ReadinessCheck`] comes out, with a detail that says what was seen and, when it is not
//! ok, what to do. No I/O here; the use case (`readiness::check`) reads the stores.

use chrono::{DateTime, Utc};
use contract::{
    BaselineRun, ChangeState, ReadinessCheck, ReadinessCheckName as Name, Rehearsal,
    RehearsalStatus, SwitchChangeRow,
};
use std::time::Duration;

use crate::baselines::store::AppliedBaseline;
use sale::audit::SwitchFlip;

/// Largest clock difference with the database a sale tolerates.
pub(crate) const CLOCK_TOLERANCE_MS: f64 = 100.0;

fn verdict(name: Name, ok: bool, detail: String) -> ReadinessCheck {
    ReadinessCheck { name, ok, detail }
}

/// A check whose facts could not be read: not ok, saying what could not be read and why.
pub(crate) fn unreadable(name: Name, what: &str, error: impl std::fmt::Display) -> ReadinessCheck {
    verdict(name, false, format!("could not read {what}: {error}"))
}

/// One item as the stock ledger's cut saw it.
pub(crate) struct ItemState {
    pub(crate) item_id: i64,
    pub(crate) name: String,
    /// `None`: the item's Redis state is gone or was never loaded.
    pub(crate) redis_stock: Option<i64>,
    /// Units PostgreSQL leaves to sell, counting deductions in flight.
    pub(crate) db_stock: i64,
    pub(crate) redis_buyers: i64,
    pub(crate) db_buyers: i64,
}

pub(crate) fn stock(items: &[ItemState]) -> ReadinessCheck {
    if items.is_empty() {
        return verdict(Name::Stock, false, "the activity has no items".into());
    }
    let wrong: Vec<String> = items
        .iter()
        .filter_map(|item| match item.redis_stock {
            None => Some(format!(
                "item {} ({}): no stock in Redis, the database leaves {}",
                item.item_id, item.name, item.db_stock
            )),
            Some(redis) if redis != item.db_stock => Some(format!(
                "item {} ({}): Redis {redis}, the database leaves {}",
                item.item_id, item.name, item.db_stock
            )),
            Some(_) => None,
        })
        .collect();
    if wrong.is_empty() {
        let units: i64 = items.iter().map(|item| item.db_stock).sum();
        verdict(
            Name::Stock,
            true,
            format!(
                "{} item(s): Redis equals the database ({units} unit(s) to sell)",
                items.len()
            ),
        )
    } else {
        verdict(
            Name::Stock,
            false,
            format!(
                "{}; pre-warm the activity again (or run a reconciliation repair)",
                wrong.join("; ")
            ),
        )
    }
}

pub(crate) fn buyer_records(items: &[ItemState]) -> ReadinessCheck {
    let wrong: Vec<String> = items
        .iter()
        .filter(|item| item.redis_buyers != item.db_buyers)
        .map(|item| {
            format!(
                "item {} ({}): Redis records {} buyer(s), the database {}",
                item.item_id, item.name, item.redis_buyers, item.db_buyers
            )
        })
        .collect();
    if wrong.is_empty() {
        let buyers: i64 = items.iter().map(|item| item.db_buyers).sum();
        verdict(
            Name::BuyerRecords,
            true,
            format!("{buyers} buyer record(s), the same in Redis and the database"),
        )
    } else {
        verdict(
            Name::BuyerRecords,
            false,
            format!(
                "{}; pre-warm the activity again (or run a reconciliation repair)",
                wrong.join("; ")
            ),
        )
    }
}

/// What the Bloom filter said of the activity's own keys and of made-up ones.
pub(crate) struct BloomProbe {
    /// The filter's bitmap is gone from Redis.
    pub(crate) gone: bool,
    /// The activity's keys (activity, items) the filter says are absent.
    pub(crate) absent: Vec<String>,
    pub(crate) own_keys: usize,
    /// Keys nobody added, and how many of them the filter let through.
    pub(crate) probes: usize,
    pub(crate) false_positives: usize,
    /// The rate the filter is sized for.
    pub(crate) target_rate: f64,
}

impl BloomProbe {
    /// Measured false positives above twice the target (and a few probes of chance) mean
    /// the filter holds more keys than it was sized for.
    fn too_many_false_positives(&self) -> bool {
        let allowed = 2.0 * self.target_rate * self.probes as f64 + 3.0;
        self.false_positives as f64 > allowed
    }
}

pub(crate) fn bloom(probe: &BloomProbe) -> ReadinessCheck {
    let rate = |n: usize| 100.0 * n as f64 / probe.probes.max(1) as f64;
    let measured = format!(
        "{} of {} made-up keys passed ({:.2} %, sized for {:.2} %)",
        probe.false_positives,
        probe.probes,
        rate(probe.false_positives),
        100.0 * probe.target_rate
    );
    if probe.gone {
        return verdict(
            Name::Bloom,
            false,
            "the Bloom filter is gone from Redis: pre-warm the activity again".into(),
        );
    }
    if !probe.absent.is_empty() {
        return verdict(
            Name::Bloom,
            false,
            format!(
                "not in the Bloom filter: {}; pre-warm the activity again",
                probe.absent.join(", ")
            ),
        );
    }
    if probe.too_many_false_positives() {
        return verdict(
            Name::Bloom,
            false,
            format!("{measured}: the filter holds more keys than it is sized for; raise `bloom_capacity`"),
        );
    }
    verdict(
        Name::Bloom,
        true,
        format!(
            "{} key(s) of the activity present; {measured}",
            probe.own_keys
        ),
    )
}

pub(crate) fn scripts(missing: &[&str], total: usize) -> ReadinessCheck {
    if missing.is_empty() {
        verdict(
            Name::Scripts,
            true,
            format!("all {total} scripts loaded on Redis"),
        )
    } else {
        verdict(
            Name::Scripts,
            false,
            format!(
                "not loaded on Redis: {}; pre-warm the activity again (it loads every script)",
                missing.join(", ")
            ),
        )
    }
}

/// One sale switch: its value across the deployment and what a sale wants.
pub(crate) struct SwitchState {
    pub(crate) path: String,
    pub(crate) value: String,
    /// `None`: either value is fine, only reported (the challenge).
    pub(crate) expected: Option<&'static str>,
    pub(crate) last_flip: Option<SwitchFlip>,
}

fn flipped(flip: Option<&SwitchFlip>) -> String {
    match flip {
        None => "never flipped".into(),
        Some(flip) => format!(
            "last flip {} → {} by {} at {} ({:?})",
            flip.old_value.as_deref().unwrap_or("unset"),
            flip.new_value,
            flip.actor,
            flip.at.format("%Y-%m-%d %H:%M:%S UTC"),
            flip.reason
        ),
    }
}

/// `etcd_error`: etcd could not be read, so the values are only this instance's last.
pub(crate) fn switches(states: &[SwitchState], etcd_error: Option<&str>) -> ReadinessCheck {
    let wrong: Vec<&SwitchState> = states
        .iter()
        .filter(|state| state.expected.is_some_and(|want| want != state.value))
        .collect();
    let shown: Vec<String> = states
        .iter()
        .map(|state| {
            let want = match state.expected {
                Some(want) if want != state.value => format!(", a sale needs {want}"),
                Some(_) => String::new(),
                None => ", either is fine".into(),
            };
            format!(
                "{} = {}{want} ({})",
                state.path,
                state.value,
                flipped(state.last_flip.as_ref())
            )
        })
        .collect();
    let mut detail = shown.join("; ");
    if let Some(error) = etcd_error {
        detail = format!("etcd unreachable ({error}), values are the last known: {detail}");
    }
    if !wrong.is_empty() {
        let flips: Vec<String> = wrong
            .iter()
            .map(|state| format!("{} to {}", state.path, state.expected.unwrap_or_default()))
            .collect();
        detail = format!("flip {} — {detail}", flips.join(", "));
    }
    verdict(
        Name::Switches,
        wrong.is_empty() && etcd_error.is_none(),
        detail,
    )
}

/// One fallback an operator may need on the day: the switches that carry it, the value a
/// sale runs with and the value it falls back to.
pub(crate) struct Fallback {
    /// Any of these rehearses it (the entry: the platform's or this activity's own).
    pub(crate) paths: Vec<String>,
    pub(crate) sale_value: &'static str,
    pub(crate) fallback_value: &'static str,
}

/// The first flip of one of the fallback's switches away from the sale's value, and the
/// first later flip of that same switch back to it. `flips` are oldest first.
fn rehearsal_of<'f>(
    fallback: &Fallback,
    flips: &'f [SwitchFlip],
) -> Option<(&'f SwitchFlip, &'f SwitchFlip)> {
    flips.iter().enumerate().find_map(|(i, away)| {
        if !fallback.paths.contains(&away.path) || away.new_value == fallback.sale_value {
            return None;
        }
        flips[i + 1..]
            .iter()
            .find(|back| back.path == away.path && back.new_value == fallback.sale_value)
            .map(|back| (away, back))
    })
}

/// `newest`: the live instance that started last, and when (`None`: no instance says).
/// `flips`: every flip of the fallbacks' switches since then, oldest first. A rehearsal
/// counts only when every instance serving now was running to apply it.
pub(crate) fn switches_rehearsed(
    fallbacks: &[Fallback],
    flips: &[SwitchFlip],
    newest: Option<(&str, DateTime<Utc>)>,
) -> ReadinessCheck {
    let Some((node, started)) = newest else {
        return verdict(
            Name::SwitchesRehearsed,
            false,
            "no live instance reports when it started, so no rehearsal can be dated: is any server running and connected?".into(),
        );
    };
    let since = format!(
        "since {node}, the newest instance, started at {}",
        started.format("%Y-%m-%d %H:%M:%S UTC")
    );
    let time = |flip: &SwitchFlip| flip.at.format("%H:%M:%S").to_string();
    let mut rehearsed = Vec::new();
    let mut missing = Vec::new();
    for fallback in fallbacks {
        match rehearsal_of(fallback, flips) {
            Some((away, back)) => rehearsed.push(format!(
                "{} {} at {}, back at {}",
                away.path,
                away.new_value,
                time(away),
                time(back)
            )),
            None => missing.push(format!(
                "{} to {} and back",
                fallback.paths[0], fallback.fallback_value
            )),
        }
    }
    if missing.is_empty() {
        verdict(
            Name::SwitchesRehearsed,
            true,
            format!("{since}: {}", rehearsed.join("; ")),
        )
    } else {
        verdict(
            Name::SwitchesRehearsed,
            false,
            format!(
                "not rehearsed {since}: flip {} while no buyer is waiting (the switch board shows each instance applying it)",
                missing.join(", ")
            ),
        )
    }
}

/// How much slower than its baseline a rehearsal's buys may answer (p99) and still count
/// as behaving like it: a rehearsal's load is not the sale's, so only a gross change shows.
pub(crate) const REHEARSAL_P99_FACTOR: f64 = 2.0;

/// `last`: the activity's newest rehearsal that is over; `run`: the run it was recorded
/// as; `applied`: the activity's baseline (its own, else its kind's).
pub(crate) fn rehearsal(
    last: Option<&Rehearsal>,
    run: Option<&BaselineRun>,
    applied: Option<&AppliedBaseline>,
) -> ReadinessCheck {
    let Some(last) = last else {
        return verdict(
            Name::Rehearsal,
            false,
            "no rehearsal of this activity has finished: run one before the sale (`seckill rehearse ACTIVITY --buyers N --rate R`, or the console's Rehearsals page)".into(),
        );
    };
    let id = last.id;
    let failing = || -> Vec<String> {
        let checks = last.result.iter().flat_map(|result| &result.checks);
        checks
            .filter(|check| !check.ok)
            .map(|check| check.detail.clone())
            .collect()
    };
    match last.status {
        RehearsalStatus::Passed => {}
        RehearsalStatus::Failed => {
            return verdict(
                Name::Rehearsal,
                false,
                format!(
                    "rehearsal #{id} failed its check: {}; fix it and rehearse again",
                    failing().join("; ")
                ),
            )
        }
        RehearsalStatus::Error | RehearsalStatus::Running => {
            return verdict(
                Name::Rehearsal,
                false,
                format!(
                    "rehearsal #{id} stopped before its check ({}); rehearse again",
                    last.error.as_deref().unwrap_or("no reason recorded")
                ),
            )
        }
    }
    let Some(applied) = applied else {
        return verdict(
            Name::Rehearsal,
            true,
            format!(
                "rehearsal #{id} passed its check; no baseline run is marked to hold it against"
            ),
        );
    };
    let Some(run) = run else {
        return verdict(
            Name::Rehearsal,
            false,
            format!(
                "rehearsal #{id} passed its check, but its run is not recorded yet (the leader records it a few report intervals after the load): wait, then check again"
            ),
        );
    };
    let baseline = &applied.run;
    let mut changes: Vec<String> = [
        ("successful", &run.path.success, &baseline.path.success),
        ("refused", &run.path.refused, &baseline.path.refused),
    ]
    .into_iter()
    .flat_map(|(outcome, now, before)| {
        now.new_calls(before)
            .into_iter()
            .map(move |(call, more)| format!("{more:+.1} {call} per {outcome} buy"))
    })
    .collect();
    let p99 = |run: &BaselineRun| run.perf.buy().and_then(|buy| buy.p99_ms);
    let latency = match (p99(run), p99(baseline)) {
        (Some(now), Some(before)) => {
            if now > before * REHEARSAL_P99_FACTOR {
                changes.push(format!(
                    "buy p99 {now:.1} ms, over {REHEARSAL_P99_FACTOR} × the baseline's {before:.1} ms"
                ));
            }
            format!("buy p99 {now:.1} ms (baseline {before:.1} ms)")
        }
        _ => "no buy latency to compare".into(),
    };
    if changes.is_empty() {
        verdict(
            Name::Rehearsal,
            true,
            format!(
                "rehearsal #{id} passed its check and stayed within baseline {}: {latency}, no new call per buy",
                applied.run_name()
            ),
        )
    } else {
        verdict(
            Name::Rehearsal,
            false,
            format!(
                "rehearsal #{id} passed its check but left baseline {}: {}; find what changed on the buy path (the Baselines page shows both runs), or mark the rehearsal's run the baseline if the change is meant",
                applied.run_name(),
                changes.join(", ")
            ),
        )
    }
}

/// `latest`: the newest revision of any switch or limit in etcd; `nodes`: each live
/// instance's id and the revision it has applied.
pub(crate) fn propagation(latest: i64, nodes: &[(String, i64)]) -> ReadinessCheck {
    if nodes.is_empty() {
        return verdict(
            Name::Propagation,
            false,
            "no instance reports under nodes/ in etcd: is any server running and connected?".into(),
        );
    }
    let behind: Vec<String> = nodes
        .iter()
        .filter(|(_, applied)| *applied < latest)
        .map(|(node, applied)| format!("{node} at revision {applied}"))
        .collect();
    if behind.is_empty() {
        verdict(
            Name::Propagation,
            true,
            format!("{} live instance(s) applied revision {latest}", nodes.len()),
        )
    } else {
        verdict(
            Name::Propagation,
            false,
            format!(
                "behind revision {latest}: {}; check those instances' etcd connection (the switch board shows each)",
                behind.join(", ")
            ),
        )
    }
}

/// Consumers on the create-order and the pay-timeout queues.
pub(crate) fn consumers(queues: &[(&str, u32)]) -> ReadinessCheck {
    let missing: Vec<&str> = queues
        .iter()
        .filter(|(_, consumers)| *consumers == 0)
        .map(|(queue, _)| *queue)
        .collect();
    let seen: Vec<String> = queues
        .iter()
        .map(|(queue, consumers)| format!("{queue}: {consumers} consumer(s)"))
        .collect();
    if missing.is_empty() {
        verdict(Name::Consumers, true, seen.join("; "))
    } else {
        verdict(
            Name::Consumers,
            false,
            format!(
                "no consumer on {}; start the workers (`seckill serve` or `seckill worker`) — {}",
                missing.join(", "),
                seen.join("; ")
            ),
        )
    }
}

pub(crate) fn dead_letters(waiting: i64) -> ReadinessCheck {
    if waiting == 0 {
        verdict(Name::DeadLetters, true, "no dead letter waiting".into())
    } else {
        verdict(
            Name::DeadLetters,
            false,
            format!("{waiting} dead letter(s) waiting: inspect them on the dead-letters page, fix the cause, requeue"),
        )
    }
}

/// `oldest_pending`: age of the oldest row waiting to be published; `grace`: how long the
/// relay leaves a row to the buy path's own publish; `failed`: rows the relay gave up on.
pub(crate) fn outbox(oldest_pending: Duration, grace: Duration, failed: i64) -> ReadinessCheck {
    let lagging = oldest_pending > grace;
    let mut problems = Vec::new();
    if lagging {
        problems.push(format!(
            "the oldest pending row waits {:.1} s, past the relay's grace of {:.1} s: is RabbitMQ reachable, is a leader running the relay?",
            oldest_pending.as_secs_f64(),
            grace.as_secs_f64()
        ));
    }
    if failed > 0 {
        problems.push(format!(
            "{failed} row(s) the relay gave up on: fix the cause (is RabbitMQ reachable, its exchange declared?), then retry them from the outbox (the dead-letters page, or POST /admin/api/outbox/retry)"
        ));
    }
    if problems.is_empty() {
        verdict(
            Name::Outbox,
            true,
            format!(
                "no row pending past the relay's grace of {:.1} s, none failed",
                grace.as_secs_f64()
            ),
        )
    } else {
        verdict(Name::Outbox, false, problems.join("; "))
    }
}

/// `stuck`: answered pre-orders waiting past `flag_after` since their event was last sent
/// (or since they were written), by outbox status (`missing`: no row). No timer fails them,
/// so each one waits for a person.
pub(crate) fn stuck_preorders(stuck: &[(String, i64)], flag_after: Duration) -> ReadinessCheck {
    let total: i64 = stuck.iter().map(|(_, count)| count).sum();
    if total == 0 {
        return verdict(
            Name::StuckPreorders,
            true,
            format!(
                "no pre-order waits past fail_stuck_after_s ({} s) since its event was last sent",
                flag_after.as_secs()
            ),
        );
    }
    let by_status: Vec<String> = stuck
        .iter()
        .map(|(status, count)| format!("{count} {status}"))
        .collect();
    verdict(
        Name::StuckPreorders,
        false,
        format!(
            "{total} pre-order(s) answered 200 still wait for the pipeline past fail_stuck_after_s ({} s) since their event was last sent (outbox: {}); they are never failed by a timer: replay the recorded orders, retry the failed outbox rows, look at RabbitMQ, the consumers and the dead letters (reconciliation findings PREORDER_STUCK, flagged, name them)",
            flag_after.as_secs(),
            by_status.join(", ")
        ),
    )
}

pub(crate) fn leader(elected: Option<&str>) -> ReadinessCheck {
    match elected {
        Some(node) => verdict(Name::Leader, true, format!("{node} leads the singleton jobs")),
        None => verdict(
            Name::Leader,
            false,
            "no leader elected: the outbox relay and the pay-timeout scanner run nowhere; is any server connected to etcd?".into(),
        ),
    }
}

/// This process's clock against the database's, measured around one query.
pub(crate) struct ClockSample {
    /// This clock minus the database's, at the query's midpoint.
    pub(crate) offset_ms: f64,
    pub(crate) round_trip_ms: f64,
    /// The database's clock when the instances' reports were read.
    pub(crate) db_now: DateTime<Utc>,
}

/// `reports`: each live instance's id and the wall time it wrote its last report at. A
/// report written after the database's "now" comes from a clock that is ahead; one behind
/// by less than the heartbeat period cannot be told apart from the report's age.
pub(crate) fn clocks(
    own: &ClockSample,
    reports: &[(String, DateTime<Utc>)],
    heartbeat: Duration,
) -> ReadinessCheck {
    let own_ok = own.offset_ms.abs() <= CLOCK_TOLERANCE_MS;
    let ahead: Vec<String> = reports
        .iter()
        .filter_map(|(node, written)| {
            let ahead_ms = (*written - own.db_now).num_microseconds()? as f64 / 1000.0;
            (ahead_ms > CLOCK_TOLERANCE_MS).then(|| {
                format!("{node} wrote its report {ahead_ms:.0} ms ahead of the database's clock")
            })
        })
        .collect();
    let mut detail = format!(
        "this process: {:+.1} ms from the database (round trip {:.1} ms)",
        own.offset_ms, own.round_trip_ms
    );
    if !own_ok {
        detail.push_str(": beyond 100 ms, fix its time sync (NTP)");
    }
    if ahead.is_empty() {
        detail.push_str(&format!(
            "; {} instance report(s): none ahead of the database (a clock behind by less than the heartbeat, {} ms, is not visible in them)",
            reports.len(),
            heartbeat.as_millis()
        ));
    } else {
        detail.push_str(&format!(
            "; {}: fix their time sync (NTP)",
            ahead.join(", ")
        ));
    }
    verdict(Name::Clocks, own_ok && ahead.is_empty(), detail)
}

mod lottery;
#[cfg(test)]
mod tests;

pub(crate) use lottery::{lottery, LotteryState};

/// How long a change may wait for a second person before readiness points at it.
pub(crate) const APPROVAL_WAIT: chrono::Duration = chrono::Duration::minutes(5);

/// Changes that wait and what a sale should know of them: `sale` is the activity's window.
/// A scheduled change or a revert that lands within it, on a key the activity obeys, is a
/// flip during the sale nobody may be watching; a change waiting for approval for longer
/// than [`APPROVAL_WAIT`] is a decision somebody forgot; a stage still in force leaves the
/// instances disagreeing on a key the sale obeys.
pub(crate) fn changes(
    waiting: &[SwitchChangeRow],
    activity_id: i64,
    sale: (DateTime<Utc>, DateTime<Utc>),
    now: DateTime<Utc>,
) -> ReadinessCheck {
    let during = |at: Option<DateTime<Utc>>| at.is_some_and(|at| at >= sale.0 && at <= sale.1);
    let concerns = |path: &str| match path.strip_prefix("switches/entry/") {
        Some(id) => id == activity_id.to_string(),
        None => true,
    };
    let mut found = Vec::new();
    for change in waiting.iter().filter(|change| concerns(&change.path)) {
        let (id, path, value) = (change.id, &change.path, &change.value);
        match change.state {
            ChangeState::Scheduled if during(change.apply_at) => found.push(format!(
                "change #{id} sets {path} to `{value}` at {} during the sale",
                change
                    .apply_at
                    .map(|at| at.to_rfc3339())
                    .unwrap_or_default()
            )),
            ChangeState::Applied if change.revert_dropped.is_none() && during(change.revert_at) => {
                found.push(format!(
                    "change #{id} reverts {path} at {} during the sale",
                    change
                        .revert_at
                        .map(|at| at.to_rfc3339())
                        .unwrap_or_default()
                ))
            }
            ChangeState::Staged => found.push(format!(
                "change #{id} stages {path} at `{value}` on {}: promote or abort it",
                change
                    .stage_instances
                    .clone()
                    .unwrap_or_default()
                    .join(", ")
            )),
            ChangeState::PendingApproval if change.created_at < now - APPROVAL_WAIT => {
                found.push(format!(
                    "change #{id} ({path} to `{value}`, by {}) has waited for approval since {}",
                    change.proposer,
                    change.created_at.to_rfc3339()
                ))
            }
            _ => {}
        }
    }
    if found.is_empty() {
        verdict(
            Name::Changes,
            true,
            "no change lands during the sale; none waits long for approval".into(),
        )
    } else {
        verdict(
            Name::Changes,
            false,
            format!(
                "{}: confirm them or cancel them on the switch board",
                found.join("; ")
            ),
        )
    }
}
