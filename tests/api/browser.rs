//! The hydrated console in a real browser: Debian's headless Chromium, driven by
//! playwright-core (`tests/browser/`), logs in and creates an item.

use crate::helpers::spawn_app;
use app::model::Role;
use std::{path::Path, process::Command};

#[tokio::test]
async fn a_merchant_logs_in_and_creates_an_item_in_the_hydrated_console() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/console_login_create_item.mjs");
    let item_name = format!("Browser item {}", &merchant.username[9..]);
    let (address, username, password, name) = (
        app.address.clone(),
        merchant.username.clone(),
        merchant.password.clone(),
        item_name.clone(),
    );
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .args([&address, &username, &password, &name])
            .output()
            .expect("node runs (scripts/setup.sh installs it)")
    })
    .await
    .expect("browser task");
    assert!(
        output.status.success(),
        "browser test failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let (price, merchant_name): (i64, String) = sqlx::query_as(
        "SELECT i.price_cents, m.name FROM items i JOIN merchants m ON m.id = i.merchant_id WHERE i.name = $1",
    )
    .bind(&item_name)
    .fetch_one(&app.db)
    .await
    .expect("the item the browser created");
    assert_eq!(price, 1250);
    assert_eq!(merchant_name, "acme");
}
