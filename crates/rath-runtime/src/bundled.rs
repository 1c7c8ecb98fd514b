//! The workflows `rath worker` runs: offline, deterministic, with real tools.
//!
//! ```
//! use rath_runtime::bundled::{self, BundledOptions};
//!
//! let registry = bundled::registry(&BundledOptions::default());
//! assert_eq!(registry.names(), vec!["gated", "team"]);
//! ```
//!
//! - `team`: a multi-agent sequence. A `planner` looks two texts up with the idempotent
//!   `lookup` tool, then a `writer` records two texts with the **non-idempotent** `record`
//!   tool, which appends the idempotency key it was handed ([`crate::current_call`]) to a
//!   file outside every store ([`BundledOptions::effects`]): one line per effect that
//!   happened, so a duplicate side effect is a duplicate line.
//! - `gated`: one `writer` whose `record` calls need a person's approval: the run stops in
//!   `waiting` until `rath runs approve` (or `reject`) decides, from any process.
//!
//! Both agents answer with [`RuleModel`], a scripted model that derives its reply from the
//! request alone (two tool rounds, then a text naming how many messages it saw), so a run
//! re-executed after a crash gets the same replies whether they come from the journal or
//! are asked again. [`BundledOptions::think`] gives it a model's latency.
//!
//! A program with its own workflows builds its own [`WorkflowRegistry`] (and may start from
//! this one) and runs it with [`crate::serve_worker`].

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rath_flow::{Agent, RawTool, Sequence, SharedWorkflow, ToolError, ToolOutput, ToolPolicy};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_session::Role;
use serde_json::{Value, json};

use crate::registry::WorkflowRegistry;

/// The definition of `team` (its hash is what runs are submitted with).
pub const TEAM_DEFINITION: &str =
    "team v1: planner(lookup x2, idempotent) then writer(record x2, not idempotent); rule model";
/// The definition of `gated`.
pub const GATED_DEFINITION: &str = "gated v1: writer(record x2, approval required); rule model";

/// What the bundled workflows need from their host.
#[derive(Clone, Debug, Default)]
pub struct BundledOptions {
    /// The file the `record` tool appends each idempotency key to (none: the tool records
    /// nothing outside the store and only answers).
    pub effects: Option<PathBuf>,
    /// How long the model "thinks" before each reply (default none).
    pub think: Duration,
}

/// The bundled workflows (`team`, `gated`) as a registry.
pub fn registry(options: &BundledOptions) -> WorkflowRegistry {
    let team = options.clone();
    let gated = options.clone();
    WorkflowRegistry::new()
        .register("team", TEAM_DEFINITION, move || {
            let planner = Agent::new(
                "planner",
                "Look up what the task needs.",
                RuleModel::new("lookup", team.think),
            )
            .with_tool(lookup_tool())?;
            let writer = Agent::new(
                "writer",
                "Record the results.",
                RuleModel::new("record", team.think),
            )
            .with_tool(record_tool(team.effects.clone()))?;
            Ok(Arc::new(Sequence::new("team").then(planner).then(writer)) as SharedWorkflow)
        })
        .register("gated", GATED_DEFINITION, move || {
            let writer = Agent::new(
                "writer",
                "Record the results.",
                RuleModel::new("record", gated.think),
            )
            .with_tool(record_tool(gated.effects.clone()))?
            .with_policy(ToolPolicy::allow_all().require_approval("record"));
            Ok(Arc::new(writer) as SharedWorkflow)
        })
}

fn text_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    })
}

fn text_arg(args: &Value) -> Result<String, ToolError> {
    args["text"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ToolError::exception("argument `text` must be a string"))
}

/// `lookup`: answers the length of a text (no side effect: declared idempotent).
fn lookup_tool() -> RawTool {
    RawTool::new("lookup", "Look a text up.", text_schema(), |_cx, args| {
        Box::pin(async move {
            let text = text_arg(&args)?;
            Ok(ToolOutput::json(&json!({"len": text.len()})))
        })
    })
    .idempotent(true)
}

/// `record`: appends the idempotency key of the call to `effects` (the side effect), then
/// answers `{"recorded": text}`.
fn record_tool(effects: Option<PathBuf>) -> RawTool {
    RawTool::new(
        "record",
        "Record a text.",
        text_schema(),
        move |_cx, args| {
            let effects = effects.clone();
            Box::pin(async move {
                let text = text_arg(&args)?;
                if let Some(file) = effects {
                    let key = crate::current_call()
                        .map(|c| c.idempotency_key)
                        .unwrap_or_default();
                    let line = format!("{key}\n");
                    tokio::task::spawn_blocking(move || append_line(&file, &line))
                        .await
                        .map_err(|e| ToolError::exception(e.to_string()))??;
                }
                Ok(ToolOutput::json(&json!({"recorded": text})))
            })
        },
    )
}

fn append_line(file: &std::path::Path, line: &str) -> Result<(), ToolError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| ToolError::exception(format!("{}: {e}", file.display())))?;
    f.write_all(line.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| ToolError::exception(format!("{}: {e}", file.display())))
}

/// A scripted model that answers from the request alone: two rounds calling its tool (with
/// `{"text": "<agent> <round>"}`), then a text saying how many messages it saw. Usage is
/// `10 × messages` in and 3 out. Deterministic, so a re-executed run asks nothing new.
#[derive(Clone, Debug)]
pub struct RuleModel {
    tool: &'static str,
    think: Duration,
}

impl RuleModel {
    /// A model whose agents call `tool`, replying after `think`.
    pub fn new(tool: &'static str, think: Duration) -> Self {
        Self { tool, think }
    }
}

#[async_trait]
impl Provider for RuleModel {
    fn name(&self) -> &str {
        "rule"
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        if !self.think.is_zero() {
            tokio::time::sleep(self.think).await;
        }
        let agent = req.agent.clone().unwrap_or_default();
        let mine = format!("{agent}_call_");
        let rounds = req
            .messages
            .iter()
            .filter(|m| {
                m.role == Role::Tool
                    && m.tool_call_id
                        .as_deref()
                        .is_some_and(|c| c.starts_with(&mine))
            })
            .count();
        let n = req.messages.len() as u64;
        let reply = if rounds < 2 {
            ScriptedResponse::tool_calls(vec![(
                format!("{agent}_call_{rounds}"),
                self.tool,
                json!({"text": format!("{agent} {rounds}")}),
            )])
        } else {
            ScriptedResponse::text(format!("{agent} done after {n} messages"))
        };
        ScriptedProvider::new(vec![reply.usage(10 * n, 3)])
            .complete(req)
            .await
    }

    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("rule")
    }
}
