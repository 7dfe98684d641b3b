//! The seam between the console and the platform: a trait the `server` crate implements
//! and provides as Leptos context, so this crate never touches PostgreSQL, Redis,
//! RabbitMQ or etcd itself.
//!
//! A server function first resolves its caller from the session cookie ([`ConsoleBackend::
//! authenticate`]), then hands that actor to the call, which asks the permission table
//! before it does anything: server functions are public endpoints.

use contract::{
    ActivityBaselines, BaselineRun, BaselineScope, DrawReport, HotKey, HotKeyForm, HotKeyPeriod,
    HotKeysView, Readiness, Revoked,
};
use contract::{
    ActivityDetail, ActivityInput, ActivityLedger, ActivitySummary, Actor, AuditFilter, AuditPage,
    DashboardFrame, DeadLetterPage, DeadLetterView, Item, ItemInput, OrderDetail, OrderPage,
    OrderQuery, OutboxRetryReport, OutboxSummary, PrewarmReport, PublishedPage, ReconciliationRun,
    ReplayReport, RequeueReport, RunSummary, StartReconciliation, StartedRun, SwitchBoard,
};
use contract::{ChangeList, FlipOutcome, SwitchForm, SwitchImpact, SwitchRevision};
use contract::{Rehearsal, StartRehearsal, StartedRehearsal};
use std::sync::Arc;

pub use contract::ConsoleError;

/// A fresh console session.
pub struct NewSession {
    pub token: String,
    pub max_age_s: i64,
}

