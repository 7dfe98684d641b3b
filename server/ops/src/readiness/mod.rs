//! The pre-sale readiness check: `GET /admin/api/readiness?activity_id=`, the console's
//! page and `seckill readiness ACTIVITY` ask [`check`], which reads every store once
//! (through the capabilities that own them: the stock ledger, the Bloom filter, the
//! scripts, the switch board and its audit, the rehearsals and baseline runs, the
//! pipeline's queues and tables, the election) and hands
//! what it read to the verdicts of [`checks`]. One go/no-go: every check ok.
//!
//! A check whose store cannot be read is not ok and says why; the others still run.

pub(crate) mod checks;
pub(crate) mod routes;

use chrono::Utc;
use contract::{
    Actor, Permission, Readiness, ReadinessCheck, ReadinessCheckName as Name, RehearsalStatus,
};
use sale::{buy::bloom::BloomClient, lottery::scripts::LotteryClient};
use std::time::{Duration, Instant};

use crate::{
    baselines::store as baselines_store,
    control::{board::Board, election, keys::SwitchKey, layout::Layout},
    reconcile::{ledger, rules, store as reconcile_store},
    rehearsal::store as rehearsal_store,
    state::AppState,
};
use base::{error::ApiResult, lua};
use checks::{BloomProbe, ClockSample, ItemState, SwitchState};
use sale::{
    audit,
    buy::bloom,
    catalog::copies,
    catalog::store::StoredActivity,
    identity::authorize,
    orders::{dead_letters, mq::broker::queue_states, outbox},
    switches::SwitchValues,
};

/// Made-up keys the Bloom filter is asked about to measure its false-positive rate.
const BLOOM_PROBES: usize = 1000;
/// How long the leader lookup may take.
const ETCD_WAIT: Duration = Duration::from_secs(2);

pub async fn check(state: &AppState, actor: &Actor, activity_id: i64) -> ApiResult<Readiness> {
    authorize(actor, Permission::WatchOperations)?;
    let activity = copies::real_activity(&state.db, activity_id, None).await?;
    let (
        redis_state,
        bloom,
        scripts,
        control,
        rehearsal,
        consumers,
        backlog,
        leader,
        changes,
        draw,
    ) = tokio::join!(
        redis_state(state, activity_id),
        bloom_check(state, &activity),
        scripts_check(state),
        control_checks(state, activity_id),
        rehearsal_check(state, activity_id),
        consumers_check(state),
        backlog_checks(state),
        leader_read(state),
        changes_check(state, &activity),
        draw_read(state, &activity),
    );
    let mut all = redis_state;
    all.extend([bloom, scripts, rehearsal]);
    all.extend(control);
    all.push(consumers);
    all.extend(backlog);
    all.extend([
        leader_check(&leader),
        changes,
        lottery_check(state, &activity, draw, &leader),
    ]);
    all.sort_by_key(|check| Name::ALL.iter().position(|name| *name == check.name));
    Ok(Readiness::of(activity_id, all))
}

/// Stock and buyer records: one cut of the stock ledger, and the holders PostgreSQL counts
/// in the same snapshot.
async fn redis_state(state: &AppState, activity_id: i64) -> Vec<ReadinessCheck> {
    let read = async {
        let (observed, mut tx) = ledger::observe(state, activity_id).await?;
        let mut items = Vec::with_capacity(observed.len());
        for item in observed {
            let ledger = item.ledger;
            let db_buyers =
                reconcile_store::holder_count(&mut tx, activity_id, ledger.item_id).await?;
            items.push(ItemState {
                item_id: ledger.item_id,
                // What Redis should hold: the drift of an empty Redis.
                db_stock: rules::drift(
                    ledger.total,
                    0,
                    ledger.allocated,
                    ledger.in_flight,
                    ledger.restore_owed,
                ),
                redis_stock: ledger.redis_stock,
                redis_buyers: ledger.redis_buyers,
                db_buyers,
                name: ledger.name,
            });
        }
        tx.rollback().await?;
        anyhow::Ok(items)
    };
    match read.await {
        Ok(items) => vec![checks::stock(&items), checks::buyer_records(&items)],
        Err(error) => vec![
            checks::unreadable(Name::Stock, "the stock ledger", format!("{error:#}")),
            checks::unreadable(Name::BuyerRecords, "the stock ledger", format!("{error:#}")),
        ],
    }
}

