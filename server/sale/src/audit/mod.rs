//! The audit log in PostgreSQL, which every operator action writes and the console reads:
//! switch flips (`switch_audit`, written here before etcd is), the other operator actions
//! (`ops_audit`, [`ops_audit`]), the merged log as one page, and the one rule for the reason
//! each of them must give ([`reason`]). It sits beneath every capability that audits, the
//! buyer-facing ones included (a dead-letter requeue, a lottery revoke), so none of them
//! reaches up into the admin side for it.

pub mod ops_audit;
pub mod reason;

use chrono::{DateTime, Utc};
use contract::{AuditEntry, AuditFilter, AuditKind, Source, SwitchRevision};

use base::db::decode_name;
use sqlx::PgPool;

/// A flip about to be written to etcd.
pub struct PendingFlip<'a> {
    pub actor: &'a str,
    pub source: Source,
    pub path: &'a str,
    pub new_value: &'a str,
    pub reason: &'a str,
    /// The waiting change this flip applies or reverts, if any.
    pub change_id: Option<i64>,
    /// An admin's flip of a key that needs four eyes, without the second person.
    pub emergency: bool,
}

/// A flip whose audit row is committed, `pending`, before etcd is written: a crash between
/// the two leaves the row, so no flip is ever in force unaudited. [`OpenFlip::applied`] or
/// [`OpenFlip::failed`] says how it ended.
#[must_use = "a flip's audit row says how it ended: applied or failed"]
pub struct OpenFlip {
    pub id: i64,
}

/// Commits a flip's audit row, `pending`, before etcd is written: if the database is away,
/// nothing is flipped.
pub async fn open_flip(db: &PgPool, flip: &PendingFlip<'_>) -> sqlx::Result<OpenFlip> {
    let id = sqlx::query_scalar(
        "INSERT INTO switch_audit
             (actor, source, path, new_value, reason, state, change_id, emergency)
         VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7) RETURNING id",
    )
    .bind(flip.actor)
    .bind(flip.source.as_str())
    .bind(flip.path)
    .bind(flip.new_value)
    .bind(flip.reason)
    .bind(flip.change_id)
    .bind(flip.emergency)
    .fetch_one(db)
    .await?;
    Ok(OpenFlip { id })
}

/// The audit row of a change's flip: the one a leader opened before it died, if its flip
/// of the same value is still `pending`, else a new one. The leader's claim of the change
/// serializes the attempts, so two never race here.
pub async fn open_change_flip(db: &PgPool, flip: &PendingFlip<'_>) -> sqlx::Result<OpenFlip> {
    let earlier: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM switch_audit
         WHERE change_id = $1 AND path = $2 AND new_value = $3 AND state = 'pending'
         ORDER BY id LIMIT 1",
    )
    .bind(flip.change_id)
    .bind(flip.path)
    .bind(flip.new_value)
    .fetch_optional(db)
    .await?;
    match earlier {
        Some(id) => Ok(OpenFlip { id }),
        None => open_flip(db, flip).await,
    }
}

impl OpenFlip {
    /// Etcd took the write: the value it replaced and the new revision.
    pub async fn applied(
        self,
        db: &PgPool,
        old_value: Option<&str>,
        etcd_revision: i64,
    ) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE switch_audit SET state = 'applied', old_value = $2, etcd_revision = $3
             WHERE id = $1",
        )
        .bind(self.id)
        .bind(old_value)
        .bind(etcd_revision)
        .execute(db)
        .await?;
        Ok(())
    }

    /// Etcd refused the write, or could not be reached. If even this cannot be written,
    /// the row stays `pending`, which says the same: its outcome was not learnt.
    pub async fn failed(self, db: &PgPool) {
        let marked = sqlx::query("UPDATE switch_audit SET state = 'failed' WHERE id = $1")
            .bind(self.id)
            .execute(db)
            .await;
        if let Err(error) = marked {
            tracing::warn!(audit_id = self.id, error = %error, "a flip etcd did not take stays pending in the audit");
        }
    }
}

/// A change written straight into etcd. Every instance's watcher offers it; the unique
/// index `switch_audit_external_once` keeps the first. Returns whether this call stored it.
pub async fn record_external(
    db: &PgPool,
    path: &str,
    old_value: Option<&str>,
    new_value: &str,
    reason: &str,
    etcd_revision: i64,
) -> sqlx::Result<bool> {
    let stored = sqlx::query(
        "INSERT INTO switch_audit (actor, source, path, old_value, new_value, reason, etcd_revision)
         VALUES ('etcd', 'external', $1, $2, $3, $4, $5)
         ON CONFLICT (path, etcd_revision, new_value) WHERE source = 'external' DO NOTHING",
    )
    .bind(path)
    .bind(old_value)
    .bind(new_value)
    .bind(reason)
    .bind(etcd_revision)
    .execute(db)
    .await?;
    Ok(stored.rows_affected() == 1)
}

/// One flip of a switch, as `switch_audit` has it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct SwitchFlip {
    pub path: String,
    pub actor: String,
    pub old_value: Option<String>,
    pub new_value: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// The latest flip in force of each of `paths` that was ever flipped.
