//! Hot keys: the cluster-wide top keys per kind (refreshed every second once the page is
//! live), the keys in force with their action, source and time left, the stored history of
//! the last hours, and, for ops and admin, forms to add a key by hand and to remove one.
//! Adding and removing are audited by the server with the reason.

use super::{error_box, listing, maybe_time_cell, now_ms, reason_field, ticker, time_cell};
use crate::api::{get_hotkeys, hotkey_history, whoami, AddHotKey, RemoveHotKey};
use contract::{HotKey, HotKeyKind, HotKeyPeriod, HotKeysView, Permission, TopKeys};
use leptos::prelude::*;

#[component]
pub fn HotKeysPage() -> impl IntoView {
    let beat = ticker(std::time::Duration::from_secs(1));
    let add = ServerAction::<AddHotKey>::new();
    let remove = ServerAction::<RemoveHotKey>::new();
    let user = Resource::new(|| (), |_| whoami());
    let view_data = Resource::new(
        move || (beat.get(), add.version().get(), remove.version().get()),
        |_| get_hotkeys(),
    );
    let history = Resource::new(
        move || (add.version().get(), remove.version().get()),
        |_| hotkey_history(None),
    );
    view! {
        <h1>"Hot keys"</h1>
        {move || add.value().get().map(|result| match result {
            Ok(key) => view! {
                <p class="notice" id="hotkey-added">{key.kind.as_str()} "/" {key.key} " is in force (" {key.action.as_str()} ")."</p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
        {move || remove.value().get().map(|result| match result {
            Ok(()) => view! { <p class="notice" id="hotkey-removed">"Hot key removed."</p> }.into_any(),
            Err(error) => error_box(error),
        })}
        // One boundary reads `user`: a resource read under two Suspense boundaries can
        // leave an SSR response hanging (leptos-rs/leptos#4851).
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_manage = user.await.is_ok_and(|user| user.role.may(Permission::ManageHotKeys));
                let live = match view_data.await {
                    Ok(data) => live_view(data, may_manage, remove),
                    Err(error) => error_box(error),
                };
                let periods = listing(history.await, "No hot key in the last hours.", history_table);
                view! {
                    {live}
                    {may_manage.then(|| add_form(add))}
                    <h2>"History (last 6 hours)"</h2>
                    {periods}
                }
            })}
        </Transition>
    }
}

fn live_view(data: HotKeysView, may_manage: bool, remove: ServerAction<RemoveHotKey>) -> AnyView {
    let now_ms = now_ms();
    let top = HotKeyKind::ALL.map(|kind| {
        let rows = data.top.of(kind).to_vec();
        view! {
            <section class="card">
                <h3>{kind.as_str()}</h3>
                {if rows.is_empty() {
                    view! { <p class="empty">"nothing counted"</p> }.into_any()
                } else {
                    view! {
                        <table class="grid" tabindex="0" id=format!("top-{}", kind.as_str())>
                            <thead><tr><th>"Key"</th><th>"Per second"</th></tr></thead>
                            <tbody>
                                {rows.into_iter().map(|row| view! {
                                    <tr><td class="mono">{row.key}</td><td>{row.rate_per_s}</td></tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }}
            </section>
        }
    });
    let hot = data.hot;
    let top_keys = data.top;
    view! {
        <h2>"In force"</h2>
        {if hot.is_empty() {
            view! { <p class="empty" id="hot-none">"No hot key in force."</p> }.into_any()
        } else {
            view! {
                <table class="grid" tabindex="0" id="hot-keys">
                    <thead><tr>
                        <th>"Kind"</th><th>"Key"</th><th>"Action"</th><th>"Source"</th>
                        <th>"Per second now"</th><th>"Since"</th><th>"Time left"</th><th>"Why"</th>
                        {may_manage.then(|| view! { <th></th> })}
                    </tr></thead>
                    <tbody>
                        {hot.into_iter().map(|key| {
                            let now_rate = rate_now(&top_keys, &key);
                            hot_row(key, now_rate, now_ms, may_manage, remove)
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        <h2>"Top keys, cluster-wide"</h2>
        <p class="meta">"Requests per second over the last " {data.window_ms} " ms, summed over "
            {data.reporting_nodes} " reporting instance(s)."</p>
        <div class="row">{top.into_iter().collect_view()}</div>
    }
    .into_any()
}

/// A hot key's rate now, as the top table counts it: the rate it was found hot at is old
/// news, and a manual key has none.
fn rate_now(top: &TopKeys, key: &HotKey) -> u64 {
    top.of(key.kind)
        .iter()
        .find(|row| row.key == key.key)
        .map_or(0, |row| row.rate_per_s)
}

fn hot_row(
    key: HotKey,
    now_rate: u64,
    now_ms: i64,
    may_manage: bool,
    remove: ServerAction<RemoveHotKey>,
) -> impl IntoView {
    let left_s = ((key.expires_ms - now_ms).max(0) + 999) / 1000;
    let since = chrono::DateTime::from_timestamp_millis(key.since_ms).map(time_cell);
    let found = match key.source {
        contract::HotKeySource::Detected => format!("found hot at {}/s", key.rate_per_s),
        contract::HotKeySource::Manual => "added by hand".to_owned(),
    };
    let action = match key.limit_per_s {
        Some(rate) => format!("{} {rate}/s", key.action.as_str()),
        None => key.action.as_str().to_owned(),
    };
    let why = match (&key.actor, &key.reason) {
        (Some(actor), Some(reason)) => format!("{actor}: {reason}"),
        _ => String::new(),
    };
    let (kind, text) = (key.kind.as_str(), key.key.clone());
    view! {
        <tr>
            <td>{kind}</td><td class="mono">{key.key}</td><td>{action}</td>
            <td>{key.source.as_str()}</td><td class="num" title=found>{now_rate}</td><td>{since}</td>
            <td>{left_s} " s"</td><td>{why}</td>
            {may_manage.then(|| view! {
                <td>
                    <ActionForm action=remove attr:class="inline">
                        <input type="hidden" name="kind" value=kind/>
                        <input type="hidden" name="key" value=text/>
                        <input name="reason" required maxlength="500" placeholder="reason (audited)" aria-label="Reason (audited)"/>
                        <button type="submit">"Remove"</button>
                    </ActionForm>
                </td>
            })}
        </tr>
    }
}

fn add_form(add: ServerAction<AddHotKey>) -> impl IntoView {
    view! {
        <details class="change" id="add-hotkey">
            <summary>"Add a hot key by hand…"</summary>
            <ActionForm action=add attr:class="card change-form">
                <label>"Kind"
                    <select name="kind">
                        <option value="item">"item"</option>
                        <option value="user">"user"</option>
                        <option value="ip">"ip"</option>
                    </select>
                </label>
                <label>"Key (item or user id, IP address)" <input name="key" required maxlength="64"/></label>
                <label>"Action"
                    <select name="action">
                        <option value="watch">"watch: show only"</option>
                        <option value="cache">"cache: serve the item's reads from memory"</option>
                        <option value="limit">"limit: at most limit/s per instance"</option>
                        <option value="block">"block: refuse the buyer or address"</option>
                    </select>
                </label>
                <label>"Limit per second (limit only)" <input name="limit_per_s" inputmode="numeric"/></label>
                <label>"Hold, seconds" <input name="hold_s" value="300" inputmode="numeric" required/></label>
                {reason_field()}
                <button type="submit" disabled=move || add.pending().get()>"Add"</button>
            </ActionForm>
        </details>
    }
}

fn history_table(periods: Vec<HotKeyPeriod>) -> AnyView {
    view! {
        <table class="grid" tabindex="0" id="hotkey-history">
            <thead><tr>
                <th>"Kind"</th><th>"Key"</th><th>"Action"</th><th>"Source"</th>
                <th>"Peak/s"</th><th>"From"</th><th>"Until"</th><th>"Who, why"</th>
            </tr></thead>
            <tbody>
                {periods.into_iter().map(|period| {
                    let who = match (period.actor, period.reason) {
                        (Some(actor), Some(reason)) => format!("{actor}: {reason}"),
                        (Some(actor), None) => actor,
                        _ => String::new(),
                    };
                    view! {
                        <tr>
                            <td>{period.kind.as_str()}</td><td class="mono">{period.key}</td>
                            <td>{period.action.as_str()}</td><td>{period.source.as_str()}</td>
                            <td>{period.peak_rate_per_s}</td><td>{time_cell(period.started_at)}</td>
                            <td>{maybe_time_cell(period.ended_at)}</td><td>{who}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::{HotKeyAction, HotKeySource, TopKey};

    #[test]
    fn a_watched_key_shows_the_rate_the_top_table_counts_now() {
        let top = TopKeys {
            item: vec![TopKey {
                key: "42".into(),
                rate_per_s: 70,
            }],
            ..TopKeys::default()
        };
        let key = |key: &str| HotKey {
            kind: HotKeyKind::Item,
            key: key.into(),
            rate_per_s: 0,
            action: HotKeyAction::Watch,
            limit_per_s: None,
            source: HotKeySource::Manual,
            since_ms: 0,
            expires_ms: 0,
            actor: None,
            reason: None,
        };
        assert_eq!(rate_now(&top, &key("42")), 70);
        assert_eq!(rate_now(&top, &key("43")), 0);
    }
}
