//! `rath serve` as a child process on SQLite files, and the address it announces. A file of
//! its own, so a test binary includes it (`#[path]`) without the rest of `common`.

use std::process::{Command, Stdio};

/// A `rath serve` on SQLite files in `dir`, with `env` (stderr piped).
pub fn serve(dir: &std::path::Path, env: &[(&str, &str)]) -> std::process::Child {
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    cmd.args([
        "--store",
        &store,
        "serve",
        "--runs",
        &runs,
        "--bind",
        "127.0.0.1:0",
    ])
    .env_remove("OPENRATH_HOME")
    .env_remove("OPENRATH_STORE")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn rath serve")
}

/// The address `rath serve` announces on stderr (log lines may come first).
pub fn served_at(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> String {
    for line in lines.by_ref() {
        let line = line.expect("read rath serve's stderr");
        if let Some(rest) = line.split("serving on http://").nth(1) {
            return rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    }
    panic!("rath serve exited without announcing its address");
}
