//! The site directory and the copy of it this instance serves from memory.
//!
//! On disk (`[sale_page] dir`), ready to be copied to a CDN:
//! `assets/sale.<hash>.js|css` (rewritten with the same bytes by each publish naming it;
//! removed by the leader's retention job once no published page names it and its file is
//! older than a grace, so a page already open keeps its assets for that long), `{activity_id}/index.html` and
//! `{activity_id}/page.json` (the version, the sale's times and the assets the page names;
//! removed once the activity is deleted). Every file is written beside its place and
//! renamed into it, so a reader never sees half a file. An instance stops serving a page
//! when its activity's row is gone, and an asset when its file is.
//!
//! In memory, every page, its button script in each phase and every asset are ready-made
//! responses (body, entity tag, cache header) in one map swapped whole, so serving is a
//! lookup and a publish never holds a reader up.

use arc_swap::ArcSwap;
use axum::{
    body::{Body, Bytes},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use serde::{Deserialize, Serialize};
use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use super::{
    render::{button_script, Rendered},
    rules::{entity_tag, matches_tag, ButtonPhase},
};
use base::{
    clock::{Clock, SwappableClock},
    config::SalePageSettings,
};

/// One ready-made response.
pub struct StaticFile {
    body: Bytes,
    content_type: HeaderValue,
    cache_control: HeaderValue,
    etag: HeaderValue,
}

impl StaticFile {
    fn new(
        body: impl Into<Bytes>,
        content_type: &'static str,
        cache_control: &HeaderValue,
    ) -> Self {
        let body = body.into();
        let etag =
            HeaderValue::from_str(&entity_tag(&body)).unwrap_or(HeaderValue::from_static("\"\""));
        Self {
            body,
            content_type: HeaderValue::from_static(content_type),
            cache_control: cache_control.clone(),
            etag,
        }
    }

    /// The file, or 304 without a body when `If-None-Match` names its tag.
    pub fn respond(&self, request: &HeaderMap) -> Response {
        let current = request
            .get(header::IF_NONE_MATCH)
            .and_then(|value| value.to_str().ok())
            .zip(self.etag.to_str().ok())
            .is_some_and(|(asked, tag)| matches_tag(asked, tag));
        let (status, body) = if current {
            (StatusCode::NOT_MODIFIED, Body::empty())
        } else {
            (StatusCode::OK, Body::from(self.body.clone()))
        };
        let mut response = Response::new(body);
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::CACHE_CONTROL, self.cache_control.clone());
        if !current {
            headers.insert(header::CONTENT_TYPE, self.content_type.clone());
        }
        response
    }
}

/// What `page.json` keeps of a publication beside its HTML.
#[derive(Serialize, Deserialize)]
struct PageFacts {
    version: i64,
    starts_at_ms: i64,
    ends_at_ms: i64,
    assets: Vec<String>,
}

/// One published page as served.
struct LoadedPage {
    version: i64,
    starts_at_ms: i64,
    ends_at_ms: i64,
    html: StaticFile,
    /// The button script in each phase, in the order of [`ButtonPhase::ALL`].
    buttons: Vec<StaticFile>,
    /// The assets the page names.
    assets: Vec<String>,
}

#[derive(Clone, Default)]
struct Site {
    pages: HashMap<i64, Arc<LoadedPage>>,
    assets: HashMap<String, Arc<StaticFile>>,
}

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The published pages this instance serves, and the directory they are written to.
pub struct SalePages {
    dir: PathBuf,
    site: ArcSwap<Site>,
    clock: SwappableClock,
    page_cache: HeaderValue,
    button_cache: HeaderValue,
    asset_cache: HeaderValue,
}

impl SalePages {
    pub fn new(settings: &SalePageSettings) -> Self {
        let public = |max_age: u32| {
            HeaderValue::from_str(&format!("public, max-age={max_age}"))
                .unwrap_or(HeaderValue::from_static("public"))
        };
        Self {
            dir: settings.dir.clone(),
            site: ArcSwap::default(),
            clock: SwappableClock::default(),
            page_cache: public(settings.page_max_age_s),
            button_cache: public(settings.button_max_age_s),
            asset_cache: HeaderValue::from_static("public, max-age=31536000, immutable"),
        }
    }

