//! The audit log: every switch flip (old → new, etcd revision) and every other
//! operator action (dead-letter requeues, replays), who did it, from where and why; newest
//! first, in pages. The page's rows filter by kind and by any text (once live), times show in
//! the viewer's zone, and an action's detail reads as its fields, its epoch-millisecond
//! times as times.

use super::{error_box, listing, pager, time_cell};
use crate::api::audit_log;
use contract::AuditEntry;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AuditLog() -> impl IntoView {
    let params = use_query_map();
    let page = Memo::new(move |_| {
        params
            .read()
            .get("page")
            .and_then(|page| page.parse::<i64>().ok())
    });
    let entries = Resource::new(move || page.get(), audit_log);
    view! {
        <h1>"Audit log"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match entries.await {
                    Ok(page) => {
                        let pages = pager(page.page, page.has_more, |n| format!("/audit?page={n}"));
                        view! {
                            {listing(Ok(page.rows.entries), "Nothing audited yet.", |entries| view! {
                                <AuditTable entries/>
                            }.into_any())}
                            {pages}
                        }.into_any()
                    }
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

#[component]
fn AuditTable(entries: Vec<AuditEntry>) -> AnyView {
    let kind = RwSignal::new(String::new());
    let text = RwSignal::new(String::new());
    view! {
        <div class="row filters" id="audit-filters" role="search">
            <label>"Kind"
                <select on:change=move |ev| kind.set(event_target_value(&ev))>
                    <option value="">"every kind"</option>
                    <option value="switch">"switch flips"</option>
                    <option value="ops">"operator actions"</option>
                </select>
            </label>
            <label>"Containing"
                <input type="search" placeholder="who, action, key, reason…" bind:value=text/>
            </label>
        </div>
        <table class="grid" tabindex="0" id="audit-list">
            <thead><tr>
                <th>"At"</th><th>"Who"</th><th>"From"</th><th>"Action"</th><th>"Target"</th>
                <th>"Change"</th><th>"Reason"</th><th>"etcd revision"</th>
            </tr></thead>
            <tbody>
                {entries.into_iter().map(|entry| {
                    let change = match (&entry.old_value, &entry.new_value) {
                        (old, Some(new)) => format!(
                            "{} → {new}",
                            old.as_deref().unwrap_or("(default)")
                        ),
                        (_, None) => entry.detail.as_deref().map(readable_detail).unwrap_or_default(),
                    };
                    let haystack = format!(
                        "{} {} {} {} {} {}",
                        entry.actor,
                        entry.source.as_str(),
                        entry.action,
                        entry.target,
                        change,
                        entry.reason.as_deref().unwrap_or_default()
                    )
                    .to_lowercase();
                    let entry_kind = entry.kind.as_str();
                    let shown = move || {
                        let wanted = kind.get();
                        let needle = text.get().trim().to_lowercase();
                        (wanted.is_empty() || wanted == entry_kind) && haystack.contains(&needle)
                    };
                    view! {
                        <tr data-kind=entry_kind style:display=move || if shown() { "" } else { "none" }>
                            <td>{time_cell(entry.at)}</td>
                            <td>{entry.actor}</td>
                            <td>{entry.source.as_str()}</td>
                            <td>{entry.action}</td>
                            <td class="mono">{entry.target}</td>
                            <td class="mono">{change}</td>
                            <td>{entry.reason.unwrap_or_default()}</td>
                            <td class="num">{entry.etcd_revision.map(|r| r.to_string()).unwrap_or_default()}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// An action's detail (a flat JSON object) as `field: value` pairs, with the fields that
/// hold epoch milliseconds (`…_ms`) written as UTC times; the text as it came otherwise.
fn readable_detail(detail: &str) -> String {
    let Some(fields) = detail
        .trim()
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    else {
        return detail.to_owned();
    };
    split_top_level(fields)
        .into_iter()
        .filter_map(|field| {
            let (name, value) = field.split_once(':')?;
            let name = name.trim().trim_matches('"');
            let value = value.trim().trim_matches('"');
            let time = value
                .parse::<i64>()
                .ok()
                .filter(|ms| name.ends_with("_ms") && *ms > 1_000_000_000_000)
                .and_then(chrono::DateTime::from_timestamp_millis);
            Some(match time {
                Some(at) => format!(
                    "{}: {} UTC",
                    name.trim_end_matches("_ms").replace('_', " "),
                    super::when(at)
                ),
                None => format!("{}: {value}", name.replace('_', " ")),
            })
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The comma-separated parts of a JSON object's body, commas inside strings, arrays and
/// objects left alone.
fn split_top_level(body: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut quoted, mut escaped, mut start) =
        (Vec::new(), 0, false, false, 0);
    for (at, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '[' | '{' if !quoted => depth += 1,
            ']' | '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(&body[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|part| !part.trim().is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detail_reads_as_its_fields_with_times_as_times() {
        assert_eq!(
            readable_detail(r#"{"requeued":3,"oldest_ms":1796551200000,"note":"a, b"}"#),
            "requeued: 3 · oldest: 2026-12-06 10:00:00 UTC · note: a, b"
        );
        assert_eq!(readable_detail("not json"), "not json");
    }
}
