//! Rehearsals: an activity's sale played before its day by the built-in load generator
//! against a shadow copy, with the invariant check at the end.
//!
//! The list page starts one (ops and admin: activity, buyers, rate and an audited reason)
//! and lists them, refreshing every two seconds. A rehearsal's page follows its stage and
//! progress every second while it runs, then shows the outcomes by code, the latency
//! percentiles and every check with its verdict, failing ones first. The form is a plain
//! form, so it works before hydration too; the server refuses what a role may not do.

use super::{
    ended_cell, error_box,
    jobs::{activity_to_start, job_list, job_of_the_page, refetch_while, JobListText, RUN_REFRESH},
    stamp_cell,
};
use crate::api::{get_rehearsal, list_rehearsals, BeginRehearsal};
use contract::{
    ActivitySummary, CurrentUser, Permission, Progress, Rehearsal, RehearsalResult, RehearsalStatus,
};
use leptos::prelude::*;
use leptos_router::components::A;

fn status_badge(status: RehearsalStatus) -> impl IntoView {
    let name = status.as_str();
    view! { <span class=format!("status status-{name}") data-status=name>{name}</span> }
}

fn progress_text(progress: Progress) -> String {
    format!("{} / {} requests", progress.done, progress.total)
}

#[component]
pub fn Rehearsals() -> impl IntoView {
    let start = ServerAction::<BeginRehearsal>::new();
    job_list(
        JobListText {
            path: "/rehearsals",
            filter_id: "rehearsal-filter",
            title: "Rehearsals",
            may_not_start: "Only ops and admins start rehearsals.",
            about: "A rehearsal copies an activity (same items, stock, limits and prices, \
                invisible to buyers), sends a flash sale's load through the real buy path to the \
                copy (most buyers on the item with the most stock, the rest spread, some buyers \
                retrying), checks that nothing was oversold or lost, then removes the copy with \
                everything it left.",
            list_heading: "Rehearsals",
            nothing: "No rehearsals yet.",
        },
        start.version(),
        list_rehearsals,
        move |user, activities, chosen| start_form(user, activities, chosen, start),
        |listed| view! { <RehearsalList listed/> }.into_any(),
    )
}

/// The start form, for the roles that may rehearse.
fn start_form(
    user: Option<CurrentUser>,
    activities: Vec<ActivitySummary>,
    chosen: Option<i64>,
    start: ServerAction<BeginRehearsal>,
) -> Option<AnyView> {
    let may_start = user
        .as_ref()
        .is_some_and(|user| user.role.may(Permission::Rehearse));
    may_start.then(|| {
        let choices = activity_to_start(activities.clone(), chosen);
        view! {
            <h2>"Rehearse"</h2>
            <ActionForm action=start attr:class="card change-form" attr:id="start-rehearsal">
                {choices}
                <label>"Buyers" <input type="number" name="buyers" min="1" value="3000" required/></label>
                <label>"Requests per second" <input type="number" name="rate_per_s" min="1" value="1500" required/></label>
                <label>"Reason (audited)"
                    <textarea name="reason" rows="2" maxlength="500" required
                        placeholder="why, for the audit log"></textarea>
                </label>
                <button type="submit" disabled=move || start.pending().get()>"Start rehearsal"</button>
            </ActionForm>
            {move || start.value().get().and_then(Result::err).map(error_box)}
        }
        .into_any()
    })
}

