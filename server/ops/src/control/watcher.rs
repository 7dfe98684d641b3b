//! Keeps this instance's switches in step with etcd: a full read of the prefix, then a
//! watch from the revision after it. etcd-client does not resume a broken watch, so this
//! does: on any error it reconnects and watches again from the last revision it applied
//! (`resume`), or, when etcd has compacted that revision away, reads everything again
//! (`reload`). A progress request every heartbeat proves the watch current; its answers
//! (and events) are the "last successful sync" that the staleness metric counts from.
//!
//! Hot keys (`hotkeys/`) go to the hot-key table as they change; everything else below
//! is about switches. A value staged on some instances (`staged/{path}`) is applied in
//! place of the key's own by the instances it names, and by no other.
//!
//! Values go into force with [`Switches::replace`](sale::switches::Switches::replace)
//! and nothing else; then the node report is woken, the snapshot is saved to disk, and
//! changes written straight into etcd are offered to the audit.

use contract::{StagedValue, SwitchStage};
use etcd_client::{Client, EventType, GetOptions, KeyValue, WatchOptions, WatchResponse};
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::{Duration, Instant},
};
use tokio::sync::watch;

use crate::control::{
    accepted::{Accepted, DiskSnapshot, Observed, Outcome},
    keys::KeyError,
    layout::{now_us, Layout, WriteNote},
    status::{Backoff, Complaint, RecentApply, ValuesFrom},
};
use crate::{hotkeys::table::Entry as HotKeyEntry, state::AppState};
use base::etcd::EtcdCall;
use sale::{audit, switches::SwitchValues};

/// How long start-up waits for the first read of etcd before serving with what it has.
const FIRST_READ: Duration = Duration::from_secs(2);
/// A watch that answers no progress request for this many heartbeats is presumed dead
/// (a half-open connection never errors by itself).
const SILENT_HEARTBEATS: u32 = 3;
/// Delays between attempts to audit an external change while the database refuses it:
/// doubling, but never so long that the row waits long after the database is back.
const AUDIT_RETRY_FLOOR: Duration = Duration::from_millis(100);
const AUDIT_RETRY_CEILING: Duration = Duration::from_secs(5);

pub(super) struct Watcher {
    state: AppState,
    layout: Layout,
    defaults: SwitchValues,
    accepted: Accepted,
    /// The latest write note per switch path, with the note's own revision.
    notes: HashMap<String, (i64, WriteNote)>,
    /// The live instances' node keys: a hot key's cluster-wide limit is shared among them.
    nodes: HashSet<String>,
    /// Values staged on some instances, by switch path.
    stages: BTreeMap<String, SwitchStage>,
    /// Every change up to this revision is applied; `None`: read everything first.
    position: Option<i64>,
    /// A watch was open before: the next one is a resumption.
    watched_before: bool,
    snapshots: watch::Sender<Option<DiskSnapshot>>,
    complaint: Complaint,
}

/// A switch key whose accepted entry changed, as one event or read showed it.
struct Seen {
    path: String,
    value: Option<String>,
    previous: Option<String>,
    mod_revision: i64,
    /// When the control plane wrote it (its note at the same revision); `None`: written
    /// straight into etcd.
    written_at_us: Option<i64>,
    /// The value was refused (unknown key or malformed value).
    refused: Option<KeyError>,
}

