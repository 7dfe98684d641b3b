//! Activities: list, create, and the activity page (whether a lottery's buyers can register,
//! live figures, the live stock ledger, pre-warm and the edit form). The form builds an [`ActivityInput`] in the browser, so it
//! needs hydration.

use super::{
    error_box, from_viewer_wall_clock, listing, my_role, now_ms,
    reconciliation::{ledger_resource, Ledger},
    time_cell, viewer_wall_clock,
};
use crate::api::{
    get_activity, list_activities, list_items, PrewarmActivity, PublishSalePage, SaveActivity,
};
use crate::error::ConsoleFnError;
use chrono::{DateTime, NaiveDateTime, Utc};
use contract::{
    format_cents, ActivityDetail, ActivityInput, ActivityItemInput, ActivityKind, ActivitySummary,
    Item, Permission, PrewarmReport, SaleWindow,
};
use leptos::prelude::*;
use leptos_router::{
    components::A,
    hooks::{use_navigate, use_params_map},
};
use lottery::{LotteryFields, LotteryFieldset, RegistrationReachLine};

const INPUT_TIME_FORMAT: &str = "%Y-%m-%dT%H:%M";

fn time_for_input(time: DateTime<Utc>) -> String {
    time.format(INPUT_TIME_FORMAT).to_string()
}

/// The instant a time field's text names: the viewer's wall clock once the form is `local`,
/// UTC as the server rendered it before.
fn input_instant(text: &str, local: bool) -> Option<DateTime<Utc>> {
    let wall = NaiveDateTime::parse_from_str(text, INPUT_TIME_FORMAT).ok()?;
    if local {
        from_viewer_wall_clock(wall)
    } else {
        Some(wall.and_utc())
    }
}

fn time_from_input(text: &str, local: bool, field: &str) -> Result<DateTime<Utc>, String> {
    input_instant(text, local).ok_or_else(|| format!("{field}: pick a date and time"))
}

#[component]
pub fn ActivityList() -> impl IntoView {
    let activities = Resource::new(
        || (),
        |_| async { Ok::<_, ConsoleFnError>((list_activities().await?, my_role().await?)) },
    );
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let (list, role) = match activities.await {
                    Ok(found) => found,
                    Err(error) => return view! { <h1>"Activities"</h1> {error_box(error)} }.into_any(),
                };
                let now = now_ms();
                view! {
                    <div class="page-head">
                        <h1>"Activities"</h1>
                        {role.may(Permission::WriteCatalog).then(|| view! {
                            <A href="/activities/new" attr:class="button">"New activity"</A>
                        })}
                    </div>
                    {listing(Ok(list), "No activities yet.", |list| view! {
                        <table class="grid" tabindex="0" id="activity-list">
                            <thead><tr>
                                <th>"ID"</th><th>"Title"</th><th>"Status"</th><th>"Kind"</th>
                                <th>"Starts"</th><th>"Ends"</th><th>"Items"</th><th>"Stock"</th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|activity| {
                                    let badges = statuses(&activity, now);
                                    view! {
                                    <tr data-activity=activity.id>
                                        <td>{activity.id}</td>
                                        <td><A href=format!("/activities/{}", activity.id)>{activity.title.clone()}</A></td>
                                        <td class="statuses">{badges}</td>
                                        <td>{activity.kind.as_str()}</td>
                                        <td>{time_cell(activity.starts_at)}</td>
                                        <td>{time_cell(activity.ends_at)}</td>
                                        <td class="num">{activity.item_count}</td>
                                        <td class="num">{activity.total_stock}</td>
                                    </tr>
                                }}).collect_view()}
                            </tbody>
                        </table>
                    }.into_any())}
                }.into_any()
            })}
        </Suspense>
    }
}

