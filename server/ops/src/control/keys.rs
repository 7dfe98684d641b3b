//! What the switch and limit keys of docs/control-plane.md mean: their paths, the
//! values each accepts, and how a valid value changes [`SwitchValues`]. Pure functions, so
//! the admin API's validation and the watcher's parsing are one rule.

use std::fmt;

use contract::{HotKeyKind, HotKeyRule};

use base::config::{AsyncMode, DeductionMode};
use sale::switches::{Limits, SwitchValues};

/// A switch or limit key, relative to the prefix (`switches/entry`, `limits/max_in_flight`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum SwitchKey {
    /// `switches/entry`: every activity.
    Entry,
    /// `switches/entry/{activity_id}`: one activity.
    ActivityEntry(i64),
    Deduction,
    Async,
    Challenge,
    Limit(LimitName),
    /// `rules/hotkeys/{kind}`: when a key of the kind is hot, and what is done about it.
    HotKeyRule(HotKeyKind),
}

/// The names under `limits/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum LimitName {
    MaxInFlight,
    LocalRatePerS,
    RateWindowS,
    PerUserPerWindow,
    PerIpPerWindow,
    PerItemPerWindow,
    RegistrationsPerIpPerWindow,
}

/// A valid value of some key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    Open(bool),
    Deduction(DeductionMode),
    Async(AsyncMode),
    Challenge(bool),
    Limit(u64),
    /// `off` (no rule: keys of the kind are counted and shown, never published) or a rule.
    HotKeyRule(Option<HotKeyRule>),
}

/// Why a path or value was refused; `code` is the API's error code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("`{0}` is not a switch or limit")]
    UnknownKey(String),
    #[error("`{value}` is not valid for {path}: expected {accepts}")]
    InvalidValue {
        path: String,
        value: String,
        accepts: String,
    },
}

impl KeyError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            KeyError::UnknownKey(_) => "UNKNOWN_SWITCH",
            KeyError::InvalidValue { .. } => "INVALID_SWITCH_VALUE",
        }
    }
}

impl LimitName {
    pub(crate) const ALL: [LimitName; 7] = [
        LimitName::MaxInFlight,
        LimitName::LocalRatePerS,
        LimitName::RateWindowS,
        LimitName::PerUserPerWindow,
        LimitName::PerIpPerWindow,
        LimitName::PerItemPerWindow,
        LimitName::RegistrationsPerIpPerWindow,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LimitName::MaxInFlight => "max_in_flight",
            LimitName::LocalRatePerS => "local_rate_per_s",
            LimitName::RateWindowS => "rate_window_s",
            LimitName::PerUserPerWindow => "per_user_per_window",
            LimitName::PerIpPerWindow => "per_ip_per_window",
            LimitName::PerItemPerWindow => "per_item_per_window",
            LimitName::RegistrationsPerIpPerWindow => "registrations_per_ip_per_window",
        }
    }

    /// What the limit bounds and what a buyer gets beyond it.
    fn meaning(self) -> &'static str {
        match self {
            LimitName::MaxInFlight => "Buy requests one instance handles at once; beyond it a buy \
                is answered 503 OVERLOADED at once. Lower it to shed load, raise it when instances idle.",
            LimitName::LocalRatePerS => "Buy requests per second one instance lets through to \
                Redis (a token bucket); beyond it 429 with Retry-After.",
            LimitName::RateWindowS => "The length in seconds of the Redis rate windows below, \
                and the Retry-After of a 429.",
            LimitName::PerUserPerWindow => "Buy requests one buyer may send per item and window; \
                beyond it 429.",
            LimitName::PerIpPerWindow => "Buy requests one client address may send per item and \
                window; beyond it 429.",
            LimitName::PerItemPerWindow => "Buy requests one item accepts per window across all \
                instances; beyond it 429.",
            LimitName::RegistrationsPerIpPerWindow => "Lottery registrations one client \
                address may make per item and window (`rate_window_s`); beyond it 429.",
        }
    }

    /// The accepted range. Zero is refused everywhere: a zero window breaks the Redis
    /// expiry, and closing the entry is what the entry switch is for.
    pub(crate) fn range(self) -> std::ops::RangeInclusive<u64> {
        match self {
            LimitName::MaxInFlight => 1..=1_000_000,
            LimitName::LocalRatePerS => 1..=100_000_000,
            LimitName::RateWindowS => 1..=3_600,
            LimitName::PerUserPerWindow => 1..=1_000_000,
            LimitName::PerIpPerWindow => 1..=100_000_000,
            LimitName::PerItemPerWindow => 1..=1_000_000_000,
            LimitName::RegistrationsPerIpPerWindow => 1..=100_000_000,
        }
    }

    fn get(self, limits: &Limits) -> u64 {
        match self {
            LimitName::MaxInFlight => limits.max_in_flight,
            LimitName::LocalRatePerS => limits.local_rate_per_s,
            LimitName::RateWindowS => limits.rate_window_s,
            LimitName::PerUserPerWindow => limits.per_user_per_window,
            LimitName::PerIpPerWindow => limits.per_ip_per_window,
            LimitName::PerItemPerWindow => limits.per_item_per_window,
            LimitName::RegistrationsPerIpPerWindow => limits.registrations_per_ip_per_window,
        }
    }

    fn set(self, limits: &mut Limits, value: u64) {
        let slot = match self {
            LimitName::MaxInFlight => &mut limits.max_in_flight,
            LimitName::LocalRatePerS => &mut limits.local_rate_per_s,
            LimitName::RateWindowS => &mut limits.rate_window_s,
            LimitName::PerUserPerWindow => &mut limits.per_user_per_window,
            LimitName::PerIpPerWindow => &mut limits.per_ip_per_window,
            LimitName::PerItemPerWindow => &mut limits.per_item_per_window,
            LimitName::RegistrationsPerIpPerWindow => &mut limits.registrations_per_ip_per_window,
        };
        *slot = value;
    }
}

