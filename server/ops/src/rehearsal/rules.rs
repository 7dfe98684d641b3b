//! The plain rules of a rehearsal: what may be asked, how long it takes and whether a real
//! sale is in its way, and the verdicts of the invariant
//! check from the figures the stores gave (`check` gathers them).

use chrono::{DateTime, Utc};
use contract::{InvariantCheck, InvariantName, StartRehearsal};
use std::time::Duration;
use uuid::Uuid;

use crate::rehearsal::plan::MAX_BUYERS;

/// Fastest load a rehearsal may ask for, in buy requests per second.
pub(crate) const MAX_RATE_PER_S: i64 = 20_000;
/// Offenders named in a failed check's detail.
const SHOWN: usize = 5;

/// Why a rehearsal's parameters are refused, if they are.
pub(crate) fn refusal(request: &StartRehearsal) -> Option<String> {
    if !(1..=MAX_BUYERS).contains(&request.buyers) {
        return Some(format!("buyers must be between 1 and {MAX_BUYERS}"));
    }
    if !(1..=MAX_RATE_PER_S).contains(&request.rate_per_s) {
        return Some(format!("rate_per_s must be between 1 and {MAX_RATE_PER_S}"));
    }
    None
}

/// What a rehearsal takes besides its load: copying and pre-warming the activity, before it.
pub(crate) const PREPARE: Duration = Duration::from_secs(30);
/// How long the pipeline and Redis get to settle after the load.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);
/// What the clean-up is given, after the check.
pub(crate) const CLEAN_UP: Duration = Duration::from_secs(60);

/// How long a rehearsal of `requests` at `rate_per_s` takes at most: preparing, the load,
/// settling and the clean-up.
pub(crate) fn time_needed(requests: u64, rate_per_s: u32) -> Duration {
    let load = Duration::from_secs_f64(requests as f64 / f64::from(rate_per_s.max(1)));
    PREPARE + load + SETTLE + CLEAN_UP
}

/// A real sale a rehearsal would run into: the rehearsal needs `needed` from `now`, and
/// `next` is the real activity that opens first (`None`: none is planned).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum InTheWay {
    /// Activity `.0` is on sale now.
    OnSale(i64),
    /// Activity `activity` starts at `starts_at`, sooner than the rehearsal would end.
    StartsTooSoon {
        activity: i64,
        starts_at: DateTime<Utc>,
        available: Duration,
    },
}

/// Whether a rehearsal needing `needed` from `now` runs into the real activity `next`.
pub(crate) fn in_the_way(
    next: Option<(i64, DateTime<Utc>)>,
    needed: Duration,
    now: DateTime<Utc>,
) -> Option<InTheWay> {
    let (activity, starts_at) = next?;
    if starts_at <= now {
        return Some(InTheWay::OnSale(activity));
    }
    let available = (starts_at - now).to_std().unwrap_or_default();
    (available < needed).then_some(InTheWay::StartsTooSoon {
        activity,
        starts_at,
        available,
    })
}

/// One item of the shadow after its load, as PostgreSQL and the ledger's cut saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ItemFigures {
    pub(crate) item_id: i64,
    pub(crate) total: i64,
    pub(crate) per_user_limit: i64,
    /// Units held by orders that keep stock.
    pub(crate) held: i64,
    /// The item row's count of units held (what pre-orders allocated).
    pub(crate) allocated: i64,
    /// Buyers holding more than the limit, with what they hold.
    pub(crate) over_limit: Vec<(i64, i64)>,
    pub(crate) redis_stock: Option<i64>,
    /// Units deducted in Redis whose pre-order the cut did not see.
    pub(crate) in_flight: i64,
    /// What the ledger found missing from `total = redis + allocated + in flight + owed`.
    pub(crate) drift: i64,
}

