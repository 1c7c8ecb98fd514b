//! Overhead of our provider path per request against the mock server on loopback.
//!
//! `complete` and `stream` go through the whole stack (request building, async-openai,
//! reqwest, axum mock, parsing); `scripted` is the floor without any I/O.

use std::sync::OnceLock;

use rath_provider::mock::{MockReply, MockServer};
use rath_provider::{
    OpenAiConfig, OpenAiProvider, Provider, ProviderRequest, ScriptedProvider, ScriptedResponse,
};
use rath_session::{Session, Stamper};
use serde_json::json;

fn main() {
    divan::main();
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    _server: MockServer,
    provider: OpenAiProvider,
    request: ProviderRequest,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = rt.block_on(MockServer::start()).expect("mock server");
        server.set_fallback(Some(
            MockReply::tool_calls(vec![(
                "call_1",
                "word_count",
                json!({"text": "the quick brown fox"}),
            )])
            .usage(40, 12)
            .fragment(8),
        ));
        let provider = OpenAiProvider::new(OpenAiConfig::new(server.base_url(), "mock-model"))
            .expect("provider");
        let s = Session::system_with("You count words.", Stamper::counter()).push(
            rath_session::Chunk::user("How many words in 'the quick brown fox'?"),
        );
        let request = ProviderRequest::from_session(&s, vec![]);
        Fixture {
            rt,
            _server: server,
            provider,
            request,
        }
    })
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