impl SwitchKey {
    /// The keys that exist for every deployment (per-activity entries come and go).
    pub(crate) fn fixed() -> impl Iterator<Item = SwitchKey> {
        [
            SwitchKey::Entry,
            SwitchKey::Deduction,
            SwitchKey::Async,
            SwitchKey::Challenge,
        ]
        .into_iter()
        .chain(LimitName::ALL.into_iter().map(SwitchKey::Limit))
        .chain(HotKeyKind::ALL.into_iter().map(SwitchKey::HotKeyRule))
    }

    /// Parses a path relative to the prefix, exactly: `switches/entry/` is another etcd
    /// key than `switches/entry`, and not a switch.
    pub(crate) fn parse(path: &str) -> Result<SwitchKey, KeyError> {
        let unknown = || KeyError::UnknownKey(path.to_owned());
        let key = match path {
            "switches/entry" => SwitchKey::Entry,
            "switches/deduction" => SwitchKey::Deduction,
            "switches/async" => SwitchKey::Async,
            "switches/challenge" => SwitchKey::Challenge,
            _ => {
                if let Some(id) = path.strip_prefix("switches/entry/") {
                    // Digits only: `+7` or `007` would name the same activity twice.
                    let canonical = !id.is_empty()
                        && id.bytes().all(|b| b.is_ascii_digit())
                        && !id.starts_with('0');
                    let id = id
                        .parse::<i64>()
                        .ok()
                        .filter(|_| canonical)
                        .ok_or_else(unknown)?;
                    SwitchKey::ActivityEntry(id)
                } else if let Some(name) = path.strip_prefix("limits/") {
                    let limit = LimitName::ALL
                        .into_iter()
                        .find(|limit| limit.as_str() == name)
                        .ok_or_else(unknown)?;
                    SwitchKey::Limit(limit)
                } else if let Some(kind) = path.strip_prefix("rules/hotkeys/") {
                    SwitchKey::HotKeyRule(kind.parse().map_err(|_| unknown())?)
                } else {
                    return Err(unknown());
                }
            }
        };
        Ok(key)
    }

    pub(crate) fn path(&self) -> String {
        match self {
            SwitchKey::Entry => "switches/entry".into(),
            SwitchKey::ActivityEntry(id) => format!("switches/entry/{id}"),
            SwitchKey::Deduction => "switches/deduction".into(),
            SwitchKey::Async => "switches/async".into(),
            SwitchKey::Challenge => "switches/challenge".into(),
            SwitchKey::Limit(limit) => format!("limits/{}", limit.as_str()),
            SwitchKey::HotKeyRule(kind) => format!("rules/hotkeys/{kind}"),
        }
    }

