//! The admin API: merchants create items and activities; other merchants get 404,
//! read-only roles 403, no token 401, malformed bodies 400 with a code; none of those
//! changes anything.

use crate::support::{
    app::{json, spawn_app, with_session, TestApp},
    fixtures::Caller,
};
use contract::Role;
use reqwest::Method;
use serde_json::{json, Value};

fn activity_body(item_id: i64, starts_in_minutes: i64) -> Value {
    let starts = chrono::Utc::now() + chrono::Duration::minutes(starts_in_minutes);
    json!({
        "title": "Singles' Day",
        "starts_at": starts,
        "ends_at": starts + chrono::Duration::hours(1),
        "kind": "standard",
        "pay_timeout_s": 900,
        "items": [{ "item_id": item_id, "stock": 100, "per_user_limit": 2, "price_cents": 4990 }]
    })
}

async fn create_activity(app: &TestApp, caller: &Caller, body: &Value) -> (u16, Value) {
    json(
        app.post_json("/admin/api/activities", Some(caller), body)
            .await,
    )
    .await
}

async fn create_item(app: &TestApp, caller: &Caller, name: &str) -> i64 {
    let (status, body) = json(
        app.post_json(
            "/admin/api/items",
            Some(caller),
            &json!({ "name": name, "description": "d", "price_cents": 9990 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().expect("id")
}

#[tokio::test]
async fn a_merchant_registers_an_item_and_an_activity_and_reads_live_figures() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;

    let (status, body) = create_activity(&app, &merchant, &activity_body(item_id, 10)).await;
    assert_eq!(status, 201, "{body}");
    let activity_id = body["id"].as_i64().expect("id");

    let (status, detail) = json(
        app.get(
            &format!("/admin/api/activities/{activity_id}"),
            Some(&merchant),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["title"], "Singles' Day");
    assert_eq!(detail["items"][0]["item_id"], item_id);
    assert_eq!(detail["items"][0]["total_stock"], 100);
    assert_eq!(detail["items"][0]["sold"], 0);
    assert_eq!(detail["items"][0]["redis_stock"], Value::Null);
    assert_eq!(detail["prewarmed"], false);

    let (_, items) = json(app.get("/admin/api/items", Some(&merchant)).await).await;
    assert_eq!(items.as_array().expect("list").len(), 1);
    let (_, activities) = json(app.get("/admin/api/activities", Some(&merchant)).await).await;
    assert_eq!(activities[0]["total_stock"], 100);
}

#[tokio::test]
async fn another_merchant_gets_404_and_changes_nothing() {
    let app = spawn_app().await;
    let owner = app.caller(Role::Merchant, Some("acme")).await;
    let rival = app.caller(Role::Merchant, Some("globex")).await;
    let item_id = create_item(&app, &owner, "Phone").await;
    let (_, body) = create_activity(&app, &owner, &activity_body(item_id, 10)).await;
    let activity_id = body["id"].as_i64().expect("id");

    for path in [
        format!("/admin/api/items/{item_id}"),
        format!("/admin/api/activities/{activity_id}"),
    ] {
        let (status, body) = json(app.get(&path, Some(&rival)).await).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["code"], "NOT_FOUND");
    }
    let (status, _) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/items/{item_id}"),
            Some(&rival),
            &json!({ "name": "Stolen", "price_cents": 1 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/activities/{activity_id}"),
            Some(&rival),
            &activity_body(item_id, 20),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    // Nor may a rival sell the owner's item in an activity of its own.
    let (status, _) = create_activity(&app, &rival, &activity_body(item_id, 10)).await;
    assert_eq!(status, 404);
    let (_, rival_items) = json(app.get("/admin/api/items", Some(&rival)).await).await;
    assert_eq!(rival_items, json!([]));

    let name: String = sqlx::query_scalar("SELECT name FROM items WHERE id = $1")
        .bind(item_id)
        .fetch_one(&app.db)
        .await
        .expect("item");
    assert_eq!(name, "Phone");
    assert_eq!(app.count("activities").await, 1);
}

#[tokio::test]
async fn read_only_roles_get_403_on_writes_and_change_nothing() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;
    for role in [Role::Sre, Role::Ops] {
        let reader = app.caller(role, None).await;
        let (status, body) = json(
            app.post_json(
                "/admin/api/items",
                Some(&reader),
                &json!({ "name": "x", "price_cents": 1, "merchant_id": 1 }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 403, "{role}: {body}");
        assert_eq!(body["code"], "FORBIDDEN");
        let (status, _) = create_activity(&app, &reader, &activity_body(item_id, 10)).await;
        assert_eq!(status, 403);
        let (status, _) = json(
            app.send_json(
                Method::PUT,
                &format!("/admin/api/items/{item_id}"),
                Some(&reader),
                &json!({ "name": "Renamed", "price_cents": 1 }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 403);
        // Reading is what these roles are for.
        let (status, _) = json(
            app.get(&format!("/admin/api/items/{item_id}"), Some(&reader))
                .await,
        )
        .await;
        assert_eq!(status, 200);
    }
    assert_eq!(app.count("items").await, 1);
    assert_eq!(app.count("activities").await, 0);
}

#[tokio::test]
async fn no_or_bad_credentials_get_401() {
    let app = spawn_app().await;
    let (status, body) = json(app.get("/admin/api/items", None).await).await;
    assert_eq!(status, 401);
    assert_eq!(body["code"], "UNAUTHENTICATED");
    let (status, _) = json(
        app.post_json(
            "/admin/api/items",
            None,
            &json!({ "name": "x", "price_cents": 1 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 401);
    let forged = app
        .client
        .get(format!("{}/admin/api/items", app.address))
        .header("Authorization", "Bearer not-a-token")
        .send()
        .await
        .expect("sent");
    assert_eq!(forged.status(), 401);
    let forged_cookie = with_session(
        app.client.get(format!("{}/admin/api/items", app.address)),
        "deadbeef",
    )
    .send()
    .await
    .expect("sent");
    assert_eq!(forged_cookie.status(), 401);
    assert_eq!(app.count("items").await, 0);
}

/// A refusal of a form's input names the field by the console form's label (prices in
/// yuan), never by its JSON name: the merchant who reads it typed into the form.
#[tokio::test]
async fn refusals_name_fields_by_the_forms_labels_and_prices_in_yuan() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;
    let (status, body) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &json!({ "name": "x", "price_cents": -1 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "Price (yuan) must be between 0.00 and 100000000.00"
    );
    // An admin's item names its merchant, as the console's form for an admin asks.
    let admin = app.caller(Role::Admin, None).await;
    let (status, body) = json(
        app.post_json(
            "/admin/api/items",
            Some(&admin),
            &json!({ "name": "x", "price_cents": 100 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "Merchant (ID): an admin must name the merchant it belongs to"
    );
    type Breaker = fn(&mut Value, Value);
    let cases: [(&str, Breaker); 6] = [
        ("Ends must be after Starts", |a, _| {
            a["ends_at"] = a["starts_at"].clone()
        }),
        ("Title must not be empty", |a, _| a["title"] = json!(" ")),
        (
            "Pay within (s) must be between 10 and 86400 seconds",
            |a, _| a["pay_timeout_s"] = json!(1),
        ),
        ("Item 1, Stock must be between 1 and 10000000", |a, _| {
            a["items"][0]["stock"] = json!(0)
        }),
        ("Item 1, Limit / user must not exceed its Stock", |a, _| {
            a["items"][0]["per_user_limit"] = json!(101)
        }),
        (
            "Item 2, Sale price (yuan) must be between 0.00 and 100000000.00",
            |a, other| {
                a["items"].as_array_mut().expect("items").push(
                    json!({ "item_id": other, "stock": 5, "per_user_limit": 1, "price_cents": -5 }),
                )
            },
        ),
    ];
    let other = create_item(&app, &merchant, "Case").await;
    for (said, break_it) in cases {
        let mut body = activity_body(item_id, 10);
        break_it(&mut body, json!(other));
        let (status, refusal) = create_activity(&app, &merchant, &body).await;
        assert_eq!(status, 400, "{said}: {refusal}");
        assert_eq!(refusal["code"], "BAD_REQUEST", "{refusal}");
        assert_eq!(refusal["message"], said, "{refusal}");
    }
    assert_eq!(app.count("activities").await, 0);
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_code_and_change_nothing() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;
    let raw = |path: &'static str, body: &'static str| {
        app.client
            .post(format!("{}{path}", app.address))
            .header("Authorization", format!("Bearer {}", merchant.token))
            .header("Content-Type", "application/json")
            .body(body)
    };
    for (path, body) in [
        ("/admin/api/items", "{not json"),
        ("/admin/api/items", r#"{"name": "x"}"#),
        (
            "/admin/api/items",
            r#"{"name": "x", "price_cents": "free"}"#,
        ),
        ("/admin/api/items", r#"{"name": "", "price_cents": 1}"#),
        ("/admin/api/items", r#"{"name": "x", "price_cents": -1}"#),
        (
            "/admin/api/items",
            r#"{"name": "x", "price_cents": 1, "evil": true}"#,
        ),
        ("/admin/api/activities", r#"{"title": "t"}"#),
        ("/admin/api/activities", "[]"),
    ] {
        let (status, response) = json(raw(path, body).send().await.expect("sent")).await;
        assert_eq!(status, 400, "{path} {body}: {response}");
        assert_eq!(response["code"], "BAD_REQUEST", "{response}");
        assert!(!response["message"].as_str().unwrap_or_default().is_empty());
    }
    let mut broken = activity_body(item_id, 10);
    broken["items"][0]["stock"] = json!(0);
    let (status, _) = create_activity(&app, &merchant, &broken).await;
    assert_eq!(status, 400);
    let mut backwards = activity_body(item_id, 10);
    backwards["ends_at"] = backwards["starts_at"].clone();
    let (status, _) = create_activity(&app, &merchant, &backwards).await;
    assert_eq!(status, 400);
    let (status, body) = json(
        app.get("/admin/api/items/not-a-number", Some(&merchant))
            .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "BAD_REQUEST");
    let oversized = "x".repeat(2 * 1024 * 1024);
    let response = app
        .client
        .post(format!("{}/admin/api/items", app.address))
        .header("Authorization", format!("Bearer {}", merchant.token))
        .header("Content-Type", "application/json")
        .body(format!(r#"{{"name": "{oversized}", "price_cents": 1}}"#))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.expect("json body");
    assert_eq!(body["code"], "PAYLOAD_TOO_LARGE");

    assert_eq!(app.count("items").await, 1);
    assert_eq!(app.count("activities").await, 0);
}

#[tokio::test]
async fn seated_activities_keep_their_seat_map() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ticket = create_item(&app, &merchant, "Concert ticket").await;
    let mut body = activity_body(ticket, 10);
    body["kind"] = json!("seated");
    body["items"][0]["stock"] = json!(3);
    body["items"][0]["per_user_limit"] = json!(2);
    body["seats"] = json!(["B201", "B202", "B203"]);
    let (status, created) = create_activity(&app, &merchant, &body).await;
    assert_eq!(status, 201, "{created}");
    let (_, detail) = json(
        app.get(
            &format!("/admin/api/activities/{}", created["id"]),
            Some(&merchant),
        )
        .await,
    )
    .await;
    assert_eq!(detail["seats"], json!(["B201", "B202", "B203"]));

    body["seats"] = json!(["B201", "B201", "B203"]);
    let (status, _) = create_activity(&app, &merchant, &body).await;
    assert_eq!(status, 400);
    assert_eq!(app.count("seats").await, 3);
}

#[tokio::test]
async fn an_activity_is_editable_until_it_starts() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;
    let (_, created) = create_activity(&app, &merchant, &activity_body(item_id, 10)).await;
    let id = created["id"].as_i64().expect("id");

    let mut edited = activity_body(item_id, 30);
    edited["title"] = json!("Renamed sale");
    edited["items"][0]["stock"] = json!(50);
    let (status, body) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/activities/{id}"),
            Some(&merchant),
            &edited,
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, detail) = json(
        app.get(&format!("/admin/api/activities/{id}"), Some(&merchant))
            .await,
    )
    .await;
    assert_eq!(detail["title"], "Renamed sale");
    assert_eq!(detail["items"][0]["total_stock"], 50);

    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .expect("start the sale");
    let (status, body) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/activities/{id}"),
            Some(&merchant),
            &edited,
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "ACTIVITY_LOCKED");
}

#[tokio::test]
async fn an_admin_writes_for_a_named_merchant() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let admin = app.caller(Role::Admin, None).await;
    let merchant_id: i64 = sqlx::query_scalar("SELECT id FROM merchants WHERE name = 'acme'")
        .fetch_one(&app.db)
        .await
        .expect("merchant");
    let (status, body) = json(
        app.post_json(
            "/admin/api/items",
            Some(&admin),
            &json!({ "name": "x", "price_cents": 1 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = json(
        app.post_json(
            "/admin/api/items",
            Some(&admin),
            &json!({ "name": "Gift", "price_cents": 1, "merchant_id": merchant_id }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (_, items) = json(app.get("/admin/api/items", Some(&merchant)).await).await;
    assert_eq!(items[0]["name"], "Gift");
}

#[tokio::test]
async fn an_activity_entirely_in_the_past_is_refused_with_a_code() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_id = create_item(&app, &merchant, "Phone").await;
    // Started three hours ago, ended two hours ago.
    let past = activity_body(item_id, -180);
    let (status, body) = create_activity(&app, &merchant, &past).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "ENDS_IN_THE_PAST", "{body}");
    assert_eq!(app.count("activities").await, 0);

    // Nor may an edit move an upcoming activity into the past.
    let (_, created) = create_activity(&app, &merchant, &activity_body(item_id, 10)).await;
    let id = created["id"].as_i64().expect("id");
    let (status, body) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/activities/{id}"),
            Some(&merchant),
            &past,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "ENDS_IN_THE_PAST", "{body}");
    let (_, detail) = json(
        app.get(&format!("/admin/api/activities/{id}"), Some(&merchant))
            .await,
    )
    .await;
    let ends_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(detail["ends_at"].clone()).expect("ends_at");
    assert!(ends_at > chrono::Utc::now(), "unchanged: {detail}");
}

/// The audit log is filtered by the server: a filter reaches rows far older than the first
/// page, the pages and `has_more` count only the rows kept, and a bad filter is refused
/// naming the console's labels.
#[tokio::test]
async fn the_audit_log_filters_on_the_server_and_pages_only_what_it_keeps() {
    let app = spawn_app().await;
    let sre = app.caller(Role::Sre, None).await;
    // A day ago, one flip and one action of a night drill; since then 60 routine requeues.
    sqlx::query(
        "INSERT INTO switch_audit (actor, source, path, new_value, reason, etcd_revision, created_at)
         VALUES ('oncall', 'cli', 'switches/entry', 'closed', 'Night DRILL at the gate', 7,
                 now() - interval '1 day')",
    )
    .execute(&app.db)
    .await
    .expect("the drill's flip");
    sqlx::query(
        "INSERT INTO ops_audit (actor, source, action, target, detail, created_at)
         VALUES ('oncall', 'console', 'dead_letter.requeue_all', 'dead_letters',
                 '{\"reason\": \"night drill\", \"requeued\": 3}', now() - interval '1 day')",
    )
    .execute(&app.db)
    .await
    .expect("the drill's action");
    sqlx::query(
        "INSERT INTO ops_audit (actor, source, action, target)
         SELECT 'ops', 'api', 'dead_letter.requeue', 'dead_letter:' || n FROM generate_series(1, 60) n",
    )
    .execute(&app.db)
    .await
    .expect("routine requeues");
    let audit = |query: &str| {
        let app = &app;
        let sre = &sre;
        let path = format!("/admin/api/audit{query}");
        async move { json(app.get(&path, Some(sre)).await).await }
    };
    let targets = |page: &Value| -> Vec<String> {
        page["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|entry| {
                format!(
                    "{}:{}",
                    entry["kind"].as_str().unwrap_or("?"),
                    entry["target"].as_str().unwrap_or("?")
                )
            })
            .collect()
    };

    // Unfiltered, the drill is not on the first page.
    let (status, first) = audit("").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["has_more"], true);
    assert!(!targets(&first)
        .iter()
        .any(|t| t.contains("switches/entry") || t.ends_with(":dead_letters")));

    // Any case, both kinds, in who, action, target, change, reason or detail.
    let (status, drill) = audit("?containing=%20night%20drill%20").await;
    assert_eq!(status, 200, "{drill}");
    assert_eq!(
        targets(&drill),
        ["ops:dead_letters", "switch:switches/entry"],
        "{drill}"
    );
    assert_eq!(drill["has_more"], false);
    let (_, flips) = audit("?kind=switch&containing=DRILL").await;
    assert_eq!(targets(&flips), ["switch:switches/entry"], "{flips}");
    let (_, gate) = audit("?containing=the%20gate").await;
    assert_eq!(targets(&gate), ["switch:switches/entry"], "{gate}");

    // Paging counts the kept rows only: the 61 operator actions (and any the app wrote
    // itself) are a page of 50 and the rest.
    let actions = app.count("ops_audit").await;
    assert!((61..100).contains(&actions), "{actions}");
    let (_, ops) = audit("?kind=ops").await;
    assert_eq!(ops["entries"].as_array().map(Vec::len), Some(50));
    assert_eq!(ops["has_more"], true);
    let (_, older) = audit("?kind=ops&page=2").await;
    assert_eq!(
        older["entries"].as_array().map(|rows| rows.len() as i64),
        Some(actions - 50),
        "{older}"
    );
    assert_eq!(older["has_more"], false);
    assert!(targets(&older).iter().all(|t| t.starts_with("ops:")));
    let (_, blank) = audit("?kind=&containing=%20%20").await;
    assert_eq!(
        blank["entries"].as_array().map(Vec::len),
        Some(50),
        "{blank}"
    );
    assert_eq!(blank["has_more"], true);

    // Bad filters: 400 with a code, in the words of the form's labels.
    for (query, said) in [
        (
            "?kind=flips",
            "Kind must be switch (switch flips) or ops (operator actions), not flips",
        ),
        (
            &*format!("?containing={}", "x".repeat(201)),
            "Containing is longer than 200 characters",
        ),
    ] {
        let (status, refusal) = audit(query).await;
        assert_eq!(status, 400, "{query}: {refusal}");
        assert_eq!(refusal["code"], "BAD_REQUEST");
        assert_eq!(refusal["message"], said);
    }
}
