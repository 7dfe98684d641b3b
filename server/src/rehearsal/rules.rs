//! The plain rules of a rehearsal: what may be asked, and the verdicts of the invariant
//! check from the figures the stores gave (`check` gathers them).

use contract::{InvariantCheck, InvariantName, StartRehearsal};
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
