//! The admin console inside the server: the [`ConsoleBackend`] implementation handed to
//! the Leptos app as context, and the routes that render pages and answer server functions.
//! The backend calls the same services as the admin API, so both enforce the same rules.

use app::backend::{ConsoleBackend, ConsoleError, NewSession, SharedBackend};
use axum::{
    body::Body,
    extract::{FromRequest, Request},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::post,
    Form, Router,
};
use contract::Actor;
use contract::Source;
use contract::{
    ActivityBaselines, BaselineRun, BaselineScope, DrawReport, HotKey, HotKeyForm, HotKeyPeriod,
    HotKeysView, Readiness, Revoked,
};
use contract::{
    ActivityDetail, ActivityInput, ActivityLedger, ActivitySummary, AuditFilter, AuditPage,
    DashboardFrame, DeadLetterPage, DeadLetterView, Item, ItemInput, OrderDetail, OrderPage,
    OrderQuery, OutboxRetryReport, OutboxSummary, Permission, PrewarmReport, PublishedPage,
    ReconciliationRun, ReplayReport, RequeueReport, RunSummary, StartReconciliation, StartedRun,
    SwitchBoard,
};
use contract::{ChangeDecision, ChangeList, FlipOutcome, SwitchForm, SwitchImpact, SwitchRevision};
use contract::{Rehearsal, StartRehearsal, StartedRehearsal};
use leptos::prelude::provide_context;
use leptos::server_fn::ServerFn;
use leptos_axum::{generate_route_list, handle_server_fns_with_context, LeptosRoutes};
use std::sync::Arc;

use crate::{
    changes::{history, impact, service as change_service, stage},
    control::board::{self, Board, Flip},
    hotkeys::service as hotkeys,
    prewarm, readiness,
    reconcile::service as reconcile,
    rehearsal::service as rehearsal,
    state::AppState,
};
use base::slow_bodies;
use base::{client_address, error::ApiError};
use sale::{
    catalog::service as catalog,
    identity::authorize,
    identity::{authenticate::LoginError, rules},
    lottery::ops as lottery,
    orders::{admin as order_admin, dead_letters, outbox_retry, recordings, relay},
};

/// The console's view of the platform.
pub(crate) struct ConsoleService {
    state: AppState,
}

#[async_trait::async_trait]
impl ConsoleBackend for ConsoleService {
    async fn login(
        &self,
        username: &str,
        password: &str,
        request: &http::request::Parts,
    ) -> Result<NewSession, ConsoleError> {
        let client = client_address::resolve(&self.state.settings.trusted_proxies, request);
        match self
            .state
            .auth
            .login(username, password, Some(client))
            .await
        {
            Ok(session) => Ok(NewSession {
                token: session.token,
                max_age_s: session.max_age_s,
            }),
            Err(LoginError::BadCredentials) => {
                Err(ConsoleError::bad_request("wrong username or password"))
            }
            Err(LoginError::RateLimited { .. }) => Err(ConsoleError::RateLimited),
            Err(LoginError::TooLong(too_long)) => Err(ConsoleError::Invalid {
                code: too_long.code(),
                message: too_long.to_string(),
            }),
            Err(LoginError::Failed(cause)) => Err(ApiError::Internal(cause).into()),
        }
    }

    async fn logout(&self, session: &str) -> Result<(), ConsoleError> {
        self.state
            .auth
            .logout(session)
            .await
            .map_err(|e| ApiError::from(e).into())
    }

    async fn authenticate(&self, session: &str) -> Result<Actor, ConsoleError> {
        self.state
            .auth
            .by_session(session)
            .await
            .map_err(|e| ConsoleError::from(ApiError::from(e)))?
            .ok_or(ConsoleError::Unauthenticated)
    }

    fn secure_cookies(&self) -> bool {
        self.state.settings.secure_cookies
    }

    async fn list_items(&self, actor: &Actor) -> Result<Vec<Item>, ConsoleError> {
        Ok(catalog::list_items(&self.state, actor).await?)
    }

    async fn create_item(&self, actor: &Actor, input: ItemInput) -> Result<i64, ConsoleError> {
        Ok(catalog::create_item(&self.state, actor, input).await?)
    }

    async fn get_item(&self, actor: &Actor, id: i64) -> Result<Item, ConsoleError> {
        Ok(catalog::get_item(&self.state, actor, id).await?)
    }

