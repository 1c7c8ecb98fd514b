//! Overhead of running `true`: a bare `std::process::Command`, `local`, and `isolated`.

use std::sync::Arc;

use rath_backend::isolated::IsolatedBackend;
use rath_backend::local::LocalBackend;
use rath_backend::{Backend, CommandPayload, DispatchContext, Payload};
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

fn main() {
    divan::main();
}

fn setup(backend: Arc<dyn Backend>) -> (tokio::runtime::Runtime, Arc<dyn Backend>, SandboxHandle) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let handle = rt
        .block_on(backend.open(&SandboxSpec::default(), &Stamper::counter()))
        .expect("open");
    (rt, backend, handle)
}

fn run_true(rt: &tokio::runtime::Runtime, b: &Arc<dyn Backend>, h: &SandboxHandle) {
    let payload = Payload::Command(CommandPayload::argv(["true"]));
    let cx = DispatchContext::new(&Stamper::counter());
    let out = rt.block_on(b.dispatch(h, &payload, &cx));
    assert!(out.is_ok());
}

#[divan::bench(sample_count = 100)]
fn bare_std_command() {
    let status = std::process::Command::new("true").status().expect("true");
    assert!(status.success());
}

#[divan::bench(sample_count = 100)]
fn local_true(bencher: divan::Bencher) {
    let (rt, b, h) = setup(Arc::new(LocalBackend::new()));
    bencher.bench_local(|| run_true(&rt, &b, &h));
}

#[divan::bench(sample_count = 50)]
fn isolated_true(bencher: divan::Bencher) {
    let backend = IsolatedBackend::new();
    if let Some(reason) = backend.availability().reason() {
        eprintln!("isolated_true skipped: {reason}");
        return;
    }
    let (rt, b, h) = setup(Arc::new(backend));
    bencher.bench_local(|| run_true(&rt, &b, &h));
}
