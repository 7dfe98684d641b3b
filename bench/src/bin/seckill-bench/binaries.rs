//! The binaries under test: `seckill` (server, worker and CLI) and `seckill-load`, built
//! with the release profile beside this binary's own target folder.

use anyhow::Context;
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// Where the release binaries are: `$CARGO_TARGET_DIR/release`, else the workspace's
/// `target/release`.
fn release_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("release")
}

/// Builds (when `build`) and finds the release binaries `names`, in that order.
pub fn prepare(root: &Path, build: bool, names: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    if build {
        eprintln!("[seckill-bench] building {} (release)", names.join(", "));
        let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        // Both packages, always: the dependencies' features then unify as for this binary's
        // own build, so neither build invalidates the other's artefacts.
        cargo.current_dir(root).args([
            "build",
            "--release",
            "-p",
            "seckill-server",
            "-p",
            "seckill-bench",
        ]);
        for name in names {
            cargo.args(["--bin", name]);
        }
        // What `cargo run` told this binary about itself: build scripts that watch these
        // (ring watches CARGO_MANIFEST_DIR) would otherwise rerun and rebuild the server.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                ]
                .contains(&name.as_ref())
            {
                cargo.env_remove(name.as_ref());
            }
        }
        let status = cargo.status().context("running cargo")?;
        anyhow::ensure!(status.success(), "cargo build failed ({status})");
    }
    let dir = release_dir(root);
    names
        .iter()
        .map(|name| {
            let path = dir.join(name);
            anyhow::ensure!(
                path.is_file(),
                "missing {} (build it: cargo build --release --bin {name})",
                path.display()
            );
            Ok(path)
        })
        .collect()
}
