//! What the reconciliation benchmark watches while it measures: the server's resident
//! memory (`/proc/<pid>/status`, sampled, and the kernel's own high-water mark reset before
//! each run), and PostgreSQL's busy backends of the benchmark's database (what statement
//! each runs, what it waits on).

use sqlx::{Connection, PgConnection};
use std::{
    collections::BTreeMap,
    fs,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};
use tokio::task::JoinHandle;

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Resets the process's peak resident set (`VmHWM`) to its current one (writing `5` to
/// `clear_refs`, Linux 4.0 on); false where the kernel or the permissions refuse.
pub fn reset_peak(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// `VmRSS` of one process, read every `every` until [`RssSampler::finish`].
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut ticks = tokio::time::interval(every);
                let mut peak = 0;
                loop {
                    ticks.tick().await;
                    peak = peak.max(status_kb(pid, "VmRSS").unwrap_or(0));
                    if stop.load(Ordering::Relaxed) {
                        return peak;
                    }
                }
            }
        });
        Self { stop, task }
    }

    /// The highest `VmRSS` seen, in kB (one last sample is taken after the stop).
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

/// Redis's `INFO commandstats`: calls and microseconds per command.
pub async fn redis_commands(url: &str) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    let mut redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await?;
    Ok(parse_commandstats(&text))
}

/// `cmdstat_hscan:calls=3,usec=40,…` lines to `hscan → (3, 40)`.
fn parse_commandstats(text: &str) -> BTreeMap<String, (u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), (field("calls")?, field("usec")?)))
        })
        .collect()
}

/// What the sampled backends were doing: each key counts the samples that saw a backend in
/// it, `ticks` the samples taken.
#[derive(Default)]
pub struct Activity {
    pub ticks: u64,
    pub seen: BTreeMap<String, u64>,
}

impl Activity {
    /// Keys by count, largest first.
    pub fn ranked(&self) -> Vec<(&str, u64)> {
        let mut ranked: Vec<(&str, u64)> =
            self.seen.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        ranked
    }

    /// Adds another sampling's counts to these.
    pub fn pool(&mut self, other: Activity) {
        self.ticks += other.ticks;
        for (key, n) in other.seen {
            *self.seen.entry(key).or_default() += n;
        }
    }

    pub fn count(&self, predicate: impl Fn(&str) -> bool) -> u64 {
        self.seen
            .iter()
            .filter(|(key, _)| predicate(key))
            .map(|(_, n)| n)
            .sum()
    }
}

/// How a sampled backend is counted.
#[derive(Clone, Copy)]
pub enum Key {
    /// By its wait (`IO:DataFileRead`, `CPU` when it waits on nothing); a lock wait with
    /// the statement of the backend it waits behind, marked when that is a reconciliation
    /// run's ([`RUN_BEHIND`]).
    Wait,
    /// By its state and statement (whitespace folded, cut after 130 characters), so a
    /// statement's share of the samples is its share of the time.
    Statement,
}

/// The bench database's client backends other than the sampler's own, every `every`, over
/// one connection.
pub struct PgSampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Activity>,
}