    /// Decides the button's phase by `clock` from now on (tests move a clock of their own
    /// past the start instead of waiting for it).
    pub fn use_clock(&self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    /// The version of an activity's page this instance serves, if any.
    pub fn version(&self, activity_id: i64) -> Option<i64> {
        self.site
            .load()
            .pages
            .get(&activity_id)
            .map(|page| page.version)
    }

    pub fn page(&self, activity_id: i64, request: &HeaderMap) -> Option<Response> {
        let site = self.site.load();
        Some(site.pages.get(&activity_id)?.html.respond(request))
    }

    /// The button script of the phase the clock is in now.
    pub fn button(&self, activity_id: i64, request: &HeaderMap) -> Option<Response> {
        let site = self.site.load();
        let page = site.pages.get(&activity_id)?;
        let phase = ButtonPhase::at(self.clock.now_ms(), page.starts_at_ms, page.ends_at_ms);
        let index = ButtonPhase::ALL.iter().position(|p| *p == phase)?;
        Some(page.buttons.get(index)?.respond(request))
    }

    pub fn asset(&self, name: &str, request: &HeaderMap) -> Option<Response> {
        Some(self.site.load().assets.get(name)?.respond(request))
    }

    fn activity_dir(&self, activity_id: i64) -> PathBuf {
        self.dir.join(activity_id.to_string())
    }

    fn assets_dir(&self) -> PathBuf {
        self.dir.join("assets")
    }

    /// Writes one publication into the site directory: the assets first, the page last,
    /// so the page on disk never names an asset that is not there.
    pub async fn write(
        &self,
        activity_id: i64,
        version: i64,
        times: (i64, i64),
        rendered: &Rendered,
    ) -> std::io::Result<()> {
        let assets = self.assets_dir();
        tokio::fs::create_dir_all(&assets).await?;
        // Written even when there (the same bytes under a hashed name): its file is then
        // as young as the page naming it, which the retention's grace reads.
        for asset in [&rendered.script, &rendered.stylesheet] {
            write_whole(&assets.join(&asset.name), asset.body.as_bytes()).await?;
        }
        let dir = self.activity_dir(activity_id);
        tokio::fs::create_dir_all(&dir).await?;
        let facts = PageFacts {
            version,
            starts_at_ms: times.0,
            ends_at_ms: times.1,
            assets: vec![
                rendered.script.name.clone(),
                rendered.stylesheet.name.clone(),
            ],
        };
        write_whole(&dir.join("index.html"), rendered.html.as_bytes()).await?;
        write_whole(&dir.join("page.json"), &serde_json::to_vec(&facts)?).await
    }

    /// Reads an activity's page and the assets it names from the site directory and serves
    /// them from now on; returns the version loaded.
    pub async fn load(&self, activity_id: i64) -> std::io::Result<i64> {
        let dir = self.activity_dir(activity_id);
        let facts: PageFacts =
            serde_json::from_slice(&tokio::fs::read(dir.join("page.json")).await?)?;
        let html = tokio::fs::read(dir.join("index.html")).await?;
        let mut assets = Vec::with_capacity(facts.assets.len());
        for name in &facts.assets {
            let body = tokio::fs::read(self.assets_dir().join(name)).await?;
            assets.push((name.clone(), self.asset_file(name, body)));
        }
        let page = LoadedPage {
            version: facts.version,
            starts_at_ms: facts.starts_at_ms,
            ends_at_ms: facts.ends_at_ms,
            html: StaticFile::new(html, HTML, &self.page_cache),
            buttons: ButtonPhase::ALL
                .iter()
                .map(|phase| {
                    let script = button_script(activity_id, facts.version, *phase);
                    StaticFile::new(script, JAVASCRIPT, &self.button_cache)
                })
                .collect(),
            assets: facts.assets,
        };
        let page = Arc::new(page);
        let assets: Vec<(String, Arc<StaticFile>)> = assets
            .into_iter()
            .map(|(name, file)| (name, Arc::new(file)))
            .collect();
        self.site.rcu(|site| {
            let mut site = Site::clone(site);
            site.pages.insert(activity_id, page.clone());
            site.assets.extend(assets.iter().cloned());
            site
        });
        Ok(facts.version)
    }

    /// Every asset in the site directory, old publications' included, so a page opened
    /// before a restart still finds its assets after it.
    pub async fn load_assets(&self) -> std::io::Result<usize> {
        let mut found = Vec::new();
        let mut entries = match tokio::fs::read_dir(self.assets_dir()).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error),
        };
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let body = tokio::fs::read(entry.path()).await?;
            found.push((name.clone(), Arc::new(self.asset_file(&name, body))));
        }
        let count = found.len();
        self.site.rcu(|site| {
            let mut site = Site::clone(site);
            site.assets.extend(found.iter().cloned());
            site
        });
        Ok(count)
    }

    /// The activities whose pages are served here now.
    pub fn served(&self) -> Vec<i64> {
        self.site.load().pages.keys().copied().collect()
    }

    /// Stops serving the pages of the `gone` activities (deleted, and their row of
    /// `sale_pages` with them), and the assets no page left names whose file is gone from the
    /// site directory (the leader's retention removed it). Returns how many pages and assets
    /// it dropped.
    pub async fn forget(&self, gone: &HashSet<i64>) -> (usize, usize) {
        let site = self.site.load_full();
        let named: HashSet<&String> = site
            .pages
            .iter()
            .filter(|(id, _)| !gone.contains(id))
            .flat_map(|(_, page)| &page.assets)
            .collect();
        let mut gone_assets = Vec::new();
        for name in site.assets.keys().filter(|name| !named.contains(name)) {
            // Unknown (an unreadable directory) counts as there: served a while longer.
            if !tokio::fs::try_exists(self.assets_dir().join(name))
                .await
                .unwrap_or(true)
            {
                gone_assets.push(name.clone());
            }
        }
        let gone_pages = gone.iter().filter(|id| site.pages.contains_key(id)).count();
        if gone_pages > 0 || !gone_assets.is_empty() {
            self.site.rcu(|site| {
                let mut site = Site::clone(site);
                site.pages.retain(|id, _| !gone.contains(id));
                for name in &gone_assets {
                    site.assets.remove(name);
                }
                site
            });
        }
        (gone_pages, gone_assets.len())
    }

    /// The activity ids of the pages in the site directory.
    pub async fn page_dirs(&self) -> std::io::Result<Vec<i64>> {
        let mut ids = Vec::new();
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(error) => return Err(error),
        };
        while let Some(entry) = entries.next_entry().await? {
            if let Ok(id) = entry.file_name().to_string_lossy().parse::<i64>() {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// Removes from the site directory the pages of `deleted` activities, then every asset
    /// no page left names whose file was written more than `grace` before `now_ms` (a page
    /// being published wrote its assets moments ago, before its `page.json`). Returns how
    /// many pages and assets it removed.
    pub async fn prune(
        &self,
        deleted: &[i64],
        now_ms: i64,
        grace: Duration,
    ) -> std::io::Result<(usize, usize)> {
        for id in deleted {
            match tokio::fs::remove_dir_all(self.activity_dir(*id)).await {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        let mut named = HashSet::new();
        for id in self.page_dirs().await? {
            // A page without its facts yet (a first publish under way) names nothing; its
            // assets are younger than the grace.
            if let Ok(bytes) = tokio::fs::read(self.activity_dir(id).join("page.json")).await {
                if let Ok(facts) = serde_json::from_slice::<PageFacts>(&bytes) {
                    named.extend(facts.assets);
                }
            }
        }
        let mut removed = 0;
        let mut entries = match tokio::fs::read_dir(self.assets_dir()).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok((deleted.len(), 0))
            }
            Err(error) => return Err(error),
        };
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || named.contains(&name) {
                continue;
            }
            let written_ms = entry
                .metadata()
                .await?
                .modified()?
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| {
                    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
                });
            if now_ms.saturating_sub(written_ms) > grace_ms {
                tokio::fs::remove_file(entry.path()).await?;
                removed += 1;
            }
        }
        Ok((deleted.len(), removed))
    }

    fn asset_file(&self, name: &str, body: Vec<u8>) -> StaticFile {
        let content_type = if name.ends_with(".css") {
            CSS
        } else {
            JAVASCRIPT
        };
        StaticFile::new(body, content_type, &self.asset_cache)
    }
}

/// Writes `body` to a hidden file beside `path`, then renames it into place.
async fn write_whole(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = path.with_file_name(format!(".{name}.{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&partial, body).await?;
    tokio::fs::rename(&partial, path).await
}
