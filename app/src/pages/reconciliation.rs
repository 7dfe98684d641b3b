//! Reconciliation: the runs that compare Redis with PostgreSQL per activity item, and the
//! live stock ledger they start from.
//!
//! The runs page lists runs (newest first, optionally of one activity) and starts one: a
//! report for every role that may reconcile, a repair (with an audited reason) for the roles
//! that may repair stock. A run's page follows its progress every second while it runs,
//! then shows its findings grouped by class and offers a re-run of the same kind. The
//! ledger table sits on each activity's page and refreshes every two seconds.
//!
//! The forms are plain forms, so they work before hydration too; the server refuses what a
//! role may not do, whatever the page showed.

use super::{
    ended_cell, error_box,
    jobs::{
        activity_to_start, job_list, job_of_the_page, refetch_while, JobListText, LIST_REFRESH,
        RUN_REFRESH,
    },
    listing, my_role, reason_field, stamp_cell, ticker, when,
};
use crate::api::{
    get_activity_ledger, get_reconciliation, list_reconciliations, whoami, StartReconciliation,
};
use crate::error::ConsoleFnError;
use contract::{
    ActivityLedger, ActivitySummary, CurrentUser, Finding, FindingAction, FindingClass, LedgerItem,
    Permission, Progress, ReconciliationRun, RunStatus, RunSummary,
};
use leptos::prelude::*;
use leptos_router::components::A;
use std::collections::BTreeMap;

fn status_badge(status: RunStatus) -> impl IntoView {
    let name = status.as_str();
    view! { <span class=format!("status status-{name}") data-status=name>{name}</span> }
}

fn action_badge(action: FindingAction) -> impl IntoView {
    let name = action.as_str();
    view! { <span class=format!("status status-{name}")>{name}</span> }
}

fn kind(repair: bool) -> &'static str {
    if repair {
        "repair"
    } else {
        "report"
    }
}

fn progress_text(progress: Progress) -> String {
    format!("{} / {} items", progress.done, progress.total)
}

#[component]
pub fn Reconciliations() -> impl IntoView {
    let start = ServerAction::<StartReconciliation>::new();
    job_list(
        JobListText {
            path: "/reconciliations",
            filter_id: "run-filter",
            title: "Reconciliation",
            may_not_start: "Only ops, SRE and admins run reconciliations.",
            about: "A run compares each item's stock and buyer records in Redis with \
                PostgreSQL's orders and restore journal, and reports every difference by class. A \
                repair run also repairs the classes that are safe to repair and flags the rest for \
                a person; it never gives back stock that an in-flight request is about to take, so \
                it is safe during a sale.",
            list_heading: "Runs",
            nothing: "No reconciliation runs yet.",
        },
        start.version(),
        list_reconciliations,
        move |user, activities, chosen| start_form(user, activities, chosen, start),
        |runs| view! { <RunList runs/> }.into_any(),
    )
}

/// The start form, for the roles that may start a run.
fn start_form(
    user: Option<CurrentUser>,
    activities: Vec<ActivitySummary>,
    chosen: Option<i64>,
    start: ServerAction<StartReconciliation>,
) -> Option<AnyView> {
    let may = |permission| user.as_ref().is_some_and(|user| user.role.may(permission));
    let may_repair = may(Permission::RepairStock);
    may(Permission::Reconcile).then(|| {
        let choices = activity_to_start(activities.clone(), chosen);
        view! {
            <h2>"Start a run"</h2>
            <ActionForm action=start attr:class="card change-form" attr:id="start-run">
                {choices}
                {may_repair.then(|| view! { <RepairFields/> })}
                <button type="submit" disabled=move || start.pending().get()>"Start run"</button>
            </ActionForm>
            {move || start.value().get().and_then(Result::err).map(error_box)}
        }
        .into_any()
    })
}

/// The repair box and its reason, which a repair needs (the browser asks for it once the box
/// is ticked; the server refuses a repair without one either way).
#[component]
fn RepairFields() -> impl IntoView {
    let repair = RwSignal::new(false);
    view! {
        <label class="confirm">
            <input type="checkbox" name="repair" value="true" id="repair" bind:checked=repair/>
            "Repair what is safe to repair (otherwise a report only)"
        </label>
        <label>"Reason (audited; required for a repair)"
            <textarea name="reason" rows="2" maxlength="500" required=move || repair.get()
                placeholder="why, for the audit log"></textarea>
        </label>
    }
}

