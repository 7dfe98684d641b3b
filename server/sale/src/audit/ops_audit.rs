//! Writing `ops_audit`: operator actions that are not switch flips (dead-letter requeue,
//! recorded-order replay, ...): who, from where, what, on which target, with what result.
//! Reading the merged audit log is `crate::audit::page`.

use contract::Source;
use sqlx::PgExecutor;

/// One operator action.
pub struct OpsAction<'a> {
    pub actor: &'a str,
    pub source: Source,
    /// What was done, e.g. `dead_letter.requeue`.
    pub action: &'a str,
    /// What it was done to, e.g. `dead_letter:42`.
    pub target: &'a str,
    /// The reason given and what came of it.
    pub detail: serde_json::Value,
}

pub async fn record<'e>(
    executor: impl PgExecutor<'e>,
    action: &OpsAction<'_>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO ops_audit (actor, source, action, target, detail)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(action.actor)
    .bind(action.source.as_str())
    .bind(action.action)
    .bind(action.target)
    .bind(&action.detail)
    .fetch_one(executor)
    .await
}
