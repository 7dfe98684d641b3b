//! The table of keys: each switch and limit with what it means, its value, the value in force
//! here, its revision, last write and how many instances applied it; its change form and its
//! history with a rollback per revision.

use super::form::{details_open, ChangeForm};
use crate::api::{get_switch_board, switch_history, FlipSwitch, RollbackSwitch};
use crate::pages::{reason_field, time_cell, when};
use contract::{SwitchBoard, SwitchRow};
use leptos::prelude::*;

/// The table's latest read after the first one. Reads may answer out of order (a slow
/// one after a later one); an answer older than the one shown is dropped.
#[derive(Clone, Copy)]
pub(super) struct Shown {
    board: RwSignal<Option<SwitchBoard>>,
    asked: StoredValue<u64>,
    answered: StoredValue<u64>,
}

impl Shown {
    pub(super) fn new() -> Self {
        Self {
            board: RwSignal::new(None),
            asked: StoredValue::new(0),
            answered: StoredValue::new(0),
        }
    }

    /// The latest read, once there is one (tracked).
    pub(super) fn get(&self) -> Option<SwitchBoard> {
        self.board.get()
    }

    /// Reads the table again, in the browser.
    pub(super) fn reload(self) {
        self.asked.update_value(|asked| *asked += 1);
        let read = self.asked.get_value();
        leptos::task::spawn_local(async move {
            let Ok(board) = get_switch_board().await else {
                // The live panel shows why the board cannot be read; the table keeps its
                // last read and the next landed change reads it again.
                return;
            };
            if read > self.answered.get_value() {
                self.answered.set_value(read);
                self.board.set(Some(board));
            }
        });
    }
}

#[component]
pub(super) fn Switches(
    /// The table as the server rendered it.
    first: SwitchBoard,
    shown: Shown,
    may_flip: bool,
    flip: ServerAction<FlipSwitch>,
    rollback: ServerAction<RollbackSwitch>,
) -> AnyView {
    let board = Memo::new(move |_| shown.get().unwrap_or_else(|| first.clone()));
    view! {
        <h2>"Switches and limits"</h2>
        {(!may_flip).then(|| view! {
            <p class="meta">"Read-only: only ops and admins flip switches."</p>
        })}
        <table class="grid" tabindex="0" id="switch-list">
            <thead><tr>
                <th>"Key"</th><th>"Value"</th><th>"In force here"</th><th>"Revision"</th>
                <th>"Last write"</th><th>"Applied"</th>{may_flip.then(|| view! { <th></th> })}
                <th>"History"</th>
            </tr></thead>
            <tbody>
                // Keyed by the key's write: a line whose key was written is built afresh,
                // which also closes and clears its change form (its "from" value is gone);
                // the others, and a line whose instances only applied its write, keep
                // whatever an operator is typing.
                <For
                    each=move || board.get().switches
                    key=line_key
                    children=move |row: SwitchRow| {
                        let path = row.path.clone();
                        let live = Signal::derive(move || {
                            board.with(|board| board.switches.iter().find(|line| line.path == path).cloned())
                        });
                        let nodes = board.with_untracked(|board| {
                            board.nodes.iter().map(|node| node.node_id.clone()).collect::<Vec<_>>()
                        });
                        view! { <SwitchLine row live may_flip flip rollback nodes/> }
                    }
                />
            </tbody>
        </table>
        {may_flip.then(|| view! { <OtherKey flip/> })}
    }
    .into_any()
}

fn line_key(row: &SwitchRow) -> String {
    format!("{}|{:?}|{:?}", row.path, row.mod_revision, row.etcd_value)
}

/// "applied / instances" of a key's write; a dash for a key never written.
fn applied_count(row: &SwitchRow) -> String {
    if row.mod_revision.is_none() {
        return "—".to_owned();
    }
    let applied = row.applied.iter().filter(|node| node.applied).count();
    format!("{applied} / {}", row.applied.len())
}

