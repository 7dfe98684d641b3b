//! The `seckill` command line: `serve`, `worker`, `migrate`, `demo`, `prewarm`, `publish`,
//! `token`, `admin`, `switch`, `changes`, `hotkeys`, `replay-recorded`, `reconcile`,
//! `readiness` and `rehearse`.

use clap::{Parser, Subcommand};
use contract::Actor;
use contract::Source;
use contract::{ActivityInput, ActivityItemInput, ActivityKind, ItemInput, Role};
use contract::{HotKeyAction, HotKeyKind, NewHotKey};
use reports::{findings_table, progress_bar, readiness_table, rehearsal_report, switch_table};
use std::io::BufRead;

use crate::startup::{self, Application};
use base::{config::Settings, db, etcd::EtcdLink, metrics::Metrics};
use ops::{
    changes::{
        history as change_history,
        service::{self as change_service, Submission, Submitted},
    },
    control::board::{Board, Flip},
    hotkeys::service as hotkey_service,
    prewarm,
    reconcile::service as reconcile,
};
use sale::{
    catalog::service as catalog,
    identity::{buyer_token, password, secret_token, users},
};

#[derive(Parser)]
#[command(
    name = "seckill",
    version,
    about = "Flash-sale platform: API, console and workers"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the buyer API, admin API, console and /metrics, with the background workers.
    Serve {
        /// Leave the workers (order consumers, outbox relay, DLQ sink) to `seckill worker` processes.
        #[arg(long)]
        no_workers: bool,
    },
    /// Run the background workers only: order consumers, outbox relay, DLQ sink.
    Worker,
    /// Hand the pre-orders recorded while the async switch was on `record` to the order
    /// pipeline (audited with the reason); prints how many.
    ReplayRecorded {
        #[arg(long)]
        reason: String,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Seed the demo: an ops and a merchant user (passwords printed), one item, one
    /// pre-warmed activity with its sale page published (a link with a demo buyer's token printed).
    Demo,
    /// Load an activity's stock, buyer records and Bloom filter keys into Redis.
    Prewarm { activity: i64 },
    /// Render an activity's static sale page into the site directory as a new version
    /// (running servers pick it up within `[sale_page] refresh_ms`); prints `{url, version}`.
    Publish { activity: i64 },
    /// Compare an activity's Redis stock and buyer records with PostgreSQL's orders and
    /// restore journal: shows the run's progress, then prints every finding; exits
    /// non-zero when the run failed.
    Reconcile {
        activity: i64,
        /// Also repair the classes that are safe to repair (flags the rest); audited.
        #[arg(long, requires = "reason")]
        repair: bool,
        /// Why (audited); required with --repair.
        #[arg(long)]
        reason: Option<String>,
    },
    /// The pre-sale readiness check of an activity: prints every check as a table; exits
    /// non-zero when the activity is not ready.
    Readiness { activity: i64 },
    /// Rehearse an activity's sale: the built-in load generator sends --buyers synthetic
    /// buyers' buys at --rate per second to the deployment's server (`SECKILL_BIND`) against
    /// a shadow copy of the activity, then checks the invariants and removes the copy. Shows
    /// the progress, then prints outcomes, latencies and checks; exits non-zero unless the
    /// check passed.
    Rehearse {
        activity: i64,
        #[arg(long, default_value_t = 3000)]
        buyers: i64,
        /// Buy requests per second.
        #[arg(long, default_value_t = 1500)]
        rate: i64,
        /// Why (audited).
        #[arg(long, default_value = "rehearsal from the command line")]
        reason: String,
    },
    /// Mint a buyer token (HS256 JWT) for tests and load generation.
    Token {
        #[arg(long)]
        user: i64,
        #[arg(long, default_value_t = 24)]
        ttl_hours: i64,
    },
    /// Manage console users and admin API tokens.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Read or flip switches and limits in etcd (needs PostgreSQL and etcd only).
    #[command(subcommand)]
    Switch(SwitchCommand),
    /// Switch changes that wait (scheduled, with a revert due): list or cancel them.
    #[command(subcommand)]
    Changes(changes::ChangesCommand),
    /// The hot keys in force (as etcd holds them), or add or remove one by hand (audited;
    /// needs PostgreSQL and etcd only).
    Hotkeys {
        #[command(subcommand)]
        command: Option<HotkeysCommand>,
    },
}

