//! Hot keys: the kinds of key counted, what every instance does about a hot one, the rule
//! of a kind, and the `/admin/api/hotkeys` view (the keys in force, the cluster-wide top
//! per kind, the stored history). Key text is validated here so that the server, the CLI
//! and the console agree on what `item/42` or `ip/10.0.0.7` names.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::{fmt, net::IpAddr, str::FromStr};

/// What a hot key counts: the item bought or read, the buyer, the client address.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotKeyKind {
    Item,
    User,
    Ip,
}

impl HotKeyKind {
    pub const ALL: [HotKeyKind; 3] = [HotKeyKind::Item, HotKeyKind::User, HotKeyKind::Ip];

    pub fn as_str(self) -> &'static str {
        match self {
            HotKeyKind::Item => "item",
            HotKeyKind::User => "user",
            HotKeyKind::Ip => "ip",
        }
    }

    /// The actions that make sense for this kind: `cache` serves an item's reads, `block`
    /// refuses a buyer or an address; `watch` and `limit` apply to every kind.
    pub fn allows(self, action: HotKeyAction) -> bool {
        match action {
            HotKeyAction::Watch | HotKeyAction::Limit => true,
            HotKeyAction::Cache => self == HotKeyKind::Item,
            HotKeyAction::Block => self != HotKeyKind::Item,
        }
    }
}

impl fmt::Display for HotKeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HotKeyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HotKeyKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| format!("unknown hot-key kind `{s}` (expected item, user or ip)"))
    }
}

/// What every instance does while a key is hot.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotKeyAction {
    /// Shown only.
    Watch,
    /// The item's activity info and status served from memory, refreshed in the background.
    Cache,
    /// A token bucket of `limit_per_s` per instance in front of the Redis windows.
    Limit,
    /// That buyer or address refused with 429 `RATE_LIMITED` while the key is hot.
    Block,
}

impl HotKeyAction {
    pub const ALL: [HotKeyAction; 4] = [
        HotKeyAction::Watch,
        HotKeyAction::Cache,
        HotKeyAction::Limit,
        HotKeyAction::Block,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HotKeyAction::Watch => "watch",
            HotKeyAction::Cache => "cache",
            HotKeyAction::Limit => "limit",
            HotKeyAction::Block => "block",
        }
    }
}

impl fmt::Display for HotKeyAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HotKeyAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HotKeyAction::ALL
            .into_iter()
            .find(|action| action.as_str() == s)
            .ok_or_else(|| format!("unknown action `{s}` (expected watch, cache, limit or block)"))
    }
}

/// One key of one kind, in its canonical form: ids in canonical digits, addresses as
/// `IpAddr` prints them. Fixed-size, so a sketch of them holds no heap text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum HotKeyId {
    Item(i64),
    User(i64),
    Ip(IpAddr),
}

impl HotKeyId {
    pub fn kind(&self) -> HotKeyKind {
        match self {
            HotKeyId::Item(_) => HotKeyKind::Item,
            HotKeyId::User(_) => HotKeyKind::User,
            HotKeyId::Ip(_) => HotKeyKind::Ip,
        }
    }

    /// The key text of `kind` (`42`, `10.0.0.7`), exactly: a second spelling of the same
    /// key (`042`, `+42`, `::ffff:10.0.0.7` for a v4 address) is refused, so one key has
    /// one etcd path.
    pub fn parse(kind: HotKeyKind, text: &str) -> Result<HotKeyId, String> {
        let invalid = || format!("`{text}` is not a canonical {kind} key");
        match kind {
            HotKeyKind::Item | HotKeyKind::User => {
                let canonical = !text.is_empty()
                    && text.len() <= 19
                    && text.bytes().all(|b| b.is_ascii_digit())
                    && !text.starts_with('0');
                let id = text
                    .parse::<i64>()
                    .ok()
                    .filter(|_| canonical)
                    .ok_or_else(invalid)?;
                Ok(if kind == HotKeyKind::Item {
                    HotKeyId::Item(id)
                } else {
                    HotKeyId::User(id)
                })
            }
            HotKeyKind::Ip => {
                let address = text.parse::<IpAddr>().map_err(|_| invalid())?;
                if address.to_string() != text {
                    return Err(invalid());
                }
                Ok(HotKeyId::Ip(address))
            }
        }
    }

    /// `kind/key`, as under `{prefix}/hotkeys/`.
    pub fn path(&self) -> String {
        format!("{}/{}", self.kind(), self)
    }
}

impl fmt::Display for HotKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HotKeyId::Item(id) | HotKeyId::User(id) => write!(f, "{id}"),
            HotKeyId::Ip(address) => write!(f, "{address}"),
        }
    }
}

impl From<HotKeyId> for String {
    fn from(id: HotKeyId) -> String {
        id.path()
    }
}

