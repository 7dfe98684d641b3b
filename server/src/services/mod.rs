//! What an admin actor can do, shared by the admin API and the console: each operation
//! checks the actor's role and scope, validates with `domain`, then calls `storage`.

pub mod catalog;
