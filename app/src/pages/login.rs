//! The sign-in page: a plain form that also works before hydration. It carries the page the
//! user asked for (`?next=`) through the sign-in, so an expired session comes back to it.

use crate::api::Login;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_default();
    let error = move || {
        login
            .value()
            .get()
            .and_then(Result::err)
            .map(super::error_box)
    };
    view! {
        <main class="login" id="main">
            <h1>"Seckill console"</h1>
            {move || {
                let next = next();
                (!next.is_empty()).then(|| view! {
                    <p class="notice" id="sign-in-to-continue" role="status">
                        "Please sign in to continue to " <span class="mono">{next}</span> "."
                    </p>
                })
            }}
            <ActionForm action=login attr:class="card">
                <input type="hidden" name="next" value=next/>
                <label>"Username" <input type="text" name="username" autocomplete="username" required/></label>
                <label>"Password" <input type="password" name="password" autocomplete="current-password" required/></label>
                <button type="submit" disabled=move || login.pending().get()>"Sign in"</button>
            </ActionForm>
            <div aria-live="polite">{error}</div>
        </main>
    }
}
