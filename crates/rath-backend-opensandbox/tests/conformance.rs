//! The shared conformance suite, run against the OpenSandbox client and a mock server built
//! from the published specs; plus lifecycle checks (close once, attach, renew, auth, env).

mod mock;

use std::sync::Arc;

use rath_backend::{
    Backend, BackendError, BackendRegistry, CommandPayload, Output, Payload, conformance,
};
use rath_backend_opensandbox::{OpenSandboxBackend, OpenSandboxConfig};
use rath_session::{Session, Stamper};

async fn backend() -> (Arc<mock::Mock>, OpenSandboxBackend) {
    let (mock, url) = mock::Mock::start().await;
    (
        mock,
        OpenSandboxBackend::new(OpenSandboxConfig::new(url).api_key(mock::API_KEY)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opensandbox_conforms_against_the_mock() {
    let (mock, b) = backend().await;
    let report = conformance::run_all(Arc::new(b)).await;
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
    // Every sandbox the suite opened was deleted again (explicitly or by the last drop).
    for _ in 0..50 {
        if mock.live_sandboxes() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(mock.live_sandboxes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_drop_deletes_the_sandbox_once() {
    let (mock, b) = backend().await;
    let reg = BackendRegistry::new().with(b.clone());
    let s = Session::user_with("hi", Stamper::counter()).to("opensandbox");
    let f = s.fork();
    let h = reg.sandbox_for(&f).await.unwrap();
    assert_eq!(
        h.id(),
        "sbx-0001",
        "the handle id is the server's sandbox id"
    );
    assert_eq!(s.placement().handle_id(), Some("sbx-0001"));
    let d = reg
        .dispatch(
            &h,
            &Payload::Command(CommandPayload::argv(["echo", "x"])),
            s.stamper(),
        )
        .await;
    assert_eq!(d.evidence.backend, "opensandbox");
    assert_eq!(d.evidence.handle_id, "sbx-0001");
    drop((s, f, h));
    for _ in 0..50 {
        if !mock.deletes.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(*mock.deletes.lock().unwrap(), vec!["sbx-0001".to_owned()]);
    assert_eq!(b.closed_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_renew_and_close() {
    let (mock, b) = backend().await;
    let h = b
        .open(&Default::default(), &Stamper::counter())
        .await
        .unwrap();
    let again = b.attach(h.id()).await.unwrap();
    assert_eq!(again.id(), h.id());
    b.dispatch(
        &h,
        &Payload::write("f.txt", "shared"),
        &rath_backend::DispatchContext::new(&Stamper::counter()),
    )
    .await
    .unwrap();
    let read = b
        .dispatch(
            &again,
            &Payload::read("f.txt"),
            &rath_backend::DispatchContext::new(&Stamper::counter()),
        )
        .await
        .unwrap();
    assert_eq!(read, Output::FileContent(b"shared".to_vec()));
    assert_eq!(
        b.renew(&h, "2030-01-01T00:00:00Z").await.unwrap(),
        "2030-01-01T00:00:00Z"
    );
    b.close(&h).await.unwrap();
    b.close(&h).await.unwrap();
    assert_eq!(*mock.deletes.lock().unwrap(), vec![h.id().to_owned()]);
    assert!(b.attach("sbx-9999").await.is_err());
}

#[tokio::test]
async fn a_wrong_api_key_is_an_http_error() {
    let (_mock, url) = mock::Mock::start().await;
    let b = OpenSandboxBackend::new(OpenSandboxConfig::new(url).api_key("wrong"));
    match b.open(&Default::default(), &Stamper::counter()).await {
        Err(BackendError::Http {
            status: Some(401), ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn unavailable_without_a_domain() {
    if std::env::var_os("OPEN_SANDBOX_DOMAIN").is_some() {
        // This environment names a server: run this test again in a child process without
        // it (never a skip).
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "unavailable_without_a_domain"])
            .env_remove("OPEN_SANDBOX_DOMAIN")
            .env_remove("OPEN_SANDBOX_API_KEY")
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}"
        );
        return;
    }
    let b = OpenSandboxBackend::from_env();
    let reason = b
        .availability()
        .reason()
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(reason.contains("OPEN_SANDBOX_DOMAIN"), "{reason}");
}