#[component]
fn RunList(runs: Vec<RunSummary>) -> AnyView {
    view! {
        <table class="grid" tabindex="0" id="run-list">
            <thead><tr>
                <th>"Run"</th><th>"Activity"</th><th>"Status"</th><th>"Kind"</th><th>"Started by"</th>
                <th>"Progress"</th><th>"Findings"</th><th>"Repaired"</th><th>"Flagged"</th>
                <th>"Started"</th><th>"Ended"</th>
            </tr></thead>
            <tbody>
                {runs.into_iter().map(|run| view! {
                    <tr data-id=run.id.to_string()>
                        <td><A href=format!("/reconciliations/{}", run.id)>"#" {run.id}</A></td>
                        <td><A href=format!("/activities/{}", run.activity_id)>"#" {run.activity_id}</A></td>
                        <td>{status_badge(run.status)}</td>
                        <td>{kind(run.repair)}</td>
                        <td>{run.actor} " via " {run.trigger.as_str()}</td>
                        <td class="num">{progress_text(run.progress)}</td>
                        <td class="num">{run.findings}</td>
                        <td class="num">{run.repaired}</td>
                        <td class="num">{run.flagged}</td>
                        <td>{stamp_cell(&run.started_at)}</td>
                        <td>{ended_cell(run.ended_at.as_deref())}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
pub fn ReconciliationPage() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let rerun = ServerAction::<StartReconciliation>::new();
    let run = job_of_the_page(get_reconciliation);
    // Follows the run while it runs; a finished run is not asked again.
    refetch_while(run, RUN_REFRESH, |run| run.status == RunStatus::Running);
    view! {
        <p><A href="/reconciliations">"← Reconciliation"</A></p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let user = user.await.ok();
                match run.await {
                    Ok(run) => view! { <RunView run user rerun/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

#[component]
fn RunView(
    run: ReconciliationRun,
    user: Option<CurrentUser>,
    rerun: ServerAction<StartReconciliation>,
) -> AnyView {
    let may = |permission| user.as_ref().is_some_and(|user| user.role.may(permission));
    // Offered once the run is over, so no refresh throws away a reason being typed.
    let may_rerun = run.status != RunStatus::Running
        && may(Permission::Reconcile)
        && (!run.repair || may(Permission::RepairStock));
    let ReconciliationRun {
        id,
        activity_id,
        status,
        repair,
        trigger,
        actor,
        reason,
        progress,
        findings,
        error,
        started_at,
        ended_at,
    } = run;
    view! {
        <h1>"Reconciliation run #" {id}</h1>
        <dl class="facts" id="run-facts">
            <dt>"Status"</dt><dd>{status_badge(status)}</dd>
            <dt>"Activity"</dt><dd><A href=format!("/activities/{activity_id}")>"#" {activity_id}</A></dd>
            <dt>"Kind"</dt><dd>{kind(repair)}</dd>
            <dt>"Started by"</dt><dd>{actor} " via " {trigger.as_str()}</dd>
            {reason.map(|reason| view! { <dt>"Reason"</dt><dd>{reason}</dd> })}
            <dt>"Started"</dt><dd>{stamp_cell(&started_at)}</dd>
            <dt>"Ended"</dt><dd>{ended_cell(ended_at.as_deref())}</dd>
        </dl>
        <RunProgress progress status/>
        {error.map(|error| view! { <p class="error" role="alert" id="run-error">"The run failed: " {error}</p> })}
        <Findings findings status/>
        {may_rerun.then(|| view! { <Rerun activity_id repair rerun/> })}
    }
    .into_any()
}

#[component]
fn RunProgress(progress: Progress, status: RunStatus) -> impl IntoView {
    // `<progress>` needs a positive maximum; a run with nothing to do is full once over.
    let max = progress.total.max(1);
    let value = if progress.total == 0 && status != RunStatus::Running {
        max
    } else {
        progress.done.clamp(0, max)
    };
    view! {
        <div class="row" id="run-progress" data-done=progress.done data-total=progress.total>
            <progress max=max value=value></progress>
            <span>{progress_text(progress)}</span>
        </div>
    }
}

/// Findings of one class, and how many a run repaired, flagged or only reported.
struct ClassFindings {
    class: FindingClass,
    findings: Vec<Finding>,
}

impl ClassFindings {
    fn group(findings: Vec<Finding>) -> Vec<ClassFindings> {
        let mut classes: BTreeMap<FindingClass, Vec<Finding>> = BTreeMap::new();
        for finding in findings {
            classes.entry(finding.class).or_default().push(finding);
        }
        classes
            .into_iter()
            .map(|(class, findings)| ClassFindings { class, findings })
            .collect()
    }

    fn count(&self, action: FindingAction) -> usize {
        self.findings
            .iter()
            .filter(|finding| finding.action == action)
            .count()
    }

    fn units(&self) -> i64 {
        self.findings.iter().map(|finding| finding.units).sum()
    }
}

#[component]
fn Findings(findings: Vec<Finding>, status: RunStatus) -> AnyView {
    if findings.is_empty() {
        let note = match status {
            RunStatus::Running => "No differences found so far.",
            RunStatus::Done => "No differences found.",
            RunStatus::Failed => "No differences found before the run failed.",
        };
        return view! { <p class="empty" id="no-findings">{note}</p> }.into_any();
    }
    let classes = ClassFindings::group(findings);
    let summary = classes
        .iter()
        .map(|class| {
            let name = class.class.as_str();
            view! {
                <tr data-class=name>
                    <td class="mono"><a href=format!("#{name}")>{name}</a></td>
                    <td class="num">{class.findings.len()}</td>
                    <td class="num">{class.units()}</td>
                    <td class="num">{class.count(FindingAction::Repaired)}</td>
                    <td class="num">{class.count(FindingAction::Flagged)}</td>
                    <td class="num">{class.count(FindingAction::None)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <h2>"Findings"</h2>
        <table class="grid" tabindex="0" id="finding-summary">
            <thead><tr>
                <th>"Class"</th><th>"Findings"</th><th>"Units"</th><th>"Repaired"</th>
                <th>"Flagged"</th><th>"Reported only"</th>
            </tr></thead>
            <tbody>{summary}</tbody>
        </table>
        {classes.into_iter().map(|class| view! { <ClassTable class/> }).collect_view()}
    }
    .into_any()
}

#[component]
fn ClassTable(class: ClassFindings) -> AnyView {
    let name = class.class.as_str();
    view! {
        <h3 class="mono" id=name>{name} " (" {class.findings.len()} ")"</h3>
        <table class="grid findings" tabindex="0" data-class=name>
            <thead><tr>
                <th>"Item"</th><th>"Order"</th><th>"Buyer"</th><th>"Units"</th><th>"Action"</th><th>"Detail"</th>
            </tr></thead>
            <tbody>
                {class.findings.into_iter().map(|finding| view! {
                    <tr>
                        <td>"#" {finding.item_id}</td>
                        <td class="mono">{match finding.order_id {
                            Some(order) => view! { <A href=format!("/orders/{order}")>{order.clone()}</A> }.into_any(),
                            None => "—".into_any(),
                        }}</td>
                        <td class="num">{finding.user_id.map(|user| user.to_string()).unwrap_or_else(|| "—".into())}</td>
                        <td class="num">{finding.units}</td>
                        <td>{action_badge(finding.action)}</td>
                        <td>{finding.detail}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// A new run of the same activity and kind; a repair asks for its reason again.
#[component]
fn Rerun(activity_id: i64, repair: bool, rerun: ServerAction<StartReconciliation>) -> AnyView {
    let form = if repair {
        view! {
            <details class="change" id="rerun">
                <summary>"Re-run the repair…"</summary>
                <ActionForm action=rerun attr:class="card change-form">
                    <input type="hidden" name="activity_id" value=activity_id/>
                    <input type="hidden" name="repair" value="true"/>
                    {reason_field()}
                    <button type="submit" disabled=move || rerun.pending().get()>"Re-run the repair"</button>
                </ActionForm>
            </details>
        }
        .into_any()
    } else {
        view! {
            <ActionForm action=rerun attr:class="row" attr:id="rerun">
                <input type="hidden" name="activity_id" value=activity_id/>
                <button type="submit" disabled=move || rerun.pending().get()>"Re-run the report"</button>
            </ActionForm>
        }
        .into_any()
    };
    view! {
        {form}
        {move || rerun.value().get().and_then(Result::err).map(error_box)}
    }
    .into_any()
}

/// The live stock ledger of an activity, as [`Ledger`] shows it.
/// `None` for a role that may not reconcile: the ledger's Redis and pipeline columns are for
/// the people who reconcile, and a merchant's figures are on the activity page above it.
pub type LedgerResource = Resource<Result<Option<ActivityLedger>, ConsoleFnError>>;

/// The ledger of the activity `id` names (none: not found), refetched every two seconds.
/// Made by the page at its top and shown beside the page's other boundaries, never inside
/// the view that awaits another resource: the server render of a resource made, or a
/// boundary nested, inside a `Suspend` could wait for ever.
pub fn ledger_resource(id: impl Fn() -> Option<i64> + Send + Sync + 'static) -> LedgerResource {
    let ledger = Resource::new(id, |id| async move {
        let id = id.ok_or_else(ConsoleFnError::not_found)?;
        if !my_role().await?.may(Permission::Reconcile) {
            return Ok(None);
        }
        get_activity_ledger(id).await.map(Some)
    });
    let beat = ticker(LIST_REFRESH);
    Effect::new(move |_| {
        if beat.get() > 0 {
            ledger.refetch();
        }
    });
    ledger
}

/// The live stock ledger of an activity's items.
#[component]
pub fn Ledger(ledger: LedgerResource) -> impl IntoView {
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match ledger.await {
                    Ok(Some(ledger)) => view! { <LedgerTable ledger/> }.into_any(),
                    Ok(None) => ().into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

#[component]
fn LedgerTable(ledger: ActivityLedger) -> AnyView {
    let read_at = chrono::DateTime::from_timestamp_millis(ledger.at_ms)
        .map(when)
        .unwrap_or_default();
    let drifting = ledger.items.iter().filter(|item| item.drift != 0).count();
    let activity_id = ledger.activity_id;
    view! {
        <h2>"Stock ledger"</h2>
        <p class="meta" id="ledger-meta">
            "Deduction layer: " {ledger.deduction} " · read at " {read_at} " UTC · "
            "with nothing in flight, total = Redis stock + allocated + in flight + restore owed; "
            "drift is what that sum misses (negative: Redis would sell units orders hold)."
        </p>
        {(drifting > 0).then(|| view! {
            <p class="notice" id="ledger-drift">
                {drifting} " item(s) drift. "
                <A href=format!("/reconciliations?activity_id={activity_id}")>"Reconcile this activity"</A>
                " to see why."
            </p>
        })}
        {listing(Ok(ledger.items), "This activity has no items.", |items| view! {
            <table class="grid" tabindex="0" id="ledger">
                <thead><tr>
                    <th>"Item"</th><th>"Total"</th><th>"Redis stock"</th><th>"Redis buyer units"</th>
                    <th>"Allocated"</th><th>"Sold"</th><th>"In flight"</th><th>"Restored"</th>
                    <th>"Restore owed"</th><th>"Drift"</th>
                </tr></thead>
                <tbody>
                    {items.into_iter().map(|item| view! { <LedgerRow item/> }).collect_view()}
                </tbody>
            </table>
        }.into_any())}
    }
    .into_any()
}

#[component]
fn LedgerRow(item: LedgerItem) -> impl IntoView {
    let drift_class = if item.drift == 0 {
        "num"
    } else {
        "num drift error-inline"
    };
    let buyers = format!("{} buyer(s)", item.redis_buyers);
    view! {
        <tr data-item=item.item_id.to_string()>
            <td>{item.name} " (#" {item.item_id} ")"</td>
            <td class="num">{item.total}</td>
            <td class="num">{match item.redis_stock {
                Some(stock) => stock.to_string().into_any(),
                None => view! { <span class="error-inline">"missing"</span> }.into_any(),
            }}</td>
            // Not summed on every refresh for items of very many buyers.
            <td class="num" title=buyers>{item
                .redis_buyer_units
                .map_or_else(|| "not summed".to_owned(), |units| units.to_string())}</td>
            <td class="num">{item.allocated}</td>
            <td class="num">{item.sold}</td>
            <td class="num">{item.in_flight}</td>
            <td class="num">{item.restored}</td>
            <td class="num">{item.restore_owed}</td>
            <td class=drift_class data-drift=item.drift>{item.drift}</td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(class: FindingClass, action: FindingAction, units: i64) -> Finding {
        Finding {
            class,
            item_id: 1,
            order_id: None,
            user_id: None,
            units,
            action,
            detail: String::new(),
        }
    }

    #[test]
    fn findings_group_by_class_in_class_order_with_counts_per_action() {
        let classes = ClassFindings::group(vec![
            finding(FindingClass::RedisMissing, FindingAction::Repaired, 10),
            finding(FindingClass::OrderNotInRedis, FindingAction::Flagged, 2),
            finding(FindingClass::RedisMissing, FindingAction::None, 1),
        ]);
        let names: Vec<_> = classes.iter().map(|class| class.class).collect();
        assert_eq!(
            names,
            [FindingClass::OrderNotInRedis, FindingClass::RedisMissing]
        );
        let missing = &classes[1];
        assert_eq!(missing.findings.len(), 2);
        assert_eq!(missing.units(), 11);
        assert_eq!(missing.count(FindingAction::Repaired), 1);
        assert_eq!(missing.count(FindingAction::Flagged), 0);
        assert_eq!(missing.count(FindingAction::None), 1);
    }
}
