//! What the tests stand on, and nothing they assert: the server under test and how to call
//! it (`app`), what they set up (`fixtures`), the one way to wait (`wait`), and the stand-ins
//! that make a shared service fail for one test (`proxy` for a TCP service, `etcd` for a
//! private etcd).

pub(crate) mod app;
pub(crate) mod etcd;
pub(crate) mod fixtures;
pub(crate) mod proxy;
pub(crate) mod wait;
