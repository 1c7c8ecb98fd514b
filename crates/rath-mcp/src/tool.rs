//! One MCP tool as a [`rath_flow::Tool`].

use std::time::Duration;

use async_trait::async_trait;
use rath_flow::{Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput, py_json};
use rath_session::ToolEvidence;
use serde_json::{Value, json};

use crate::McpError;
use crate::client::{CallOutcome, McpClient, McpToolInfo, evidence_detail};

/// Extra time the session loop allows beyond the tool's own timeout, so the tool's own
/// (more informative) timeout fires first.
const LOOP_GRACE: Duration = Duration::from_millis(500);

/// A tool a server offers, callable from a session loop. Its schema is the server's
/// `inputSchema` (the loop validates arguments against it before the server sees them);
/// read-only tools (`readOnlyHint`) are parallel-safe.
///
/// Results: text blocks joined with newlines, or `structuredContent` as JSON when present.
/// Failures: `isError: true` and transport loss become `tool_execution_exception`, no
/// answer within the timeout `tool_timeout`, a JSON-RPC invalid-params error
/// `invalid_tool_arguments`. Each call records [`ToolEvidence`] with backend
/// `mcp:<server>` and the server name, transport, protocol version and timing in `detail`.
#[derive(Clone, Debug)]
pub struct McpTool {
    client: McpClient,
    info: McpToolInfo,
    name: String,
}

impl McpTool {
    /// `info` of `client`'s server as a tool.
    pub fn new(client: McpClient, info: McpToolInfo) -> Self {
        let name = if client.options().prefix_tool_names {
            format!("{}__{}", client.name(), info.name)
        } else {
            info.name.clone()
        };
        Self { client, info, name }
    }

    /// The server's name for the tool (the tool name without a prefix).
    pub fn remote_name(&self) -> &str {
        &self.info.name
    }

    /// The client it calls through.
    pub fn client(&self) -> &McpClient {
        &self.client
    }

    fn call_timeout(&self) -> Duration {
        self.client.options().call_timeout
    }

    fn to_tool_error(&self, e: McpError) -> ToolError {
        let server = self.client.name().to_owned();
        match e {
            McpError::Timeout { timeout_ms, .. } => ToolError::new(
                ToolErrorKind::ToolTimeout,
                format!(
                    "MCP server {server} did not answer tools/call {} within {timeout_ms} ms",
                    self.info.name
                ),
            )
            .with_detail(json!({"mcp_server": server})),
            McpError::Rpc {
                code,
                message,
                data,
                ..
            } => {
                // -32602: invalid params.
                let kind = if code == -32602 {
                    ToolErrorKind::InvalidToolArguments
                } else {
                    ToolErrorKind::ToolExecutionException
                };
                ToolError::new(kind, format!("MCP server {server}: {message}"))
                    .with_detail(json!({"mcp_server": server, "jsonrpc_code": code, "data": data}))
            }
            McpError::Closed { stderr, .. } => {
                let mut detail = json!({"mcp_server": server, "reason": "connection_closed"});
                if !stderr.is_empty() {
                    detail["stderr_tail"] = Value::from(stderr);
                }
                ToolError::exception(format!(
                    "MCP server {server} closed the connection during tools/call {}",
                    self.info.name
                ))
                .with_detail(detail)
            }
            other => {
                ToolError::exception(other.to_string()).with_detail(json!({"mcp_server": server}))
            }
        }
    }
}

/// The tool result content of a successful call.
fn content_of(o: &CallOutcome) -> String {
    match &o.structured {
        Some(v) => py_json(v),
        None => o.text.clone(),
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn parameters(&self) -> &Value {
        &self.info.input_schema
    }

    fn parallel_safe(&self) -> bool {
        self.info.read_only
    }

    fn idempotent(&self) -> bool {
        self.info.idempotent
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.call_timeout() + LOOP_GRACE)
    }

    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let timer = cx.session().stamper().start_timer();
        let bytes_in = serde_json::to_string(&args).map_or(0, |s| s.len() as u64);
        let mut ev = ToolEvidence {
            tool_call_id: cx.call_id().to_owned(),
            tool: self.name.clone(),
            backend: Some(format!("mcp:{}", self.client.name())),
            payload_kind: Some("mcp_tool_call".to_owned()),
            summary: Some(format!(
                "tools/call {} on {} ({})",
                self.info.name,
                self.client.name(),
                self.client.transport().as_str()
            )),
            bytes_in,
            detail: evidence_detail(&self.client, &self.info.name),
            ..ToolEvidence::default()
        };
        // Recorded before the call too, so a loop-side timeout still names the server.
        cx.record_evidence(ev.clone());
        let result = self
            .client
            .call_tool(&self.info.name, args, Some(self.call_timeout()))
            .await;
        ev.detail
            .insert("mcp_elapsed_ms".to_owned(), Value::from(timer.elapsed_ms()));
        let answer = match result {
            Ok(o) if o.is_error => {
                ev.detail
                    .insert("mcp_is_error".to_owned(), Value::Bool(true));
                let message = if o.text.is_empty() {
                    o.structured.as_ref().map(py_json).unwrap_or_default()
                } else {
                    o.text.clone()
                };
                Err(ToolError::exception(message)
                    .with_detail(json!({"mcp_server": self.client.name(), "is_error": true})))
            }
            Ok(o) => {
                let content = content_of(&o);
                ev.bytes_out = content.len() as u64;
                if o.structured.is_some() {
                    ev.detail
                        .insert("mcp_structured".to_owned(), Value::Bool(true));
                }
                Ok(ToolOutput::text(content))
            }
            Err(e) => Err(self.to_tool_error(e)),
        };
        cx.record_evidence(ev);
        answer
    }
}
