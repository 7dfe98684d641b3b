//! What a flip would touch, shown before it is made: the live and upcoming activities the
//! key governs, each with its buy requests per second over about the last minute and its
//! requests in flight, summed over the instances that apply the key. The figures come
//! from the heartbeats the board reads anyway (each instance counts its buys per activity,
//! `sale::buy::traffic`): a preview costs one read of etcd, and a buy nothing more than two
//! counters.

use chrono::{DateTime, Utc};
use contract::{
    Actor, ImpactedActivity, ImpactedInstance, NodeState, Permission, SaleWindow, SwitchImpact,
};

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
    let activities: Vec<ImpactedActivity> = catalog::store::list_activities(board.db, None)
        .await?
        .into_iter()
        .filter(|activity| match key {
            SwitchKey::ActivityEntry(id) => activity.id == id,
            _ => true,
        })
        .filter_map(|activity| {
            let window = SaleWindow::at(activity.starts_at, activity.ends_at, now_ms);
            let (buy_rate_per_s, in_flight) = traffic(&read.nodes, |id| id == activity.id);
            (window != SaleWindow::Ended).then(|| ImpactedActivity {
                id: activity.id,
                title: activity.title,
                window: window.as_str().to_owned(),
                starts_at: activity.starts_at,
                ends_at: activity.ends_at,
                buy_rate_per_s,
                in_flight,
            })
        })
        .collect();
    let touched = |id: i64| activities.iter().any(|activity| activity.id == id);
    let instances: Vec<ImpactedInstance> = read
        .nodes
        .iter()
        .map(|node| {
            let (buy_rate_per_s, in_flight) = traffic(std::slice::from_ref(node), touched);
            ImpactedInstance {
                node_id: node.node_id.clone(),
                buy_rate_per_s,
                in_flight,
            }
        })
        .collect();
    Ok(SwitchImpact {
        changes_anything: current != value,
        buy_rate_per_s: activities.iter().map(|a| a.buy_rate_per_s).sum(),
        in_flight: activities.iter().map(|a| a.in_flight).sum(),
        path,
        current,
        value,
        effect,
        activities,
        instances,
    })
}

/// The buy requests per second and in flight of the activities `wanted` picks, summed
/// over `nodes`' heartbeats.
fn traffic(nodes: &[NodeState], wanted: impl Fn(i64) -> bool) -> (f64, u64) {
    nodes
        .iter()
        .flat_map(|node| &node.buys.activities)
        .filter(|buys| wanted(buys.activity_id))
        .fold((0.0, 0), |(rate, in_flight), buys| {
            (rate + buys.rate_per_s, in_flight + buys.in_flight)
        })
}
