//! One module per console page; `layout` holds the navigation shared by all but login, and
//! this module the pieces the pages share (errors, lists, pagers, times, a live ticker).

pub mod activities;
pub mod audit;
pub mod baselines;
pub mod dashboard;
pub mod dead_letters;
pub mod draw;
pub mod hotkeys;
pub mod items;
pub mod jobs;
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
/// along for tests and programs that read the page. An expired session links to the login
/// page, which comes back here once signed in.
pub fn error_box(error: ConsoleFnError) -> AnyView {
    let sign_in = (error.code == "UNAUTHENTICATED").then(|| {
        view! { ": " <a href=layout::sign_in_href() id="sign-in-again">"sign in again"</a> " to come back to this page" }
    });
    view! { <p class="error" role="alert" data-code=error.code>{error.message}{sign_in}</p> }
        .into_any()
}

/// The signed-in user's role, for a page that shows each role only the controls it may use
/// (the server refuses the others anyway).
pub async fn my_role() -> Result<contract::Role, ConsoleFnError> {
    crate::api::whoami().await.map(|user| user.role)
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

/// The viewer's offset from UTC at `ms`, in minutes east, from the browser's zone (the
/// server does not know the viewer's zone: it renders UTC only).
#[cfg(feature = "hydrate")]
fn viewer_offset_min(ms: i64) -> i32 {
    -(js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64)).get_timezone_offset() as i32)
}

/// The viewer's offset from UTC at `time`, in minutes east: 0 in the server's rendering,
/// which knows no viewer's zone.
fn offset_at(time: chrono::DateTime<chrono::Utc>) -> i32 {
    #[cfg(feature = "hydrate")]
    {
        viewer_offset_min(time.timestamp_millis())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = time;
        0
    }
}

/// The viewer's wall-clock time at `time` (what a `datetime-local` input shows), and the
/// zone's name ("UTC+8"). UTC in the server's rendering.
pub fn viewer_wall_clock(time: chrono::DateTime<chrono::Utc>) -> (chrono::NaiveDateTime, String) {
    let offset = offset_at(time);
    let wall = time.naive_utc() + chrono::Duration::minutes(i64::from(offset));
    (wall, in_zone(time, offset).1)
}

/// The instant the viewer's wall-clock time `wall` names, by the browser's rules for its zone
/// (summer time included); `wall` read as UTC in the server's rendering.
pub fn from_viewer_wall_clock(
    wall: chrono::NaiveDateTime,
) -> Option<chrono::DateTime<chrono::Utc>> {
    #[cfg(feature = "hydrate")]
    {
        use chrono::{Datelike, Timelike};
        let ms = js_sys::Date::new_with_year_month_day_hr_min_sec(
            u32::try_from(wall.year()).ok()?,
            wall.month0() as i32,
            wall.day() as i32,
            wall.hour() as i32,
            wall.minute() as i32,
            wall.second() as i32,
        )
        .get_time();
        if ms.is_nan() {
            return None;
        }
        chrono::DateTime::from_timestamp_millis(ms as i64)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        Some(wall.and_utc())
    }
}

/// `time` in the zone `offset_min` minutes east of UTC, to the minute, and the zone's name.
fn in_zone(time: chrono::DateTime<chrono::Utc>, offset_min: i32) -> (String, String) {
    let zone = chrono::FixedOffset::east_opt(offset_min * 60)
        .unwrap_or_else(|| chrono::FixedOffset::east_opt(0).expect("zero offset"));
    let local = time
        .with_timezone(&zone)
        .format("%Y-%m-%d %H:%M")
        .to_string();
    let (sign, minutes) = if offset_min < 0 {
        ('-', -offset_min)
    } else {
        ('+', offset_min)
    };
    let name = match (minutes / 60, minutes % 60) {
        (0, 0) => "UTC".to_owned(),
        (hours, 0) => format!("UTC{sign}{hours}"),
        (hours, mins) => format!("UTC{sign}{hours}:{mins:02}"),
    };
    (local, name)
}

/// A time as every list and page shows it: in the viewer's zone, to the minute, with UTC
/// beside it (the full time in a tooltip and `datetime`). The server renders UTC; the
/// browser switches to its own zone once the page is live.
pub fn time_cell(time: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    let live = RwSignal::new(false);
    Effect::new(move |_| live.set(true));
    let text = move || zoned_text(time, if live.get() { offset_at(time) } else { 0 });
    view! {
        <time class="when" datetime=time.to_rfc3339() title=format!("{} UTC", when(time))>{text}</time>
    }
}

/// What [`time_cell`] shows for a viewer `offset_min` minutes east of UTC.
fn zoned_text(time: chrono::DateTime<chrono::Utc>, offset_min: i32) -> String {
    let (utc, _) = in_zone(time, 0);
    if offset_min == 0 {
        return format!("{utc} UTC");
    }
    let (local, zone) = in_zone(time, offset_min);
    let utc_beside = if local[..10] == utc[..10] {
        utc[11..].to_owned()
    } else {
        utc
    };
    format!("{local} {zone} ({utc_beside} UTC)")
}

/// [`time_cell`], or a dash for "not yet".
pub fn maybe_time_cell(time: Option<chrono::DateTime<chrono::Utc>>) -> AnyView {
    match time {
        Some(time) => time_cell(time).into_any(),
        None => "—".into_any(),
    }
}

/// A time the server sent as RFC 3339 text (reconciliation runs, rehearsals), as
/// [`time_cell`] shows times; the text as it came when it is not one.
pub fn stamp_cell(text: &str) -> AnyView {
    match parse_stamp(text) {
        Some(time) => time_cell(time).into_any(),
        None => text.to_owned().into_any(),
    }
}

/// [`stamp_cell`] of an end that may not have come yet: a dash then.
pub fn ended_cell(text: Option<&str>) -> AnyView {
    text.map_or_else(|| "—".into_any(), stamp_cell)
}

pub(super) fn parse_stamp(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.with_timezone(&chrono::Utc))
}

/// A time as the console writes it inside a sentence (UTC, to the second).
pub fn when(time: chrono::DateTime<chrono::Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_stamps_are_read_in_any_offset_and_other_text_is_not_a_time() {
        let utc = |text| parse_stamp(text).map(when);
        assert_eq!(
            utc("2026-12-01T10:35:14.123Z").as_deref(),
            Some("2026-12-01 10:35:14")
        );
        assert_eq!(
            utc("2026-12-01T12:35:14+02:00").as_deref(),
            Some("2026-12-01 10:35:14")
        );
        assert_eq!(utc("yesterday"), None);
    }

    #[test]
    fn times_show_in_the_viewers_zone_with_utc_beside() {
        let time = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:30:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(zoned_text(time, 0), "2026-12-06 10:30 UTC");
        assert_eq!(zoned_text(time, 480), "2026-12-06 18:30 UTC+8 (10:30 UTC)");
        assert_eq!(
            zoned_text(time, -660),
            "2026-12-05 23:30 UTC-11 (2026-12-06 10:30 UTC)"
        );
        assert_eq!(
            zoned_text(time, 330),
            "2026-12-06 16:00 UTC+5:30 (10:30 UTC)"
        );
    }
}
