//! The console's server functions: thin public endpoints under `/console/fn` that resolve
//! the caller from the session cookie once, then call the
//! [`ConsoleBackend`](crate::backend::ConsoleBackend) the server provided as context with
//! that actor. Authorisation happens behind that trait, per call.

use crate::error::ConsoleFnError;
use contract::{
    ActivityBaselines, BaselineRun, BaselineScope, DrawReport, HotKey, HotKeyPeriod, HotKeysView,
    Readiness, Revoked,
};
use contract::{
    ActivityDetail, ActivityInput, ActivityLedger, ActivitySummary, AuditPage, CurrentUser,
    DashboardFrame, DeadLetterPage, DeadLetterView, Item, OrderDetail, OrderPage,
    OutboxRetryReport, OutboxSummary, PrewarmReport, PublishedPage, ReconciliationRun,
    ReplayReport, RequeueReport, RunSummary, StartedRun, SwitchBoard,
};
use contract::{ChangeList, FlipOutcome, SwitchImpact, SwitchRevision};
use contract::{Rehearsal, StartedRehearsal};
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

#[cfg(feature = "ssr")]
mod session {
    use crate::backend::{ConsoleError, SharedBackend};
    use crate::error::ConsoleFnError;
    use contract::SESSION_COOKIE;
    use leptos::prelude::*;

    /// The backend and the admin user the request's session cookie belongs to, resolved once.
    pub async fn signed_in() -> Result<(SharedBackend, contract::Actor), ConsoleFnError> {
        let backend = backend()?;
        let actor = backend
            .authenticate(&token().await?)
            .await
            .map_err(refuse)?;
        Ok((backend, actor))
    }

    pub fn backend() -> Result<SharedBackend, ConsoleFnError> {
        use_context::<SharedBackend>()
            .ok_or_else(|| ConsoleFnError::new("INTERNAL", "console backend missing from context"))
    }

    /// The session token from the request's cookie header, if any.
    pub async fn token() -> Result<String, ConsoleFnError> {
        let headers: http::HeaderMap = leptos_axum::extract().await?;
        let cookies = headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok());
        Ok(contract::session_token(cookies)
            .unwrap_or_default()
            .to_owned())
    }

    /// Turns a refusal into the error the page shows, answered with the matching 4xx and
    /// the admin API's code (an expired session also goes to the login page).
    pub fn refuse(error: ConsoleError) -> ConsoleFnError {
        let status = match error {
            ConsoleError::Unauthenticated => {
                leptos_axum::redirect(&super::sign_in_path(&asked_from()));
                http::StatusCode::UNAUTHORIZED
            }
            ConsoleError::Forbidden => http::StatusCode::FORBIDDEN,
            ConsoleError::NotFound => http::StatusCode::NOT_FOUND,
            ConsoleError::Invalid { .. } => http::StatusCode::BAD_REQUEST,
            ConsoleError::Conflict { .. } => http::StatusCode::CONFLICT,
            ConsoleError::Unavailable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::RateLimited => http::StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::Internal => http::StatusCode::INTERNAL_SERVER_ERROR,
        };
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(status);
        }
        ConsoleFnError::new(error.code(), error.to_string())
    }

    /// The console page asked for, so the login page an expired session is sent to can come
    /// back to it: the page being rendered, or for a server function called from a page, that
    /// page (its `Referer`'s path and query); the start page when unknown.
    fn asked_from() -> String {
        use_context::<http::request::Parts>()
            .and_then(|parts| {
                if !parts.uri.path().starts_with("/console/fn/") {
                    return parts.uri.path_and_query().map(|path| path.to_string());
                }
                let referer = parts.headers.get(http::header::REFERER)?.to_str().ok()?;
                let after_scheme = referer.split_once("://")?.1;
                Some(after_scheme[after_scheme.find('/')?..].to_owned())
            })
            .unwrap_or_else(|| "/".to_owned())
    }

    pub fn set_cookie(value: String) -> Result<(), ConsoleFnError> {
        let response = expect_context::<leptos_axum::ResponseOptions>();
        let value = http::HeaderValue::from_str(&value)
            .map_err(|error| ConsoleFnError::new("INTERNAL", error.to_string()))?;
        response.append_header(http::header::SET_COOKIE, value);
        Ok(())
    }

    pub fn session_cookie(token: &str, max_age_s: i64, secure: bool) -> String {
        let secure = if secure { "; Secure" } else { "" };
        format!("{SESSION_COOKIE}={token}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{secure}")
    }
}

