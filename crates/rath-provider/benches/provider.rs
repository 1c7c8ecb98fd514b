//! Overhead of our provider path per request against the mock server on loopback.
//!
//! `complete` and `stream` go through the whole stack (request building, async-openai,
//! reqwest, axum mock, parsing); `scripted` is the floor without any I/O.

use std::sync::OnceLock;

use rath_provider::mock::workload::Baseline;
use rath_provider::{Provider, ScriptedProvider, ScriptedResponse};

fn main() {
    divan::main();
}

/// The shared workload (`rath_provider::mock::workload`): the OpenAI-compatible provider
/// over the mock, one tool-call reply streamed in 8-character pieces.
fn fixture() -> &'static Baseline {
    static F: OnceLock<Baseline> = OnceLock::new();
    F.get_or_init(|| Baseline::start().expect("the benchmark baseline"))
}

#[divan::bench(sample_count = 200)]
fn complete_via_mock(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.provider.complete(&f.request))
            .expect("complete")
    });
}

#[divan::bench(sample_count = 200)]
fn stream_via_mock(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.provider.stream(&f.request, &mut |_| {}))
            .expect("stream")
    });
}

#[divan::bench(sample_count = 200)]
fn scripted_floor(bencher: divan::Bencher) {
    let f = fixture();
    bencher
        .with_inputs(|| ScriptedProvider::new(vec![ScriptedResponse::text("four").usage(40, 1)]))
        .bench_values(|p| f.rt.block_on(p.complete(&f.request)).expect("scripted"));
}