/// The activity's own keys, then made-up keys nobody added, all at once.
async fn bloom_check(state: &AppState, activity: &StoredActivity) -> ReadinessCheck {
    let shape = state.catalogue.bloom();
    let own: Vec<String> = std::iter::once(bloom::activity_key(activity.id))
        .chain(
            activity
                .lines
                .iter()
                .map(|line| bloom::item_key(activity.id, line.item_id)),
        )
        .collect();
    let run = uuid::Uuid::new_v4();
    let made_up: Vec<String> = (0..BLOOM_PROBES)
        .map(|i| format!("readiness-probe:{run}:{i}"))
        .collect();
    let read = async {
        let own_answers = lookups(state, shape, &own).await?;
        Ok::<_, redis::RedisError>((own_answers, lookups(state, shape, &made_up).await?))
    };
    match read.await {
        Ok((own_answers, probe_answers)) => checks::bloom(&BloomProbe {
            gone: own_answers.contains(&bloom::BloomAnswer::FilterGone),
            absent: own
                .iter()
                .zip(&own_answers)
                .filter(|(_, answer)| **answer == bloom::BloomAnswer::Absent)
                .map(|(key, _)| key.clone())
                .collect(),
            own_keys: own.len(),
            probes: BLOOM_PROBES,
            false_positives: probe_answers
                .iter()
                .filter(|answer| **answer == bloom::BloomAnswer::MaybePresent)
                .count(),
            target_rate: state.settings.buy.bloom_false_positive_rate,
        }),
        Err(error) => checks::unreadable(Name::Bloom, "the Bloom filter", error),
    }
}

/// What the filter says of each key, asked all at once on the multiplexed connection.
async fn lookups(
    state: &AppState,
    shape: bloom::BloomShape,
    keys: &[String],
) -> redis::RedisResult<Vec<bloom::BloomAnswer>> {
    futures::future::try_join_all(keys.iter().map(|key| async move {
        BloomClient(&state.redis)
            .bloom_lookup(&shape.positions(key))
            .await
    }))
    .await
}

/// Rehearsals the check looks through for the newest one that is over.
const REHEARSALS_LOOKED_AT: i64 = 20;

/// The activity's newest rehearsal that is over, the run it was recorded as, and the
/// activity's baseline run.
async fn rehearsal_check(state: &AppState, activity_id: i64) -> ReadinessCheck {
    let read = async {
        let last = rehearsal_store::list(&state.db, Some(activity_id), REHEARSALS_LOOKED_AT)
            .await?
            .into_iter()
            .find(|rehearsal| rehearsal.status != RehearsalStatus::Running);
        let run = match &last {
            Some(last) => baselines_store::run_of_rehearsal(&state.db, last.id).await?,
            None => None,
        };
        let baseline = baselines_store::baseline_of(&state.db, activity_id).await?;
        Ok::<_, sqlx::Error>((last, run, baseline))
    };
    match read.await {
        Ok((last, run, baseline)) => {
            checks::rehearsal(last.as_ref(), run.as_ref(), baseline.as_ref())
        }
        Err(error) => checks::unreadable(Name::Rehearsal, "the rehearsals and runs", error),
    }
}

async fn scripts_check(state: &AppState) -> ReadinessCheck {
    match state.redis.missing_scripts().await {
        Ok(missing) => checks::scripts(&missing, lua::NAMES.len()),
        Err(error) => checks::unreadable(Name::Scripts, "the scripts on Redis", error),
    }
}

