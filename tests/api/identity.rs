//! Console logins: argon2 passwords, hashed session cookies accepted by the admin API,
//! attempts rate-limited per (username, address) and per address.

use crate::support::app::{json, spawn_app, spawn_app_with, with_session};
use contract::Role;
use sale::identity::authenticate::LoginError;

#[tokio::test]
async fn a_console_session_works_on_the_admin_api_until_logout() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let session = app
        .state
        .auth
        .login(&merchant.username, &merchant.password, None)
        .await
        .expect("login");
    let with_cookie = || {
        with_session(
            app.client.get(format!("{}/admin/api/items", app.address)),
            &session.token,
        )
    };
    assert_eq!(with_cookie().send().await.expect("sent").status(), 200);

    // Only a digest of the cookie is stored.
    let stored: Vec<u8> = sqlx::query_scalar("SELECT token_hash FROM admin_sessions")
        .fetch_one(&app.db)
        .await
        .expect("session row");
    assert_ne!(stored, session.token.as_bytes());

    app.state.auth.logout(&session.token).await.expect("logout");
    let (status, _) = json(with_cookie().send().await.expect("sent")).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_are_refused_alike() {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    let wrong = app
        .state
        .auth
        .login(&ops.username, "not-the-password", None)
        .await;
    assert!(matches!(wrong, Err(LoginError::BadCredentials)));
    let unknown = app
        .state
        .auth
        .login("nobody", "whatever-password", None)
        .await;
    assert!(matches!(unknown, Err(LoginError::BadCredentials)));
    assert_eq!(app.count("admin_sessions").await, 0);
}

#[tokio::test]
async fn login_attempts_are_rate_limited_per_username_and_address_and_per_address() {
    let app = spawn_app_with(|settings| {
        settings.login_attempts_per_window = 3;
        settings.login_attempts_per_address = 5;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let address = Some("203.0.113.9".parse().expect("ip"));
    for _ in 0..3 {
        let attempt = app.state.auth.login(&ops.username, "guess", address).await;
        assert!(matches!(attempt, Err(LoginError::BadCredentials)));
    }
    // Even the right password is refused from there now: the pair's window is spent.
    let blocked = app
        .state
        .auth
        .login(&ops.username, &ops.password, address)
        .await;
    assert!(matches!(blocked, Err(LoginError::RateLimited { .. })));
    // Another account from the same address is tried until the address's window is spent
    // too (five attempts of any username), then refused as well.
    let other = app.caller(Role::Sre, None).await;
    let sprayed = app
        .state
        .auth
        .login(&other.username, "guess", address)
        .await;
    assert!(matches!(sprayed, Err(LoginError::BadCredentials)));
    let spent = app
        .state
        .auth
        .login(&other.username, &other.password, address)
        .await;
    assert!(matches!(spent, Err(LoginError::RateLimited { .. })));
    // From another address, both accounts are fine.
    let elsewhere = Some("198.51.100.7".parse().expect("ip"));
    for caller in [&ops, &other] {
        let signed_in = app
            .state
            .auth
            .login(&caller.username, &caller.password, elsewhere)
            .await;
        assert!(signed_in.is_ok(), "{}", caller.username);
    }
    assert_eq!(app.count("admin_sessions").await, 2);
}