#[server(prefix = "/console/fn")]
pub async fn login(
    username: String,
    password: String,
    next: Option<String>,
) -> Result<(), ConsoleFnError> {
    let backend = session::backend()?;
    let request = leptos_axum::extract::<http::request::Parts>().await?;
    let new = backend
        .login(&username, &password, &request)
        .await
        .map_err(session::refuse)?;
    session::set_cookie(session::session_cookie(
        &new.token,
        new.max_age_s,
        backend.secure_cookies(),
    ))?;
    leptos_axum::redirect(return_to(next.as_deref()));
    Ok(())
}

/// The login page's address that comes back to `here` (a path with its query) once signed
/// in.
pub fn sign_in_path(here: &str) -> String {
    format!("/login?next={}", percent_encoded(here, b"/"))
}

/// `text` as one value of a query string.
pub fn query_value(text: &str) -> String {
    percent_encoded(text, b"")
}

/// `text` with every byte but the unreserved ones and `keep` percent-encoded.
fn percent_encoded(text: &str, keep: &[u8]) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ if keep.contains(&byte) => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Where a sign-in goes: the console page it was asked from, when `next` names one of this
/// site's own paths; the start page otherwise (never another site: `//host` and `/\host`
/// are refused).
pub fn return_to(next: Option<&str>) -> &str {
    next.filter(|path| {
        path.starts_with('/')
            && !path.starts_with("//")
            && !path.starts_with("/\\")
            && !path.starts_with("/login")
            && !path.chars().any(char::is_control)
    })
    .unwrap_or("/")
}

#[server(prefix = "/console/fn")]
pub async fn logout() -> Result<(), ConsoleFnError> {
    let backend = session::backend()?;
    let token = session::token().await?;
    backend.logout(&token).await.map_err(session::refuse)?;
    session::set_cookie(session::session_cookie("", 0, backend.secure_cookies()))?;
    leptos_axum::redirect("/login");
    Ok(())
}

#[server(prefix = "/console/fn")]
pub async fn whoami() -> Result<CurrentUser, ConsoleFnError> {
    let (_, actor) = session::signed_in().await?;
    Ok(CurrentUser::from(&actor))
}

#[server(prefix = "/console/fn")]
pub async fn list_items() -> Result<Vec<Item>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.list_items(&actor).await.map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_item(id: i64) -> Result<Item, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.get_item(&actor, id).await.map_err(session::refuse)
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
) -> Result<i64, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    // The admin API takes whole cents; an amount that is no price is the same bad input,
    // named by the form's label.
    let price_cents = contract::parse_cents(&price).map_err(|message| {
        session::refuse(crate::backend::ConsoleError::bad_request(format!(
            "Price (yuan): {message}"
        )))
    })?;
    let input = contract::ItemInput {
        name,
        description,
        price_cents,
        merchant_id,
    };
    let id = match id {
        Some(id) => backend.update_item(&actor, id, input).await.map(|()| id),
        None => backend.create_item(&actor, input).await,
    }
    .map_err(session::refuse)?;
    leptos_axum::redirect("/items");
    Ok(id)
}

#[server(prefix = "/console/fn")]
pub async fn list_activities() -> Result<Vec<ActivitySummary>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .list_activities(&actor)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_activity(id: i64) -> Result<ActivityDetail, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .get_activity(&actor, id)
        .await
        .map_err(session::refuse)
}

/// Creates (`id` absent) or updates an activity; called from the hydrated form.
#[server(prefix = "/console/fn", input = Json)]
pub async fn save_activity(id: Option<i64>, input: ActivityInput) -> Result<i64, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    match id {
        Some(id) => backend
            .update_activity(&actor, id, input)
            .await
            .map(|()| id),
        None => backend.create_activity(&actor, input).await,
    }
    .map_err(session::refuse)
}

