//! The conformance suite against `local` and `isolated`.

mod common;

use std::sync::Arc;

use rath_backend::conformance;
use rath_backend::local::LocalBackend;

#[tokio::test]
async fn local_conforms() {
    let report = conformance::run_all(Arc::new(LocalBackend::new())).await;
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.passed.len(), conformance::CHECKS.len());
}

#[tokio::test]
async fn isolated_conforms() {
    let Some(backend) = common::isolated_or_skip("isolated conformance") else {
        return;
    };
    let report = conformance::run_all(backend).await;
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
}
