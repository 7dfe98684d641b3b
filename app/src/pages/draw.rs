//! The lottery draw of one activity (docs/lottery.md): per item, registrants, winners, codes issued,
//! used, expired and revoked, how far the waitlist got, and the seed's commitment (and the
//! seed once drawn), which anyone can check the draw with (docs/lottery.md); where the
//! registrations came from (how many addresses, the share of the busiest hundred, the busiest
//! by name), so a farm of scalpers shows. Ops revoke a buyer here, with the reason the audit
//! keeps; his turn passes on.

use super::{activity_picker, chosen_activity, error_box};
use crate::api::{get_draw, list_activities, RevokeRegistration};
use contract::{DrawItem, DrawReport, RegistrationSources};
use leptos::prelude::*;

#[component]
pub fn DrawPage() -> impl IntoView {
    let chosen = chosen_activity();
    let revoke = ServerAction::<RevokeRegistration>::new();
    let activities = Resource::new(|| (), |_| list_activities());
    let report = Resource::new(
        move || (chosen.get(), revoke.version().get()),
        |(chosen, _)| async move {
            match chosen {
                Some(activity_id) => get_draw(activity_id).await.map(Some),
                None => Ok(None),
            }
        },
    );
    view! {
        <h1>"Lottery draw"</h1>
        <Transition fallback=|| view! { <p>"Reading the draw…"</p> }>
            {move || Suspend::new(async move {
                let activities = activities.await.unwrap_or_default();
                let report = report.await;
                view! {
                    {activity_picker("/draw", "draw-form", "Show", chosen.get_untracked(), activities)}
                    {match report {
                        Ok(None) => view! { <p class="empty">"Choose a lottery activity to see its draw."</p> }.into_any(),
                        Ok(Some(report)) => report_view(report, revoke),
                        Err(error) => error_box(error),
                    }}
                }
            })}
        </Transition>
    }
}

fn or_dash(value: Option<i64>) -> String {
    value.map_or_else(|| "–".to_owned(), |value| value.to_string())
}

/// One item's registrations by address: the counts, then the busiest addresses by name.
fn sources_view(item: &DrawItem) -> AnyView {
    let Some(sources) = item.sources.clone() else {
        return view! { <p class="meta">{format!("Item {}: no registration counted by address.", item.item_id)}</p> }
            .into_any();
    };
    let RegistrationSources {
        registrations,
        addresses,
        top,
        ..
    } = &sources;
    let summary = format!(
        "Item {}: {registrations} registration(s) from {addresses} address(es); the busiest 100 addresses made {:.1} % of them.",
        item.item_id,
        sources.top_100_percent()
    );
    view! {
        <p class="meta" data-sources=item.item_id.to_string()>{summary}</p>
        <table class="grid" tabindex="0" data-top-addresses=item.item_id.to_string()>
            <thead><tr><th>"Address"</th><th>"Registrations"</th></tr></thead>
            <tbody>
                {top.iter().map(|entry| view! {
                    <tr><td class="mono">{entry.address.clone()}</td><td>{entry.registrations}</td></tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

fn report_view(report: DrawReport, revoke: ServerAction<RevokeRegistration>) -> AnyView {
    let activity_id = report.activity_id;
    let sources: Vec<AnyView> = report.items.iter().map(sources_view).collect();
    let seed = report
        .seed
        .clone()
        .unwrap_or_else(|| "shown once every item is drawn".to_owned());
    view! {
        <dl class="facts">
            <dt>"Commitment (SHA-256 of the seed)"</dt><dd class="mono" id="draw-commitment">{report.commitment.clone()}</dd>
            <dt>"Seed"</dt><dd class="mono" id="draw-seed">{seed}</dd>
        </dl>
        <table class="grid" tabindex="0" id="draw-items">
            <thead><tr>
                <th>"Item"</th><th>"Drawn"</th><th>"Registrants"</th><th>"Winners"</th>
                <th>"Codes issued"</th><th>"Used"</th><th>"Expired"</th><th>"Revoked"</th>
                <th>"Waitlist reached rank"</th>
            </tr></thead>
            <tbody>
                {report.items.into_iter().map(|item| view! {
                    <tr data-item=item.item_id.to_string()>
                        <td class="mono">{item.item_id}</td>
                        <td>{if item.drawn { "yes" } else { "not yet" }}</td>
                        <td>{or_dash(item.registrants)}</td>
                        <td>{or_dash(item.winners)}</td>
                        <td>{item.codes_issued}</td>
                        <td>{item.codes_used}</td>
                        <td>{item.codes_expired}</td>
                        <td>{item.codes_revoked}</td>
                        <td>{or_dash(item.waitlist_reached)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <h2>"Where registrations came from"</h2>
        {sources}
        <h2>"Revoke a buyer"</h2>
        <ActionForm action=revoke attr:class="row" attr:id="revoke-form">
            <input type="hidden" name="activity_id" value=activity_id/>
            <label>"Buyer id" <input type="number" name="user_id" required min="1"/></label>
            <label>"Reason" <input type="text" name="reason" required maxlength="500"/></label>
            <button type="submit">"Revoke"</button>
            <span class="meta">"Ops and admin only: his registration and unused code end, his turn passes on; audited."</span>
        </ActionForm>
        {move || revoke.value().get().map(|result| match result {
            Ok(revoked) => view! {
                <p class="meta" id="revoked">{format!("Buyer {} revoked for {} item(s).", revoked.user_id, revoked.items.len())}</p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
    }
    .into_any()
}
