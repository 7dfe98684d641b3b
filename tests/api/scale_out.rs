//! Scale-out on one machine: one deployment of three instances behind a load balancer (of
//! TCP connections, round robin), on a Redis Cluster of three masters with a replica each,
//! a three-member etcd cluster and a vhost of its own on the shared RabbitMQ, whose pipeline
//! queues are quorum queues. On it a storm sells exactly the stock while a switch flip
//! reaches all three instances, an unpaid order times out and gives its unit back, and a
//! Redis master failing over to its replica in the middle of a storm, on request or
//! because it was killed, breaks no promise (the checks of the fault-injection suite). Every part is private to the test and goes
//! away with it.

use crate::faults::{no_buyer_failed, sale_settings, survives, Fault, STOCK};
use crate::payment::sale_with_timeout;
use crate::support::{
    app::{json, spawn_app_with, TestApp},
    etcd::EtcdInstance,
    fixtures::{buy_body, open_sale},
    proxy::{self, Proxy},
    redis_cluster::RedisCluster,
    wait,
};
use base::config::Settings;
use contract::{Role, SaleItem};
use secrecy::ExposeSecret;
use serde_json::json;
use std::{
    process::Stdio,
    sync::atomic::{AtomicI64, Ordering},
    time::Duration,
};

/// A vhost of its own on the shared RabbitMQ, for the deployment's user; deleted when
/// dropped.
struct Vhost {
    name: String,
    /// `AMQP_URL` with the vhost in place of the configured one.
    url: String,
}