    async fn update_item(
        &self,
        actor: &Actor,
        id: i64,
        input: ItemInput,
    ) -> Result<(), ConsoleError> {
        Ok(catalog::update_item(&self.state, actor, id, input).await?)
    }

    async fn list_activities(&self, actor: &Actor) -> Result<Vec<ActivitySummary>, ConsoleError> {
        Ok(catalog::list_activities(&self.state, actor).await?)
    }

    async fn get_activity(&self, actor: &Actor, id: i64) -> Result<ActivityDetail, ConsoleError> {
        Ok(catalog::get_activity(&self.state, actor, id).await?)
    }

    async fn create_activity(
        &self,
        actor: &Actor,
        input: ActivityInput,
    ) -> Result<i64, ConsoleError> {
        Ok(catalog::create_activity(&self.state, actor, input).await?)
    }

    async fn update_activity(
        &self,
        actor: &Actor,
        id: i64,
        input: ActivityInput,
    ) -> Result<(), ConsoleError> {
        Ok(catalog::update_activity(&self.state, actor, id, input).await?)
    }

    async fn prewarm(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<PrewarmReport, ConsoleError> {
        Ok(prewarm::prewarm(&self.state, actor, Source::Console, activity_id).await?)
    }

    async fn publish_sale_page(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<PublishedPage, ConsoleError> {
        Ok(sale::sale_page::publish(&self.state, actor, activity_id).await?)
    }

    async fn list_orders(
        &self,
        actor: &Actor,
        query: OrderQuery,
    ) -> Result<OrderPage, ConsoleError> {
        Ok(order_admin::list(&self.state, actor, &query).await?)
    }

    async fn get_order(&self, actor: &Actor, id: &str) -> Result<OrderDetail, ConsoleError> {
        Ok(order_admin::get(&self.state, actor, id).await?)
    }

    async fn switch_board(&self, actor: &Actor) -> Result<SwitchBoard, ConsoleError> {
        authorize(actor, Permission::ReadSwitches)?;
        Ok(Board::of(&self.state).read().await?)
    }

    async fn flip_switch(
        &self,
        actor: &Actor,
        form: SwitchForm,
    ) -> Result<FlipOutcome, ConsoleError> {
        // A role that may not flip learns nothing about its input.
        authorize(actor, Permission::FlipSwitch)?;
        let timing = form
            .timing()
            .map_err(|(code, message)| ConsoleError::Invalid { code, message })?;
        let flip = Flip {
            actor,
            source: Source::Console,
            path: &form.path,
            value: &form.value,
            reason: &form.reason,
            // The switch board polls the instances' applied revisions itself.
            wait: None,
        };
        let submission = change_service::Submission {
            flip,
            at: timing.at,
            revert_after_s: timing.revert_after_s,
            emergency: false,
            stage: timing.stage,
            now: self.state.changes.now(),
        };
        let board = Board::of(&self.state);
        Ok(change_service::submit(&board, submission).await?.into())
    }

    async fn list_changes(&self, actor: &Actor) -> Result<ChangeList, ConsoleError> {
        let board = Board::of(&self.state);
        let changes = change_service::list(&board, actor, None).await?;
        Ok(ChangeList { changes })
    }

    async fn decide_change(
        &self,
        actor: &Actor,
        id: i64,
        decision: &str,
        reason: &str,
    ) -> Result<(), ConsoleError> {
        authorize(actor, Permission::FlipSwitch)?;
        let decision = ChangeDecision::parse(decision).ok_or_else(|| ConsoleError::Invalid {
            code: "INVALID_DECISION",
            message: format!("no decision `{decision}`"),
        })?;
        let board = Board::of(&self.state);
        let source = Source::Console;
        let now = self.state.changes.now();
        match decision {
            ChangeDecision::Approve => {
                change_service::approve(&board, actor, source, id, reason, now).await?;
            }
            ChangeDecision::Reject | ChangeDecision::Cancel => {
                let decided = if decision == ChangeDecision::Reject {
                    change_service::Decision::Reject
                } else {
                    change_service::Decision::Cancel
                };
                change_service::decide(&board, actor, source, id, decided, reason).await?;
            }
            ChangeDecision::Promote => {
                stage::promote(&board, actor, source, id, reason, now).await?;
            }
            ChangeDecision::Abort => {
                stage::abort(&board, actor, source, id, reason).await?;
            }
        }
        Ok(())
    }

    async fn switch_history(
        &self,
        actor: &Actor,
        path: &str,
    ) -> Result<Vec<SwitchRevision>, ConsoleError> {
        Ok(history::history(&Board::of(&self.state), actor, path).await?)
    }

    async fn rollback_switch(
        &self,
        actor: &Actor,
        path: &str,
        revision: i64,
        reason: &str,
    ) -> Result<FlipOutcome, ConsoleError> {
        let flip = Flip {
            actor,
            source: Source::Console,
            path,
            value: "",
            reason,
            wait: None,
        };
        let now = self.state.changes.now();
        let board = Board::of(&self.state);
        Ok(history::rollback(&board, flip, revision, now).await?.into())
    }

    async fn switch_impact(
        &self,
        actor: &Actor,
        path: &str,
        value: &str,
    ) -> Result<SwitchImpact, ConsoleError> {
        let now = self.state.changes.now();
        Ok(impact::impact(&Board::of(&self.state), actor, path, value, now).await?)
    }

    async fn audit_log(
        &self,
        actor: &Actor,
        page: i64,
        filter: &AuditFilter,
    ) -> Result<AuditPage, ConsoleError> {
        Ok(board::audit(&self.state, actor, Some(page), filter).await?)
    }

    async fn dead_letters(&self, actor: &Actor, page: i64) -> Result<DeadLetterPage, ConsoleError> {
        Ok(dead_letters::list(&self.state, actor, page).await?)
    }

    async fn requeue_dead_letter(
        &self,
        actor: &Actor,
        id: i64,
        reason: &str,
    ) -> Result<DeadLetterView, ConsoleError> {
        Ok(dead_letters::requeue(&self.state, actor, Source::Console, id, reason).await?)
    }

    async fn requeue_all_dead_letters(
        &self,
        actor: &Actor,
        reason: &str,
    ) -> Result<RequeueReport, ConsoleError> {
        Ok(dead_letters::requeue_all(&self.state, actor, Source::Console, reason).await?)
    }

    async fn dashboard_frames(&self, actor: &Actor) -> Result<Vec<DashboardFrame>, ConsoleError> {
        Ok(crate::dashboard::recent(&self.state, actor)?)
    }

    async fn outbox_summary(&self, actor: &Actor) -> Result<OutboxSummary, ConsoleError> {
        Ok(relay::summary(&self.state, actor).await?)
    }

    async fn retry_outbox(
        &self,
        actor: &Actor,
        row: Option<i64>,
        reason: &str,
    ) -> Result<OutboxRetryReport, ConsoleError> {
        Ok(outbox_retry::retry(&self.state, actor, Source::Console, row, reason).await?)
    }

    async fn replay_recorded(
        &self,
        actor: &Actor,
        reason: &str,
    ) -> Result<ReplayReport, ConsoleError> {
        Ok(recordings::replay(&self.state, actor, Source::Console, reason).await?)
    }

    async fn activity_ledger(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<ActivityLedger, ConsoleError> {
        Ok(reconcile::ledger(&self.state, actor, activity_id).await?)
    }

    async fn reconciliations(
        &self,
        actor: &Actor,
        activity_id: Option<i64>,
    ) -> Result<Vec<RunSummary>, ConsoleError> {
        Ok(reconcile::list(&self.state, actor, activity_id).await?)
    }

    async fn reconciliation(
        &self,
        actor: &Actor,
        id: i64,
    ) -> Result<ReconciliationRun, ConsoleError> {
        Ok(reconcile::get(&self.state, actor, id).await?)
    }

    async fn start_reconciliation(
        &self,
        actor: &Actor,
        request: StartReconciliation,
    ) -> Result<StartedRun, ConsoleError> {
        Ok(reconcile::start(&self.state, actor, Source::Console, request).await?)
    }

    async fn hotkeys(&self, actor: &Actor) -> Result<HotKeysView, ConsoleError> {
        Ok(hotkeys::view(&self.state, actor)?)
    }

    async fn hotkey_history(
        &self,
        actor: &Actor,
        hours: u32,
    ) -> Result<Vec<HotKeyPeriod>, ConsoleError> {
        Ok(hotkeys::history(&self.state.db, actor, hours).await?)
    }

    async fn add_hotkey(&self, actor: &Actor, form: HotKeyForm) -> Result<HotKey, ConsoleError> {
        authorize(actor, Permission::ManageHotKeys)?;
        let new = form.read().map_err(ConsoleError::bad_request)?;
        Ok(hotkeys::add(&Board::of(&self.state), actor, Source::Console, &new).await?)
    }

    async fn remove_hotkey(
        &self,
        actor: &Actor,
        kind: &str,
        key: &str,
        reason: &str,
    ) -> Result<(), ConsoleError> {
        let board = Board::of(&self.state);
        Ok(hotkeys::remove(&board, actor, Source::Console, kind, key, reason).await?)
    }

    async fn readiness(&self, actor: &Actor, activity_id: i64) -> Result<Readiness, ConsoleError> {
        Ok(readiness::check(&self.state, actor, activity_id).await?)
    }

    async fn draw(&self, actor: &Actor, activity_id: i64) -> Result<DrawReport, ConsoleError> {
        Ok(lottery::draw_report(&self.state, actor, activity_id).await?)
    }

    async fn revoke_registration(
        &self,
        actor: &Actor,
        activity_id: i64,
        user_id: i64,
        reason: &str,
    ) -> Result<Revoked, ConsoleError> {
        Ok(lottery::revoke(
            &self.state,
            actor,
            Source::Console,
            activity_id,
            user_id,
            reason,
        )
        .await?)
    }

    async fn rehearsals(
        &self,
        actor: &Actor,
        activity_id: Option<i64>,
    ) -> Result<Vec<Rehearsal>, ConsoleError> {
        Ok(rehearsal::list(&self.state, actor, activity_id).await?)
    }

    async fn rehearsal(&self, actor: &Actor, id: i64) -> Result<Rehearsal, ConsoleError> {
        Ok(rehearsal::get(&self.state, actor, id).await?)
    }

    async fn start_rehearsal(
        &self,
        actor: &Actor,
        activity_id: i64,
        request: StartRehearsal,
    ) -> Result<StartedRehearsal, ConsoleError> {
        Ok(rehearsal::start(&self.state, actor, Source::Console, activity_id, request).await?)
    }

    async fn baselines(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<ActivityBaselines, ConsoleError> {
        Ok(crate::baselines::runs::of_activity(&self.state, actor, activity_id).await?)
    }

    async fn mark_baseline(
        &self,
        actor: &Actor,
        run_id: i64,
        scope: BaselineScope,
        reason: &str,
    ) -> Result<BaselineRun, ConsoleError> {
        let source = Source::Console;
        Ok(crate::baselines::runs::mark(&self.state, actor, source, run_id, scope, reason).await?)
    }
}

/// Console pages (server-rendered, then hydrated), its server functions under
/// `/console/fn` (login behind [`login_gate`]), and the site folder (the `/pkg` bundle,
/// public assets) for the rest.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    let backend: SharedBackend = Arc::new(ConsoleService {
        state: state.clone(),
    });
    let provide = move || provide_context(backend.clone());
    let routes = generate_route_list(app::App);
    let leptos = state.leptos.clone();
    let site = super::console_site::service(std::path::Path::new(leptos.site_root.as_ref()));
    let server_fn_context = provide.clone();
    Router::new()
        .route(
            "/console/fn/{*name}",
            post(move |request: Request<Body>| {
                let provide = server_fn_context.clone();
                async move { handle_server_fns_with_context(provide, request).await }
            }),
        )
        .leptos_routes_with_context(&state, routes, provide, move || app::shell(leptos.clone()))
        .fallback_service(site)
        .layer(middleware::from_fn(login_gate))
}

/// The login server function behind a gate of its own, because anyone may call it: the body
/// is read up to [`rules::MAX_LOGIN_BODY_BYTES`] (413 `PAYLOAD_TOO_LARGE` beyond), and a
/// username or password past its cap is answered 400 with its code, before the server
/// function (and Redis) sees either. A body that is not the login form is left to the
/// server function to refuse; every other request passes untouched.
async fn login_gate(request: Request, next: Next) -> Response {
    if request.uri().path() != <app::api::Login as ServerFn>::PATH {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // A body that did not arrive in time is the client's fault of another kind; any other
    // failure to read is answered as too large: past the limit is the only one left that a
    // client still waiting for the answer can cause.
    let bytes = match axum::body::to_bytes(body, rules::MAX_LOGIN_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) if slow_bodies::too_slow(&error) => {
            return ApiError::BadRequest(error.to_string()).into_response();
        }
        Err(_) => return ApiError::PayloadTooLarge.into_response(),
    };
    let as_form = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
    if let Ok(Form(login)) = Form::<app::api::Login>::from_request(as_form, &()).await {
        if let Err(too_long) = rules::check_login_input(&login.username, &login.password) {
            return ApiError::Invalid {
                code: too_long.code(),
                message: too_long.to_string(),
            }
            .into_response();
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