#[component]
fn RehearsalList(listed: Vec<Rehearsal>) -> AnyView {
    view! {
        <table class="grid" tabindex="0" id="rehearsal-list">
            <thead><tr>
                <th>"Rehearsal"</th><th>"Activity"</th><th>"Status"</th><th>"Stage"</th>
                <th>"Buyers"</th><th>"Rate /s"</th><th>"Progress"</th><th>"Started by"</th>
                <th>"Started"</th>
            </tr></thead>
            <tbody>
                {listed.into_iter().map(|rehearsal| view! {
                    <tr data-id=rehearsal.id.to_string()>
                        <td><A href=format!("/rehearsals/{}", rehearsal.id)>"#" {rehearsal.id}</A></td>
                        <td><A href=format!("/activities/{}", rehearsal.activity_id)>"#" {rehearsal.activity_id}</A></td>
                        <td>{status_badge(rehearsal.status)}</td>
                        <td>{rehearsal.stage.as_str()}</td>
                        <td class="num">{rehearsal.buyers}</td>
                        <td class="num">{rehearsal.rate_per_s}</td>
                        <td class="num">{progress_text(rehearsal.progress)}</td>
                        <td>{rehearsal.actor} " via " {rehearsal.source.as_str()}</td>
                        <td>{stamp_cell(&rehearsal.started_at)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
pub fn RehearsalPage() -> impl IntoView {
    let rehearsal = job_of_the_page(get_rehearsal);
    // Follows the rehearsal while it runs; one that is over is not asked again.
    refetch_while(rehearsal, RUN_REFRESH, |rehearsal| {
        rehearsal.status == RehearsalStatus::Running
    });
    view! {
        <p><A href="/rehearsals">"← Rehearsals"</A></p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match rehearsal.await {
                    Ok(rehearsal) => view! { <RehearsalView rehearsal/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

#[component]
fn RehearsalView(rehearsal: Rehearsal) -> AnyView {
    let Rehearsal {
        id,
        activity_id,
        shadow_activity_id,
        buyers,
        rate_per_s,
        source,
        actor,
        reason,
        status,
        stage,
        progress,
        result,
        error,
        cleaned_up,
        started_at,
        ended_at,
    } = rehearsal;
    let max = progress.total.max(1);
    view! {
        <h1>"Rehearsal #" {id}</h1>
        <dl class="facts" id="rehearsal-facts">
            <dt>"Status"</dt><dd>{status_badge(status)}</dd>
            <dt>"Stage"</dt><dd data-stage=stage.as_str()>{stage.as_str()}</dd>
            <dt>"Activity"</dt><dd><A href=format!("/activities/{activity_id}")>"#" {activity_id}</A></dd>
            <dt>"Shadow copy"</dt>
            <dd>{shadow_activity_id.map_or_else(|| "—".to_owned(), |shadow| format!("#{shadow}"))}
                {if cleaned_up { " (removed)" } else { "" }}</dd>
            <dt>"Load"</dt><dd>{buyers} " buyers at " {rate_per_s} " requests/s"</dd>
            <dt>"Started by"</dt><dd>{actor} " via " {source.as_str()}</dd>
            <dt>"Reason"</dt><dd>{reason}</dd>
            <dt>"Started"</dt><dd>{stamp_cell(&started_at)}</dd>
            <dt>"Ended"</dt><dd>{ended_cell(ended_at.as_deref())}</dd>
        </dl>
        <p class="row">
            <progress id="rehearsal-progress" max=max value=progress.done.clamp(0, max)></progress>
            <span class="meta">{progress_text(progress)}</span>
        </p>
        {error.map(|error| view! { <p class="error" role="alert" id="rehearsal-error">"The rehearsal stopped: " {error}</p> })}
        {result.map(|result| view! { <ResultView result/> })}
    }
    .into_any()
}

#[component]
fn ResultView(result: RehearsalResult) -> impl IntoView {
    let verdict = if result.passed {
        "PASSED: every invariant held"
    } else {
        "FAILED: see the failing checks"
    };
    let class = if result.passed {
        "status status-go verdict"
    } else {
        "status status-no-go verdict"
    };
    let latency = result.latency_ms.map(|latency| {
        format!(
            "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            latency.p50, latency.p90, latency.p99, latency.p999, latency.max
        )
    });
    let mut checks = result.checks;
    checks.sort_by_key(|check| check.ok);
    view! {
        <p id="rehearsal-verdict" class=class data-passed=result.passed.to_string()>{verdict}</p>
        <p class="meta">
            {format!("{} requests in {:.2} s, {} unanswered", result.requests, result.load_s, result.unanswered)}
            {latency.map(|latency| format!("; latency {latency}"))}
        </p>
        <h2>"Outcomes"</h2>
        <table class="grid" tabindex="0" id="rehearsal-outcomes">
            <thead><tr><th>"Status"</th><th>"Code"</th><th>"Requests"</th></tr></thead>
            <tbody>
                {result.outcomes.into_iter().map(|outcome| {
                    let code = outcome.code.clone();
                    view! {
                        <tr data-code=code>
                            <td class="num">{outcome.status}</td>
                            <td class="mono">{outcome.code}</td>
                            <td class="num">{outcome.count}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        <h2>"Checks"</h2>
        <table class="grid" tabindex="0" id="rehearsal-checks">
            <thead><tr><th>"Check"</th><th>"Item"</th><th>"Verdict"</th><th>"Detail"</th></tr></thead>
            <tbody>
                {checks.into_iter().map(|check| {
                    let (badge, word) = if check.ok { ("status status-go", "ok") } else { ("status status-no-go", "fail") };
                    view! {
                        <tr data-check=check.name.as_str() data-ok=check.ok.to_string()>
                            <td class="mono">{check.name.as_str()}</td>
                            <td class="num">{check.item_id.map_or_else(|| "—".to_owned(), |item| item.to_string())}</td>
                            <td><span class=badge>{word}</span></td>
                            <td>{check.detail}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}
