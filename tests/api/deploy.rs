//! `deploy/`: the Prometheus configuration and rule files pass `promtool` (config and rule
//! checks, the rules' unit tests), the server's `/metrics` passes `promtool check metrics`,
//! and every Grafana panel query and recording rule evaluates against a real Prometheus
//! scraping a real server, with data where a sale must leave some.

use crate::support::{
    app::spawn_app_with,
    fixtures::{open_sale, storm, storm_settings},
    prometheus::{deploy_dir, promtool, PrometheusInstance, TempDir},
    wait,
};
use serde_json::Value;
use std::{path::Path, process::Stdio, time::Duration};
use tokio::{io::AsyncWriteExt, process::Command};

/// Runs promtool with `args` (and `stdin`, if any); panics with its output unless it succeeds.
/// Returns what it printed.
async fn promtool_passes(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(promtool())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (set PROMTOOL_BIN if it is not /usr/bin/promtool)");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .await
        .expect("write promtool's input");
    drop(input);
    let output = child.wait_with_output().await.expect("promtool finishes");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {args:?} failed ({}):\n{printed}",
        output.status
    );
    printed
}

fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read folder") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy file");
        }
    }
}

#[tokio::test]
async fn the_prometheus_config_and_rules_pass_promtool() {
    // The config as it is deployed, beside a targets file like the one scripts/run.sh
    // writes (a copy, so the checkout's targets folder is left alone).
    let copy = TempDir::new("deploy");
    copy_folder(&deploy_dir().join("prometheus"), &copy.0);
    std::fs::create_dir_all(copy.0.join("targets")).expect("targets folder");
    std::fs::write(
        copy.0.join("targets/seckill.json"),
        r#"[{"targets": ["127.0.0.1:3000"]}]"#,
    )
    .expect("targets file");
    let config = copy.0.join("prometheus.yml");
    let printed = promtool_passes(&["check", "config", &config.to_string_lossy()], None).await;
    assert!(
        !printed.contains("WARNING"),
        "promtool warned about the config:\n{printed}"
    );
    assert!(printed.contains("2 rule files found"), "{printed}");

    let rules = deploy_dir().join("prometheus/rules");
    for file in ["recording.yml", "alerts.yml"] {
        promtool_passes(
            &["check", "rules", &rules.join(file).to_string_lossy()],
            None,
        )
        .await;
    }

    let tests = deploy_dir().join("prometheus/tests");
    let mut files: Vec<String> = std::fs::read_dir(&tests)
        .expect("tests folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yml"))
        .map(|path| path.to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no rule tests in {}", tests.display());
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    promtool_passes(&args, None).await;
}

/// Every alert in alerts.yml has a unit test that expects it to fire.
#[test]
fn every_alert_has_a_unit_test() {
    let alerts = std::fs::read_to_string(deploy_dir().join("prometheus/rules/alerts.yml"))
        .expect("alerts.yml");
    let mut tests = String::new();
    for entry in std::fs::read_dir(deploy_dir().join("prometheus/tests")).expect("tests") {
        tests += &std::fs::read_to_string(entry.expect("entry").path()).expect("test file");
    }
    let names: Vec<&str> = alerts
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert!(names.len() > 10, "{names:?}");
    for name in names {
        // A test that expects it to fire names it and lists what it fires with.
        let fires = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(&format!("{name}\n")) && case.contains("exp_labels"));
        assert!(fires, "no unit test expects {name} to fire");
    }
}

#[tokio::test]
async fn the_metrics_pass_promtool_check_metrics() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 5, 1).await;
    let buyers = (1..=8).map(|user| (user, format!("lint-{user}"))).collect();
    storm(&app, &sale, buyers, 4).await;
    app.get("/readyz", None).await;
    let text = app
        .get("/metrics", None)
        .await
        .text()
        .await
        .expect("metrics");
    assert!(
        text.contains("seckill_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("seckill_funnel_requests_total"), "{text}");
    promtool_passes(&["check", "metrics"], Some(&text)).await;
}

/// The dashboard's panel queries with Grafana's interval variables replaced as Grafana
/// would over a short range: (panel title, query).
fn dashboard_queries() -> Vec<(String, String)> {
    let path = deploy_dir().join("grafana/seckill.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("dashboard")).expect("JSON");
    assert_eq!(
        dashboard["templating"]["list"][0]["name"], "datasource",
        "the datasource is a variable"
    );
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        // Collapsed rows hold their panels.
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
            let expr = target["expr"].as_str().expect("a Prometheus query");
            let expr = ["$__rate_interval", "$__interval", "$__range"]
                .iter()
                .fold(expr.to_owned(), |expr, variable| {
                    expr.replace(variable, "1m")
                });
            assert!(!expr.contains('$'), "a variable left in {expr}");
            queries.push((panel["title"].as_str().expect("title").to_owned(), expr));
        }
    }
    queries
}

