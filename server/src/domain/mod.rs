//! Business rules as plain types and functions, with no I/O: what a valid item or activity
//! is, which rows an admin actor may see or write, and the buy funnel's decisions.

pub mod access;
pub mod bloom;
pub mod catalog;
pub mod funnel;
pub mod order;
pub mod paging;
pub mod pipeline;
