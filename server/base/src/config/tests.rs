//! Unit tests of `config`: its rules and steps without the stores.

use super::*;
use secrecy::ExposeSecret;
use std::collections::HashMap;

fn layered(file: Option<&str>, pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let env: HashMap<&str, &str> = pairs.iter().copied().collect();
    Settings::from_layers(file.map(Toml::string), |name| {
        env.get(name).map(|value| value.to_string())
    })
}

fn with_env(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    layered(None, pairs)
}

#[test]
fn environment_overrides_defaults() {
    let settings = with_env(&[
        ("DATABASE_URL", "postgres://db/x"),
        ("ETCD_ENDPOINTS", "http://a:2379, http://b:2379"),
        ("SECKILL_ETCD_PREFIX", "/blue/"),
        ("SECKILL_BIND", "127.0.0.1:0"),
        ("REDIS_CLUSTER_NODES", "redis://a:7001/, redis://b:7002/,"),
    ])
    .expect("valid env");
    assert_eq!(settings.database_url.expose_secret(), "postgres://db/x");
    let nodes: Vec<&str> = settings
        .redis_cluster_nodes
        .iter()
        .map(|node| node.expose_secret())
        .collect();
    assert_eq!(nodes, ["redis://a:7001/", "redis://b:7002/"]);
    assert!(Settings::default().redis_cluster_nodes.is_empty());
    assert_eq!(settings.etcd_endpoints, ["http://a:2379", "http://b:2379"]);
    assert_eq!(settings.etcd_prefix, "/blue");
    assert_eq!(settings.bind.port(), 0);
}

#[test]
fn malformed_values_name_the_variable() {
    let error = with_env(&[("SECKILL_BIND", "nowhere")]).expect_err("bad bind");
    assert!(error.to_string().contains("SECKILL_BIND"));
    let error = with_env(&[("ETCD_ENDPOINTS", " , ")]).expect_err("no endpoint");
    assert!(error.to_string().contains("ETCD_ENDPOINTS"), "{error}");
    for (name, value) in [
        ("SECKILL_DB_MAX_CONNECTIONS", "many"),
        ("SECKILL_SESSION_TTL_S", "1.5"),
        ("SECKILL_SECURE_COOKIES", "perhaps"),
        ("SECKILL_LOGIN_ATTEMPTS", "-1"),
        ("SECKILL_BUY_USER_RATE", "five"),
        ("SECKILL_CHALLENGE", "maybe"),
        ("SECKILL_DEDUCTION", "disk"),
        ("SECKILL_ASYNC", "carrier-pigeon"),
        ("SECKILL_PREORDER_BATCH_WAIT_US", "soon"),
    ] {
        let error = with_env(&[(name, value)]).expect_err(name);
        assert!(error.to_string().contains(name), "{name}: {error}");
    }
}

#[test]
fn secrets_stay_out_of_debug_output() {
    let settings = with_env(&[("SECKILL_JWT_SECRET", "hunter2")]).expect("valid env");
    assert!(!format!("{settings:?}").contains("hunter2"));
}

fn judged(bind: &str, jwt: &str, pay: &str) -> Result<Vec<WeakSecret>, SecretsRefused> {
    let (jwt, pay) = (SecretString::from(jwt), SecretString::from(pay));
    judge_secrets(
        bind.parse().expect("address"),
        &[("SECKILL_JWT_SECRET", &jwt), ("SECKILL_PAY_SECRET", &pay)],
    )
}

#[test]
fn strong_secrets_serve_anywhere() {
    for bind in ["0.0.0.0:3000", "10.1.2.3:80", "[::]:3000", "127.0.0.1:3000"] {
        assert_eq!(judged(bind, "jwt-9f2c", "pay-77a1").expect(bind), []);
    }
}