/// Switches, propagation and clocks: one read of the switch board (etcd), the audit's last
/// flips, and a clock sample of the database taken right after the board was read.
async fn control_checks(state: &AppState, activity_id: i64) -> Vec<ReadinessCheck> {
    let board = match Board::of(state).read().await {
        Ok(board) => board,
        Err(error) => {
            return [
                Name::Switches,
                Name::SwitchesRehearsed,
                Name::Propagation,
                Name::Clocks,
            ]
            .map(|name| checks::unreadable(name, "the switch board", &error))
            .into();
        }
    };
    let wanted: [(SwitchKey, Option<&'static str>); 5] = [
        (SwitchKey::Entry, Some("open")),
        (SwitchKey::ActivityEntry(activity_id), Some("open")),
        (SwitchKey::Deduction, Some("redis")),
        (SwitchKey::Async, Some("mq")),
        (SwitchKey::Challenge, None),
    ];
    let paths: Vec<String> = wanted.iter().map(|(key, _)| key.path()).collect();
    let defaults = SwitchValues::from_settings(&state.settings.buy);
    let flips = audit::last_flips(&state.db, &paths).await;
    let switches = match flips {
        Ok(flips) => {
            let states: Vec<SwitchState> = wanted
                .iter()
                .map(|(key, expected)| {
                    let path = key.path();
                    let row = board.switches.iter().find(|row| row.path == path);
                    SwitchState {
                        value: row
                            .and_then(|row| row.in_force.clone().or(row.etcd_value.clone()))
                            .unwrap_or_else(|| key.value_in(&defaults)),
                        expected: *expected,
                        last_flip: flips.iter().find(|flip| flip.path == path).cloned(),
                        path,
                    }
                })
                .collect();
            checks::switches(&states, board.etcd.error.as_deref())
        }
        Err(error) => checks::unreadable(Name::Switches, "the switch audit", error),
    };
    let rehearsed = switch_drill_check(state, activity_id, &board).await;
    let propagation = if let Some(error) = &board.etcd.error {
        checks::unreadable(Name::Propagation, "etcd", error)
    } else {
        let latest = board
            .switches
            .iter()
            .filter_map(|row| row.mod_revision)
            .max()
            .unwrap_or(0);
        let nodes: Vec<(String, i64)> = board
            .nodes
            .iter()
            .map(|node| (node.node_id.clone(), node.applied_revision))
            .collect();
        checks::propagation(latest, &nodes)
    };
    let clocks = match clock_sample(&state.db).await {
        Ok(sample) => {
            let reports: Vec<_> = board
                .nodes
                .iter()
                .map(|node| (node.node_id.clone(), node.heartbeat_at))
                .collect();
            let heartbeat = Duration::from_millis(state.settings.control.heartbeat_ms);
            checks::clocks(&sample, &reports, heartbeat)
        }
        Err(error) => checks::unreadable(Name::Clocks, "the database's clock", error),
    };
    vec![switches, rehearsed, propagation, clocks]
}

/// The fallbacks of a sale, each flipped away and back since the newest live instance
/// started (the switch audit in PostgreSQL has the flips, the board the instances).
async fn switch_drill_check(
    state: &AppState,
    activity_id: i64,
    board: &contract::SwitchBoard,
) -> ReadinessCheck {
    let fallbacks = [
        checks::Fallback {
            paths: vec![
                SwitchKey::Entry.path(),
                SwitchKey::ActivityEntry(activity_id).path(),
            ],
            sale_value: "open",
            fallback_value: "closed",
        },
        checks::Fallback {
            paths: vec![SwitchKey::Deduction.path()],
            sale_value: "redis",
            fallback_value: "db",
        },
        checks::Fallback {
            paths: vec![SwitchKey::Async.path()],
            sale_value: "mq",
            fallback_value: "record",
        },
    ];
    let newest = board
        .nodes
        .iter()
        .filter_map(|node| Some((node.node_id.as_str(), node.started_at?)))
        .max_by_key(|(_, started)| *started);
    let Some((_, since)) = newest else {
        return checks::switches_rehearsed(&fallbacks, &[], None);
    };
    let paths: Vec<String> = fallbacks
        .iter()
        .flat_map(|fallback| fallback.paths.iter().cloned())
        .collect();
    match audit::flips_since(&state.db, &paths, since).await {
        Ok(flips) => checks::switches_rehearsed(&fallbacks, &flips, newest),
        Err(error) => checks::unreadable(Name::SwitchesRehearsed, "the switch audit", error),
    }
}

/// The database's clock against this process's, read around one query.
async fn clock_sample(db: &sqlx::PgPool) -> Result<ClockSample, sqlx::Error> {
    let started = Instant::now();
    let before = chrono::Utc::now();
    let db_now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(db)
        .await?;
    let round_trip = started.elapsed();
    let midpoint = before + chrono::Duration::from_std(round_trip / 2).unwrap_or_default();
    Ok(ClockSample {
        offset_ms: (midpoint - db_now).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0,
        round_trip_ms: round_trip.as_secs_f64() * 1000.0,
        db_now,
    })
}

async fn consumers_check(state: &AppState) -> ReadinessCheck {
    let topology = &state.pipeline.topology;
    let queues = [
        topology.create_queue.as_str(),
        topology.pay_timeout_queue.as_str(),
    ];
    let deadline = Duration::from_millis(state.settings.pipeline.confirm_timeout_ms);
    match queue_states(&state.amqp, topology, &queues, deadline).await {
        Ok(states) => {
            let seen: Vec<(&str, u32)> = queues
                .iter()
                .zip(states)
                .map(|(queue, state)| (*queue, state.consumers))
                .collect();
            checks::consumers(&seen)
        }
        Err(error) => checks::unreadable(Name::Consumers, "the queues on RabbitMQ", error),
    }
}

async fn backlog_checks(state: &AppState) -> Vec<ReadinessCheck> {
    let dead = match dead_letters::store::waiting_count(&state.db).await {
        Ok(waiting) => checks::dead_letters(waiting),
        Err(error) => checks::unreadable(Name::DeadLetters, "the dead letters", error),
    };
    let read = async {
        let oldest = outbox::oldest_pending_age_s(&state.db).await?;
        let counts = outbox::counts(&state.db).await?;
        Ok::<_, sqlx::Error>((oldest, counts.failed))
    };
    let outbox = match read.await {
        Ok((oldest, failed)) => checks::outbox(
            Duration::from_secs_f64(oldest.max(0.0)),
            Duration::from_millis(state.settings.pipeline.relay_grace_ms),
            failed,
        ),
        Err(error) => checks::unreadable(Name::Outbox, "the outbox", error),
    };
    let flag_after = Duration::from_secs(state.settings.reconcile.fail_stuck_after_s);
    let stuck = match sale::orders::stuck::stuck_counts(&state.db, flag_after).await {
        Ok(stuck) => checks::stuck_preorders(&stuck, flag_after),
        Err(error) => checks::unreadable(Name::StuckPreorders, "the stuck pre-orders", error),
    };
    vec![dead, outbox, stuck]
}

/// The switch changes that would land during the sale, or wait too long for approval.
async fn changes_check(state: &AppState, activity: &StoredActivity) -> ReadinessCheck {
    match crate::changes::store::waiting(&state.db).await {
        Ok(waiting) => checks::changes(
            &waiting,
            activity.id,
            (activity.starts_at, activity.ends_at),
            state.changes.now(),
        ),
        Err(error) => checks::unreadable(Name::Changes, "the switch changes", error),
    }
}

/// The leader etcd names, read once for the checks that need it.
async fn leader_read(state: &AppState) -> anyhow::Result<Option<String>> {
    let layout = Layout::new(&state.settings.etcd_prefix);
    tokio::time::timeout(ETCD_WAIT, election::current_leader(state, &layout))
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("etcd did not answer within {ETCD_WAIT:?}")))
}

