//! Business rules as plain types and functions, with no I/O: what a valid item or activity
//! is, and which rows an admin actor may see or write.

pub mod access;
pub mod catalog;
