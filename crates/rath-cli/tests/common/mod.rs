//! Shared by the CLI tests: a runner for `rath`, and generators of stores to run it on.
#![allow(dead_code)] // each test binary uses its own part

pub mod big;

use std::path::Path;
use std::process::Command;

/// True under CI (`RATH_CI` set and not `0`; `.ci/run` sets `RATH_CI=1`), where a missing
/// prerequisite fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("RATH_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test's prerequisite `what` is missing (name it and say how to get it). Under
/// `RATH_CI=1` this panics, failing the calling test; locally it prints the one marker line
/// `RATH-SKIP: <test>: <what>` and returns, and the caller returns early. The line goes
/// straight to stderr, past the harness's output capture, so `cargo test` shows what was
/// skipped and the `test_report` packet counts it as skipped, not passed (docs/TESTING.md).
pub fn skip(what: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned();
    let what = what.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !in_ci(),
        "{test}: RATH_CI=1 and a prerequisite is missing: {what}"
    );
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "RATH-SKIP: {test}: {what}");
}

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

/// Writes a closed session file by hand (so the header id and the file name can disagree):
/// `<dir>/<file>` with header id `id`, `parents`, and one user chunk per text.
pub fn write_raw_session(dir: &Path, file: &str, id: &str, parents: &[&str], texts: &[&str]) {
    let q = |s: &str| serde_json::to_string(s).expect("json string");
    let parents: Vec<String> = parents.iter().map(|p| q(p)).collect();
    let mut out = format!(
        "{{\"record_type\": \"header\", \"schema_version\": 1, \"id\": {}, \"created_at\": \"2026-01-01T00:00:0{}+00:00\", \"parent_session_ids\": [{}], \"lineage_operator\": \"hand\", \"lineage_kind\": \"{}\", \"lineage_extras\": [], \"sandbox_backend\": null, \"sandbox_spec\": null, \"sandbox_handle_id\": null}}\n",
        q(id),
        parents.len(),
        parents.join(", "),
        if parents.is_empty() {
            "leaf_user"
        } else {
            "op_fork"
        }
    );
    for (i, t) in texts.iter().enumerate() {
        out.push_str(&format!(
            "{{\"record_type\": \"chunk\", \"index\": {i}, \"kind\": \"user\", \"payload\": {{\"content\": {}}}}}\n",
            q(t)
        ));
    }
    out.push_str(&format!(
        "{{\"record_type\": \"trailer\", \"closed_at\": \"2026-01-01T00:01:00+00:00\", \"final_chunk_count\": {}, \"cumulative_usage\": null}}\n",
        texts.len()
    ));
    std::fs::write(dir.join(file), out).expect("write session");
}
