//! The RBAC matrix: every admin route and every console server function, called by every
//! role and without credentials, answers what the permission table says: 401 without
//! credentials, 403 for a role that may not, and the row's own answer for a role that may
//! (a well-formed request the use case then refuses or serves, so a 403 can only come from
//! the permission check). The rows are one table; a route or server function the server
//! serves without a row here fails the test, so a new one cannot skip the matrix.

use crate::support::app::{spawn_app, with_session, TestApp};
use contract::{Permission, Role};
use leptos::server_fn::ServerFn;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Who may call a row.
#[derive(Clone, Copy)]
enum Gate {
    /// Roles the permission table allows.
    Needs(Permission),
    /// Any signed-in role.
    SignedIn,
    /// Anyone, signed in or not (logging in).
    Open,
}

/// How a row's request carries its arguments.
enum Body {
    None,
    Json(Value),
    Form(Vec<(&'static str, &'static str)>),
}

struct Row {
    method: Method,
    /// The admin route's path template, or the server function's path.
    listed: &'static str,
    /// The path called.
    path: String,
    body: Body,
    gate: Gate,
    /// The status a caller the gate lets through gets.
    allowed: u16,
}

const NO_ID: &str = "999999999";
const NO_ORDER: &str = "00000000-0000-0000-0000-000000000000";

fn admin(
    method: Method,
    listed: &'static str,
    path: &str,
    body: Body,
    gate: Gate,
    allowed: u16,
) -> Row {
    Row {
        method,
        listed,
        path: format!("/admin/api{path}"),
        body,
        gate,
        allowed,
    }
}

fn server_fn(path: &'static str, body: Body, gate: Gate, allowed: u16) -> Row {
    Row {
        method: Method::POST,
        listed: path,
        path: path.to_owned(),
        body,
        gate,
        allowed,
    }
}