#[test]
fn weak_secrets_are_refused_off_loopback_naming_each_variable() {
    for bind in ["0.0.0.0:3000", "192.168.1.20:3000", "[::]:3000"] {
        let refused = judged(bind, DEVELOPMENT_SECRET, "").expect_err(bind);
        assert_eq!(
            refused.weak,
            [
                WeakSecret {
                    variable: "SECKILL_JWT_SECRET",
                    weakness: Weakness::Development
                },
                WeakSecret {
                    variable: "SECKILL_PAY_SECRET",
                    weakness: Weakness::Empty
                },
            ]
        );
        let message = refused.to_string();
        assert!(message.contains("SECKILL_JWT_SECRET is unset"), "{message}");
        assert!(message.contains("SECKILL_PAY_SECRET is empty"), "{message}");
    }
    let one = judged("0.0.0.0:3000", "jwt-9f2c", DEVELOPMENT_SECRET).expect_err("pay weak");
    assert_eq!(one.weak.len(), 1);
    assert!(!one.to_string().contains("SECKILL_JWT_SECRET"), "{one}");
}

#[test]
fn weak_secrets_on_loopback_are_handed_back_to_warn_about() {
    for bind in ["127.0.0.1:3000", "127.0.0.2:3000", "[::1]:3000"] {
        let weak = judged(bind, "", DEVELOPMENT_SECRET).expect(bind);
        assert_eq!(weak.len(), 2, "{bind}");
    }
}

#[test]
fn the_defaults_and_an_empty_variable_are_weak() {
    let defaults = with_env(&[("SECKILL_BIND", "0.0.0.0:3000")]).expect("valid env");
    let refused = defaults.check_secrets().expect_err("development secrets");
    assert!(refused
        .weak
        .iter()
        .all(|w| w.weakness == Weakness::Development));
    let empty = with_env(&[
        ("SECKILL_BIND", "0.0.0.0:3000"),
        ("SECKILL_JWT_SECRET", ""),
        ("SECKILL_PAY_SECRET", "pay-77a1"),
    ])
    .expect("valid env");
    let refused = empty.check_secrets().expect_err("empty secret");
    assert_eq!(
        refused.weak,
        [WeakSecret {
            variable: "SECKILL_JWT_SECRET",
            weakness: Weakness::Empty
        }]
    );
    assert!(with_env(&[]).expect("defaults").check_secrets().is_ok());
}

#[test]
fn the_public_origin_is_an_origin_or_unset() {
    let empty = with_env(&[("SECKILL_PUBLIC_ORIGIN", " ")]).expect("empty is unset");
    assert_eq!(empty.public_origin, None);
    let slash =
        with_env(&[("SECKILL_PUBLIC_ORIGIN", "https://shop.example:8443/")]).expect("valid origin");
    assert_eq!(
        slash.public_origin.as_deref(),
        Some("https://shop.example:8443")
    );
    for wrong in [
        "shop.example",
        "https://shop.example/console",
        "ftp://shop.example",
    ] {
        let error = with_env(&[("SECKILL_PUBLIC_ORIGIN", wrong)]).expect_err(wrong);
        assert!(
            error.to_string().contains("SECKILL_PUBLIC_ORIGIN"),
            "{error}"
        );
    }
}

#[test]
fn a_settings_file_parses_partially() {
    let settings = layered(
        Some("redis_prefix = \"t1:\"\nbind = \"127.0.0.1:4000\""),
        &[],
    )
    .expect("toml");
    assert_eq!(settings.redis_prefix, "t1:");
    assert_eq!(settings.bind.port(), 4000);
    assert_eq!(settings.etcd_prefix, "/seckill");
}

