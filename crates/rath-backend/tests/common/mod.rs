//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::sync::Arc;

use rath_backend::isolated::IsolatedBackend;
use rath_backend::{Backend, DispatchContext, Output, Payload, ToolError};
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

/// The `isolated` backend, or `None` where bubblewrap cannot run (a [`rath_testkit::skip`]: under
/// `RATH_CI=1` the calling test fails, naming bubblewrap and why it cannot run).
pub fn isolated_or_skip(part: &str) -> Option<Arc<dyn Backend>> {
    let iso = IsolatedBackend::new();
    match iso.availability().reason() {
        None => Some(Arc::new(iso)),
        Some(reason) => {
            rath_testkit::skip(&format!(
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