fn leader_check(leader: &anyhow::Result<Option<String>>) -> ReadinessCheck {
    match leader {
        Ok(leader) => checks::leader(leader.as_deref()),
        Err(error) => {
            checks::unreadable(Name::Leader, "the election in etcd", format!("{error:#}"))
        }
    }
}

/// What readiness reads of a lottery activity's draws.
struct DrawRead {
    items: usize,
    undrawn: usize,
    /// Registrations Redis holds for the undrawn items (`None`: unreadable).
    registrations: Option<i64>,
    /// Whether the buyer API finds the activity (`None`: unreadable).
    reachable: Option<bool>,
}

/// A lottery activity's draws, and whether buyers can reach its registration; `None` for a
/// first-come activity.
async fn draw_read(
    state: &AppState,
    activity: &StoredActivity,
) -> anyhow::Result<Option<DrawRead>> {
    if activity.lottery.is_none() {
        return Ok(None);
    }
    let rows = sale::lottery::store::draw_rows(&state.db, activity.id).await?;
    let undrawn: Vec<i64> = rows
        .iter()
        .filter(|row| row.drawn_at.is_none())
        .map(|row| row.item_id)
        .collect();
    let mut registrations = Some(0);
    for item in &undrawn {
        let sale = contract::SaleItem::new(activity.id, *item);
        // Redis out of reach leaves the count unknown; the verdict does not hang on it.
        let counted = LotteryClient(&state.redis).sources(sale).await.ok();
        registrations = match (registrations, counted) {
            (Some(sum), Some(sources)) => {
                Some(sum + sources.map_or(0, |sources| sources.registrations))
            }
            _ => None,
        };
    }
    let item_ids: Vec<i64> = activity.lines.iter().map(|line| line.item_id).collect();
    let reachable = sale::lottery::registration::reachable(state, activity.id, &item_ids)
        .await
        .ok();
    Ok(Some(DrawRead {
        items: rows.len(),
        undrawn: undrawn.len(),
        registrations,
        reachable,
    }))
}

fn lottery_check(
    state: &AppState,
    activity: &StoredActivity,
    draw: anyhow::Result<Option<DrawRead>>,
    leader: &anyhow::Result<Option<String>>,
) -> ReadinessCheck {
    let (lottery, draw) = match (&activity.lottery, draw) {
        (Some(lottery), Ok(Some(draw))) => (lottery, draw),
        (None, _) | (_, Ok(None)) => return checks::lottery(None, None, Utc::now()),
        (_, Err(error)) => {
            return checks::unreadable(Name::Lottery, "the draws", format!("{error:#}"))
        }
    };
    let leader = match leader {
        Ok(leader) => leader.as_deref(),
        Err(error) => {
            return checks::unreadable(Name::Lottery, "the election in etcd", format!("{error:#}"))
        }
    };
    let now = chrono::DateTime::from_timestamp_millis(state.lottery.now_ms()).unwrap_or_default();
    checks::lottery(
        Some(&checks::LotteryState {
            opens_at: lottery.terms.registration_opens_at,
            closes_at: lottery.terms.registration_closes_at,
            reachable: draw.reachable,
            commitment: &lottery.commitment,
            items: draw.items,
            undrawn: draw.undrawn,
            registrations: draw.registrations,
        }),
        leader,
        now,
    )
}
