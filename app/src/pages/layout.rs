//! The frame around every signed-in page: who is signed in, navigation to every page of
//! the console, and a redirect to the login page when the session is gone.

use crate::api::{whoami, Logout};
use leptos::prelude::*;
use leptos_router::components::{Outlet, Redirect, A};

/// Navigation entries, in the order an operator walks through a sale.
const PAGES: [(&str, &str); 13] = [
    ("/activities", "Activities"),
    ("/items", "Items"),
    ("/prewarm", "Pre-warm"),
    ("/rehearsals", "Rehearsals"),
    ("/readiness", "Readiness"),
    ("/switches", "Switch board"),
    ("/dashboard", "Live dashboard"),
    ("/hotkeys", "Hot keys"),
    ("/baselines", "Baselines"),
    ("/reconciliations", "Reconciliation"),
    ("/dead-letters", "Dead letters"),
    ("/orders", "Orders"),
    ("/audit", "Audit log"),
];

#[component]
pub fn Layout() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let logout = ServerAction::<Logout>::new();
    view! {
        <div class="frame">
            <nav class="sidebar">
                <a class="brand" href="/">"Seckill"</a>
                <ul>
                    {PAGES
                        .iter()
                        .map(|(href, label)| view! { <li><A href=*href>{*label}</A></li> })
                        .collect_view()}
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
                                Err(_) => view! { <Redirect path="/login"/> }.into_any(),
                            }
                        })}
                    </Suspense>
                </header>
                <main>
                    <Outlet/>
                </main>
            </div>
        </div>
    }
}
