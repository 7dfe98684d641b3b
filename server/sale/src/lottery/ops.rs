//! What ops do with a lottery, for the admin API and the console alike: read an activity's
//! draw (per item: registrants, codes by outcome, how far the waitlist got; the commitment
//! and, once drawn, the seed; whether buyers can register now) and revoke a buyer's part in
//! it, audited.

use contract::{Actor, DrawItem, DrawReport, Permission, Revoked, SaleItem, Source};

use crate::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    catalog::store::{StoredActivity, StoredLottery},
    identity::authorize,
    lottery::{registration, registration_changed, rules::Status, scripts::LotteryClient, store},
    SaleState,
};
use base::error::{ApiError, ApiResult};

/// Lottery activity `id` as the catalogue stores it, and its lottery; 404 for a first-come one.
async fn lottery_activity(
    state: &SaleState,
    id: i64,
) -> ApiResult<(StoredActivity, StoredLottery)> {
    let mut stored = crate::catalog::store::get_activity(&state.db, id, None)
        .await?
        .ok_or(ApiError::NotFound("lottery activity"))?;
    let lottery = stored
        .lottery
        .take()
        .ok_or(ApiError::NotFound("lottery activity"))?;
    Ok((stored, lottery))
}

pub async fn draw_report(state: &SaleState, actor: &Actor, id: i64) -> ApiResult<DrawReport> {
    authorize(actor, Permission::WatchOperations)?;
    let (stored, lottery) = lottery_activity(state, id).await?;
    let now = state.lottery.now_ms();
    let item_ids: Vec<i64> = stored.lines.iter().map(|line| line.item_id).collect();
    let window = (
        lottery.terms.registration_opens_at,
        lottery.terms.registration_closes_at,
    );
    let reach = registration::reach(state, id, &item_ids, window, now).await?;
    let mut items = Vec::new();
    for row in store::draw_rows(&state.db, id).await? {
        let sale = SaleItem::new(id, row.item_id);
        let client = LotteryClient(&state.redis);
        let live = client.live_state(sale).await?;
        let sources = match row.sources() {
            Some(fixed) => Some(fixed),
            None => client.sources(sale).await?,
        };
        let expired = live
            .codes
            .iter()
            .filter(|(buyer, grant)| !live.used.contains(buyer) && grant.expires_ms < now)
            .count();
        items.push(DrawItem {
            item_id: row.item_id,
            drawn: row.drawn_at.is_some(),
            registrants: row.registrants.map(i64::from),
            winners: row.winners.map(i64::from),
            codes_issued: row.codes_issued,
            codes_used: i64::try_from(live.used.len()).unwrap_or(i64::MAX),
            codes_expired: i64::try_from(expired).unwrap_or(i64::MAX),
            codes_revoked: row.revoked,
            waitlist_reached: live.turns,
            sources,
        });
    }
    Ok(DrawReport {
        activity_id: id,
        commitment: lottery.commitment,
        seed: lottery.revealed_seed,
        items,
        registration: reach,
    })
}

/// Ends `user`'s part in every item of lottery activity `id` he registered for: his entry
/// revoked, his code unless it bought deleted (its units go to the waitlist's next), audited
/// with `reason`. 404 when he is registered for none.
pub async fn revoke(
    state: &SaleState,
    actor: &Actor,
    source: Source,
    id: i64,
    user: i64,
    reason: &str,
) -> ApiResult<Revoked> {
    authorize(actor, Permission::RevokeRegistration)?;
    let reason = audited_reason(reason)?;
    let (stored, _) = lottery_activity(state, id).await?;
    let mut items = Vec::new();
    for line in &stored.lines {
        let sale = SaleItem::new(id, line.item_id);
        if LotteryClient(&state.redis).revoke(sale, user).await? {
            registration_changed(&state.events, sale, &[(user, Status::Revoked)]);
            items.push(line.item_id);
        }
    }
    if items.is_empty() {
        return Err(ApiError::NotFound("registration"));
    }
    store::record_revoked(&state.db, id, user, reason).await?;
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "lottery.revoke",
            target: &format!("activity:{id}/user:{user}"),
            detail: serde_json::json!({ "reason": reason, "items": items }),
        },
    )
    .await?;
    Ok(Revoked {
        user_id: user,
        items,
    })
}
