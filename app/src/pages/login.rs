//! The sign-in page: a plain form that also works before hydration.

use crate::api::Login;
use leptos::prelude::*;

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let error = move || {
        login
            .value()
            .get()
            .and_then(Result::err)
            .map(super::error_box)
    };
    view! {
        <main class="login">
            <h1>"Seckill console"</h1>
            <ActionForm action=login attr:class="card">
                <label>"Username" <input type="text" name="username" autocomplete="username" required/></label>
                <label>"Password" <input type="password" name="password" autocomplete="current-password" required/></label>
                <button type="submit" disabled=move || login.pending().get()>"Sign in"</button>
            </ActionForm>
            {error}
        </main>
    }
}
