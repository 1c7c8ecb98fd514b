//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::sync::Arc;

use rath_backend::isolated::IsolatedBackend;
use rath_backend::{Backend, DispatchContext, Output, Payload, ToolError};
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

/// True under CI (`RATH_CI=1`), where a missing prerequisite is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("RATH_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The `isolated` backend, or `None` (with the reason printed) where bubblewrap cannot run.
/// Under `RATH_CI=1` a missing bubblewrap fails the test instead.
pub fn isolated_or_skip(test: &str) -> Option<Arc<dyn Backend>> {
    let iso = IsolatedBackend::new();
    match iso.availability().reason() {
        None => Some(Arc::new(iso)),
        Some(reason) if in_ci() => {
            panic!("{test}: RATH_CI=1 and isolated is unavailable: {reason}")
        }
        Some(reason) => {
            eprintln!("skipping {test} (isolated): {reason}");
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
