//! The admin console: a Leptos app rendered on the server and hydrated in the
//! browser. `ssr` builds it into the `seckill` server; `hydrate` builds the wasm bundle.

pub mod api;
pub mod error;
mod pages;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{ParentRoute, Route, Router, Routes},
    path, SsrMode,
};
use pages::{
    activities, audit, baselines, dashboard, dead_letters, draw, hotkeys, items, layout, login,
    orders, prewarm, readiness, reconciliation, rehearsals, switches,
};

/// Name of the wasm bundle and stylesheet under `/pkg`, shared with the build scripts.
pub const BUNDLE_NAME: &str = "seckill_console";

/// The HTML document around the app, rendered by the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <link rel="stylesheet" id="console-style" href=stylesheet_href(&options)/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The stylesheet's address: its content-named copy when the build wrote a hash file (the file
/// Leptos's hydration scripts read for the script and the module, so all three change
/// together), else the plain name. The shell is rendered on the server only.
fn stylesheet_href(options: &LeptosOptions) -> String {
    let pkg = &options.site_pkg_dir;
    let hashed = options
        .hash_files
        .then(|| std::fs::read_to_string(options.hash_file.as_ref()).ok())
        .flatten()
        .and_then(|hashes| {
            hashes
                .lines()
                .find_map(|line| line.strip_prefix("css:").map(|hash| hash.trim().to_owned()))
        });
    match hashed {
        Some(hash) => format!("/{pkg}/{BUNDLE_NAME}.{hash}.css"),
        None => format!("/{pkg}/{BUNDLE_NAME}.css"),
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Effects run only in the browser, so this flips once hydration has taken over;
    // tests and people can tell a live console from a server-rendered snapshot.
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));

    view! {
        <Title text="Seckill console"/>
        <Router>
            <div id="console" data-hydrated=move || hydrated.get().to_string()>
                <Routes fallback=|| view! { <p class="empty">"Page not found."</p> }>
                    <Route path=path!("/login") view=login::LoginPage/>
                    // Async: the session check resolves before the first byte is sent, so a
                    // signed-out visitor gets a real redirect instead of a half-rendered page.
                    <ParentRoute path=path!("") view=layout::Layout ssr=SsrMode::Async>
                        <Route path=path!("") view=activities::ActivityList/>
                        <Route path=path!("/activities") view=activities::ActivityList/>
                        <Route path=path!("/activities/new") view=activities::ActivityCreate/>
                        <Route path=path!("/activities/:id") view=activities::ActivityPage/>
                        <Route path=path!("/items") view=items::ItemList/>
                        <Route path=path!("/items/new") view=items::ItemCreate/>
                        <Route path=path!("/items/:id") view=items::ItemEdit/>
                        <Route path=path!("/prewarm") view=prewarm::PrewarmList/>
                        <Route path=path!("/readiness") view=readiness::ReadinessPage/>
                        <Route path=path!("/draw") view=draw::DrawPage/>
                        <Route path=path!("/switches") view=switches::SwitchBoardPage/>
                        <Route path=path!("/dashboard") view=dashboard::Dashboard/>
                        <Route path=path!("/hotkeys") view=hotkeys::HotKeysPage/>
                        <Route path=path!("/baselines") view=baselines::BaselinesPage/>
                        <Route path=path!("/reconciliations") view=reconciliation::Reconciliations/>
                        <Route path=path!("/reconciliations/:id") view=reconciliation::ReconciliationPage/>
                        <Route path=path!("/rehearsals") view=rehearsals::Rehearsals/>
                        <Route path=path!("/rehearsals/:id") view=rehearsals::RehearsalPage/>
                        <Route path=path!("/dead-letters") view=dead_letters::DeadLetters/>
                        <Route path=path!("/orders") view=orders::OrderList/>
                        <Route path=path!("/orders/:id") view=orders::OrderDetailPage/>
                        <Route path=path!("/audit") view=audit::AuditLog/>
                    </ParentRoute>
                </Routes>
            </div>
        </Router>
    }
}

/// Entry point of the wasm bundle: hydrates the server-rendered document.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
