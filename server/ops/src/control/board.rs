//! The switch board's services, one set for the admin API, the console and
//! the CLI: read every switch with its propagation, flip one (validated, audited, with an
//! optional bounded wait for every live instance), this instance's staleness, and the
//! audit log.
//!
//! Defaults shown are this process's settings: a key absent from etcd means "the setting's
//! value", and every instance of a deployment is expected to run with the same settings.

use contract::{Actor, Source};
use contract::{
    AuditPage, EtcdReach, InstanceSync, NodeApplied, NodeState, SwitchBoard, SwitchChange,
    SwitchRow, SwitchWrite,
};
use etcd_client::{Compare, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::Duration,
};

use crate::control::{
    keys::{KeyError, SwitchKey},
    layout::{now_us, Layout, WriteNote},
    nodes::{self, NodeReport},
    policy,
};
use crate::state::AppState;
use base::{
    config::Settings,
    error::{ApiError, ApiResult},
    etcd::{EtcdCall, EtcdLink},
    paging::PageWindow,
};
use sale::{
    audit::{self, PendingFlip},
    switches::SwitchValues,
};

/// Longest wait a flip may ask for.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(10);
/// Audit rows per page.
pub(crate) const AUDIT_PER_PAGE: i64 = 50;
/// How long the board waits for etcd before showing the last known values.
const READ_WAIT: Duration = Duration::from_secs(2);

/// Whether a flip asks the approval policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Approval {
    /// A key that needs four eyes is refused.
    Required,
    /// An admin flips at once; the audit says so.
    Emergency,
}

/// A flip as asked for.
pub struct Flip<'a> {
    /// Whose flip it is; the audit names `actor.username`.
    pub actor: &'a Actor,
    pub source: Source,
    /// Relative to the prefix; surrounding slashes are ignored.
    pub path: &'a str,
    pub value: &'a str,
    pub reason: &'a str,
    /// Wait until every live instance has applied it, at most this long.
    pub wait: Option<Duration>,
}

impl From<KeyError> for ApiError {
    fn from(error: KeyError) -> Self {
        ApiError::Invalid {
            code: error.code(),
            message: error.to_string(),
        }
    }
}

pub(crate) fn etcd_unavailable(error: impl Into<anyhow::Error>) -> ApiError {
    ApiError::Unavailable(error.into().context("etcd"))
}

/// What the board needs: PostgreSQL and etcd only, so the CLI can flip a switch while
/// Redis or RabbitMQ is the very thing that is down.
pub struct Board<'a> {
    pub db: &'a sqlx::PgPool,
    pub etcd: &'a EtcdLink,
    pub settings: &'a Settings,
    /// The serving instance answering, for its own view; absent in the CLI.
    pub instance: Option<&'a AppState>,
}

impl<'a> Board<'a> {
    /// The board as a serving instance sees it.
    pub fn of(state: &'a AppState) -> Self {
        Self {
            db: &state.db,
            etcd: &state.etcd,
            settings: &state.settings,
            instance: Some(state),
        }
    }

    /// Validates a flip, writes it to etcd with its note in one transaction, audits it, and
    /// waits for the live instances if asked. Nothing is written when anything is refused.
    /// A key that needs four eyes is refused (409 `APPROVAL_REQUIRED`): it goes through a
    /// change (`crate::changes`), or an admin's emergency flip.
    pub async fn flip(&self, flip: Flip<'_>) -> ApiResult<SwitchChange> {
        self.flip_as(flip, Approval::Required).await
    }

