//! The deduction switch flipped redis → db → redis several times in the middle of a storm:
//! exactly the stock is sold, never more, no buyer goes past the per-user limit, and Redis
//! ends holding exactly what PostgreSQL has not handed out, whichever layer deducted each
//! unit and however the instances' flips interleave (`buy::deduction`).

use crate::support::{
    app::spawn_app_with,
    fixtures::{buy_body, count_codes, open_sale, storm, storm_settings},
    wait,
};
use base::{config::DeductionMode, config::Settings};
use std::time::Duration;

const STOCK: i64 = 300;
const LIMIT: i64 = 2;

#[tokio::test]
async fn flipping_deduction_mid_storm_sells_exactly_the_stock_within_limits() {
    // No local sold-out flag answers for Redis: the second wave asks Redis until it is
    // empty, so whatever Redis overstated after the flips is spent by the end.
    let tuned = |settings: &mut Settings| {
        settings.buy.per_user_per_window = 1_000;
        settings.buy.sold_out_flag_ms = 0;
    };
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        tuned(settings);
    })
    .await;
    let sale = open_sale(&app, STOCK, LIMIT).await;

    // A second instance of the same deployment: the two apply each flip 40 ms apart, as
    // instances do while a flip propagates, so one deducts in Redis while the other
    // deducts in PostgreSQL.
    let sibling = app.spawn_sibling(tuned).await;
    let instances = [app.state.switches.clone(), sibling.state.switches.clone()];
    // Flip every 100 ms for as long as the first wave lasts, ending on `redis`.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let flipper = tokio::spawn(async move {
        let mut mode = DeductionMode::Redis;
        let mut flips = 0;
        loop {
            let stopping = tokio::time::timeout(Duration::from_millis(100), stopped.changed())
                .await
                .is_ok();
            mode = if stopping || mode == DeductionMode::Db {
                DeductionMode::Redis
            } else {
                DeductionMode::Db
            };
            for switches in &instances {
                let mut values = (*switches.current()).clone();
                values.deduction = mode;
                switches.replace(values);
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            flips += 1;
            if stopping {
                return flips;
            }
        }
    });
    // 250 buyers, four one-unit requests each (two may succeed), spread over both
    // instances: 500 units asked for 300.
    let requests = |instance: i64| -> Vec<(i64, String)> {
        (1..=250)
            .flat_map(|user| {
                (0..4)
                    .filter(move |n| (user + n) % 2 == instance)
                    .map(move |n| (user, format!("flip-{user}-{n}")))
            })
            .collect()
    };
    let (here, there) = tokio::join!(
        storm(&app, &sale, requests(0), 16),
        storm(&sibling, &sale, requests(1), 16)
    );
    stop.send_replace(true);
    let flips = flipper.await.expect("flipper");
    assert!(flips >= 4, "the storm outlasted several flips ({flips})");
    let first_wave: Vec<_> = here.into_iter().chain(there).collect();

    // Back on Redis for good: once re-derived, fresh buyers take whatever is left, so a
    // Redis that over- or under-stated the stock after the flips would show here.
    for instance in [&app, &sibling] {
        wait::until(
            "Redis re-derived and serving again",
            Duration::from_secs(10),
            || async {
                instance.state.deduction.mode(DeductionMode::Redis) == DeductionMode::Redis
            },
        )
        .await;
    }
    let requests = (1_001..=1_400)
        .map(|user| (user, format!("after-{user}")))
        .collect();
    let second_wave = storm(&app, &sale, requests, 32).await;

    let results: Vec<_> = first_wave.into_iter().chain(second_wave).collect();
    let codes = count_codes(&results);
    let granted = *codes.get("OK").unwrap_or(&0) as i64;
    assert_eq!(granted, STOCK, "exactly the stock sold: {codes:?}");
    assert_eq!(app.held_by_orders(&sale).await, STOCK, "{codes:?}");
    assert_eq!(app.allocated(&sale).await, STOCK);
    // Every 200 has its order, holding stock; any other row is the void of a deduction the
    // hand-over's fence made certain never to commit (its buyer was refused), not an order
    // that failed after its buyer was told he won.
    let granted_orders: Vec<uuid::Uuid> = results
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .map(|(_, _, answer)| {
            answer["order_id"]
                .as_str()
                .expect("order id")
                .parse()
                .expect("uuid")
        })
        .collect();
    let holding: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orders WHERE id = ANY($1) AND status IN ('PRE_CREATED', 'UNPAID', 'PAID')",
    )
    .bind(&granted_orders)
    .fetch_one(&app.db)
    .await
    .expect("count");
    assert_eq!(holding, STOCK, "every 200 has its order");
    let others: Vec<(String, String)> =
        sqlx::query_as("SELECT status, request_id FROM orders WHERE NOT (id = ANY($1))")
            .bind(&granted_orders)
            .fetch_all(&app.db)
            .await
            .expect("others");
    assert!(
        others
            .iter()
            .all(|(status, request)| status == "FAILED" && request.starts_with("void:")),
        "{others:?}"
    );
    let over_limit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT user_id FROM orders WHERE status IN ('PRE_CREATED', 'UNPAID', 'PAID')
                               GROUP BY user_id HAVING SUM(quantity) > $1) AS over",
    )
    .bind(LIMIT)
    .fetch_one(&app.db)
    .await
    .expect("count");
    assert_eq!(over_limit, 0, "no buyer past the per-user limit");
    // DEGRADED: a buy that came while the re-derivation's fence held the item (a moment).
    let unexpected: Vec<_> = codes
        .keys()
        .filter(|code| {
            ![
                "OK",
                "SOLD_OUT",
                "ALREADY_PURCHASED",
                "LIMIT_EXCEEDED",
                "DEGRADED",
            ]
            .contains(&code.as_str())
        })
        .collect();
    assert!(unexpected.is_empty(), "{codes:?}");
    // Redis holds exactly what PostgreSQL has not handed out: an understatement would have
    // sold less than the stock, and the second wave (more buyers than units) spent any
    // unit Redis overstated, each such buy overruled by PostgreSQL.
    assert_eq!(
        app.redis_stock(&sale).await,
        STOCK - app.held_by_orders(&sale).await
    );
}

#[tokio::test]
async fn back_on_redis_only_after_redis_is_re_derived_from_postgresql() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.deduction = DeductionMode::Db;
    })
    .await;
    let sale = open_sale(&app, 50, 1).await;
    let requests = (1..=20).map(|user| (user, format!("db-{user}"))).collect();
    let sold_in_db = storm(&app, &sale, requests, 8).await;
    assert_eq!(count_codes(&sold_in_db).get("OK"), Some(&20));
    assert_eq!(
        app.redis_stock(&sale).await,
        50,
        "the database path leaves Redis alone"
    );

    let mut values = (*app.state.switches.current()).clone();
    values.deduction = DeductionMode::Redis;
    app.state.switches.replace(values);
    wait::until("Redis serving again", Duration::from_secs(10), || async {
        app.state.deduction.mode(DeductionMode::Redis) == DeductionMode::Redis
    })
    .await;
    assert_eq!(
        app.redis_stock(&sale).await,
        30,
        "Redis re-derived before serving"
    );
    // The buyers of the database period are known to Redis too: a repeat is refused there.
    let (status, body) = app.buy(7, "again", &buy_body(&sale, 1)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ALREADY_PURCHASED"))
    );
    assert_eq!(app.redis_stock(&sale).await, 30);
}
