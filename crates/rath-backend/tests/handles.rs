//! Handle lifetime: shared by forks, closed exactly once, kept by merge, merge refused across
//! different live handles.

use rath_backend::local::LocalBackend;
use rath_backend::{BackendRegistry, Payload, ToolErrorKind};
use rath_session::{Session, SessionError, Stamper};

fn registry(backend: &LocalBackend) -> BackendRegistry {
    BackendRegistry::new().with(backend.clone())
}

#[tokio::test]
async fn forks_share_the_handle_and_the_last_drop_closes_it_once() {
    let backend = LocalBackend::new();
    let reg = registry(&backend);
    let session = Session::user_with("hi", Stamper::counter()).to("local");
    let fork = session.fork();
    let handle = reg.sandbox_for(&fork).await.unwrap();
    let root = handle
        .lease()
        .as_any()
        .downcast_ref::<rath_backend::local::LocalSandbox>()
        .unwrap()
        .root()
        .to_path_buf();
    assert!(root.is_dir());
    assert_eq!(handle.id(), "sbx_000001");
    assert_eq!(session.placement().handle().unwrap().id(), handle.id());
    let grandchild = fork.fork();
    assert_eq!(grandchild.placement().handle_id(), Some(handle.id()));

    drop(session);
    drop(fork);
    assert_eq!(backend.closed_count(), 0);
    drop(handle);
    assert_eq!(backend.closed_count(), 0, "the grandchild still holds it");
    drop(grandchild);
    assert_eq!(backend.closed_count(), 1);
    assert!(!root.exists(), "the owned temp dir is removed on close");
}

#[tokio::test]
async fn explicit_close_then_drop_counts_once() {
    let backend = LocalBackend::new();
    let reg = registry(&backend);
    let session = Session::user_with("hi", Stamper::counter()).to("local");
    let h = reg.sandbox_for(&session).await.unwrap();
    reg.close(&h).await.unwrap();
    assert!(!h.is_live());
    assert_eq!(backend.closed_count(), 1);
    let d = reg
        .dispatch(&h, &Payload::exists("."), session.stamper())
        .await;
    assert_eq!(d.outcome.unwrap_err().kind, ToolErrorKind::SandboxClosed);
    assert_eq!(d.evidence.outcome, "sandbox_closed");
    drop(h);
    drop(session);
    assert_eq!(backend.closed_count(), 1);
}

#[tokio::test]
async fn merge_keeps_the_shared_handle() {
    let backend = LocalBackend::new();
    let reg = registry(&backend);
    let session = Session::user_with("hi", Stamper::counter()).to("local");
    let h = reg.sandbox_for(&session).await.unwrap();
    let (a, b) = (session.fork(), session.fork());
    let merged = a.merge(&b).unwrap();
    assert_eq!(merged.placement().handle().unwrap().id(), h.id());
    assert!(merged.placement().handle().unwrap().is_live());
    drop((session, a, b, h));
    assert_eq!(backend.closed_count(), 0, "the merged session keeps it");
    assert_eq!(reg.sandbox_for(&merged).await.unwrap().id(), "sbx_000001");
    drop(merged);
    assert_eq!(backend.closed_count(), 1);
}

#[tokio::test]
async fn merging_different_live_handles_is_refused() {
    let backend = LocalBackend::new();
    let reg = registry(&backend);
    let stamper = Stamper::counter();
    let a = Session::user_with("a", stamper.clone()).to("local");
    let b = Session::user_with("b", stamper).to("local");
    let ha = reg.sandbox_for(&a).await.unwrap();
    let hb = reg.sandbox_for(&b).await.unwrap();
    assert_ne!(ha.id(), hb.id());
    assert!(matches!(
        a.merge(&b),
        Err(SessionError::MergeRefused { .. })
    ));
}

#[tokio::test]
async fn unplaced_and_unknown_backends_are_typed_errors() {
    let reg = BackendRegistry::with_defaults();
    let s = Session::user_with("hi", Stamper::counter());
    assert!(matches!(
        reg.sandbox_for(&s).await,
        Err(rath_backend::BackendError::Unplaced { .. })
    ));
    let s = s.to("nowhere");
    match reg.sandbox_for(&s).await {
        Err(rath_backend::BackendError::UnknownBackend { name, known }) => {
            assert_eq!(name, "nowhere");
            assert_eq!(known, vec!["isolated".to_owned(), "local".to_owned()]);
        }
        other => panic!("{other:?}"),
    }
}
