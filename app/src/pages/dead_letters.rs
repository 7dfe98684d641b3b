//! Dead letters: messages the order pipeline gave up on, with their payload,
//! why and how often they died, and whether they were sent back. Ops and admins requeue one
//! or all of them; every requeue needs a reason and is audited by the server.
//!
//! Below them, the outbox: rows the relay still has to send, rows it gave up on, which ops
//! hand back to the relay (one or all, with a reason) once the cause is fixed, and pre-orders
//! recorded while the async switch was on `record`, which ops replay from here once the
//! pipeline is back.

use super::{error_box, listing, pager, reason_field, time_cell, when};
use crate::api::{
    get_outbox_summary, list_dead_letters, whoami, ReplayRecordedOrders, RequeueAllDeadLetters,
    RequeueDeadLetter, RetryOutbox,
};
use contract::{DeadLetterPage, DeadLetterView, OutboxSummary};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

/// Payload characters shown in the table; the rest is one click away.
const PAYLOAD_PREVIEW_CHARS: usize = 120;

#[component]
pub fn DeadLetters() -> impl IntoView {
    let params = use_query_map();
    let page = Memo::new(move |_| {
        params
            .read()
            .get("page")
            .and_then(|page| page.parse::<i64>().ok())
    });
    let user = Resource::new(|| (), |_| whoami());
    let requeue = ServerAction::<RequeueDeadLetter>::new();
    let requeue_all = ServerAction::<RequeueAllDeadLetters>::new();
    let letters = Resource::new(
        move || {
            (
                page.get(),
                requeue.version().get(),
                requeue_all.version().get(),
            )
        },
        |(page, _, _)| list_dead_letters(page),
    );
    let replay = ServerAction::<ReplayRecordedOrders>::new();
    let retry = ServerAction::<RetryOutbox>::new();
    let outbox = Resource::new(
        move || (replay.version().get(), retry.version().get()),
        |_| get_outbox_summary(),
    );
    view! {
        <h1>"Dead letters"</h1>
        {move || requeue.value().get().map(|result| match result {
            Ok(letter) => view! {
                <p class="notice" id="requeue-result">"Dead letter #" {letter.id} " sent back to " <span class="mono">{letter.routing_key}</span> "."</p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
        {move || requeue_all.value().get().map(|result| match result {
            Ok(report) => view! {
                <p class="notice" id="requeue-all-result">{report.requeued} " dead letter(s) sent back."</p>
            }.into_any(),
            Err(error) => error_box(error),
        })}
        // One boundary reads `user`: a resource read under two Suspense boundaries can
        // leave an SSR response hanging (leptos-rs/leptos#4851).
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_operate = user.await.is_ok_and(|user| user.role.may(contract::Permission::OperatePipeline));
                let letters = match letters.await {
                    Ok(page) => view! {
                        <Letters page may_requeue=may_operate requeue requeue_all/>
                    }.into_any(),
                    Err(error) => error_box(error),
                };
                let outbox = match outbox.await {
                    Ok(summary) => view! { <Outbox summary may_operate replay retry/> }.into_any(),
                    Err(error) => error_box(error),
                };
                view! {
                    {letters}
                    <h2>"Outbox"</h2>
                    {move || replay.value().get().map(|result| match result {
                        Ok(report) => view! {
                            <p class="notice" id="replay-result">
                                {report.replayed} " recorded pre-order(s) replayed; RabbitMQ confirmed "
                                {report.published} " at once (the relay resends the rest)."
                            </p>
                        }.into_any(),
                        Err(error) => error_box(error),
                    })}
                    {move || retry.value().get().map(|result| match result {
                        Ok(report) => view! {
                            <p class="notice" id="retry-result">
                                {report.retried} " failed outbox row(s) handed back to the relay; it publishes them on its next pass."
                            </p>
                        }.into_any(),
                        Err(error) => error_box(error),
                    })}
                    {outbox}
                }
            })}
        </Transition>
    }
}

#[component]
fn Outbox(
    summary: OutboxSummary,
    may_operate: bool,
    replay: ServerAction<ReplayRecordedOrders>,
    retry: ServerAction<RetryOutbox>,
) -> AnyView {
    let recorded = summary.recorded;
    let failed = summary.failed;
    view! {
        <p class="meta" id="outbox-counts">
            {summary.pending} " waiting for the relay · " {summary.failed} " given up on · "
            {recorded} " recorded for a replay"
        </p>
        {(may_operate && recorded > 0).then(|| view! {
            <details class="change" id="replay-recorded">
                <summary>"Replay " {recorded} " recorded pre-order(s)…"</summary>
                <ActionForm action=replay attr:class="card change-form">
                    {reason_field()}
                    <label class="confirm"><input type="checkbox" required/> "Hand every recorded pre-order to the order pipeline"</label>
                    <button type="submit" disabled=move || replay.pending().get()>"Replay"</button>
                </ActionForm>
            </details>
        })}
        {(may_operate && failed > 0).then(|| view! {
            <details class="change" id="retry-failed">
                <summary>"Retry all " {failed} " failed row(s)…"</summary>
                <ActionForm action=retry attr:class="card change-form">
                    {reason_field()}
                    <label class="confirm"><input type="checkbox" required/> "Hand every failed row back to the relay"</label>
                    <button type="submit" disabled=move || retry.pending().get()>"Retry all"</button>
                </ActionForm>
            </details>
        })}
        {(!summary.failed_rows.is_empty()).then(|| view! {
            <table class="grid" tabindex="0" id="outbox-failed">
                <thead><tr>
                    <th>"ID"</th><th>"Created"</th><th>"Event"</th><th>"Topic"</th>
                    <th>"Attempts"</th><th>"Last error"</th>
                    {may_operate.then(|| view! { <th></th> })}
                </tr></thead>
                <tbody>
                    {summary.failed_rows.into_iter().map(|row| view! {
                        <tr data-id=row.id.to_string()>
                            <td class="num">{row.id}</td>
                            <td>{time_cell(row.created_at)}</td>
                            <td class="mono">{row.event_id}</td>
                            <td>{row.topic}</td>
                            <td class="num">{row.attempts}</td>
                            <td>{row.last_error.unwrap_or_default()}</td>
                            {may_operate.then(|| view! {
                                <td>
                                    <details class="change">
                                        <summary>"Retry…"</summary>
                                        <ActionForm action=retry attr:class="card change-form">
                                            <input type="hidden" name="id" value=row.id/>
                                            {reason_field()}
                                            <button type="submit" disabled=move || retry.pending().get()>"Retry"</button>
                                        </ActionForm>
                                    </details>
                                </td>
                            })}
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        })}
    }
    .into_any()
}

#[component]
fn Letters(
    page: DeadLetterPage,
    may_requeue: bool,
    requeue: ServerAction<RequeueDeadLetter>,
    requeue_all: ServerAction<RequeueAllDeadLetters>,
) -> AnyView {
    let waiting = page.rows.waiting;
    let pages = pager(page.page, page.has_more, |n| {
        format!("/dead-letters?page={n}")
    });
    view! {
        <p class="meta" id="dead-letter-count">{waiting} " waiting to be requeued."</p>
        {(may_requeue && waiting > 0).then(|| view! {
            <details class="change" id="requeue-all">
                <summary>"Requeue all " {waiting} " waiting…"</summary>
                <ActionForm action=requeue_all attr:class="card change-form">
                    {reason_field()}
                    <label class="confirm"><input type="checkbox" required/> "Send every waiting dead letter back to its queue"</label>
                    <button type="submit" disabled=move || requeue_all.pending().get()>"Requeue all"</button>
                </ActionForm>
            </details>
        })}
        {listing(Ok(page.rows.dead_letters), "No dead letters.", move |letters| view! {
            <table class="grid" tabindex="0" id="dead-letter-list">
                <thead><tr>
                    <th>"ID"</th><th>"Received"</th><th>"Queue / routing key"</th><th>"Reason"</th>
                    <th>"Deaths"</th><th>"Payload"</th><th>"Requeued"</th>
                    {may_requeue.then(|| view! { <th></th> })}
                </tr></thead>
                <tbody>
                    {letters.into_iter().map(|letter| view! { <Letter letter may_requeue requeue/> }).collect_view()}
                </tbody>
            </table>
        }.into_any())}
        {pages}
    }
    .into_any()
}

#[component]
fn Letter(
    letter: DeadLetterView,
    may_requeue: bool,
    requeue: ServerAction<RequeueDeadLetter>,
) -> AnyView {
    let preview: String = letter.payload.chars().take(PAYLOAD_PREVIEW_CHARS).collect();
    let truncated = preview.len() < letter.payload.len();
    let requeued = letter.requeued_at.map(|at| {
        format!(
            "{} by {}",
            when(at),
            letter.requeued_by.as_deref().unwrap_or("?")
        )
    });
    let waiting = requeued.is_none();
    view! {
        <tr data-id=letter.id.to_string()>
            <td class="num">{letter.id}</td>
            <td>{time_cell(letter.received_at)}</td>
            <td class="mono">{letter.source_queue}<br/>{letter.routing_key}</td>
            <td>{letter.reason}</td>
            <td class="num">{letter.death_count}</td>
            <td class="mono payload">
                {if truncated {
                    view! {
                        <details><summary>{preview}"…"</summary><pre>{letter.payload}</pre></details>
                    }.into_any()
                } else {
                    view! { <pre>{letter.payload}</pre> }.into_any()
                }}
            </td>
            <td>{requeued.unwrap_or_else(|| "—".into())}</td>
            {may_requeue.then(|| view! {
                <td>
                    {waiting.then(|| view! {
                        <details class="change">
                            <summary>"Requeue…"</summary>
                            <ActionForm action=requeue attr:class="card change-form">
                                <input type="hidden" name="id" value=letter.id/>
                                {reason_field()}
                                <button type="submit" disabled=move || requeue.pending().get()>"Requeue"</button>
                            </ActionForm>
                        </details>
                    })}
                </td>
            })}
        </tr>
    }
    .into_any()
}
