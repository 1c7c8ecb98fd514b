//! One connection to one MCP server.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::McpError;
use crate::config::{HttpSpec, ServerSpec, StdioSpec};
use crate::tool::McpTool;

/// Lines of server stderr kept for error messages.
const STDERR_LINES: usize = 20;

/// How to connect and call.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Time allowed for spawn + `initialize` (default 30 s).
    pub connect_timeout: Duration,
    /// Time allowed for each `tools/list` page and each `tools/call` (default 60 s).
    pub call_timeout: Duration,
    /// Name tools `<server>__<tool>` instead of `<tool>` (to combine servers whose tool names
    /// clash).
    pub prefix_tool_names: bool,
    /// Let the server's stderr through to ours instead of keeping its last lines for error
    /// messages.
    pub inherit_stderr: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            prefix_tool_names: false,
            inherit_stderr: false,
        }
    }
}

impl ConnectOptions {
    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }
    /// Sets the per-call timeout.
    pub fn call_timeout(mut self, t: Duration) -> Self {
        self.call_timeout = t;
        self
    }
    /// Turns tool-name prefixing on or off.
    pub fn prefix_tool_names(mut self, on: bool) -> Self {
        self.prefix_tool_names = on;
        self
    }
    /// Lets the server's stderr through.
    pub fn inherit_stderr(mut self, on: bool) -> Self {
        self.inherit_stderr = on;
        self
    }
}

/// The transport a client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// A child process over stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    StreamableHttp,
}

impl TransportKind {
    /// `stdio` or `streamable_http` (as recorded in evidence).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::StreamableHttp => "streamable_http",
        }
    }
}

/// A tool as the server lists it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct McpToolInfo {
    /// The server's name for it.
    pub name: String,
    /// The description (or title), empty when the server gives none.
    pub description: String,
    /// The server's `inputSchema`.
    pub input_schema: Value,
    /// The `readOnlyHint` annotation.
    pub read_only: bool,
    /// True when a second call with the same arguments has no further effect: the tool is
    /// read-only or says `idempotentHint` (a durable run may then repeat a call it cannot
    /// tell finished).
    pub idempotent: bool,
}

/// What a `tools/call` returned, before it becomes a tool result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallOutcome {
    /// The text of the content blocks, joined with newlines (non-text blocks summarised).
    pub text: String,
    /// `structuredContent`, when the server sent it.
    pub structured: Option<Value>,
    /// `isError: true`: the tool ran and failed.
    pub is_error: bool,
}

/// Notification state shared with the rmcp handler.
#[derive(Debug, Default)]
struct Watch {
    tools_dirty: AtomicBool,
    list_changes: AtomicU64,
}

