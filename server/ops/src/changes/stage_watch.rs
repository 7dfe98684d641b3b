//! The leader's watch over staged changes: a stage whose instances answered buys with 5xx
//! more often than the other instances did, by more than `policy/stage_abort` (a share,
//! 0.05 when absent), over the last [`HOLD`] on the changes' clock, is aborted by the
//! leader itself, audited as `auto` with the figures.
//!
//! The figures come from the instances' heartbeats, which carry their buy answers and 5xx
//! answers since they started. Once a second the leader takes the counts each side added
//! since the last look, and keeps each stage's looks for [`HOLD`]; once it has watched a
//! stage that long, it judges the sum of the looks kept. One look is a second of answers,
//! and an instance that fails under load fails in bursts (it sheds while a request waits
//! on a store): judged second by second, one calm second would forgive half a minute of
//! errors, and a busy machine, whose seconds are fewer and more uneven, would never see
//! the hold through. A window with too few answers on either side judges nothing, so a
//! lull neither aborts a stage nor clears it.

use chrono::{DateTime, Duration, Utc};
use contract::{ChangeState, SwitchChangeRow};
use serde_json::json;
use std::{
    collections::{BTreeMap, VecDeque},
    time::Instant,
};

use crate::{
    changes::{
        stage::{self, Aborter},
        store,
    },
    control::{board::Board, layout::Layout, nodes},
    state::AppState,
};
use base::etcd::EtcdCall;

/// The window a stage is judged over, and how long it is watched before its first verdict.
pub(crate) const HOLD: Duration = Duration::seconds(30);
/// The margin when `policy/stage_abort` is absent or malformed.
const DEFAULT_MARGIN: f64 = 0.05;
/// Fewer buy answers than this on either side over the window, and it judges nothing.
const MIN_ANSWERS: u64 = 10;
/// How often the leader looks (its tick is faster).
const EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// A leader that has not looked for this long (it did not lead meanwhile) starts over:
/// the counts and looks it remembers are of another time.
const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(10);
/// Staged changes looked at in one pass at most.
const STAGES_WATCHED: i64 = 50;

/// Counts of one instance: (buy answers, 5xx answers), since it started.
type Counts = (u64, u64);

/// What the leader remembers between looks.
#[derive(Default)]
pub(crate) struct Watch {
    looked_at: Option<Instant>,
    /// Each instance's counts at the last look.
    last: BTreeMap<String, Counts>,
    /// Per staged change, its looks.
    stages: BTreeMap<i64, Looks>,
}

/// One stage's looks over the last [`HOLD`], oldest first, and since when it is watched.
struct Looks {
    since: DateTime<Utc>,
    kept: VecDeque<(DateTime<Utc>, Sides)>,
}

/// The two sides of a stage over one look, or over a window of looks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Sides {
    pub(crate) staged: Counts,
    pub(crate) others: Counts,
}

impl Sides {
    fn share((answered, errors): Counts) -> f64 {
        errors as f64 / answered as f64
    }

    /// Worse by more than `margin`; `None` when either side answered too few buys to say.
    pub(crate) fn worse(&self, margin: f64) -> Option<bool> {
        if self.staged.0 < MIN_ANSWERS || self.others.0 < MIN_ANSWERS {
            return None;
        }
        Some(Self::share(self.staged) - Self::share(self.others) > margin)
    }

    fn plus(self, other: Sides) -> Sides {
        let add = |a: Counts, b: Counts| (a.0 + b.0, a.1 + b.1);
        Sides {
            staged: add(self.staged, other.staged),
            others: add(self.others, other.others),
        }
    }
}

/// What one look decided for a stage.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    Keep,
    /// Worse over the window of looks from `from` on, with these sums.
    Abort {
        from: DateTime<Utc>,
        sides: Sides,
    },
}

impl Watch {
    /// Whether a look is due at `now` (one a second); after a long gap, forgets the past.
    fn due(&mut self, now: Instant) -> bool {
        match self.looked_at.map(|at| now.duration_since(at)) {
            Some(since) if since < EVERY => return false,
            Some(since) if since > FORGET_AFTER => *self = Self::default(),
            _ => {}
        }
        self.looked_at = Some(now);
        true
    }

    /// The counts each side added since the last look, per stage; remembers the new
    /// counts. An instance seen for the first time (or restarted) adds nothing yet.
    fn sides(
        &mut self,
        stages: &[(i64, Vec<String>)],
        counts: BTreeMap<String, Counts>,
    ) -> BTreeMap<i64, Sides> {
        let added: BTreeMap<&String, Counts> = counts
            .iter()
            .filter_map(|(node, now)| {
                let before = self.last.get(node)?;
                (now.0 >= before.0 && now.1 >= before.1)
                    .then(|| (node, (now.0 - before.0, now.1 - before.1)))
            })
            .collect();
        let sides = stages
            .iter()
            .map(|(id, instances)| {
                let mut sides = Sides::default();
                for (node, (answered, errors)) in &added {
                    let side = if instances.contains(node) {
                        &mut sides.staged
                    } else {
                        &mut sides.others
                    };
                    side.0 += answered;
                    side.1 += errors;
                }
                (*id, sides)
            })
            .collect();
        self.last = counts;
        sides
    }