/// Pre-warms an activity: its stock, buyer records and Bloom filter keys into Redis.
#[server(prefix = "/console/fn")]
pub async fn prewarm_activity(id: i64) -> Result<PrewarmReport, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.prewarm(&actor, id).await.map_err(session::refuse)
}

/// Publishes the activity's static sale page: a new version, served at once.
#[server(prefix = "/console/fn")]
pub async fn publish_sale_page(id: i64) -> Result<PublishedPage, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .publish_sale_page(&actor, id)
        .await
        .map_err(session::refuse)
}

/// A page of orders, newest first; absent filters mean "any".
#[server(prefix = "/console/fn")]
pub async fn list_orders(
    activity_id: Option<i64>,
    status: Option<String>,
    page: Option<i64>,
) -> Result<OrderPage, ConsoleFnError> {
    let query = contract::OrderQuery {
        activity_id,
        status,
        page,
    };
    let (backend, actor) = session::signed_in().await?;
    backend
        .list_orders(&actor, query)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_order(id: String) -> Result<OrderDetail, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .get_order(&actor, &id)
        .await
        .map_err(session::refuse)
}

/// The switch board: every switch and limit, etcd's state, and each live
/// instance's applied revision.
#[server(prefix = "/console/fn")]
pub async fn get_switch_board() -> Result<SwitchBoard, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.switch_board(&actor).await.map_err(session::refuse)
}

/// Flips a switch or sets a limit; the reason is required and audited. With a time
/// (`at` in RFC 3339, or `at_wall` read as UTC), a revert or a stage, or on a key that
/// needs four eyes, a change that waits.
#[server(prefix = "/console/fn")]
pub async fn flip_switch(
    path: String,
    value: String,
    reason: String,
    at: Option<String>,
    at_wall: Option<String>,
    revert_after_s: Option<String>,
    stage: Option<String>,
) -> Result<FlipOutcome, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    let form = contract::SwitchForm {
        path,
        value,
        reason,
        at,
        at_wall,
        revert_after_s,
        stage,
    };
    backend
        .flip_switch(&actor, form)
        .await
        .map_err(session::refuse)
}

/// The latest switch changes, newest first.
#[server(prefix = "/console/fn")]
pub async fn list_changes() -> Result<ChangeList, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.list_changes(&actor).await.map_err(session::refuse)
}

/// `approve`, `reject`, `cancel`, `promote` or `abort` a change; the reason is audited.
#[server(prefix = "/console/fn")]
pub async fn decide_change(
    id: i64,
    decision: String,
    reason: String,
) -> Result<(), ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .decide_change(&actor, id, &decision, &reason)
        .await
        .map_err(session::refuse)
}

/// The values a key held, newest first.
#[server(prefix = "/console/fn")]
pub async fn switch_history(path: String) -> Result<Vec<SwitchRevision>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .switch_history(&actor, &path)
        .await
        .map_err(session::refuse)
}

/// Sets the value a revision held again; the reason is audited.
#[server(prefix = "/console/fn")]
pub async fn rollback_switch(
    path: String,
    revision: i64,
    reason: String,
) -> Result<FlipOutcome, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .rollback_switch(&actor, &path, revision, &reason)
        .await
        .map_err(session::refuse)
}

/// What a flip would touch, for its confirmation.
#[server(prefix = "/console/fn")]
pub async fn preview_impact(path: String, value: String) -> Result<SwitchImpact, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .switch_impact(&actor, &path, &value)
        .await
        .map_err(session::refuse)
}

/// A page of the audit log, filtered on the server: `kind` (`switch`, `ops`) and
/// `containing` as the page's filter form sends them, blank meaning any.
#[server(prefix = "/console/fn")]
pub async fn audit_log(
    page: Option<i64>,
    kind: Option<String>,
    containing: Option<String>,
) -> Result<AuditPage, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    let filter = contract::AuditFilter::parse(kind.as_deref(), containing.as_deref())
        .map_err(|message| session::refuse(crate::backend::ConsoleError::bad_request(message)))?;
    backend
        .audit_log(&actor, page.unwrap_or(1), &filter)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn list_dead_letters(page: Option<i64>) -> Result<DeadLetterPage, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .dead_letters(&actor, page.unwrap_or(1))
        .await
        .map_err(session::refuse)
}