impl Watcher {
    /// Puts the best values available in force before the instance serves: etcd's if it
    /// answers within [`FIRST_READ`], else the local snapshot, else the process settings.
    pub(super) async fn start(state: AppState, layout: Layout) -> Self {
        let defaults = SwitchValues::from_settings(&state.settings.buy);
        let snapshots = spawn_snapshot_writer(state.settings.control.snapshot_path.clone());
        let mut watcher = Self {
            state,
            layout,
            defaults,
            accepted: Accepted::default(),
            notes: HashMap::new(),
            nodes: HashSet::new(),
            stages: BTreeMap::new(),
            position: None,
            watched_before: false,
            snapshots,
            complaint: Complaint::new(Duration::from_secs(30)),
        };
        watcher.load_disk_snapshot();
        let first = async {
            let mut client = watcher.state.etcd.client().await?;
            watcher.reload(&mut client).await
        };
        match tokio::time::timeout(FIRST_READ, first).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => watcher.complaint.complain(
                "etcd unreachable at start-up; serving the last known switches",
                &error,
            ),
            Err(_) => watcher.complaint.complain(
                "etcd did not answer at start-up; serving the last known switches",
                &"timed out",
            ),
        }
        watcher
    }

    /// Watches for the life of the task, reconnecting with backoff.
    pub(super) async fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        loop {
            let outcome = self.session(&mut backoff).await;
            self.set_connected(false);
            match outcome {
                Ok(()) => continue,
                Err(error) => {
                    self.complaint
                        .complain("etcd watch broken; keeping the last values", &error);
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    fn load_disk_snapshot(&mut self) {
        let path = &self.state.settings.control.snapshot_path;
        let snapshot = match DiskSnapshot::read(path) {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %error, "unreadable switch snapshot ignored");
                return;
            }
        };
        if snapshot.prefix != self.layout.prefix() {
            tracing::warn!(path = %path.display(), prefix = %snapshot.prefix, "switch snapshot of another etcd prefix ignored");
            return;
        }
        let (accepted, refused) = snapshot.accepted();
        for error in refused {
            tracing::warn!(error = %error, "invalid value in the switch snapshot ignored");
        }
        self.accepted = accepted;
        // A staged value is checked like etcd's when it is put in force (`in_force`).
        self.stages = snapshot.stages;
        let values = self.in_force(snapshot.revision);
        self.state.switches.replace(values);
        let mut sync = self.state.control.sync();
        sync.values_from = ValuesFrom::Disk;
        sync.accepted = self.accepted.clone();
        tracing::info!(revision = snapshot.revision, saved_at = %snapshot.saved_at, "switches loaded from the local snapshot");
    }

    /// One connection's life: read everything if needed, then watch until something breaks.
    /// `Ok` asks for an immediate new session (compaction: read everything again).
    async fn session(&mut self, backoff: &mut Backoff) -> anyhow::Result<()> {
        let mut client = self.state.etcd.client().await?;
        let resumed = self.watched_before && self.position.is_some();
        if self.position.is_none() {
            self.reload(&mut client).await?;
        }
        let from = self.position.unwrap_or(0) + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(from);
        let mut stream = client.watch(self.layout.root(), Some(options)).await?;
        let heartbeat = Duration::from_millis(self.state.settings.control.heartbeat_ms.max(10));
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        loop {
            tokio::select! {
                message = stream.message() => {
                    let Some(response) = message? else {
                        anyhow::bail!("etcd closed the watch stream");
                    };
                    last_heard = Instant::now();
                    if response.compact_revision() > 0 {
                        tracing::warn!(
                            compacted = response.compact_revision(),
                            wanted = from,
                            "etcd compacted revisions this instance had not seen; reading everything again"
                        );
                        self.position = None;
                        self.state.metrics.control.resyncs.with_label_values(&["reload"]).inc();
                        return Ok(());
                    }
                    if response.canceled() {
                        anyhow::bail!("etcd cancelled the watch: {}", response.cancel_reason());
                    }
                    if response.created() {
                        self.watched_before = true;
                        if resumed {
                            self.state.metrics.control.resyncs.with_label_values(&["resume"]).inc();
                        }
                        self.set_connected(true);
                        backoff.reset();
                        self.complaint.recovered("etcd watch re-established");
                        // Answered once the watch has caught up: the first proof of sync.
                        stream.request_progress().await?;
                        continue;
                    }
                    self.apply(&response);
                }
                _ = tick.tick() => {
                    if last_heard.elapsed() > heartbeat * SILENT_HEARTBEATS {
                        anyhow::bail!("the etcd watch went silent");
                    }
                    stream.request_progress().await?;
                }
            }
        }
    }

    /// Reads the whole prefix and makes it the accepted state.
    async fn reload(&mut self, client: &mut Client) -> anyhow::Result<()> {
        let read = client.get(self.layout.root(), Some(GetOptions::new().with_prefix()));
        let response = self.state.etcd.timed(EtcdCall::Get, read).await?;
        let revision = response
            .header()
            .map(|header| header.revision())
            .unwrap_or_default();
        let mut entries = Vec::new();
        let mut hot_keys = Vec::new();
        self.notes.clear();
        self.nodes.clear();
        self.stages.clear();
        for kv in response.kvs() {
            let Some(path) = self.relative(kv) else {
                continue;
            };
            if let Some(staged) = Layout::staged_path(path) {
                if let Some(stage) = parse_stage(kv) {
                    self.stages.insert(staged.to_owned(), stage);
                }
                continue;
            }
            if let Some(hot) = Layout::hotkey_path(path) {
                hot_keys.push(HotKeyEntry {
                    path: hot,
                    value: Some(kv.value()),
                    lease: kv.lease(),
                });
                continue;
            }
            if Layout::is_node_path(path) {
                self.nodes.insert(path.to_owned());
                continue;
            }
            if let Some(noted) = Layout::noted_path(path) {
                if let Some(note) = parse_note(kv) {
                    self.notes
                        .insert(noted.to_owned(), (kv.mod_revision(), note));
                }
                continue;
            }
            if let Ok(value) = kv.value_str() {
                entries.push((path.to_owned(), value.to_owned(), kv.mod_revision()));
            }
        }
        self.state.hotkeys.table.replace_all(hot_keys);
        self.state.hotkeys.table_changed();
        self.state.hotkeys.set_instances(self.nodes.len());
        let before = self.accepted.clone();
        let observed: Vec<Observed<'_>> = entries
            .iter()
            .map(|(path, value, mod_revision)| Observed {
                path,
                value: Some(value),
                mod_revision: *mod_revision,
            })
            .collect();
        let outcomes = self.accepted.reload(&observed);
        let seen: Vec<Seen> = outcomes
            .into_iter()
            .filter_map(|outcome| {
                let (path, refused) = match outcome {
                    Outcome::Applied(key) => (key.path(), None),
                    Outcome::Rejected(error) => (rejected_path(&error), Some(error)),
                    Outcome::NotASwitch | Outcome::Unchanged => return None,
                };
                let previous = super::keys::SwitchKey::parse(&path)
                    .ok()
                    .and_then(|key| before.entry(&key).cloned());
                let seen = match entries.iter().find(|(p, _, _)| *p == path) {
                    Some((_, value, mod_revision)) => Seen {
                        value: Some(value.clone()),
                        written_at_us: self.written_at(&path, *mod_revision),
                        mod_revision: *mod_revision,
                        previous: previous.map(|entry| entry.value),
                        path,
                        refused,
                    },
                    // Deleted unseen: the deletion's revision is gone with the compacted
                    // history. The deleted value's revision names it the same way on every
                    // instance, so the audit still records it once. The control plane never
                    // deletes: a deletion is always external.
                    None => Seen {
                        value: None,
                        written_at_us: None,
                        mod_revision: previous
                            .as_ref()
                            .map_or(revision, |entry| entry.mod_revision),
                        previous: previous.map(|entry| entry.value),
                        path,
                        refused,
                    },
                };
                Some(seen)
            })
            .collect();
        self.position = Some(revision);
        self.state.control.sync().values_from = ValuesFrom::Etcd;
        self.mark_synced(revision);
        // Always in force after a read, even unchanged: it replaces settings or disk values.
        self.put_in_force(seen, true);
        Ok(())
    }

    /// Applies one watch response: events, or a progress report.
    fn apply(&mut self, response: &WatchResponse) {
        let events = response.events();
        if events.is_empty() {
            // A progress report: nothing on the prefix up to the header's revision.
            let revision = response.header().map_or(0, |header| header.revision());
            self.mark_synced(revision);
            return;
        }
        self.apply_hot_keys(events);
        self.count_nodes(events);
        let stages_changed = self.apply_stages(events);
        let mut seen = Vec::new();
        let mut policies = Vec::new();
        let mut last = self.position.unwrap_or(0);
        // One revision at a time, its notes first: a flip's note and value share one
        // revision (and one response), and a later flip of the same key in the same
        // response must not hide the earlier one's note.
        for revision in events.chunk_by(|a, b| revision_of(a) == revision_of(b)) {
            for event in revision {
                let Some(kv) = event.kv() else { continue };
                let Some(noted) = self.relative(kv).and_then(Layout::noted_path) else {
                    continue;
                };
                match (event.event_type(), parse_note(kv)) {
                    (EventType::Put, Some(note)) => {
                        self.notes
                            .insert(noted.to_owned(), (kv.mod_revision(), note));
                    }
                    _ => {
                        self.notes.remove(noted);
                    }
                }
            }
            for event in revision {
                let Some(kv) = event.kv() else { continue };
                last = last.max(kv.mod_revision());
                let Some(path) = self.relative(kv) else {
                    continue;
                };
                let value = match event.event_type() {
                    EventType::Put => match kv.value_str() {
                        Ok(value) => Some(value),
                        Err(_) => Some("<not UTF-8>"),
                    },
                    EventType::Delete => None,
                };
                if Layout::is_policy_path(path) {
                    policies.push(Seen {
                        path: path.to_owned(),
                        value: value.map(str::to_owned),
                        previous: event
                            .prev_kv()
                            .and_then(|prev| prev.value_str().ok())
                            .map(str::to_owned),
                        mod_revision: kv.mod_revision(),
                        written_at_us: None,
                        refused: None,
                    });
                    continue;
                }
                let outcome = self.accepted.observe(Observed {
                    path,
                    value,
                    mod_revision: kv.mod_revision(),
                });
                let refused = match outcome {
                    Outcome::Applied(_) => None,
                    Outcome::Rejected(error) => Some(error),
                    Outcome::NotASwitch | Outcome::Unchanged => continue,
                };
                seen.push(Seen {
                    path: path.to_owned(),
                    value: value.map(str::to_owned),
                    previous: event
                        .prev_kv()
                        .and_then(|prev| prev.value_str().ok())
                        .map(str::to_owned),
                    mod_revision: kv.mod_revision(),
                    written_at_us: self.written_at(path, kv.mod_revision()),
                    refused,
                });
            }
        }
        self.position = Some(last);
        self.mark_synced(last);
        self.put_in_force(seen, stages_changed);
        // A policy is written with etcdctl: every change of one is an outside write.
        if !policies.is_empty() {
            self.audit_external(policies);
        }
    }

    /// Stages made, promoted or aborted; true when any changed.
    fn apply_stages(&mut self, events: &[etcd_client::Event]) -> bool {
        let mut changed = false;
        for event in events {
            let Some(kv) = event.kv() else { continue };
            let Some(path) = self.relative(kv).and_then(Layout::staged_path) else {
                continue;
            };
            let path = path.to_owned();
            changed = true;
            match (event.event_type(), parse_stage(kv)) {
                (EventType::Put, Some(stage)) => self.stages.insert(path, stage),
                _ => self.stages.remove(&path),
            };
        }
        changed
    }

    /// The values this instance applies: etcd's, with the stages that name it in place of
    /// their keys' values. Reports the stages it applies.
    fn in_force(&self, revision: i64) -> SwitchValues {
        let node = self.state.control.node_id();
        let mut effective = None::<Accepted>;
        let mut here = Vec::new();
        for (path, stage) in &self.stages {
            if !stage.instances.iter().any(|named| named == node) {
                continue;
            }
            let accepted = effective.get_or_insert_with(|| self.accepted.clone());
            let seen = Observed {
                path,
                value: Some(&stage.value),
                mod_revision: revision,
            };
            if let Outcome::Rejected(error) = accepted.observe(seen) {
                tracing::warn!(path, error = %error, "a staged value refused; the key's own stays");
                continue;
            }
            here.push(StagedValue {
                path: path.clone(),
                value: stage.value.clone(),
                change_id: stage.change_id,
            });
        }
        self.state.control.record_staged(here);
        effective
            .as_ref()
            .unwrap_or(&self.accepted)
            .values(&self.defaults, revision)
    }

    /// Hot keys published, renewed, removed or lapsed (their lease ran out).
    fn apply_hot_keys(&self, events: &[etcd_client::Event]) {
        let changes: Vec<HotKeyEntry<'_>> = events
            .iter()
            .filter_map(|event| {
                let kv = event.kv()?;
                let path = Layout::hotkey_path(self.relative(kv)?)?;
                Some(HotKeyEntry {
                    path,
                    value: (event.event_type() == EventType::Put).then(|| kv.value()),
                    lease: kv.lease(),
                })
            })
            .collect();
        if !changes.is_empty() {
            self.state.hotkeys.table.apply(changes);
            self.state.hotkeys.table_changed();
        }
    }

    /// Instances that came (their first report) or went (a lease expired, a graceful stop).
    fn count_nodes(&mut self, events: &[etcd_client::Event]) {
        let before = self.nodes.len();
        for event in events {
            let Some(path) = event.kv().and_then(|kv| self.relative(kv)) else {
                continue;
            };
            if !Layout::is_node_path(path) {
                continue;
            }
            let path = path.to_owned();
            match event.event_type() {
                EventType::Put => self.nodes.insert(path),
                EventType::Delete => self.nodes.remove(&path),
            };
        }
        if self.nodes.len() != before {
            self.state.hotkeys.set_instances(self.nodes.len());
        }
    }

    /// Replaces the snapshot if anything was applied, then does the follow-ups.
    fn put_in_force(&mut self, seen: Vec<Seen>, always: bool) {
        let applied_any = seen.iter().any(|s| s.refused.is_none());
        let revision = self.position.unwrap_or(0);
        if applied_any || always {
            let values = self.in_force(revision);
            self.state.switches.replace(values);
        }
        let applied_at_us = now_us();
        let metrics = &self.state.metrics.control;
        let mut applies = Vec::new();
        let mut external = Vec::new();
        for change in seen {
            match &change.refused {
                Some(error) => {
                    let label = super::keys::SwitchKey::parse(&change.path)
                        .map_or("unknown", |key| key.label());
                    metrics.invalid_values.with_label_values(&[label]).inc();
                    tracing::warn!(path = %change.path, error = %error, "etcd value refused; the last valid value stays");
                }
                None => {
                    if let Some(written_at_us) = change.written_at_us {
                        let seconds = (applied_at_us - written_at_us) as f64 / 1e6;
                        metrics.propagation.observe(seconds.max(0.0));
                    }
                    applies.push(RecentApply {
                        path: change.path.clone(),
                        mod_revision: change.mod_revision,
                        applied_at_us,
                    });
                }
            }
            if change.written_at_us.is_none() {
                external.push(change);
            }
        }
        if applied_any || always {
            self.state.control.sync().accepted = self.accepted.clone();
        }
        if !applies.is_empty() {
            self.state.control.record_applies(applies);
        }
        if applied_any || always {
            self.snapshots.send_replace(Some(self.accepted.to_snapshot(
                self.layout.prefix(),
                revision,
                &self.stages,
            )));
        }
        if !external.is_empty() {
            self.audit_external(external);
        }
    }

    /// Offers changes written straight into etcd (switches, and the policies) to the audit
    /// (idempotent across instances), each retried until its row commits: a database away for a while delays
    /// the audit of a change, never loses it. Every failed attempt counts as `failed`.
    fn audit_external(&self, changes: Vec<Seen>) {
        let db = self.state.db.clone();
        let audits = self.state.metrics.control.external_audits.clone();
        tokio::spawn(async move {
            for change in changes {
                let reason = match &change.refused {
                    None => "written straight into etcd, not through the control plane".to_owned(),
                    Some(error) => format!("written straight into etcd and refused: {error}"),
                };
                // An empty new value records a deletion: the setting's value applies again.
                let new_value = change.value.as_deref().unwrap_or("");
                let mut backoff = Backoff::new(AUDIT_RETRY_FLOOR, AUDIT_RETRY_CEILING);
                let outcome = loop {
                    match audit::record_external(
                        &db,
                        &change.path,
                        change.previous.as_deref(),
                        new_value,
                        &reason,
                        change.mod_revision,
                    )
                    .await
                    {
                        Ok(true) => break "recorded",
                        Ok(false) => break "known",
                        Err(error) => {
                            audits.with_label_values(&["failed"]).inc();
                            let retry_in = backoff.next_delay();
                            tracing::error!(path = %change.path, revision = change.mod_revision, error = %error, ?retry_in, "could not audit an external switch change; retrying");
                            tokio::time::sleep(retry_in).await;
                        }
                    }
                };
                audits.with_label_values(&[outcome]).inc();
            }
        });
    }

    /// The write time of the control plane's note for `path`, if it is at `revision`.
    fn written_at(&self, path: &str, revision: i64) -> Option<i64> {
        self.notes
            .get(path)
            .filter(|(noted_at, _)| *noted_at == revision)
            .map(|(_, note)| note.written_at_us)
    }

    fn relative<'a>(&self, kv: &'a KeyValue) -> Option<&'a str> {
        kv.key_str().ok().and_then(|key| self.layout.relative(key))
    }

    fn mark_synced(&self, revision: i64) {
        let mut sync = self.state.control.sync();
        sync.last_sync = Some(Instant::now());
        sync.applied_revision = sync.applied_revision.max(revision);
        let metrics = &self.state.metrics.control;
        metrics.applied_revision.set(sync.applied_revision);
        metrics.sync_age.set(0.0);
    }

    fn set_connected(&self, connected: bool) {
        self.state.control.sync().connected = connected;
        self.state
            .metrics
            .control
            .etcd_connected
            .set(i64::from(connected));
    }
}

