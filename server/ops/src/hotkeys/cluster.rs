//! The cluster's counts: every instance's latest report, added up per key. Each instance
//! publishes the top keys of its sliding second every eighth of a second; a report older than
//! 750 ms (six periods) is dropped (its instance stopped or lost Redis), so a dead instance's
//! traffic fades out within a second. Pure: the aggregator task feeds it.

use contract::{HotKeyId, HotKeyKind, TopKey, TopKeys};
use serde::{Deserialize, Serialize};
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::hotkeys::window::{Tops, QUARTER_MS};

/// What an instance publishes every eighth of a second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) node: String,
    pub(crate) tops: Tops,
}

/// How long a report counts.
pub(crate) const FRESH: Duration = Duration::from_millis(3 * QUARTER_MS);
/// Instances' reports kept at most: one per node, and nodes are few; a flood of made-up
/// node names cannot grow the map past this.
const MAX_NODES: usize = 256;
/// Keys per kind shown in the top lists.
pub(crate) const SHOWN: usize = 20;

#[derive(Default)]
pub(crate) struct ClusterCounts {
    latest: HashMap<String, (Instant, Tops)>,
}

impl ClusterCounts {
    pub(crate) fn receive(&mut self, report: Report, at: Instant) {
        if self.latest.len() >= MAX_NODES && !self.latest.contains_key(&report.node) {
            self.expire(at);
            if self.latest.len() >= MAX_NODES {
                return;
            }
        }
        self.latest.insert(report.node, (at, report.tops));
    }

    fn expire(&mut self, now: Instant) {
        self.latest
            .retain(|_, (at, _)| now.saturating_duration_since(*at) <= FRESH);
    }

    /// Every key's rate summed over the fresh reports, highest first, and how many
    /// instances reported.
    pub(crate) fn sum(&mut self, now: Instant) -> (Vec<(HotKeyId, u64)>, usize) {
        self.expire(now);
        let mut summed: HashMap<HotKeyId, u64> = HashMap::new();
        for (_, tops) in self.latest.values() {
            for (key, count) in &tops.keys {
                *summed.entry(*key).or_default() += count;
            }
        }
        let mut keys: Vec<(HotKeyId, u64)> = summed.into_iter().collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        (keys, self.latest.len())
    }
}

/// The top keys per kind of a sum, for people.
pub(crate) fn top_keys(summed: &[(HotKeyId, u64)]) -> TopKeys {
    let mut top = TopKeys::default();
    for kind in HotKeyKind::ALL {
        let list = top.of_mut(kind);
        list.extend(
            summed
                .iter()
                .filter(|(key, _)| key.kind() == kind)
                .take(SHOWN)
                .map(|(key, rate)| TopKey {
                    key: key.to_string(),
                    rate_per_s: *rate,
                }),
        );
    }
    top
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(node: &str, keys: &[(HotKeyId, u64)]) -> Report {
        Report {
            node: node.into(),
            tops: Tops {
                keys: keys.to_vec(),
            },
        }
    }

    #[test]
    fn a_key_hot_only_in_the_sum_adds_up_across_instances() {
        let mut cluster = ClusterCounts::default();
        let now = Instant::now();
        let user = HotKeyId::User(9);
        cluster.receive(report("a", &[(user, 30), (HotKeyId::Item(1), 5)]), now);
        cluster.receive(report("b", &[(user, 30)]), now);
        // A newer report of `a` replaces its older one.
        cluster.receive(report("a", &[(user, 31)]), now);
        let (summed, nodes) = cluster.sum(now);
        assert_eq!(nodes, 2);
        assert_eq!(summed, vec![(user, 61)]);
        let top = top_keys(&summed);
        assert_eq!(
            top.user,
            vec![TopKey {
                key: "9".into(),
                rate_per_s: 61
            }]
        );
        assert!(top.item.is_empty());
    }

    #[test]
    fn a_silent_instance_stops_counting() {
        let mut cluster = ClusterCounts::default();
        let start = Instant::now();
        cluster.receive(report("a", &[(HotKeyId::User(1), 10)]), start);
        cluster.receive(report("b", &[(HotKeyId::User(1), 10)]), start + FRESH);
        let (summed, nodes) = cluster.sum(start + FRESH + Duration::from_millis(1));
        assert_eq!((summed, nodes), (vec![(HotKeyId::User(1), 10)], 1));
    }
}
