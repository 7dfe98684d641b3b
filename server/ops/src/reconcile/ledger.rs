//! The live stock ledger: each item's stock as PostgreSQL and Redis count it, read as one
//! cut without stopping the sale.
//!
//! The cut: a snapshot transaction is opened first, then Redis is read in one MULTI, then
//! the markers Redis holds are looked up *in the snapshot*. A marker whose order the
//! snapshot does not see is in flight for this cut, whether its pre-order committed a
//! moment later or not, so neither a deduction nor a commit that lands between the reads
//! is counted twice or missed. Only a cancel given back to Redis between the two reads
//! shows for one cut (as negative drift); that is why the automatic repair acts on a drift
//! only once two cuts in a row agree.

use crate::reconcile::redis_state::ItemStateClient;
use std::time::Duration;

use contract::{LedgerItem, SaleItem};
use sqlx::{Postgres, Transaction};

use crate::{
    reconcile::{
        redis_state::{ItemCounters, Marker},
        rules, store,
    },
    state::AppState,
};

/// Buyer records summed on every cut only up to this many buyers; above, the ledger leaves
/// the sum out and full runs compare buyers chunk by chunk.
const SUMMED_BUYERS_MAX: i64 = 10_000;

/// One item as one cut saw it.
pub(crate) struct Observed {
    pub(crate) ledger: LedgerItem,
    /// Markers whose order the snapshot does not see.
    pub(crate) in_flight: Vec<Marker>,
    /// Markers whose order is committed: done with, for the repair to clear.
    pub(crate) settled: Vec<Marker>,
    /// Milliseconds by Redis's clock when Redis was read.
    pub(crate) redis_now_ms: i64,
    pub(crate) counters: ItemCounters,
}

impl Observed {
    /// In-flight markers older than `grace`: their pre-order is not coming.
    pub(crate) fn overdue(&self, grace: Duration) -> impl Iterator<Item = &Marker> {
        let cutoff = self.redis_now_ms - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        self.in_flight
            .iter()
            .filter(move |marker| marker.at_ms < cutoff)
    }
}

/// Every item of the activity as one cut; also the snapshot, for more reads in it.
pub(crate) async fn observe(
    state: &AppState,
    activity_id: i64,
) -> anyhow::Result<(Vec<Observed>, Transaction<'static, Postgres>)> {
    let mut tx = store::snapshot(&state.db).await?;
    let figures = store::item_figures(&mut *tx, activity_id).await?;
    let mut observed = Vec::with_capacity(figures.len());
    for figures in figures {
        let sale = SaleItem::new(activity_id, figures.item_id);
        let (counters, now) = ItemStateClient(&state.redis).item_counters(sale).await?;
        let ids: Vec<_> = counters.markers.iter().map(|m| m.order).collect();
        let visible = store::visible_orders(&mut tx, &ids).await?;
        let (settled, in_flight): (Vec<Marker>, Vec<Marker>) = counters
            .markers
            .iter()
            .cloned()
            .partition(|marker| visible.contains(&marker.order));
        let in_flight_units: i64 = in_flight.iter().map(|m| m.units).sum();
        let redis_buyer_units = if counters.buyers <= SUMMED_BUYERS_MAX {
            Some(ItemStateClient(&state.redis).buyer_unit_sum(sale).await?)
        } else {
            None
        };
        let drift = counters.stock.map_or(0, |stock| {
            rules::drift(
                figures.total,
                stock,
                figures.allocated,
                in_flight_units,
                figures.restore_owed,
            )
        });
        observed.push(Observed {
            ledger: LedgerItem {
                item_id: figures.item_id,
                name: figures.name,
                total: figures.total,
                redis_stock: counters.stock,
                redis_buyer_units,
                redis_buyers: counters.buyers,
                allocated: figures.allocated,
                sold: figures.sold,
                in_flight: in_flight_units,
                restored: figures.restored,
                restore_owed: figures.restore_owed,
                drift,
            },
            in_flight,
            settled,
            redis_now_ms: now.0,
            counters,
        });
    }
    Ok((observed, tx))
}
