//! The pre-sale readiness check of one activity: one verdict per check, each with a
//! detail a person can act on, and the overall go/no-go.

use serde::{Deserialize, Serialize};

/// What a check looks at; the wire name is the snake-case variant (`buyer_records`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadinessCheckName {
    /// Redis stock of every item equals what PostgreSQL leaves to sell.
    Stock,
    /// Redis records as many buyers of every item as PostgreSQL.
    BuyerRecords,
    /// The Bloom filter holds the activity and its items; its measured false-positive rate.
    Bloom,
    /// Every Lua script is loaded on Redis.
    Scripts,
    /// Entry open, deduction `redis`, async `mq`; challenge reported. Each with its last flip.
    Switches,
    /// Each fallback switch (entry, deduction, async) flipped away and back since the
    /// newest live instance started, so the day's switches are known to work.
    SwitchesRehearsed,
    /// The activity's last finished rehearsal passed its invariant check and, against the
    /// activity's baseline run, made no new call per buy and kept its buy p99 within twice
    /// the baseline's.
    Rehearsal,
    /// Every live instance applied the latest switch revision.
    Propagation,
    /// Consumers attached to the create-order and pay-timeout queues.
    Consumers,
    /// No dead letter waiting.
    DeadLetters,
    /// No outbox row waiting longer than the relay's grace, none given up on.
    Outbox,
    /// No answered pre-order waiting past `fail_stuck_after_s` since its event was last sent.
    StuckPreorders,
    /// A leader elected for the singleton jobs.
    Leader,
    /// Clocks within 100 ms of the database's.
    Clocks,
    /// No switch change scheduled (or reverting) during the sale, no change waiting for a
    /// second person for more than a few minutes.
    Changes,
    /// A lottery activity: its draw's commitment fixed, a leader to draw when registration
    /// closes, and no draw overdue. Ok for a first-come activity.
    Lottery,
}

impl ReadinessCheckName {
    pub const ALL: [ReadinessCheckName; 16] = [
        Self::Stock,
        Self::BuyerRecords,
        Self::Bloom,
        Self::Scripts,
        Self::Switches,
        Self::SwitchesRehearsed,
        Self::Rehearsal,
        Self::Propagation,
        Self::Consumers,
        Self::DeadLetters,
        Self::Outbox,
        Self::StuckPreorders,
        Self::Leader,
        Self::Clocks,
        Self::Changes,
        Self::Lottery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stock => "stock",
            Self::BuyerRecords => "buyer_records",
            Self::Bloom => "bloom",
            Self::Scripts => "scripts",
            Self::Switches => "switches",
            Self::SwitchesRehearsed => "switches_rehearsed",
            Self::Rehearsal => "rehearsal",
            Self::Propagation => "propagation",
            Self::Consumers => "consumers",
            Self::DeadLetters => "dead_letters",
            Self::Outbox => "outbox",
            Self::StuckPreorders => "stuck_preorders",
            Self::Leader => "leader",
            Self::Clocks => "clocks",
            Self::Changes => "changes",
            Self::Lottery => "lottery",
        }
    }
}

/// One check's verdict.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessCheck {
    pub name: ReadinessCheckName,
    pub ok: bool,
    /// What was seen and, when not ok, what to do about it.
    pub detail: String,
}

/// `GET /admin/api/readiness?activity_id=`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub activity_id: i64,
    /// Every check ok: go.
    pub ready: bool,
    pub checks: Vec<ReadinessCheck>,
}

impl Readiness {
    /// The report of `checks`: ready when every one is ok.
    pub fn of(activity_id: i64, checks: Vec<ReadinessCheck>) -> Self {
        Self {
            activity_id,
            ready: checks.iter().all(|check| check.ok),
            checks,
        }
    }

    /// The check of that name, if it ran.
    pub fn check(&self, name: ReadinessCheckName) -> Option<&ReadinessCheck> {
        self.checks.iter().find(|check| check.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_wire_names_and_ready_needs_every_check() {
        for name in ReadinessCheckName::ALL {
            let json = serde_json::to_value(name).expect("json");
            assert_eq!(json, serde_json::json!(name.as_str()));
        }
        let check = |name, ok| ReadinessCheck {
            name,
            ok,
            detail: String::new(),
        };
        let go = Readiness::of(1, vec![check(ReadinessCheckName::Stock, true)]);
        assert!(go.ready);
        let no_go = Readiness::of(
            1,
            vec![
                check(ReadinessCheckName::Stock, true),
                check(ReadinessCheckName::Scripts, false),
            ],
        );
        assert!(!no_go.ready);
        assert_eq!(
            no_go.check(ReadinessCheckName::Scripts).map(|c| c.ok),
            Some(false)
        );
    }
}
