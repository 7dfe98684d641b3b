//! Console pages whose capability is not built yet (docs/README.md). Each says so plainly
//! and names what it waits for, rather than showing empty or invented figures.

use leptos::prelude::*;

fn not_built(title: &'static str, arrives_with: &'static str) -> impl IntoView {
    view! {
        <h1>{title}</h1>
        <p class="notice">"Not built yet: this page arrives with " {arrives_with} "."</p>
    }
}

#[component]
pub fn Baselines() -> impl IntoView {
    not_built("Baselines", "the baseline recording work")
}
