//! The switch and limit values one instance has accepted from etcd, key by key, and the
//! copy of them kept on local disk for a start-up with etcd down, with the values staged
//! on some instances (an instance restarted then still applies the stage that names it).
//!
//! An invalid value is refused key by key: the key keeps its last valid value, so a typo
//! in etcd never puts garbage in force, nor silently resets the key to its default.

use chrono::{DateTime, Utc};
use contract::SwitchStage;
use serde::{Deserialize, Serialize};
use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use crate::control::keys::{self, KeyError, Setting, SwitchKey};
use sale::switches::SwitchValues;

/// A value as etcd held it when it was accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) value: String,
    pub(crate) mod_revision: i64,
}

/// A key as an event or a read shows it; `value: None` means deleted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observed<'a> {
    /// Relative to the prefix.
    pub(crate) path: &'a str,
    pub(crate) value: Option<&'a str>,
    pub(crate) mod_revision: i64,
}

/// What observing one key did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Outside `switches/`, `limits/` and `rules/` (nodes, write notes, the election, anything else).
    NotASwitch,
    /// Same value and revision as already accepted.
    Unchanged,
    /// The key's accepted entry changed (a new value, a re-write, or a deletion).
    Applied(SwitchKey),
    /// Unknown key, or invalid value: ignored, the last valid value stays.
    Rejected(KeyError),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    entries: BTreeMap<SwitchKey, (Setting, Entry)>,
}

impl Accepted {
    /// Applies one key's new state.
    pub(crate) fn observe(&mut self, seen: Observed<'_>) -> Outcome {
        if !is_switch_path(seen.path) {
            return Outcome::NotASwitch;
        }
        let key = match SwitchKey::parse(seen.path) {
            Ok(key) => key,
            // Deleting a key nobody understood changes nothing.
            Err(_) if seen.value.is_none() => return Outcome::Unchanged,
            Err(error) => return Outcome::Rejected(error),
        };
        let Some(raw) = seen.value else {
            return match self.entries.remove(&key) {
                Some(_) => Outcome::Applied(key),
                None => Outcome::Unchanged,
            };
        };
        let setting = match key.parse_value(raw) {
            Ok(setting) => setting,
            Err(error) => return Outcome::Rejected(error),
        };
        let entry = Entry {
            value: raw.to_owned(),
            mod_revision: seen.mod_revision,
        };
        if self.entries.get(&key).is_some_and(|(_, old)| *old == entry) {
            return Outcome::Unchanged;
        }
        self.entries.insert(key, (setting, entry));
        Outcome::Applied(key)
    }

