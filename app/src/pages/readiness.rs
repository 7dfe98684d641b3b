//! Readiness: the pre-sale go/no-go of one activity. The activity is chosen with a GET form,
//! so each activity's check has its own URL; the check runs on the server when the page
//! loads and again on "Check again", and every check shows its verdict with a detail a
//! person can act on. Nothing is cached: a stale "go" at T−10 min is worse than none.

use super::{activity_picker, chosen_activity, error_box};
use crate::api::{get_readiness, list_activities};
use contract::Readiness;
use leptos::prelude::*;

#[component]
pub fn ReadinessPage() -> impl IntoView {
    let chosen = chosen_activity();
    let (again, set_again) = signal(0_u64);
    let activities = Resource::new(|| (), |_| list_activities());
    let report = Resource::new(
        move || (chosen.get(), again.get()),
        |(chosen, _)| async move {
            match chosen {
                Some(activity_id) => get_readiness(activity_id).await.map(Some),
                None => Ok(None),
            }
        },
    );
    view! {
        <h1>"Readiness"</h1>
        // A transition: the verdict on screen stays up while the next check runs.
        <Transition fallback=|| view! { <p>"Checking…"</p> }>
            {move || Suspend::new(async move {
                let activities = activities.await.unwrap_or_default();
                let report = report.await;
                view! {
                    {activity_picker("/readiness", "readiness-form", "Check", chosen.get_untracked(), activities)}
                    {match report {
                        Ok(None) => view! { <p class="empty">"Choose an activity to check it."</p> }.into_any(),
                        Ok(Some(report)) => report_view(report, set_again),
                        Err(error) => error_box(error),
                    }}
                }
            })}
        </Transition>
    }
}

/// The verdict, then one row per check, failing ones first so they are read first.
fn report_view(report: Readiness, set_again: WriteSignal<u64>) -> AnyView {
    let failing = report.checks.iter().filter(|check| !check.ok).count();
    let verdict = if report.ready {
        format!("GO: all {} checks pass", report.checks.len())
    } else {
        format!("NO-GO: {failing} of {} checks fail", report.checks.len())
    };
    let class = if report.ready {
        "status status-go verdict"
    } else {
        "status status-no-go verdict"
    };
    let mut checks = report.checks;
    checks.sort_by_key(|check| check.ok);
    view! {
        <div class="row">
            <p id="readiness-verdict" class=class data-ready=report.ready.to_string()>{verdict}</p>
            <button type="button" id="readiness-again" on:click=move |_| set_again.update(|n| *n += 1)>
                "Check again"
            </button>
        </div>
        <table class="grid" tabindex="0" id="readiness-checks">
            <thead><tr><th>"Check"</th><th>"Verdict"</th><th>"Detail"</th></tr></thead>
            <tbody>
                {checks.into_iter().map(|check| {
                    let (badge, word) = if check.ok { ("status status-go", "ok") } else { ("status status-no-go", "fail") };
                    view! {
                        <tr data-check=check.name.as_str() data-ok=check.ok.to_string()>
                            <td class="mono">{check.name.as_str()}</td>
                            <td><span class=badge>{word}</span></td>
                            <td>{check.detail}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
