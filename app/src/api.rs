//! The console's server functions: public endpoints under `/console/fn`, each the console's
//! side of an admin API route. On the server (`ssr`) one takes the [`AppState`](ops::state::
//! AppState) the console's mounting provides as context, resolves the caller from the
//! session cookie once, and calls the same use case as the admin route with that actor,
//! asking the permission table where the route does: server functions are public endpoints.
//! In the browser (`hydrate`) each is only a call to that endpoint, so the bundle never links
//! a store.

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
use {
    base::error::ApiError,
    contract::{ChangeDecision, ConsoleError, Permission, Source},
    ops::{
        changes::{history, impact, service as changes, stage},
        control::board::{self, Board, Flip},
        hotkeys::service as hotkeys,
        reconcile::service as reconcile,
        rehearsal::service as rehearsal,
    },
    sale::{
        catalog::service as catalog,
        identity::authorize,
        lottery::ops as lottery,
        orders::{admin as order_admin, dead_letters, outbox_retry, recordings, relay},
    },
    session::refuse,
};

#[cfg(feature = "ssr")]
mod session {
    use crate::error::ConsoleFnError;
    use base::error::ApiError;
    use contract::{ConsoleError, SESSION_COOKIE};
    use leptos::prelude::*;
    use ops::state::AppState;

    /// The state and the admin user the request's session cookie belongs to, resolved once.
    pub async fn signed_in() -> Result<(AppState, contract::Actor), ConsoleFnError> {
        let state = state()?;
        let actor = state
            .auth
            .by_session(&token().await?)
            .await
            .map_err(|error| refuse(ApiError::from(error)))?
            .ok_or_else(|| refuse(ConsoleError::Unauthenticated))?;
        Ok((state, actor))
    }

