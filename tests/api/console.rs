//! The server-rendered console: pages render on the server, unauthenticated visitors are
//! sent to the login page (which brings them back to the page they asked for, and never off
//! the site), and the hydration bundle is referenced and served.

use crate::support::app::{json, spawn_app};
use contract::Role;

#[tokio::test]
async fn the_login_page_renders_with_the_hydration_bundle() {
    let app = spawn_app().await;
    let response = app.get("/login", None).await;
    assert_eq!(response.status(), 200);
    let html = response.text().await.expect("html");
    assert!(html.contains(r#"name="username""#), "{html}");
    assert!(html.contains(r#"name="password""#));
    assert!(
        html.contains("/pkg/seckill_console"),
        "no hydration script in {html}"
    );
}

#[tokio::test]
async fn signed_out_visitors_are_sent_to_the_login_page_which_returns_to_the_page_asked_for() {
    let app = spawn_app().await;
    // As a browser asks: leptos answers a real redirect only to requests accepting HTML.
    let response = app
        .client
        .get(format!("{}/items?page=2", app.address))
        .header("Accept", "text/html")
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let html = response.text().await.unwrap_or_default();
    assert!(
        matches!(status, 302 | 303),
        "status {status}, location {location:?}: {html}"
    );
    assert_eq!(location.as_deref(), Some("/login?next=/items%3Fpage%3D2"));
    assert!(!html.contains("item-list"));
}

#[tokio::test]
async fn a_signed_in_merchant_sees_its_items_rendered_on_the_server() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let rival = app.caller(Role::Merchant, Some("globex")).await;
    for (caller, name) in [(&merchant, "Acme rocket"), (&rival, "Globex laser")] {
        let response = app
            .post_json(
                "/admin/api/items",
                Some(caller),
                &serde_json::json!({ "name": name, "price_cents": 1250 }),
            )
            .await;
        assert_eq!(response.status(), 201);
    }
    let session = app.console_session(&merchant).await;
    let html = app.console_page("/items", &session).await;
    assert!(html.contains("Acme rocket"), "{html}");
    assert!(html.contains("12.50"));
    assert!(
        !html.contains("Globex laser"),
        "another merchant's item leaked: {html}"
    );
}

#[tokio::test]
async fn a_wrong_password_gets_a_4xx_from_the_login_server_function() {
    use leptos::server_fn::ServerFn;
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    let attempt = |password: &str| {
        app.client
            .post(format!("{}{}", app.address, app::api::Login::PATH))
            .header("origin", &app.address)
            .form(&[("username", ops.username.as_str()), ("password", password)])
            .send()
    };
    let refused = attempt("wrong-password").await.expect("sent");
    assert_eq!(refused.status(), 400);
    assert!(refused
        .text()
        .await
        .expect("body")
        .contains("wrong username or password"));
    assert_eq!(app.count("admin_sessions").await, 0);

    let accepted = attempt(&ops.password).await.expect("sent");
    assert!(accepted.status().is_success() || accepted.status().is_redirection());
    let cookie = accepted
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie");
    assert!(cookie.starts_with(&format!("{}=", contract::SESSION_COOKIE)));
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
}

#[tokio::test]
async fn a_sign_in_returns_to_the_page_it_was_asked_from_and_never_off_the_site() {
    use leptos::server_fn::ServerFn;
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    for (next, lands) in [
        ("/orders?page=2", "/orders?page=2"),
        ("//evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("", "/"),
    ] {
        // A plain form post, as the login page sends before hydration.
        let response = app
            .client
            .post(format!("{}{}", app.address, app::api::Login::PATH))
            .header("origin", &app.address)
            .header("Accept", "text/html")
            .form(&[
                ("username", ops.username.as_str()),
                ("password", ops.password.as_str()),
                ("next", next),
            ])
            .send()
            .await
            .expect("sent");
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(location.as_deref(), Some(lands), "next={next}");
    }
}

#[tokio::test]
async fn ops_pre_warms_an_activity_from_the_console_and_sre_is_refused() {
    use leptos::server_fn::ServerFn;
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let (status, item) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &serde_json::json!({ "name": "Cup", "price_cents": 100 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{item}");
    let item_id = item["id"].as_i64().expect("item id");
    let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    let (status, activity) = json(
        app.post_json(
            "/admin/api/activities",
            Some(&merchant),
            &serde_json::json!({
                "title": "Later", "kind": "standard", "pay_timeout_s": 900,
                "starts_at": starts, "ends_at": starts + chrono::Duration::hours(1),
                "items": [{ "item_id": item_id, "stock": 40, "per_user_limit": 1, "price_cents": 100 }]
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{activity}");
    let activity_id = activity["id"].as_i64().expect("activity id");
    let stock_key = app
        .state
        .redis
        .stock_key(contract::SaleItem::new(activity_id, item_id));
    let redis_stock = || {
        app.state
            .redis
            .get_integers(std::slice::from_ref(&stock_key))
    };
    let activity = activity_id.to_string();
    let prewarm_as = |session: String| {
        let (app, activity) = (&app, &activity);
        async move {
            app.console_call(
                app::api::PrewarmActivity::PATH,
                &session,
                &[("id", activity)],
            )
            .await
        }
    };
    let mut sessions = Vec::new();
    for role in [Role::Sre, Role::Ops] {
        let caller = app.caller(role, None).await;
        sessions.push(app.console_session(&caller).await);
    }
    let [sre, ops] = <[String; 2]>::try_from(sessions).expect("two sessions");

    let refused = prewarm_as(sre).await;
    assert_eq!(refused.status(), 403);
    assert!(refused
        .text()
        .await
        .expect("body")
        .contains("your role may not do this"));
    assert_eq!(redis_stock().await.expect("redis"), vec![None]);

    let response = prewarm_as(ops.clone()).await;
    assert_eq!(response.status(), 200);
    let report: contract::PrewarmReport = response.json().await.expect("report");
    assert_eq!(report.activity_id, activity_id);
    assert_eq!(report.items.len(), 1);
    assert_eq!(
        (report.items[0].total_stock, report.items[0].redis_stock),
        (40, 40)
    );
    assert_eq!(redis_stock().await.expect("redis"), vec![Some(40)]);

    // The pages render the button and, now, the pre-warmed state.
    for (path, expected) in [
        (format!("/activities/{activity_id}"), r#"id="prewarm-form""#),
        (format!("/activities/{activity_id}"), ">pre-warmed<"),
        ("/prewarm".to_owned(), "Later"),
    ] {
        let html = app.console_page(&path, &ops).await;
        assert!(html.contains(expected), "{path} lacks {expected}: {html}");
    }
}

/// A console `save_activity` call with a JSON body, as the hydrated form sends it.
async fn save_activity(
    app: &crate::support::app::TestApp,
    session: &str,
    input: serde_json::Value,
) -> (u16, serde_json::Value) {
    use leptos::server_fn::ServerFn;
    let request = app
        .client
        .post(format!("{}{}", app.address, app::api::SaveActivity::PATH))
        .header("origin", &app.address)
        .json(&serde_json::json!({ "id": null, "input": input }));
    json(
        crate::support::app::with_session(request, session)
            .send()
            .await
            .expect("sent"),
    )
    .await
}

fn activity_input(
    item_id: i64,
    starts_in_minutes: i64,
    price_cents: serde_json::Value,
) -> serde_json::Value {
    let starts = chrono::Utc::now() + chrono::Duration::minutes(starts_in_minutes);
    serde_json::json!({
        "title": "Console sale",
        "starts_at": starts,
        "ends_at": starts + chrono::Duration::hours(1),
        "kind": "standard",
        "pay_timeout_s": 900,
        "items": [{ "item_id": item_id, "stock": 10, "per_user_limit": 1, "price_cents": price_cents }]
    })
}

#[tokio::test]
async fn bad_prices_in_console_forms_get_a_400_with_the_admin_apis_code_and_change_nothing() {
    use leptos::server_fn::ServerFn;
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let session = app.console_session(&merchant).await;
    // The admin API's code for a price that is no price.
    let (status, api) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &serde_json::json!({ "name": "x", "price_cents": -500 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{api}");
    for price in ["-5", "abc", "12.345"] {
        let response = app
            .console_call(
                app::api::SaveItem::PATH,
                &session,
                &[("name", "Phone"), ("description", ""), ("price", price)],
            )
            .await;
        let (status, body) = json(response).await;
        assert_eq!(status, 400, "price {price}: {body}");
        assert_eq!(body["code"], api["code"], "price {price}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(price)),
            "the message names what was typed: {body}"
        );
    }
    assert_eq!(app.count("items").await, 0);

    let item_id = {
        let (status, body) = json(
            app.post_json(
                "/admin/api/items",
                Some(&merchant),
                &serde_json::json!({ "name": "Phone", "price_cents": 100 }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_i64().expect("id")
    };
    for price in [
        serde_json::json!(-500),
        serde_json::json!("abc"),
        serde_json::json!(12.345),
    ] {
        let (status, body) =
            save_activity(&app, &session, activity_input(item_id, 10, price.clone())).await;
        assert_eq!(status, 400, "price_cents {price}: {body}");
        assert_eq!(body["code"], "BAD_REQUEST", "price_cents {price}: {body}");
    }
    assert_eq!(app.count("activities").await, 0);
}

#[tokio::test]
async fn the_console_refuses_an_activity_entirely_in_the_past_with_the_admin_apis_code() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let session = app.console_session(&merchant).await;
    let (_, item) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &serde_json::json!({ "name": "Phone", "price_cents": 100 }),
        )
        .await,
    )
    .await;
    let item_id = item["id"].as_i64().expect("id");
    let (status, body) = save_activity(
        &app,
        &session,
        activity_input(item_id, -180, serde_json::json!(100)),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "ENDS_IN_THE_PAST", "{body}");
    assert_eq!(app.count("activities").await, 0);
    let (status, body) = save_activity(
        &app,
        &session,
        activity_input(item_id, 10, serde_json::json!(100)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// The console's bundle as `scripts/build-front.sh` leaves it: the page names content-hashed
/// files, each is sent as the smallest copy the browser accepts (brotli, then gzip, then as
/// it is) and may be kept for a year, while a name that outlives its content is revalidated.
#[tokio::test]
async fn the_console_bundle_is_content_named_precompressed_and_kept_for_a_year() {
    let app = spawn_app().await;
    let html = app.get("/login", None).await.text().await.expect("html");
    let named = |extension: &str| -> String {
        let prefix = "/pkg/seckill_console.";
        let found = html.match_indices(prefix).find_map(|(at, _)| {
            let rest = &html[at + prefix.len()..];
            let (hash, tail) = rest.split_at_checked(16)?;
            let hashed = hash.bytes().all(|b| b.is_ascii_hexdigit());
            (hashed && tail.starts_with(&format!(".{extension}\"")))
                .then(|| format!("{prefix}{hash}.{extension}"))
        });
        found.unwrap_or_else(|| panic!("no content-named .{extension} in {html}"))
    };
    for path in [named("js"), named("wasm"), named("css")] {
        let mut sizes = Vec::new();
        for (accepted, encoding) in [("br, gzip", "br"), ("gzip", "gzip"), ("identity", "")] {
            let response = app
                .client
                .get(format!("{}{path}", app.address))
                .header("Accept-Encoding", accepted)
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 200, "{path} as {accepted}");
            let header = |name: &str| {
                let value = response.headers().get(name);
                value.and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
            };
            assert_eq!(header("content-encoding"), encoding, "{path} as {accepted}");
            let caching = header("cache-control");
            assert!(caching.contains("immutable") && caching.contains("max-age=31536000"));
            assert!(header("vary")
                .to_ascii_lowercase()
                .contains("accept-encoding"));
            sizes.push(response.bytes().await.expect("body").len());
        }
        assert!(
            sizes[0] < sizes[1] && sizes[1] < sizes[2],
            "{path}: brotli, gzip and plain sizes {sizes:?}"
        );
    }
    let icon = app.get("/favicon.svg", None).await;
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["cache-control"], "no-cache");
}