    /// A bounded label for metrics: one per key kind, not per activity.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            SwitchKey::Entry => "entry",
            SwitchKey::ActivityEntry(_) => "entry_activity",
            SwitchKey::Deduction => "deduction",
            SwitchKey::Async => "async",
            SwitchKey::Challenge => "challenge",
            SwitchKey::Limit(limit) => limit.as_str(),
            SwitchKey::HotKeyRule(HotKeyKind::Item) => "hotkey_rule_item",
            SwitchKey::HotKeyRule(HotKeyKind::User) => "hotkey_rule_user",
            SwitchKey::HotKeyRule(HotKeyKind::Ip) => "hotkey_rule_ip",
        }
    }

    /// The values a switch takes, in order; none for a limit (a number in a range).
    pub(crate) fn choices(&self) -> &'static [&'static str] {
        match self {
            SwitchKey::Entry | SwitchKey::ActivityEntry(_) => &["open", "closed"],
            SwitchKey::Deduction => &["redis", "db"],
            SwitchKey::Async => &["mq", "record"],
            SwitchKey::Challenge => &["on", "off"],
            SwitchKey::Limit(_) | SwitchKey::HotKeyRule(_) => &[],
        }
    }

    /// What the key does and how it degrades, in a sentence or two for the switch board.
    pub(crate) fn meaning(&self) -> String {
        match self {
            SwitchKey::Entry => "Whether buyers may buy at all. `closed` refuses every activity's \
                buys (403 ACTIVITY_CLOSED) and the sale pages say the sale is closed; orders \
                already made go on."
                .into(),
            SwitchKey::ActivityEntry(id) => format!(
                "Whether buyers may buy in activity #{id}. `closed` refuses its buys (403 \
                 ACTIVITY_CLOSED) and its sale page says the sale is closed; other activities \
                 sell on."
            ),
            SwitchKey::Deduction => "Where stock is deducted. `redis` (normal): a Lua script in \
                Redis. `db` (the degrade when Redis is in trouble): PostgreSQL deducts directly, \
                slower but never overselling."
                .into(),
            SwitchKey::Async => "How a buy's pre-order reaches the order pipeline. `mq` \
                (normal): published to RabbitMQ at once. `record` (the degrade when RabbitMQ is in \
                trouble): the pre-order is written and nothing is published; pre-orders recorded \
                under `record` stay recorded for an ops replay whatever the switch says later \
                (switching back to `mq` does not send them)."
                .into(),
            SwitchKey::Challenge => "Whether a buy must answer a question first. `on` (against \
                bots): a buy without the right answer is refused CHALLENGE_FAILED and the sale \
                pages ask the question. `off` (normal): no question."
                .into(),
            SwitchKey::Limit(limit) => limit.meaning().into(),
            SwitchKey::HotKeyRule(kind) => format!(
                "Which {kind} keys count as hot, and what every instance does about them. `off`: \
                 hot {kind} keys are counted and shown, nothing more. A rule acts on keys above \
                 its threshold for `hold_s` seconds: watch (show only), {}.",
                match kind {
                    HotKeyKind::Item => "cache (serve the item's reads from memory) or limit (cap its buys per second)",
                    HotKeyKind::User | HotKeyKind::Ip => "limit (cap its buys per second) or block (refuse its buys)",
                }
            ),
        }
    }

    /// What each of [`choices`](Self::choices) does, in the same order.
    pub(crate) fn choice_notes(&self) -> &'static [&'static str] {
        match self {
            SwitchKey::Entry | SwitchKey::ActivityEntry(_) => {
                &["buyers may buy", "every buy is refused (ACTIVITY_CLOSED)"]
            }
            SwitchKey::Deduction => &[
                "normal: stock deducted in Redis",
                "degrade: stock deducted in PostgreSQL (slower, never oversells)",
            ],
            SwitchKey::Async => &[
                "normal: pre-orders published to RabbitMQ",
                "degrade: pre-orders recorded, nothing published; they stay recorded for an ops \
                 replay whatever the switch says later",
            ],
            SwitchKey::Challenge => &[
                "buys must answer a question (CHALLENGE_FAILED otherwise)",
                "normal: no question",
            ],
            SwitchKey::Limit(_) | SwitchKey::HotKeyRule(_) => &[],
        }
    }

    /// The accepted range of a limit; none for a switch or a rule.
    pub(crate) fn range(&self) -> Option<[u64; 2]> {
        match self {
            SwitchKey::Limit(limit) => {
                let range = limit.range();
                Some([*range.start(), *range.end()])
            }
            _ => None,
        }
    }

    /// What the key accepts, for people.
    pub(crate) fn accepts(&self) -> String {
        match self {
            SwitchKey::Limit(limit) => {
                let range = limit.range();
                format!("an integer in {}..={}", range.start(), range.end())
            }
            SwitchKey::HotKeyRule(_) => {
                r#"off | {"threshold_per_s":N,"action":"watch|cache|limit|block","limit_per_s":N?,"hold_s":N}"#
                    .into()
            }
            _ => self.choices().join(" | "),
        }
    }

    /// Validates a value for this key. Surrounding whitespace is tolerated (an `etcdctl put`
    /// from a shell easily adds a newline); anything else must be exact.
    pub(crate) fn parse_value(&self, raw: &str) -> Result<Setting, KeyError> {
        let value = raw.trim();
        let setting = match self {
            SwitchKey::Entry | SwitchKey::ActivityEntry(_) => match value {
                "open" => Some(Setting::Open(true)),
                "closed" => Some(Setting::Open(false)),
                _ => None,
            },
            SwitchKey::Deduction => match value {
                "redis" => Some(Setting::Deduction(DeductionMode::Redis)),
                "db" => Some(Setting::Deduction(DeductionMode::Db)),
                _ => None,
            },
            SwitchKey::Async => match value {
                "mq" => Some(Setting::Async(AsyncMode::Mq)),
                "record" => Some(Setting::Async(AsyncMode::Record)),
                _ => None,
            },
            SwitchKey::Challenge => match value {
                "on" => Some(Setting::Challenge(true)),
                "off" => Some(Setting::Challenge(false)),
                _ => None,
            },
            SwitchKey::Limit(limit) => value
                .parse::<u64>()
                .ok()
                .filter(|n| limit.range().contains(n) && value.bytes().all(|b| b.is_ascii_digit()))
                .map(Setting::Limit),
            SwitchKey::HotKeyRule(kind) => match value {
                "off" => Some(Setting::HotKeyRule(None)),
                json => serde_json::from_str::<HotKeyRule>(json)
                    .ok()
                    .filter(|rule| rule.check(*kind).is_ok())
                    .map(|rule| Setting::HotKeyRule(Some(rule))),
            },
        };
        setting.ok_or_else(|| KeyError::InvalidValue {
            path: self.path(),
            value: raw.to_owned(),
            accepts: self.accepts(),
        })
    }

    /// The value this key has in `values`, written the way etcd holds it.
    pub(crate) fn value_in(&self, values: &SwitchValues) -> String {
        let setting = match self {
            SwitchKey::Entry => Setting::Open(values.entry_open),
            SwitchKey::ActivityEntry(id) => Setting::Open(!values.closed_activities.contains(id)),
            SwitchKey::Deduction => Setting::Deduction(values.deduction),
            SwitchKey::Async => Setting::Async(values.async_mode),
            SwitchKey::Challenge => Setting::Challenge(values.challenge_required),
            SwitchKey::Limit(limit) => Setting::Limit(limit.get(&values.limits)),
            SwitchKey::HotKeyRule(kind) => Setting::HotKeyRule(values.hotkey_rules.of(*kind)),
        };
        setting.to_string()
    }

    /// Puts a valid value of this key into `values`.
    pub(crate) fn apply(&self, setting: Setting, values: &mut SwitchValues) {
        match (self, setting) {
            (SwitchKey::Entry, Setting::Open(open)) => values.entry_open = open,
            (SwitchKey::ActivityEntry(id), Setting::Open(open)) => {
                if open {
                    values.closed_activities.remove(id);
                } else {
                    values.closed_activities.insert(*id);
                }
            }
            (SwitchKey::Deduction, Setting::Deduction(mode)) => values.deduction = mode,
            (SwitchKey::Async, Setting::Async(mode)) => values.async_mode = mode,
            (SwitchKey::Challenge, Setting::Challenge(on)) => values.challenge_required = on,
            (SwitchKey::Limit(limit), Setting::Limit(n)) => limit.set(&mut values.limits, n),
            (SwitchKey::HotKeyRule(kind), Setting::HotKeyRule(rule)) => {
                values.hotkey_rules.set(*kind, rule)
            }
            // `parse_value` only makes settings of the key's own kind.
            (key, setting) => {
                tracing::error!(
                    ?key,
                    ?setting,
                    "a setting of another key's kind was applied"
                )
            }
        }
    }
}