    /// The server's state, which the console's mounting provides to every page and call.
    pub fn state() -> Result<AppState, ConsoleFnError> {
        use_context::<AppState>()
            .ok_or_else(|| ConsoleFnError::new("INTERNAL", "server state missing from context"))
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

    /// Turns a refusal (the admin API's error, or the console's own) into the error the page
    /// shows, answered with the matching 4xx and the admin API's code (an expired session
    /// also goes to the login page).
    pub fn refuse(error: impl Into<ConsoleError>) -> ConsoleFnError {
        let error = error.into();
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
    let state = session::state()?;
    let request = leptos_axum::extract::<http::request::Parts>().await?;
    // Rate-limited per username and client address, the address resolved from the peer
    // and, behind trusted proxies, its forwarding headers.
    let client = base::client_address::resolve(&state.settings.trusted_proxies, &request);
    let new = state
        .auth
        .login(&username, &password, Some(client))
        .await
        .map_err(refuse)?;
    session::set_cookie(session::session_cookie(
        &new.token,
        new.max_age_s,
        state.settings.secure_cookies,
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
    let state = session::state()?;
    let token = session::token().await?;
    state
        .auth
        .logout(&token)
        .await
        .map_err(|error| refuse(ApiError::from(error)))?;
    session::set_cookie(session::session_cookie(
        "",
        0,
        state.settings.secure_cookies,
    ))?;
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
    let (state, actor) = session::signed_in().await?;
    catalog::list_items(&state, &actor).await.map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_item(id: i64) -> Result<Item, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    catalog::get_item(&state, &actor, id).await.map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    // The admin API takes whole cents; an amount that is no price is the same bad input,
    // named by the form's label.
    let price_cents = contract::parse_cents(&price).map_err(|message| {
        refuse(ConsoleError::bad_request(format!(
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
        Some(id) => catalog::update_item(&state, &actor, id, input)
            .await
            .map(|()| id),
        None => catalog::create_item(&state, &actor, input).await,
    }
    .map_err(refuse)?;
    leptos_axum::redirect("/items");
    Ok(id)
}

#[server(prefix = "/console/fn")]
pub async fn list_activities() -> Result<Vec<ActivitySummary>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    catalog::list_activities(&state, &actor)
        .await
        .map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_activity(id: i64) -> Result<ActivityDetail, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    catalog::get_activity(&state, &actor, id)
        .await
        .map_err(refuse)
}

/// Creates (`id` absent) or updates an activity; called from the hydrated form.
#[server(prefix = "/console/fn", input = Json)]
pub async fn save_activity(id: Option<i64>, input: ActivityInput) -> Result<i64, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    match id {
        Some(id) => catalog::update_activity(&state, &actor, id, input)
            .await
            .map(|()| id),
        None => catalog::create_activity(&state, &actor, input).await,
    }
    .map_err(refuse)
}

/// Pre-warms an activity: its stock, buyer records and Bloom filter keys into Redis.
#[server(prefix = "/console/fn")]
pub async fn prewarm_activity(id: i64) -> Result<PrewarmReport, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    ops::prewarm::prewarm(&state, &actor, Source::Console, id)
        .await
        .map_err(refuse)
}

/// Publishes the activity's static sale page: a new version, served at once.
#[server(prefix = "/console/fn")]
pub async fn publish_sale_page(id: i64) -> Result<PublishedPage, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    sale::sale_page::publish(&state, &actor, id)
        .await
        .map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    order_admin::list(&state, &actor, &query)
        .await
        .map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_order(id: String) -> Result<OrderDetail, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    order_admin::get(&state, &actor, &id).await.map_err(refuse)
}

/// The switch board: every switch and limit, etcd's state, and each live
/// instance's applied revision.
#[server(prefix = "/console/fn")]
pub async fn get_switch_board() -> Result<SwitchBoard, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    authorize(&actor, Permission::ReadSwitches).map_err(refuse)?;
    Board::of(&state).read().await.map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    // A role that may not flip learns nothing about its input.
    authorize(&actor, Permission::FlipSwitch).map_err(refuse)?;
    let form = contract::SwitchForm {
        path,
        value,
        reason,
        at,
        at_wall,
        revert_after_s,
        stage,
    };
    let timing = form
        .timing()
        .map_err(|(code, message)| refuse(ConsoleError::Invalid { code, message }))?;
    let submission = changes::Submission {
        flip: Flip {
            actor: &actor,
            source: Source::Console,
            path: &form.path,
            value: &form.value,
            reason: &form.reason,
            // The switch board polls the instances' applied revisions itself.
            wait: None,
        },
        at: timing.at,
        revert_after_s: timing.revert_after_s,
        emergency: false,
        stage: timing.stage,
        now: state.changes.now(),
    };
    changes::submit(&Board::of(&state), submission)
        .await
        .map(FlipOutcome::from)
        .map_err(refuse)
}

/// The latest switch changes, newest first.
#[server(prefix = "/console/fn")]
pub async fn list_changes() -> Result<ChangeList, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let changes = changes::list(&Board::of(&state), &actor, None)
        .await
        .map_err(refuse)?;
    Ok(ChangeList { changes })
}

/// `approve`, `reject`, `cancel`, `promote` or `abort` a change; the reason is audited.
#[server(prefix = "/console/fn")]
pub async fn decide_change(
    id: i64,
    decision: String,
    reason: String,
) -> Result<(), ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    authorize(&actor, Permission::FlipSwitch).map_err(refuse)?;
    let decision = ChangeDecision::parse(&decision).ok_or_else(|| {
        refuse(ConsoleError::Invalid {
            code: "INVALID_DECISION",
            message: format!("no decision `{decision}`"),
        })
    })?;
    let board = Board::of(&state);
    let source = Source::Console;
    let now = state.changes.now();
    match decision {
        ChangeDecision::Approve => changes::approve(&board, &actor, source, id, &reason, now)
            .await
            .map(drop),
        ChangeDecision::Reject => {
            let decided = changes::Decision::Reject;
            changes::decide(&board, &actor, source, id, decided, &reason).await
        }
        ChangeDecision::Cancel => {
            let decided = changes::Decision::Cancel;
            changes::decide(&board, &actor, source, id, decided, &reason).await
        }
        ChangeDecision::Promote => stage::promote(&board, &actor, source, id, &reason, now)
            .await
            .map(drop),
        ChangeDecision::Abort => stage::abort(&board, &actor, source, id, &reason)
            .await
            .map(drop),
    }
    .map_err(refuse)
}

/// The values a key held, newest first.
#[server(prefix = "/console/fn")]
pub async fn switch_history(path: String) -> Result<Vec<SwitchRevision>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    history::history(&Board::of(&state), &actor, &path)
        .await
        .map_err(refuse)
}

