//! Reconciliation (placeholder header, rewritten below).

pub(crate) mod service;