impl fmt::Display for SwitchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// The canonical text of a value, as the control plane writes it into etcd.
impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Open(true) => f.write_str("open"),
            Setting::Open(false) => f.write_str("closed"),
            Setting::Deduction(DeductionMode::Redis) => f.write_str("redis"),
            Setting::Deduction(DeductionMode::Db) => f.write_str("db"),
            Setting::Async(AsyncMode::Mq) => f.write_str("mq"),
            Setting::Async(AsyncMode::Record) => f.write_str("record"),
            Setting::Challenge(true) => f.write_str("on"),
            Setting::Challenge(false) => f.write_str("off"),
            Setting::Limit(n) => write!(f, "{n}"),
            Setting::HotKeyRule(None) => f.write_str("off"),
            Setting::HotKeyRule(Some(rule)) => {
                let json = serde_json::to_string(rule).map_err(|_| fmt::Error)?;
                f.write_str(&json)
            }
        }
    }
}

/// The values in force: the process settings, overridden by every accepted etcd value.
/// A key absent from `accepted` means "the setting's value".
pub(crate) fn values_from<'a>(
    defaults: &SwitchValues,
    accepted: impl IntoIterator<Item = (&'a SwitchKey, Setting)>,
    revision: i64,
) -> SwitchValues {
    let mut values = defaults.clone();
    for (key, setting) in accepted {
        key.apply(setting, &mut values);
    }
    values.revision = revision;
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::config::BuySettings;

    fn defaults() -> SwitchValues {
        SwitchValues::from_settings(&BuySettings::default())
    }

    #[test]
    fn every_path_round_trips() {
        let keys: Vec<SwitchKey> = SwitchKey::fixed()
            .chain([SwitchKey::ActivityEntry(42)])
            .collect();
        for key in keys {
            assert_eq!(SwitchKey::parse(&key.path()), Ok(key));
            assert!(SwitchKey::parse(&format!("/{}", key.path())).is_err());
            assert!(SwitchKey::parse(&format!("{}/", key.path())).is_err());
        }
    }

    #[test]
    fn unknown_paths_are_refused() {
        for path in [
            "",
            "switches",
            "switches/entry/",
            "switches/entry/abc",
            "switches/entry/-1",
            "switches/entry/007",
            "switches/entry/+7",
            "switches/entry/99999999999999999999",
            "switches/kill",
            "limits/",
            "limits/max_in_flight/x",
            "nodes/a",
            "rules/hotkeys",
            "rules/hotkeys/",
            "rules/hotkeys/seat",
            "rules/hotkeys/user/1",
        ] {
            let error = SwitchKey::parse(path).expect_err(path);
            assert_eq!(error.code(), "UNKNOWN_SWITCH", "{path}");
        }
    }

    #[test]
    fn values_are_checked_per_key() {
        assert_eq!(
            SwitchKey::Entry.parse_value("closed"),
            Ok(Setting::Open(false))
        );
        assert_eq!(
            SwitchKey::Entry.parse_value(" open\n"),
            Ok(Setting::Open(true))
        );
        assert_eq!(
            SwitchKey::Deduction.parse_value("db"),
            Ok(Setting::Deduction(DeductionMode::Db))
        );
        assert_eq!(
            SwitchKey::Async.parse_value("record"),
            Ok(Setting::Async(AsyncMode::Record))
        );
        assert_eq!(
            SwitchKey::Challenge.parse_value("off"),
            Ok(Setting::Challenge(false))
        );
        let limit = SwitchKey::Limit(LimitName::PerUserPerWindow);
        assert_eq!(limit.parse_value("7"), Ok(Setting::Limit(7)));
        for (key, bad) in [
            (SwitchKey::Entry, "Open"),
            (SwitchKey::Entry, "redis"),
            (SwitchKey::Deduction, ""),
            (SwitchKey::Challenge, "true"),
            (limit, "0"),
            (limit, "-3"),
            (limit, "+3"),
            (limit, "3.5"),
            (limit, "1000001"),
            (SwitchKey::Limit(LimitName::RateWindowS), "3601"),
            (SwitchKey::HotKeyRule(HotKeyKind::User), "on"),
            (
                SwitchKey::HotKeyRule(HotKeyKind::Item),
                r#"{"threshold_per_s":50,"action":"block","hold_s":5}"#,
            ),
            (
                SwitchKey::HotKeyRule(HotKeyKind::User),
                r#"{"threshold_per_s":50,"action":"block","hold_s":5,"extra":1}"#,
            ),
            (
                SwitchKey::HotKeyRule(HotKeyKind::Ip),
                r#"{"threshold_per_s":0,"action":"watch","hold_s":5}"#,
            ),
        ] {
            let error = key.parse_value(bad).expect_err(bad);
            assert_eq!(error.code(), "INVALID_SWITCH_VALUE", "{key} {bad}");
        }
    }

    #[test]
    fn canonical_text_parses_back_to_the_same_setting() {
        for (key, text) in [
            (SwitchKey::Entry, "closed"),
            (SwitchKey::ActivityEntry(3), "open"),
            (SwitchKey::Deduction, "redis"),
            (SwitchKey::Async, "mq"),
            (SwitchKey::Challenge, "on"),
            (SwitchKey::Limit(LimitName::MaxInFlight), "12"),
            (SwitchKey::HotKeyRule(HotKeyKind::Ip), "off"),
            (
                SwitchKey::HotKeyRule(HotKeyKind::User),
                r#"{"threshold_per_s":50,"action":"block","hold_s":5}"#,
            ),
            (
                SwitchKey::HotKeyRule(HotKeyKind::Item),
                r#"{"threshold_per_s":900,"action":"limit","limit_per_s":100,"hold_s":30}"#,
            ),
        ] {
            let setting = key.parse_value(text).expect(text);
            assert_eq!(setting.to_string(), text);
        }
    }

    #[test]
    fn absent_keys_keep_the_settings_values() {
        let values = values_from(&defaults(), std::iter::empty(), 9);
        assert_eq!(
            values,
            SwitchValues {
                revision: 9,
                ..defaults()
            }
        );
    }

    #[test]
    fn accepted_values_override_the_settings() {
        let entry = SwitchKey::Entry;
        let activity = SwitchKey::ActivityEntry(5);
        let reopened = SwitchKey::ActivityEntry(6);
        let rate = SwitchKey::Limit(LimitName::PerIpPerWindow);
        let deduction = SwitchKey::Deduction;
        let values = values_from(
            &defaults(),
            [
                (&entry, Setting::Open(false)),
                (&activity, Setting::Open(false)),
                (&reopened, Setting::Open(true)),
                (&rate, Setting::Limit(3)),
                (&deduction, Setting::Deduction(DeductionMode::Db)),
            ],
            12,
        );
        assert!(!values.entry_open);
        assert!(!values.entry_open_for(6), "the global switch wins");
        assert_eq!(values.closed_activities, [5].into_iter().collect());
        assert_eq!(values.limits.per_ip_per_window, 3);
        assert_eq!(values.deduction, DeductionMode::Db);
        assert_eq!(values.revision, 12);
        for key in [entry, activity, reopened, rate, deduction] {
            assert_eq!(
                key.parse_value(&key.value_in(&values))
                    .map(|s| s.to_string()),
                Ok(key.value_in(&values))
            );
        }
    }

    #[test]
    fn choices_come_with_the_accepted_values() {
        assert_eq!(SwitchKey::Entry.choices(), ["open", "closed"]);
        assert_eq!(SwitchKey::Entry.accepts(), "open | closed");
        for key in SwitchKey::fixed() {
            assert!(key.meaning().len() > 40, "{key} says too little");
            assert_eq!(key.choice_notes().len(), key.choices().len(), "{key}");
        }
        assert!(SwitchKey::Async
            .meaning()
            .contains("stay recorded for an ops replay whatever the switch says later"));
        let limit = SwitchKey::parse("limits/max_in_flight").expect("a limit");
        assert!(limit.choices().is_empty());
        assert!(limit.accepts().starts_with("an integer in "));
    }
}