    /// [`Board::flip`], or an admin's emergency flip of a key that needs four eyes.
    pub(crate) async fn flip_as(
        &self,
        flip: Flip<'_>,
        approval: Approval,
    ) -> ApiResult<SwitchChange> {
        sale::identity::authorize(flip.actor, contract::Permission::FlipSwitch)?;
        if approval == Approval::Emergency {
            sale::identity::authorize(flip.actor, contract::Permission::EmergencyFlip)?;
        }
        let checked = Checked::of(&flip)?;
        let layout = Layout::new(&self.settings.etcd_prefix);
        let needs_approval = match approval {
            Approval::Required => self.needs_approval(&checked.path).await,
            Approval::Emergency => Ok(false),
        };
        let needs_approval = match needs_approval {
            Ok(needs) => needs,
            Err(error) => {
                // etcd out of reach: the attempt is audited as failed, as a write would be.
                self.audit_unreached(flip.actor, flip.source, &checked)
                    .await;
                return Err(error);
            }
        };
        if needs_approval {
            return Err(ApiError::Conflict {
                code: "APPROVAL_REQUIRED",
                message: format!(
                    "{} needs a second person: propose the change, or flip it as an emergency",
                    checked.path
                ),
            });
        }
        let note = WriteNote {
            actor: flip.actor.username.clone(),
            source: flip.source,
            reason: checked.reason.to_owned(),
            written_at_us: now_us(),
        };
        let emergency = approval == Approval::Emergency;
        let (mut client, written) = self
            .write_audited(&layout, flip.source, &checked, &note, emergency)
            .await?;
        let propagation = match flip.wait {
            Some(wait) => Some(
                nodes::await_applied(
                    &mut client,
                    &layout,
                    &checked.path,
                    written.revision,
                    note.written_at_us,
                    wait,
                )
                .await
                .map_err(etcd_unavailable)?,
            ),
            None => None,
        };
        Ok(SwitchChange {
            path: checked.path,
            old_value: written.old_value,
            new_value: checked.value,
            revision: written.revision,
            audit_id: written.audit_id,
            propagation,
        })
    }

    /// Records a flip that never reached etcd as `failed`; a database away as well leaves
    /// no row, which is what it would have been without the flip.
    pub(crate) async fn audit_unreached(
        &self,
        actor: &Actor,
        source: Source,
        checked: &Checked<'_>,
    ) {
        let opened = audit::open_flip(
            self.db,
            &PendingFlip {
                actor: &actor.username,
                source,
                path: &checked.path,
                new_value: &checked.value,
                reason: checked.reason,
                change_id: None,
                emergency: false,
            },
        )
        .await;
        if let Ok(flip) = opened {
            flip.failed(self.db).await;
        }
    }

    /// Whether a flip of `path` needs a second person, by the policy etcd holds now.
    pub(crate) async fn needs_approval(&self, path: &str) -> ApiResult<bool> {
        let layout = Layout::new(&self.settings.etcd_prefix);
        let mut client = self.etcd.client().await.map_err(etcd_unavailable)?;
        let policy = policy::read(self.etcd, &mut client, &layout)
            .await
            .map_err(etcd_unavailable)?;
        Ok(policy.needs_approval(path))
    }

    /// Writes a checked flip with its note and audits it. The row first, committed as
    /// `pending`: no flip lands in etcd unaudited, whether the database was away before or
    /// the instance died after; then `applied` once etcd has answered, or `failed`.
    /// Returns the etcd client for the wait that may follow.
    async fn write_audited(
        &self,
        layout: &Layout,
        source: Source,
        checked: &Checked<'_>,
        note: &WriteNote,
        emergency: bool,
    ) -> ApiResult<(etcd_client::Client, Written)> {
        let note_json = serde_json::to_vec(note).map_err(anyhow::Error::from)?;
        let flip = audit::open_flip(
            self.db,
            &PendingFlip {
                actor: &note.actor,
                source,
                path: &checked.path,
                new_value: &checked.value,
                reason: checked.reason,
                change_id: None,
                emergency,
            },
        )
        .await?;
        let audit_id = flip.id;
        let written = async {
            let mut client = self.etcd.client().await.map_err(etcd_unavailable)?;
            let written = put_with_note(
                self.etcd,
                &mut client,
                layout,
                (&checked.path, &checked.value),
                note_json,
                Guard::default(),
            )
            .await?;
            match written {
                Put::Written {
                    revision,
                    old_value,
                } => Ok::<_, ApiError>((client, (revision, old_value))),
                Put::Refused => Err(etcd_unavailable(anyhow::anyhow!(
                    "etcd refused a write without conditions"
                ))),
            }
        };
        let (client, (revision, old_value)) = match written.await {
            Ok(written) => written,
            Err(error) => {
                flip.failed(self.db).await;
                return Err(error);
            }
        };
        if let Err(error) = flip.applied(self.db, old_value.as_deref(), revision).await {
            let (path, value, reason) = (&checked.path, &checked.value, checked.reason);
            tracing::error!(
                path, value, revision, actor = %note.actor, source = %note.source, reason,
                error = %error, "a flip is in force in etcd but its audit row still says pending"
            );
            return Err(error.into());
        }
        Ok((
            client,
            Written {
                audit_id,
                revision,
                old_value,
            },
        ))
    }