#[derive(Clone, Debug)]
struct Handler {
    watch: Arc<Watch>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.watch.tools_dirty.store(true, Ordering::SeqCst);
        self.watch.list_changes.fetch_add(1, Ordering::SeqCst);
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("openrath", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

struct Inner {
    name: String,
    transport: TransportKind,
    options: ConnectOptions,
    service: RunningService<RoleClient, Handler>,
    watch: Arc<Watch>,
    tools: tokio::sync::Mutex<Option<Vec<McpToolInfo>>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    pid: Option<u32>,
}

/// A connected MCP server. Cheap to clone; the connection (and a stdio server's process,
/// which is killed and reaped) ends when the last clone, including the tools made from it,
/// is dropped, or at [`McpClient::close`].
///
/// ```no_run
/// # async fn demo() -> Result<(), rath_mcp::McpError> {
/// use rath_mcp::{ConnectOptions, McpClient, StdioSpec};
/// let time = McpClient::connect(
///     "time",
///     StdioSpec::new("python3").args(["-m", "mcp_server_time"]),
///     &ConnectOptions::default(),
/// )
/// .await?;
/// for t in time.list_tools().await? {
///     println!("{}: {}", t.name, t.description);
/// }
/// let tools = time.tool_set().await?; // rath_flow::ToolSet for a session loop
/// # let _ = tools;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClient(Arc<Inner>);

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("name", &self.0.name)
            .field("transport", &self.0.transport)
            .field("protocol_version", &self.protocol_version())
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Connects to the server `name` (the name used in evidence and error messages) and runs
    /// the `initialize` handshake.
    pub async fn connect(
        name: impl Into<String>,
        spec: impl Into<ServerSpec>,
        options: &ConnectOptions,
    ) -> Result<Self, McpError> {
        let name = name.into();
        match spec.into() {
            ServerSpec::Stdio(s) => Self::connect_stdio(name, &s, options).await,
            ServerSpec::Http(h) => Self::connect_http(name, &h, options).await,
        }
    }

    async fn connect_stdio(
        name: String,
        spec: &StdioSpec,
        options: &ConnectOptions,
    ) -> Result<Self, McpError> {
        let mut cmd = tokio::process::Command::new(&spec.command);
        cmd.args(&spec.args).envs(&spec.env).kill_on_drop(true);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        let stderr_mode = if options.inherit_stderr {
            Stdio::inherit()
        } else {
            Stdio::piped()
        };
        let (proc, child_stderr) = TokioChildProcess::builder(cmd)
            .stderr(stderr_mode)
            .spawn()
            .map_err(|source| McpError::Spawn {
                server: name.clone(),
                command: spec.command.clone(),
                source,
            })?;
        let pid = proc.id();
        let stderr: Arc<Mutex<VecDeque<String>>> = Arc::default();
        if let Some(err) = child_stderr {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut t) = tail.lock() {
                        if t.len() == STDERR_LINES {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            });
        }
        let watch = Arc::new(Watch::default());
        let handler = Handler {
            watch: watch.clone(),
        };
        let service = match tokio::time::timeout(options.connect_timeout, handler.serve(proc)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                // Give the stderr reader a moment to collect why the server died.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(McpError::Initialize {
                    server: name,
                    message: e.to_string(),
                    stderr: tail_text(&stderr),
                });
            }
            Err(_) => {
                return Err(McpError::Timeout {
                    server: name,
                    what: "initialize".to_owned(),
                    timeout_ms: millis(options.connect_timeout),
                });
            }
        };
        Ok(Self::new(
            name,
            TransportKind::Stdio,
            options,
            service,
            watch,
            stderr,
            pid,
        ))
    }

    async fn connect_http(
        name: String,
        spec: &HttpSpec,
        options: &ConnectOptions,
    ) -> Result<Self, McpError> {
        let mut headers = std::collections::HashMap::new();
        for (k, v) in &spec.headers {
            let bad = |m: String| McpError::Config {
                message: format!("server {name:?}: header {k:?}: {m}"),
            };
            let hn = http::HeaderName::from_str(k).map_err(|e| bad(e.to_string()))?;
            let hv = http::HeaderValue::from_str(v).map_err(|e| bad(e.to_string()))?;
            headers.insert(hn, hv);
        }
        let config = StreamableHttpClientTransportConfig::with_uri(spec.url.as_str())
            .custom_headers(headers);
        let transport = StreamableHttpClientTransport::from_config(config);
        let watch = Arc::new(Watch::default());
        let handler = Handler {
            watch: watch.clone(),
        };
        let service =
            match tokio::time::timeout(options.connect_timeout, handler.serve(transport)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return Err(McpError::Initialize {
                        server: name,
                        message: e.to_string(),
                        stderr: String::new(),
                    });
                }
                Err(_) => {
                    return Err(McpError::Timeout {
                        server: name,
                        what: "initialize".to_owned(),
                        timeout_ms: millis(options.connect_timeout),
                    });
                }
            };
        Ok(Self::new(
            name,
            TransportKind::StreamableHttp,
            options,
            service,
            watch,
            Arc::default(),
            None,
        ))
    }

    fn new(
        name: String,
        transport: TransportKind,
        options: &ConnectOptions,
        service: RunningService<RoleClient, Handler>,
        watch: Arc<Watch>,
        stderr: Arc<Mutex<VecDeque<String>>>,
        pid: Option<u32>,
    ) -> Self {
        Self(Arc::new(Inner {
            name,
            transport,
            options: options.clone(),
            service,
            watch,
            tools: tokio::sync::Mutex::new(None),
            stderr,
            pid,
        }))
    }

    /// The configured server name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The transport.
    pub fn transport(&self) -> TransportKind {
        self.0.transport
    }

    /// The options the client was connected with.
    pub fn options(&self) -> &ConnectOptions {
        &self.0.options
    }

    /// The protocol version the server chose in `initialize`.
    pub fn protocol_version(&self) -> Option<String> {
        self.0
            .service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
    }

    /// The server's `serverInfo` name and version.
    pub fn server_info(&self) -> Option<(String, String)> {
        let info = self.0.service.peer_info()?;
        let imp = info.server_info.as_ref()?;
        Some((imp.name.clone(), imp.version.clone()))
    }

    /// The server's `instructions`, if it gave any.
    pub fn instructions(&self) -> Option<String> {
        self.0.service.peer_info()?.instructions.clone()
    }

    /// The child process id (stdio servers).
    pub fn pid(&self) -> Option<u32> {
        self.0.pid
    }

    /// How many `notifications/tools/list_changed` the server has sent.
    pub fn tool_list_changes(&self) -> u64 {
        self.0.watch.list_changes.load(Ordering::SeqCst)
    }

    /// True once the connection is gone (the server exited, or [`McpClient::close`]).
    pub fn is_closed(&self) -> bool {
        self.0.service.is_transport_closed() || self.0.service.is_closed()
    }

    /// The last lines the server wrote to stderr (stdio servers, unless inherited).
    pub fn stderr_tail(&self) -> String {
        tail_text(&self.0.stderr)
    }

    /// The server's tools: listed (all pages) on first use and again after the server
    /// announced `notifications/tools/list_changed`; otherwise the cached list.
    pub async fn list_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        let mut cached = self.0.tools.lock().await;
        let dirty = self.0.watch.tools_dirty.swap(false, Ordering::SeqCst);
        if let (Some(tools), false) = (cached.as_ref(), dirty) {
            return Ok(tools.clone());
        }
        match self.fetch_tools().await {
            Ok(tools) => {
                *cached = Some(tools.clone());
                Ok(tools)
            }
            Err(e) => {
                if dirty {
                    self.0.watch.tools_dirty.store(true, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    /// Lists the tools again now, whatever the cache holds.
    pub async fn refresh_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        self.0.watch.tools_dirty.store(true, Ordering::SeqCst);
        self.list_tools().await
    }

    async fn fetch_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        let what = "tools/list";
        let timeout = self.0.options.call_timeout;
        let listed = tokio::time::timeout(timeout, self.0.service.peer().list_all_tools())
            .await
            .map_err(|_| self.timeout_error(what, timeout))?
            .map_err(|e| self.service_error(what, e))?;
        Ok(listed
            .into_iter()
            .map(|t| McpToolInfo {
                name: t.name.to_string(),
                description: t
                    .description
                    .as_deref()
                    .map(str::to_owned)
                    .or_else(|| t.title.clone())
                    .unwrap_or_default(),
                input_schema: Value::Object(t.input_schema.as_ref().clone()),
                read_only: hint(&t, |a| a.read_only_hint),
                idempotent: hint(&t, |a| a.read_only_hint) || hint(&t, |a| a.idempotent_hint),
            })
            .collect())
    }

    /// The tools as [`McpTool`]s (named per [`ConnectOptions::prefix_tool_names`]).
    pub async fn tools(&self) -> Result<Vec<McpTool>, McpError> {
        Ok(self
            .list_tools()
            .await?
            .into_iter()
            .map(|info| McpTool::new(self.clone(), info))
            .collect())
    }

    /// The tools as a [`rath_flow::ToolSet`]. A tool whose schema does not compile is left
    /// out (see [`crate::McpToolbox::skipped`] for a record of them).
    pub async fn tool_set(&self) -> Result<rath_flow::ToolSet, McpError> {
        let mut set = rath_flow::ToolSet::new();
        crate::toolbox::add_tools(&mut set, self.tools().await?, &mut Vec::new())?;
        Ok(set)
    }

    /// Calls tool `name` (the server's name for it) with `arguments` (a JSON object, or
    /// `null` for none), within `timeout` (default: the connect options' call timeout).
    /// Dropping the future sends `notifications/cancelled`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        timeout: Option<Duration>,
    ) -> Result<CallOutcome, McpError> {
        let what = format!("tools/call {name}");
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = match arguments {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => {
                return Err(McpError::Protocol {
                    server: self.0.name.clone(),
                    what,
                    message: format!("tool arguments must be a JSON object, not {other}"),
                });
            }
        };
        let timeout = timeout.unwrap_or(self.0.options.call_timeout);
        let result = tokio::time::timeout(timeout, self.0.service.peer().call_tool(params))
            .await
            .map_err(|_| self.timeout_error(&what, timeout))?
            .map_err(|e| self.service_error(&what, e))?;
        Ok(outcome_of(result))
    }

    /// Closes the connection: a stdio server gets its stdin closed, then SIGTERM, then a
    /// kill, and is reaped. Other clones see [`McpClient::is_closed`] afterwards.
    pub async fn close(&self) {
        self.0.service.cancellation_token().cancel();
        // Wait (bounded) for the transport to finish closing.
        for _ in 0..100 {
            if self.0.service.is_transport_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn timeout_error(&self, what: &str, timeout: Duration) -> McpError {
        McpError::Timeout {
            server: self.0.name.clone(),
            what: what.to_owned(),
            timeout_ms: millis(timeout),
        }
    }

    fn service_error(&self, what: &str, e: ServiceError) -> McpError {
        let server = self.0.name.clone();
        let what = what.to_owned();
        match e {
            ServiceError::McpError(data) => McpError::Rpc {
                server,
                what,
                code: data.code.0,
                message: data.message.to_string(),
                data: data.data.unwrap_or(Value::Null),
            },
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => McpError::Closed {
                server,
                what,
                stderr: self.stderr_tail(),
            },
            ServiceError::Timeout { timeout } => McpError::Timeout {
                server,
                what,
                timeout_ms: millis(timeout),
            },
            other => McpError::Protocol {
                server,
                what,
                message: other.to_string(),
            },
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    tail.lock()
        .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

/// Maps a `tools/call` result: text blocks joined with newlines, other blocks summarised,
/// `structuredContent` kept as JSON, `isError` kept.
fn outcome_of(result: CallToolResult) -> CallOutcome {
    let blocks: Vec<Value> = result
        .content
        .iter()
        .filter_map(|b| serde_json::to_value(b).ok())
        .collect();
    CallOutcome {
        text: blocks.iter().map(block_text).collect::<Vec<_>>().join("\n"),
        structured: result.structured_content,
        is_error: result.is_error.unwrap_or(false),
    }
}

/// One content block as text.
fn block_text(block: &Value) -> String {
    let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
    match s("type") {
        "text" => s("text").to_owned(),
        "image" | "audio" => format!(
            "[{} {}, {} base64 chars]",
            s("type"),
            s("mimeType"),
            s("data").len()
        ),
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or(Value::Null);
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            if r.get("text").is_some() {
                field("text").to_owned()
            } else {
                format!("[resource {} ({})]", field("uri"), field("mimeType"))
            }
        }
        "resource_link" => format!("[resource link {} {}]", s("uri"), s("name")),
        other => format!("[{other} content]"),
    }
}

/// The evidence detail every MCP call records.
pub(crate) fn evidence_detail(client: &McpClient, tool: &str) -> BTreeMap<String, Value> {
    let mut d = BTreeMap::new();
    d.insert("mcp_server".to_owned(), Value::from(client.name()));
    d.insert(
        "mcp_transport".to_owned(),
        Value::from(client.transport().as_str()),
    );
    d.insert(
        "mcp_protocol_version".to_owned(),
        client.protocol_version().map_or(Value::Null, Value::from),
    );
    if let Some((name, version)) = client.server_info() {
        d.insert(
            "mcp_server_info".to_owned(),
            Value::from(format!("{name} {version}")),
        );
    }
    d.insert("mcp_tool".to_owned(), Value::from(tool));
    d
}

/// One boolean annotation of `tool` (false when the server gives none).
fn hint(
    tool: &rmcp::model::Tool,
    get: impl Fn(&rmcp::model::ToolAnnotations) -> Option<bool>,
) -> bool {
    tool.annotations.as_ref().and_then(get).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_become_text() {
        assert_eq!(block_text(&json!({"type": "text", "text": "hi"})), "hi");
        assert_eq!(
            block_text(&json!({"type": "image", "mimeType": "image/png", "data": "AAAA"})),
            "[image image/png, 4 base64 chars]"
        );
        assert_eq!(
            block_text(&json!({"type": "resource", "resource": {"uri": "x:1", "text": "body"}})),
            "body"
        );
        assert_eq!(
            block_text(
                &json!({"type": "resource", "resource": {"uri": "x:1", "mimeType": "a/b", "blob": "AA"}})
            ),
            "[resource x:1 (a/b)]"
        );
        assert_eq!(
            block_text(&json!({"type": "resource_link", "uri": "x:2", "name": "n"})),
            "[resource link x:2 n]"
        );
        assert_eq!(
            block_text(&json!({"type": "hologram"})),
            "[hologram content]"
        );
    }
}