impl PgSampler {
    pub fn start(url: String, db: String, every: Duration, key: Key) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut activity = Activity::default();
                let Ok(mut connection) = PgConnection::connect(&url).await else {
                    return activity;
                };
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    ticks.tick().await;
                    let busy: Vec<(String, String, String, Option<Vec<String>>)> = sqlx::query_as(
                        "SELECT coalesce(a.wait_event_type || ':' || a.wait_event, 'CPU'), a.state, a.query,
                                CASE WHEN a.wait_event_type = 'Lock' THEN
                                    (SELECT coalesce(array_agg(b.query), '{}') FROM pg_stat_activity b
                                     WHERE b.pid = ANY (pg_blocking_pids(a.pid)))
                                END
                         FROM pg_stat_activity a
                         WHERE a.datname = $1 AND a.backend_type = 'client backend'
                           AND a.pid <> pg_backend_pid() AND a.state <> 'idle'",
                    )
                    .bind(&db)
                    .fetch_all(&mut connection)
                    .await
                    .unwrap_or_default();
                    activity.ticks += 1;
                    for (wait, state, query, blocker) in busy {
                        let key = match (key, blocker) {
                            (Key::Wait, Some(blockers)) => lock_wait_key(&wait, &blockers),
                            (Key::Wait, None) => wait,
                            (Key::Statement, _) => statement_key(&state, &query),
                        };
                        *activity.seen.entry(key).or_default() += 1;
                    }
                }
                activity
            }
        });
        Self { stop, task }
    }

    pub async fn finish(self) -> Activity {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

/// How a lock wait behind a reconciliation run's backend is keyed.
pub const RUN_BEHIND: &str = "behind a reconciliation run";

/// Fragments of the statements a report run sends (the run's bookkeeping, its snapshot,
/// the ledger's and the comparison's reads, the pipeline classes' searches).
const RUN_STATEMENTS: [&str; 9] = [
    "reconciliation_runs",
    "reconciliation_findings",
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "FROM activity_items ai JOIN items i",
    "FROM buyer_holdings WHERE activity_id",
    "FROM orders WHERE id = ANY",
    "FROM stock_restore_journal",
    "FROM orders o LEFT JOIN outbox",
    "FROM orders WHERE activity_id = $1 AND status = 'UNPAID'",
];

/// `Lock:tuple behind: UPDATE activity_items …`, or [`RUN_BEHIND`] when a blocker's statement
/// is one a report run sends (reads only: a write of the same text is the buy path's).
fn lock_wait_key(wait: &str, blockers: &[String]) -> String {
    let folded = |query: &str| query.split_whitespace().collect::<Vec<_>>().join(" ");
    let is_run = |query: &str| {
        let query = folded(query);
        let reads = query.starts_with("SELECT") || query.starts_with("SET TRANSACTION");
        let bookkeeping = query.contains("reconciliation_");
        (reads || bookkeeping) && RUN_STATEMENTS.iter().any(|s| query.contains(s))
    };
    match blockers.iter().find(|query| is_run(query)) {
        Some(query) => format!("{wait} {RUN_BEHIND}: {}", cut(&folded(query), 60)),
        None => match blockers.first() {
            Some(query) => format!("{wait} behind: {}", cut(&folded(query), 60)),
            None => wait.to_owned(),
        },
    }
}

fn cut(text: &str, chars: usize) -> String {
    let cut: String = text.chars().take(chars).collect();
    let ellipsis = if text.chars().count() > chars {
        "…"
    } else {
        ""
    };
    format!("{cut}{ellipsis}")
}

/// `active: SELECT COUNT(*) FROM buyer_holdings WHERE …`; a backend between statements of
/// an open transaction is only its state (what it last ran is no longer running).
fn statement_key(state: &str, query: &str) -> String {
    if state != "active" {
        return state.to_owned();
    }
    let folded = query.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{state}: {}", cut(&folded, 130))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_its_own_memory() {
        let rss = status_kb(std::process::id(), "VmRSS").expect("VmRSS");
        assert!(rss > 0);
        assert_eq!(status_kb(std::process::id(), "NoSuchField"), None);
    }

    #[test]
    fn commandstats_are_read_per_command() {
        let stats = parse_commandstats(
            "# Commandstats\r\ncmdstat_hscan:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0\r\n\
             cmdstat_get:calls=1,usec=2,usec_per_call=2.00\r\n",
        );
        assert_eq!(stats.get("hscan"), Some(&(3, 40)));
        assert_eq!(stats.get("get"), Some(&(1, 2)));
        assert_eq!(stats.len(), 2);
    }

    #[test]
    fn statements_are_folded_and_cut() {
        assert_eq!(
            statement_key("active", "SELECT 1\n   FROM  t"),
            "active: SELECT 1 FROM t"
        );
        assert_eq!(
            statement_key("idle in transaction", "SELECT 1"),
            "idle in transaction"
        );
        let long = "x".repeat(200);
        assert!(statement_key("active", &long).ends_with('…'));
    }

    #[test]
    fn lock_waits_name_a_run_only_for_its_statements() {
        let run = "SELECT COUNT(*) FROM buyer_holdings WHERE activity_id = $1 AND item_id = $2"
            .to_owned();
        let buy = "UPDATE activity_items SET sold = sold + 1".to_owned();
        assert!(lock_wait_key("Lock:tuple", &[buy.clone(), run]).contains(RUN_BEHIND));
        assert_eq!(
            lock_wait_key("Lock:tuple", std::slice::from_ref(&buy)),
            "Lock:tuple behind: UPDATE activity_items SET sold = sold + 1"
        );
        let upsert = "INSERT INTO buyer_holdings (activity_id) SELECT 1 FROM buyer_holdings WHERE activity_id".to_owned();
        assert!(!lock_wait_key("Lock:tuple", &[upsert]).contains(RUN_BEHIND));
        assert_eq!(lock_wait_key("Lock:tuple", &[]), "Lock:tuple");
    }
}