    /// Every switch and limit with its etcd value and revision, and per live instance whether
    /// it applied it and how long that took. With etcd unreachable: this instance's last
    /// accepted values, marked so. Every signed-in role may read it; only operators flip.
    pub async fn read(&self) -> ApiResult<SwitchBoard> {
        let layout = Layout::new(&self.settings.etcd_prefix);
        let read = tokio::time::timeout(READ_WAIT, read_etcd(self.etcd, &layout))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("etcd did not answer within {READ_WAIT:?}")));
        let defaults = SwitchValues::from_settings(&self.settings.buy);
        let instance = self.instance.filter(|state| state.control.running());
        let in_force = instance.map(|state| state.switches.current());
        let accepted = instance
            .map(|state| state.control.sync().accepted.clone())
            .unwrap_or_default();
        let (etcd, view) = match read {
            Ok(view) => (
                EtcdReach {
                    reachable: true,
                    revision: Some(view.revision),
                    error: None,
                },
                view,
            ),
            Err(error) => {
                // The last values this instance accepted stand in for etcd's.
                let values = accepted
                    .keys()
                    .filter_map(|key| {
                        accepted
                            .entry(key)
                            .map(|entry| (key.path(), (entry.value.clone(), entry.mod_revision)))
                    })
                    .collect();
                (
                    EtcdReach {
                        reachable: false,
                        revision: None,
                        error: Some(format!("{error:#}")),
                    },
                    EtcdView {
                        revision: 0,
                        values,
                        notes: HashMap::new(),
                        nodes: BTreeMap::new(),
                        stages: BTreeMap::new(),
                    },
                )
            }
        };
        let activities: BTreeSet<SwitchKey> = view
            .values
            .keys()
            .filter_map(|path| SwitchKey::parse(path).ok())
            .chain(accepted.keys().copied())
            .filter(|key| matches!(key, SwitchKey::ActivityEntry(_)))
            .collect();
        let switches = SwitchKey::fixed()
            .chain(activities)
            .map(|key| {
                let path = key.path();
                let stored = view.values.get(&path);
                let mod_revision = stored.map(|(_, revision)| *revision);
                let note = view
                    .notes
                    .get(&path)
                    .filter(|(noted_at, _)| Some(*noted_at) == mod_revision)
                    .map(|(_, note)| note);
                let applied: Vec<NodeApplied> = match mod_revision {
                    Some(revision) => view
                        .nodes
                        .values()
                        .map(|node| node.applied(&path, revision, note.map(|n| n.written_at_us)))
                        .collect(),
                    None => Vec::new(),
                };
                SwitchRow {
                    meaning: key.meaning(),
                    choice_notes: key.choice_notes().iter().map(|n| n.to_string()).collect(),
                    range: key.range(),
                    accepts: key.accepts(),
                    choices: key.choices().iter().map(|c| c.to_string()).collect(),
                    default_value: key.value_in(&defaults),
                    etcd_value: stored.map(|(value, _)| value.clone()),
                    valid: stored.is_none_or(|(value, _)| key.parse_value(value).is_ok()),
                    in_force: in_force.as_ref().map(|values| key.value_in(values)),
                    mod_revision,
                    written: note.map(|note| SwitchWrite {
                        actor: note.actor.clone(),
                        source: note.source,
                        reason: note.reason.clone(),
                        at: from_micros(note.written_at_us),
                    }),
                    applied,
                    staged: view.stages.get(&path).cloned(),
                    path,
                }
            })
            .collect();
        Ok(SwitchBoard {
            prefix: layout.prefix().to_owned(),
            etcd,
            instance: instance.and_then(instance_sync),
            switches,
            nodes: view.nodes.into_values().map(node_state).collect(),
        })
    }
}

