//! The Anthropic provider against its mock, side by side with the OpenAI-compatible provider
//! against its mock: the same workload (the same request; a reply of one tool call with the
//! same arguments and usage, streamed in 8-character pieces), `complete` and `stream`, each
//! through the whole path (request building, HTTP on loopback, axum mock, parsing).
//!
//! `cargo bench -p rath-provider-anthropic --bench messages`; the acceptance bound is the
//! Anthropic path within 1.5x of the OpenAI path per call.

use std::sync::OnceLock;

use rath_provider::mock::{MockReply, MockServer};
use rath_provider::{OpenAiConfig, OpenAiProvider, Provider, ProviderRequest};
use rath_provider_anthropic::mock::{MockAnthropic, MockMessage};
use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};
use rath_session::{Chunk, Session, Stamper};
use serde_json::json;

fn main() {
    divan::main();
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    _openai_mock: MockServer,
    _anthropic_mock: MockAnthropic,
    openai: OpenAiProvider,
    anthropic: AnthropicProvider,
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
        let args = json!({"text": "the quick brown fox"});
        let openai_mock = rt.block_on(MockServer::start()).expect("openai mock");
        openai_mock.set_fallback(Some(
            MockReply::tool_calls(vec![("call_1", "word_count", args.clone())])
                .usage(40, 12)
                .fragment(8),
        ));
        let anthropic_mock = rt.block_on(MockAnthropic::start()).expect("anthropic mock");
        let mut reply = MockMessage::tool_use(vec![("call_1", "word_count", args)]).usage(40, 12);
        reply.fragment = 8;
        anthropic_mock.set_fallback(Some(reply));
        let openai = OpenAiProvider::new(
            OpenAiConfig::new(openai_mock.base_url(), "mock-model").with_api_key("sk-bench"),
        )
        .expect("openai provider");
        let anthropic = AnthropicProvider::new(AnthropicConfig::new(
            anthropic_mock.base_url(),
            "sk-bench",
            "claude-mock",
        ))
        .expect("anthropic provider");
        let s = Session::system_with("You count words.", Stamper::counter())
            .push(Chunk::user("How many words in 'the quick brown fox'?"));
        let request = ProviderRequest::from_session(&s, vec![]);
        Fixture {
            rt,
            _openai_mock: openai_mock,
            _anthropic_mock: anthropic_mock,
            openai,
            anthropic,
            request,
        }
    })
}

#[divan::bench(sample_count = 300)]
fn anthropic_complete(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.anthropic.complete(&f.request))
            .expect("complete")
    });
}

#[divan::bench(sample_count = 300)]
fn anthropic_stream(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.anthropic.stream(&f.request, &mut |_| {}))
            .expect("stream")
    });
}

#[divan::bench(sample_count = 300)]
fn openai_complete(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.openai.complete(&f.request))
            .expect("complete")
    });
}

#[divan::bench(sample_count = 300)]
fn openai_stream(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.rt.block_on(f.openai.stream(&f.request, &mut |_| {}))
            .expect("stream")
    });
}
