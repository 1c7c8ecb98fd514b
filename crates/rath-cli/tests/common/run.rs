//! `rath` as a process with no `OPENRATH_HOME` or `OPENRATH_STORE`: its exit code, stdout
//! and stderr. A file of its own, so a test binary includes it (`#[path]`) without the rest
//! of `common`.

use std::process::Command;

/// Runs `rath args`: `(exit code, stdout, stderr)`, -1 when killed by a signal.
pub fn rath(args: &[&str]) -> (i32, String, String) {
    run(Command::new(env!("CARGO_BIN_EXE_rath")), args)
}

/// Runs `cmd` (`rath`, or a command that starts it) with `args`, as [`rath`] does.
pub fn run(mut cmd: Command, args: &[&str]) -> (i32, String, String) {
    let out = cmd
        .args(args)
        .env_remove("OPENRATH_HOME")
        .env_remove("OPENRATH_STORE")
        .output()
        .expect("run rath");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
