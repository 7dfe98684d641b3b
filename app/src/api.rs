//! The console's server functions: thin public endpoints under `/console/fn` that read
//! the session cookie and call the [`ConsoleBackend`](crate::backend::ConsoleBackend)
//! the server provided as context. Authorisation happens behind that trait, per call.

use contract::{
    ActivityDetail, ActivityInput, ActivitySummary, AuditPage, CurrentUser, DeadLetterPage,
    DeadLetterView, Item, OrderDetail, OrderPage, OutboxSummary, PrewarmReport, ReplayReport,
    RequeueReport, SwitchBoard, SwitchChange,
};
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

#[cfg(feature = "ssr")]
mod session {
    use crate::backend::{ConsoleError, SharedBackend, SESSION_COOKIE};
    use leptos::prelude::*;

    pub fn backend() -> Result<SharedBackend, ServerFnError> {
        use_context::<SharedBackend>()
            .ok_or_else(|| ServerFnError::new("console backend missing from context"))
    }

    /// The session token from the request's cookie header, if any.
    pub async fn token() -> Result<String, ServerFnError> {
        let headers: http::HeaderMap = leptos_axum::extract().await?;
        Ok(crate::backend::session_token(&headers)
            .unwrap_or_default()
            .to_owned())
    }

    /// Turns a refusal into the error the page shows, answered with the matching 4xx (an
    /// expired session also goes to the login page).
    pub fn refuse(error: ConsoleError) -> ServerFnError {
        let status = match error {
            ConsoleError::Unauthenticated => {
                leptos_axum::redirect("/login");
                http::StatusCode::UNAUTHORIZED
            }
            ConsoleError::Forbidden => http::StatusCode::FORBIDDEN,
            ConsoleError::NotFound => http::StatusCode::NOT_FOUND,
            ConsoleError::Invalid(_) => http::StatusCode::BAD_REQUEST,
            ConsoleError::Conflict(_) => http::StatusCode::CONFLICT,
            ConsoleError::Unavailable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::RateLimited => http::StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::Internal => http::StatusCode::INTERNAL_SERVER_ERROR,
        };
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(status);
        }
        ServerFnError::new(error)
    }

    pub fn set_cookie(value: String) -> Result<(), ServerFnError> {
        let response = expect_context::<leptos_axum::ResponseOptions>();
        let value = http::HeaderValue::from_str(&value).map_err(ServerFnError::new)?;
        response.append_header(http::header::SET_COOKIE, value);
        Ok(())
    }

    pub fn session_cookie(token: &str, max_age_s: i64, secure: bool) -> String {
        let secure = if secure { "; Secure" } else { "" };
        format!("{SESSION_COOKIE}={token}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{secure}")
    }
}

#[server(prefix = "/console/fn")]
pub async fn login(username: String, password: String) -> Result<(), ServerFnError> {
    use axum::extract::ConnectInfo;
    let backend = session::backend()?;
    let client = leptos_axum::extract::<ConnectInfo<std::net::SocketAddr>>()
        .await
        .ok()
        .map(|ConnectInfo(addr)| addr.ip());
    let new = backend
        .login(&username, &password, client)
        .await
        .map_err(session::refuse)?;
    session::set_cookie(session::session_cookie(
        &new.token,
        new.max_age_s,
        backend.secure_cookies(),
    ))?;
    leptos_axum::redirect("/");
    Ok(())
}

#[server(prefix = "/console/fn")]
pub async fn logout() -> Result<(), ServerFnError> {
    let backend = session::backend()?;
    let token = session::token().await?;
    backend.logout(&token).await.map_err(session::refuse)?;
    session::set_cookie(session::session_cookie("", 0, backend.secure_cookies()))?;
    leptos_axum::redirect("/login");
    Ok(())
}

#[server(prefix = "/console/fn")]
pub async fn whoami() -> Result<CurrentUser, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .current_user(&token)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn list_items() -> Result<Vec<Item>, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .list_items(&token)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_item(id: i64) -> Result<Item, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .get_item(&token, id)
        .await
        .map_err(session::refuse)
}

