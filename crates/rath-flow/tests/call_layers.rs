//! A user-written layer installed on the context sees every model call and every tool call
//! of a team: its agents, the agents of a fan-out and a selector's own routing calls.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rath_flow::service::BoxFuture;
use rath_flow::{
    Agent, FlowContext, Layer, ModelCall, ModelService, Parallel, ROUTE_TOOL, RawTool, Selector,
    Sequence, ToolError, ToolOutput, ToolRequest, ToolService,
};
use rath_provider::{ProviderError, ProviderResponse, ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkKind, Session, Stamper};
use serde_json::json;

/// Counts the calls that pass through it, and who made them.
#[derive(Default)]
struct Tally {
    models: AtomicUsize,
    tools: AtomicUsize,
    callers: Mutex<Vec<String>>,
}

struct Counting(Arc<Tally>);
struct CountModels(Arc<Tally>, Arc<dyn ModelService>);
struct CountTools(Arc<Tally>, Arc<dyn ToolService>);

impl Layer for Counting {
    fn model(&self, inner: Arc<dyn ModelService>) -> Arc<dyn ModelService> {
        Arc::new(CountModels(self.0.clone(), inner))
    }
    fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
        Arc::new(CountTools(self.0.clone(), inner))
    }
}

impl ModelService for CountModels {
    fn call<'a>(
        &'a self,
        call: ModelCall<'a>,
    ) -> BoxFuture<'a, Result<ProviderResponse, ProviderError>> {
        self.0.models.fetch_add(1, Ordering::SeqCst);
        let who = call.agent().unwrap_or("-").to_owned();
        self.0.callers.lock().unwrap().push(format!("model:{who}"));
        self.1.call(call)
    }
}

impl ToolService for CountTools {
    fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        self.0.tools.fetch_add(1, Ordering::SeqCst);
        let who = call.context.agent().unwrap_or("-").to_owned();
        self.0
            .callers
            .lock()
            .unwrap()
            .push(format!("tool:{who}:{}", call.name()));
        self.1.call(call)
    }
}

fn echo() -> RawTool {
    RawTool::new(
        "echo",
        "Echo the arguments.",
        json!({"type": "object"}),
        |_cx, args| Box::pin(async move { Ok(ToolOutput::json(&args)) }),
    )
}

/// An agent that calls `echo` once, then answers.
fn worker(name: &str) -> Agent {
    let model = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(format!("{name}_c1"), "echo", json!({"who": name}))]),
        ScriptedResponse::text(format!("{name} done")),
    ]);
    Agent::new(name, "Work.", model)
        .describe("Works.")
        .with_tool(echo())
        .unwrap()
}

/// `Sequence[lead, Parallel[left, right], Selector(router → writer, then done)]`.
fn team() -> Sequence {
    let router = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(
            "r1",
            ROUTE_TOOL,
            json!({"choice": "writer", "reason": "write it up"}),
        )]),
        ScriptedResponse::tool_calls(vec![(
            "r2",
            ROUTE_TOOL,
            json!({"choice": "done", "reason": "written"}),
        )]),
    ]);
    Sequence::new("team")
        .then(worker("lead"))
        .then(
            Parallel::new("pair")
                .branch(worker("left"))
                .branch(worker("right")),
        )
        .then(Selector::by_model("router", router).candidate(worker("writer")))
}

#[tokio::test]
async fn a_user_layer_sees_every_model_and_tool_call_of_a_team() {
    let tally = Arc::new(Tally::default());
    let cx = FlowContext::new().with_layer(Counting(tally.clone()));
    let out = cx
        .forward(
            &team(),
            Session::user_with("Do the work.", Stamper::seeded(7)),
        )
        .await
        .expect("the team runs");
    assert_eq!(rath_flow::final_text(&out), Some("writer done"));

    // The calls on record in the stored session.
    let dir = tempfile::tempdir().unwrap();
    let store = rath_persist::Store::at(dir.path());
    store.save(&out).unwrap();
    let stored = store.load(out.id()).unwrap().session;
    let count = |kind: ChunkKind| stored.chunks().iter().filter(|c| c.kind() == kind).count();
    let (model_calls, tool_results) = (count(ChunkKind::ModelCall), count(ChunkKind::ToolResult));

    // Four agents with two model calls and one tool call each; two routing calls.
    assert_eq!((model_calls, tool_results), (10, 4));
    assert_eq!(tally.models.load(Ordering::SeqCst), model_calls);
    assert_eq!(tally.tools.load(Ordering::SeqCst), tool_results);
    let mut callers = tally.callers.lock().unwrap().clone();
    callers.sort();
    let mut want: Vec<String> = ["lead", "left", "right", "writer"]
        .iter()
        .flat_map(|a| {
            [
                format!("model:{a}"),
                format!("model:{a}"),
                format!("tool:{a}:echo"),
            ]
        })
        .chain(["model:router".to_owned(), "model:router".to_owned()])
        .collect();
    want.sort();
    assert_eq!(callers, want);
}

#[tokio::test]
async fn layers_nest_in_install_order_and_a_context_without_them_is_untouched() {
    // Two layers: the one installed last sees each call first.
    let order = Arc::new(Mutex::new(Vec::new()));
    struct Mark(&'static str, Arc<Mutex<Vec<&'static str>>>);
    struct Marked(
        &'static str,
        Arc<Mutex<Vec<&'static str>>>,
        Arc<dyn ToolService>,
    );
    impl Layer for Mark {
        fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
            Arc::new(Marked(self.0, self.1.clone(), inner))
        }
    }
    impl ToolService for Marked {
        fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
            self.1.lock().unwrap().push(self.0);
            self.2.call(call)
        }
    }
    let base = FlowContext::new();
    let cx = base
        .clone()
        .with_layer(Mark("inner", order.clone()))
        .with_layer(Mark("outer", order.clone()));
    let input = Session::user_with("go", Stamper::seeded(3));
    cx.forward(&worker("solo"), input.clone()).await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["outer", "inner"]);
    // The context the layered one was made from has no layer: nothing more is marked.
    base.forward(&worker("solo"), input).await.unwrap();
    assert_eq!(order.lock().unwrap().len(), 2);
}