/// An activity's standing as badges: its sale window, pre-warmed or not, its published page.
fn statuses(activity: &ActivitySummary, now_ms: i64) -> AnyView {
    let window = SaleWindow::at(activity.starts_at, activity.ends_at, now_ms).as_str();
    let prewarm = if activity.prewarmed {
        ("pre-warmed", "status status-prewarmed")
    } else {
        ("not pre-warmed", "status status-none")
    };
    let published = activity
        .published_version
        .map_or_else(|| "not published".to_owned(), |v| format!("published v{v}"));
    view! {
        <span class=format!("status status-{window}") data-window=window>{window}</span> " "
        <span class=prewarm.1>{prewarm.0}</span> " "
        <span class="status" data-published=activity.published_version.unwrap_or(0)>{published}</span>
    }
    .into_any()
}

#[component]
pub fn ActivityCreate() -> impl IntoView {
    let catalogue = Resource::new(|| (), |_| list_items());
    view! {
        <h1>"New activity"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match catalogue.await {
                    Ok(catalogue) => view! {
                        <ActivityForm id=None initial=None save=ServerAction::new() catalogue/>
                    }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn ActivityPage() -> impl IntoView {
    let params = use_params_map();
    // Lives here, not in the panel, so its report survives the refetch it triggers.
    let prewarm = ServerAction::<PrewarmActivity>::new();
    let publish = ServerAction::<PublishSalePage>::new();
    let save = ServerAction::<SaveActivity>::new();
    let id = move || {
        params
            .read()
            .get("id")
            .and_then(|id| id.parse::<i64>().ok())
    };
    // Every resource of the page is made here, and each is awaited in a boundary of its own
    // beside the others, never inside the view that awaits another: a server render of
    // nested boundaries could wait for ever (see `ledger_resource`).
    let ledger = ledger_resource(id);
    let reach = lottery::reach_resource(id);
    // With the signed-in role: each role sees the controls it may use (the server refuses
    // the others anyway). Refetched after a pre-warm and a publish, whose state it shows.
    let activity = Resource::new(
        move || {
            (
                id(),
                prewarm.version().get(),
                publish.version().get(),
                save.version().get(),
            )
        },
        |(id, ..)| async move {
            let id = id.ok_or_else(ConsoleFnError::not_found)?;
            let role = my_role().await?;
            // The edit form picks items by name from the catalogue.
            let catalogue = if role.may(Permission::WriteCatalog) {
                list_items().await?
            } else {
                Vec::new()
            };
            Ok::<_, ConsoleFnError>((get_activity(id).await?, role, catalogue))
        },
    );
    view! {
        <RegistrationReachLine reach/>
        // A transition, so the page stays up while a pre-warm refetches the figures.
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match activity.await {
                    Ok((activity, role, catalogue)) => view! {
                        <h1>{activity.title.clone()}</h1>
                        <Figures activity=activity.clone()/>
                        <PublishedState activity=activity.clone()/>
                        {role.may(Permission::Prewarm).then(|| view! { <Prewarm id=activity.id action=prewarm/> })}
                        {role.may(Permission::PublishSalePage).then(|| view! { <Publish id=activity.id action=publish/> })}
                        {role.may(Permission::WriteCatalog).then(|| view! {
                            <h2>"Edit"</h2>
                            <ActivityForm id=Some(activity.id) initial=Some(activity.to_input()) save catalogue/>
                        })}
                    }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Ledger ledger/>
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
            {activity.kind.as_str()} " · " {time_cell(activity.starts_at)} " → "
            {time_cell(activity.ends_at)} " · pay within " {activity.pay_timeout_s} " s · " {prewarm}
        </p>
        <table class="grid" tabindex="0" id="activity-items">
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

/// Which version of the buyers' page is published, and whether an edit made since has left
/// it stale: buyers see the published page, not the catalogue, until it is published again.
#[component]
fn PublishedState(activity: ActivityDetail) -> impl IntoView {
    match activity.publication {
        None => view! {
            <p class="meta" id="publication" data-state="unpublished">
                "The buyers' sale page is not published yet."
            </p>
        }
        .into_any(),
        Some(publication) if publication.stale => view! {
            <p class="notice" id="publication" data-state="stale" role="status">
                "Published version " {publication.version} " (" {time_cell(publication.published_at)}
                ") is older than the last edit: buyers still see the old page. Publish the sale page again to show them this one."
            </p>
        }
        .into_any(),
        Some(publication) => view! {
            <p class="meta" id="publication" data-state="current">
                "Published version " {publication.version} " (" {time_cell(publication.published_at)}
                "), up to date with the last edit."
            </p>
        }
        .into_any(),
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

/// The publish button (the owning merchant, ops and admin; the server refuses the others)
/// and, once it ran, the link to the page with its version.
#[component]
fn Publish(id: i64, action: ServerAction<PublishSalePage>) -> impl IntoView {
    let pending = action.pending();
    view! {
        <ActionForm action attr:class="row" attr:id="publish-form">
            <input type="hidden" name="id" value=id/>
            <button type="submit" disabled=move || pending.get()>
                {move || if pending.get() { "Publishing…" } else { "Publish sale page" }}
            </button>
            <span class="meta">"Renders the buyers' static page (title, items, prices, times) as a new version; pages already open keep working."</span>
        </ActionForm>
        {move || action.value().get().map(|result| match result {
            Ok(page) => view! {
                <p class="meta" id="published">
                    "Published version " {page.version} ": "
                    <a href=page.url.clone() target="_blank" rel="noopener">{page.url.clone()}</a>
                </p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
    }
}

/// What one pre-warm run loaded, next to the database figures it was derived from.
#[component]
fn PrewarmLoaded(report: PrewarmReport) -> impl IntoView {
    view! {
        <h2>"Loaded into Redis"</h2>
        <table class="grid" tabindex="0" id="prewarm-report">
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

    /// The row as the wire wants it; a refusal names the row and the field by their labels.
    fn to_input(self, position: usize) -> Result<ActivityItemInput, String> {
        let whole = |signal: RwSignal<String>, label: &str| {
            signal
                .get_untracked()
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("Item {position}, {label}: enter a whole number"))
        };
        Ok(ActivityItemInput {
            item_id: self
                .item_id
                .get_untracked()
                .parse()
                .map_err(|_| format!("Item {position}: choose an item"))?,
            stock: whole(self.stock, "Stock")?,
            per_user_limit: whole(self.per_user_limit, "Limit / user")?,
            price_cents: contract::parse_cents(&self.price.get_untracked())
                .map_err(|e| format!("Item {position}, Sale price (yuan): {e}"))?,
        })
    }
}

/// The item rows of the form, and the key the next added row gets (keys tell `<For>` which
/// row is which after a removal).
#[derive(Clone, Copy)]
struct ItemRows {
    rows: RwSignal<Vec<ItemRow>>,
    next_key: StoredValue<usize>,
}

impl ItemRows {
    /// The activity's items, or one blank row to start from.
    fn new(items: &[ActivityItemInput]) -> Self {
        let rows: Vec<ItemRow> = if items.is_empty() {
            vec![ItemRow::new(0, None)]
        } else {
            items
                .iter()
                .enumerate()
                .map(|(key, item)| ItemRow::new(key, Some(item)))
                .collect()
        };
        Self {
            next_key: StoredValue::new(rows.len()),
            rows: RwSignal::new(rows),
        }
    }

    fn add(self) {
        let key = self.next_key.get_value();
        self.next_key.set_value(key + 1);
        self.rows.update(|rows| rows.push(ItemRow::new(key, None)));
    }

    fn remove(self, key: usize) {
        self.rows.update(|rows| rows.retain(|row| row.key != key));
    }

    /// Every row as the wire wants it, or the first one that does not parse (numbered from 1).
    fn to_inputs(self) -> Result<Vec<ActivityItemInput>, String> {
        self.rows
            .get_untracked()
            .into_iter()
            .enumerate()
            .map(|(position, row)| row.to_input(position + 1))
            .collect()
    }
}

/// The form's fields, one signal each, seeded from the activity being edited (or blank).
#[derive(Clone, Copy)]
struct ActivityFields {
    title: RwSignal<String>,
    starts_at: RwSignal<String>,
    ends_at: RwSignal<String>,
    kind: RwSignal<ActivityKind>,
    pay_timeout: RwSignal<String>,
    seats: RwSignal<String>,
    items: ItemRows,
    /// The time fields hold the viewer's wall clock (true once the page is live) or UTC (as
    /// the server rendered them).
    local: RwSignal<bool>,
    /// Not shown in the form: sent back as it came.
    merchant_id: Option<i64>,
    /// The sale mode and a lottery's terms.
    lottery: LotteryFields,
}

impl ActivityFields {
    fn new(initial: Option<&ActivityInput>) -> Self {
        Self {
            title: RwSignal::new(initial.map(|a| a.title.clone()).unwrap_or_default()),
            starts_at: RwSignal::new(
                initial
                    .map(|a| time_for_input(a.starts_at))
                    .unwrap_or_default(),
            ),
            ends_at: RwSignal::new(
                initial
                    .map(|a| time_for_input(a.ends_at))
                    .unwrap_or_default(),
            ),
            kind: RwSignal::new(initial.map_or(ActivityKind::Standard, |a| a.kind)),
            pay_timeout: RwSignal::new(
                initial.map_or("900".to_string(), |a| a.pay_timeout_s.to_string()),
            ),
            seats: RwSignal::new(initial.map(|a| a.seats.join(" ")).unwrap_or_default()),
            items: ItemRows::new(initial.map_or(&[], |a| &a.items)),
            local: RwSignal::new(false),
            merchant_id: initial.and_then(|a| a.merchant_id),
            lottery: LotteryFields::new(initial),
        }
    }

    /// Once the page is live: the times the server rendered in UTC become the viewer's wall
    /// clock, which is what a `datetime-local` input means to the person typing into it.
    fn go_local(self) {
        let [opens, closes] = self.lottery.times();
        for field in [self.starts_at, self.ends_at, opens, closes] {
            if let Some(time) = input_instant(&field.get_untracked(), false) {
                field.set(
                    viewer_wall_clock(time)
                        .0
                        .format(INPUT_TIME_FORMAT)
                        .to_string(),
                );
            }
        }
        self.local.set(true);
    }

    /// What the save sends, or the first field that does not parse, items first.
    fn to_input(self) -> Result<ActivityInput, String> {
        let items = self.items.to_inputs()?;
        let local = self.local.get_untracked();
        let lottery = self.lottery.to_terms(local)?;
        Ok(ActivityInput {
            title: self.title.get_untracked(),
            starts_at: time_from_input(&self.starts_at.get_untracked(), local, "Starts")?,
            ends_at: time_from_input(&self.ends_at.get_untracked(), local, "Ends")?,
            kind: self.kind.get_untracked(),
            pay_timeout_s: self
                .pay_timeout
                .get_untracked()
                .trim()
                .parse()
                .map_err(|_| "Pay within (s): enter a whole number of seconds".to_string())?,
            items,
            seats: self
                .seats
                .get_untracked()
                .split([' ', ',', '\n'])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            merchant_id: self.merchant_id,
            mode: lottery.mode,
            registration_opens_at: lottery.registration_opens_at,
            registration_closes_at: lottery.registration_closes_at,
            code_ttl_s: lottery.code_ttl_s,
        })
    }
}

/// Creates (`id` None) or edits an activity; a save that succeeds opens the activity's page.
/// Its two deep parts return [`AnyView`]: as concrete types nested in the pages' views they
/// took the server crate past the compiler's recursion limit.
#[component]
fn ActivityForm(
    id: Option<i64>,
    initial: Option<ActivityInput>,
    save: ServerAction<SaveActivity>,
    catalogue: Vec<Item>,
) -> impl IntoView {
    let fields = ActivityFields::new(initial.as_ref());
    // Effects run in the browser only, after hydration.
    Effect::new(move |_| fields.go_local());
    let local_error = RwSignal::new(None::<String>);
    let merchants = StoredValue::new(
        catalogue
            .iter()
            .map(|item| (item.id, item.merchant_id))
            .collect::<Vec<_>>(),
    );
    let on_submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        match fields.to_input() {
            Ok(mut input) => {
                // A new activity belongs to its items' merchant: an admin's catalogue holds
                // every merchant's items, and the server asks an admin to name one.
                if input.merchant_id.is_none() {
                    input.merchant_id = merchants.with_value(|merchants| {
                        let first = input.items.first()?.item_id;
                        merchants
                            .iter()
                            .find(|(id, _)| *id == first)
                            .map(|(_, m)| *m)
                    });
                }
                local_error.set(None);
                save.dispatch(SaveActivity { id, input });
            }
            Err(message) => local_error.set(Some(message)),
        }
    };
    // A refusal answers the form as it was sent: once the form is edited it no longer
    // describes what is on screen, so it goes (the next save answers afresh).
    let on_input = move |_| {
        local_error.set(None);
        if matches!(save.value().get_untracked(), Some(Err(_))) {
            save.value().set(None);
        }
    };
    open_when_saved(save);
    let ActivityFields {
        title,
        starts_at,
        ends_at,
        kind,
        pay_timeout,
        seats,
        items,
        local,
        lottery,
        ..
    } = fields;

    view! {
        <form class="card" id="activity-form" on:submit=on_submit on:input=on_input on:change=on_input>
            <label>"Title" <input type="text" name="title" required maxlength="200" bind:value=title/></label>
            <ScheduleFields starts_at ends_at local pay_timeout kind/>
            <LotteryFieldset fields=lottery local/>
            <ItemsFieldset items catalogue/>
            <SeatsField kind seats/>
            <button type="submit" disabled=move || save.pending().get()>"Save activity"</button>
        </form>
        {move || local_error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        {move || save.value().get().map(|saved| match saved {
            Ok(_) => view! { <p class="saved" id="saved" role="status">"Saved."</p> }.into_any(),
            Err(error) => error_box(error),
        })}
    }
}

/// Goes to the saved activity's page (a new activity learns its id there).
fn open_when_saved(save: ServerAction<SaveActivity>) {
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(saved)) = save.value().get() {
            navigate(&format!("/activities/{saved}"), Default::default());
        }
    });
}

/// When the sale runs, how long a buyer has to pay, and the kind of sale.
#[component]
fn ScheduleFields(
    starts_at: RwSignal<String>,
    ends_at: RwSignal<String>,
    local: RwSignal<bool>,
    pay_timeout: RwSignal<String>,
    kind: RwSignal<ActivityKind>,
) -> AnyView {
    view! {
        <div class="row">
            <ZonedTimeField label="Starts" name="starts_at" text=starts_at local/>
            <ZonedTimeField label="Ends" name="ends_at" text=ends_at local/>
            <label>"Pay within (s)" <input type="number" name="pay_timeout_s" min="30" bind:value=pay_timeout/></label>
            <KindSelect kind/>
        </div>
    }
    .into_any()
}

/// A time typed in the viewer's zone (named in the label), with the UTC instant it names
/// beside it; UTC alone as the server renders it, before the page is live.
#[component]
fn ZonedTimeField(
    label: &'static str,
    name: &'static str,
    text: RwSignal<String>,
    local: RwSignal<bool>,
) -> impl IntoView {
    let instant = move || input_instant(&text.get(), local.get());
    let caption = move || match (local.get(), instant()) {
        (true, Some(time)) => format!("{label} (your time, {})", viewer_wall_clock(time).1),
        (true, None) => format!("{label} (your time)"),
        (false, _) => format!("{label} (UTC)"),
    };
    let utc = move || {
        instant()
            .filter(|_| local.get())
            .map(|time| format!("= {} UTC", time.format("%Y-%m-%d %H:%M")))
    };
    view! {
        <label>{caption} <input type="datetime-local" name=name required bind:value=text/>
            <small class="utc-beside" id=format!("{name}-utc")>{utc}</small>
        </label>
    }
}

#[component]
fn KindSelect(kind: RwSignal<ActivityKind>) -> impl IntoView {
    view! {
        <label>"Kind"
            <select name="kind" on:change=move |ev| {
                kind.set(event_target_value(&ev).parse().unwrap_or(ActivityKind::Standard))
            }>
                <option value="standard" selected=move || kind.get() == ActivityKind::Standard>"standard"</option>
                <option value="seated" selected=move || kind.get() == ActivityKind::Seated>"seated"</option>
            </select>
        </label>
    }
}

/// The item rows and adding a row; each row picks from the merchant's catalogue by name.
#[component]
fn ItemsFieldset(items: ItemRows, catalogue: Vec<Item>) -> AnyView {
    let catalogue = StoredValue::new(catalogue);
    view! {
        <fieldset>
            <legend>"Items"</legend>
            <For each=move || items.rows.get() key=|row| row.key let:row>
                <ItemRowFields row items catalogue/>
            </For>
            <button type="button" class="link" on:click=move |_| items.add()>"Add item"</button>
        </fieldset>
    }
    .into_any()
}

/// The catalogue's price of item `id` (as typed in the form), if the catalogue has it.
fn catalogue_price(catalogue: &[Item], id: &str) -> Option<String> {
    let id = id.parse::<i64>().ok()?;
    catalogue
        .iter()
        .find(|item| item.id == id)
        .map(|item| format_cents(item.price_cents))
}

/// One item row's inputs and its remove button. Picking an item fills the sale price with
/// the item's own while the price is blank or still the previous item's.
#[component]
fn ItemRowFields(
    row: ItemRow,
    items: ItemRows,
    catalogue: StoredValue<Vec<Item>>,
) -> impl IntoView {
    let pick = move |ev: leptos::ev::Event| {
        let picked = event_target_value(&ev);
        let previous = row.item_id.get_untracked();
        catalogue.with_value(|catalogue| {
            let price = row.price.get_untracked();
            let untouched =
                price.trim().is_empty() || catalogue_price(catalogue, &previous) == Some(price);
            if let Some(default) = catalogue_price(catalogue, &picked).filter(|_| untouched) {
                row.price.set(default);
            }
        });
        row.item_id.set(picked);
    };
    let chosen = row.item_id.get_untracked();
    let options = catalogue.with_value(|catalogue| {
        catalogue
            .iter()
            .map(|item| {
                let value = item.id.to_string();
                let selected = value == chosen;
                let label = format!("{} ({})", item.name, format_cents(item.price_cents));
                view! { <option value=value selected=selected>{label}</option> }
            })
            .collect_view()
    });
    view! {
        <div class="row item-row">
            <label>"Item"
                <select name="item_id" required on:change=pick>
                    <option value="" selected=chosen.is_empty()>"Choose an item…"</option>
                    {options}
                </select>
            </label>
            <label>"Stock" <input type="number" min="1" name="stock" bind:value=row.stock/></label>
            <label>"Limit / user" <input type="number" min="1" name="per_user_limit" bind:value=row.per_user_limit/></label>
            <label>"Sale price (yuan)" <input type="text" inputmode="decimal" name="price" bind:value=row.price/></label>
            <button type="button" class="link" on:click=move |_| items.remove(row.key)>"Remove"</button>
        </div>
    }
}

/// The seat codes, asked for only when the sale is seated.
#[component]
fn SeatsField(kind: RwSignal<ActivityKind>, seats: RwSignal<String>) -> impl IntoView {
    view! {
        <Show when=move || kind.get() == ActivityKind::Seated>
            <label>"Seats (one code per seat, separated by spaces)"
                <textarea name="seats" rows="3" bind:value=seats></textarea>
            </label>
        </Show>
    }
}

mod lottery;
