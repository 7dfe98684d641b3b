//! `GET /api/openapi.json` against a live instance: the document lists every route the
//! routers serve with its request and its answer, and schemathesis fuzzes the buyer and
//! admin APIs from it, as a buyer, as the role that watches and as every role that may
//! write. No answer may be a 5xx, every 4xx must be the `{code, message}` body, every answer
//! (a success's body included) must match the document, and the refused requests must
//! leave the stores as they were.
//!
//! The fuzz needs schemathesis (scripts/setup.sh installs it; `SECKILL_SCHEMATHESIS` says
//! where); without it the test fails and says so.

use crate::support::{
    app::{json, spawn_app, TestApp},
    fixtures::{open_sale, token, Sale},
};
use contract::Role;
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
            ops::admin::routes::listed()
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
    // Successful answers are typed as the handlers' return types are: the status (a fixed
    // 200, or 2XX where the handler picks 201, 202 or 204) and the JSON body.
    let answer = |path: &str, method: &str, status: &str| {
        paths[path][method]["responses"][status]["content"]["application/json"]["schema"].clone()
    };
    let item = answer("/admin/api/items/{id}", "get", "200");
    assert_eq!(item["type"], "object", "{item}");
    assert!(item["properties"]["price_cents"].is_object(), "{item}");
    let items = answer("/admin/api/items", "get", "200");
    assert_eq!(items["type"], "array", "{items}");
    let started = answer("/admin/api/reconciliations", "post", "2XX");
    assert!(started["properties"]["id"].is_object(), "{started}");
    let bought = answer("/api/seckill/buy", "post", "200");
    assert_eq!(
        bought["required"],
        json!(["order_id", "status"]),
        "{bought}"
    );
    // Every operation says what it answers on success but the event streams.
    let unsaid: Vec<String> = documented(&document)
        .into_iter()
        .filter(|(method, path)| {
            let answer = &paths[path][method.to_lowercase()]["responses"]["2XX"];
            answer["description"] == seckill::openapi::BY_HAND
        })
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    assert_eq!(
        unsaid,
        ["GET /admin/api/dashboard/stream", "GET /api/events"]
    );
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
    let rows = app.rows_of_every_table().await;
    let redis_keys = app.redis_keys("*").await;
    let etcd = app.switches_in_etcd().await;
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
        // One worker: with two, hypothesis (under schemathesis) parses its strategies' source
        // from two threads at once, and CPython 3.11's parser then fails with "AST constructor
        // recursion depth mismatch", a crash of the tool that fails the run at random.
        .args(["--workers", "1"])
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
    // The role that watches: every write the fuzz tries is refused but a reconciliation
    // report, which SRE may start (it writes its run and findings, nothing else).
    let sre = app.caller(Role::Sre, None).await;
    // Reads with every permission, so the fuzz gets past the role checks.
    let admin = app.caller(Role::Admin, None).await;
    let before = stores(&app, &sale).await;
    fuzz(&app, "^[a-z]+_api_", &format!("Bearer {}", token(&app, 7))).await;
    fuzz(&app, "^[a-z]+_admin_api_", &format!("Bearer {}", sre.token)).await;
    fuzz(&app, "^get_admin_api_", &format!("Bearer {}", admin.token)).await;
    let mut after = stores(&app, &sale).await;
    for table in ["reconciliation_runs", "reconciliation_findings"] {
        after.rows.insert(table.to_owned(), before.rows[table]);
    }
    assert_eq!(after, before, "refused requests changed a store");
}

/// The roles that may write, fuzzing every write of the admin API: what they are allowed
/// to do is done (so a success's body is checked against the document too), and whatever
/// the fuzz sends, no answer is a 5xx, a refusal has its `code`, and every answer is what
/// the document says.
#[tokio::test]
async fn openapi_fuzz_of_the_admin_writes_with_roles_that_may_write_finds_nothing() {
    let app = spawn_app().await;
    // A live sale to write to: its activity and item ids are the small ones the fuzz tries.
    open_sale(&app, 10, 2).await;
    let merchant = app.caller(Role::Merchant, Some("fuzz-shop")).await;
    let ops = app.caller(Role::Ops, None).await;
    let admin = app.caller(Role::Admin, None).await;
    for caller in [&merchant, &ops, &admin] {
        fuzz(
            &app,
            "^(post|put|delete)_admin_api_",
            &format!("Bearer {}", caller.token),
        )
        .await;
    }
}

/// A client generated from the document by openapi-python-client (PyPI) works without a
/// line written by hand around it: through its generated functions and models a merchant
/// creates an item and an activity, ops pre-warm the activity and close its entry
/// (`openapi_client/drive.py`). The stores then hold what the client was told.
#[tokio::test]
async fn a_client_generated_from_the_document_creates_an_activity_pre_warms_it_and_flips_a_switch()
{
    let generator = std::env::var("SECKILL_OPENAPI_PYTHON_CLIENT").expect(
        "SECKILL_OPENAPI_PYTHON_CLIENT is unset: source scripts/env.sh (scripts/setup.sh installs it)",
    );
    assert!(
        Path::new(&generator).exists(),
        "openapi-python-client is not installed at {generator}: run `scripts/setup.sh python`"
    );
    // The generated client's own dependencies (httpx, attrs, dateutil) are the generator's.
    let python = Path::new(&generator).with_file_name("python");
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("generated")).await;
    let ops = app.caller(Role::Ops, None).await;
    let workdir = std::env::temp_dir().join(format!(
        "seckill-openapi-client-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&workdir).expect("working directory");
    let document = workdir.join("openapi.json");
    std::fs::write(&document, document_text(&app).await).expect("the document");
    let generated = tokio::process::Command::new(&generator)
        .arg("generate")
        .arg("--path")
        .arg(&document)
        .arg("--output-path")
        .arg(workdir.join("seckill_client"))
        .args(["--meta", "none"])
        .output()
        .await
        .expect("openapi-python-client runs");
    assert!(
        generated.status.success(),
        "openapi-python-client could not generate a client:\n{}\n{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("api/openapi_client/drive.py");
    let driven = tokio::process::Command::new(&python)
        .arg(&driver)
        .args([&app.address, &merchant.token, &ops.token])
        .env("PYTHONPATH", &workdir)
        .output()
        .await
        .expect("the driver runs");
    let _ = std::fs::remove_dir_all(&workdir);
    let said = String::from_utf8_lossy(&driven.stdout).into_owned();
    assert!(
        driven.status.success(),
        "the generated client failed:\n{said}\n{}",
        String::from_utf8_lossy(&driven.stderr)
    );
    let field = |name: &str| -> String {
        said.split_whitespace()
            .find_map(|word| word.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in {said}"))
            .to_owned()
    };
    let activity: i64 = field("activity").parse().expect("activity id");
    assert_eq!(field("prewarmed"), "1", "{said}");
    assert_eq!(
        field("switch"),
        format!("switches/entry/{activity}=closed"),
        "{said}"
    );
    let (status, detail) = json(app.get(&format!("/api/activities/{activity}"), None).await).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["title"], "Generated-client sale", "{detail}");
    let switches = app.switches_in_etcd().await;
    let key = format!("/switches/entry/{activity}");
    assert!(
        switches
            .iter()
            .any(|(path, value)| path.ends_with(&key) && value == "closed"),
        "{switches:?}"
    );
}

/// The document as the server sends it, byte for byte.
async fn document_text(app: &TestApp) -> String {
    let response = app.get("/api/openapi.json", None).await;
    assert_eq!(response.status(), 200);
    response.text().await.expect("the document")
}