    /// Replaces everything with a full read of the prefix: keys missing from it are gone
    /// (their setting's value applies again). Returns what changed or was refused.
    pub(crate) fn reload(&mut self, all: &[Observed<'_>]) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        let mut present = Vec::new();
        for seen in all {
            let outcome = self.observe(*seen);
            if let Ok(key) = SwitchKey::parse(seen.path) {
                present.push(key);
            }
            if !matches!(outcome, Outcome::NotASwitch | Outcome::Unchanged) {
                outcomes.push(outcome);
            }
        }
        let gone: Vec<SwitchKey> = self
            .entries
            .keys()
            .filter(|key| !present.contains(key))
            .copied()
            .collect();
        for key in gone {
            self.entries.remove(&key);
            outcomes.push(Outcome::Applied(key));
        }
        outcomes
    }

    pub(crate) fn entry(&self, key: &SwitchKey) -> Option<&Entry> {
        self.entries.get(key).map(|(_, entry)| entry)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &SwitchKey> {
        self.entries.keys()
    }

    /// The values in force: the settings, overridden by every accepted value.
    pub(crate) fn values(&self, defaults: &SwitchValues, revision: i64) -> SwitchValues {
        keys::values_from(
            defaults,
            self.entries
                .iter()
                .map(|(key, (setting, _))| (key, *setting)),
            revision,
        )
    }

    pub(crate) fn to_snapshot(
        &self,
        prefix: &str,
        revision: i64,
        stages: &BTreeMap<String, SwitchStage>,
    ) -> DiskSnapshot {
        DiskSnapshot {
            prefix: prefix.to_owned(),
            revision,
            saved_at: Utc::now(),
            entries: self
                .entries
                .iter()
                .map(|(key, (_, entry))| (key.path(), entry.clone()))
                .collect(),
            stages: stages.clone(),
        }
    }
}

/// Whether a path belongs to the switch board at all.
pub(crate) fn is_switch_path(path: &str) -> bool {
    path.starts_with("switches/") || path.starts_with("limits/") || path.starts_with("rules/")
}

/// The last accepted values on local disk (`settings.control.snapshot_path`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DiskSnapshot {
    /// The etcd prefix they came from: a file of another deployment is not used.
    pub(crate) prefix: String,
    pub(crate) revision: i64,
    pub(crate) saved_at: DateTime<Utc>,
    pub(crate) entries: BTreeMap<String, Entry>,
    /// The stages in etcd, by switch path (absent from files written before stages were
    /// kept).
    #[serde(default)]
    pub(crate) stages: BTreeMap<String, SwitchStage>,
}

impl DiskSnapshot {
    /// The accepted values it holds, each validated again (the file may have been edited).
    pub(crate) fn accepted(&self) -> (Accepted, Vec<KeyError>) {
        let mut accepted = Accepted::default();
        let mut refused = Vec::new();
        for (path, entry) in &self.entries {
            if let Outcome::Rejected(error) = accepted.observe(Observed {
                path,
                value: Some(&entry.value),
                mod_revision: entry.mod_revision,
            }) {
                refused.push(error);
            }
        }
        (accepted, refused)
    }

    /// Reads the snapshot at `path`; `Ok(None)` when there is none.
    pub(crate) fn read(path: &Path) -> anyhow::Result<Option<DiskSnapshot>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Writes atomically: a temporary file beside the target, flushed, then renamed over
    /// it, so a crash leaves the old snapshot or the new one, never half of one.
    pub(crate) fn write(&self, path: &Path) -> anyhow::Result<()> {
        let folder = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(folder)?;
        let mut temporary = PathBuf::from(path);
        temporary.set_extension(format!("tmp-{}", std::process::id()));
        {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&serde_json::to_vec_pretty(self)?)?;
            file.sync_all()?;
        }
        std::fs::rename(&temporary, path)?;
        // The rename itself is durable only once the folder is flushed.
        if let Ok(dir) = std::fs::File::open(folder) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::keys::LimitName;
    use base::config::{BuySettings, DeductionMode};

    fn put<'a>(path: &'a str, value: &'a str, mod_revision: i64) -> Observed<'a> {
        Observed {
            path,
            value: Some(value),
            mod_revision,
        }
    }

    fn delete(path: &str, mod_revision: i64) -> Observed<'_> {
        Observed {
            path,
            value: None,
            mod_revision,
        }
    }

    fn defaults() -> SwitchValues {
        SwitchValues::from_settings(&BuySettings::default())
    }

    #[test]
    fn valid_values_apply_and_deletions_restore_the_setting() {
        let mut accepted = Accepted::default();
        assert_eq!(
            accepted.observe(put("switches/entry", "closed", 5)),
            Outcome::Applied(SwitchKey::Entry)
        );
        assert!(!accepted.values(&defaults(), 5).entry_open);
        assert_eq!(
            accepted.observe(put("switches/entry", "closed", 5)),
            Outcome::Unchanged
        );
        assert_eq!(
            accepted.observe(put("switches/entry", "closed", 6)),
            Outcome::Applied(SwitchKey::Entry),
            "a re-write is a new revision to confirm"
        );
        assert_eq!(
            accepted.observe(delete("switches/entry", 7)),
            Outcome::Applied(SwitchKey::Entry)
        );
        assert_eq!(
            accepted.values(&defaults(), 7),
            SwitchValues {
                revision: 7,
                ..defaults()
            }
        );
    }

