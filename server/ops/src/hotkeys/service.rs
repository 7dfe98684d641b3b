//! The hot-key use cases the admin API, the console and the CLI share: the view of an
//! instance (keys in force from its table, the cluster-wide top from its aggregator), the
//! stored history, and manual keys, added and removed like a switch is flipped: checked,
//! audited in `switch_audit` (path `hotkeys/{kind}/{key}`): the row committed `pending`
//! before etcd is written, then `applied` or `failed`.

use contract::{
    check_action, check_hold, Actor, HotKey, HotKeyId, HotKeyKind, HotKeyPeriod, HotKeySource,
    HotKeysView, NewHotKey, Permission, Source,
};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use crate::{
    control::{board::Board, layout::Layout},
    hotkeys::{
        store::{self, Opening},
        table::{Entry, HotKeyTable, Published},
        window::WINDOW_MS,
    },
    state::AppState,
};
use base::{
    client_address,
    error::{ApiError, ApiResult},
    etcd::EtcdCall,
};
use sale::{
    audit::reason::audited_reason,
    audit::{self, OpenFlip, PendingFlip},
    identity::authorize,
};

/// Periods the history shows at most.
const HISTORY_ROWS: i64 = 500;
/// Hours of history at most.
pub(crate) const MAX_HISTORY_HOURS: u32 = 72;

fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        code,
        message: message.into(),
    }
}

fn etcd_unavailable(error: impl Into<anyhow::Error>) -> ApiError {
    ApiError::Unavailable(error.into().context("etcd"))
}

/// What this instance applies, and the latest cluster-wide top.
pub fn view(state: &AppState, actor: &Actor) -> ApiResult<HotKeysView> {
    authorize(actor, Permission::WatchOperations)?;
    let (top, nodes) = state.hotkeys.top();
    Ok(HotKeysView {
        hot: state.hotkeys.table.listed(),
        top,
        window_ms: WINDOW_MS,
        reporting_nodes: nodes,
    })
}

pub async fn history(db: &sqlx::PgPool, actor: &Actor, hours: u32) -> ApiResult<Vec<HotKeyPeriod>> {
    authorize(actor, Permission::WatchOperations)?;
    if !(1..=MAX_HISTORY_HOURS).contains(&hours) {
        return Err(invalid(
            "INVALID_HOURS",
            format!("hours must be 1..={MAX_HISTORY_HOURS}"),
        ));
    }
    Ok(store::recent(db, hours, HISTORY_ROWS).await?)
}

/// Commits the audit row of a manual change of `id`, `pending`, before etcd is written: no
/// change lands in etcd unaudited, whether the database was away before or the instance
/// died after.
async fn open_audit(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    id: HotKeyId,
    new_value: &str,
    reason: &str,
) -> ApiResult<OpenFlip> {
    let path = format!("hotkeys/{}", id.path());
    let flip = PendingFlip {
        actor: &actor.username,
        source,
        path: &path,
        new_value,
        reason,
        change_id: None,
        emergency: false,
    };
    Ok(audit::open_flip(board.db, &flip).await?)
}

/// Ends the audit row of a change with what etcd said: `(value replaced, revision)`, or
/// the error (the row says `failed`).
async fn close_audit(
    board: &Board<'_>,
    flip: OpenFlip,
    written: ApiResult<(Option<String>, i64)>,
) -> ApiResult<()> {
    match written {
        Ok((old_value, revision)) => {
            flip.applied(board.db, old_value.as_deref(), revision)
                .await?;
            Ok(())
        }
        Err(error) => {
            flip.failed(board.db).await;
            Err(error)
        }
    }
}

/// The key as the funnel counts it: an IPv6 address names its /64, the block every limit
/// counts that client under, so a block of any address in it is a block of the client.
fn key_of(kind: HotKeyKind, key: &str) -> ApiResult<HotKeyId> {
    match HotKeyId::parse(kind, key).map_err(|message| invalid("INVALID_HOTKEY", message))? {
        HotKeyId::Ip(address) => Ok(HotKeyId::Ip(client_address::counted(address))),
        id => Ok(id),
    }
}

