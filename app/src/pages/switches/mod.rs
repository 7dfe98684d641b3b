//! The switch board (docs/control-plane.md): every switch and limit with its value and
//! etcd revision, who wrote it last and why, and which instance has applied it. Ops and
//! admins flip from here: a reason is required and the flip must be confirmed; then the
//! page follows the flip live (every second) until every instance has applied it, with the
//! time each one took. A banner says when etcd is unreachable or this instance is stale.
//!
//! A flip may also wait (docs/control-plane.md, "Changes that wait"): for a time typed in
//! the operator's zone (UTC shown beside), with a revert, for a second person (a key that
//! needs four eyes), or staged on some instances first. The changes list shows what waits
//! with its buttons: approve or reject, cancel, promote or abort; the live panel shows
//! each staged key's value per instance. Each key has its history, with a rollback button
//! per revision, and a flip's confirmation shows what it would touch (its impact).
//!
//! The change forms are plain forms (`<details>` and a required confirmation box), so they
//! work before hydration too (a time typed then is read as UTC, as its label says); the
//! live panel, the impact and the history need the hydrated page.
//!
//! The page's parts: the live panel (`live`), the changes that wait (`changes`), the table
//! of keys (`table`) and a key's change form (`form`).

mod changes;
mod form;
mod live;
mod table;

use super::{error_box, ticker};
use crate::api::{get_switch_board, whoami, DecideChange, FlipSwitch, RollbackSwitch};
use crate::error::ConsoleFnError;
use contract::{FlipOutcome, SwitchBoard, SwitchChange};
use leptos::prelude::*;
use std::time::Duration;

use changes::Changes;
use live::{LivePanel, Progress};
use table::{Shown, Switches};

#[component]
pub fn SwitchBoardPage() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let flip = ServerAction::<FlipSwitch>::new();
    let decide = ServerAction::<DecideChange>::new();
    let rollback = ServerAction::<RollbackSwitch>::new();
    let beat = ticker(Duration::from_secs(1));
    let live = Resource::new(move || beat.get(), |_| get_switch_board());
    // Whether the live panel has seen the latest flip applied by every instance. The table
    // is read again when a flip lands and once more when it is applied everywhere (else
    // its Applied column keeps the count read right after the write), never on the beat.
    let flip_applied = Memo::new(move |_| {
        let change = flipped(flip.value().get()?.ok()?)?;
        let board = live.get()?.ok()?;
        Some((change.revision, Progress::of(&board, &change).complete()))
    });
    // The table as the server rendered it, read once; every later read goes to `shown`,
    // whose lines are keyed: a read replaces only the lines whose key was written, so an
    // open change form on another line (or on the same line, when only its Applied count
    // moved) keeps what the operator typed. Rendering each read afresh closed every open
    // form a second after any flip, under the hand of whoever was typing the next one.
    let first = Resource::new(|| (), |_| get_switch_board());
    let shown = Shown::new();
    // What etcd holds of the keys and stages: a change the leader applied, a stage it
    // aborted or a decision elsewhere moves it, and the table and the changes are read
    // again. Read in an effect: the browser follows the live board, the server renders once.
    let landed = RwSignal::new(0_u64);
    Effect::new(move |read: Option<()>| {
        let _moved = (flip.version().get(), flip_applied.get(), landed.get());
        // The first run is the page's own first read.
        if read.is_some() {
            shown.reload();
        }
    });
    // The table is read again when the live board shows a key or a stage the table does
    // not (once per such sight); a decision that writes nothing (a cancel) reloads the changes.
    Effect::new(move |asked: Option<Option<Landmarks>>| {
        let asked = asked.flatten();
        let live_marks = live
            .get()
            .and_then(Result::ok)
            .map(|board| landmarks(&board));
        let table_marks = shown
            .get()
            .or_else(|| first.get().and_then(Result::ok))
            .map(|board| landmarks(&board));
        match (live_marks, table_marks) {
            (Some(now), Some(table)) if now != table && asked.as_ref() != Some(&now) => {
                landed.update(|moves| *moves += 1);
                Some(now)
            }
            _ => asked,
        }
    });
    let changes = Resource::new(
        move || {
            (
                flip.version().get(),
                decide.version().get(),
                rollback.version().get(),
                landed.get(),
            )
        },
        |_| crate::api::list_changes(),
    );
    view! {
        <h1>"Switch board"</h1>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let flipped = flip.value().get();
                let outcome = decide.value().get().or_else(|| rollback.value().get().map(|done| done.map(|_| ())));
                match live.await {
                    Ok(board) => view! { <LivePanel board flipped/> {decision_note(outcome)} }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_flip = user.await.is_ok_and(|user| user.role.may(contract::Permission::FlipSwitch));
                match changes.await {
                    Ok(list) => view! { <Changes changes=list.changes may_flip decide/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_flip = user.await.is_ok_and(|user| user.role.may(contract::Permission::FlipSwitch));
                match first.await {
                    Ok(first) => view! { <Switches first shown may_flip flip rollback/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

/// The change a flip wrote at once, if it did.
fn flipped(outcome: FlipOutcome) -> Option<SwitchChange> {
    match outcome {
        FlipOutcome::Flipped(change) => Some(change),
        FlipOutcome::Waiting(_) => None,
    }
}

/// Every key's revision and the change staged on it, if any.
type Landmarks = Vec<(String, Option<i64>, Option<i64>)>;

/// What moves when a change lands or a stage ends: every key's revision and every stage.
fn landmarks(board: &SwitchBoard) -> Landmarks {
    board
        .switches
        .iter()
        .map(|row| {
            let stage = row.staged.as_ref().map(|stage| stage.change_id);
            (row.path.clone(), row.mod_revision, stage)
        })
        .collect()
}

/// The outcome of the latest decision or rollback: an error, or a note that it was done.
fn decision_note(outcome: Option<Result<(), ConsoleFnError>>) -> Option<AnyView> {
    match outcome? {
        Ok(()) => Some(view! { <p class="meta saved" role="status" id="decision-done">"Done; the changes below are current."</p> }.into_any()),
        Err(error) => Some(error_box(error)),
    }
}