#[derive(Subcommand)]
enum HotkeysCommand {
    /// Put a key in force on every instance for --hold-s seconds; prints it as JSON.
    Add {
        /// `item`, `user` or `ip`.
        kind: HotKeyKind,
        /// An item or user id, or an IP address.
        key: String,
        /// `watch`, `cache` (items), `limit` (with --limit-per-s) or `block` (users, addresses).
        #[arg(long)]
        action: HotKeyAction,
        #[arg(long)]
        limit_per_s: Option<u64>,
        #[arg(long, default_value_t = 300)]
        hold_s: u64,
        #[arg(long)]
        reason: String,
    },
    /// Take a key out of force (a detected key comes back if it is still hot).
    Remove {
        kind: String,
        key: String,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand)]
enum SwitchCommand {
    /// Every switch and limit with its etcd revision and who applied it; one as JSON with PATH.
    Get {
        /// e.g. `switches/entry`, `switches/entry/42`, `limits/max_in_flight`.
        path: Option<String>,
    },
    /// Write a value (audited with source `cli` and the OS user), then wait until every
    /// live instance applied it; exits non-zero if some did not within the wait. With
    /// --at or --revert-after, a change the leader applies later: prints it.
    Set {
        path: String,
        value: String,
        #[arg(long)]
        reason: String,
        #[arg(long, default_value_t = 3000)]
        wait_ms: u64,
        /// Apply at this time (RFC 3339, e.g. `2026-12-24T20:00:00+08:00`) instead of now.
        #[arg(long)]
        at: Option<chrono::DateTime<chrono::Utc>>,
        /// Set the key back to the value it replaced this many seconds after applying.
        #[arg(long = "revert-after")]
        revert_after_s: Option<u32>,
        /// Flip a key that needs four eyes at once, without the second person (the CLI
        /// acts as `admin`; the audit flags it).
        #[arg(long)]
        emergency: bool,
        /// Put the value in force on some instances only, until `seckill changes
        /// promote|abort`: node ids separated by commas, or a share of the live ones
        /// (`25%`). Prints the change.
        #[arg(long, value_parser = contract::StageTarget::parse)]
        stage: Option<contract::StageTarget>,
    },
    /// The values a key held, newest first, with the revision a rollback names (JSON).
    History { path: String },
    /// Set the value the key held at --revision again (a new audited change; a key that
    /// needs four eyes waits for a second person).
    Rollback {
        path: String,
        #[arg(long)]
        revision: i64,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create a user (or reset its password and role); the password is read from stdin.
    CreateUser {
        #[arg(long)]
        username: String,
        #[arg(long)]
        role: Role,
        /// The merchant a `merchant` user belongs to (created if new).
        #[arg(long)]
        merchant: Option<String>,
    },
    /// Issue an admin API bearer token for a user; printed once, stored hashed.
    Token {
        #[arg(long)]
        username: String,
        #[arg(long, default_value = "cli")]
        label: String,
    },
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let settings = Settings::load()?;
    match cli.command {
        Command::Serve { no_workers } => {
            let workers = settings.workers && !no_workers;
            Application::build(Settings {
                workers,
                ..settings
            })
            .await?
            .run_until_stopped()
            .await?
        }
        Command::Worker => startup::run_workers(settings).await?,
        Command::ReplayRecorded { reason } => {
            let state = startup::connect(settings).await?;
            let report = sale::orders::recordings::replay(
                &state,
                &cli_actor(),
                contract::Source::Cli,
                &reason,
            )
            .await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Migrate => {
            db::migrate(&db::connect(&settings).await?).await?;
            println!("migrations applied");
        }
        Command::Token { user, ttl_hours } => {
            anyhow::ensure!(user > 0, "--user must be a positive id");
            println!(
                "{}",
                buyer_token::mint(
                    &settings.jwt_secret,
                    user,
                    chrono::Duration::hours(ttl_hours)
                )?
            );
        }
        Command::Admin(AdminCommand::CreateUser {
            username,
            role,
            merchant,
        }) => {
            let pool = db::connect(&settings).await?;
            let password = read_password()?;
            create_user(&pool, &username, &password, role, merchant.as_deref()).await?;
            println!("user {username} ({role}) ready");
        }
        Command::Admin(AdminCommand::Token { username, label }) => {
            let pool = db::connect(&settings).await?;
            let user = users::user_by_name(&pool, &username)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no user named {username}"))?;
            let token = secret_token::generate();
            users::create_api_token(&pool, user.user_id, &secret_token::digest(&token), &label)
                .await?;
            println!("{token}");
        }
        Command::Demo => seed_demo(settings).await?,
        Command::Switch(command) => switch(settings, command).await?,
        Command::Changes(command) => {
            let stores = ControlStores::connect(&settings).await?;
            changes::run(&stores.board(&settings), &keyboard_actor(), command).await?;
        }
        Command::Hotkeys { command } => hotkeys(settings, command).await?,
        Command::Prewarm { activity } => {
            let state = startup::connect(settings).await?;
            let report = prewarm::prewarm(&state, &cli_actor(), Source::Cli, activity).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Publish { activity } => {
            let state = startup::connect(settings).await?;
            let page = sale::sale_page::publish(&state, &cli_actor(), activity).await?;
            println!("{}", serde_json::to_string_pretty(&page)?);
        }
        Command::Reconcile {
            activity,
            repair,
            reason,
        } => reconcile_activity(settings, activity, repair, reason).await?,
        Command::Readiness { activity } => {
            let state = startup::connect(settings).await?;
            let report = ops::readiness::check(&state, &cli_actor(), activity).await?;
            print!("{}", readiness_table(&report));
            anyhow::ensure!(report.ready, "activity {activity} is not ready");
        }
        Command::Rehearse {
            activity,
            buyers,
            rate,
            reason,
        } => {
            let request = contract::StartRehearsal {
                buyers,
                rate_per_s: rate,
                reason,
            };
            rehearse(settings, activity, request).await?
        }
    }
    Ok(())
}

/// Whoever runs the CLI on a server host is trusted as an admin; the audit names it `cli`.
fn cli_actor() -> Actor {
    Actor {
        user_id: 0,
        username: "cli".into(),
        role: Role::Admin,
        merchant_id: None,
    }
}

/// How often `seckill reconcile` and `seckill rehearse` ask for progress.
const PROGRESS_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// `seckill reconcile`: starts the run (it executes in a task of this process), follows it
/// on stderr until it is over, then prints its findings on stdout.
async fn reconcile_activity(
    settings: Settings,
    activity_id: i64,
    repair: bool,
    reason: Option<String>,
) -> anyhow::Result<()> {
    use contract::{RunStatus, StartReconciliation};
    use std::io::Write;

    let reason = reason
        .map(|reason| reason.trim().to_owned())
        .filter(|reason| !reason.is_empty());
    anyhow::ensure!(
        !repair || reason.is_some(),
        "--repair needs --reason TEXT: a repair is audited with why it ran"
    );
    let state = startup::connect(settings).await?;
    let actor = cli_actor();
    let started = reconcile::start(
        &state,
        &actor,
        Source::Cli,
        StartReconciliation {
            activity_id,
            repair,
            reason,
        },
    )
    .await?;
    let kind = if repair { "repair" } else { "report" };
    eprintln!(
        "reconciliation run {} ({kind}) of activity {activity_id}",
        started.id
    );
    // The run lives in a task of this process: returning before it is over would end it.
    let run = loop {
        let run = reconcile::get(&state, &actor, started.id).await?;
        let mut stderr = std::io::stderr().lock();
        write!(stderr, "\r{}", progress_bar(run.progress, "items"))?;
        stderr.flush()?;
        if run.status != RunStatus::Running {
            writeln!(stderr)?;
            break run;
        }
        drop(stderr);
        tokio::time::sleep(PROGRESS_POLL).await;
    };
    print!("{}", findings_table(&run.findings));
    match run.status {
        RunStatus::Failed => anyhow::bail!(
            "reconciliation run {} failed: {}",
            run.id,
            run.error.as_deref().unwrap_or("no reason recorded")
        ),
        RunStatus::Done | RunStatus::Running => Ok(()),
    }
}

/// `seckill rehearse`: starts the rehearsal (it runs in a task of this process and sends
/// its load to the deployment's server), shows its stage and progress on stderr until it is
/// over, then prints its result on stdout.
async fn rehearse(
    settings: Settings,
    activity_id: i64,
    request: contract::StartRehearsal,
) -> anyhow::Result<()> {
    use contract::RehearsalStatus;
    use std::io::Write;

    let state = startup::connect(settings).await?;
    let actor = cli_actor();
    let started =
        ops::rehearsal::service::start(&state, &actor, Source::Cli, activity_id, request).await?;
    eprintln!(
        "rehearsal {} of activity {activity_id} against {}",
        started.id, state.settings.bind
    );
    // The rehearsal lives in a task of this process: returning before it is over would end
    // it before its clean-up.
    let rehearsal = loop {
        let rehearsal = ops::rehearsal::service::get(&state, &actor, started.id).await?;
        let mut stderr = std::io::stderr().lock();
        write!(
            stderr,
            "\r{:<9} {}",
            rehearsal.stage.as_str(),
            progress_bar(rehearsal.progress, "requests")
        )?;
        stderr.flush()?;
        if rehearsal.status != RehearsalStatus::Running {
            writeln!(stderr)?;
            break rehearsal;
        }
        drop(stderr);
        tokio::time::sleep(PROGRESS_POLL).await;
    };
    print!("{}", rehearsal_report(&rehearsal));
    anyhow::ensure!(
        rehearsal.status == RehearsalStatus::Passed && rehearsal.cleaned_up,
        "rehearsal {} {}{}",
        rehearsal.id,
        rehearsal.status.as_str(),
        rehearsal
            .error
            .as_deref()
            .map(|error| format!(": {error}"))
            .unwrap_or_default()
    );
    Ok(())
}

/// What the control-plane commands (`seckill switch get|set`, `seckill hotkeys`) need:
/// PostgreSQL and etcd, not Redis or RabbitMQ, which may be the very thing that is down.
struct ControlStores {
    db: sqlx::PgPool,
    etcd: EtcdLink,
}

impl ControlStores {
    async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        let db = db::connect(settings).await?;
        // A one-off command's timings are not scraped.
        let etcd = EtcdLink::new(settings.etcd_endpoints.clone(), &Metrics::new());
        Ok(Self { db, etcd })
    }

    fn board<'a>(&'a self, settings: &'a Settings) -> Board<'a> {
        Board {
            db: &self.db,
            etcd: &self.etcd,
            settings,
            instance: None,
        }
    }
}

/// The audit names the person at the keyboard, as the OS knows them.
fn keyboard_actor() -> Actor {
    Actor {
        username: std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| cli_actor().username),
        ..cli_actor()
    }
}

async fn hotkeys(settings: Settings, command: Option<HotkeysCommand>) -> anyhow::Result<()> {
    let stores = ControlStores::connect(&settings).await?;
    let board = stores.board(&settings);
    let actor = keyboard_actor();
    match command {
        None => {
            let hot = hotkey_service::list(&board, &actor).await?;
            println!("{}", serde_json::to_string_pretty(&hot)?);
        }
        Some(HotkeysCommand::Add {
            kind,
            key,
            action,
            limit_per_s,
            hold_s,
            reason,
        }) => {
            let new = NewHotKey {
                kind,
                key,
                action,
                limit_per_s,
                hold_s,
                reason,
            };
            let added = hotkey_service::add(&board, &actor, Source::Cli, &new).await?;
            println!("{}", serde_json::to_string_pretty(&added)?);
        }
        Some(HotkeysCommand::Remove { kind, key, reason }) => {
            hotkey_service::remove(&board, &actor, Source::Cli, &kind, &key, &reason).await?;
            println!("removed {kind}/{key}");
        }
    }
    Ok(())
}

/// `seckill switch get|set`: the switch board over PostgreSQL and etcd only, so ops can
/// flip a switch while Redis or RabbitMQ is the thing that is down.
async fn switch(settings: Settings, command: SwitchCommand) -> anyhow::Result<()> {
    let stores = ControlStores::connect(&settings).await?;
    let board = stores.board(&settings);
    let actor = keyboard_actor();
    match command {
        SwitchCommand::Get { path: None } => print!("{}", switch_table(&board.read().await?)),
        SwitchCommand::Get { path: Some(path) } => {
            let wanted = path.trim_matches('/');
            let read = board.read().await?;
            let row = read
                .switches
                .iter()
                .find(|row| row.path == wanted)
                .ok_or_else(|| anyhow::anyhow!("no switch or limit at `{wanted}`"))?;
            println!("{}", serde_json::to_string_pretty(row)?);
        }
        SwitchCommand::History { path } => {
            let history = change_history::history(&board, &actor, &path).await?;
            println!("{}", serde_json::to_string_pretty(&history)?);
        }
        SwitchCommand::Rollback {
            path,
            revision,
            reason,
        } => {
            let flip = Flip {
                actor: &actor,
                source: Source::Cli,
                path: &path,
                value: "",
                reason: &reason,
                wait: None,
            };
            match change_history::rollback(&board, flip, revision, chrono::Utc::now()).await? {
                Submitted::Flipped(change) => {
                    println!("{}", serde_json::to_string_pretty(&change)?)
                }
                Submitted::Waiting(accepted) => {
                    println!("{}", serde_json::to_string_pretty(&accepted)?)
                }
            }
        }
        SwitchCommand::Set {
            path,
            value,
            reason,
            wait_ms,
            at,
            revert_after_s,
            emergency,
            stage,
        } => {
            let waits = at.is_some() || revert_after_s.is_some() || stage.is_some();
            let submitted = change_service::submit(
                &board,
                Submission {
                    flip: Flip {
                        actor: &actor,
                        source: Source::Cli,
                        path: &path,
                        value: &value,
                        reason: &reason,
                        wait: (!waits).then(|| std::time::Duration::from_millis(wait_ms)),
                    },
                    at,
                    revert_after_s,
                    emergency,
                    stage,
                    now: chrono::Utc::now(),
                },
            )
            .await?;
            let change = match submitted {
                Submitted::Waiting(accepted) => {
                    println!("{}", serde_json::to_string_pretty(&accepted)?);
                    return Ok(());
                }
                Submitted::Flipped(change) => change,
            };
            println!("{}", serde_json::to_string_pretty(&change)?);
            if let Some(propagation) = &change.propagation {
                anyhow::ensure!(
                    propagation.complete,
                    "not every live instance applied revision {} within {wait_ms} ms",
                    change.revision
                );
            }
        }
    }
    Ok(())
}

fn read_password() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    anyhow::ensure!(
        password.len() >= 8,
        "the password (read from stdin) needs at least 8 characters"
    );
    Ok(password)
}

