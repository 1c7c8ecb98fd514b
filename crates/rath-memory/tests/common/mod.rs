//! Shared by the integration tests: a missing prerequisite skips locally and fails in CI.
#![allow(dead_code)] // each test binary uses the part it needs

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
