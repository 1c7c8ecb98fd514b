//! The crate's error type.

/// What went wrong talking to an MCP server, and what the caller can do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The `mcpServers` configuration could not be read or is malformed: fix the file.
    #[error("MCP configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// The server process could not be started: check `command` (installed? on `PATH`?).
    #[error("MCP server {server:?}: could not start {command:?}: {source}")]
    Spawn {
        /// The configured server name.
        server: String,
        /// The command that failed to start.
        command: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// The connection or the `initialize` handshake failed: the server is not an MCP server,
    /// crashed at start-up, or (HTTP) is not listening at that URL.
    #[error(
        "MCP server {server:?}: initialization failed: {message}{}",
        stderr_suffix(stderr)
    )]
    Initialize {
        /// The configured server name.
        server: String,
        /// The handshake error.
        message: String,
        /// The last lines the server wrote to stderr (stdio servers), if any.
        stderr: String,
    },
    /// The server did not answer in time: raise the timeout or check the server.
    #[error("MCP server {server:?}: {what} did not finish within {timeout_ms} ms")]
    Timeout {
        /// The configured server name.
        server: String,
        /// The request (`initialize`, `tools/list`, `tools/call <name>`).
        what: String,
        /// The timeout that ran out, in milliseconds.
        timeout_ms: u64,
    },
    /// The connection is gone (the server exited or closed the stream): reconnect.
    #[error(
        "MCP server {server:?}: connection closed during {what}{}",
        stderr_suffix(stderr)
    )]
    Closed {
        /// The configured server name.
        server: String,
        /// The request that was in flight.
        what: String,
        /// The last lines the server wrote to stderr (stdio servers), if any.
        stderr: String,
    },
    /// The server answered with a JSON-RPC error (unknown tool, invalid params, ...).
    #[error("MCP server {server:?}: {what} failed with JSON-RPC error {code}: {message}")]
    Rpc {
        /// The configured server name.
        server: String,
        /// The request that failed.
        what: String,
        /// The JSON-RPC error code (`-32602` is invalid params).
        code: i32,
        /// The server's message.
        message: String,
        /// The server's error data, `null` when none.
        data: serde_json::Value,
    },
    /// The server broke the protocol (unexpected response type, malformed message).
    #[error("MCP server {server:?}: protocol error during {what}: {message}")]
    Protocol {
        /// The configured server name.
        server: String,
        /// The request that failed.
        what: String,
        /// What was wrong.
        message: String,
    },
    /// Two tools got the same name when building a tool set: connect with
    /// [`crate::ConnectOptions::prefix_tool_names`] or drop one of the servers.
    #[error("MCP tools: {0}")]
    ToolSet(#[from] rath_flow::FlowError),
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (server stderr: {stderr})")
    }
}

impl McpError {
    /// The configured name of the server this error is about, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            Self::Spawn { server, .. }
            | Self::Initialize { server, .. }
            | Self::Timeout { server, .. }
            | Self::Closed { server, .. }
            | Self::Rpc { server, .. }
            | Self::Protocol { server, .. } => Some(server),
            Self::Config { .. } | Self::ToolSet(_) => None,
        }
    }
}