impl TryFrom<String> for HotKeyId {
    type Error = String;
    fn try_from(path: String) -> Result<Self, String> {
        let (kind, key) = path
            .split_once('/')
            .ok_or_else(|| format!("`{path}` is not kind/key"))?;
        HotKeyId::parse(kind.parse()?, key)
    }
}

/// Bounds of a rule and of a manual key.
pub const MAX_HOLD_S: u64 = 86_400;
pub const MAX_RATE_PER_S: u64 = 1_000_000_000;

/// `{prefix}/rules/hotkeys/{kind}`: when a key of the kind is hot, and what is done for
/// how long.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotKeyRule {
    /// Requests per second, summed over every instance, from which a key is hot.
    pub threshold_per_s: u64,
    pub action: HotKeyAction,
    /// The per-instance rate a `limit` lets through; required for `limit` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_per_s: Option<u64>,
    /// How long a hot key stays in force after it was last seen hot.
    pub hold_s: u64,
}

impl HotKeyRule {
    /// Checks the rule for `kind`; the message says what is wrong.
    pub fn check(&self, kind: HotKeyKind) -> Result<(), String> {
        if !(1..=MAX_RATE_PER_S).contains(&self.threshold_per_s) {
            return Err(format!("threshold_per_s must be 1..={MAX_RATE_PER_S}"));
        }
        check_action(kind, self.action, self.limit_per_s)?;
        check_hold(self.hold_s)
    }
}

/// The action for `kind`, with `limit_per_s` exactly when the action is `limit`.
pub fn check_action(
    kind: HotKeyKind,
    action: HotKeyAction,
    limit_per_s: Option<u64>,
) -> Result<(), String> {
    if !kind.allows(action) {
        return Err(format!("action `{action}` does not apply to {kind} keys"));
    }
    match (action, limit_per_s) {
        (HotKeyAction::Limit, Some(rate)) if (1..=MAX_RATE_PER_S).contains(&rate) => Ok(()),
        (HotKeyAction::Limit, _) => Err(format!(
            "action `limit` needs limit_per_s in 1..={MAX_RATE_PER_S}"
        )),
        (_, Some(_)) => Err("limit_per_s is only for action `limit`".into()),
        (_, None) => Ok(()),
    }
}

pub fn check_hold(hold_s: u64) -> Result<(), String> {
    if (1..=MAX_HOLD_S).contains(&hold_s) {
        Ok(())
    } else {
        Err(format!("hold_s must be 1..={MAX_HOLD_S}"))
    }
}

/// Where a hot key in force came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotKeySource {
    /// Found by the leader from the instances' counts, renewed while it stays hot.
    Detected,
    /// Added by an operator; held for its `hold_s`, never renewed.
    Manual,
}

impl HotKeySource {
    pub fn as_str(self) -> &'static str {
        match self {
            HotKeySource::Detected => "detected",
            HotKeySource::Manual => "manual",
        }
    }
}

/// A hot key in force on the answering instance.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKey {
    pub kind: HotKeyKind,
    /// The key text (`42`, `10.0.0.7`).
    pub key: String,
    /// The summed rate when it was last found hot (0 for a manual key).
    pub rate_per_s: u64,
    pub action: HotKeyAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_per_s: Option<u64>,
    pub source: HotKeySource,
    /// When it went into force, and when it lapses unless renewed (epoch milliseconds).
    pub since_ms: i64,
    pub expires_ms: i64,
    /// Who added a manual key, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One key of a cluster-wide top list, with its rate over the last window.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopKey {
    pub key: String,
    pub rate_per_s: u64,
}

/// The cluster-wide top keys per kind.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopKeys {
    pub item: Vec<TopKey>,
    pub user: Vec<TopKey>,
    pub ip: Vec<TopKey>,
}

impl TopKeys {
    pub fn of_mut(&mut self, kind: HotKeyKind) -> &mut Vec<TopKey> {
        match kind {
            HotKeyKind::Item => &mut self.item,
            HotKeyKind::User => &mut self.user,
            HotKeyKind::Ip => &mut self.ip,
        }
    }

    pub fn of(&self, kind: HotKeyKind) -> &[TopKey] {
        match kind {
            HotKeyKind::Item => &self.item,
            HotKeyKind::User => &self.user,
            HotKeyKind::Ip => &self.ip,
        }
    }
}

/// `GET /admin/api/hotkeys`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKeysView {
    pub hot: Vec<HotKey>,
    pub top: TopKeys,
    /// The window the rates are counted over.
    pub window_ms: u64,
    /// Instances whose counts are in `top` now.
    pub reporting_nodes: u32,
}

/// `POST /admin/api/hotkeys`: a manual hot key.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewHotKey {
    pub kind: HotKeyKind,
    pub key: String,
    pub action: HotKeyAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_per_s: Option<u64>,
    pub hold_s: u64,
    pub reason: String,
}

