//! One dashboard frame: counters read from the metrics registry as deltas since the frame
//! before, levels read as they are now, the stock ledger once per live activity, the
//! instances from their heartbeats in etcd. The ledger's figures are also exported as the
//! business gauges of every live item (`seckill_item_units`).

use base::percentiles::quantile;
use contract::{
    AdmissionFigures, BuyFigures, DashboardFrame, InstanceHealth, ItemStock, PipelineFigures,
    PoolFigures, SaleItem, StageFigures, BUY_ROUTES,
};
use prometheus::{core::Collector, proto::MetricFamily};
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use crate::{
    baselines::{live::LivePath, store::live_baselines},
    control::board::Board,
    control::status::Complaint,
    state::AppState,
};
use base::tally::PathTotals;
use sale::{catalog::copies::Copies, orders::admin};

/// The funnel's stages in the order a buy request meets them; a stage not listed here
/// (added later) is shown after these.
const STAGES: [&str; 12] = [
    "admission",
    "validate",
    "auth",
    "catalogue",
    "phase",
    "sold_out_flag",
    "idempotency",
    "rate_limit",
    "challenge",
    "deduction",
    "preorder",
    "publish",
];

/// At most this long on etcd per frame: a frame is due every second.
const ETCD_WAIT: Duration = Duration::from_millis(500);
/// The `figure` label of `seckill_item_units`.
const ITEM_FIGURES: [&str; 5] = ["total", "redis_stock", "allocated", "sold", "paid"];
/// Paid units are counted from the orders, not from counters: every this many frames.
const PAID_EVERY: u64 = 10;

/// A latency histogram as counts per bucket: (upper bound in seconds, cumulative count).
type Buckets = Vec<(f64, u64)>;

/// What the frame before saw, for the deltas.
pub(crate) struct Sampler {
    funnel: HashMap<(String, String), u64>,
    buy: Buckets,
    instances: Vec<InstanceHealth>,
    stock_trouble: Complaint,
    paid: PaidUnits,
    /// Items whose business gauges are set, to drop those no longer live.
    gauged: HashSet<SaleItem>,
    /// The buys' path counters as the frame before saw them.
    path: LivePath,
}

impl Default for Sampler {
    fn default() -> Self {
        Self {
            funnel: HashMap::new(),
            buy: Vec::new(),
            instances: Vec::new(),
            stock_trouble: Complaint::new(Duration::from_secs(60)),
            paid: PaidUnits::default(),
            gauged: HashSet::new(),
            path: LivePath::default(),
        }
    }
}

impl Sampler {
    pub(crate) async fn take(&mut self, state: &AppState) -> DashboardFrame {
        let at_ms = chrono::Utc::now().timestamp_millis();
        let funnel = self.funnel(state);
        let buy = self.buy(state);
        let path = self.path.second(&PathTotals::of(&state.metrics));
        let board = Board::of(state);
        let recount = self.paid.due();
        let (items, board) = tokio::join!(
            stock(state, &mut self.paid, recount),
            tokio::time::timeout(ETCD_WAIT, board.read())
        );
        let items = match items {
            Ok(items) => {
                self.stock_trouble.recovered("dashboard stock read again");
                export(state, &items, &mut self.gauged);
                items
            }
            Err(error) => {
                self.stock_trouble
                    .complain("dashboard could not read the stock", &error);
                Vec::new()
            }
        };
        let (etcd_reachable, switches) = match board {
            Ok(Ok(board)) if board.etcd.reachable => {
                self.instances = board
                    .nodes
                    .iter()
                    .map(|node| InstanceHealth {
                        node_id: node.node_id.clone(),
                        address: node.address.clone(),
                        connected: node.connected,
                        leader: node.leader,
                        applied_revision: node.applied_revision,
                        heartbeat_age_ms: (at_ms - node.heartbeat_at.timestamp_millis()).max(0),
                        synced_ago_ms: node.synced_ago_ms,
                    })
                    .collect();
                (true, switch_values(&board))
            }
            Ok(Ok(board)) => (false, switch_values(&board)),
            _ => (false, BTreeMap::new()),
        };
        let against_baseline = match live_baselines(&state.db).await {
            Ok(baselines) => baselines
                .iter()
                .map(|baseline| crate::baselines::live::against(baseline, &buy, &path))
                .collect(),
            // The stock read above complains about PostgreSQL already.
            Err(_) => Vec::new(),
        };
        let limit = state.switches.current().limits.max_in_flight;
        DashboardFrame {
            at_ms,
            node_id: state.control.node_id().to_owned(),
            funnel,
            buy,
            items,
            pipeline: pipeline(state),
            db_pool: PoolFigures {
                size: state.db.size(),
                idle: u32::try_from(state.db.num_idle()).unwrap_or(u32::MAX),
                max: state.db.options().get_max_connections(),
            },
            admission: AdmissionFigures {
                in_flight: state.funnel.in_flight(),
                limit,
            },
            instances: self.instances.clone(),
            etcd_reachable,
            switches,
            against_baseline,
        }
    }