/// Adds (or replaces) a manual hot key, held for `hold_s` and never renewed.
pub async fn add(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    new: &NewHotKey,
) -> ApiResult<HotKey> {
    authorize(actor, Permission::ManageHotKeys)?;
    let reason = audited_reason(&new.reason)?;
    let id = key_of(new.kind, &new.key)?;
    check_action(new.kind, new.action, new.limit_per_s)
        .map_err(|message| invalid("INVALID_HOTKEY_ACTION", message))?;
    check_hold(new.hold_s).map_err(|message| invalid("INVALID_HOLD", message))?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let hold_ms = i64::try_from(new.hold_s * 1000).unwrap_or(i64::MAX);
    let value = Published {
        action: new.action,
        limit_per_s: new.limit_per_s,
        source: HotKeySource::Manual,
        rate_per_s: 0,
        since_ms: now_ms,
        expires_ms: now_ms + hold_ms,
        actor: Some(actor.username.clone()),
        reason: Some(reason.to_owned()),
    };
    let json = serde_json::to_string(&value).map_err(anyhow::Error::from)?;
    let layout = Layout::new(&board.settings.etcd_prefix);
    let flip = open_audit(board, actor, source, id, &json, reason).await?;
    let written = async {
        let mut client = board.etcd.client().await.map_err(etcd_unavailable)?;
        let ttl = i64::try_from(new.hold_s).unwrap_or(i64::MAX);
        let lease = board
            .etcd
            .timed(EtcdCall::Lease, client.lease_grant(ttl, None))
            .await
            .map_err(etcd_unavailable)?
            .id();
        // Adding a key ends an earlier lift of it: the operator has decided again.
        let put = client.txn(Txn::new().and_then(vec![
            TxnOp::put(
                layout.hotkey_key(id),
                json.clone(),
                Some(PutOptions::new().with_lease(lease).with_prev_key()),
            ),
            TxnOp::delete(layout.lifted_hotkey_key(id), None),
        ]));
        let written = board
            .etcd
            .timed(EtcdCall::Txn, put)
            .await
            .map_err(etcd_unavailable)?;
        let old_value = written.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Put(put) => put
                .prev_key()
                .and_then(|kv| kv.value_str().ok())
                .map(str::to_owned),
            _ => None,
        });
        Ok((
            old_value,
            written.header().map_or(0, |header| header.revision()),
        ))
    };
    close_audit(board, flip, written.await).await?;
    // A detected period of the same key ends where the operator's begins.
    store::close(board.db, id).await?;
    store::open(
        board.db,
        &Opening {
            id,
            action: new.action,
            source: HotKeySource::Manual,
            rate_per_s: 0,
            actor: Some(&actor.username),
            reason: Some(reason),
        },
    )
    .await?;
    Ok(value.listed(id))
}

/// Removes a hot key in force, manual or detected; 404 when there is none. The lift lasts
/// what was left of the key's hold: until then the leader does not publish the key again,
/// however hot it stays (the requests it was refusing keep it hot), unless an operator adds
/// it again.
pub async fn remove(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    kind: &str,
    key: &str,
    reason: &str,
) -> ApiResult<()> {
    authorize(actor, Permission::ManageHotKeys)?;
    let reason = audited_reason(reason)?;
    let kind: HotKeyKind = kind
        .parse()
        .map_err(|message: String| invalid("INVALID_HOTKEY", message))?;
    let id = key_of(kind, key)?;
    let layout = Layout::new(&board.settings.etcd_prefix);
    // An empty new value records a removal, as for a switch deleted from etcd.
    let flip = open_audit(board, actor, source, id, "", reason).await?;
    let written = async {
        let mut client = board.etcd.client().await.map_err(etcd_unavailable)?;
        let key = layout.hotkey_key(id);
        let read = board
            .etcd
            .timed(EtcdCall::Get, client.get(key.clone(), None))
            .await
            .map_err(etcd_unavailable)?;
        // Nothing there: nothing changed, the row says `failed`.
        let old = read.kvs().first().ok_or(ApiError::NotFound("hot key"))?;
        let old_value = old.value_str().ok().map(str::to_owned);
        let lift_s = old_value
            .as_deref()
            .and_then(|value| serde_json::from_str::<Published>(value).ok())
            .map_or(1, |published| {
                let left_ms = published.expires_ms - chrono::Utc::now().timestamp_millis();
                ((left_ms.max(0) + 999) / 1000).max(1)
            });
        let lift = board
            .etcd
            .timed(EtcdCall::Lease, client.lease_grant(lift_s, None))
            .await
            .map_err(etcd_unavailable)?
            .id();
        // Only the key that was read (renewals keep its lease): one replaced since is
        // decided again.
        let lifted = Txn::new()
            .when(vec![Compare::lease(
                key.clone(),
                CompareOp::Equal,
                old.lease(),
            )])
            .and_then(vec![
                TxnOp::delete(key, None),
                TxnOp::put(
                    layout.lifted_hotkey_key(id),
                    actor.username.clone(),
                    Some(PutOptions::new().with_lease(lift)),
                ),
            ]);
        let deleted = board
            .etcd
            .timed(EtcdCall::Txn, client.txn(lifted))
            .await
            .map_err(etcd_unavailable)?;
        if !deleted.succeeded() {
            let _ = client.lease_revoke(lift).await;
            return Err(ApiError::Conflict {
                code: "HOTKEY_CHANGED",
                message: "the hot key changed while it was being removed; look again".into(),
            });
        }
        Ok((
            old_value,
            deleted.header().map_or(0, |header| header.revision()),
        ))
    };
    close_audit(board, flip, written.await).await?;
    store::close(board.db, id).await?;
    Ok(())
}

/// The keys in force as etcd holds them now, for the CLI (which runs no watcher).
pub async fn list(board: &Board<'_>, actor: &Actor) -> ApiResult<Vec<HotKey>> {
    authorize(actor, Permission::WatchOperations)?;
    let layout = Layout::new(&board.settings.etcd_prefix);
    let mut client = board.etcd.client().await.map_err(etcd_unavailable)?;
    let read = client.get(layout.hotkeys(), Some(GetOptions::new().with_prefix()));
    let response = board
        .etcd
        .timed(EtcdCall::Get, read)
        .await
        .map_err(etcd_unavailable)?;
    let table = HotKeyTable::default();
    table.replace_all(response.kvs().iter().filter_map(|kv| {
        let path = Layout::hotkey_path(layout.relative(kv.key_str().ok()?)?)?;
        Some(Entry {
            path,
            value: Some(kv.value()),
            lease: kv.lease(),
        })
    }));
    Ok(table.listed())
}
