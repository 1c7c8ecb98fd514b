//! The Anthropic provider against its mock, side by side with the OpenAI-compatible provider
//! against its mock: the same workload (the same request; a reply of one tool call with the
//! same arguments and usage, streamed in 8-character pieces), `complete` and `stream`, each
//! through the whole path (request building, HTTP on loopback, axum mock, parsing).
//!
//! `cargo bench -p rath-provider-anthropic --bench messages`; the acceptance bound is the
//! Anthropic path within 1.5x of the OpenAI path per call.

use std::sync::OnceLock;

use rath_provider::Provider;
use rath_provider::mock::workload::{self, Baseline};
use rath_provider_anthropic::mock::{MockAnthropic, MockMessage};
use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};

fn main() {
    divan::main();
}

/// The OpenAI-compatible baseline of the shared workload (`rath_provider::mock::workload`),
/// and the Anthropic provider over its mock answering with the same tool call.
struct Fixture {
    base: Baseline,
    _anthropic_mock: MockAnthropic,
    anthropic: AnthropicProvider,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let base = Baseline::start().expect("the benchmark baseline");
        let anthropic_mock = base
            .rt
            .block_on(MockAnthropic::start())
            .expect("anthropic mock");
        let (prompt, completion) = workload::USAGE;
        let mut reply = MockMessage::tool_use(vec![(
            workload::CALL_ID,
            workload::TOOL,
            workload::arguments(),
        )])
        .usage(prompt, completion);
        reply.fragment = workload::FRAGMENT;
        anthropic_mock.set_fallback(Some(reply));
        let anthropic = AnthropicProvider::new(AnthropicConfig::new(
            anthropic_mock.base_url(),
            workload::API_KEY,
            "claude-mock",
        ))
        .expect("anthropic provider");
        Fixture {
            base,
            _anthropic_mock: anthropic_mock,
            anthropic,
        }
    })
}

#[divan::bench(sample_count = 300)]
fn anthropic_complete(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.base
            .rt
            .block_on(f.anthropic.complete(&f.base.request))
            .expect("complete")
    });
}

#[divan::bench(sample_count = 300)]
fn anthropic_stream(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.base
            .rt
            .block_on(f.anthropic.stream(&f.base.request, &mut |_| {}))
            .expect("stream")
    });
}

#[divan::bench(sample_count = 300)]
fn openai_complete(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.base
            .rt
            .block_on(f.base.provider.complete(&f.base.request))
            .expect("complete")
    });
}

#[divan::bench(sample_count = 300)]
fn openai_stream(bencher: divan::Bencher) {
    let f = fixture();
    bencher.bench(|| {
        f.base
            .rt
            .block_on(f.base.provider.stream(&f.base.request, &mut |_| {}))
            .expect("stream")
    });
}