    #[test]
    fn an_invalid_value_keeps_the_last_valid_one() {
        let mut accepted = Accepted::default();
        accepted.observe(put("limits/per_user_per_window", "3", 4));
        let outcome = accepted.observe(put("limits/per_user_per_window", "lots", 5));
        assert!(matches!(
            outcome,
            Outcome::Rejected(KeyError::InvalidValue { .. })
        ));
        assert_eq!(
            accepted.values(&defaults(), 5).limits.per_user_per_window,
            3
        );
        assert_eq!(
            accepted
                .entry(&SwitchKey::Limit(LimitName::PerUserPerWindow))
                .map(|e| e.mod_revision),
            Some(4)
        );
    }

    #[test]
    fn other_keys_are_not_switches_and_unknown_switches_are_refused() {
        let mut accepted = Accepted::default();
        assert_eq!(
            accepted.observe(put("nodes/a", "{}", 3)),
            Outcome::NotASwitch
        );
        assert_eq!(
            accepted.observe(put("meta/writes/switches/entry", "{}", 3)),
            Outcome::NotASwitch
        );
        assert!(matches!(
            accepted.observe(put("switches/kill", "on", 3)),
            Outcome::Rejected(KeyError::UnknownKey(_))
        ));
        assert_eq!(
            accepted.observe(delete("switches/kill", 4)),
            Outcome::Unchanged
        );
        assert_eq!(accepted, Accepted::default());
    }

    #[test]
    fn a_reload_drops_keys_that_are_gone_and_keeps_valid_ones_over_garbage() {
        let mut accepted = Accepted::default();
        accepted.observe(put("switches/entry", "closed", 2));
        accepted.observe(put("switches/deduction", "db", 3));
        accepted.observe(put("limits/max_in_flight", "10", 4));
        let outcomes = accepted.reload(&[
            put("switches/deduction", "db", 3),
            put("limits/max_in_flight", "ten", 9),
            put("switches/entry/8", "closed", 10),
            put("nodes/x", "{}", 11),
        ]);
        assert_eq!(outcomes.len(), 3, "{outcomes:?}");
        assert!(outcomes.contains(&Outcome::Applied(SwitchKey::Entry)));
        assert!(outcomes.contains(&Outcome::Applied(SwitchKey::ActivityEntry(8))));
        let values = accepted.values(&defaults(), 11);
        assert!(values.entry_open, "deleted while unseen");
        assert_eq!(values.deduction, DeductionMode::Db);
        assert_eq!(values.limits.max_in_flight, 10, "garbage refused");
        assert!(!values.entry_open_for(8));
    }

    #[test]
    fn the_disk_snapshot_round_trips_atomically() {
        let mut accepted = Accepted::default();
        accepted.observe(put("switches/challenge", "on", 7));
        accepted.observe(put("limits/rate_window_s", "2", 8));
        let folder =
            std::env::temp_dir().join(format!("seckill-snapshot-{}", uuid::Uuid::new_v4()));
        let path = folder.join("nested/control.json");
        assert_eq!(DiskSnapshot::read(&path).expect("no file is fine"), None);
        let stages = BTreeMap::from([(
            "limits/max_in_flight".to_owned(),
            SwitchStage {
                change_id: 3,
                value: "40".into(),
                instances: vec!["node-a".into()],
            },
        )]);
        let snapshot = accepted.to_snapshot("/p", 8, &stages);
        snapshot.write(&path).expect("write");
        snapshot.write(&path).expect("overwrite");
        let read = DiskSnapshot::read(&path).expect("read").expect("present");
        assert_eq!(read, snapshot);
        assert_eq!(read.stages, stages);
        let (restored, refused) = read.accepted();
        assert!(refused.is_empty());
        assert_eq!(restored, accepted);
        let leftovers = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .count();
        assert_eq!(leftovers, 1, "no temporary file stays behind");
        std::fs::remove_dir_all(folder).expect("clean up");
    }

    #[test]
    fn an_edited_snapshot_is_validated_again() {
        let mut snapshot = Accepted::default().to_snapshot("/p", 1, &BTreeMap::new());
        snapshot.entries.insert(
            "switches/async".into(),
            Entry {
                value: "sometimes".into(),
                mod_revision: 1,
            },
        );
        let (accepted, refused) = snapshot.accepted();
        assert_eq!(accepted, Accepted::default());
        assert_eq!(refused.len(), 1);
    }
}