#[component]
fn SwitchLine(
    /// The line as its key's write left it.
    row: SwitchRow,
    /// The same line in the latest read: what the instances did with the write since.
    live: Signal<Option<SwitchRow>>,
    may_flip: bool,
    flip: ServerAction<FlipSwitch>,
    rollback: ServerAction<RollbackSwitch>,
    nodes: Vec<String>,
) -> AnyView {
    let editing = RwSignal::new(false);
    let reading = RwSignal::new(false);
    // A change this line's form sent and the server accepted (one that waits: scheduled,
    // for approval, staged) leaves the line as it was, the form closed and empty, so the
    // next change starts from nothing typed (not from the last one's time or stage). A
    // change that lands rebuilds the line anyway; a refused one keeps the form for a fix.
    let sent = StoredValue::new(false);
    let form_row = row.clone();
    let fresh_forms = RwSignal::new(0_u32);
    Effect::new(move |_| {
        let Some(answer) = flip.value().get() else {
            return;
        };
        if std::mem::take(&mut *sent.write_value()) && answer.is_ok() {
            editing.set(false);
            fresh_forms.update(|forms| *forms += 1);
        }
    });
    let history_path = row.path.clone();
    let in_force_revision = row.mod_revision;
    let value = row
        .etcd_value
        .clone()
        .unwrap_or_else(|| format!("{} (default)", row.default_value));
    let current = row
        .etcd_value
        .clone()
        .unwrap_or_else(|| row.default_value.clone());
    let in_force = move || {
        live.get()
            .and_then(|row| row.in_force)
            .unwrap_or_else(|| "—".into())
    };
    let applied = move || {
        live.get()
            .map(|row| applied_count(&row))
            .unwrap_or_default()
    };
    let write = row.written.clone().map(|write| {
        format!(
            "{} via {} at {}: {}",
            write.actor,
            write.source.as_str(),
            when(write.at),
            write.reason
        )
    });
    view! {
        <tr data-path=row.path.clone()>
            <td class="key">
                <span class="mono">{row.path.clone()}</span>
                <p class="meaning">{row.meaning.clone()}</p>
                <span class="meta accepts">"Accepts: " {row.accepts.clone()}</span>
            </td>
            <td class="value">
                {value}
                {(!row.valid).then(|| view! { <span class="error-inline">" malformed: ignored"</span> })}
            </td>
            <td class="value">{in_force}</td>
            <td class="num">{row.mod_revision.map(|r| r.to_string()).unwrap_or_else(|| "—".into())}</td>
            <td class="meta">{write.unwrap_or_else(|| "—".into())}</td>
            <td class="num">{applied}</td>
            {may_flip.then(|| view! {
                <td>
                    <details
                        class="change"
                        prop:open=move || editing.get()
                        on:toggle=move |ev| editing.set(details_open(&ev))
                        on:submit=move |_| sent.set_value(true)
                    >
                        <summary>"Change…"</summary>
                        {move || {
                            fresh_forms.track();
                            let row = form_row.clone();
                            view! {
                                <ChangeForm path=row.path.clone() current=current.clone() row flip open=editing nodes=nodes.clone()/>
                            }
                        }}
                    </details>
                </td>
            })}
            // After the change form: a keyboard user tabbing along a row meets "Change…" first.
            <td>
                <details class="change history" on:toggle=move |ev| reading.set(details_open(&ev))>
                    <summary>"History…"</summary>
                    <Show when=move || reading.get()>
                        <History path=history_path.clone() current=in_force_revision may_flip rollback/>
                    </Show>
                </details>
            </td>
        </tr>
    }
    .into_any()
}

/// A key's values, newest first, each older one with a rollback.
#[component]
fn History(
    path: String,
    current: Option<i64>,
    may_flip: bool,
    rollback: ServerAction<RollbackSwitch>,
) -> impl IntoView {
    let revisions = {
        let path = path.clone();
        Resource::new(
            move || rollback.version().get(),
            move |_| switch_history(path.clone()),
        )
    };
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let path = path.clone();
                Suspend::new(async move {
                    crate::pages::listing(revisions.await, "No value was ever written.", move |revisions| view! {
                        <ol class="history-list">
                            {revisions.into_iter().map(|revision| {
                                let now = current == Some(revision.revision);
                                let field = format!("rollback-{}-{}", path.replace('/', "-"), revision.revision);
                                let key = path.clone();
                                view! {
                                    <li data-revision=revision.revision.to_string()>
                                        <span class="mono">{revision.value.clone()}</span>
                                        {format!(" · revision {} · {} via {} · ", revision.revision, revision.by, revision.source.as_str())}
                                        {time_cell(revision.at)}
                                        <p class="meta">{revision.reason.clone()}</p>
                                        {now.then(|| view! { <span class="meta">"(in force)"</span> })}
                                        {(may_flip && !now).then(|| view! {
                                            <ActionForm action=rollback attr:class="row rollback-form">
                                                <input type="hidden" name="path" value=key/>
                                                <input type="hidden" name="revision" value=revision.revision.to_string()/>
                                                <label for=field.clone()>"Reason to roll back"</label>
                                                <input type="text" id=field name="reason" required maxlength="500"/>
                                                <button type="submit" disabled=move || rollback.pending().get()>
                                                    {format!("Roll back to {}", revision.value)}
                                                </button>
                                            </ActionForm>
                                        })}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                    }.into_any())
                })
            }}
        </Transition>
    }
}

/// A key not listed yet, such as one activity's entry switch (`switches/entry/42`).
#[component]
fn OtherKey(flip: ServerAction<FlipSwitch>) -> AnyView {
    view! {
        <details class="change" id="other-key">
            <summary>"Set another key (e.g. close one activity: switches/entry/ID)"</summary>
            <ActionForm action=flip attr:class="card change-form">
                <label>"Key" <input type="text" name="path" required placeholder="switches/entry/42"/></label>
                <label>"Value" <input type="text" name="value" required placeholder="closed"/></label>
                {reason_field()}
                <label class="confirm"><input type="checkbox" required/> "I confirm this flip"</label>
                <button type="submit" disabled=move || flip.pending().get()>"Flip"</button>
            </ActionForm>
        </details>
    }
    .into_any()
}
