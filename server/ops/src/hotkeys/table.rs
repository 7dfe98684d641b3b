//! The hot keys in force on this instance: what `{prefix}/hotkeys/{kind}/{key}` holds, as
//! the control plane's watcher saw it, behind one atomic pointer so the buy path reads it
//! without a lock. The value is JSON ([`Published`]); the key's lease is etcd's, so a key
//! nobody renews disappears by itself.

use arc_swap::ArcSwap;
use contract::{HotKey, HotKeyAction, HotKeyId, HotKeySource};
use serde::{Deserialize, Serialize};
use std::{collections::HashMap, sync::Arc};

/// What the leader or an operator writes under `hotkeys/{kind}/{key}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Published {
    pub(crate) action: HotKeyAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limit_per_s: Option<u64>,
    pub(crate) source: HotKeySource,
    pub(crate) rate_per_s: u64,
    pub(crate) since_ms: i64,
    /// When the lease runs out unless renewed; written again with every renewal.
    pub(crate) expires_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

impl Published {
    /// The key as the API lists it.
    pub(crate) fn listed(self, id: HotKeyId) -> HotKey {
        HotKey {
            kind: id.kind(),
            key: id.to_string(),
            rate_per_s: self.rate_per_s,
            action: self.action,
            limit_per_s: self.limit_per_s,
            source: self.source,
            since_ms: self.since_ms,
            expires_ms: self.expires_ms,
            actor: self.actor,
            reason: self.reason,
        }
    }
}

/// One key in force, with the etcd lease that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InForce {
    pub(crate) value: Published,
    pub(crate) lease: i64,
}

#[derive(Clone, Default)]
pub(crate) struct HotKeyTable(Arc<ArcSwap<HashMap<HotKeyId, InForce>>>);

/// An entry as the watcher read it: the path under `hotkeys/`, the raw value, the lease.
pub(crate) struct Entry<'a> {
    pub(crate) path: &'a str,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) lease: i64,
}

fn parse(entry: &Entry<'_>) -> Option<(HotKeyId, Option<InForce>)> {
    let id = HotKeyId::try_from(entry.path.to_owned()).ok()?;
    let Some(raw) = entry.value else {
        return Some((id, None));
    };
    match serde_json::from_slice::<Published>(raw) {
        Ok(value) if id.kind().allows(value.action) => Some((
            id,
            Some(InForce {
                value,
                lease: entry.lease,
            }),
        )),
        _ => {
            tracing::warn!(path = entry.path, "a malformed hot key in etcd is ignored");
            None
        }
    }
}

impl HotKeyTable {
    /// Everything under `hotkeys/`, read at once: the table becomes exactly that.
    pub(crate) fn replace_all<'a>(&self, entries: impl IntoIterator<Item = Entry<'a>>) {
        let table = entries
            .into_iter()
            .filter_map(|entry| parse(&entry))
            .filter_map(|(id, in_force)| Some((id, in_force?)))
            .collect();
        self.0.store(Arc::new(table));
    }

    /// Changes seen by the watch, in order.
    pub(crate) fn apply<'a>(&self, entries: impl IntoIterator<Item = Entry<'a>>) {
        let changes: Vec<_> = entries.into_iter().filter_map(|e| parse(&e)).collect();
        if changes.is_empty() {
            return;
        }
        let mut table = HashMap::clone(&self.0.load());
        for (id, in_force) in changes {
            match in_force {
                Some(in_force) => table.insert(id, in_force),
                None => table.remove(&id),
            };
        }
        self.0.store(Arc::new(table));
    }

    pub(crate) fn get(&self, id: &HotKeyId) -> Option<InForce> {
        self.0.load().get(id).cloned()
    }

    /// The action in force for `id`, if any; one atomic load and one lookup.
    pub(crate) fn action(&self, id: &HotKeyId) -> Option<(HotKeyAction, Option<u64>, i64)> {
        let table = self.0.load();
        if table.is_empty() {
            return None;
        }
        table.get(id).map(|hot| {
            (
                hot.value.action,
                hot.value.limit_per_s,
                hot.value.expires_ms,
            )
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.load().is_empty()
    }

    pub(crate) fn snapshot(&self) -> Arc<HashMap<HotKeyId, InForce>> {
        self.0.load_full()
    }

    /// The keys in force, for the API: most recent first.
    pub(crate) fn listed(&self) -> Vec<HotKey> {
        let mut hot: Vec<HotKey> = self
            .0
            .load()
            .iter()
            .map(|(id, in_force)| in_force.value.clone().listed(*id))
            .collect();
        hot.sort_by(|a, b| (b.since_ms, a.kind, &a.key).cmp(&(a.since_ms, b.kind, &b.key)));
        hot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(action: HotKeyAction) -> Vec<u8> {
        serde_json::to_vec(&Published {
            action,
            limit_per_s: None,
            source: HotKeySource::Detected,
            rate_per_s: 60,
            since_ms: 1,
            expires_ms: 2,
            actor: None,
            reason: None,
        })
        .expect("json")
    }

    #[test]
    fn the_watch_puts_and_removes_keys() {
        let table = HotKeyTable::default();
        let block = value(HotKeyAction::Block);
        table.replace_all([Entry {
            path: "user/7",
            value: Some(&block),
            lease: 3,
        }]);
        assert_eq!(
            table.action(&HotKeyId::User(7)).map(|a| a.0),
            Some(HotKeyAction::Block)
        );
        let cache = value(HotKeyAction::Cache);
        table.apply([
            Entry {
                path: "user/7",
                value: None,
                lease: 0,
            },
            Entry {
                path: "item/4",
                value: Some(&cache),
                lease: 5,
            },
            // Malformed paths and values, and an action that does not fit the kind.
            Entry {
                path: "user/07",
                value: Some(&block),
                lease: 5,
            },
            Entry {
                path: "item/5",
                value: Some(b"{"),
                lease: 5,
            },
            Entry {
                path: "item/6",
                value: Some(&block),
                lease: 5,
            },
        ]);
        assert!(table.action(&HotKeyId::User(7)).is_none());
        assert_eq!(table.get(&HotKeyId::Item(4)).map(|h| h.lease), Some(5));
        assert_eq!(table.listed().len(), 1);
    }
}