/// The console's form for a manual key: every field as the browser sends it, read into a
/// [`NewHotKey`] by [`HotKeyForm::read`] once the caller is known to be allowed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKeyForm {
    pub kind: String,
    pub key: String,
    pub action: String,
    #[serde(default)]
    pub limit_per_s: Option<String>,
    pub hold_s: String,
    pub reason: String,
}

impl HotKeyForm {
    /// The request the form describes; the message names the field that is wrong. An empty
    /// limit field means none.
    pub fn read(&self) -> Result<NewHotKey, String> {
        let number = |name: &str, text: &str| {
            text.trim()
                .parse::<u64>()
                .map_err(|_| format!("{name} must be a whole number"))
        };
        Ok(NewHotKey {
            kind: self.kind.trim().parse()?,
            key: self.key.trim().to_owned(),
            action: self.action.trim().parse()?,
            limit_per_s: match self.limit_per_s.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(text) => Some(number("limit_per_s", text)?),
            },
            hold_s: number("hold_s", &self.hold_s)?,
            reason: self.reason.clone(),
        })
    }
}

/// One stored period of a key being hot (`GET /admin/api/hotkeys/history`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKeyPeriod {
    pub id: i64,
    pub kind: HotKeyKind,
    pub key: String,
    pub action: HotKeyAction,
    pub source: HotKeySource,
    /// The highest summed rate seen while it was hot (0 for a manual key).
    pub peak_rate_per_s: u64,
    pub started_at: DateTime<Utc>,
    /// When it lapsed or was removed; absent while in force.
    pub ended_at: Option<DateTime<Utc>>,
    pub actor: Option<String>,
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_one_spelling() {
        assert_eq!(
            HotKeyId::parse(HotKeyKind::User, "42"),
            Ok(HotKeyId::User(42))
        );
        assert_eq!(
            HotKeyId::parse(HotKeyKind::Ip, "10.0.0.7").map(|id| id.path()),
            Ok("ip/10.0.0.7".into())
        );
        for (kind, bad) in [
            (HotKeyKind::User, "042"),
            (HotKeyKind::User, "+42"),
            (HotKeyKind::User, ""),
            (HotKeyKind::Item, "-1"),
            (HotKeyKind::Item, "99999999999999999999"),
            (HotKeyKind::Ip, "10.0.0.07"),
            (HotKeyKind::Ip, "::FFFF:10.0.0.7"),
            (HotKeyKind::Ip, "host"),
        ] {
            assert!(HotKeyId::parse(kind, bad).is_err(), "{kind} {bad}");
        }
        let id = HotKeyId::Ip("::1".parse().expect("v6"));
        assert_eq!(HotKeyId::try_from(id.path()), Ok(id));
    }

    #[test]
    fn the_console_form_reads_into_a_request() {
        let form = HotKeyForm {
            kind: "item".into(),
            key: " 42 ".into(),
            action: "limit".into(),
            limit_per_s: Some("100".into()),
            hold_s: "30".into(),
            reason: "flash crowd".into(),
        };
        let new = form.read().expect("valid");
        assert_eq!((new.kind, new.key.as_str()), (HotKeyKind::Item, "42"));
        assert_eq!(
            (new.action, new.limit_per_s, new.hold_s),
            (HotKeyAction::Limit, Some(100), 30)
        );
        let blank_limit = HotKeyForm {
            limit_per_s: Some(" ".into()),
            ..form.clone()
        };
        assert_eq!(blank_limit.read().map(|n| n.limit_per_s), Ok(None));
        for bad in [
            HotKeyForm {
                kind: "seat".into(),
                ..form.clone()
            },
            HotKeyForm {
                action: "ban".into(),
                ..form.clone()
            },
            HotKeyForm {
                hold_s: "soon".into(),
                ..form.clone()
            },
            HotKeyForm {
                limit_per_s: Some("-1".into()),
                ..form.clone()
            },
        ] {
            assert!(bad.read().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rules_are_checked_per_kind() {
        let rule = |action, limit_per_s| HotKeyRule {
            threshold_per_s: 50,
            action,
            limit_per_s,
            hold_s: 10,
        };
        assert!(rule(HotKeyAction::Block, None)
            .check(HotKeyKind::User)
            .is_ok());
        assert!(rule(HotKeyAction::Block, None)
            .check(HotKeyKind::Item)
            .is_err());
        assert!(rule(HotKeyAction::Cache, None)
            .check(HotKeyKind::Ip)
            .is_err());
        assert!(rule(HotKeyAction::Limit, None)
            .check(HotKeyKind::Item)
            .is_err());
        assert!(rule(HotKeyAction::Limit, Some(5))
            .check(HotKeyKind::Item)
            .is_ok());
        assert!(rule(HotKeyAction::Watch, Some(5))
            .check(HotKeyKind::Item)
            .is_err());
        let mut zero_hold = rule(HotKeyAction::Watch, None);
        zero_hold.hold_s = 0;
        assert!(zero_hold.check(HotKeyKind::Item).is_err());
    }
}