/// Creates (`id` absent) or updates an item from the console form, where the price is
/// typed as a decimal amount.
#[server(prefix = "/console/fn")]
pub async fn save_item(
    id: Option<i64>,
    name: String,
    description: String,
    price: String,
    merchant_id: Option<i64>,
) -> Result<i64, ServerFnError> {
    let price_cents = contract::parse_cents(&price).map_err(ServerFnError::new)?;
    let input = contract::ItemInput {
        name,
        description,
        price_cents,
        merchant_id,
    };
    let token = session::token().await?;
    let backend = session::backend()?;
    let id = match id {
        Some(id) => backend.update_item(&token, id, input).await.map(|()| id),
        None => backend.create_item(&token, input).await,
    }
    .map_err(session::refuse)?;
    leptos_axum::redirect("/items");
    Ok(id)
}

#[server(prefix = "/console/fn")]
pub async fn list_activities() -> Result<Vec<ActivitySummary>, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .list_activities(&token)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_activity(id: i64) -> Result<ActivityDetail, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .get_activity(&token, id)
        .await
        .map_err(session::refuse)
}

/// Creates (`id` absent) or updates an activity; called from the hydrated form.
#[server(prefix = "/console/fn", input = Json)]
pub async fn save_activity(id: Option<i64>, input: ActivityInput) -> Result<i64, ServerFnError> {
    let token = session::token().await?;
    let backend = session::backend()?;
    match id {
        Some(id) => backend
            .update_activity(&token, id, input)
            .await
            .map(|()| id),
        None => backend.create_activity(&token, input).await,
    }
    .map_err(session::refuse)
}

/// Pre-warms an activity: its stock, buyer records and Bloom filter keys into Redis.
#[server(prefix = "/console/fn")]
pub async fn prewarm_activity(id: i64) -> Result<PrewarmReport, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .prewarm(&token, id)
        .await
        .map_err(session::refuse)
}

/// A page of orders, newest first; absent filters mean "any".
#[server(prefix = "/console/fn")]
pub async fn list_orders(
    activity_id: Option<i64>,
    status: Option<String>,
    page: Option<i64>,
) -> Result<OrderPage, ServerFnError> {
    let query = contract::OrderQuery {
        activity_id,
        status,
        page,
    };
    let token = session::token().await?;
    session::backend()?
        .list_orders(&token, query)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_order(id: String) -> Result<OrderDetail, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .get_order(&token, &id)
        .await
        .map_err(session::refuse)
}

/// The switch board: every switch and limit, etcd's state, and each live
/// instance's applied revision.
#[server(prefix = "/console/fn")]
pub async fn get_switch_board() -> Result<SwitchBoard, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .switch_board(&token)
        .await
        .map_err(session::refuse)
}

/// Flips a switch or sets a limit; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn flip_switch(
    path: String,
    value: String,
    reason: String,
) -> Result<SwitchChange, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .flip_switch(&token, &path, &value, &reason)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn audit_log(page: Option<i64>) -> Result<AuditPage, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .audit_log(&token, page.unwrap_or(1))
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn list_dead_letters(page: Option<i64>) -> Result<DeadLetterPage, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .dead_letters(&token, page.unwrap_or(1))
        .await
        .map_err(session::refuse)
}

/// Sends one dead letter back to its queue; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_dead_letter(id: i64, reason: String) -> Result<DeadLetterView, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .requeue_dead_letter(&token, id, &reason)
        .await
        .map_err(session::refuse)
}

/// Sends every waiting dead letter back; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_all_dead_letters(reason: String) -> Result<RequeueReport, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .requeue_all_dead_letters(&token, &reason)
        .await
        .map_err(session::refuse)
}

/// The outbox: pending, failed and recorded rows, and the failed ones in detail.
#[server(prefix = "/console/fn")]
pub async fn get_outbox_summary() -> Result<OutboxSummary, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .outbox_summary(&token)
        .await
        .map_err(session::refuse)
}

/// Replays the pre-orders recorded while the async switch was on `record`; audited.
#[server(prefix = "/console/fn")]
pub async fn replay_recorded_orders(reason: String) -> Result<ReplayReport, ServerFnError> {
    let token = session::token().await?;
    session::backend()?
        .replay_recorded(&token, &reason)
        .await
        .map_err(session::refuse)
}
