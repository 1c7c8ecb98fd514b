//! The openrath **flow layer**: tools, the session loop, agents, workflows, selectors,
//! compressors and tool policy. Every component is `Session → Session`; none keeps a
//! private transcript.
//!
//! ```
//! use rath_flow::{Agent, WorkflowExt, typed_tool};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Args { text: String }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let wc = typed_tool("word_count", "Count words.", |_cx, a: Args| async move {
//!     Ok(json!({"words": a.text.split_whitespace().count()}))
//! });
//! let provider = ScriptedProvider::new(vec![
//!     ScriptedResponse::tool_calls(vec![("c1", "word_count", json!({"text": "a b c"}))]).usage(40, 12),
//!     ScriptedResponse::text("3 words.").usage(70, 11),
//! ]);
//! let agent = Agent::new("counter", "Use tools.", provider).with_tool(wc)?;
//! let out = agent.run(Session::user_with("Count 'a b c'.", Stamper::counter())).await?;
//! let texts: Vec<_> = out.conversation().filter_map(|c| c.text()).collect();
//! assert_eq!(texts, ["Count 'a b c'.", r#"{"words": 3}"#, "3 words."]);
//! assert_eq!(out.usage().unwrap().total_tokens, 133);
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! - [`Tool`], [`typed_tool`], [`RawTool`], [`ToolSet`] and the six [`builtin`] workspace
//!   tools; arguments are validated against each tool's JSON Schema before the call.
//! - [`SessionLoop`] / [`run_session_loop`]: the model ↔ tools loop, with evidence chunks,
//!   per-tool timeouts, panic capture, truncation, cancellation and streaming to the
//!   context's [`SessionSink`] such as [`StoreSink`].
//! - [`Agent`] and the [`Workflow`] combinators [`Sequence`], [`Parallel`], [`LoopUntil`],
//!   plus [`Selector`] (routing with recorded decisions) and the compressors [`KeepLastN`]
//!   and [`SummaryCompressor`].
//! - [`layers`]: memory, a persist-as-you-go sink, an extra observer and a [`Budget`] as
//!   workflow wrappers, built with [`WorkflowExt`] (`agent.with_memory(m).persist_to(store)`).
//! - [`ToolPolicy`] with [`approve`] / [`reject`] and resumable approval stops.
//!
//! Tool result contents are JSON in Python's `json.dumps` layout (`", "` / `": "`); failures
//! are `{"ok": false, "error_kind": ..., "message": ...}` in the same layout.
//!
//! This crate orchestrates; it owns no formats (rath-persist), no sandboxes (rath-backend),
//! no model wire protocol (rath-provider) and no memory store (rath-memory).

#![warn(missing_docs)]

mod agent;
pub mod builtin;
mod combinators;
mod compress;
mod context;
mod error;
pub mod layers;
mod memory;
mod policy;
pub mod resume;
mod selector;
pub mod service;
mod session_loop;
mod tool;
mod workflow;

pub use agent::Agent;
pub use combinators::{LoopUntil, Parallel, Sequence, SessionPredicate};
pub use compress::{KeepLastN, SUMMARY_HEADER, SummaryCompressor};
pub use context::{Budget, FlowContext, FlowEvent, Observer, SessionSink, StoreSink};
pub use error::{FlowError, KeptFailure};
pub use layers::{Observed, WithBudget, WithMemory, WithSink, WorkflowExt};
pub use memory::{MemoryHook, PolicyMemory};
pub use policy::{ToolPolicy, Verdict, approve, decision_for, reject};
pub use selector::{Candidate, DecideFn, Decision, ROUTE_TOOL, Selector};
pub use service::{Layer, ModelCall, ModelService, ToolRequest, ToolService};
pub use session_loop::{LoopOptions, SessionLoop, pending_reason, run_session_loop};
pub use tool::{
    RawTool, RawToolFn, Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput, ToolSet,
    TypedTool, parameters_for, py_json, typed_tool,
};
pub use workflow::{
    EmptyWorkflow, FnWorkflow, SessionFn, SharedWorkflow, Workflow, WorkflowRole, agent_paths,
    final_text,
};

pub use tokio_util::sync::CancellationToken;
