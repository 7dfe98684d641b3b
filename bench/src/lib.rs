//! What the two binaries of the bench crate share: the machine's CPU time from `/proc/stat`.
//! The load tool reads it around its timed phase, `seckill-bench` around a whole
//! measurement.

pub mod machine;
