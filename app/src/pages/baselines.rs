//! Baselines: the recorded runs of one activity side by side (one column per run, newest
//! first): performance of the buy endpoints, cost, and the path, where a call per buy the
//! baseline run did not have is flagged ("what changed in the core path"). The baseline is
//! the activity's own, else its kind's, which is then most often a run of another activity:
//! it gets the last column. Ops and admin mark a run as the activity's baseline, or as the
//! baseline of every activity of its kind, with a reason the server audits.

use super::{activity_picker, chosen_activity, error_box, stamp_cell};
use crate::api::{list_activities, list_baselines, whoami, MarkBaseline};
use contract::{
    ActivityBaselines, ActivityKind, BaselineRun, BaselineScope, PathFigures, Permission,
};
use leptos::prelude::*;

#[component]
pub fn BaselinesPage() -> impl IntoView {
    let chosen = chosen_activity();
    let mark = ServerAction::<MarkBaseline>::new();
    let user = Resource::new(|| (), |_| whoami());
    let activities = Resource::new(|| (), |_| list_activities());
    let runs = Resource::new(
        move || (chosen.get(), mark.version().get()),
        |(chosen, _)| async move {
            match chosen {
                Some(activity_id) => list_baselines(activity_id).await.map(Some),
                None => Ok(None),
            }
        },
    );
    view! {
        <h1>"Baselines"</h1>
        {move || mark.value().get().map(|result| match result {
            Ok(run) => view! {
                <p class="notice" id="baseline-marked">{marked(&run)}</p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_mark = user.await.is_ok_and(|user| user.role.may(Permission::MarkBaseline));
                let activities = activities.await.unwrap_or_default();
                let kind = (activities.iter())
                    .find(|activity| Some(activity.id) == chosen.get_untracked())
                    .map(|activity| activity.kind);
                let runs = runs.await;
                view! {
                    {activity_picker("/baselines", "baselines-form", "Show", chosen.get_untracked(), activities)}
                    {match runs {
                        Ok(None) => view! { <p class="empty">"Choose an activity to see its runs."</p> }.into_any(),
                        Ok(Some(page)) if page.runs.is_empty() => view! {
                            <p class="empty" id="baselines-none">"No run recorded yet: a run is recorded once the activity's sale ends."</p>
                        }.into_any(),
                        Ok(Some(page)) => runs_view(page, kind, may_mark, mark),
                        Err(error) => error_box(error),
                    }}
                }
            })}
        </Transition>
    }
}

/// What a run is the baseline of, after a mark.
fn marked(run: &BaselineRun) -> String {
    let mut of = Vec::new();
    if run.is_baseline {
        of.push(format!("activity #{}", run.activity_id));
    }
    if let Some(kind) = run.baseline_of_kind {
        of.push(format!("all {} activities", kind.as_str()));
    }
    format!(
        "Run #{} is the baseline of {}.",
        run.id,
        of.join(" and of ")
    )
}

/// A figure as a cell's text: a dash for none, two decimals for small ones.
fn figure(value: Option<f64>) -> String {
    match value {
        None => "—".to_owned(),
        Some(value) if value.abs() >= 100.0 => format!("{value:.0}"),
        Some(value) => format!("{value:.2}"),
    }
}

/// One row of the side-by-side table: a label, then one cell per run.
fn row(label: String, cells: Vec<AnyView>) -> impl IntoView {
    view! { <tr><th scope="row">{label}</th>{cells}</tr> }
}

fn text_cells(runs: &[BaselineRun], cell: impl Fn(&BaselineRun) -> String) -> Vec<AnyView> {
    runs.iter()
        .map(|run| view! { <td>{cell(run)}</td> }.into_any())
        .collect()
}

/// A time of each run as every console time shows (the viewer's zone, UTC beside).
fn time_cells(runs: &[BaselineRun], time: impl Fn(&BaselineRun) -> &str) -> Vec<AnyView> {
    runs.iter()
        .map(|run| view! { <td>{stamp_cell(time(run))}</td> }.into_any())
        .collect()
}

/// The path figures of `pick`ed outcome, each flagged where it has a call per buy the
/// baseline did not.
fn path_rows(
    runs: &[BaselineRun],
    baseline: Option<&BaselineRun>,
    outcome: &'static str,
    pick: fn(&BaselineRun) -> &PathFigures,
) -> Vec<AnyView> {
    let names: Vec<&'static str> = PathFigures::default()
        .calls()
        .iter()
        .map(|(name, _)| *name)
        .collect();
    let mut rows = vec![row(
        format!("{outcome} buys"),
        text_cells(runs, |run| pick(run).requests.to_string()),
    )
    .into_any()];
    for (index, name) in names.into_iter().enumerate() {
        let cells = runs
            .iter()
            .map(|run| {
                let value = pick(run).calls()[index].1;
                let grown =
                    baseline
                        .filter(|baseline| baseline.id != run.id)
                        .and_then(|baseline| {
                            pick(run)
                                .new_calls(pick(baseline))
                                .into_iter()
                                .find(|(flagged, _)| *flagged == name)
                        });
                match grown {
                    Some((_, by)) => view! {
                        <td class="status status-no-go" data-new-call=name>
                            {figure(Some(value))} " (+" {figure(Some(by))} " not in the baseline)"
                        </td>
                    }
                    .into_any(),
                    None => view! { <td>{figure(Some(value))}</td> }.into_any(),
                }
            })
            .collect();
        rows.push(row(format!("{name} per {outcome} buy"), cells).into_any());
    }
    rows
}

/// `page.runs` is not empty; `kind`: the activity's (unknown when the activity list left it
/// out).
fn runs_view(
    page: ActivityBaselines,
    kind: Option<ActivityKind>,
    may_mark: bool,
    mark: ServerAction<MarkBaseline>,
) -> AnyView {
    let ActivityBaselines { mut runs, baseline } = page;
    let activity_id = runs[0].activity_id;
    // Its kind's baseline, a run of another activity: shown beside the activity's own runs.
    if let Some(baseline) =
        (baseline.as_ref()).filter(|baseline| runs.iter().all(|run| run.id != baseline.id))
    {
        runs.push(baseline.clone());
    }
    let foreign = |run: &BaselineRun| run.activity_id != activity_id;
    let endpoint = |run: &BaselineRun| run.perf.buy().cloned().unwrap_or_default();
    let head = runs
        .iter()
        .map(|run| {
            let title = if foreign(run) {
                format!("#{} {} of activity #{}", run.id, run.kind.as_str(), run.activity_id)
            } else {
                format!("#{} {}", run.id, run.kind.as_str())
            };
            let badge = (run.is_baseline && !foreign(run))
                .then(|| view! { <span class="status status-go">"baseline"</span> });
            let kind_badge = run.baseline_of_kind.map(|kind| {
                view! {
                    " "
                    <span class="status status-go" data-kind-baseline=kind.as_str()>
                        "baseline of all " {kind.as_str()} " activities"
                    </span>
                }
            });
            view! { <th scope="col" data-run=run.id.to_string()>{title} " " {badge} {kind_badge}</th> }
        })
        .collect_view();
    let mut rows: Vec<AnyView> = vec![
        row("Started".into(), time_cells(&runs, |run| &run.started_at)).into_any(),
        row("Ended".into(), time_cells(&runs, |run| &run.ended_at)).into_any(),
        row(
            "Buy requests".into(),
            text_cells(&runs, |run| endpoint(run).requests.to_string()),
        )
        .into_any(),
        row(
            "Buy QPS".into(),
            text_cells(&runs, |run| figure(Some(endpoint(run).qps))),
        )
        .into_any(),
        row(
            "Buy p50 (ms)".into(),
            text_cells(&runs, |run| figure(endpoint(run).p50_ms)),
        )
        .into_any(),
        row(
            "Buy p99 (ms)".into(),
            text_cells(&runs, |run| figure(endpoint(run).p99_ms)),
        )
        .into_any(),
        row(
            "Buy p999 (ms)".into(),
            text_cells(&runs, |run| figure(endpoint(run).p999_ms)),
        )
        .into_any(),
        row(
            "Buy error rate (5xx)".into(),
            text_cells(&runs, |run| {
                format!("{:.1} %", endpoint(run).error_rate * 100.0)
            }),
        )
        .into_any(),
        row(
            "Buy refusals (4xx: sold out, limits)".into(),
            text_cells(&runs, |run| {
                let endpoint = endpoint(run);
                let refused: u64 = (endpoint.errors.iter())
                    .filter(|(status, _)| status.starts_with('4'))
                    .map(|(_, count)| count)
                    .sum();
                refused.to_string()
            }),
        )
        .into_any(),
        row(
            "Instances".into(),
            text_cells(&runs, |run| run.cost.instances.len().to_string()),
        )
        .into_any(),
        row(
            "CPU seconds".into(),
            text_cells(&runs, |run| figure(Some(run.cost.cpu_seconds))),
        )
        .into_any(),
        row(
            "Peak memory (MiB)".into(),
            text_cells(&runs, |run| {
                let peak = run
                    .cost
                    .instances
                    .iter()
                    .map(|i| i.peak_memory_bytes)
                    .max()
                    .unwrap_or(0);
                figure(Some(peak as f64 / (1024.0 * 1024.0)))
            }),
        )
        .into_any(),
        row(
            "DB pool peak in use".into(),
            text_cells(&runs, |run| run.cost.db_pool_peak_in_use.to_string()),
        )
        .into_any(),
        row(
            "DB pool waits (ms)".into(),
            text_cells(&runs, |run| {
                format!(
                    "{} ({})",
                    figure(Some(run.cost.db_pool_wait_ms)),
                    run.cost.db_pool_waits
                )
            }),
        )
        .into_any(),
        row(
            "Redis commands".into(),
            text_cells(&runs, |run| run.cost.redis_commands.to_string()),
        )
        .into_any(),
        row(
            "MQ publishes".into(),
            text_cells(&runs, |run| run.cost.mq_publishes.to_string()),
        )
        .into_any(),
    ];
    rows.extend(path_rows(&runs, baseline.as_ref(), "successful", |run| {
        &run.path.success
    }));
    rows.extend(path_rows(&runs, baseline.as_ref(), "refused", |run| {
        &run.path.refused
    }));
    let marks = may_mark.then(|| {
        let cells = runs
            .iter()
            .map(|run| {
                if foreign(run) || (run.is_baseline && run.baseline_of_kind.is_some()) {
                    return view! { <td></td> }.into_any();
                }
                let id = run.id.to_string();
                // The clicked button's scope goes with the form.
                let own = (!run.is_baseline).then(|| {
                    view! {
                        <button type="submit" name="scope" value={BaselineScope::Activity.as_str()}>"Mark as baseline"</button>
                    }
                });
                let of_kind = run.baseline_of_kind.is_none().then(|| {
                    let label = match kind {
                        Some(kind) => format!("Mark as baseline of all {} activities", kind.as_str()),
                        None => "Mark as baseline of all activities of its kind".to_owned(),
                    };
                    view! {
                        <button type="submit" name="scope" value={BaselineScope::Kind.as_str()}>{label}</button>
                    }
                });
                view! {
                    <td>
                        <ActionForm action=mark attr:class="inline">
                            <input type="hidden" name="run_id" value=id.clone()/>
                            <input name="reason" required maxlength="500" placeholder="reason (audited)" aria-label="Reason (audited)"/>
                            {own} {of_kind}
                        </ActionForm>
                    </td>
                }
                .into_any()
            })
            .collect::<Vec<_>>();
        row(String::new(), cells)
    });
    view! {
        <p class="meta">"Path figures are calls per buy, counted by the product where each call is made; a flagged cell has a call per buy the baseline run did not. An activity without a baseline of its own is held against its kind's."</p>
        <table class="grid" tabindex="0" id="baseline-runs">
            <thead><tr><th></th>{head}</tr></thead>
            <tbody>{rows}{marks}</tbody>
        </table>
    }
    .into_any()
}