    /// One stage's verdict at `now`, with this look's `sides`: aborted once it has been
    /// watched for [`HOLD`] and the looks of the last [`HOLD`] together are worse.
    pub(crate) fn judge(
        &mut self,
        id: i64,
        sides: Sides,
        margin: f64,
        now: DateTime<Utc>,
    ) -> Verdict {
        let looks = self.stages.entry(id).or_insert_with(|| Looks {
            since: now,
            kept: VecDeque::new(),
        });
        looks.kept.push_back((now, sides));
        while looks.kept.front().is_some_and(|(at, _)| now - *at > HOLD) {
            looks.kept.pop_front();
        }
        if now - looks.since < HOLD {
            return Verdict::Keep;
        }
        let window = looks
            .kept
            .iter()
            .fold(Sides::default(), |sum, (_, look)| sum.plus(*look));
        match (window.worse(margin), looks.kept.front()) {
            (Some(true), Some((from, _))) => Verdict::Abort {
                from: *from,
                sides: window,
            },
            _ => Verdict::Keep,
        }
    }

    /// Forgets stages no longer staged.
    fn keep_only(&mut self, ids: &[i64]) {
        self.stages.retain(|id, _| ids.contains(id));
    }
}

/// The margin `policy/stage_abort` holds: a share between 0 and 1.
pub(crate) fn parse_margin(raw: Option<&[u8]>) -> f64 {
    let Some(raw) = raw else {
        return DEFAULT_MARGIN;
    };
    match std::str::from_utf8(raw)
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok())
    {
        Some(margin) if (0.0..=1.0).contains(&margin) => margin,
        _ => {
            tracing::warn!(
                value = %String::from_utf8_lossy(raw),
                "policy/stage_abort is no share between 0 and 1; {DEFAULT_MARGIN} applies"
            );
            DEFAULT_MARGIN
        }
    }
}

/// One look, when due: every staged change's sides, and an abort for each that stayed
/// worse long enough.
pub(crate) async fn check(state: &AppState) -> anyhow::Result<()> {
    if !lock(state).due(Instant::now()) {
        return Ok(());
    }
    let staged: Vec<SwitchChangeRow> =
        store::list(&state.db, Some(ChangeState::Staged), STAGES_WATCHED).await?;
    if staged.is_empty() {
        lock(state).keep_only(&[]);
        return Ok(());
    }
    let layout = Layout::new(&state.settings.etcd_prefix);
    let mut client = state.etcd.client().await?;
    let (live, _) = nodes::live(&mut client, &layout).await?;
    let policy = state
        .etcd
        .timed(EtcdCall::Get, client.get(layout.stage_abort_policy(), None))
        .await?;
    let margin = parse_margin(policy.kvs().first().map(|kv| kv.value()));
    let counts = live
        .into_iter()
        .map(|(node, report)| (node, (report.buys.answered, report.buys.server_errors)))
        .collect();
    let stages: Vec<(i64, Vec<String>)> = staged
        .iter()
        .map(|change| {
            (
                change.id,
                change.stage_instances.clone().unwrap_or_default(),
            )
        })
        .collect();
    let now = state.changes.now();
    let verdicts: Vec<(i64, Verdict)> = {
        let mut watch = lock(state);
        let ids: Vec<i64> = stages.iter().map(|(id, _)| *id).collect();
        watch.keep_only(&ids);
        let sides = watch.sides(&stages, counts);
        sides
            .into_iter()
            .map(|(id, sides)| (id, watch.judge(id, sides, margin, now)))
            .collect()
    };
    let board = Board::of(state);
    for (id, verdict) in verdicts {
        let Verdict::Abort { from, sides } = verdict else {
            continue;
        };
        let figures = json!({
            "staged": {"answered": sides.staged.0, "server_errors": sides.staged.1},
            "others": {"answered": sides.others.0, "server_errors": sides.others.1},
            "margin": margin, "window_from": from,
        });
        let reason = format!(
            "the staged instances answered {:.0} % of buys with 5xx, the others {:.0} %, \
             over the last {} s (policy/stage_abort {margin})",
            Sides::share(sides.staged) * 100.0,
            Sides::share(sides.others) * 100.0,
            HOLD.num_seconds(),
        );
        match stage::abort_as(&board, Aborter::Leader(figures), id, &reason).await {
            Ok(_) => {
                tracing::warn!(change_id = id, reason, "a stage aborted by the leader");
                state
                    .metrics
                    .control
                    .change_steps
                    .with_label_values(&["abort", "auto"])
                    .inc();
            }
            // Promoted or aborted by hand meanwhile: nothing left to abort.
            Err(error) if error.code() == "CHANGE_NOT_STAGED" => {}
            Err(error) => return Err(anyhow::anyhow!("abort of change #{id}: {error}")),
        }
    }
    Ok(())
}

