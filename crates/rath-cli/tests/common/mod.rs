//! Shared by the CLI tests that run `rath` on a store an example left behind.

use std::path::Path;
use std::process::Command;

/// Runs `rath` in `cwd` (with no `OPENRATH_HOME`) and returns `exit / stdout / stderr` as one
/// text, for snapshots.
pub fn rath(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .current_dir(cwd)
        .env_remove("OPENRATH_HOME")
        .output()
        .expect("run rath");
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
