//! The audit log: every switch flip (old → new, etcd revision) and every other
//! operator action (dead-letter requeues, replays), who did it, from where and why; newest
//! first, in pages. The filters (kind, any text) are the server's: a filtered page holds
//! only the rows asked for, however far back they are. Times show in the viewer's zone, and
//! an action's detail reads as its fields, its epoch-millisecond times as times.

use super::{error_box, listing, pager, time_cell};
use crate::api::{audit_log, query_value};
use contract::AuditEntry;
use leptos::prelude::*;
use leptos_router::{components::Form, hooks::use_query_map};

/// What the page's address asks for: a page of the rows one filter keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Asked {
    page: Option<i64>,
    kind: String,
    containing: String,
}

impl Asked {
    /// The address of page `page` of the same filter.
    fn href(&self, page: i64) -> String {
        let mut href = format!("/audit?page={page}");
        for (name, value) in [("kind", &self.kind), ("containing", &self.containing)] {
            if !value.is_empty() {
                href.push_str(&format!("&{name}={}", query_value(value)));
            }
        }
        href
    }

    fn filtered(&self) -> bool {
        !self.kind.is_empty() || !self.containing.trim().is_empty()
    }
}

#[component]
pub fn AuditLog() -> impl IntoView {
    let params = use_query_map();
    let asked = Memo::new(move |_| {
        let params = params.read();
        Asked {
            page: params.get("page").and_then(|page| page.parse::<i64>().ok()),
            kind: params.get("kind").unwrap_or_default(),
            containing: params.get("containing").unwrap_or_default(),
        }
    });
    let entries = Resource::new(
        move || asked.get(),
        |asked| audit_log(asked.page, Some(asked.kind), Some(asked.containing)),
    );
    view! {
        <h1>"Audit log"</h1>
        {move || view! { <AuditFilters asked=asked.get()/> }}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let asked = asked.get_untracked();
                match entries.await {
                    Ok(page) => {
                        let pages = pager(page.page, page.has_more, |n| asked.href(n));
                        let nothing = if asked.filtered() {
                            "No audited action matches these filters."
                        } else {
                            "Nothing audited yet."
                        };
                        view! {
                            {listing(Ok(page.rows.entries), nothing, |entries| view! {
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

/// The filters, as a form that asks the server (the address keeps them, so a filtered page
/// can be shared and reloaded); a new filter starts at the first page.
#[component]
fn AuditFilters(asked: Asked) -> impl IntoView {
    let kinds = [
        ("", "every kind"),
        ("switch", "switch flips"),
        ("ops", "operator actions"),
    ];
    view! {
        <Form method="GET" action="/audit" attr:class="row filters" attr:id="audit-filters" attr:role="search">
            <label>"Kind"
                <select name="kind">
                    {kinds.into_iter().map(|(value, label)| {
                        view! { <option value=value selected={asked.kind == value}>{label}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>"Containing"
                <input type="search" name="containing" maxlength=contract::AUDIT_CONTAINING_MAX.to_string()
                    placeholder="who, action, key, reason…" value=asked.containing.clone()/>
            </label>
            <button type="submit">"Filter"</button>
        </Form>
    }
}

#[component]
fn AuditTable(entries: Vec<AuditEntry>) -> AnyView {
    view! {
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
                        )
                        .into_any(),
                        (_, None) => entry.detail.as_deref().map(detail_view).into_any(),
                    };
                    view! {
                        <tr data-kind=entry.kind.as_str()>
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

/// One field of an action's detail: its name in words, and its value as text or, for a field
/// that holds epoch milliseconds (`…_ms`) or an RFC 3339 time, as a time.
#[derive(Debug, PartialEq)]
enum DetailField {
    Text(String, String),
    Time(String, chrono::DateTime<chrono::Utc>),
}

/// An action's detail (a flat JSON object) as its fields; one text field holding the detail
/// as it came when it is not an object.
fn detail_fields(detail: &str) -> Vec<DetailField> {
    let Some(fields) = detail
        .trim()
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    else {
        return vec![DetailField::Text(String::new(), detail.to_owned())];
    };
    split_top_level(fields)
        .into_iter()
        .filter_map(|field| {
            let (name, value) = field.split_once(':')?;
            let name = name.trim().trim_matches('"');
            let value = value.trim().trim_matches('"');
            let millis = value
                .parse::<i64>()
                .ok()
                .filter(|ms| name.ends_with("_ms") && *ms > 1_000_000_000_000)
                .and_then(chrono::DateTime::from_timestamp_millis);
            Some(match (millis, super::parse_stamp(value)) {
                (Some(at), _) => {
                    DetailField::Time(name.trim_end_matches("_ms").replace('_', " "), at)
                }
                (None, Some(at)) => DetailField::Time(name.replace('_', " "), at),
                (None, None) => DetailField::Text(name.replace('_', " "), value.to_owned()),
            })
        })
        .collect()
}

/// An action's detail as `field: value` pairs, its times as every console time shows (the
/// viewer's zone, UTC beside).
fn detail_view(detail: &str) -> impl IntoView {
    detail_fields(detail)
        .into_iter()
        .enumerate()
        .map(|(at, field)| {
            let gap = (at > 0).then_some(" · ");
            match field {
                DetailField::Text(name, value) if name.is_empty() => {
                    view! { {gap}{value} }.into_any()
                }
                DetailField::Text(name, value) => view! { {gap}{name}": "{value} }.into_any(),
                DetailField::Time(name, time) => {
                    view! { {gap}{name}": "{super::time_cell(time)} }.into_any()
                }
            }
        })
        .collect_view()
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
        let text = |name: &str, value: &str| DetailField::Text(name.into(), value.into());
        assert_eq!(
            detail_fields(r#"{"requeued":3,"oldest_ms":1796551200000,"note":"a, b"}"#),
            vec![
                text("requeued", "3"),
                DetailField::Time(
                    "oldest".into(),
                    chrono::DateTime::from_timestamp_millis(1_796_551_200_000).expect("time")
                ),
                text("note", "a, b"),
            ]
        );
        assert_eq!(
            detail_fields(r#"{"at":"2026-12-06T10:00:00Z","proposer":"ops1"}"#),
            vec![
                DetailField::Time(
                    "at".into(),
                    chrono::DateTime::from_timestamp_millis(1_796_551_200_000).expect("time")
                ),
                text("proposer", "ops1"),
            ]
        );
        assert_eq!(detail_fields("not json"), vec![text("", "not json")]);
    }
}