/// A flip that passed its checks: the switch's path, the value as it is stored, the
/// trimmed reason.
pub(crate) struct Checked<'a> {
    pub(crate) path: String,
    pub(crate) value: String,
    pub(crate) reason: &'a str,
}

impl<'a> Checked<'a> {
    /// The reason, the switch and its value, the wait: each refused with its own code.
    fn of(flip: &Flip<'a>) -> ApiResult<Self> {
        if flip.wait.is_some_and(|wait| wait > MAX_WAIT) {
            return Err(ApiError::Invalid {
                code: "INVALID_WAIT",
                message: format!("wait at most {} ms", MAX_WAIT.as_millis()),
            });
        }
        Self::change(flip.path, flip.value, flip.reason)
    }

    /// The reason, the switch and its value, each refused with its own code.
    pub(crate) fn change(path: &str, value: &str, reason: &'a str) -> ApiResult<Self> {
        let reason = sale::audit::reason::audited_reason(reason)?;
        let key = SwitchKey::parse(path.trim_matches('/'))?;
        let value = key.parse_value(value)?.to_string();
        Ok(Self {
            path: key.path(),
            value,
            reason,
        })
    }
}

/// A flip in force and audited.
struct Written {
    audit_id: i64,
    revision: i64,
    old_value: Option<String>,
}

/// What a write waits on: conditions etcd checks in the write's own transaction, and keys
/// it writes along when they hold. The board's flips have none; a change the leader
/// applies has one, so it lands once.
#[derive(Default)]
pub(crate) struct Guard {
    pub(crate) compares: Vec<Compare>,
    pub(crate) also: Vec<TxnOp>,
}

/// How a guarded write ended.
pub(crate) enum Put {
    /// In etcd at `revision`, replacing `old_value`.
    Written {
        revision: i64,
        old_value: Option<String>,
    },
    /// A condition did not hold: nothing was written.
    Refused,
}

/// The value and its note in one etcd transaction, if `guard`'s conditions hold.
pub(crate) async fn put_with_note(
    etcd: &EtcdLink,
    client: &mut etcd_client::Client,
    layout: &Layout,
    (path, value): (&str, &str),
    note_json: Vec<u8>,
    guard: Guard,
) -> ApiResult<Put> {
    let mut writes = vec![
        TxnOp::put(
            layout.key(path),
            value,
            Some(PutOptions::new().with_prev_key()),
        ),
        TxnOp::put(layout.note_key(path), note_json, None),
    ];
    writes.extend(guard.also);
    let txn = Txn::new().when(guard.compares).and_then(writes);
    let response = etcd
        .timed(EtcdCall::Txn, client.txn(txn))
        .await
        .map_err(|error| {
            // A timeout may still have landed: the board shows the note if it did.
            tracing::warn!(path, value, error = %error, "etcd did not confirm a flip; not audited");
            etcd_unavailable(error)
        })?;
    if !response.succeeded() {
        return Ok(Put::Refused);
    }
    let revision = response
        .header()
        .map(|header| header.revision())
        .ok_or_else(|| etcd_unavailable(anyhow::anyhow!("etcd answered without a header")))?;
    let old_value = response.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Put(put) => put
            .prev_key()
            .and_then(|kv| kv.value_str().ok())
            .map(str::to_owned),
        _ => None,
    });
    Ok(Put::Written {
        revision,
        old_value,
    })
}

/// What etcd holds under the prefix, read once.
struct EtcdView {
    revision: i64,
    values: BTreeMap<String, (String, i64)>,
    notes: HashMap<String, (i64, WriteNote)>,
    nodes: BTreeMap<String, NodeReport>,
    stages: BTreeMap<String, contract::SwitchStage>,
}

