//! One module per console page; `layout` holds the navigation shared by all but login, and
//! this module the pieces the pages share (errors, lists, pagers, times, a live ticker).

pub mod activities;
pub mod audit;
pub mod baselines;
pub mod dashboard;
pub mod dead_letters;
pub mod hotkeys;
pub mod items;
pub mod layout;
pub mod login;
pub mod orders;
pub mod prewarm;
pub mod readiness;
pub mod reconciliation;
pub mod rehearsals;
pub mod switches;

use crate::error::ConsoleFnError;
use leptos::prelude::*;

/// The reason every audited change asks for, as the server requires it (not blank, at most
/// 500 characters), in the form field the change's server function reads.
pub fn reason_field() -> impl IntoView {
    view! {
        <label>"Reason (audited)"
            <textarea name="reason" rows="2" required maxlength="500"></textarea>
        </label>
    }
}

/// A server function's error, shown where the page's content would be; its code rides
/// along for tests and programs that read the page.
pub fn error_box(error: ConsoleFnError) -> AnyView {
    view! { <p class="error" role="alert" data-code=error.code>{error.message}</p> }.into_any()
}

/// A list page's body: a note when there is nothing to list, the table when there is,
/// the error otherwise.
pub fn listing<T>(
    rows: Result<Vec<T>, ConsoleFnError>,
    nothing: &'static str,
    table: impl FnOnce(Vec<T>) -> AnyView,
) -> AnyView {
    match rows {
        Ok(rows) if rows.is_empty() => view! { <p class="empty">{nothing}</p> }.into_any(),
        Ok(rows) => table(rows),
        Err(error) => error_box(error),
    }
}

/// A counter that goes up about every `period` once the page is live in the browser (it
/// stays 0 on the server): a resource keyed on it refetches on that beat.
pub fn ticker(period: std::time::Duration) -> ReadSignal<u64> {
    let (beat, set_beat) = signal(0_u64);
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(move || set_beat.update(|n| *n += 1), period) {
            on_cleanup(move || handle.clear());
        }
    });
    beat
}

/// A page-number pager under a list: links to the newer and older pages of `href(page)`;
/// nothing when everything fits on the first page.
pub fn pager(page: i64, has_more: bool, href: impl Fn(i64) -> String) -> AnyView {
    if page <= 1 && !has_more {
        return ().into_any();
    }
    let newer = (page > 1).then(|| href(page - 1));
    let older = has_more.then(|| href(page + 1));
    view! {
        <nav class="row pager">
            {newer.map(|href| view! { <leptos_router::components::A href=href attr:rel="prev">"← Newer"</leptos_router::components::A> })}
            <span class="meta">"Page " {page}</span>
            {older.map(|href| view! { <leptos_router::components::A href=href attr:rel="next">"Older →"</leptos_router::components::A> })}
        </nav>
    }
    .into_any()
}

/// The activity the page's query names (`?activity_id=`), if it names one.
pub fn chosen_activity() -> Memo<Option<i64>> {
    let params = leptos_router::hooks::use_query_map();
    Memo::new(move |_| {
        params
            .read()
            .get("activity_id")
            .and_then(|id| id.parse::<i64>().ok())
    })
}

/// A GET form to the page at `action` that chooses one activity (`?activity_id=`).
pub fn activity_picker(
    action: &'static str,
    id: &'static str,
    button: &'static str,
    chosen: Option<i64>,
    activities: Vec<contract::ActivitySummary>,
) -> AnyView {
    view! {
        <leptos_router::components::Form method="GET" action=action attr:class="row filters" attr:id=id>
            <label>"Activity"
                <select name="activity_id">
                    {activity_options(activities, chosen)}
                </select>
            </label>
            <button type="submit">{button}</button>
        </leptos_router::components::Form>
    }
    .into_any()
}

/// The `<option>`s of an activity picker, `chosen` selected.
pub fn activity_options(
    activities: Vec<contract::ActivitySummary>,
    chosen: Option<i64>,
) -> impl IntoView {
    activities
        .into_iter()
        .map(|activity| {
            let selected = chosen == Some(activity.id);
            view! {
                <option value=activity.id.to_string() selected=selected>
                    {format!("#{} {}", activity.id, activity.title)}
                </option>
            }
        })
        .collect_view()
}

/// Now, in milliseconds since the epoch, from whichever clock the build can read: wasm has no
/// system clock (`chrono::Utc::now()` panics there and leaves the hydrated router dead), so
/// the browser build asks JavaScript's `Date`.
pub fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys::Date::now() as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A time as the console shows it (UTC, to the second).
pub fn when(time: chrono::DateTime<chrono::Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// [`when`], or a dash for "not yet".
pub fn maybe_when(time: Option<chrono::DateTime<chrono::Utc>>) -> String {
    time.map(when).unwrap_or_else(|| "—".into())
}
