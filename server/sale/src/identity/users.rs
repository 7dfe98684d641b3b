//! Admin users, merchants, console sessions and API tokens.

use chrono::{DateTime, Utc};
use contract::Role;
use sqlx::PgPool;

use contract::Actor;

/// A user row as login needs it.
pub struct Credentials {
    pub actor: Actor,
    pub password_hash: String,
}

#[derive(sqlx::FromRow)]
struct ActorRow {
    id: i64,
    username: String,
    role: String,
    merchant_id: Option<i64>,
}

impl ActorRow {
    fn into_actor(self) -> Result<Actor, sqlx::Error> {
        let role = self
            .role
            .parse::<Role>()
            .map_err(|e| sqlx::Error::Decode(e.into()))?;
        Ok(Actor {
            user_id: self.id,
            username: self.username,
            role,
            merchant_id: self.merchant_id,
        })
    }
}

/// Finds or creates the merchant of that name; merchants are created with their first user.
pub async fn ensure_merchant(pool: &PgPool, name: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO merchants (name) VALUES ($1)
         ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
         RETURNING id",
    )
    .bind(name)
    .fetch_one(pool)
    .await
}

/// Creates the user, or resets password, role and merchant if the username exists. A reset
/// signs the user out everywhere in the same transaction: its console sessions are deleted
/// and its admin API tokens revoked, since whoever had the old password may have opened them.
pub async fn upsert_user(
    pool: &PgPool,
    username: &str,
    password_hash: &str,
    role: Role,
    merchant_id: Option<i64>,
) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO admin_users (username, password_hash, role, merchant_id)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (username) DO UPDATE
            SET password_hash = EXCLUDED.password_hash, role = EXCLUDED.role,
                merchant_id = EXCLUDED.merchant_id, disabled_at = NULL
         RETURNING id",
    )
    .bind(username)
    .bind(password_hash)
    .bind(role.as_str())
    .bind(merchant_id)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM admin_sessions WHERE user_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE admin_api_tokens SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

pub async fn credentials(
    pool: &PgPool,
    username: &str,
) -> Result<Option<Credentials>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        actor: ActorRow,
        password_hash: String,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT id, username, role, merchant_id, password_hash
         FROM admin_users WHERE username = $1 AND disabled_at IS NULL",
    )
    .bind(username)
    .fetch_optional(pool)
    .await?;
    row.map(|row| {
        Ok(Credentials {
            actor: row.actor.into_actor()?,
            password_hash: row.password_hash,
        })
    })
    .transpose()
}

pub async fn user_by_name(pool: &PgPool, username: &str) -> Result<Option<Actor>, sqlx::Error> {
    Ok(credentials(pool, username).await?.map(|c| c.actor))
}

pub async fn create_session(
    pool: &PgPool,
    token_hash: &[u8],
    user_id: i64,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO admin_sessions (token_hash, user_id, expires_at) VALUES ($1, $2, $3)")
        .bind(token_hash)
        .bind(user_id)
        .bind(expires_at)
        .execute(pool)
        .await?;
    // Expired sessions are swept here, at the rare moment someone logs in, not per request.
    sqlx::query("DELETE FROM admin_sessions WHERE expires_at < now()")
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn delete_session(pool: &PgPool, token_hash: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM admin_sessions WHERE token_hash = $1")
        .bind(token_hash)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn actor_by_session(
    pool: &PgPool,
    token_hash: &[u8],
) -> Result<Option<Actor>, sqlx::Error> {
    let row: Option<ActorRow> = sqlx::query_as(
        "SELECT u.id, u.username, u.role, u.merchant_id
         FROM admin_sessions s JOIN admin_users u ON u.id = s.user_id
         WHERE s.token_hash = $1 AND s.expires_at > now() AND u.disabled_at IS NULL",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    row.map(ActorRow::into_actor).transpose()
}

pub async fn create_api_token(
    pool: &PgPool,
    user_id: i64,
    token_hash: &[u8],
    label: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO admin_api_tokens (user_id, token_hash, label) VALUES ($1, $2, $3)")
        .bind(user_id)
        .bind(token_hash)
        .bind(label)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn actor_by_api_token(
    pool: &PgPool,
    token_hash: &[u8],
) -> Result<Option<Actor>, sqlx::Error> {
    let row: Option<ActorRow> = sqlx::query_as(
        "UPDATE admin_api_tokens t SET last_used_at = now()
         FROM admin_users u
         WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.id = t.user_id AND u.disabled_at IS NULL
         RETURNING u.id, u.username, u.role, u.merchant_id",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    row.map(ActorRow::into_actor).transpose()
}
