//! MCP servers as openrath tool sources.
//!
//! Any [Model Context Protocol](https://modelcontextprotocol.io) server, spawned over stdio
//! or reached over streamable HTTP, becomes a set of session tools ([`McpTool`], a
//! [`rath_flow::Tool`]) whose calls and results are evidence on the session like every other
//! tool's.
//!
//! ```
//! use rath_mcp::{ConnectOptions, McpServers};
//!
//! // The `mcpServers` object common MCP clients use.
//! let servers = McpServers::from_json_str(r#"{"mcpServers": {
//!     "everything": {"command": "mcp-server-everything", "args": ["stdio"]},
//!     "time": {"command": "python3", "args": ["-m", "mcp_server_time"], "timeout": 20}
//! }}"#)?;
//! assert_eq!(servers.names(), vec!["everything", "time"]);
//! // `servers.connect(&ConnectOptions::default()).await?` starts both servers, lists their
//! // tools and returns an `McpToolbox` whose `tool_set()` a session loop offers.
//! # let _ = ConnectOptions::default();
//! # Ok::<(), rath_mcp::McpError>(())
//! ```
//!
//! Design:
//! - [`McpClient`] wraps an `rmcp` client connection (`initialize`, paginated `tools/list`,
//!   `tools/call`). `notifications/tools/list_changed` may arrive at any time; it marks the
//!   cached tool list stale and the next [`McpClient::list_tools`] lists again.
//! - [`McpTool`] exposes one server tool; the session loop validates arguments against the
//!   server's `inputSchema` before the call reaches the server.
//! - Results: text blocks joined, `structuredContent` as JSON; `isError: true` and a dead
//!   server are `tool_execution_exception`, no answer in time is `tool_timeout`: each is a
//!   tool result and the loop goes on.
//! - Evidence: backend `mcp:<server>`, with server, transport, protocol version, server
//!   info and timing in the `tool_evidence` detail (recorded through
//!   [`rath_flow::ToolContext::record_evidence`]).
//! - A stdio server is killed and reaped when its client is dropped or closed.

#![warn(missing_docs)]

mod client;
pub mod config;
mod error;
mod tool;
mod toolbox;

pub use client::{CallOutcome, ConnectOptions, McpClient, McpToolInfo, TransportKind};
pub use config::{HttpSpec, McpServers, ServerConfig, ServerSpec, StdioSpec};
pub use error::McpError;
pub use tool::McpTool;
pub use toolbox::{McpToolbox, SkippedTool};