#[test]
fn every_variable_reaches_its_field() {
    let settings = with_env(&[
        ("SECKILL_BIND", " 0.0.0.0:8080 "),
        ("SECKILL_MAX_CONNECTIONS", "100"),
        ("SECKILL_CONNECTION_IDLE_S", "5"),
        ("DATABASE_URL", "postgres://pg/sale"),
        ("SECKILL_DB_MAX_CONNECTIONS", " 7"),
        ("REDIS_URL", "redis://r/3"),
        ("SECKILL_REDIS_PREFIX", "123"),
        ("AMQP_URL", "amqp://mq/v"),
        ("SECKILL_AMQP_PREFIX", "true"),
        ("ETCD_ENDPOINTS", "http://e:2379"),
        ("SECKILL_ETCD_PREFIX", "/green"),
        ("SECKILL_JWT_SECRET", " \"0123\" "),
        ("SECKILL_PAY_SECRET", "[pay]"),
        ("SECKILL_SITE_ROOT", "/srv/site"),
        ("SECKILL_SESSION_TTL_S", "60"),
        ("SECKILL_SECURE_COOKIES", "true"),
        ("SECKILL_BODY_PATIENCE_MS", "750"),
        ("SECKILL_LOGIN_ATTEMPTS", "3"),
        ("SECKILL_LOGIN_WINDOW_S", "30"),
        ("SECKILL_LOGIN_ADDRESS_ATTEMPTS", "40"),
        ("SECKILL_PUBLIC_ORIGIN", " https://console.example.com "),
        ("SECKILL_BUY_MAX_IN_FLIGHT", "9"),
        ("SECKILL_BUY_USER_RATE", "2"),
        ("SECKILL_CHALLENGE", " on "),
        ("SECKILL_DEDUCTION", "db"),
        ("SECKILL_ASYNC", "record "),
        ("SECKILL_PREORDER_BATCH_WAIT_US", "500"),
        ("SECKILL_NODE_ID", "007"),
    ])
    .expect("valid env");
    assert_eq!(settings.bind, SocketAddr::from(([0, 0, 0, 0], 8080)));
    assert_eq!(settings.max_connections, 100);
    assert_eq!(settings.connection_idle_s, 5);
    assert_eq!(settings.body_patience_ms, 750);
    assert_eq!(settings.database_url.expose_secret(), "postgres://pg/sale");
    assert_eq!(settings.db_max_connections, 7);
    assert_eq!(settings.redis_url.expose_secret(), "redis://r/3");
    // Text that looks like a number, a flag or a quoted string stays the text it is.
    assert_eq!(settings.redis_prefix, "123");
    assert_eq!(settings.amqp_url.expose_secret(), "amqp://mq/v");
    assert_eq!(settings.amqp_prefix, "true");
    assert_eq!(settings.etcd_endpoints, ["http://e:2379"]);
    assert_eq!(settings.etcd_prefix, "/green");
    assert_eq!(settings.jwt_secret.expose_secret(), " \"0123\" ");
    assert_eq!(settings.pay_secret.expose_secret(), "[pay]");
    assert_eq!(settings.site_root, PathBuf::from("/srv/site"));
    assert_eq!(settings.session_ttl_s, 60);
    assert!(settings.secure_cookies);
    assert_eq!(settings.login_attempts_per_window, 3);
    assert_eq!(settings.login_window_s, 30);
    assert_eq!(settings.login_attempts_per_address, 40);
    assert_eq!(
        settings.public_origin.as_deref(),
        Some("https://console.example.com")
    );
    assert_eq!(settings.buy.max_in_flight, 9);
    assert_eq!(settings.buy.per_user_per_window, 2);
    assert!(settings.buy.challenge_required);
    assert_eq!(settings.buy.deduction, DeductionMode::Db);
    assert_eq!(settings.buy.async_mode, AsyncMode::Record);
    assert_eq!(settings.buy.preorder_batch_wait_us, 500);
    assert_eq!(settings.control.node_id.as_deref(), Some("007"));
    // The rest of the nested tables keeps its defaults.
    assert_eq!(
        settings.buy.rate_window_s,
        BuySettings::default().rate_window_s
    );
    assert_eq!(
        settings.control.lease_ttl_s,
        ControlSettings::default().lease_ttl_s
    );
}

