//! Library half of `cargo xtask`, so its tests (`xtask/tests/`) can reach the packet code.
//!
//! - [`evidence`]: the packet framework (`cargo xtask evidence [--only NAME] [--check]`) and
//!   every packet's workload.
//! - [`ledger`]: `evidence/ledger.toml`, its checks and `evidence/LEDGER.md`.
//! - [`leaks`]: the scanner that keeps secrets, home directories and machine paths out of
//!   committed packets.
//! - [`prereq`]: what each packet needs from the machine, checked before anything runs.
//! - [`setup`]: `cargo xtask setup`, which runs the `.ci/install.d` parts and saves what
//!   they export for the other commands.

pub mod evidence;
pub mod leaks;
pub mod ledger;
pub mod prereq;
pub mod setup;

use std::path::{Path, PathBuf};

/// The workspace root (the directory holding the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `../shared` beside the workspace (reference data; read in place, never copied by path).
pub fn shared_dir() -> PathBuf {
    workspace_root().join("../shared")
}