/// Sends one dead letter back to its queue; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_dead_letter(
    id: i64,
    reason: String,
) -> Result<DeadLetterView, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .requeue_dead_letter(&actor, id, &reason)
        .await
        .map_err(session::refuse)
}

/// Sends every waiting dead letter back; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_all_dead_letters(reason: String) -> Result<RequeueReport, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .requeue_all_dead_letters(&actor, &reason)
        .await
        .map_err(session::refuse)
}

/// The live dashboard's most recent frames, drawn before the stream takes over.
#[server(prefix = "/console/fn")]
pub async fn dashboard_frames() -> Result<Vec<DashboardFrame>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .dashboard_frames(&actor)
        .await
        .map_err(session::refuse)
}

/// The outbox: pending, failed and recorded rows, and the failed ones in detail.
#[server(prefix = "/console/fn")]
pub async fn get_outbox_summary() -> Result<OutboxSummary, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .outbox_summary(&actor)
        .await
        .map_err(session::refuse)
}

/// Hands failed outbox rows back to the relay: the row `id`, or every failed row without
/// one; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn retry_outbox(
    id: Option<i64>,
    reason: String,
) -> Result<OutboxRetryReport, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .retry_outbox(&actor, id, &reason)
        .await
        .map_err(session::refuse)
}

/// Replays the pre-orders recorded while the async switch was on `record`; audited.
#[server(prefix = "/console/fn")]
pub async fn replay_recorded_orders(reason: String) -> Result<ReplayReport, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .replay_recorded(&actor, &reason)
        .await
        .map_err(session::refuse)
}

/// The live stock ledger of an activity's items.
#[server(prefix = "/console/fn")]
pub async fn get_activity_ledger(activity_id: i64) -> Result<ActivityLedger, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .activity_ledger(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

/// Reconciliation runs, newest first; an absent activity means every activity's.
#[server(prefix = "/console/fn")]
pub async fn list_reconciliations(
    activity_id: Option<i64>,
) -> Result<Vec<RunSummary>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .reconciliations(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_reconciliation(id: i64) -> Result<ReconciliationRun, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .reconciliation(&actor, id)
        .await
        .map_err(session::refuse)
}

/// Starts a reconciliation run from a console form, then opens the run's page. `repair`
/// is a checkbox (absent when unticked); a repair needs a reason, which is audited.
#[server(prefix = "/console/fn")]
pub async fn start_reconciliation(
    activity_id: i64,
    repair: Option<bool>,
    reason: Option<String>,
) -> Result<StartedRun, ConsoleFnError> {
    // An empty textarea is no reason at all: the server then says a repair needs one.
    let reason = reason
        .map(|reason| reason.trim().to_owned())
        .filter(|reason| !reason.is_empty());
    let request = contract::StartReconciliation {
        activity_id,
        repair: repair.unwrap_or(false),
        reason,
    };
    let (backend, actor) = session::signed_in().await?;
    let started = backend
        .start_reconciliation(&actor, request)
        .await
        .map_err(session::refuse)?;
    leptos_axum::redirect(&format!("/reconciliations/{}", started.id));
    Ok(started)
}

/// The hot keys in force on the answering instance and the cluster-wide top per kind.
#[server(prefix = "/console/fn")]
pub async fn get_hotkeys() -> Result<HotKeysView, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.hotkeys(&actor).await.map_err(session::refuse)
}

/// The stored periods of hot keys over the last `hours` (default 6).
#[server(prefix = "/console/fn")]
pub async fn hotkey_history(hours: Option<u32>) -> Result<Vec<HotKeyPeriod>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .hotkey_history(&actor, hours.unwrap_or(6))
        .await
        .map_err(session::refuse)
}

