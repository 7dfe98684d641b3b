//! The `seckill` command line (SPEC §12): `serve`, `migrate`, `demo`, `token`, `admin`.
//! Subcommands of later capabilities (`switch`, `prewarm`, `reconcile`, `worker`) join here.

use app::model::{ActivityInput, ActivityItemInput, ActivityKind, ItemInput, Role};
use clap::{Parser, Subcommand};
use std::io::BufRead;

use crate::{
    config::Settings,
    domain::access::Actor,
    identity::{buyer_token, password, secret_token},
    services::{catalog, prewarm},
    startup::{self, Application},
    storage::{db, users},
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
    /// Serve the buyer API, admin API, console and /metrics.
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Seed the demo: an ops and a merchant user (passwords printed), one item, one pre-warmed activity.
    Demo,
    /// Load an activity's stock, buyer records and Bloom filter keys into Redis.
    Prewarm { activity: i64 },
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
        Command::Serve => {
            Application::build(settings)
                .await?
                .run_until_stopped()
                .await?
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
        Command::Prewarm { activity } => {
            let state = startup::connect(settings).await?;
            let report = prewarm::prewarm(&state, &cli_actor(), activity).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
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

/// Creates or resets a user; a merchant user needs its merchant's name.
pub async fn create_user(
    pool: &sqlx::PgPool,
    username: &str,
    password: &str,
    role: Role,
    merchant: Option<&str>,
) -> anyhow::Result<Actor> {
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

/// Demo users get fresh random passwords on every run (printed, never stored in clear);
/// a demo activity opening in five minutes is added unless an upcoming one exists, and
/// pre-warmed.
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
                },
            )
            .await?
        }
    };
    let report = prewarm::prewarm(&state, &cli_actor(), activity_id).await?;
    let stock: i64 = report.items.iter().map(|item| item.redis_stock).sum();
    println!("demo ready: activity {activity_id} ({DEMO_ACTIVITY}), pre-warmed with {stock} units");
    println!("  ops user:      ops / {ops_password}");
    println!("  merchant user: merchant / {merchant_password}");
    Ok(())
}