fn revision_of(event: &etcd_client::Event) -> i64 {
    event.kv().map_or(0, |kv| kv.mod_revision())
}

fn parse_note(kv: &KeyValue) -> Option<WriteNote> {
    serde_json::from_slice(kv.value()).ok()
}

fn parse_stage(kv: &KeyValue) -> Option<SwitchStage> {
    let stage = serde_json::from_slice(kv.value());
    if let Err(error) = &stage {
        tracing::warn!(error = %error, "a malformed stage in etcd ignored");
    }
    stage.ok()
}

fn rejected_path(error: &KeyError) -> String {
    match error {
        KeyError::UnknownKey(path) | KeyError::InvalidValue { path, .. } => path.clone(),
    }
}

/// Saves the newest snapshot to disk off the watch loop; a burst of flips writes once.
fn spawn_snapshot_writer(path: std::path::PathBuf) -> watch::Sender<Option<DiskSnapshot>> {
    let (sender, mut receiver) = watch::channel::<Option<DiskSnapshot>>(None);
    tokio::spawn(async move {
        while receiver.changed().await.is_ok() {
            let Some(snapshot) = receiver.borrow_and_update().clone() else {
                continue;
            };
            let path = path.clone();
            let written =
                tokio::task::spawn_blocking(move || snapshot.write(&path).map(|()| path)).await;
            match written {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(error = %error, "could not save the switch snapshot")
                }
                Err(error) => tracing::warn!(error = %error, "switch snapshot writer failed"),
            }
        }
    });
    sender
}
