//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::sync::Arc;

use rath_backend::isolated::IsolatedBackend;
use rath_backend::{Backend, DispatchContext, Output, Payload, ToolError};
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

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

/// The `isolated` backend, or `None` where bubblewrap cannot run (a [`skip`]: under
/// `RATH_CI=1` the calling test fails, naming bubblewrap and why it cannot run).
pub fn isolated_or_skip(part: &str) -> Option<Arc<dyn Backend>> {
    let iso = IsolatedBackend::new();
    match iso.availability().reason() {
        None => Some(Arc::new(iso)),
        Some(reason) => {
            skip(&format!(
                "{part}: the isolated backend needs bubblewrap: {reason}"
            ));
            None
        }
    }
}

/// Opens a sandbox with a fresh temp workspace.
pub async fn open(b: &Arc<dyn Backend>) -> SandboxHandle {
    b.open(&SandboxSpec::default(), &Stamper::counter())
        .await
        .expect("open")
}

/// Dispatches `p`.
pub async fn run(b: &Arc<dyn Backend>, h: &SandboxHandle, p: Payload) -> Result<Output, ToolError> {
    b.dispatch(h, &p, &DispatchContext::new(&Stamper::counter()))
        .await
}

/// The workspace directory of a `local` or `isolated` sandbox.
pub fn root_of(h: &SandboxHandle) -> std::path::PathBuf {
    h.lease()
        .as_any()
        .downcast_ref::<rath_backend::local::LocalSandbox>()
        .expect("a local sandbox")
        .root()
        .to_path_buf()
}
