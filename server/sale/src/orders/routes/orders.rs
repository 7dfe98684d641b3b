//! `/admin/api/orders`: filtered pages of orders and one order with its history.

use axum::{
    extract::{
        rejection::{PathRejection, QueryRejection},
        Path, Query, State,
    },
    Json,
};
use contract::Actor;
use contract::{OrderDetail, OrderPage, OrderQuery};
use serde::Deserialize;

use crate::{orders::admin as order_admin, SaleState};
use base::error::{ApiError, ApiResult};

/// The query string as typed: `?activity_id=&status=` (empty means "any", as a form sends it).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    activity_id: Option<String>,
    status: Option<String>,
    page: Option<String>,
}

fn given(value: Option<String>) -> Option<String> {
    value.filter(|text| !text.trim().is_empty())
}

fn whole_number(name: &str, value: Option<String>) -> ApiResult<Option<i64>> {
    given(value)
        .map(|text| {
            text.trim().parse::<i64>().map_err(|_| {
                ApiError::BadRequest(format!("{name} must be a whole number, not `{text}`"))
            })
        })
        .transpose()
}

impl TryFrom<ListParams> for OrderQuery {
    type Error = ApiError;
    fn try_from(params: ListParams) -> ApiResult<Self> {
        Ok(OrderQuery {
            activity_id: whole_number("activity_id", params.activity_id)?,
            status: given(params.status),
            page: whole_number("page", params.page)?,
        })
    }
}

pub async fn list(
    State(state): State<SaleState>,
    actor: Actor,
    params: Result<Query<ListParams>, QueryRejection>,
) -> ApiResult<Json<OrderPage>> {
    let Query(params) = params?;
    let query = OrderQuery::try_from(params)?;
    Ok(Json(order_admin::list(&state, &actor, &query).await?))
}

pub async fn read(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<OrderDetail>> {
    let Path(id) = id?;
    Ok(Json(order_admin::get(&state, &actor, &id).await?))
}
