//! The PostgreSQL pool and the embedded migrations.

use secrecy::ExposeSecret;
use sqlx::{postgres::PgPoolOptions, PgPool};
use std::time::Duration;

use crate::infra::config::Settings;

/// The schema of `migrations/`, compiled into the binary.
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub(crate) async fn connect(settings: &Settings) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect(settings.database_url.expose_secret())
        .await
}

pub(crate) async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// A text column that holds one of an enum's names, as the enum. Any other text is data this
/// version does not know, reported as a decode error naming the column rather than guessed.
pub(crate) fn decode_name<T>(
    column: &'static str,
    text: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, sqlx::Error> {
    parse(text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.into(),
        source: format!("unknown value `{text}`").into(),
    })
}
