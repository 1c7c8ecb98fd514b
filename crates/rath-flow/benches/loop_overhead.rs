//! Loop overhead per round: 200 rounds, each a scripted model call requesting one no-op
//! tool call, then a final answer. Divide the reported time by 200 for µs/round.
//!
//! `canned` uses a minimal provider that serves pre-built responses without logging
//! requests (the loop's own cost); `scripted` uses `rath_provider::ScriptedProvider`, which
//! also clones every request into its log (quadratic in history length).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rath_flow::{
    FlowContext, LoopOptions, SessionLoop, ToolContext, ToolError, ToolSet, typed_tool,
};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_session::{Chunk, Session, Stamper, ToolCall, Usage};
use serde_json::json;

const ROUNDS: usize = 200;

fn main() {
    divan::main();
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn noop_tools() -> ToolSet {
    ToolSet::new()
        .with(
            typed_tool("noop", "Does nothing.", |_cx: ToolContext, _a: NoArgs| async move {
                Ok::<_, ToolError>(json!({"ok": true}))
            })
            .parallel_safe(true),
        )
        .expect("tools")
}

struct Canned {
    responses: Vec<(Chunk, Option<String>)>,
    next: AtomicUsize,
}

impl Canned {
    fn new() -> Self {
        let mut responses: Vec<(Chunk, Option<String>)> = (0..ROUNDS)
            .map(|i| {
                (
                    Chunk::assistant(
                        None,
                        Some(vec![ToolCall::function(format!("call_{i}"), "noop", "{}")]),
                    ),
                    Some("tool_calls".to_owned()),
                )
            })
            .collect();
        responses.push((Chunk::assistant_text("done"), Some("stop".to_owned())));
        Self {
            responses,
            next: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Provider for Canned {
    fn name(&self) -> &str {
        "canned"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let (chunk, finish) = self
            .responses
            .get(i)
            .cloned()
            .ok_or(ProviderError::ScriptExhausted { served: i })?;
        Ok(ProviderResponse {
            request_id: req.request_id.clone(),
            chunk,
            finish_reason: finish,
            usage: Some(Usage::new(10, 1)),
            model: None,
            provider: "canned".to_owned(),
            detail: Default::default(),
        })
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("canned")
    }
}

fn scripted() -> ScriptedProvider {
    let mut r: Vec<ScriptedResponse> = (0..ROUNDS)
        .map(|i| {
            ScriptedResponse::tool_calls(vec![(format!("call_{i}"), "noop", json!({}))])
                .usage(10, 1)
        })
        .collect();
    r.push(ScriptedResponse::text("done").usage(10, 1));
    ScriptedProvider::new(r)
}

fn run(bencher: divan::Bencher, make: fn() -> Arc<dyn Provider>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tools = noop_tools();
    let options = LoopOptions::default().max_tool_rounds(ROUNDS + 1);
    bencher
        .with_inputs(|| {
            let stamper = Stamper::counter();
            (
                make(),
                Session::system_with("sys", stamper.clone()),
                Session::user_with("go", stamper),
                FlowContext::new(),
            )
        })
        .bench_local_values(|(provider, agent, user, cx)| {
            let looper = SessionLoop::new(provider, tools.clone()).with_options(options.clone());
            let out = rt.block_on(looper.run(&user, &agent, &cx)).expect("loop");
            assert_eq!(out.conversation_len(), 2 + 2 * ROUNDS);
            // The context (its lineage journal holds the run's sessions) is returned with the
            // output, so both are dropped outside the timed region, as the output always was.
            (out, cx)
        });
}

/// 200 rounds with the minimal canned provider (loop cost only).
#[divan::bench(sample_count = 30)]
fn loop_200_rounds_canned(bencher: divan::Bencher) {
    run(bencher, || Arc::new(Canned::new()));
}

/// 200 rounds with `ScriptedProvider` (includes its request logging).
#[divan::bench(sample_count = 30)]
fn loop_200_rounds_scripted(bencher: divan::Bencher) {
    run(bencher, || Arc::new(scripted()));
}

/// 200 rounds with evidence chunks turned off.
#[divan::bench(sample_count = 30)]
fn loop_200_rounds_canned_no_evidence(bencher: divan::Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tools = noop_tools();
    let options = LoopOptions::default()
        .max_tool_rounds(ROUNDS + 1)
        .evidence(false);
    bencher
        .with_inputs(|| {
            let stamper = Stamper::counter();
            (
                Arc::new(Canned::new()) as Arc<dyn Provider>,
                Session::system_with("sys", stamper.clone()),
                Session::user_with("go", stamper),
                FlowContext::new(),
            )
        })
        .bench_local_values(|(provider, agent, user, cx)| {
            let looper = SessionLoop::new(provider, tools.clone()).with_options(options.clone());
            let out = rt.block_on(looper.run(&user, &agent, &cx)).expect("loop");
            (out, cx)
        });
}