/// Sets the value a revision held again; the reason is audited.
#[server(prefix = "/console/fn")]
pub async fn rollback_switch(
    path: String,
    revision: i64,
    reason: String,
) -> Result<FlipOutcome, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let flip = Flip {
        actor: &actor,
        source: Source::Console,
        path: &path,
        value: "",
        reason: &reason,
        wait: None,
    };
    let now = state.changes.now();
    history::rollback(&Board::of(&state), flip, revision, now)
        .await
        .map(FlipOutcome::from)
        .map_err(refuse)
}

/// What a flip would touch, for its confirmation.
#[server(prefix = "/console/fn")]
pub async fn preview_impact(path: String, value: String) -> Result<SwitchImpact, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let now = state.changes.now();
    impact::impact(&Board::of(&state), &actor, &path, &value, now)
        .await
        .map_err(refuse)
}

/// A page of the audit log, filtered on the server: `kind` (`switch`, `ops`) and
/// `containing` as the page's filter form sends them, blank meaning any.
#[server(prefix = "/console/fn")]
pub async fn audit_log(
    page: Option<i64>,
    kind: Option<String>,
    containing: Option<String>,
) -> Result<AuditPage, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let filter = contract::AuditFilter::parse(kind.as_deref(), containing.as_deref())
        .map_err(|message| refuse(ConsoleError::bad_request(message)))?;
    board::audit(&state, &actor, Some(page.unwrap_or(1)), &filter)
        .await
        .map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn list_dead_letters(page: Option<i64>) -> Result<DeadLetterPage, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    dead_letters::list(&state, &actor, page.unwrap_or(1))
        .await
        .map_err(refuse)
}

/// Sends one dead letter back to its queue; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_dead_letter(
    id: i64,
    reason: String,
) -> Result<DeadLetterView, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    dead_letters::requeue(&state, &actor, Source::Console, id, &reason)
        .await
        .map_err(refuse)
}

/// Sends every waiting dead letter back; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn requeue_all_dead_letters(reason: String) -> Result<RequeueReport, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    dead_letters::requeue_all(&state, &actor, Source::Console, &reason)
        .await
        .map_err(refuse)
}

/// The live dashboard's most recent frames, drawn before the stream takes over.
#[server(prefix = "/console/fn")]
pub async fn dashboard_frames() -> Result<Vec<DashboardFrame>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    ops::dashboard::recent(&state, &actor).map_err(refuse)
}

/// The outbox: pending, failed and recorded rows, and the failed ones in detail.
#[server(prefix = "/console/fn")]
pub async fn get_outbox_summary() -> Result<OutboxSummary, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    relay::summary(&state, &actor).await.map_err(refuse)
}

/// Hands failed outbox rows back to the relay: the row `id`, or every failed row without
/// one; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn retry_outbox(
    id: Option<i64>,
    reason: String,
) -> Result<OutboxRetryReport, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    outbox_retry::retry(&state, &actor, Source::Console, id, &reason)
        .await
        .map_err(refuse)
}

/// Replays the pre-orders recorded while the async switch was on `record`; audited.
#[server(prefix = "/console/fn")]
pub async fn replay_recorded_orders(reason: String) -> Result<ReplayReport, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    recordings::replay(&state, &actor, Source::Console, &reason)
        .await
        .map_err(refuse)
}