    /// Each stage's counts since the frame before.
    fn funnel(&mut self, state: &AppState) -> Vec<StageFigures> {
        let mut stages: BTreeMap<(usize, String), StageFigures> = BTreeMap::new();
        for family in state.metrics.funnel.collect() {
            for metric in family.get_metric() {
                let (Some(stage), Some(outcome)) =
                    (label(metric, "stage"), label(metric, "outcome"))
                else {
                    continue;
                };
                let now = metric.get_counter().get_value() as u64;
                let key = (stage.to_owned(), outcome.to_owned());
                let before = self.funnel.insert(key, now).unwrap_or(0);
                let delta = now.saturating_sub(before);
                let order = STAGES
                    .iter()
                    .position(|known| *known == stage)
                    .unwrap_or(STAGES.len());
                let figures =
                    stages
                        .entry((order, stage.to_owned()))
                        .or_insert_with(|| StageFigures {
                            stage: stage.to_owned(),
                            passed: 0,
                            stopped: BTreeMap::new(),
                        });
                if outcome == "pass" {
                    figures.passed += delta;
                } else {
                    *figures.stopped.entry(outcome.to_owned()).or_default() += delta;
                }
            }
        }
        stages.into_values().collect()
    }

    /// Buy requests answered since the frame before, and their p99.
    fn buy(&mut self, state: &AppState) -> BuyFigures {
        let now = buy_buckets(&state.metrics.http_duration.collect());
        let delta: Buckets = now
            .iter()
            .map(|&(bound, count)| {
                let before = self
                    .buy
                    .iter()
                    .find(|(b, _)| *b == bound)
                    .map_or(0, |(_, c)| *c);
                (bound, count.saturating_sub(before))
            })
            .collect();
        self.buy = now;
        let requests = delta.last().map_or(0, |(_, count)| *count);
        BuyFigures {
            requests,
            p99_ms: quantile(&delta, 0.99).map(|seconds| seconds * 1000.0),
        }
    }
}

/// The value of a sample's label `name`.
pub(crate) fn label<'a>(metric: &'a prometheus::proto::Metric, name: &str) -> Option<&'a str> {
    metric
        .get_label()
        .iter()
        .find(|pair| pair.name() == name)
        .map(|pair| pair.value())
}

/// The buy routes' latency histograms summed, as cumulative counts per bucket, the last
/// one (`+Inf`) holding every request.
fn buy_buckets(families: &[MetricFamily]) -> Buckets {
    let mut summed: Buckets = Vec::new();
    for family in families {
        for metric in family.get_metric() {
            if !label(metric, "route").is_some_and(|route| BUY_ROUTES.contains(&route)) {
                continue;
            }
            let histogram = metric.get_histogram();
            let buckets = histogram
                .get_bucket()
                .iter()
                .map(|bucket| (bucket.upper_bound(), bucket.cumulative_count()))
                .chain([(f64::INFINITY, histogram.get_sample_count())]);
            if summed.is_empty() {
                summed = buckets.collect();
            } else {
                for (sum, (_, count)) in summed.iter_mut().zip(buckets) {
                    sum.1 += count;
                }
            }
        }
    }
    summed
}

/// Paid units per live item, counted from the orders every [`PAID_EVERY`] frames; the
/// frames between show the last count, which is still the best figure known (a frame that
/// did not count knows nothing new, and showing 0 there drew a sawtooth).
#[derive(Default)]
struct PaidUnits {
    counted: HashMap<SaleItem, i64>,
    frames: u64,
}

impl PaidUnits {
    /// Whether this frame counts again: the first frame, then every [`PAID_EVERY`]th.
    fn due(&mut self) -> bool {
        let due = self.frames.is_multiple_of(PAID_EVERY);
        self.frames += 1;
        due
    }

    /// A new count replaces the last one whole (an item no longer live drops out).
    fn replace(&mut self, counted: HashMap<SaleItem, i64>) {
        self.counted = counted;
    }

    /// The item's paid units as last counted (0 before any paid order).
    fn of(&self, item: SaleItem) -> i64 {
        self.counted.get(&item).copied().unwrap_or_default()
    }
}