/// The whole rehearsal after its load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) items: Vec<ItemFigures>,
    /// Order ids answered with a 200.
    pub(crate) ok_orders: usize,
    /// Of those, the ones with no order holding stock.
    pub(crate) ok_without_order: Vec<Uuid>,
    /// Replays of a granted request that got a verdict, and how many got another one.
    pub(crate) replays: usize,
    pub(crate) replays_differing: usize,
    /// Pre-orders the pipeline has not completed.
    pub(crate) pre_created_left: i64,
}

fn check(name: InvariantName, item_id: Option<i64>, ok: bool, detail: String) -> InvariantCheck {
    InvariantCheck {
        name,
        item_id,
        ok,
        detail,
    }
}

/// Every invariant's verdict: per item, not oversold, nobody over the limit and Redis
/// settled; for the rehearsal, every 200 with its order, replays alike and the pipeline
/// done.
pub(crate) fn verdicts(figures: &Figures) -> Vec<InvariantCheck> {
    let mut checks = Vec::new();
    for item in &figures.items {
        let id = Some(item.item_id);
        checks.push(check(
            InvariantName::NotOversold,
            id,
            item.held <= item.total && item.allocated <= item.total,
            format!(
                "{} units held by orders ({} allocated), stock {}",
                item.held, item.allocated, item.total
            ),
        ));
        let detail = if item.over_limit.is_empty() {
            format!("nobody holds more than {}", item.per_user_limit)
        } else {
            let shown: Vec<String> = item
                .over_limit
                .iter()
                .take(SHOWN)
                .map(|(buyer, units)| format!("buyer {buyer} holds {units}"))
                .collect();
            format!(
                "{} buyers over the limit of {}: {}",
                item.over_limit.len(),
                item.per_user_limit,
                shown.join(", ")
            )
        };
        checks.push(check(
            InvariantName::WithinLimit,
            id,
            item.over_limit.is_empty(),
            detail,
        ));
        let settled = item.redis_stock == Some(item.total - item.held)
            && item.in_flight == 0
            && item.drift == 0;
        let redis = item
            .redis_stock
            .map_or_else(|| "absent".to_owned(), |stock| stock.to_string());
        checks.push(check(
            InvariantName::RedisSettled,
            id,
            settled,
            format!(
                "Redis stock {redis}, stock {} minus {} held = {}; {} units in flight, drift {}",
                item.total,
                item.held,
                item.total - item.held,
                item.in_flight,
                item.drift
            ),
        ));
    }
    let missing = &figures.ok_without_order;
    let detail = if missing.is_empty() {
        format!(
            "all {} orders answered with 200 hold stock",
            figures.ok_orders
        )
    } else {
        let shown: Vec<String> = missing.iter().take(SHOWN).map(Uuid::to_string).collect();
        format!(
            "{} of {} orders answered with 200 hold no stock, e.g. {}",
            missing.len(),
            figures.ok_orders,
            shown.join(", ")
        )
    };
    checks.push(check(
        InvariantName::EveryOkHasItsOrder,
        None,
        missing.is_empty(),
        detail,
    ));
    checks.push(check(
        InvariantName::ReplaysAnswerAlike,
        None,
        figures.replays_differing == 0,
        format!(
            "{} of {} granted requests sent again were answered otherwise than with their order",
            figures.replays_differing, figures.replays
        ),
    ));
    checks.push(check(
        InvariantName::PipelineCompleted,
        None,
        figures.pre_created_left == 0,
        format!(
            "{} pre-orders not completed by the pipeline",
            figures.pre_created_left
        ),
    ));
    checks
}