async fn read_etcd(etcd: &EtcdLink, layout: &Layout) -> anyhow::Result<EtcdView> {
    let mut client = etcd.client().await?;
    let response = etcd
        .timed(
            EtcdCall::Get,
            client.get(layout.root(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut view = EtcdView {
        revision: response.header().map_or(0, |header| header.revision()),
        values: BTreeMap::new(),
        notes: HashMap::new(),
        nodes: BTreeMap::new(),
        stages: BTreeMap::new(),
    };
    for kv in response.kvs() {
        let Some(path) = kv.key_str().ok().and_then(|key| layout.relative(key)) else {
            continue;
        };
        if let Some(noted) = Layout::noted_path(path) {
            if let Ok(note) = serde_json::from_slice::<WriteNote>(kv.value()) {
                view.notes
                    .insert(noted.to_owned(), (kv.mod_revision(), note));
            }
        } else if Layout::is_node_path(path) {
            if let Ok(report) = serde_json::from_slice::<NodeReport>(kv.value()) {
                view.nodes.insert(report.node_id.clone(), report);
            }
        } else if let Some(staged) = Layout::staged_path(path) {
            if let Ok(stage) = serde_json::from_slice(kv.value()) {
                view.stages.insert(staged.to_owned(), stage);
            }
        } else if super::accepted::is_switch_path(path) {
            let value = kv.value_str().unwrap_or("<not UTF-8>").to_owned();
            view.values
                .insert(path.to_owned(), (value, kv.mod_revision()));
        }
    }
    Ok(view)
}

/// How current this instance's switches are; `None` where no control plane runs.
pub(crate) fn instance_sync(state: &AppState) -> Option<InstanceSync> {
    if !state.control.running() {
        return None;
    }
    let sync = state.control.sync();
    Some(InstanceSync {
        node_id: state.control.node_id().to_owned(),
        connected: sync.connected,
        applied_revision: sync.applied_revision,
        synced_ago_ms: sync.synced_ago().map(|ago| ago.as_millis() as u64),
        values_from: sync.values_from,
        leader: state.leadership.is_leader(),
    })
}

fn node_state(report: NodeReport) -> NodeState {
    NodeState {
        heartbeat_at: from_micros(report.heartbeat_at_us),
        node_id: report.node_id,
        address: report.address,
        applied_revision: report.applied_revision,
        connected: report.connected,
        leader: report.leader,
        synced_ago_ms: report.synced_ago_ms,
        started_at: report.started_at_us.map(from_micros),
        staged: report.staged,
        buys: report.buys,
    }
}

fn from_micros(us: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_micros(us).unwrap_or_default()
}

/// One page (1-based) of the audit log: switch flips and operator actions, newest first.
pub async fn audit(
    state: &AppState,
    actor: &Actor,
    page: Option<i64>,
    filter: &contract::AuditFilter,
) -> ApiResult<AuditPage> {
    sale::identity::authorize(actor, contract::Permission::WatchOperations)?;
    let page = page.unwrap_or(1);
    let window = PageWindow::new(page, AUDIT_PER_PAGE).map_err(ApiError::BadRequest)?;
    let (entries, has_more) =
        window.split(audit::page(&state.db, window.fetch_limit(), window.offset, filter).await?);
    Ok(AuditPage {
        rows: contract::AuditEntries { entries },
        page,
        per_page: AUDIT_PER_PAGE,
        has_more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_errors_answer_400_with_their_code() {
        let error = ApiError::from(SwitchKey::parse("switches/nope").expect_err("unknown"));
        assert_eq!(error.status(), http::StatusCode::BAD_REQUEST);
        assert_eq!(error.code(), "UNKNOWN_SWITCH");
        let error = ApiError::from(SwitchKey::Entry.parse_value("ajar").expect_err("invalid"));
        assert_eq!(error.code(), "INVALID_SWITCH_VALUE");
    }
}
