//! Pre-warm: the activities to load into Redis before their sale opens. The button and
//! the Redis-vs-DB figures are on each activity's page; this page points there.

use super::{listing, time_cell};
use crate::api::list_activities;
use leptos::prelude::*;
use leptos_router::components::A;

#[component]
pub fn PrewarmList() -> impl IntoView {
    let activities = Resource::new(|| (), |_| list_activities());
    view! {
        <h1>"Pre-warm"</h1>
        <p class="meta">
            "Pre-warm loads an activity's stock, buyer records and Bloom filter keys into Redis. "
            "It is refused once the sale is open, so run it before the start time."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                listing(activities.await, "No activities yet.", |list| view! {
                    <table class="grid" tabindex="0" id="prewarm-list">
                        <thead><tr><th>"ID"</th><th>"Title"</th><th>"Starts"</th><th>"Status"</th><th>"Stock"</th></tr></thead>
                        <tbody>
                            {list.into_iter().map(|activity| view! {
                                <tr>
                                    <td>{activity.id}</td>
                                    <td><A href=format!("/activities/{}", activity.id)>{activity.title}</A></td>
                                    <td>{time_cell(activity.starts_at)}</td>
                                    <td>{if activity.prewarmed { "pre-warmed" } else { "not pre-warmed" }}</td>
                                    <td class="num">{activity.total_stock}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any())
            })}
        </Suspense>
    }
}