/// Creates or resets a user (a reset signs it out of every session and revokes its API
/// tokens); a merchant user needs its merchant's name.
pub async fn create_user(
    pool: &sqlx::PgPool,
    username: &str,
    password: &str,
    role: Role,
    merchant: Option<&str>,
) -> anyhow::Result<Actor> {
    // A username longer than a login accepts could never sign in.
    sale::identity::rules::check_username(username)?;
    let merchant_id = match (role, merchant) {
        (Role::Merchant, Some(name)) => Some(users::ensure_merchant(pool, name).await?),
        (Role::Merchant, None) => anyhow::bail!("a merchant user needs --merchant NAME"),
        (_, Some(_)) => anyhow::bail!("only merchant users belong to a merchant"),
        (_, None) => None,
    };
    let hash = password::hash(password.to_owned()).await?;
    let user_id = users::upsert_user(pool, username, &hash, role, merchant_id).await?;
    Ok(Actor {
        user_id,
        username: username.to_owned(),
        role,
        merchant_id,
    })
}

const DEMO_ACTIVITY: &str = "Demo flash sale";
/// The buyer the demo's sale page link signs in (buyers are only ids in tokens).
const DEMO_BUYER: i64 = 1001;

/// Demo users get fresh random passwords on every run (printed, never stored in clear);
/// a demo activity opening in five minutes is added unless an upcoming one exists,
/// pre-warmed, and its sale page published.
async fn seed_demo(settings: Settings) -> anyhow::Result<()> {
    let state = startup::connect(settings).await?;
    db::migrate(&state.db).await?;
    let ops_password = secret_token::generate()[..16].to_owned();
    let merchant_password = secret_token::generate()[..16].to_owned();
    create_user(&state.db, "ops", &ops_password, Role::Ops, None).await?;
    let merchant = create_user(
        &state.db,
        "merchant",
        &merchant_password,
        Role::Merchant,
        Some("Demo Merchant"),
    )
    .await?;

    let now = chrono::Utc::now();
    let upcoming = catalog::list_activities(&state, &merchant)
        .await?
        .into_iter()
        .find(|a| a.title == DEMO_ACTIVITY && a.starts_at > now);
    let activity_id = match upcoming {
        Some(activity) => activity.id,
        None => {
            let item_id = catalog::create_item(
                &state,
                &merchant,
                ItemInput {
                    name: "Demo phone".into(),
                    description: "A phone sold in the demo flash sale".into(),
                    price_cents: 99_900,
                    merchant_id: None,
                },
            )
            .await?;
            let starts_at = now + chrono::Duration::minutes(5);
            catalog::create_activity(
                &state,
                &merchant,
                ActivityInput {
                    title: DEMO_ACTIVITY.into(),
                    starts_at,
                    ends_at: starts_at + chrono::Duration::hours(1),
                    kind: ActivityKind::Standard,
                    pay_timeout_s: 900,
                    items: vec![ActivityItemInput {
                        item_id,
                        stock: 100,
                        per_user_limit: 1,
                        price_cents: 49_900,
                    }],
                    seats: vec![],
                    merchant_id: None,
                    mode: contract::SaleMode::FirstCome,
                    registration_opens_at: None,
                    registration_closes_at: None,
                    code_ttl_s: None,
                },
            )
            .await?
        }
    };
    let report = prewarm::prewarm(&state, &cli_actor(), Source::Cli, activity_id).await?;
    let stock: i64 = report.items.iter().map(|item| item.redis_stock).sum();
    let page = sale::sale_page::publish(&state, &cli_actor(), activity_id).await?;
    let token = buyer_token::mint(
        &state.settings.jwt_secret,
        DEMO_BUYER,
        chrono::Duration::hours(24),
    )?;
    println!("demo ready: activity {activity_id} ({DEMO_ACTIVITY}), pre-warmed with {stock} units");
    println!("  ops user:      ops / {ops_password}");
    println!("  merchant user: merchant / {merchant_password}");
    println!(
        "  sale page (version {}, as buyer {DEMO_BUYER}): http://{}{}#token={token}",
        page.version, state.settings.bind, page.url
    );
    Ok(())
}

mod changes;
mod reports;
#[cfg(test)]
mod tests;
