//! The PostgreSQL pool and the embedded migrations.

use prometheus::{Histogram, IntGauge};
use secrecy::ExposeSecret;
use sqlx::{
    migrate::{MigrateError, Migrator},
    pool::PoolConnection,
    postgres::PgPoolOptions,
    PgPool, Postgres, Transaction,
};
use std::{
    future::Future,
    time::{Duration, Instant},
};

use crate::{config::Settings, metrics::Metrics};

/// The schema of `migrations/`, compiled into the binary.
static MIGRATIONS: Migrator = sqlx::migrate!("../../migrations");

/// The advisory lock under which one instance at a time migrates the database ("seckillm").
const MIGRATION_LOCK: i64 = 0x7365_636b_696c_6c6d;
/// How often an instance asks again for the migration lock while another holds it.
const MIGRATION_LOCK_POLL: Duration = Duration::from_millis(200);

/// Whether `error` says PostgreSQL is out of reach (unreachable, restarting or recovering,
/// shutting down, out of connections) rather than that it decided anything: worth waiting
/// for. A restart answers with errors of both kinds: a lost socket while it goes, and
/// `57P0x` ("terminating connection", "the database system is starting up") while it comes
/// back, which are database errors though no statement was judged.
pub fn is_outage(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // connection exceptions, operator intervention (shutdown), too many connections
            code.starts_with("08") || code.starts_with("57P") || code == "53300"
        }),
        _ => false,
    }
}

pub async fn connect(settings: &Settings) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect(settings.database_url.expose_secret())
        .await
}

/// The pool as a hot caller uses it (the group-commit writer, the create-order consumer):
/// its waits for a connection are timed, by caller, and counted while they last, since a
/// saturated pool shows as time queued here long before it shows as errors.
#[derive(Clone)]
pub struct MeteredPool {
    pool: PgPool,
    waiting: IntGauge,
    acquire: Histogram,
}

impl MeteredPool {
    pub fn new(pool: PgPool, metrics: &Metrics, caller: &'static str) -> Self {
        Self {
            pool,
            waiting: metrics.db_pool_waiting.clone(),
            acquire: metrics.db_pool_acquire.with_label_values(&[caller]),
        }
    }

    /// A transaction on a connection of the pool, once one is free.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.timed(self.pool.begin()).await
    }

    /// A connection of the pool, once one is free, for one statement in its own
    /// transaction.
    pub async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        self.timed(self.pool.acquire()).await
    }

    async fn timed<T>(&self, waited: impl Future<Output = T>) -> T {
        /// Counts the wait off again also when the caller gives up on it.
        struct Waiting<'a>(&'a IntGauge);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.waiting.inc();
        let waiting = Waiting(&self.waiting);
        let started = Instant::now();
        let got = waited.await;
        drop(waiting);
        self.acquire.observe(started.elapsed().as_secs_f64());
        got
    }
}

/// Applies the migrations this database lacks, one instance at a time. The lock is asked for
/// again and again rather than waited on (sqlx's own lock waits inside `pg_advisory_lock`): a
/// migration that builds an index concurrently waits for every transaction with an older
/// snapshot, a statement waiting for that lock included, while that statement waits for the
/// lock the builder holds. PostgreSQL breaks such a deadlock by failing one of them, and a
/// failed concurrent build leaves an invalid index. Between two asks an instance holds no
/// snapshot.
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    let mut connection = pool.acquire().await?;
    while !sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .fetch_one(&mut *connection)
        .await?
    {
        tokio::time::sleep(MIGRATION_LOCK_POLL).await;
    }
    let migrator = Migrator {
        migrations: MIGRATIONS.migrations.clone(),
        locking: false,
        ..Migrator::DEFAULT
    };
    let migrated = migrator.run(&mut *connection).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *connection)
        .await;
    if unlocked.is_err() {
        // The lock lasts as long as its session: a connection that kept it is not reused.
        connection.close_on_drop();
    }
    migrated
}

/// A text column that holds one of an enum's names, as the enum. Any other text is data this
/// version does not know, reported as a decode error naming the column rather than guessed.
pub fn decode_name<T>(
    column: &'static str,
    text: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, sqlx::Error> {
    parse(text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.into(),
        source: format!("unknown value `{text}`").into(),
    })
}

/// Runs one batch of a prune: `statement` deletes the rows older than `$1` among at most `$2`
/// of them (the retention job's `prune_older_than` of each table); how many went.
pub async fn prune_batch(
    pool: &PgPool,
    statement: &'static str,
    before: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(statement)
        .bind(before)
        .bind(limit)
        .execute(pool)
        .await?
        .rows_affected())
}
