//! Activities: list, create, and the activity page (live figures, pre-warm and the edit
//! form). The form builds an [`ActivityInput`] in the browser, so it needs hydration.

use super::{error_box, listing};
use crate::api::{get_activity, list_activities, list_items, PrewarmActivity, SaveActivity};
use chrono::{DateTime, NaiveDateTime, Utc};
use contract::{
    format_cents, ActivityDetail, ActivityInput, ActivityItemInput, ActivityKind, PrewarmReport,
};
use leptos::prelude::*;
use leptos_router::{
    components::A,
    hooks::{use_navigate, use_params_map},
};

const INPUT_TIME_FORMAT: &str = "%Y-%m-%dT%H:%M";

fn time_for_input(time: DateTime<Utc>) -> String {
    time.format(INPUT_TIME_FORMAT).to_string()
}

fn time_from_input(text: &str, field: &str) -> Result<DateTime<Utc>, String> {
    NaiveDateTime::parse_from_str(text, INPUT_TIME_FORMAT)
        .map(|naive| naive.and_utc())
        .map_err(|_| format!("{field}: pick a date and time"))
}

#[component]
pub fn ActivityList() -> impl IntoView {
    let activities = Resource::new(|| (), |_| list_activities());
    view! {
        <div class="page-head">
            <h1>"Activities"</h1>
            <A href="/activities/new" attr:class="button">"New activity"</A>
        </div>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                listing(activities.await, "No activities yet.", |list| view! {
                    <table class="grid" id="activity-list">
                        <thead><tr>
                            <th>"ID"</th><th>"Title"</th><th>"Kind"</th><th>"Starts (UTC)"</th>
                            <th>"Ends (UTC)"</th><th>"Items"</th><th>"Stock"</th>
                        </tr></thead>
                        <tbody>
                            {list.into_iter().map(|activity| view! {
                                <tr>
                                    <td>{activity.id}</td>
                                    <td><A href=format!("/activities/{}", activity.id)>{activity.title}</A></td>
                                    <td>{activity.kind.as_str()}</td>
                                    <td>{activity.starts_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                                    <td>{activity.ends_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                                    <td class="num">{activity.item_count}</td>
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

#[component]
pub fn ActivityCreate() -> impl IntoView {
    view! {
        <h1>"New activity"</h1>
        <ActivityForm id=None initial=None/>
    }
}

#[component]
pub fn ActivityPage() -> impl IntoView {
    let params = use_params_map();
    // Lives here, not in the panel, so its report survives the refetch it triggers.
    let prewarm = ServerAction::<PrewarmActivity>::new();
    let activity = Resource::new(
        move || {
            let id = params
                .read()
                .get("id")
                .and_then(|id| id.parse::<i64>().ok());
            (id, prewarm.version().get())
        },
        |(id, _)| async move {
            match id {
                Some(id) => get_activity(id).await,
                None => Err(ServerFnError::new("not found")),
            }
        },
    );
    view! {
        // A transition, so the page stays up while a pre-warm refetches the figures.
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match activity.await {
                    Ok(activity) => view! {
                        <h1>{activity.title.clone()}</h1>
                        <Figures activity=activity.clone()/>
                        <Prewarm id=activity.id action=prewarm/>
                        <h2>"Edit"</h2>
                        <ActivityForm id=Some(activity.id) initial=Some(activity.to_input())/>
                    }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

/// Live stock figures per item: DB total and sold, and Redis once pre-warmed.
#[component]
fn Figures(activity: ActivityDetail) -> impl IntoView {
    let prewarm = if activity.prewarmed {
        "pre-warmed"
    } else {
        "not pre-warmed"
    };
    view! {
        <p class="meta">
            {activity.kind.as_str()} " · " {time_for_input(activity.starts_at)} " → "
            {time_for_input(activity.ends_at)} " UTC · pay within " {activity.pay_timeout_s} " s · " {prewarm}
        </p>
        <table class="grid" id="activity-items">
            <thead><tr>
                <th>"Item"</th><th>"Price"</th><th>"Limit / user"</th><th>"Stock"</th><th>"Sold"</th><th>"Redis stock"</th>
            </tr></thead>
            <tbody>
                {activity.items.into_iter().map(|item| view! {
                    <tr>
                        <td>{item.name} " (#" {item.item_id} ")"</td>
                        <td class="num">{format_cents(item.price_cents)}</td>
                        <td class="num">{item.per_user_limit}</td>
                        <td class="num">{item.total_stock}</td>
                        <td class="num">{item.sold}</td>
                        <td class="num">{item.redis_stock.map(|n| n.to_string()).unwrap_or_else(|| "—".into())}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        {(!activity.seats.is_empty()).then(|| view! {
            <p class="meta">"Seats: " {activity.seats.join(" ")}</p>
        })}
    }
}

/// The pre-warm button (the server refuses roles other than ops and admin, and any open
/// sale) and, once it ran, what it loaded into Redis.
#[component]
fn Prewarm(id: i64, action: ServerAction<PrewarmActivity>) -> impl IntoView {
    let pending = action.pending();
    view! {
        <ActionForm action attr:class="row" attr:id="prewarm-form">
            <input type="hidden" name="id" value=id/>
            <button type="submit" disabled=move || pending.get()>
                {move || if pending.get() { "Pre-warming…" } else { "Pre-warm" }}
            </button>
            <span class="meta">"Ops and admin only: loads stock, buyer records and Bloom filter keys into Redis; refused once the sale is open."</span>
        </ActionForm>
        {move || action.value().get().map(|result| match result {
            Ok(report) => view! { <PrewarmLoaded report/> }.into_any(),
            Err(error) => error_box(error),
        })}
    }
}

/// What one pre-warm run loaded, next to the database figures it was derived from.
#[component]
fn PrewarmLoaded(report: PrewarmReport) -> impl IntoView {
    view! {
        <h2>"Loaded into Redis"</h2>
        <table class="grid" id="prewarm-report">
            <thead><tr>
                <th>"Item"</th><th>"Total stock"</th><th>"Held by orders (DB)"</th><th>"Redis stock"</th><th>"Buyers"</th>
            </tr></thead>
            <tbody>
                {report.items.into_iter().map(|item| view! {
                    <tr>
                        <td>"#" {item.item_id}</td>
                        <td class="num">{item.total_stock}</td>
                        <td class="num">{item.held_in_db}</td>
                        <td class="num">{item.redis_stock}</td>
                        <td class="num">{item.buyers}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <p class="meta">"Bloom filter bits newly set: " {report.bloom_bits_set}</p>
    }
}

/// One editable row of the activity's item list.
#[derive(Clone, Copy)]
struct ItemRow {
    key: usize,
    item_id: RwSignal<String>,
    stock: RwSignal<String>,
    per_user_limit: RwSignal<String>,
    price: RwSignal<String>,
}

impl ItemRow {
    fn new(key: usize, input: Option<&ActivityItemInput>) -> Self {
        Self {
            key,
            item_id: RwSignal::new(input.map(|i| i.item_id.to_string()).unwrap_or_default()),
            stock: RwSignal::new(input.map(|i| i.stock.to_string()).unwrap_or_default()),
            per_user_limit: RwSignal::new(
                input.map_or("1".into(), |i| i.per_user_limit.to_string()),
            ),
            price: RwSignal::new(
                input
                    .map(|i| format_cents(i.price_cents))
                    .unwrap_or_default(),
            ),
        }
    }

    fn to_input(self, position: usize) -> Result<ActivityItemInput, String> {
        let whole = |signal: RwSignal<String>, what: &str| {
            signal
                .get_untracked()
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("item {position}: {what} must be a whole number"))
        };
        Ok(ActivityItemInput {
            item_id: whole(self.item_id, "item")?,
            stock: whole(self.stock, "stock")?,
            per_user_limit: whole(self.per_user_limit, "limit per user")?,
            price_cents: contract::parse_cents(&self.price.get_untracked())
                .map_err(|e| format!("item {position}: {e}"))?,
        })
    }
}

#[component]
fn ActivityForm(id: Option<i64>, initial: Option<ActivityInput>) -> impl IntoView {
    let catalogue = Resource::new(|| (), |_| list_items());
    let save = ServerAction::<SaveActivity>::new();
    let local_error = RwSignal::new(None::<String>);

    let initial_ref = initial.as_ref();
    let title = RwSignal::new(initial_ref.map(|a| a.title.clone()).unwrap_or_default());
    let starts_at = RwSignal::new(
        initial_ref
            .map(|a| time_for_input(a.starts_at))
            .unwrap_or_default(),
    );
    let ends_at = RwSignal::new(
        initial_ref
            .map(|a| time_for_input(a.ends_at))
            .unwrap_or_default(),
    );
    let kind = RwSignal::new(initial_ref.map_or(ActivityKind::Standard, |a| a.kind));
    let pay_timeout =
        RwSignal::new(initial_ref.map_or("900".to_string(), |a| a.pay_timeout_s.to_string()));
    let seats = RwSignal::new(initial_ref.map(|a| a.seats.join(" ")).unwrap_or_default());
    let merchant_id = initial_ref.and_then(|a| a.merchant_id);
    let rows = RwSignal::new(match initial_ref {
        Some(activity) if !activity.items.is_empty() => activity
            .items
            .iter()
            .enumerate()
            .map(|(key, item)| ItemRow::new(key, Some(item)))
            .collect(),
        _ => vec![ItemRow::new(0, None)],
    });
    let next_key = StoredValue::new(rows.with_untracked(Vec::len));

    let collect = move || -> Result<ActivityInput, String> {
        let items = rows
            .get_untracked()
            .into_iter()
            .enumerate()
            .map(|(position, row)| row.to_input(position + 1))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ActivityInput {
            title: title.get_untracked(),
            starts_at: time_from_input(&starts_at.get_untracked(), "start")?,
            ends_at: time_from_input(&ends_at.get_untracked(), "end")?,
            kind: kind.get_untracked(),
            pay_timeout_s: pay_timeout
                .get_untracked()
                .trim()
                .parse()
                .map_err(|_| "pay timeout must be a whole number of seconds".to_string())?,
            items,
            seats: seats
                .get_untracked()
                .split([' ', ',', '\n'])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            merchant_id,
        })
    };
    let on_submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        match collect() {
            Ok(input) => {
                local_error.set(None);
                save.dispatch(SaveActivity { id, input });
            }
            Err(message) => local_error.set(Some(message)),
        }
    };
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(saved)) = save.value().get() {
            navigate(&format!("/activities/{saved}"), Default::default());
        }
    });

    view! {
        <form class="card" id="activity-form" on:submit=on_submit>
            <label>"Title" <input type="text" name="title" required maxlength="200" bind:value=title/></label>
            <div class="row">
                <label>"Starts (UTC)" <input type="datetime-local" name="starts_at" required bind:value=starts_at/></label>
                <label>"Ends (UTC)" <input type="datetime-local" name="ends_at" required bind:value=ends_at/></label>
                <label>"Pay within (s)" <input type="number" name="pay_timeout_s" min="30" bind:value=pay_timeout/></label>
                <label>"Kind"
                    <select name="kind" on:change=move |ev| {
                        kind.set(event_target_value(&ev).parse().unwrap_or(ActivityKind::Standard))
                    }>
                        <option value="standard" selected=move || kind.get() == ActivityKind::Standard>"standard"</option>
                        <option value="seated" selected=move || kind.get() == ActivityKind::Seated>"seated"</option>
                    </select>
                </label>
            </div>
            <fieldset>
                <legend>"Items"</legend>
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        let options = catalogue.await.unwrap_or_default();
                        view! {
                            <datalist id="catalogue">
                                {options.into_iter().map(|item| view! {
                                    <option value=item.id.to_string()>{item.name}</option>
                                }).collect_view()}
                            </datalist>
                        }
                    })}
                </Transition>
                <For each=move || rows.get() key=|row| row.key let:row>
                    <div class="row item-row">
                        <label>"Item ID" <input type="number" list="catalogue" name="item_id" bind:value=row.item_id/></label>
                        <label>"Stock" <input type="number" min="1" name="stock" bind:value=row.stock/></label>
                        <label>"Limit / user" <input type="number" min="1" name="per_user_limit" bind:value=row.per_user_limit/></label>
                        <label>"Price (yuan)" <input type="text" inputmode="decimal" name="price" bind:value=row.price/></label>
                        <button type="button" class="link" on:click=move |_| rows.update(|rows| rows.retain(|r| r.key != row.key))>"Remove"</button>
                    </div>
                </For>
                <button type="button" class="link" on:click=move |_| {
                    let key = next_key.get_value();
                    next_key.set_value(key + 1);
                    rows.update(|rows| rows.push(ItemRow::new(key, None)));
                }>"Add item"</button>
            </fieldset>
            <Show when=move || kind.get() == ActivityKind::Seated>
                <label>"Seats (one code per seat, separated by spaces)"
                    <textarea name="seats" rows="3" bind:value=seats></textarea>
                </label>
            </Show>
            <button type="submit" disabled=move || save.pending().get()>"Save activity"</button>
        </form>
        {move || local_error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        {move || save.value().get().and_then(Result::err).map(error_box)}
    }
}