#[async_trait::async_trait]
pub trait ConsoleBackend: Send + Sync + 'static {
    /// Checks a password (rate-limited per username and client address; the address is the
    /// one the server resolves from the request's peer and, behind trusted proxies, its
    /// forwarding headers).
    async fn login(
        &self,
        username: &str,
        password: &str,
        request: &http::request::Parts,
    ) -> Result<NewSession, ConsoleError>;
    async fn logout(&self, session: &str) -> Result<(), ConsoleError>;
    /// The admin user a console session belongs to; `Unauthenticated` for none or an
    /// expired one. Every other call takes the actor this resolved, once per request.
    async fn authenticate(&self, session: &str) -> Result<Actor, ConsoleError>;
    /// Whether session cookies must carry `Secure` (HTTPS deployments).
    fn secure_cookies(&self) -> bool;

    async fn list_items(&self, actor: &Actor) -> Result<Vec<Item>, ConsoleError>;
    async fn create_item(&self, actor: &Actor, input: ItemInput) -> Result<i64, ConsoleError>;
    async fn get_item(&self, actor: &Actor, id: i64) -> Result<Item, ConsoleError>;
    async fn update_item(
        &self,
        actor: &Actor,
        id: i64,
        input: ItemInput,
    ) -> Result<(), ConsoleError>;

    async fn list_activities(&self, actor: &Actor) -> Result<Vec<ActivitySummary>, ConsoleError>;
    async fn get_activity(&self, actor: &Actor, id: i64) -> Result<ActivityDetail, ConsoleError>;
    async fn create_activity(
        &self,
        actor: &Actor,
        input: ActivityInput,
    ) -> Result<i64, ConsoleError>;
    async fn update_activity(
        &self,
        actor: &Actor,
        id: i64,
        input: ActivityInput,
    ) -> Result<(), ConsoleError>;
    /// Loads the activity's stock, buyer records and Bloom filter keys into Redis (ops and
    /// admin only; refused once the sale is open).
    async fn prewarm(&self, actor: &Actor, activity_id: i64)
        -> Result<PrewarmReport, ConsoleError>;
    /// Renders the activity's static sale page as a new version and serves it (the owning
    /// merchant, ops and admin).
    async fn publish_sale_page(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<PublishedPage, ConsoleError>;

    /// A page of orders, newest first (merchants: only their activities' orders).
    async fn list_orders(
        &self,
        actor: &Actor,
        query: OrderQuery,
    ) -> Result<OrderPage, ConsoleError>;
    /// One order with its history, payment trades and restore-journal row.
    async fn get_order(&self, actor: &Actor, id: &str) -> Result<OrderDetail, ConsoleError>;

    /// Every switch and limit with its etcd revision and per-instance applied state
    /// (ops, SRE and admin).
    async fn switch_board(&self, actor: &Actor) -> Result<SwitchBoard, ConsoleError>;
    /// Writes a switch or limit into etcd, audited with the reason (ops and admin only),
    /// answering once etcd has it, without waiting for the instances; or makes the change
    /// that waits the form asks for (a time, a revert, a stage, a second person), as the
    /// admin API's `PUT /switches/{path}` does.
    async fn flip_switch(
        &self,
        actor: &Actor,
        form: SwitchForm,
    ) -> Result<FlipOutcome, ConsoleError>;
    /// The latest switch changes, newest first (every role that reads the board).
    async fn list_changes(&self, actor: &Actor) -> Result<ChangeList, ConsoleError>;
    /// Approves, rejects, cancels, promotes or aborts a change (ops and admin only); the
    /// decision is one of `contract::ChangeDecision`'s names.
    async fn decide_change(
        &self,
        actor: &Actor,
        id: i64,
        decision: &str,
        reason: &str,
    ) -> Result<(), ConsoleError>;
    /// The values a key held, newest first.
    async fn switch_history(
        &self,
        actor: &Actor,
        path: &str,
    ) -> Result<Vec<SwitchRevision>, ConsoleError>;
    /// Sets the value a revision held again, as a new audited change (ops and admin only).
    async fn rollback_switch(
        &self,
        actor: &Actor,
        path: &str,
        revision: i64,
        reason: &str,
    ) -> Result<FlipOutcome, ConsoleError>;
    /// What setting `path` to `value` would touch.
    async fn switch_impact(
        &self,
        actor: &Actor,
        path: &str,
        value: &str,
    ) -> Result<SwitchImpact, ConsoleError>;
    /// A page of the audit log: the switch flips and operator actions `filter` keeps,
    /// newest first.
    async fn audit_log(
        &self,
        actor: &Actor,
        page: i64,
        filter: &AuditFilter,
    ) -> Result<AuditPage, ConsoleError>;

    /// A page of dead letters, the waiting ones first.
    async fn dead_letters(&self, actor: &Actor, page: i64) -> Result<DeadLetterPage, ConsoleError>;
    /// Sends one dead letter back to its queue, audited with the reason (ops and admin only).
    async fn requeue_dead_letter(
        &self,
        actor: &Actor,
        id: i64,
        reason: &str,
    ) -> Result<DeadLetterView, ConsoleError>;
    /// Sends every waiting dead letter back, audited with the reason (ops and admin only).
    async fn requeue_all_dead_letters(
        &self,
        actor: &Actor,
        reason: &str,
    ) -> Result<RequeueReport, ConsoleError>;
    /// The outbox: rows waiting for the relay, given up on, and recorded for a replay.
    async fn outbox_summary(&self, actor: &Actor) -> Result<OutboxSummary, ConsoleError>;
    /// Hands failed outbox rows back to the relay: `row`, or every failed row when `None`;
    /// audited with the reason (ops and admin).
    async fn retry_outbox(
        &self,
        actor: &Actor,
        row: Option<i64>,
        reason: &str,
    ) -> Result<OutboxRetryReport, ConsoleError>;
    /// Hands every recorded pre-order to the pipeline, audited with the reason (ops and admin).
    async fn replay_recorded(
        &self,
        actor: &Actor,
        reason: &str,
    ) -> Result<ReplayReport, ConsoleError>;

    /// The live dashboard's most recent frames of this instance, oldest first (the page
    /// draws them at once, then follows the stream).
    async fn dashboard_frames(&self, actor: &Actor) -> Result<Vec<DashboardFrame>, ConsoleError>;

    /// The live stock ledger of an activity's items: every store's count side by side and
    /// the drift between them (merchants: their own activities only).
    async fn activity_ledger(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<ActivityLedger, ConsoleError>;
    /// Reconciliation runs, newest first, of one activity or of all.
    async fn reconciliations(
        &self,
        actor: &Actor,
        activity_id: Option<i64>,
    ) -> Result<Vec<RunSummary>, ConsoleError>;
    /// One reconciliation run with its progress and findings.
    async fn reconciliation(
        &self,
        actor: &Actor,
        id: i64,
    ) -> Result<ReconciliationRun, ConsoleError>;
    /// Starts a reconciliation run in the background and answers its id at once (a report
    /// for ops, SRE and admin; a repair, with an audited reason, for ops and admin only).
    async fn start_reconciliation(
        &self,
        actor: &Actor,
        request: StartReconciliation,
    ) -> Result<StartedRun, ConsoleError>;

    /// The hot keys in force on this instance and the cluster-wide top (ops, SRE, admin).
    async fn hotkeys(&self, actor: &Actor) -> Result<HotKeysView, ConsoleError>;
    /// The stored periods of hot keys over the last `hours`, latest first.
    async fn hotkey_history(
        &self,
        actor: &Actor,
        hours: u32,
    ) -> Result<Vec<HotKeyPeriod>, ConsoleError>;
    /// Puts a key in force by hand, audited (ops and admin); the form is read only once
    /// the caller may add.
    async fn add_hotkey(&self, actor: &Actor, form: HotKeyForm) -> Result<HotKey, ConsoleError>;
    /// Takes a key out of force, audited (ops and admin).
    async fn remove_hotkey(
        &self,
        actor: &Actor,
        kind: &str,
        key: &str,
        reason: &str,
    ) -> Result<(), ConsoleError>;

    /// The pre-sale readiness check of an activity, run now (ops, SRE, admin).
    async fn readiness(&self, actor: &Actor, activity_id: i64) -> Result<Readiness, ConsoleError>;

    /// A lottery activity's draw (ops, SRE, admin).
    async fn draw(&self, actor: &Actor, activity_id: i64) -> Result<DrawReport, ConsoleError>;
    /// Ends a buyer's part in a lottery, audited (ops and admin).
    async fn revoke_registration(
        &self,
        actor: &Actor,
        activity_id: i64,
        user_id: i64,
        reason: &str,
    ) -> Result<Revoked, ConsoleError>;

    /// Rehearsals, newest first, of one activity or of all (ops, SRE, admin).
    async fn rehearsals(
        &self,
        actor: &Actor,
        activity_id: Option<i64>,
    ) -> Result<Vec<Rehearsal>, ConsoleError>;
    /// One rehearsal with its stage, progress and, once over, its result.
    async fn rehearsal(&self, actor: &Actor, id: i64) -> Result<Rehearsal, ConsoleError>;
    /// Starts a rehearsal of an activity in the background, audited with its reason, and
    /// answers its id at once (ops and admin).
    async fn start_rehearsal(
        &self,
        actor: &Actor,
        activity_id: i64,
        request: StartRehearsal,
    ) -> Result<StartedRehearsal, ConsoleError>;
    /// The recorded runs of an activity, newest first, and the run it is held against
    /// (ops, SRE, admin).
    async fn baselines(
        &self,
        actor: &Actor,
        activity_id: i64,
    ) -> Result<ActivityBaselines, ConsoleError>;
    /// Makes a run the baseline of its activity or of its activity's kind, audited with the
    /// reason (ops and admin).
    async fn mark_baseline(
        &self,
        actor: &Actor,
        run_id: i64,
        scope: BaselineScope,
        reason: &str,
    ) -> Result<BaselineRun, ConsoleError>;
}

/// How the server hands its implementation to the console.
pub type SharedBackend = Arc<dyn ConsoleBackend>;
