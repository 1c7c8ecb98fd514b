//! The conformance suite against `local` and `isolated`.

use std::sync::Arc;

use rath_backend::isolated::IsolatedBackend;
use rath_backend::local::LocalBackend;
use rath_backend::{Backend, conformance};

#[tokio::test]
async fn local_conforms() {
    let report = conformance::run_all(Arc::new(LocalBackend::new())).await;
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.passed.len(), conformance::CHECKS.len());
}

#[tokio::test]
async fn isolated_conforms() {
    let backend = IsolatedBackend::new();
    if let Some(reason) = backend.availability().reason() {
        eprintln!("skipping isolated conformance: {reason}");
        return;
    }
    let report = conformance::run_all(Arc::new(backend)).await;
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
}
