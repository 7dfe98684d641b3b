//! What the pages of the console's long-running jobs share: reconciliation runs and
//! rehearsals are both started per activity from a form above a list that keeps itself up
//! to date, and each has a page that follows it every second while it runs.
//!
//! Only the shape is shared here; what a job is (its form, its columns, its findings or
//! checks) stays on its own page.

use super::{activity_options, chosen_activity, listing, ticker};
use crate::{api::whoami, error::ConsoleFnError};
use contract::{ActivitySummary, CurrentUser};
use leptos::prelude::*;
use leptos_router::{components::Form, hooks::use_params_map};
use serde::{de::DeserializeOwned, Serialize};
use std::{future::Future, time::Duration};

/// How often a running job's page asks for its progress.
pub const RUN_REFRESH: Duration = Duration::from_secs(1);
/// How often a list of jobs refreshes.
pub const LIST_REFRESH: Duration = Duration::from_secs(2);

/// Asks `resource` again every `period` while what it last answered is `live`. A refusal or
/// an error is not asked again, so a page shown to a role that may not see it stays quiet.
pub fn refetch_while<T>(
    resource: Resource<Result<T, ConsoleFnError>>,
    period: Duration,
    live: impl Fn(&T) -> bool + 'static,
) where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let beat = ticker(period);
    Effect::new(move |_| {
        let wanted =
            resource.with_untracked(|answer| matches!(answer, Some(Ok(value)) if live(value)));
        if beat.get() > 0 && wanted {
            resource.refetch();
        }
    });
}

/// The job the page's `{id}` names, fetched by `fetch`; an id that is not a number is
/// "not found" without asking the server.
pub fn job_of_the_page<T, Fut>(
    fetch: impl Fn(i64) -> Fut + Send + Sync + 'static,
) -> Resource<Result<T, ConsoleFnError>>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    Fut: Future<Output = Result<T, ConsoleFnError>> + Send + 'static,
{
    let params = use_params_map();
    let id = Memo::new(move |_| {
        params
            .read()
            .get("id")
            .and_then(|id| id.parse::<i64>().ok())
    });
    Resource::new(
        move || id.get(),
        move |id| {
            let fetched = id.map(&fetch);
            async move {
                match fetched {
                    Some(fetched) => fetched.await,
                    None => Err(ConsoleFnError::not_found()),
                }
            }
        },
    )
}

/// The GET form above a job list that narrows it to one activity, or any.
pub fn activity_filter(
    action: &'static str,
    id: &'static str,
    activities: Vec<ActivitySummary>,
    chosen: Option<i64>,
) -> AnyView {
    view! {
        <Form method="GET" action=action attr:class="row filters" attr:id=id>
            <label>"Activity"
                <select name="activity_id">
                    <option value="">"Any activity"</option>
                    {activity_options(activities, chosen)}
                </select>
            </label>
            <button type="submit">"Filter"</button>
        </Form>
    }
    .into_any()
}

/// The activity a start form starts its job for: one must be picked.
pub fn activity_to_start(activities: Vec<ActivitySummary>, chosen: Option<i64>) -> AnyView {
    view! {
        <label>"Activity"
            <select name="activity_id" required>
                <option value="">"Pick an activity"</option>
                {activity_options(activities, chosen)}
            </select>
        </label>
    }
    .into_any()
}

/// What a job list page says: its heading and what the job does, the list's heading and
/// the note shown when there is nothing to list.
pub struct JobListText {
    /// The page's own path, which its activity filter reloads.
    pub path: &'static str,
    /// The filter form's id.
    pub filter_id: &'static str,
    pub title: &'static str,
    pub about: &'static str,
    /// Said instead of the start form to a role that may not start the job.
    pub may_not_start: &'static str,
    pub list_heading: &'static str,
    pub nothing: &'static str,
}

/// A job list page: its text, the activity filter and the `start` form for the signed-in
/// user, these activities and the chosen one (none for a role that may not start the job),
/// then the `table` of the chosen activity's jobs (all when
/// none is chosen) as `list` answers them, refreshed every two seconds and whenever
/// `started` moves (the page's start action's version: a job was started here).
pub fn job_list<T, ListFut>(
    text: JobListText,
    started: RwSignal<usize>,
    list: impl Fn(Option<i64>) -> ListFut + Send + Sync + 'static,
    start: impl Fn(Option<CurrentUser>, Vec<ActivitySummary>, Option<i64>) -> Option<AnyView>
        + Clone
        + Send
        + Sync
        + 'static,
    table: impl Fn(Vec<T>) -> AnyView + Clone + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    ListFut: Future<Output = Result<Vec<T>, ConsoleFnError>> + Send + 'static,
{
    let JobListText {
        path,
        filter_id,
        title,
        about,
        may_not_start,
        list_heading,
        nothing,
    } = text;
    let filter = chosen_activity();
    let user = Resource::new(|| (), |_| whoami());
    let activities = Resource::new(|| (), |_| crate::api::list_activities());
    let jobs = Resource::new(
        move || (filter.get(), started.get()),
        move |(activity_id, _)| list(activity_id),
    );
    // Jobs started elsewhere (the CLI, the API, the leader) show up, and running ones move.
    refetch_while(jobs, LIST_REFRESH, |_| true);
    view! {
        <h1>{title}</h1>
        <p class="meta">{about}</p>
        // The forms live apart from the refreshing list, so what is typed in them stays.
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let start = start.clone();
                Suspend::new(async move {
                    let user = user.await.ok();
                    let activities = activities.await.unwrap_or_default();
                    let chosen = filter.get_untracked();
                    let form = start(user, activities.clone(), chosen).unwrap_or_else(|| {
                        view! { <p class="meta">{may_not_start}</p> }.into_any()
                    });
                    view! {
                        {activity_filter(path, filter_id, activities, chosen)}
                        {form}
                    }
                })
            }}
        </Transition>
        <h2>{list_heading}</h2>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let table = table.clone();
                Suspend::new(async move { listing(jobs.await, nothing, table) })
            }}
        </Transition>
    }
}
