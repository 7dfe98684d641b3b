//! What a flip would touch, shown before it is made: the live and upcoming activities the
//! key governs, and the buy traffic of the instances that apply it (their buy requests per
//! second over about the last minute and their requests in flight, from the heartbeats).
//!
//! Traffic is counted per instance, not per activity: the buy path counts its answers by
//! route, and an activity's share of them is not measured.

use chrono::{DateTime, Utc};
use contract::{Actor, ImpactedActivity, ImpactedInstance, Permission, SaleWindow, SwitchImpact};

use crate::control::{board::Board, keys::SwitchKey};
use base::error::ApiResult;
use sale::{catalog, identity::authorize, switches::SwitchValues};

/// The impact of setting `path` to `value` at `now`; 400 for a key or value a flip would
/// refuse.
pub async fn impact(
    board: &Board<'_>,
    actor: &Actor,
    path: &str,
    value: &str,
    now: DateTime<Utc>,
) -> ApiResult<SwitchImpact> {
    authorize(actor, Permission::ReadSwitches)?;
    let key = SwitchKey::parse(path.trim_matches('/'))?;
    let value = key.parse_value(value)?.to_string();
    let path = key.path();
    let read = board.read().await?;
    // An activity's entry key absent from etcd has no line on the board: its setting holds.
    let current = read
        .switches
        .iter()
        .find(|row| row.path == path)
        .and_then(|row| row.etcd_value.clone())
        .unwrap_or_else(|| key.value_in(&SwitchValues::from_settings(&board.settings.buy)));
    let effect = key
        .choices()
        .iter()
        .zip(key.choice_notes())
        .find(|(choice, _)| **choice == value)
        .map_or_else(|| key.meaning(), |(_, note)| (*note).to_owned());
    let now_ms = now.timestamp_millis();
    let activities = catalog::store::list_activities(board.db, None)
        .await?
        .into_iter()
        .filter(|activity| match key {
            SwitchKey::ActivityEntry(id) => activity.id == id,
            _ => true,
        })
        .filter_map(|activity| {
            let window = SaleWindow::at(activity.starts_at, activity.ends_at, now_ms);
            (window != SaleWindow::Ended).then(|| ImpactedActivity {
                id: activity.id,
                title: activity.title,
                window: window.as_str().to_owned(),
                starts_at: activity.starts_at,
                ends_at: activity.ends_at,
            })
        })
        .collect();
    let instances: Vec<ImpactedInstance> = read
        .nodes
        .iter()
        .map(|node| ImpactedInstance {
            node_id: node.node_id.clone(),
            buy_rate_per_s: node.buys.rate_per_s,
            in_flight: node.buys.in_flight,
        })
        .collect();
    Ok(SwitchImpact {
        changes_anything: current != value,
        buy_rate_per_s: instances.iter().map(|node| node.buy_rate_per_s).sum(),
        in_flight: instances.iter().map(|node| node.in_flight).sum(),
        path,
        current,
        value,
        effect,
        activities,
        instances,
    })
}