fn lock(state: &AppState) -> std::sync::MutexGuard<'_, Watch> {
    state.changes.stage_watch()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("a time")
    }

    fn sides(staged: Counts, others: Counts) -> Sides {
        Sides { staged, others }
    }

    #[test]
    fn too_few_answers_judge_nothing_and_a_small_gap_is_no_breach() {
        assert_eq!(sides((5, 5), (100, 0)).worse(0.05), None);
        assert_eq!(sides((100, 50), (5, 0)).worse(0.05), None);
        assert_eq!(sides((100, 6), (100, 2)).worse(0.05), Some(false));
        assert_eq!(sides((100, 8), (100, 2)).worse(0.05), Some(true));
    }

    #[test]
    fn a_stage_worse_over_the_hold_is_aborted_though_a_calm_look_came_between() {
        let mut watch = Watch::default();
        let bad = sides((100, 60), (200, 0));
        let calm = sides((100, 0), (200, 0));
        assert_eq!(watch.judge(7, bad, 0.05, at(0)), Verdict::Keep);
        assert_eq!(watch.judge(7, calm, 0.05, at(10)), Verdict::Keep);
        // A lull adds nothing, and judges nothing before the stage was watched the hold.
        assert_eq!(
            watch.judge(7, Sides::default(), 0.05, at(20)),
            Verdict::Keep
        );
        assert_eq!(
            watch.judge(7, bad, 0.05, at(30)),
            Verdict::Abort {
                from: at(0),
                sides: sides((300, 120), (600, 0)),
            },
            "120 of 300 against none of 600 over the window, the calm second included"
        );
    }

    #[test]
    fn a_bad_second_in_a_good_window_and_a_window_too_quiet_abort_nothing() {
        let mut watch = Watch::default();
        let blip = sides((100, 16), (100, 0));
        let calm = sides((100, 0), (100, 0));
        for (look, s) in [(blip, 0), (calm, 10), (calm, 20), (calm, 30)] {
            assert_eq!(watch.judge(8, look, 0.05, at(s)), Verdict::Keep, "at {s} s");
        }
        // Only the last hold counts: a bad start drops out of the window.
        let mut watch = Watch::default();
        let bad = sides((100, 90), (100, 0));
        assert_eq!(watch.judge(9, bad, 0.05, at(0)), Verdict::Keep);
        for s in [31, 45, 61] {
            assert_eq!(watch.judge(9, calm, 0.05, at(s)), Verdict::Keep, "at {s} s");
        }
        let quiet = sides((2, 2), (2, 0));
        let mut watch = Watch::default();
        for s in [0, 10, 20, 30] {
            assert_eq!(watch.judge(10, quiet, 0.05, at(s)), Verdict::Keep);
        }
    }

    #[test]
    fn a_look_is_due_once_a_second_and_a_long_gap_forgets_the_past() {
        let mut watch = Watch::default();
        let start = Instant::now();
        let after = |ms: u64| start + std::time::Duration::from_millis(ms);
        assert!(watch.due(start));
        assert!(!watch.due(after(500)));
        assert!(watch.due(after(1_000)));
        watch.judge(7, sides((100, 60), (100, 0)), 0.05, at(0));
        watch.last.insert("a".into(), (10, 1));
        assert!(!watch.stages.is_empty() && !watch.last.is_empty());
        // Leadership lost for a while: what it remembers is of another time.
        assert!(watch.due(after(12_000)));
        assert!(watch.stages.is_empty() && watch.last.is_empty());
    }

    #[test]
    fn each_side_adds_what_its_instances_answered_since_the_last_look() {
        let mut watch = Watch::default();
        let stages = [(1, vec!["a".to_owned()])];
        let counts = |a: Counts, b: Counts, c: Counts| {
            BTreeMap::from([("a".into(), a), ("b".into(), b), ("c".into(), c)])
        };
        let first = watch.sides(&stages, counts((10, 1), (10, 0), (10, 0)));
        assert_eq!(first[&1], Sides::default(), "nothing to compare with yet");
        let second = watch.sides(&stages, counts((60, 31), (40, 1), (30, 0)));
        assert_eq!(second[&1], sides((50, 30), (50, 1)));
        // `c` restarted: its counts went down, it adds nothing this time.
        let third = watch.sides(&stages, counts((70, 31), (50, 1), (5, 0)));
        assert_eq!(third[&1], sides((10, 0), (10, 0)));
    }

    #[test]
    fn the_margin_is_a_share_or_the_default() {
        assert_eq!(parse_margin(None), DEFAULT_MARGIN);
        assert_eq!(parse_margin(Some(b"0.2\n")), 0.2);
        assert_eq!(parse_margin(Some(b"20")), DEFAULT_MARGIN);
        assert_eq!(parse_margin(Some(b"much")), DEFAULT_MARGIN);
    }
}