/// Puts a key in force by hand for `hold_s` seconds; the reason is required and audited.
/// The form's fields arrive as text and are read on the server once the caller may add.
#[server(prefix = "/console/fn")]
pub async fn add_hot_key(
    kind: String,
    key: String,
    action: String,
    limit_per_s: Option<String>,
    hold_s: String,
    reason: String,
) -> Result<HotKey, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    let form = contract::HotKeyForm {
        kind,
        key,
        action,
        limit_per_s,
        hold_s,
        reason,
    };
    backend
        .add_hotkey(&actor, form)
        .await
        .map_err(session::refuse)
}

/// Takes a key out of force; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn remove_hot_key(
    kind: String,
    key: String,
    reason: String,
) -> Result<(), ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .remove_hotkey(&actor, &kind, &key, &reason)
        .await
        .map_err(session::refuse)
}

/// The readiness check of an activity, run when asked: every check's verdict and the
/// overall go/no-go.
#[server(prefix = "/console/fn")]
pub async fn get_readiness(activity_id: i64) -> Result<Readiness, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .readiness(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

/// A lottery activity's draw: per item, registrants, codes by outcome, the waitlist's reach;
/// the commitment and, once drawn, the seed.
#[server(prefix = "/console/fn")]
pub async fn get_draw(activity_id: i64) -> Result<DrawReport, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .draw(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

/// Ends a buyer's part in a lottery (ops, admin), audited with the reason.
#[server(prefix = "/console/fn")]
pub async fn revoke_registration(
    activity_id: i64,
    user_id: i64,
    reason: String,
) -> Result<Revoked, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .revoke_registration(&actor, activity_id, user_id, &reason)
        .await
        .map_err(session::refuse)
}

/// Rehearsals, newest first; an absent activity means every activity's.
#[server(prefix = "/console/fn")]
pub async fn list_rehearsals(activity_id: Option<i64>) -> Result<Vec<Rehearsal>, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .rehearsals(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

/// The recorded runs of an activity, newest first.
#[server(prefix = "/console/fn")]
pub async fn list_baselines(activity_id: i64) -> Result<ActivityBaselines, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .baselines(&actor, activity_id)
        .await
        .map_err(session::refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_rehearsal(id: i64) -> Result<Rehearsal, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend.rehearsal(&actor, id).await.map_err(session::refuse)
}

/// Starts a rehearsal from the console's form, then opens its page. The numbers arrive
/// as the form's text; one that is not a number is refused like one out of range.
#[server(prefix = "/console/fn")]
pub async fn begin_rehearsal(
    activity_id: i64,
    buyers: String,
    rate_per_s: String,
    reason: String,
) -> Result<StartedRehearsal, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    let request = contract::StartRehearsal {
        buyers: buyers.trim().parse().unwrap_or(0),
        rate_per_s: rate_per_s.trim().parse().unwrap_or(0),
        reason,
    };
    let started = backend
        .start_rehearsal(&actor, activity_id, request)
        .await
        .map_err(session::refuse)?;
    leptos_axum::redirect(&format!("/rehearsals/{}", started.id));
    Ok(started)
}

/// Makes a run the baseline of its activity or (`scope` `kind`, the second button's) of
/// its activity's kind; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn mark_baseline(
    run_id: i64,
    reason: String,
    scope: BaselineScope,
) -> Result<BaselineRun, ConsoleFnError> {
    let (backend, actor) = session::signed_in().await?;
    backend
        .mark_baseline(&actor, run_id, scope, &reason)
        .await
        .map_err(session::refuse)
}

#[cfg(test)]
mod tests {
    use super::return_to;

    #[test]
    fn a_sign_in_returns_only_to_a_page_of_this_site() {
        assert_eq!(return_to(Some("/orders?page=2")), "/orders?page=2");
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "/login",
        ] {
            assert_eq!(return_to(Some(elsewhere)), "/", "{elsewhere}");
        }
        assert_eq!(return_to(None), "/");
    }

    #[test]
    fn the_page_to_return_to_is_one_query_value() {
        assert_eq!(
            super::sign_in_path("/orders?activity_id=7&page=2"),
            "/login?next=/orders%3Factivity_id%3D7%26page%3D2"
        );
    }
}
