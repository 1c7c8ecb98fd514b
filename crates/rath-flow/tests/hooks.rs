//! Memory hook and observer events around an agent's loop.

use std::sync::{Arc, Mutex};

use rath_flow::{Agent, FlowContext, FlowEvent, PolicyMemory, ToolSet, Workflow, WorkflowExt};
use rath_memory::{CommitPolicy, LocalMemory, MemoryPolicy, RecallPolicy, Scope};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkKind, Role, Session, Stamper};
use serde_json::json;

#[tokio::test]
async fn memory_commits_then_recalls_into_the_transcript() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mem = LocalMemory::open_at(dir.path(), "notes", Default::default()).expect("memory");
    let hook = Arc::new(PolicyMemory::new(
        MemoryPolicy {
            recall: Some(RecallPolicy::new(Scope::Agent, 3)),
            commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
        },
        Arc::new(mem),
    ));
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::text("Descale the kettle monthly."),
        ScriptedResponse::text("Monthly, as noted before."),
    ]));
    let agent = Agent::new("helper", "Help.", provider.clone()).with_memory(hook);
    let stamper = Stamper::counter();
    let first = agent
        .run(Session::user_with(
            "How often should I descale the kettle?",
            stamper.clone(),
        ))
        .await
        .expect("first");
    assert_eq!(first.last().map(|c| c.kind()), Some(ChunkKind::MemoryEvent));

    let second = agent
        .run(Session::user_with("kettle descale schedule?", stamper))
        .await
        .expect("second");
    let kinds: Vec<ChunkKind> = second.chunks().iter().map(|c| c.kind()).collect();
    assert_eq!(
        &kinds[..3],
        [ChunkKind::User, ChunkKind::MemoryEvent, ChunkKind::System]
    );
    // The injected memory reached the model, and it is in the transcript.
    let req = &provider.requests()[1];
    let injected = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .nth(1)
        .and_then(|m| m.content.clone())
        .expect("injected system message");
    assert!(injected.contains("monthly"), "{injected}");
    assert_eq!(second.chunks()[2].text(), Some(injected.as_str()));
}

#[tokio::test]
async fn observer_sees_agents_requests_replies_deltas_tools_usage_and_sessions() {
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let l = log.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        let tag = match ev {
            FlowEvent::Request { .. } => "request".to_owned(),
            FlowEvent::TextDelta { text, .. } => format!("delta:{text}"),
            FlowEvent::ToolStart { call, .. } => format!("start:{}", call.function.name),
            FlowEvent::ToolEnd { outcome, .. } => format!("end:{outcome}"),
            FlowEvent::Usage { usage, .. } => format!("usage:{}", usage.total_tokens),
            FlowEvent::Session { session } => format!("session:{}", session.lineage().kind),
            FlowEvent::Reply { outcome, .. } => format!("reply:{}", outcome.is_ok()),
            FlowEvent::AgentStart { agent, .. } => format!("agent_start:{agent}"),
            FlowEvent::AgentEnd { agent, outcome } => {
                format!("agent_end:{agent}:{}", outcome.is_ok())
            }
            _ => "other".to_owned(),
        };
        l.lock().expect("log").push(tag);
    });
    let cx = cx.with_text_deltas(true);
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![
            ("c1", "nope", json!({})),
            ("c2", "echo", json!({"x": 1})),
        ])
        .usage(3, 1),
        ScriptedResponse::text("ok").usage(5, 1),
    ]));
    let echo = rath_flow::RawTool::new("echo", "Echo.", json!({"type": "object"}), |_cx, args| {
        Box::pin(async move { Ok(rath_flow::ToolOutput::json(&args)) })
    });
    let agent =
        Agent::new("a", "sys", provider).with_tools(ToolSet::new().with(echo).expect("tools"));
    agent
        .forward(Session::user_with("hi", Stamper::counter()), &cx)
        .await
        .expect("forward");
    let log = log.lock().expect("log").clone();
    assert_eq!(
        log,
        [
            "agent_start:a",
            "session:leaf_user",
            "session:leaf_system",
            "request",
            "reply:true",
            "usage:4",
            "start:echo",
            "end:ok",
            "request",
            "delta:ok",
            "reply:true",
            "usage:6",
            "session:op_session_loop",
            "agent_end:a:true"
        ]
    );
}

/// Counts which provider call the loop makes.
struct CountingProvider {
    inner: ScriptedProvider,
    streams: std::sync::atomic::AtomicUsize,
    completes: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl rath_provider::Provider for CountingProvider {
    fn name(&self) -> &str {
        "counting"
    }
    async fn complete(
        &self,
        req: &rath_provider::ProviderRequest,
    ) -> Result<rath_provider::ProviderResponse, rath_provider::ProviderError> {
        self.completes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.complete(req).await
    }
    async fn stream(
        &self,
        req: &rath_provider::ProviderRequest,
        sink: &mut rath_provider::StreamSink<'_>,
    ) -> Result<rath_provider::ProviderResponse, rath_provider::ProviderError> {
        self.streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.stream(req, sink).await
    }
    fn manifest(&self) -> rath_provider::ProviderManifest {
        rath_provider::ProviderManifest::new("counting")
    }
}

/// The loop asks for a stream only when someone consumes the deltas: an observer that
/// asked for them. An observer alone (progress lines, session tracking) gets plain calls.
#[tokio::test]
async fn a_stream_is_requested_only_when_deltas_are_consumed() {
    use std::sync::atomic::Ordering::Relaxed;
    for (observer, deltas, expect_stream) in [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (true, true, true),
    ] {
        let provider = Arc::new(CountingProvider {
            inner: ScriptedProvider::new(vec![ScriptedResponse::text("ok").usage(2, 1)]),
            streams: Default::default(),
            completes: Default::default(),
        });
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut cx = FlowContext::new().with_text_deltas(deltas);
        if observer {
            let log = seen.clone();
            cx = cx.with_observer(move |ev: &FlowEvent<'_>| {
                if let FlowEvent::TextDelta { text, .. } = ev {
                    log.lock().expect("log").push((*text).to_owned());
                }
            });
        }
        assert_eq!(cx.wants_text_deltas(), expect_stream);
        let agent = Agent::new("a", "sys", provider.clone());
        let out = agent
            .forward(Session::user_with("hi", Stamper::counter()), &cx)
            .await
            .expect("forward");
        assert_eq!(
            out.messages()
                .last()
                .and_then(|m| m.content.clone())
                .as_deref(),
            Some("ok")
        );
        let (streams, completes) = (
            provider.streams.load(Relaxed),
            provider.completes.load(Relaxed),
        );
        assert_eq!(
            (streams, completes),
            if expect_stream { (1, 0) } else { (0, 1) },
            "observer={observer} deltas={deltas}"
        );
        let seen = seen.lock().expect("log").clone();
        assert_eq!(seen.is_empty(), !expect_stream, "{seen:?}");
    }
}
