//! Turning credentials into an [`Actor`]: console login (rate-limited), session lookup,
//! API-token lookup, and the credentials of an admin request (the extractor every admin
//! route uses is in `state`, which holds the [`Authenticator`]).

use axum::http::HeaderMap;
use chrono::Utc;
use contract::Actor;
use sqlx::PgPool;
use std::net::IpAddr;

use crate::identity::users;
use crate::identity::{password, rules, secret_token};
use base::{error::ApiError, metrics::Metrics, redis::RedisStore};

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("wrong username or password")]
    BadCredentials,
    #[error("too many login attempts")]
    RateLimited { retry_after_s: u32 },
    #[error(transparent)]
    TooLong(#[from] rules::TooLong),
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// The console's login refuses with the codes the other refusals use; a failure behind it
/// is logged and answered as the admin API's internal error.
impl From<LoginError> for contract::ConsoleError {
    fn from(error: LoginError) -> Self {
        match error {
            LoginError::BadCredentials => Self::bad_request("wrong username or password"),
            LoginError::RateLimited { .. } => Self::RateLimited,
            LoginError::TooLong(too_long) => Self::Invalid {
                code: too_long.code(),
                message: too_long.to_string(),
            },
            LoginError::Failed(cause) => ApiError::Internal(cause).into(),
        }
    }
}

/// A console session just opened: the cookie value and its lifetime.
pub struct Session {
    pub token: String,
    pub max_age_s: i64,
}

#[derive(Clone)]
pub struct Authenticator {
    db: PgPool,
    redis: RedisStore,
    metrics: Metrics,
    session_ttl_s: i64,
    attempts_per_window: u32,
    attempts_per_address: u32,
    window_s: u32,
}

impl Authenticator {
    pub fn new(
        db: PgPool,
        redis: RedisStore,
        metrics: Metrics,
        settings: &base::config::Settings,
    ) -> Self {
        Self {
            db,
            redis,
            metrics,
            session_ttl_s: settings.session_ttl_s,
            attempts_per_window: settings.login_attempts_per_window,
            attempts_per_address: settings.login_attempts_per_address,
            window_s: settings.login_window_s,
        }
    }

    /// Checks a password and opens a session. A username or password past its cap is refused
    /// before anything is looked up or counted. Every attempt counts against the client
    /// address and against the (username, address) pair, in that order, and a full window
    /// stops there: so guessing one account's password from one place is slow, spraying
    /// many accounts from one place is too, and no stranger can spend the real user's
    /// attempts from elsewhere. Each attempt creates at most these two keys, of bounded size.
    pub async fn login(
        &self,
        username: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<Session, LoginError> {
        if let Err(too_long) = rules::check_login_input(username, password) {
            self.metrics
                .admin_logins
                .with_label_values(&["rejected"])
                .inc();
            return Err(too_long.into());
        }
        let [address, pair] = rules::attempt_subjects(username, client);
        let pair_key = self.redis.login_attempts_key(&pair);
        for (key, limit) in [
            (
                self.redis.login_attempts_key(&address),
                self.attempts_per_address,
            ),
            (pair_key.clone(), self.attempts_per_window),
        ] {
            let hits = self
                .redis
                .hit_fixed_window(&key, self.window_s)
                .await
                .map_err(anyhow::Error::from)?;
            if hits > u64::from(limit) {
                self.metrics
                    .admin_logins
                    .with_label_values(&["rate_limited"])
                    .inc();
                return Err(LoginError::RateLimited {
                    retry_after_s: self.window_s,
                });
            }
        }
        let credentials = users::credentials(&self.db, username)
            .await
            .map_err(anyhow::Error::from)?;
        let (actor, phc) = match credentials {
            Some(c) => (Some(c.actor), c.password_hash),
            None => (None, password::decoy_hash().await?),
        };
        let matches = password::verify(password.to_owned(), phc).await?;
        let Some(actor) = actor.filter(|_| matches) else {
            self.metrics
                .admin_logins
                .with_label_values(&["rejected"])
                .inc();
            return Err(LoginError::BadCredentials);
        };
        let token = secret_token::generate();
        let expires_at = Utc::now() + chrono::Duration::seconds(self.session_ttl_s);
        users::create_session(
            &self.db,
            &secret_token::digest(&token),
            actor.user_id,
            expires_at,
        )
        .await
        .map_err(anyhow::Error::from)?;
        self.redis
            .delete(&pair_key)
            .await
            .map_err(anyhow::Error::from)?;
        self.metrics
            .admin_logins
            .with_label_values(&["accepted"])
            .inc();
        tracing::info!(username = %actor.username, role = %actor.role, "console login");
        Ok(Session {
            token,
            max_age_s: self.session_ttl_s,
        })
    }

    pub async fn logout(&self, session: &str) -> Result<(), sqlx::Error> {
        users::delete_session(&self.db, &secret_token::digest(session)).await
    }

    pub async fn by_session(&self, session: &str) -> Result<Option<Actor>, sqlx::Error> {
        if session.is_empty() {
            return Ok(None);
        }
        users::actor_by_session(&self.db, &secret_token::digest(session)).await
    }

    pub async fn by_api_token(&self, token: &str) -> Result<Option<Actor>, sqlx::Error> {
        users::actor_by_api_token(&self.db, &secret_token::digest(token)).await
    }

    /// The actor of an admin request: from `Authorization: Bearer <API token>`, else from
    /// the console's session cookie. Neither → 401.
    pub async fn actor(&self, headers: &HeaderMap) -> Result<Actor, ApiError> {
        if let Some(authorization) = headers.get(axum::http::header::AUTHORIZATION) {
            let token = authorization
                .to_str()
                .ok()
                .and_then(|value| value.strip_prefix("Bearer "))
                .ok_or(ApiError::Unauthenticated)?;
            return self
                .by_api_token(token.trim())
                .await?
                .ok_or(ApiError::Unauthenticated);
        }
        let session = session_token(headers).ok_or(ApiError::Unauthenticated)?;
        self.by_session(session)
            .await?
            .ok_or(ApiError::Unauthenticated)
    }
}

/// The console session token carried by a request's `Cookie` headers, if any.
pub fn session_token(headers: &HeaderMap) -> Option<&str> {
    contract::session_token(
        headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok()),
    )
}
