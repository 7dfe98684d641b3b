//! `GET /api/openapi.json` against a live instance: the document lists every route the
//! routers serve, and schemathesis fuzzes the buyer and admin APIs from it. No answer may
//! be a 5xx, every 4xx must be the `{code, message}` body, every answer must match the
//! document, and the refused requests must leave the stores as they were.
//!
//! The fuzz needs schemathesis (scripts/setup.sh installs it; `SECKILL_SCHEMATHESIS` says
//! where); without it the test fails and says so.

use crate::support::{
    app::{json, spawn_app, TestApp},
    fixtures::{open_sale, token, Sale},
};
use contract::Role;
use etcd_client::GetOptions;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Test cases per operation and phase: enough to hit every parameter's edge cases, few
/// enough that both runs stay within a couple of minutes.
const EXAMPLES_PER_OPERATION: &str = "15";

async fn document(app: &TestApp) -> Value {
    let (status, body) = json(app.get("/api/openapi.json", None).await).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// (method, path) of every operation in the document.
fn documented(document: &Value) -> BTreeSet<(String, String)> {
    let paths = document["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("path item")
                .keys()
                .map(move |method| (method.to_uppercase(), path.clone()))
        })
        .collect()
}

/// An axum path template under `prefix` as the document writes it (`{*rest}` is `{rest}`).
fn as_documented(prefix: &str, method: &reqwest::Method, template: &str) -> (String, String) {
    (
        method.as_str().to_owned(),
        format!("{prefix}{}", template.replace("{*", "{")),
    )
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let app = spawn_app().await;
    let document = document(&app).await;
    let served: BTreeSet<(String, String)> = seckill::openapi::buyer_listed()
        .iter()
        .map(|(method, path)| as_documented("/api", method, path))
        .chain(
            seckill::admin::routes::listed()
                .iter()
                .map(|(method, path)| as_documented("/admin/api", method, path)),
        )
        .collect();
    assert_eq!(documented(&document), served);
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("security schemes");
    for scheme in [
        "buyer_jwt",
        "admin_token",
        "admin_session",
        "payment_signature",
    ] {
        assert!(schemes.contains_key(scheme), "no {scheme} in {schemes:?}");
    }
    assert!(document["components"]["schemas"]["ErrorBody"].is_object());
    // Bodies, query parameters and path values are typed as the handlers' extractors are.
    let paths = &document["paths"];
    assert_eq!(
        paths["/admin/api/items"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            ["$ref"],
        "#/components/schemas/ItemInput"
    );
    assert!(document["components"]["schemas"]["ActivityItemInput"].is_object());
    let challenge = &paths["/api/challenge"]["get"]["parameters"][0];
    assert_eq!(
        (&challenge["name"], &challenge["in"], &challenge["required"]),
        (&json!("activity_id"), &json!("query"), &json!(true))
    );
    let item = &paths["/admin/api/items/{id}"]["get"]["parameters"][0];
    assert_eq!(item["schema"]["type"], "integer", "{item}");
    let order = &paths["/api/orders/{id}"]["get"]["parameters"][0];
    assert_eq!(order["schema"]["format"], "uuid", "{order}");
}

/// What a refused request could have written: the rows of every table, the Redis keys of
/// the deployment and the sale's stock, the switches and limits in etcd.
#[derive(Debug, PartialEq)]
struct Stores {
    rows: BTreeMap<String, i64>,
    redis_keys: BTreeSet<String>,
    stock: i64,
    etcd: BTreeMap<String, String>,
}

async fn stores(app: &TestApp, sale: &Sale) -> Stores {
    // Left out: `baseline_reports`, which every instance writes on its own schedule,
    // whatever the requests.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
           AND table_name <> 'baseline_reports'",
    )
    .fetch_all(&app.db)
    .await
    .expect("tables");
    let mut rows = BTreeMap::new();
    for table in tables {
        let count = app.count(&table).await;
        rows.insert(table, count);
    }
    let mut connection = app.state.redis.connection();
    let redis_keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", app.state.settings.redis_prefix))
        .query_async(&mut connection)
        .await
        .expect("keys");
    let mut client = etcd_client::Client::connect(&app.state.settings.etcd_endpoints, None)
        .await
        .expect("etcd client");
    let mut etcd = BTreeMap::new();
    for folder in ["switches/", "limits/"] {
        let response = client
            .get(
                format!("{}/{folder}", app.state.settings.etcd_prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .expect("etcd read");
        for kv in response.kvs() {
            etcd.insert(
                kv.key_str().expect("utf-8").to_owned(),
                kv.value_str().expect("utf-8").to_owned(),
            );
        }
    }
    Stores {
        rows,
        // The one write an accepted fuzz request makes: `GET /api/challenge` with the sale's
        // id issues the buyer a challenge. Every other operation either only reads or is
        // refused (the buy bodies are read raw, so the document has no schema to fill).
        redis_keys: redis_keys
            .into_iter()
            .filter(|key| !key.contains(":challenge:"))
            .collect(),
        stock: app.redis_stock(sale).await,
        etcd,
    }
}

/// Runs schemathesis on the operations whose id matches `operations` (ids are the method
/// and the path's words: `get_admin_api_items_id`), authenticated by `authorization`.
async fn fuzz(app: &TestApp, operations: &str, authorization: &str) {
    let binary = std::env::var("SECKILL_SCHEMATHESIS")
        .expect("SECKILL_SCHEMATHESIS is unset: source scripts/env.sh (scripts/setup.sh installs schemathesis)");
    assert!(
        Path::new(&binary).exists(),
        "schemathesis is not installed at {binary}: run `scripts/setup.sh python`"
    );
    let hooks = Path::new(env!("CARGO_MANIFEST_DIR")).join("api/schemathesis");
    // Schemathesis keeps a cache of crashes in its working directory: not in the checkout.
    let workdir = std::env::temp_dir().join(format!(
        "seckill-schemathesis-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&workdir).expect("working directory");
    let output = tokio::process::Command::new(&binary)
        .current_dir(&workdir)
        .arg("run")
        .arg(format!("{}/api/openapi.json", app.address))
        .args(["--url", &app.address])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,ignored_auth,error_has_code",
        ])
        .args(["--include-operation-id-regex", operations])
        .args(["--max-examples", EXAMPLES_PER_OPERATION])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--seed", "1"])
        .args(["--workers", "2"])
        .args(["--generation-with-security-parameters", "false"])
        .args(["--header", &format!("Authorization: {authorization}")])
        .arg("--no-color")
        .env("PYTHONPATH", &hooks)
        .env("SCHEMATHESIS_HOOKS", "seckill_checks")
        .output()
        .await
        .expect("schemathesis runs");
    let _ = std::fs::remove_dir_all(&workdir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems in {operations}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // What was run, for `--nocapture`: operations, phases, cases.
    println!("{stdout}");
}

#[tokio::test]
async fn openapi_fuzz_of_the_buyer_and_admin_apis_finds_nothing() {
    let app = spawn_app().await;
    // An open sale, so the buyer routes reach past "no such activity".
    let sale = open_sale(&app, 10, 2).await;
    // The read-only role: every write the fuzz tries is refused, so no store may change.
    let sre = app.caller(Role::Sre, None).await;
    // Reads with every permission, so the fuzz gets past the role checks.
    let admin = app.caller(Role::Admin, None).await;
    let before = stores(&app, &sale).await;
    fuzz(&app, "^[a-z]+_api_", &format!("Bearer {}", token(&app, 7))).await;
    fuzz(&app, "^[a-z]+_admin_api_", &format!("Bearer {}", sre.token)).await;
    fuzz(&app, "^get_admin_api_", &format!("Bearer {}", admin.token)).await;
    assert_eq!(
        stores(&app, &sale).await,
        before,
        "refused requests changed a store"
    );
}
