//! Items and activities: create, edit, list and read, with merchant isolation (another
//! merchant's rows answer "not found") and read-only roles refused on writes.

use app::model::{ActivityDetail, ActivityInput, ActivityItem, ActivitySummary, Item, ItemInput};

use crate::{
    catalog::{
        rules::{validate_activity, validate_item},
        store::{self as store, ActivityWrite},
    },
    error::{ApiError, ApiResult},
    identity::actor::{AccessError, Actor},
    state::AppState,
};

impl From<AccessError> for ApiError {
    fn from(error: AccessError) -> Self {
        match error {
            AccessError::Forbidden => ApiError::Forbidden,
            AccessError::Invalid(message) => ApiError::BadRequest(message.into()),
        }
    }
}

fn activity_write_error(error: ActivityWrite) -> ApiError {
    match error {
        ActivityWrite::ForeignItem => ApiError::NotFound("item"),
        ActivityWrite::Missing => ApiError::NotFound("activity"),
        ActivityWrite::Locked => ApiError::Conflict {
            code: "ACTIVITY_LOCKED",
            message:
                "the activity has started or has orders; its items and stock can no longer change"
                    .into(),
        },
    }
}

/// Refuses read-only roles before anything else is looked at.
fn require_catalog_writer(actor: &Actor) -> ApiResult<()> {
    if actor.role.may_write_catalog() {
        Ok(())
    } else {
        Err(ApiError::Forbidden)
    }
}

pub async fn create_item(state: &AppState, actor: &Actor, input: ItemInput) -> ApiResult<i64> {
    let owner = actor.catalog_owner(input.merchant_id)?;
    validate_item(&input).map_err(|e| ApiError::BadRequest(e.0))?;
    Ok(store::insert_item(&state.db, owner, &input).await?)
}

pub async fn update_item(
    state: &AppState,
    actor: &Actor,
    id: i64,
    input: ItemInput,
) -> ApiResult<()> {
    require_catalog_writer(actor)?;
    validate_item(&input).map_err(|e| ApiError::BadRequest(e.0))?;
    if store::update_item(&state.db, id, actor.visible_merchant(), &input).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound("item"))
    }
}

pub async fn list_items(state: &AppState, actor: &Actor) -> ApiResult<Vec<Item>> {
    Ok(store::list_items(&state.db, actor.visible_merchant()).await?)
}

pub async fn get_item(state: &AppState, actor: &Actor, id: i64) -> ApiResult<Item> {
    store::get_item(&state.db, id, actor.visible_merchant())
        .await?
        .ok_or(ApiError::NotFound("item"))
}

pub async fn create_activity(
    state: &AppState,
    actor: &Actor,
    input: ActivityInput,
) -> ApiResult<i64> {
    let owner = actor.catalog_owner(input.merchant_id)?;
    validate_activity(&input).map_err(|e| ApiError::BadRequest(e.0))?;
    store::insert_activity(&state.db, owner, &input)
        .await?
        .map_err(activity_write_error)
}

pub async fn update_activity(
    state: &AppState,
    actor: &Actor,
    id: i64,
    input: ActivityInput,
) -> ApiResult<()> {
    require_catalog_writer(actor)?;
    validate_activity(&input).map_err(|e| ApiError::BadRequest(e.0))?;
    store::update_activity(
        &state.db,
        id,
        actor.visible_merchant(),
        &input,
        chrono::Utc::now(),
    )
    .await?
    .map_err(activity_write_error)
}

pub async fn list_activities(state: &AppState, actor: &Actor) -> ApiResult<Vec<ActivitySummary>> {
    Ok(store::list_activities(&state.db, actor.visible_merchant()).await?)
}

/// The activity with its live figures: DB stock and sold, and Redis stock per item.
pub async fn get_activity(state: &AppState, actor: &Actor, id: i64) -> ApiResult<ActivityDetail> {
    let stored = store::get_activity(&state.db, id, actor.visible_merchant())
        .await?
        .ok_or(ApiError::NotFound("activity"))?;
    let keys: Vec<String> = stored
        .lines
        .iter()
        .map(|line| state.redis.stock_key(stored.id, line.item_id))
        .collect();
    let redis_stock = state.redis.get_integers(&keys).await?;
    let prewarmed = redis_stock.iter().all(Option::is_some);
    let items = stored
        .lines
        .into_iter()
        .zip(redis_stock)
        .map(|(line, redis_stock)| ActivityItem {
            item_id: line.item_id,
            name: line.name,
            total_stock: line.total_stock.into(),
            sold: line.sold.into(),
            per_user_limit: line.per_user_limit.into(),
            price_cents: line.price_cents,
            redis_stock,
        })
        .collect();
    Ok(ActivityDetail {
        id: stored.id,
        merchant_id: stored.merchant_id,
        title: stored.title,
        kind: stored.kind,
        starts_at: stored.starts_at,
        ends_at: stored.ends_at,
        pay_timeout_s: stored.pay_timeout_s,
        items,
        seats: stored.seats,
        prewarmed,
    })
}
