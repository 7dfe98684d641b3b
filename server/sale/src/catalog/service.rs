//! Items and activities: create, edit, list and read, with merchant isolation (another
//! merchant's rows answer "not found") and read-only roles refused on writes.

use contract::Actor;
use contract::{
    ActivityDetail, ActivityInput, ActivityItem, ActivitySummary, Item, ItemInput, Permission,
    Role, SaleItem, SaleMode,
};

use crate::{
    catalog::copies,
    catalog::{
        rules::{lottery_terms, validate_activity, validate_item},
        store::{self, ActivityWrite},
    },
    identity::authorize,
    SaleState,
};
use base::error::{ApiError, ApiResult};

/// The merchant a catalogue write lands on: only roles that may write the catalogue get
/// one; a merchant always writes its own rows (a different `requested` id is refused); an
/// admin must name the merchant.
fn catalog_owner(actor: &Actor, requested: Option<i64>) -> ApiResult<i64> {
    authorize(actor, Permission::WriteCatalog)?;
    match (actor.role, actor.merchant_id, requested) {
        (Role::Merchant, Some(own), None) => Ok(own),
        (Role::Merchant, Some(own), Some(other)) if other == own => Ok(own),
        (Role::Merchant, _, _) => Err(ApiError::Forbidden),
        (_, _, Some(merchant)) => Ok(merchant),
        // Worded as the console's item form labels the field an admin fills in.
        (_, _, None) => Err(ApiError::BadRequest(
            "Merchant (ID): an admin must name the merchant it belongs to".into(),
        )),
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

pub async fn create_item(state: &SaleState, actor: &Actor, input: ItemInput) -> ApiResult<i64> {
    let owner = catalog_owner(actor, input.merchant_id)?;
    validate_item(&input)?;
    Ok(store::insert_item(&state.db, owner, &input).await?)
}

pub async fn update_item(
    state: &SaleState,
    actor: &Actor,
    id: i64,
    input: ItemInput,
) -> ApiResult<()> {
    authorize(actor, Permission::WriteCatalog)?;
    validate_item(&input)?;
    if store::update_item(&state.db, id, actor.visible_merchant(), &input).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound("item"))
    }
}

pub async fn list_items(state: &SaleState, actor: &Actor) -> ApiResult<Vec<Item>> {
    authorize(actor, Permission::ReadCatalog)?;
    Ok(store::list_items(&state.db, actor.visible_merchant()).await?)
}

pub async fn get_item(state: &SaleState, actor: &Actor, id: i64) -> ApiResult<Item> {
    authorize(actor, Permission::ReadCatalog)?;
    store::get_item(&state.db, id, actor.visible_merchant())
        .await?
        .ok_or(ApiError::NotFound("item"))
}

pub async fn create_activity(
    state: &SaleState,
    actor: &Actor,
    input: ActivityInput,
) -> ApiResult<i64> {
    let owner = catalog_owner(actor, input.merchant_id)?;
    validate_activity(&input, chrono::Utc::now())?;
    let lottery = lottery_terms(&input)?;
    store::insert_activity(&state.db, owner, &input, lottery)
        .await?
        .map_err(activity_write_error)
}

pub async fn update_activity(
    state: &SaleState,
    actor: &Actor,
    id: i64,
    input: ActivityInput,
) -> ApiResult<()> {
    authorize(actor, Permission::WriteCatalog)?;
    let now = chrono::Utc::now();
    validate_activity(&input, now)?;
    let lottery = lottery_terms(&input)?;
    store::update_activity(
        &state.db,
        id,
        actor.visible_merchant(),
        &input,
        lottery,
        now,
    )
    .await?
    .map_err(activity_write_error)
}

pub async fn list_activities(state: &SaleState, actor: &Actor) -> ApiResult<Vec<ActivitySummary>> {
    authorize(actor, Permission::ReadCatalog)?;
    Ok(store::list_activities(&state.db, actor.visible_merchant()).await?)
}

/// The activity with its live figures: DB stock and sold, and Redis stock per item.
pub async fn get_activity(state: &SaleState, actor: &Actor, id: i64) -> ApiResult<ActivityDetail> {
    authorize(actor, Permission::ReadCatalog)?;
    let stored = copies::real_activity(&state.db, id, actor.visible_merchant()).await?;
    let keys: Vec<String> = stored
        .lines
        .iter()
        .map(|line| {
            state
                .redis
                .stock_key(SaleItem::new(stored.id, line.item_id))
        })
        .collect();
    let redis_stock = state.redis.get_integers(&keys).await?;
    let prewarmed = redis_stock.iter().all(Option::is_some);
    let publication = crate::sale_page::store::publication(&state.db, stored.id).await?;
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
    let lottery = stored.lottery.as_ref();
    Ok(ActivityDetail {
        mode: if lottery.is_some() {
            SaleMode::Lottery
        } else {
            SaleMode::FirstCome
        },
        registration_opens_at: lottery.map(|l| l.terms.registration_opens_at),
        registration_closes_at: lottery.map(|l| l.terms.registration_closes_at),
        code_ttl_s: lottery.map(|l| l.terms.code_ttl_s),
        draw_commitment: lottery.map(|l| l.commitment.clone()),
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
        publication,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(role: Role, merchant_id: Option<i64>) -> Actor {
        Actor {
            user_id: 1,
            username: "u".into(),
            role,
            merchant_id,
        }
    }

    #[test]
    fn merchants_write_only_their_own_rows() {
        let merchant = actor(Role::Merchant, Some(7));
        assert_eq!(catalog_owner(&merchant, None).ok(), Some(7));
        assert_eq!(catalog_owner(&merchant, Some(7)).ok(), Some(7));
        assert!(matches!(
            catalog_owner(&merchant, Some(8)),
            Err(ApiError::Forbidden)
        ));
    }

    #[test]
    fn read_only_roles_cannot_write_the_catalogue() {
        for role in [Role::Sre, Role::Ops] {
            let reader = actor(role, None);
            assert!(reader.sees(123));
            assert!(matches!(
                catalog_owner(&reader, Some(1)),
                Err(ApiError::Forbidden)
            ));
        }
    }

    #[test]
    fn admins_write_for_the_merchant_they_name() {
        let admin = actor(Role::Admin, None);
        assert_eq!(catalog_owner(&admin, Some(3)).ok(), Some(3));
        assert!(matches!(
            catalog_owner(&admin, None),
            Err(ApiError::BadRequest(_))
        ));
    }
}