fn rows() -> Vec<Row> {
    use app::api::*;
    use Body::{Form, Json};
    use Gate::{Needs, Open, SignedIn};
    use Method as M;
    use Permission as P;
    let bad_item = || json!({ "name": "", "price_cents": 100 });
    let bad_activity = || {
        json!({ "title": "", "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-01T01:00:00Z",
                "kind": "standard", "pay_timeout_s": 900, "items": [] })
    };
    let no_reason = || json!({ "reason": "" });
    vec![
        admin(
            M::GET,
            "/audit",
            "/audit",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::GET,
            "/items",
            "/items",
            Body::None,
            Needs(P::ReadCatalog),
            200,
        ),
        admin(
            M::POST,
            "/items",
            "/items",
            Json(bad_item()),
            Needs(P::WriteCatalog),
            400,
        ),
        admin(
            M::GET,
            "/items/{id}",
            &format!("/items/{NO_ID}"),
            Body::None,
            Needs(P::ReadCatalog),
            404,
        ),
        admin(
            M::PUT,
            "/items/{id}",
            &format!("/items/{NO_ID}"),
            Json(bad_item()),
            Needs(P::WriteCatalog),
            400,
        ),
        admin(
            M::GET,
            "/activities",
            "/activities",
            Body::None,
            Needs(P::ReadCatalog),
            200,
        ),
        admin(
            M::POST,
            "/activities",
            "/activities",
            Json(bad_activity()),
            Needs(P::WriteCatalog),
            400,
        ),
        admin(
            M::GET,
            "/activities/{id}",
            &format!("/activities/{NO_ID}"),
            Body::None,
            Needs(P::ReadCatalog),
            404,
        ),
        admin(
            M::PUT,
            "/activities/{id}",
            &format!("/activities/{NO_ID}"),
            Json(bad_activity()),
            Needs(P::WriteCatalog),
            400,
        ),
        admin(
            M::POST,
            "/activities/{id}/prewarm",
            &format!("/activities/{NO_ID}/prewarm"),
            Body::None,
            Needs(P::Prewarm),
            404,
        ),
        admin(
            M::GET,
            "/activities/{id}/draw",
            &format!("/activities/{NO_ID}/draw"),
            Body::None,
            Needs(P::WatchOperations),
            404,
        ),
        admin(
            M::POST,
            "/activities/{id}/registrations/{user_id}/revoke",
            &format!("/activities/{NO_ID}/registrations/1/revoke"),
            Json(json!({ "reason": "a scalper's farm" })),
            Needs(P::RevokeRegistration),
            404,
        ),
        admin(
            M::POST,
            "/activities/{id}/publish",
            &format!("/activities/{NO_ID}/publish"),
            Body::None,
            Needs(P::PublishSalePage),
            404,
        ),
        admin(
            M::GET,
            "/switches",
            "/switches",
            Body::None,
            Needs(P::ReadSwitches),
            200,
        ),
        admin(
            M::PUT,
            "/switches/{*path}",
            "/switches/switches/entry",
            Json(json!({ "value": "open", "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::GET,
            "/switches/{*path}",
            "/switches/switches/entry/history",
            Body::None,
            Needs(P::ReadSwitches),
            200,
        ),
        admin(
            M::POST,
            "/switches/{*path}",
            "/switches/switches/entry/rollback",
            Json(json!({ "revision": 1, "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::GET,
            "/changes",
            "/changes",
            Body::None,
            Needs(P::ReadSwitches),
            200,
        ),
        admin(
            M::DELETE,
            "/changes/{id}",
            &format!("/changes/{NO_ID}"),
            Json(json!({ "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::POST,
            "/changes/{id}/approve",
            &format!("/changes/{NO_ID}/approve"),
            Json(json!({ "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::POST,
            "/changes/{id}/reject",
            &format!("/changes/{NO_ID}/reject"),
            Json(json!({ "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::POST,
            "/changes/{id}/promote",
            &format!("/changes/{NO_ID}/promote"),
            Json(json!({ "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::POST,
            "/changes/{id}/abort",
            &format!("/changes/{NO_ID}/abort"),
            Json(json!({ "reason": "" })),
            Needs(P::FlipSwitch),
            400,
        ),
        admin(
            M::GET,
            "/orders",
            "/orders",
            Body::None,
            Needs(P::ReadOrders),
            200,
        ),
        admin(
            M::GET,
            "/orders/{id}",
            &format!("/orders/{NO_ORDER}"),
            Body::None,
            Needs(P::ReadOrders),
            404,
        ),
        admin(
            M::GET,
            "/dead-letters",
            "/dead-letters",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::POST,
            "/dead-letters/requeue-all",
            "/dead-letters/requeue-all",
            Json(no_reason()),
            Needs(P::OperatePipeline),
            400,
        ),
        admin(
            M::POST,
            "/dead-letters/{id}/requeue",
            &format!("/dead-letters/{NO_ID}/requeue"),
            Json(no_reason()),
            Needs(P::OperatePipeline),
            400,
        ),
        admin(
            M::GET,
            "/outbox",
            "/outbox",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::POST,
            "/outbox/retry",
            "/outbox/retry",
            Json(no_reason()),
            Needs(P::OperatePipeline),
            400,
        ),
        admin(
            M::POST,
            "/outbox/{id}/retry",
            &format!("/outbox/{NO_ID}/retry"),
            Json(no_reason()),
            Needs(P::OperatePipeline),
            400,
        ),
        admin(
            M::POST,
            "/reconciliations",
            "/reconciliations",
            Json(json!({})),
            Needs(P::Reconcile),
            400,
        ),
        admin(
            M::GET,
            "/reconciliations",
            "/reconciliations",
            Body::None,
            Needs(P::Reconcile),
            200,
        ),
        admin(
            M::GET,
            "/reconciliations/{id}",
            &format!("/reconciliations/{NO_ID}"),
            Body::None,
            Needs(P::Reconcile),
            404,
        ),
        admin(
            M::GET,
            "/activities/{id}/ledger",
            &format!("/activities/{NO_ID}/ledger"),
            Body::None,
            Needs(P::ReadCatalog),
            404,
        ),
        admin(
            M::GET,
            "/readiness",
            &format!("/readiness?activity_id={NO_ID}"),
            Body::None,
            Needs(P::WatchOperations),
            404,
        ),
        admin(
            M::GET,
            "/dashboard/stream",
            "/dashboard/stream",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::POST,
            "/recordings/replay",
            "/recordings/replay",
            Json(no_reason()),
            Needs(P::OperatePipeline),
            400,
        ),
        server_fn(
            Login::PATH,
            Form(vec![("username", "nobody"), ("password", "wrong")]),
            Open,
            400,
        ),
        server_fn(Whoami::PATH, Form(vec![]), SignedIn, 200),
        server_fn(ListItems::PATH, Form(vec![]), Needs(P::ReadCatalog), 200),
        server_fn(
            GetItem::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::ReadCatalog),
            404,
        ),
        server_fn(
            SaveItem::PATH,
            Form(vec![("name", ""), ("description", ""), ("price", "1.00")]),
            Needs(P::WriteCatalog),
            400,
        ),
        server_fn(
            ListActivities::PATH,
            Form(vec![]),
            Needs(P::ReadCatalog),
            200,
        ),
        server_fn(
            GetActivity::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::ReadCatalog),
            404,
        ),
        server_fn(
            SaveActivity::PATH,
            Json(json!({ "id": null, "input": bad_activity() })),
            Needs(P::WriteCatalog),
            400,
        ),
        server_fn(
            PrewarmActivity::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::Prewarm),
            404,
        ),
        server_fn(
            PublishSalePage::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::PublishSalePage),
            404,
        ),
        server_fn(ListOrders::PATH, Form(vec![]), Needs(P::ReadOrders), 200),
        server_fn(
            GetOrder::PATH,
            Form(vec![("id", NO_ORDER)]),
            Needs(P::ReadOrders),
            404,
        ),
        server_fn(
            GetSwitchBoard::PATH,
            Form(vec![]),
            Needs(P::ReadSwitches),
            200,
        ),
        server_fn(
            FlipSwitch::PATH,
            Form(vec![
                ("path", "switches/entry"),
                ("value", "open"),
                ("reason", ""),
            ]),
            Needs(P::FlipSwitch),
            400,
        ),
        server_fn(ListChanges::PATH, Form(vec![]), Needs(P::ReadSwitches), 200),
        server_fn(
            DecideChange::PATH,
            Form(vec![("id", NO_ID), ("decision", "approve"), ("reason", "")]),
            Needs(P::FlipSwitch),
            400,
        ),
        server_fn(
            SwitchHistory::PATH,
            Form(vec![("path", "switches/entry")]),
            Needs(P::ReadSwitches),
            200,
        ),
        server_fn(
            RollbackSwitch::PATH,
            Form(vec![
                ("path", "switches/entry"),
                ("revision", "1"),
                ("reason", ""),
            ]),
            Needs(P::FlipSwitch),
            400,
        ),
        server_fn(
            PreviewImpact::PATH,
            Form(vec![("path", "switches/entry"), ("value", "closed")]),
            Needs(P::ReadSwitches),
            200,
        ),
        server_fn(AuditLog::PATH, Form(vec![]), Needs(P::WatchOperations), 200),
        server_fn(
            ListDeadLetters::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            RequeueDeadLetter::PATH,
            Form(vec![("id", NO_ID), ("reason", "")]),
            Needs(P::OperatePipeline),
            400,
        ),
        server_fn(
            RequeueAllDeadLetters::PATH,
            Form(vec![("reason", "")]),
            Needs(P::OperatePipeline),
            400,
        ),
        server_fn(
            DashboardFrames::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            GetOutboxSummary::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            RetryOutbox::PATH,
            Form(vec![("id", NO_ID), ("reason", "")]),
            Needs(P::OperatePipeline),
            400,
        ),
        server_fn(
            ReplayRecordedOrders::PATH,
            Form(vec![("reason", "")]),
            Needs(P::OperatePipeline),
            400,
        ),
        server_fn(
            GetActivityLedger::PATH,
            Form(vec![("activity_id", NO_ID)]),
            Needs(P::ReadCatalog),
            404,
        ),
        server_fn(
            ListReconciliations::PATH,
            Form(vec![]),
            Needs(P::Reconcile),
            200,
        ),
        server_fn(
            GetReconciliation::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::Reconcile),
            404,
        ),
        // A repair without its reason: refused by the gate for roles that may not repair.
        server_fn(
            StartReconciliation::PATH,
            Form(vec![
                ("activity_id", NO_ID),
                ("repair", "true"),
                ("reason", ""),
            ]),
            Needs(P::RepairStock),
            400,
        ),
        admin(
            M::GET,
            "/hotkeys",
            "/hotkeys",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::GET,
            "/hotkeys/history",
            "/hotkeys/history",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        // A key of a second spelling: refused by the rules once the gate lets it through.
        admin(
            M::POST,
            "/hotkeys",
            "/hotkeys",
            Json(
                json!({ "kind": "user", "key": "042", "action": "block", "hold_s": 5, "reason": "x" }),
            ),
            Needs(P::ManageHotKeys),
            400,
        ),
        admin(
            M::DELETE,
            "/hotkeys/{kind}/{key}",
            &format!("/hotkeys/user/{NO_ID}?reason=gone"),
            Body::None,
            Needs(P::ManageHotKeys),
            404,
        ),
        admin(
            M::GET,
            "/baselines",
            &format!("/baselines?activity_id={NO_ID}"),
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::POST,
            "/baselines/{id}/mark",
            &format!("/baselines/{NO_ID}/mark"),
            Json(json!({ "reason": "the quiet sale of last week" })),
            Needs(P::MarkBaseline),
            404,
        ),
        server_fn(
            GetHotkeys::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            HotkeyHistory::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            AddHotKey::PATH,
            Form(vec![
                ("kind", "user"),
                ("key", "042"),
                ("action", "block"),
                ("hold_s", "5"),
                ("reason", "x"),
            ]),
            Needs(P::ManageHotKeys),
            400,
        ),
        server_fn(
            RemoveHotKey::PATH,
            Form(vec![("kind", "user"), ("key", NO_ID), ("reason", "gone")]),
            Needs(P::ManageHotKeys),
            404,
        ),
        server_fn(
            GetReadiness::PATH,
            Form(vec![("activity_id", NO_ID)]),
            Needs(P::WatchOperations),
            404,
        ),
        server_fn(
            GetDraw::PATH,
            Form(vec![("activity_id", NO_ID)]),
            Needs(P::WatchOperations),
            404,
        ),
        server_fn(
            RevokeRegistration::PATH,
            Form(vec![
                ("activity_id", NO_ID),
                ("user_id", "1"),
                ("reason", "a scalper's farm"),
            ]),
            Needs(P::RevokeRegistration),
            404,
        ),
        // Buyers out of range: refused by the rules once the gate lets it through.
        admin(
            M::POST,
            "/activities/{id}/rehearsals",
            &format!("/activities/{NO_ID}/rehearsals"),
            Json(json!({ "buyers": 0, "rate_per_s": 10, "reason": "drill" })),
            Needs(P::Rehearse),
            400,
        ),
        admin(
            M::GET,
            "/rehearsals",
            "/rehearsals",
            Body::None,
            Needs(P::WatchOperations),
            200,
        ),
        admin(
            M::GET,
            "/rehearsals/{id}",
            &format!("/rehearsals/{NO_ID}"),
            Body::None,
            Needs(P::WatchOperations),
            404,
        ),
        server_fn(
            ListRehearsals::PATH,
            Form(vec![]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            ListBaselines::PATH,
            Form(vec![("activity_id", NO_ID)]),
            Needs(P::WatchOperations),
            200,
        ),
        server_fn(
            GetRehearsal::PATH,
            Form(vec![("id", NO_ID)]),
            Needs(P::WatchOperations),
            404,
        ),
        server_fn(
            BeginRehearsal::PATH,
            Form(vec![
                ("activity_id", NO_ID),
                ("buyers", "0"),
                ("rate_per_s", "10"),
                ("reason", "drill"),
            ]),
            Needs(P::Rehearse),
            400,
        ),
        server_fn(
            MarkBaseline::PATH,
            Form(vec![
                ("run_id", NO_ID),
                ("reason", "the quiet sale of last week"),
                ("scope", "kind"),
            ]),
            Needs(P::MarkBaseline),
            404,
        ),
        // Last, because it ends the session it is called with.
        server_fn(Logout::PATH, Form(vec![]), Open, 200),
    ]
}

/// What `role` (`None`: no credentials) gets from `row`.
fn expected(row: &Row, role: Option<Role>) -> u16 {
    match (row.gate, role) {
        (Gate::Open, _) => row.allowed,
        (_, None) => 401,
        (Gate::SignedIn, Some(_)) => row.allowed,
        (Gate::Needs(permission), Some(role)) if role.may(permission) => row.allowed,
        (Gate::Needs(_), Some(_)) => 403,
    }
}

/// Calls `row`, as an admin API client with `token`, or as the console with `session`.
async fn call(app: &TestApp, row: &Row, token: Option<&str>, session: Option<&str>) -> u16 {
    // From the console's own page, as a browser sends it (bearer calls ignore it).
    let mut request = app
        .client
        .request(row.method.clone(), format!("{}{}", app.address, row.path))
        .header("origin", &app.address);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = with_session(request, session);
    }
    request = match &row.body {
        Body::None => request,
        Body::Json(body) => request.json(body),
        Body::Form(form) => request.form(form),
    };
    let response = request.send().await.expect("request sent");
    response.status().as_u16()
}

#[tokio::test]
async fn every_admin_route_and_server_function_answers_each_role_as_the_permission_table_says() {
    let app = spawn_app().await;
    let rows = rows();

    let served: BTreeSet<(String, String)> = ops::admin::routes::listed()
        .into_iter()
        .map(|(method, path)| (method.to_string(), path.to_owned()))
        .chain(
            leptos::server_fn::axum::server_fn_paths()
                .map(|(path, method)| (method.to_string(), path.to_owned())),
        )
        .collect();
    let tabled: BTreeSet<(String, String)> = rows
        .iter()
        .map(|row| (row.method.to_string(), row.listed.to_owned()))
        .collect();
    assert_eq!(
        served, tabled,
        "every route and server function has exactly one row"
    );
    assert_eq!(tabled.len(), rows.len(), "no route has two rows");

    let mut wrong = Vec::new();
    let mut callers = vec![(None, None, None)];
    for role in Role::ALL {
        let merchant = (role == Role::Merchant).then_some("RBAC merchant");
        let caller = app.caller(role, merchant).await;
        let session = app.console_session(&caller).await;
        callers.push((Some(role), Some(caller.token), Some(session)));
    }
    for row in &rows {
        for (role, token, session) in &callers {
            let want = expected(row, *role);
            let is_admin_route = row.path.starts_with("/admin/api");
            let got = if is_admin_route {
                call(&app, row, token.as_deref(), None).await
            } else {
                call(&app, row, None, session.as_deref()).await
            };
            if got != want {
                wrong.push(format!(
                    "{} {} as {role:?}: {got}, expected {want}",
                    row.method, row.listed
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