/// Every item of every live activity (no rehearsal's copy), one ledger cut per activity, with its paid units as
/// `paid` last counted them (counted again first when `recount`).
async fn stock(
    state: &AppState,
    paid: &mut PaidUnits,
    recount: bool,
) -> anyhow::Result<Vec<ItemStock>> {
    let mut items = Vec::new();
    let live = crate::reconcile::store::live_activity_ids(&state.db, Copies::Excluded).await?;
    if recount {
        let mut counted = HashMap::new();
        for &activity_id in &live {
            for (item_id, units) in admin::store::paid_units(&state.db, activity_id).await? {
                counted.insert(SaleItem::new(activity_id, item_id), units);
            }
        }
        paid.replace(counted);
    }
    for activity_id in live {
        // The cut's snapshot is only read: dropping it rolls it back.
        let (observed, _snapshot) = crate::reconcile::ledger::observe(state, activity_id).await?;
        items.extend(observed.into_iter().map(|item| ItemStock {
            activity_id,
            item_id: item.ledger.item_id,
            paid: paid.of(SaleItem::new(activity_id, item.ledger.item_id)),
            name: item.ledger.name,
            total: item.ledger.total,
            redis_stock: item.ledger.redis_stock,
            allocated: item.ledger.allocated,
            sold: item.ledger.sold,
        }));
    }
    Ok(items)
}

/// The business gauges of every live item (`seckill_item_units`), and none of the items
/// no longer live.
fn export(state: &AppState, items: &[ItemStock], gauged: &mut HashSet<SaleItem>) {
    let gauge = &state.metrics.item_units;
    let mut now = HashSet::new();
    for item in items {
        let (activity, id) = (item.activity_id.to_string(), item.item_id.to_string());
        let units = [
            Some(item.total),
            item.redis_stock,
            Some(item.allocated),
            Some(item.sold),
            Some(item.paid),
        ];
        for (figure, units) in ITEM_FIGURES.into_iter().zip(units) {
            match units {
                Some(units) => gauge
                    .with_label_values(&[&activity, &id, figure])
                    .set(units),
                // Not pre-warmed: no figure rather than a made-up zero.
                None => {
                    let _ = gauge.remove_label_values(&[&activity, &id, figure]);
                }
            }
        }
        now.insert(SaleItem::new(item.activity_id, item.item_id));
    }
    for gone in gauged.difference(&now) {
        let (activity, id) = (gone.activity.to_string(), gone.item.to_string());
        for figure in ITEM_FIGURES {
            let _ = gauge.remove_label_values(&[&activity, &id, figure]);
        }
    }
    *gauged = now;
}

/// Every switch and limit as this instance applies it (else as etcd holds it, else its
/// default).
fn switch_values(board: &contract::SwitchBoard) -> BTreeMap<String, String> {
    board
        .switches
        .iter()
        .map(|row| {
            let value = row
                .in_force
                .clone()
                .or_else(|| row.etcd_value.clone())
                .unwrap_or_else(|| row.default_value.clone());
            (row.path.clone(), value)
        })
        .collect()
}

fn pipeline(state: &AppState) -> PipelineFigures {
    let pipeline = &state.metrics.pipeline;
    PipelineFigures {
        queue_depth: gauges(&pipeline.queue_depth.collect(), "queue"),
        outbox: gauges(&pipeline.outbox_rows.collect(), "status"),
        dead_letters: pipeline.dead_letters_waiting.get(),
    }
}

fn gauges(families: &[MetricFamily], by: &str) -> BTreeMap<String, i64> {
    families
        .iter()
        .flat_map(|family| family.get_metric())
        .filter_map(|metric| {
            label(metric, by).map(|value| (value.to_owned(), metric.get_gauge().get_value() as i64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{PaidUnits, SaleItem, PAID_EVERY};
    use base::percentiles::quantile;
    use std::collections::HashMap;

    #[test]
    fn paid_units_hold_their_last_count_between_counts() {
        let item = SaleItem::new(7, 1);
        let mut paid = PaidUnits::default();
        assert!(paid.due(), "the first frame counts");
        paid.replace(HashMap::from([(item, 3)]));
        for frame in 1..PAID_EVERY {
            assert!(!paid.due(), "frame {frame} does not count");
            assert_eq!(paid.of(item), 3, "frame {frame} shows the last count");
        }
        assert!(paid.due(), "every {PAID_EVERY}th frame counts again");
        paid.replace(HashMap::new());
        assert_eq!(paid.of(item), 0, "a new count replaces the last one whole");
    }

    #[test]
    fn the_p99_interpolates_within_its_bucket() {
        // 100 requests: 98 under 1 ms, 2 between 1 and 2 ms.
        let buckets = [(0.001, 98), (0.002, 100), (f64::INFINITY, 100)];
        let p99 = quantile(&buckets, 0.99).expect("requests");
        assert!((p99 - 0.0015).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(&[(0.001, 0), (f64::INFINITY, 0)], 0.99), None);
        // Beyond the last finite bound: that bound, as Prometheus answers.
        assert_eq!(
            quantile(&[(0.001, 0), (f64::INFINITY, 5)], 0.99),
            Some(0.001)
        );
    }
}
