//! The frame around every signed-in page: who is signed in, navigation to the pages the
//! signed-in role may use, a skip link past the menu, and a redirect to the login page (which
//! brings the user back to the page asked for) when the session is gone.

use crate::api::{whoami, Logout};
use contract::{Permission, Role};
use leptos::prelude::*;
use leptos_router::{
    components::{Outlet, Redirect, A},
    hooks::use_location,
};

/// Navigation entries, in the order an operator walks through a sale, each with the
/// permission its page needs: a role sees only the pages it may use.
const PAGES: [(&str, &str, Permission); 14] = [
    ("/activities", "Activities", Permission::ReadCatalog),
    ("/items", "Items", Permission::ReadCatalog),
    ("/prewarm", "Pre-warm", Permission::Prewarm),
    ("/rehearsals", "Rehearsals", Permission::WatchOperations),
    ("/readiness", "Readiness", Permission::WatchOperations),
    ("/draw", "Lottery draw", Permission::WatchOperations),
    ("/switches", "Switch board", Permission::ReadSwitches),
    ("/dashboard", "Live dashboard", Permission::WatchOperations),
    ("/hotkeys", "Hot keys", Permission::WatchOperations),
    ("/baselines", "Baselines", Permission::WatchOperations),
    ("/reconciliations", "Reconciliation", Permission::Reconcile),
    ("/dead-letters", "Dead letters", Permission::WatchOperations),
    ("/orders", "Orders", Permission::ReadOrders),
    ("/audit", "Audit log", Permission::WatchOperations),
];

/// The menu entries `role` may use, as `(href, label)`.
pub fn menu_of(role: Role) -> impl Iterator<Item = (&'static str, &'static str)> {
    PAGES
        .into_iter()
        .filter(move |(_, _, permission)| role.may(*permission))
        .map(|(href, label, _)| (href, label))
}

/// The login page's address that comes back to the page now shown once signed in.
pub fn sign_in_href() -> String {
    let location = use_location();
    let (path, query) = (
        location.pathname.get_untracked(),
        location.search.get_untracked(),
    );
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        path
    };
    // The router's `search` is the query without its `?`.
    let here = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    crate::api::sign_in_path(&here)
}

/// Moves the keyboard focus to the page's content, past the menu.
fn focus_main(event: leptos::ev::MouseEvent) {
    use leptos::wasm_bindgen::JsCast;
    let main = document()
        .get_element_by_id("main")
        .and_then(|main| main.dyn_into::<leptos::web_sys::HtmlElement>().ok());
    if let Some(main) = main {
        event.prevent_default();
        // A focus the browser refuses leaves the page as it was: nothing to tell anyone.
        let _ = main.focus();
    }
}

#[component]
pub fn Layout() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let logout = ServerAction::<Logout>::new();
    // On a phone the menu folds behind a button; following a link folds it again.
    let menu_open = RwSignal::new(false);
    let location = use_location();
    Effect::new(move |_| {
        location.pathname.track();
        menu_open.set(false);
    });
    view! {
        // `rel=external`: the browser's own jump, not the router's; once live, the click
        // also moves the keyboard focus into the content.
        <a class="skip-link" href="#main" rel="external" on:click=focus_main>"Skip to content"</a>
        <div class="frame">
            <nav class="sidebar" aria-label="Console">
                <div class="sidebar-head">
                    <a class="brand" href="/">"Seckill"</a>
                    <button type="button" class="menu-toggle" aria-controls="menu"
                        aria-expanded=move || menu_open.get().to_string()
                        on:click=move |_| menu_open.update(|open| *open = !*open)>
                        "Menu"
                    </button>
                </div>
                <ul id="menu" data-open=move || menu_open.get().to_string()>
                    <Suspense fallback=|| ()>
                        {move || Suspend::new(async move {
                            user.await.ok().map(|user| {
                                menu_of(user.role)
                                    .map(|(href, label)| view! { <li><A href=href>{label}</A></li> })
                                    .collect_view()
                            })
                        })}
                    </Suspense>
                </ul>
            </nav>
            <div class="content">
                <header class="topbar">
                    <Suspense fallback=|| ()>
                        {move || Suspend::new(async move {
                            match user.await {
                                Ok(user) => view! {
                                    <span class="who">
                                        {user.username} " · " <span class="role">{user.role.to_string()}</span>
                                    </span>
                                    <ActionForm action=logout attr:class="inline">
                                        <button type="submit" class="link">"Sign out"</button>
                                    </ActionForm>
                                }.into_any(),
                                Err(_) => view! { <Redirect path=sign_in_href()/> }.into_any(),
                            }
                        })}
                    </Suspense>
                </header>
                <main id="main" tabindex="-1">
                    <Outlet/>
                </main>
            </div>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_sees_the_pages_its_permissions_open() {
        let hrefs = |role| menu_of(role).map(|(href, _)| href).collect::<Vec<_>>();
        assert_eq!(
            hrefs(Role::Merchant),
            ["/activities", "/items", "/switches", "/orders"]
        );
        assert_eq!(hrefs(Role::Admin).len(), PAGES.len());
        assert_eq!(hrefs(Role::Ops).len(), PAGES.len());
        assert!(!hrefs(Role::Sre).contains(&"/prewarm"));
    }
}
