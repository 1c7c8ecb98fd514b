//! Several servers (an `mcpServers` file) as one tool set.

use std::sync::Arc;

use rath_flow::{Tool, ToolSet};

use crate::McpError;
use crate::client::{ConnectOptions, McpClient};
use crate::config::McpServers;
use crate::tool::McpTool;

/// A tool left out of a tool set, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedTool {
    /// The configured server name.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Why (e.g. its schema does not compile).
    pub reason: String,
}

/// The connected servers of an `mcpServers` configuration and their tools.
///
/// ```no_run
/// # async fn demo() -> Result<(), rath_mcp::McpError> {
/// use rath_mcp::{ConnectOptions, McpServers};
/// let servers = McpServers::from_path("mcp.json")?;
/// let toolbox = servers.connect(&ConnectOptions::default().prefix_tool_names(true)).await?;
/// let tools = toolbox.tool_set().clone().merge(&rath_flow::ToolSet::builtins())?;
/// # let _ = tools;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct McpToolbox {
    clients: Vec<McpClient>,
    tools: ToolSet,
    skipped: Vec<SkippedTool>,
}

impl McpToolbox {
    /// Builds the tool set of already connected clients.
    pub async fn from_clients(clients: Vec<McpClient>) -> Result<Self, McpError> {
        let mut tools = ToolSet::new();
        let mut skipped = Vec::new();
        for c in &clients {
            add_tools(&mut tools, c.tools().await?, &mut skipped)?;
        }
        Ok(Self {
            clients,
            tools,
            skipped,
        })
    }

    /// The connected clients, by server name.
    pub fn clients(&self) -> &[McpClient] {
        &self.clients
    }

    /// The client of server `name`.
    pub fn client(&self, name: &str) -> Option<&McpClient> {
        self.clients.iter().find(|c| c.name() == name)
    }

    /// Every server's tools.
    pub fn tool_set(&self) -> &ToolSet {
        &self.tools
    }

    /// Tools left out (their schemas do not compile).
    pub fn skipped(&self) -> &[SkippedTool] {
        &self.skipped
    }

    /// Rebuilds the tool set from the servers' current lists (re-listing those that sent
    /// `notifications/tools/list_changed`).
    pub async fn refresh(&mut self) -> Result<&ToolSet, McpError> {
        let fresh = Self::from_clients(std::mem::take(&mut self.clients)).await?;
        *self = fresh;
        Ok(&self.tools)
    }

    /// Closes every connection.
    pub async fn close(&self) {
        for c in &self.clients {
            c.close().await;
        }
    }
}

impl McpServers {
    /// Connects every enabled server (concurrently), lists their tools and builds one tool
    /// set. A server's `timeout` overrides `options.call_timeout` for it. The first server
    /// that fails to connect fails the whole call (the others are closed).
    pub async fn connect(&self, options: &ConnectOptions) -> Result<McpToolbox, McpError> {
        let mut pending = Vec::new();
        for (name, cfg) in self.enabled() {
            let spec = cfg.spec().map_err(|e| match e {
                McpError::Config { message } => McpError::Config {
                    message: format!("server {name:?}: {message}"),
                },
                other => other,
            })?;
            let mut opts = options.clone();
            if let Some(t) = cfg.call_timeout() {
                opts.call_timeout = t;
            }
            pending.push(async move { McpClient::connect(name, spec, &opts).await });
        }
        let mut clients = Vec::new();
        let mut first_error = None;
        for r in futures::future::join_all(pending).await {
            match r {
                Ok(c) => clients.push(c),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            for c in &clients {
                c.close().await;
            }
            return Err(e);
        }
        McpToolbox::from_clients(clients).await
    }
}

/// Adds `tools` to `set`; schema failures are recorded in `skipped`, name clashes fail.
pub(crate) fn add_tools(
    set: &mut ToolSet,
    tools: Vec<McpTool>,
    skipped: &mut Vec<SkippedTool>,
) -> Result<(), McpError> {
    for t in tools {
        let server = t.client().name().to_owned();
        let name = t.name().to_owned();
        match set.add(Arc::new(t)) {
            Ok(()) => {}
            Err(rath_flow::FlowError::InvalidTool { message, .. }) => skipped.push(SkippedTool {
                server,
                tool: name,
                reason: message,
            }),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