/// Panels a sale must fill: the funnel, the buy QPS, the HTTP requests and their latency,
/// the live items' stock, the dependency calls and the pool waits.
const PANELS_WITH_DATA: &[&str] = &[
    "Funnel: requests passing each stage",
    "Funnel: requests stopped, by stage and code",
    "Buy QPS by status",
    "QPS per endpoint",
    "HTTP requests by endpoint and status",
    "p99 latency per endpoint",
    "Buy latency: p50, p99, p99.9",
    "Stock per item: Redis, allocated, sold, paid",
    "Dependency call p99 (Redis by script or command, PostgreSQL batch, etcd)",
    "Database pool: waits for a connection",
];

/// Recording rules a sale must fill.
const RULES_WITH_DATA: &[&str] = &[
    "seckill:buy_requests:rate5m",
    "seckill:funnel_requests:rate5m",
    "seckill:buy_errors:ratio_rate5m",
    "seckill:buy_slow:ratio_rate5m",
];

#[tokio::test]
async fn every_panel_query_and_recording_rule_evaluates_against_a_real_prometheus() {
    let queries = dashboard_queries();
    for title in PANELS_WITH_DATA {
        assert!(
            queries.iter().any(|(panel, _)| panel == title),
            "no panel {title}"
        );
    }
    let app = spawn_app_with(storm_settings).await;
    let target = app.address.trim_start_matches("http://").to_owned();
    let prometheus = PrometheusInstance::start(&[&target]).await;
    wait::until(
        "Prometheus scraping the server",
        Duration::from_secs(30),
        || async {
            match prometheus.query(r#"up{job="seckill"} == 1"#).await {
                Ok(samples) if !samples.is_empty() => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        },
    )
    .await;

    // Two waves of buys with a scrape between them, so the counters the first wave made move
    // within a window (a series that first appears at its final value has a rate of 0):
    // 40 buyers for 25 units (sold, then sold out).
    let sale = open_sale(&app, 25, 1).await;
    let wave = |users: std::ops::RangeInclusive<i64>| -> Vec<(i64, String)> {
        users.map(|user| (user, format!("prom-{user}"))).collect()
    };
    storm(&app, &sale, wave(1..=10), 5).await;
    wait::until(
        "Prometheus holding the funnel's counters",
        Duration::from_secs(30),
        || async {
            match prometheus.query("seckill_funnel_requests_total").await {
                Ok(samples) if !samples.is_empty() => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        },
    )
    .await;
    storm(&app, &sale, wave(11..=40), 5).await;
    wait::until(
        "Prometheus seeing the second wave, with two samples of every series it made",
        Duration::from_secs(30),
        || async {
            let mut expected: Vec<&str> = vec![
                r#"sum(rate(seckill_funnel_requests_total{stage="admission",outcome="pass"}[1m])) > 0"#,
                "seckill:buy_requests:rate5m > 0",
            ];
            expected.extend(
                queries
                    .iter()
                    .filter(|(title, _)| PANELS_WITH_DATA.contains(&title.as_str()))
                    .map(|(_, expr)| expr.as_str()),
            );
            expected.extend(RULES_WITH_DATA);
            for expr in expected {
                match prometheus.query(expr).await {
                    Ok(samples) if !samples.is_empty() => {}
                    seen => return Err(format!("{expr}: {seen:?}")),
                }
            }
            Ok(())
        },
    )
    .await;

    wait::until(
        "Prometheus evaluating every rule group once",
        Duration::from_secs(30),
        || async {
            let unknown: Vec<String> = prometheus
                .rule_groups()
                .await
                .iter()
                .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
                .filter(|rule| rule["health"] == "unknown")
                .map(|rule| rule["name"].to_string())
                .collect();
            if unknown.is_empty() {
                Ok(())
            } else {
                Err(unknown.join(", "))
            }
        },
    )
    .await;

    let mut failures = Vec::new();
    for (title, expr) in &queries {
        match prometheus.query(expr).await {
            Err(error) => failures.push(format!("panel {title}: {expr}: {error}")),
            Ok(samples) if samples.is_empty() && PANELS_WITH_DATA.contains(&title.as_str()) => {
                failures.push(format!("panel {title}: {expr}: no data"));
            }
            Ok(_) => {}
        }
    }

    // Every rule as Prometheus loaded it: evaluated without error, and its query again
    // through the API.
    let groups = prometheus.rule_groups().await;
    let rules: Vec<&Value> = groups
        .iter()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .collect();
    assert!(rules.len() > 40, "rules loaded: {groups:?}");
    for rule in rules {
        let name = rule["name"].as_str().unwrap_or("?");
        if rule["health"] != "ok" {
            failures.push(format!(
                "rule {name}: health {} ({})",
                rule["health"], rule["lastError"]
            ));
        }
        let expr = rule["query"].as_str().expect("query");
        match prometheus.query(expr).await {
            Err(error) => failures.push(format!("rule {name}: {expr}: {error}")),
            Ok(samples) if samples.is_empty() && RULES_WITH_DATA.contains(&name) => {
                failures.push(format!("rule {name}: {expr}: no data"));
            }
            Ok(_) => {}
        }
    }
    for recorded in RULES_WITH_DATA {
        match prometheus.query(recorded).await {
            Ok(samples) if !samples.is_empty() => {}
            seen => failures.push(format!("recorded series {recorded}: {seen:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
