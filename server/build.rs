//! Rebuilds the server when a migration is added, changed or removed: `sqlx::migrate!`
//! embeds the folder at compile time, and cargo would not otherwise know the binary depends
//! on it (a new migration left a stale binary that never ran it).
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