async fn rabbitmqctl(args: &[&str]) -> String {
    let output = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Vhost {
    async fn create() -> Self {
        let base = Settings::load().expect("settings").amqp_url;
        let base = base.expose_secret();
        let name = format!("seckill-test-{}", uuid::Uuid::new_v4().simple());
        let (server, _) = base.rsplit_once('/').expect("AMQP_URL names a vhost");
        let user = base
            .split_once("://")
            .and_then(|(_, rest)| rest.rsplit_once('@'))
            .and_then(|(credentials, _)| credentials.split(':').next())
            .unwrap_or("guest");
        rabbitmqctl(&["add_vhost", &name]).await;
        rabbitmqctl(&["set_permissions", "-p", &name, user, ".*", ".*", ".*"]).await;
        Self {
            url: format!("{server}/{name}"),
            name,
        }
    }

    /// Every queue of the vhost with its type.
    async fn queues(&self) -> Vec<(String, String)> {
        let listed = rabbitmqctl(&[
            "list_queues",
            "-p",
            &self.name,
            "name",
            "type",
            "--quiet",
            "--no-table-headers",
        ])
        .await;
        listed
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
            .collect()
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["delete_vhost", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Three instances of one deployment and everything they stand on.
struct Deployment {
    /// The deployment as buyers and staff reach it: through the balancer. Its stores and
    /// handles are the first instance's.
    entry: TestApp,
    instances: Vec<TestApp>,
    redis: RedisCluster,
    vhost: Vhost,
    _etcd: Vec<EtcdInstance>,
    _balancer: Proxy,
}

async fn deploy() -> Deployment {
    let (redis, etcd, vhost) = tokio::join!(
        RedisCluster::start_with_replicas(3, 1),
        EtcdInstance::cluster(),
        Vhost::create()
    );
    let nodes = redis.urls();
    let endpoints: Vec<String> = etcd.iter().map(EtcdInstance::endpoint).collect();
    let amqp_url = vhost.url.clone();
    let first = spawn_app_with(|settings| {
        sale_settings(settings);
        settings.redis_cluster_nodes = nodes.iter().map(|node| node.as_str().into()).collect();
        settings.etcd_endpoints = endpoints;
        settings.amqp_url = amqp_url.into();
    })
    .await;
    let second = first.spawn_sibling(|_| {}).await;
    let third = first.spawn_sibling(|_| {}).await;
    let instances = vec![first, second, third];
    let targets: Vec<String> = instances
        .iter()
        .map(|instance| proxy::target_of(&instance.address))
        .collect();
    let balancer = Proxy::balancing(&targets.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let entry = instances[0].reached_through(balancer.http_address());
    let sre = entry.caller(Role::Sre, None).await;
    wait::until(
        "three instances in the control plane",
        Duration::from_secs(20),
        || async {
            let (_, board) = json(entry.get("/admin/api/switches", Some(&sre)).await).await;
            board["nodes"].as_array().map(Vec::len) == Some(3)
        },
    )
    .await;
    Deployment {
        entry,
        instances,
        redis,
        vhost,
        _etcd: etcd,
        _balancer: balancer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_clusters_sell_the_stock_apply_one_flip_and_time_out_unpaid_orders() {
    let deployment = deploy().await;
    let entry = &deployment.entry;
    // Hot-key reports go by pub/sub through the cluster: each instance publishes on the
    // master of the channel's slot and listens on the first node, and hears all three.
    let sre = entry.caller(Role::Sre, None).await;
    for instance in &deployment.instances {
        wait::until(
            "every instance hears the three instances' reports",
            Duration::from_secs(10),
            || async {
                let (_, view) = json(instance.get("/admin/api/hotkeys", Some(&sre)).await).await;
                view["reporting_nodes"].as_u64() == Some(3)
            },
        )
        .await;
    }

    let sale = open_sale(entry, STOCK, 1).await;
    let ops = entry.caller(Role::Ops, None).await;
    let storm = survives(
        entry,
        &sale,
        "none: a switch flip mid-storm on the scale-out deployment",
        async {
            let fault = Fault::strikes();
            let (status, change) = entry
                .flip(
                    &ops,
                    "limits/per_user_per_window",
                    &json!({ "value": 999_999, "reason": "scale-out" }),
                    Some(5_000),
                )
                .await;
            assert_eq!(status, 200, "{change}");
            let propagation = &change["propagation"];
            assert_eq!(propagation["complete"], true, "{change}");
            assert_eq!(
                propagation["nodes"].as_array().map(Vec::len),
                Some(3),
                "{change}"
            );
            for instance in &deployment.instances {
                assert_eq!(
                    instance.state.switches.current().limits.per_user_per_window,
                    999_999
                );
            }
            fault.ends()
        },
    )
    .await;
    no_buyer_failed(&storm);
    // The balancer spread the storm: every instance served buys.
    for instance in &deployment.instances {
        let served = instance.metric("seckill_funnel_requests_total").await;
        assert!(served > 0.0, "{} served no buy", instance.address);
    }

    // An order left unpaid past its deadline is cancelled and its unit given back, in
    // PostgreSQL and on the cluster.
    let sale = sale_with_timeout(entry, 10, 2).await;
    let orders = entry.unpaid_orders(&sale, 1..=3).await;
    assert_eq!(entry.redis_stock(&sale).await, 7);
    entry.all_reach(&orders, "CANCELLED").await;
    wait::until("the units back on the cluster", wait::PATIENCE, || async {
        entry.redis_stock(&sale).await == 10
    })
    .await;
    assert_eq!(entry.db_stock_left(&sale).await, (10, 10));

    // The pipeline's queues, as the instances declared them, are all quorum queues.
    let queues = deployment.vhost.queues().await;
    for queue in ["create", "pay-timeout", "pay-delay.2s", "dead"] {
        let name = format!("{}.order.{queue}", entry.state.settings.amqp_prefix);
        assert!(
            queues.iter().any(|(listed, _)| *listed == name),
            "{name}: {queues:?}"
        );
    }
    assert!(
        queues.iter().all(|(_, kind)| kind == "quorum"),
        "{queues:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_master_failing_over_mid_storm_breaks_no_promise() {
    let deployment = deploy().await;
    let entry = &deployment.entry;
    let redis = &deployment.redis;
    let sale = open_sale(entry, STOCK, 1).await;
    let stock_key = entry
        .state
        .redis
        .stock_key(SaleItem::new(sale.activity_id, sale.item_id));
    let master = redis.master_of(&stock_key).await;
    let replica = redis.replica_of(master).await;
    // The replica forgets the scripts pre-warm loaded on every node: once it is the master,
    // the instances must load them there again (NOSCRIPT) to go on selling.
    let _: () = redis
        .on_node(replica, redis::cmd("SCRIPT").arg("FLUSH"))
        .await
        .expect("SCRIPT FLUSH");
    survives(
        entry,
        &sale,
        "Redis Cluster master failover (CLUSTER FAILOVER on its replica)",
        async {
            let fault = Fault::strikes();
            redis.fail_over(&stock_key).await;
            fault.ends()
        },
    )
    .await;
    assert_eq!(redis.master_of(&stock_key).await, replica);
    // The instances loaded the scripts on the new master (NOSCRIPT) when a buy first reached
    // it: in the storm, or, when the stock was all taken before the failover, now, once the
    // instances' sold-out flags lapse and a latecomer's buy asks Redis again.
    let buy = redis::Script::new(include_str!("../../lua/buy.lua"));
    let latecomer = AtomicI64::new(1_000_000);
    wait::until(
        "the buy script loaded on the new master",
        wait::PATIENCE,
        || async {
            let user = latecomer.fetch_add(1, Ordering::Relaxed);
            let (status, answer) = entry
                .buy(user, &format!("late-{user}"), &buy_body(&sale, 1))
                .await;
            assert_eq!((status, &answer["code"]), (409, &json!("SOLD_OUT")));
            let held: Vec<bool> = redis
                .on_node(
                    replica,
                    redis::cmd("SCRIPT").arg("EXISTS").arg(buy.get_hash()),
                )
                .await
                .expect("SCRIPT EXISTS");
            held == [true]
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_master_killed_mid_storm_is_replaced_by_its_replica_and_breaks_no_promise() {
    let mut deployment = deploy().await;
    let Deployment { entry, redis, .. } = &mut deployment;
    let entry = &*entry;
    let sale = open_sale(entry, STOCK, 1).await;
    let stock_key = entry
        .state
        .redis
        .stock_key(SaleItem::new(sale.activity_id, sale.item_id));
    // Unplanned: the writes the master acknowledged and had not passed on to its replica
    // are lost with it; reconciliation settles Redis against PostgreSQL.
    survives(
        entry,
        &sale,
        "Redis Cluster master SIGKILL (its replica takes over)",
        async {
            let fault = Fault::strikes();
            redis.crash_master(&stock_key).await;
            fault.ends_with_answers_lost()
        },
    )
    .await;
}