#[test]
fn flags_and_modes_read_both_ways() {
    let off = with_env(&[
        ("SECKILL_CHALLENGE", "off"),
        ("SECKILL_SECURE_COOKIES", "false"),
        ("SECKILL_DEDUCTION", "redis"),
        ("SECKILL_ASYNC", "mq"),
    ])
    .expect("valid env");
    assert!(!off.buy.challenge_required);
    assert!(!off.secure_cookies);
    assert_eq!(off.buy.deduction, DeductionMode::Redis);
    assert_eq!(off.buy.async_mode, AsyncMode::Mq);
}

#[test]
fn the_seckill_site_root_wins_over_leptos() {
    let leptos = with_env(&[("LEPTOS_SITE_ROOT", "/leptos")]).expect("valid env");
    assert_eq!(leptos.site_root, PathBuf::from("/leptos"));
    let both = with_env(&[
        ("SECKILL_SITE_ROOT", "/seckill"),
        ("LEPTOS_SITE_ROOT", "/leptos"),
    ])
    .expect("valid env");
    assert_eq!(both.site_root, PathBuf::from("/seckill"));
}

#[test]
fn the_environment_overrides_the_file_key_by_key() {
    let file = "bind = \"127.0.0.1:4000\"\nredis_prefix = \"file:\"\n\
                [buy]\ndeduction = \"db\"\nper_user_per_window = 8\n";
    let settings = layered(
        Some(file),
        &[
            ("SECKILL_BIND", "127.0.0.1:5000"),
            ("SECKILL_BUY_USER_RATE", "1"),
        ],
    )
    .expect("valid layers");
    assert_eq!(settings.bind.port(), 5000);
    assert_eq!(settings.redis_prefix, "file:");
    assert_eq!(settings.buy.deduction, DeductionMode::Db);
    assert_eq!(settings.buy.per_user_per_window, 1);
    assert_eq!(
        settings.buy.max_in_flight,
        BuySettings::default().max_in_flight
    );
}

#[test]
fn redis_timeouts_have_defaults_and_read_from_a_file() {
    let defaults = with_env(&[]).expect("defaults");
    assert_eq!(defaults.redis_timeout(), Duration::from_secs(2));
    assert_eq!(
        defaults.redis_reconnect_interval(),
        Duration::from_millis(250)
    );
    let file = "redis_timeout_ms = 500\nredis_reconnect_ms = 100";
    let settings = layered(Some(file), &[]).expect("valid file");
    assert_eq!(settings.redis_timeout(), Duration::from_millis(500));
    assert_eq!(
        settings.redis_reconnect_interval(),
        Duration::from_millis(100)
    );
}

#[test]
fn a_file_is_held_to_the_same_rules() {
    let unknown = layered(Some("[buy]\nmax_in_fligth = 3"), &[]).expect_err("misspelt key");
    assert!(unknown.to_string().contains("max_in_fligth"), "{unknown}");
    let empty = layered(Some("etcd_endpoints = []"), &[]).expect_err("no endpoint");
    assert!(empty.to_string().contains("etcd_endpoints"), "{empty}");
    let prefix = layered(Some("etcd_prefix = \"/red/\""), &[]).expect("valid file");
    assert_eq!(prefix.etcd_prefix, "/red");
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail fixes the closure's error type"
)]
fn load_reads_the_file_named_by_seckill_config_then_the_environment() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "seckill.toml",
            "redis_prefix = \"file:\"\namqp_prefix = \"file\"",
        )?;
        jail.set_env("SECKILL_CONFIG", "seckill.toml");
        jail.set_env("SECKILL_AMQP_PREFIX", "env");
        let settings = Settings::load().expect("valid layers");
        assert_eq!(settings.redis_prefix, "file:");
        assert_eq!(settings.amqp_prefix, "env");

        jail.set_env("SECKILL_CONFIG", "missing.toml");
        let error = Settings::load().expect_err("a named file must exist");
        assert!(error.to_string().contains("missing.toml"), "{error}");
        Ok(())
    });
}