pub async fn last_flips(db: &PgPool, paths: &[String]) -> sqlx::Result<Vec<SwitchFlip>> {
    sqlx::query_as(
        "SELECT DISTINCT ON (path) path, actor, old_value, new_value, reason, created_at AS at
         FROM switch_audit WHERE path = ANY($1) AND state = 'applied'
         ORDER BY path, created_at DESC, id DESC",
    )
    .bind(paths)
    .fetch_all(db)
    .await
}

/// Every flip of `paths` etcd took at or after `since`, oldest first.
pub async fn flips_since(
    db: &PgPool,
    paths: &[String],
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<SwitchFlip>> {
    sqlx::query_as(
        "SELECT path, actor, old_value, new_value, reason, created_at AS at
         FROM switch_audit WHERE path = ANY($1) AND created_at >= $2 AND state = 'applied'
         ORDER BY created_at, id",
    )
    .bind(paths)
    .bind(since)
    .fetch_all(db)
    .await
}

#[derive(sqlx::FromRow)]
struct RevisionRow {
    revision: i64,
    value: String,
    by: String,
    reason: String,
    at: DateTime<Utc>,
    source: String,
}

/// The values etcd took for `path`, newest first, at most `limit`; with `revision`, only
/// the one written at that revision.
pub async fn revisions(
    db: &PgPool,
    path: &str,
    revision: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<SwitchRevision>> {
    let rows: Vec<RevisionRow> = sqlx::query_as(
        "SELECT etcd_revision AS revision, new_value AS value, actor AS by, reason,
                created_at AS at, source
         FROM switch_audit
         WHERE path = $1 AND state = 'applied' AND etcd_revision IS NOT NULL
           AND ($2::BIGINT IS NULL OR etcd_revision = $2)
         ORDER BY etcd_revision DESC, id DESC LIMIT $3",
    )
    .bind(path)
    .bind(revision)
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(SwitchRevision {
                revision: row.revision,
                value: row.value,
                by: row.by,
                reason: row.reason,
                at: row.at,
                source: decode_name("source", &row.source, Source::parse)?,
            })
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct Row {
    kind: String,
    id: i64,
    at: DateTime<Utc>,
    actor: String,
    source: String,
    action: String,
    target: String,
    old_value: Option<String>,
    new_value: Option<String>,
    reason: Option<String>,
    etcd_revision: Option<i64>,
    detail: Option<String>,
    change_id: Option<i64>,
    emergency: bool,
}

/// Switch flips and operator actions merged, newest first, only the rows `filter` keeps;
/// `limit` rows after skipping `offset`. Each table is cut at `offset + limit` by its own time
/// index before merging. A text filter reads every row of a kind (no index serves a
/// substring): the log is an operator's, thousands of rows, not a buyer's.
pub async fn page(
    db: &PgPool,
    limit: i64,
    offset: i64,
    filter: &AuditFilter,
) -> sqlx::Result<Vec<AuditEntry>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT * FROM (
             (SELECT 'switch' AS kind, id, created_at AS at, actor, source,
                     CASE state WHEN 'applied' THEN 'set' ELSE 'set_' || state END AS action,
                     path AS target, old_value, new_value, reason, etcd_revision,
                     NULL::TEXT AS detail, change_id, emergency
                FROM switch_audit
               WHERE ($4::TEXT IS NULL OR $4 = 'switch')
                 AND ($5::TEXT IS NULL OR strpos(lower(concat_ws(' ', actor, source,
                          CASE state WHEN 'applied' THEN 'set' ELSE 'set_' || state END,
                          path, old_value, new_value, reason)), lower($5)) > 0)
               ORDER BY created_at DESC, id DESC LIMIT $3)
             UNION ALL
             (SELECT 'ops', id, created_at, actor, source, action, target, NULL, NULL, NULL,
                     NULL, detail::TEXT, NULL, false
                FROM ops_audit
               WHERE ($4::TEXT IS NULL OR $4 = 'ops')
                 AND ($5::TEXT IS NULL OR strpos(lower(concat_ws(' ', actor, source, action,
                          target, detail::TEXT)), lower($5)) > 0)
               ORDER BY created_at DESC, id DESC LIMIT $3)
         ) merged
         ORDER BY at DESC, kind, id DESC
         LIMIT $1 OFFSET $2",
    )
    .bind(limit)
    .bind(offset)
    .bind(offset.saturating_add(limit))
    .bind(filter.kind.map(AuditKind::as_str))
    .bind(filter.containing.as_deref())
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(AuditEntry {
                kind: decode_name("kind", &row.kind, AuditKind::parse)?,
                id: row.id,
                at: row.at,
                actor: row.actor,
                source: decode_name("source", &row.source, Source::parse)?,
                action: row.action,
                target: row.target,
                old_value: row.old_value,
                new_value: row.new_value,
                reason: row.reason,
                etcd_revision: row.etcd_revision,
                detail: row.detail,
                change_id: row.change_id,
                emergency: row.emergency,
            })
        })
        .collect()
}