/// The live stock ledger of an activity's items.
#[server(prefix = "/console/fn")]
pub async fn get_activity_ledger(activity_id: i64) -> Result<ActivityLedger, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    reconcile::ledger(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

/// Reconciliation runs, newest first; an absent activity means every activity's.
#[server(prefix = "/console/fn")]
pub async fn list_reconciliations(
    activity_id: Option<i64>,
) -> Result<Vec<RunSummary>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    reconcile::list(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_reconciliation(id: i64) -> Result<ReconciliationRun, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    reconcile::get(&state, &actor, id).await.map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    let started = reconcile::start(&state, &actor, Source::Console, request)
        .await
        .map_err(refuse)?;
    leptos_axum::redirect(&format!("/reconciliations/{}", started.id));
    Ok(started)
}

/// The hot keys in force on the answering instance and the cluster-wide top per kind.
#[server(prefix = "/console/fn")]
pub async fn get_hotkeys() -> Result<HotKeysView, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    hotkeys::view(&state, &actor).map_err(refuse)
}

/// The stored periods of hot keys over the last `hours` (default 6).
#[server(prefix = "/console/fn")]
pub async fn hotkey_history(hours: Option<u32>) -> Result<Vec<HotKeyPeriod>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    hotkeys::history(&state.db, &actor, hours.unwrap_or(6))
        .await
        .map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    authorize(&actor, Permission::ManageHotKeys).map_err(refuse)?;
    let form = contract::HotKeyForm {
        kind,
        key,
        action,
        limit_per_s,
        hold_s,
        reason,
    };
    let new = form
        .read()
        .map_err(|message| refuse(ConsoleError::bad_request(message)))?;
    hotkeys::add(&Board::of(&state), &actor, Source::Console, &new)
        .await
        .map_err(refuse)
}

/// Takes a key out of force; the reason is required and audited.
#[server(prefix = "/console/fn")]
pub async fn remove_hot_key(
    kind: String,
    key: String,
    reason: String,
) -> Result<(), ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let board = Board::of(&state);
    hotkeys::remove(&board, &actor, Source::Console, &kind, &key, &reason)
        .await
        .map_err(refuse)
}

/// The readiness check of an activity, run when asked: every check's verdict and the
/// overall go/no-go.
#[server(prefix = "/console/fn")]
pub async fn get_readiness(activity_id: i64) -> Result<Readiness, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    ops::readiness::check(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

/// A lottery activity's draw: per item, registrants, codes by outcome, the waitlist's reach;
/// the commitment and, once drawn, the seed.
#[server(prefix = "/console/fn")]
pub async fn get_draw(activity_id: i64) -> Result<DrawReport, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    lottery::draw_report(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

/// Ends a buyer's part in a lottery (ops, admin), audited with the reason.
#[server(prefix = "/console/fn")]
pub async fn revoke_registration(
    activity_id: i64,
    user_id: i64,
    reason: String,
) -> Result<Revoked, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    let source = Source::Console;
    lottery::revoke(&state, &actor, source, activity_id, user_id, &reason)
        .await
        .map_err(refuse)
}

/// Rehearsals, newest first; an absent activity means every activity's.
#[server(prefix = "/console/fn")]
pub async fn list_rehearsals(activity_id: Option<i64>) -> Result<Vec<Rehearsal>, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    rehearsal::list(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

/// The recorded runs of an activity, newest first.
#[server(prefix = "/console/fn")]
pub async fn list_baselines(activity_id: i64) -> Result<ActivityBaselines, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    ops::baselines::runs::of_activity(&state, &actor, activity_id)
        .await
        .map_err(refuse)
}

#[server(prefix = "/console/fn")]
pub async fn get_rehearsal(id: i64) -> Result<Rehearsal, ConsoleFnError> {
    let (state, actor) = session::signed_in().await?;
    rehearsal::get(&state, &actor, id).await.map_err(refuse)
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
    let (state, actor) = session::signed_in().await?;
    let request = contract::StartRehearsal {
        buyers: buyers.trim().parse().unwrap_or(0),
        rate_per_s: rate_per_s.trim().parse().unwrap_or(0),
        reason,
    };
    let started = rehearsal::start(&state, &actor, Source::Console, activity_id, request)
        .await
        .map_err(refuse)?;
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
    let (state, actor) = session::signed_in().await?;
    let source = Source::Console;
    ops::baselines::runs::mark(&state, &actor, source, run_id, scope, &reason)
        .await
        .map_err(refuse)
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