/// Passed when every check is.
pub(crate) fn passed(checks: &[InvariantCheck]) -> bool {
    checks.iter().all(|check| check.ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_on_now_or_starting_before_the_rehearsal_ends_is_in_its_way() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let needed = time_needed(3_600, 60);
        assert_eq!(needed, Duration::from_secs(30 + 60 + 60 + 60));
        assert_eq!(in_the_way(None, needed, now), None);
        assert_eq!(
            in_the_way(Some((4, now)), needed, now),
            Some(InTheWay::OnSale(4))
        );
        let soon = now + chrono::Duration::seconds(200);
        assert_eq!(
            in_the_way(Some((5, soon)), needed, now),
            Some(InTheWay::StartsTooSoon {
                activity: 5,
                starts_at: soon,
                available: Duration::from_secs(200)
            })
        );
        let later = now + chrono::Duration::seconds(210);
        assert_eq!(in_the_way(Some((5, later)), needed, now), None);
    }

    fn sold_out_item() -> ItemFigures {
        ItemFigures {
            item_id: 2,
            total: 300,
            per_user_limit: 1,
            held: 300,
            allocated: 300,
            over_limit: Vec::new(),
            redis_stock: Some(0),
            in_flight: 0,
            drift: 0,
        }
    }

    fn healthy() -> Figures {
        Figures {
            items: vec![sold_out_item()],
            ok_orders: 300,
            ok_without_order: Vec::new(),
            replays: 30,
            replays_differing: 0,
            pre_created_left: 0,
        }
    }

    fn failing(figures: &Figures) -> Vec<(InvariantName, Option<i64>)> {
        verdicts(figures)
            .into_iter()
            .filter(|check| !check.ok)
            .map(|check| (check.name, check.item_id))
            .collect()
    }

    #[test]
    fn a_clean_run_passes_every_check() {
        let checks = verdicts(&healthy());
        assert_eq!(checks.len(), 3 + 3);
        assert!(passed(&checks), "{checks:?}");
    }

    #[test]
    fn each_broken_invariant_fails_its_own_check_only() {
        use InvariantName::*;
        let mut oversold = healthy();
        oversold.items[0].held = 301;
        oversold.items[0].redis_stock = Some(-1);
        assert_eq!(
            failing(&oversold),
            [(NotOversold, Some(2))],
            "-1 = 300 - 301: Redis agrees"
        );

        let mut greedy = healthy();
        greedy.items[0].over_limit = vec![(8_000_000_000_000_001, 2)];
        assert_eq!(failing(&greedy), [(WithinLimit, Some(2))]);
        assert!(verdicts(&greedy)[1].detail.contains("holds 2"));

        let mut drifted = healthy();
        drifted.items[0].redis_stock = Some(1);
        assert_eq!(failing(&drifted), [(RedisSettled, Some(2))]);
        let mut moving = healthy();
        moving.items[0].in_flight = 1;
        assert_eq!(failing(&moving), [(RedisSettled, Some(2))]);
        let mut gone = healthy();
        gone.items[0].redis_stock = None;
        assert_eq!(failing(&gone), [(RedisSettled, Some(2))]);

        let mut lost = healthy();
        lost.ok_without_order = vec![Uuid::nil()];
        assert_eq!(failing(&lost), [(EveryOkHasItsOrder, None)]);

        let mut forgetful = healthy();
        forgetful.replays_differing = 1;
        assert_eq!(failing(&forgetful), [(ReplaysAnswerAlike, None)]);

        let mut stuck = healthy();
        stuck.pre_created_left = 3;
        assert_eq!(failing(&stuck), [(PipelineCompleted, None)]);
        assert!(!passed(&verdicts(&stuck)));
    }

    #[test]
    fn parameters_out_of_range_are_refused() {
        let asked = |buyers, rate_per_s| StartRehearsal {
            buyers,
            rate_per_s,
            reason: "drill".into(),
        };
        assert_eq!(refusal(&asked(3_000, 1_500)), None);
        assert!(refusal(&asked(0, 1_500)).is_some());
        assert!(refusal(&asked(MAX_BUYERS + 1, 1_500)).is_some());
        assert!(refusal(&asked(3_000, 0)).is_some());
        assert!(refusal(&asked(3_000, MAX_RATE_PER_S + 1)).is_some());
    }
}
