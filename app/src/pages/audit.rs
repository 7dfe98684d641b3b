//! The audit log: every switch flip (old → new, etcd revision) and every other
//! operator action (dead-letter requeues, replays), who did it, from where and why; newest
//! first, in pages.

use super::{error_box, listing, pager, when};
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
    view! {
        <table class="grid" id="audit-list">
            <thead><tr>
                <th>"At (UTC)"</th><th>"Who"</th><th>"From"</th><th>"Action"</th><th>"Target"</th>
                <th>"Change"</th><th>"Reason"</th><th>"etcd revision"</th>
            </tr></thead>
            <tbody>
                {entries.into_iter().map(|entry| {
                    let change = match (&entry.old_value, &entry.new_value) {
                        (old, Some(new)) => format!(
                            "{} → {new}",
                            old.as_deref().unwrap_or("(default)")
                        ),
                        (_, None) => entry.detail.clone().unwrap_or_default(),
                    };
                    view! {
                        <tr data-kind=entry.kind.as_str()>
                            <td>{when(entry.at)}</td>
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
