//! The state every handler and server function shares: the sale storey's ([`SaleState`])
//! and the operators' parts over it. axum clones it for every request and middleware, so it
//! is one `Arc` around the [`Shared`] parts (profiling showed the field-by-field clone,
//! Leptos options included, at 3-5% of a request's CPU).

use axum::{extract::FromRequestParts, http::request::Parts};
use contract::Actor;
use leptos::config::LeptosOptions;
use std::sync::Arc;

use crate::control::status::ControlStatus;
use base::{error::ApiError, etcd::EtcdLink};
use sale::SaleState;

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Admin routes take an [`Actor`], authenticated from the request's credentials.
impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.auth.actor(&parts.headers).await
    }
}

/// The console's routes take the Leptos options out of the state.
impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// The operators' side of the state, over the sale's: every handle the sale storey works
/// with is [`SaleState`]'s, reached through it (`state.db` is `state.sale.db`), and the
/// fields here are what only the control plane, hot-key detection, reconciliation, the
/// dashboard and the console need.
pub struct Shared {
    /// What the sale storey works with.
    pub sale: SaleState,
    /// etcd, connected lazily; handlers read switches from memory, never from here.
    pub etcd: EtcdLink,
    /// Where the console's bundle lives and what it is called.
    pub(crate) leptos: LeptosOptions,
    /// This instance in the control plane: node id, how current its switches are.
    pub(crate) control: ControlStatus,
    /// Hot-key counting, the keys in force and their reactions, with what only the
    /// operators' side asks of them (the table, the cluster's top).
    pub hotkeys: Arc<crate::hotkeys::HotKeys>,
    /// The live dashboard's recent frames and their viewers (sampled only where HTTP is served).
    pub(crate) dashboard: crate::dashboard::Hub,
    /// The live ledgers computed lately, shared by their viewers, and each viewer's allowance.
    pub(crate) ledgers: Arc<crate::reconcile::viewers::Ledgers>,
    /// The address this instance serves HTTP on, once bound (a rehearsal's load goes there).
    pub(crate) address: std::sync::OnceLock<std::net::SocketAddr>,
    /// The clock the leader's retention job reads ages by.
    pub retention: crate::retention::Retention,
    /// The clock due switch changes are read by.
    pub changes: crate::changes::Changes,
}

/// The sale storey's handles read as the state's own (`state.db`), so the operators' side
/// reads them as before, and a `&AppState` is a `&SaleState` where a sale use case asks one.
impl std::ops::Deref for Shared {
    type Target = SaleState;
    fn deref(&self) -> &SaleState {
        &self.sale
    }
}

/// Routes of the sale storey take a [`SaleState`] out of the whole state.
impl axum::extract::FromRef<AppState> for SaleState {
    fn from_ref(state: &AppState) -> Self {
        state.sale.clone()
    }
}
