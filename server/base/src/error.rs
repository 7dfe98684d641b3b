//! The one error type of the HTTP API. Every error body is `{"code", "message"}`;
//! client errors say what was wrong, server errors log their cause chain (rate-limited)
//! and tell the client little.

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use contract::ConsoleError;
use serde::Serialize;

use crate::quiet_log::quiet;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("the request body is larger than this endpoint accepts")]
    PayloadTooLarge,
    #[error("authentication required")]
    Unauthenticated,
    #[error("the payment signature does not match the body")]
    BadSignature,
    #[error("your role may not do this")]
    Forbidden,
    /// Allowed to the role, refused by the rules of the thing it asks or to this user (403)
    /// with a code of its own, e.g. `SELF_APPROVAL`, `REGISTRATION_CLOSED`.
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    /// A state-changing request a browser authenticated by itself, from another origin.
    #[error("the request did not come from the console's own origin")]
    CrossSite,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("this path does not take that method")]
    MethodNotAllowed,
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Bad input with a code of its own (400), e.g. `INVALID_SWITCH_VALUE`.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("too many attempts")]
    RateLimited { retry_after_s: u64 },
    /// This instance holds as much of something as it may (503 `OVERLOADED`); another
    /// instance, or a later try, may take it.
    #[error("{0}")]
    Overloaded(&'static str),
    #[error("a dependency is unavailable")]
    Unavailable(#[source] anyhow::Error),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    /// What went wrong, for programs: e.g. `BAD_REQUEST`, `SOLD_OUT`.
    pub code: &'a str,
    /// What went wrong, for people.
    pub message: String,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthenticated | ApiError::BadSignature => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden | ApiError::CrossSite | ApiError::Refused { .. } => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Overloaded(_) | ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BAD_REQUEST",
            ApiError::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ApiError::Unauthenticated => "UNAUTHENTICATED",
            ApiError::BadSignature => "BAD_SIGNATURE",
            ApiError::Forbidden => "FORBIDDEN",
            ApiError::CrossSite => "CROSS_SITE_REQUEST",
            ApiError::NotFound(_) => "NOT_FOUND",
            ApiError::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ApiError::Conflict { code, .. } | ApiError::Refused { code, .. } => code,
            ApiError::Invalid { code, .. } => code,
            ApiError::RateLimited { .. } => "RATE_LIMITED",
            ApiError::Overloaded(_) => "OVERLOADED",
            ApiError::Unavailable(_) => "UNAVAILABLE",
            ApiError::Internal(_) => "INTERNAL",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Rate-limited: an outage fails every request the same way.
        match &self {
            ApiError::Internal(cause) => {
                quiet!(
                    error,
                    "http.internal",
                    error = format!("{cause:#}"),
                    "request failed"
                );
            }
            ApiError::Unavailable(cause) => {
                quiet!(
                    warn,
                    "http.unavailable",
                    error = format!("{cause:#}"),
                    "a dependency is unavailable"
                );
            }
            _ => {}
        }
        let body = ErrorBody {
            code: self.code(),
            message: self.to_string(),
        };
        let mut response = (self.status(), Json(body)).into_response();
        if let ApiError::RateLimited { retry_after_s } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        response
    }
}

/// PostgreSQL out of reach (down, restarting, the pool exhausted) is a 503 the client may
/// retry; anything else the database says is a bug of ours.
impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        database_error(crate::db::is_outage(&error), error.into())
    }
}

/// The same, for an error several requests share (one read answering them all).
impl From<std::sync::Arc<sqlx::Error>> for ApiError {
    fn from(error: std::sync::Arc<sqlx::Error>) -> Self {
        database_error(crate::db::is_outage(&error), error.into())
    }
}

fn database_error(out_of_reach: bool, error: anyhow::Error) -> ApiError {
    if out_of_reach {
        ApiError::Unavailable(error)
    } else {
        ApiError::Internal(error)
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(error: redis::RedisError) -> Self {
        ApiError::Unavailable(error.into())
    }
}

/// Body extraction failures (malformed JSON, wrong types, too large) answer 400 with a code,
/// never axum's plain-text rejection.
impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::PayloadTooLarge;
        }
        ApiError::BadRequest(rejection.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A console server function refuses as the admin API would, with the same code.
impl From<ApiError> for ConsoleError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::BadRequest(_)
            | ApiError::Invalid { .. }
            | ApiError::PayloadTooLarge
            | ApiError::BadSignature => ConsoleError::Invalid {
                code: error.code(),
                message: error.to_string(),
            },
            // The console shows a refusal's message and code; the role itself may do this.
            ApiError::Conflict { code, message } | ApiError::Refused { code, message } => {
                ConsoleError::Conflict { code, message }
            }
            ApiError::Unauthenticated => ConsoleError::Unauthenticated,
            ApiError::Forbidden | ApiError::CrossSite => ConsoleError::Forbidden,
            ApiError::NotFound(_) | ApiError::MethodNotAllowed => ConsoleError::NotFound,
            ApiError::RateLimited { .. } => ConsoleError::RateLimited,
            ApiError::Overloaded(message) => ConsoleError::Unavailable(message.to_owned()),
            ApiError::Unavailable(cause) => {
                quiet!(
                    warn,
                    "console.unavailable",
                    error = format!("{cause:#}"),
                    "console call found a store away"
                );
                // The outermost context names the store ("etcd", "RabbitMQ did not take ...").
                ConsoleError::Unavailable(cause.to_string())
            }
            ApiError::Internal(cause) => {
                quiet!(
                    error,
                    "console.internal",
                    error = format!("{cause:#}"),
                    "console call failed"
                );
                ConsoleError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_out_of_reach_is_a_503_and_its_errors_a_500() {
        let status = |error: sqlx::Error| ApiError::from(error).into_response().status();
        assert_eq!(
            status(sqlx::Error::PoolTimedOut),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(sqlx::Error::PoolClosed),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(sqlx::Error::Io(
                std::io::ErrorKind::ConnectionRefused.into()
            )),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(sqlx::Error::RowNotFound),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
