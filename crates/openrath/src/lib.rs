//! **openrath**: session-centered runtime state for agent systems.
//!
//! One dependency for an application: every layer of the workspace is re-exported under a
//! short name ([`session`], [`backend`], [`opensandbox`], [`provider`], [`memory`],
//! [`persist`], [`flow`], [`declare`], [`mcp`], [`otel`], [`runtime`], [`inspect`]) and [`prelude`] holds what writing an agent needs. A
//! library that needs one layer can depend on that crate (`rath-session`, `rath-persist`, ...)
//! alone.
//!
//! An agent with a typed tool, on a scripted model, with only `openrath`, `serde` and `tokio`
//! in `Cargo.toml` (the prelude brings `schemars`, so `#[derive(JsonSchema)]` resolves):
//!
//! ```
//! use openrath::prelude::*;
//!
//! #[derive(serde::Deserialize, JsonSchema)]
//! struct Args {
//!     /// The text to count.
//!     text: String,
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let word_count = typed_tool("word_count", "Count words.", |_cx, a: Args| async move {
//!     Ok(json!({"words": a.text.split_whitespace().count()}))
//! });
//! let model = ScriptedProvider::new(vec![
//!     ScriptedResponse::tool_calls(vec![("c1", "word_count", json!({"text": "a b c"}))]),
//!     ScriptedResponse::text("3 words."),
//! ]);
//! let agent = Agent::new("counter", "Count with the tool.", model)
//!     .with_tools(ToolSet::new().with(word_count)?);
//! let out = agent.run(Session::user_with("Count 'a b c'.", Stamper::counter())).await?;
//! assert_eq!(out.final_text(), Some("3 words."));
//!
//! let dir = tempfile::tempdir().unwrap();
//! Store::at(dir.path()).save(&out)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! Without the prelude's glob import, name the re-exported crate in the derive:
//! `#[derive(openrath::JsonSchema)] #[schemars(crate = "openrath::schemars")]`.
//!
//! The session algebra itself needs no runtime:
//!
//! ```
//! use openrath::prelude::*;
//!
//! let root = Session::user_with("How many words are in 'a b c'?", Stamper::counter());
//! let a = root.fork().push(Chunk::assistant_text("three"));
//! let b = root.fork();
//! let merged = a.merge(&b)?;
//! assert_eq!(merged.lineage().parents.len(), 2);
//! # Ok::<(), openrath::session::SessionError>(())
//! ```

#![warn(missing_docs)]

pub use rath_backend as backend;
pub use rath_backend_opensandbox as opensandbox;
pub use rath_declare as declare;
pub use rath_flow as flow;
pub use rath_inspect as inspect;
pub use rath_mcp as mcp;
pub use rath_memory as memory;
pub use rath_otel as otel;
pub use rath_persist as persist;
pub use rath_provider as provider;
pub use rath_provider_anthropic as anthropic;
/// Durable runs: a run queue, workers with leases and fencing, replay journal, effect ledger.
pub use rath_runtime as runtime;
pub use rath_session as session;
pub use rath_store_sql as store;

pub mod run_store;
pub mod select;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "server")]
pub use serve::{serve, work};

/// The JSON Schema crate typed tools derive their argument schemas with (see [`JsonSchema`]).
pub use schemars;
/// Derives (and names) a tool argument type's JSON Schema: `#[derive(JsonSchema)]` with
/// [`prelude`] in scope, else `#[derive(openrath::JsonSchema)]` with
/// `#[schemars(crate = "openrath::schemars")]`.
pub use schemars::JsonSchema;
/// JSON values: tool results, scripted tool-call arguments.
pub use serde_json;
/// Builds a [`serde_json::Value`] from JSON syntax.
pub use serde_json::json;

/// What writing an agent needs: the session value, agents, workflows and their combinators,
/// typed tools, the providers and the store. `use openrath::prelude::*;`
pub mod prelude {
    pub use rath_flow::{
        Agent, FlowContext, FlowError, LoopOptions, LoopUntil, Parallel, Selector, Sequence,
        SessionLoop, Tool, ToolContext, ToolError, ToolSet, Workflow, WorkflowExt, typed_tool,
    };
    pub use rath_persist::Store;
    pub use rath_provider::{
        OpenAiConfig, OpenAiProvider, Provider, ProviderError, ProviderExt, ScriptedProvider,
        ScriptedResponse, StackConfig,
    };
    pub use rath_session::{
        Chunk, ChunkBody, ChunkKind, Lineage, LineageGraph, LineageKind, MergeStrategy,
        SandboxSpec, Session, SessionId, Stamper, ToolCall, Usage,
    };
    /// In scope so `#[derive(JsonSchema)]` resolves its paths through the re-export.
    pub use schemars::{self, JsonSchema};
    pub use serde_json::json;
}
