//! The static sale page: publishing an activity renders its page (everything static:
//! title, times, items, prices, descriptions), a script and a stylesheet under
//! content-hashed names into the site directory, ready for a CDN, and bumps the version
//! PostgreSQL keeps. Every instance serves the pages from memory (`site`), loaded at
//! start-up and whenever PostgreSQL's version differs from its own (a publish by another
//! instance or the command line), and serves the button script whose `canStart` the
//! server's clock decides (`rules`). The page of a deleted activity stops being served at
//! the next refresh; the leader's retention job removes its folder and the assets no page
//! names any more (`prune`). Routes in `routes`, rendering in `render`, the versions in
//! `store`; the page's behaviour is `assets/sale.js`, its event stream `assets/events.js`.

pub mod render;
pub mod routes;
pub mod rules;
pub mod site;
pub mod store;

pub use site::SalePages;

use contract::{Actor, Permission, PublishedPage};
use std::{collections::HashSet, time::Duration};

use crate::{catalog::copies, identity::authorize, SaleState};
use base::{
    error::{ApiError, ApiResult},
    quiet_log::quiet,
};

/// Renders and writes the activity's page as a new version and serves it. The owning
/// merchant, ops and admin may; another merchant's activity is absent (404).
pub async fn publish(
    state: &SaleState,
    actor: &Actor,
    activity_id: i64,
) -> ApiResult<PublishedPage> {
    authorize(actor, Permission::PublishSalePage)?;
    let activity = copies::real_activity(&state.db, activity_id, actor.visible_merchant()).await?;
    let (mut tx, current) = store::begin_publish(&state.db, activity_id).await?;
    let version = rules::next_version(current);
    let rendered = render::render(&activity, version);
    let times = (
        activity.starts_at.timestamp_millis(),
        activity.ends_at.timestamp_millis(),
    );
    let pages = &state.sale_pages;
    pages
        .write(activity_id, version, times, &rendered)
        .await
        .map_err(|error| {
            ApiError::Internal(anyhow::Error::new(error).context("writing the sale page"))
        })?;
    store::save_version(&mut tx, activity_id, version, &actor.username).await?;
    tx.commit().await?;
    pages.load(activity_id).await.map_err(|error| {
        ApiError::Internal(anyhow::Error::new(error).context("loading the sale page"))
    })?;
    tracing::info!(activity_id, version, by = %actor.username, "sale page published");
    Ok(PublishedPage {
        activity_id,
        url: render::page_url(activity_id),
        version,
    })
}

/// Loads every page whose version in PostgreSQL differs from the one served here, and stops
/// serving the pages PostgreSQL no longer has (their activity was deleted) and the assets
/// whose files were removed; returns how many it loaded. A page whose files are missing
/// stays as it was (logged).
pub async fn refresh(state: &SaleState) -> Result<usize, sqlx::Error> {
    let pages = &state.sale_pages;
    let mut loaded = 0;
    // Only pages served before the read can be gone: one loaded after it (a publish here
    // committing meanwhile) is not in the read, and is no less published.
    let served = pages.served();
    let versions = store::versions(&state.db).await?;
    let published: HashSet<i64> = versions.iter().map(|(id, _)| *id).collect();
    let gone: HashSet<i64> = served
        .into_iter()
        .filter(|id| !published.contains(id))
        .collect();
    let (pages_gone, assets_gone) = pages.forget(&gone).await;
    if pages_gone + assets_gone > 0 {
        tracing::info!(
            pages_gone,
            assets_gone,
            "sale pages of deleted activities and removed assets no longer served"
        );
    }
    for (activity_id, version) in versions {
        if pages.version(activity_id) == Some(version) {
            continue;
        }
        match pages.load(activity_id).await {
            Ok(_) => loaded += 1,
            Err(error) => quiet!(
                warn,
                "sale_page.load",
                activity_id,
                version,
                error = %error,
                "a published sale page is not in the site directory"
            ),
        }
    }
    Ok(loaded)
}

/// The leader's retention: removes from the site directory the pages of deleted activities
/// and the assets no page names that are older than `grace` by `now_ms`. Returns how many
/// pages and assets it removed.
pub async fn prune(
    state: &SaleState,
    now_ms: i64,
    grace: Duration,
) -> anyhow::Result<(usize, usize)> {
    let pages = &state.sale_pages;
    let on_disk = pages.page_dirs().await?;
    let existing: HashSet<i64> = store::existing_activities(&state.db, &on_disk)
        .await?
        .into_iter()
        .collect();
    let deleted: Vec<i64> = on_disk
        .into_iter()
        .filter(|id| !existing.contains(id))
        .collect();
    Ok(pages.prune(&deleted, now_ms, grace).await?)
}

/// Start-up: every asset of the site directory, then every published page.
pub async fn load_all(state: &SaleState) -> anyhow::Result<()> {
    let assets = state.sale_pages.load_assets().await?;
    let pages = refresh(state).await?;
    tracing::info!(assets, pages, "sale pages loaded");
    Ok(())
}

/// Follows the publishes made elsewhere, every `[sale_page] refresh_ms`.
pub fn spawn_refresher(state: &SaleState) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let interval = Duration::from_millis(state.settings.sale_page.refresh_ms.max(100));
        loop {
            tokio::time::sleep(interval).await;
            if let Err(error) = refresh(&state).await {
                quiet!(warn, "sale_page.refresh", error = %error, "sale page versions unreadable");
            }
        }
    })
}
