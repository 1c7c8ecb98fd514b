//! The `mcpServers` configuration most MCP clients use.
//!
//! ```
//! use rath_mcp::{McpServers, ServerSpec};
//!
//! let servers = McpServers::from_json_str(r#"{
//!   "mcpServers": {
//!     "time": { "command": "python3", "args": ["-m", "mcp_server_time"] },
//!     "docs": { "url": "http://127.0.0.1:8931/mcp" },
//!     "old":  { "command": "old-server", "disabled": true }
//!   }
//! }"#)?;
//! assert_eq!(servers.names(), vec!["docs", "old", "time"]);
//! assert_eq!(servers.enabled().count(), 2);
//! let ServerSpec::Stdio(time) = servers.get("time").unwrap().spec()? else { unreachable!() };
//! assert_eq!(time.args, vec!["-m", "mcp_server_time"]);
//! # Ok::<(), rath_mcp::McpError>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::McpError;

/// One entry of `mcpServers`: a command to spawn (stdio) or a URL (streamable HTTP).
///
/// Keys understood: `command`, `args`, `env`, `cwd` (stdio); `url`, `headers` (HTTP);
/// `type` (`stdio`, `http` / `streamable-http`; `sse` is refused), `disabled`, and
/// `timeout` (seconds per tool call). Other keys are ignored, so files written for other
/// clients load as they are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Program to run (stdio servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the process.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory of the process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Endpoint of a streamable-HTTP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Extra HTTP headers (e.g. `Authorization`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Transport named explicitly (`stdio`, `http`, `streamable-http`, `streamableHttp`).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Skip this server.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Per-call timeout in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
}

/// How to reach a server: what [`ServerConfig::spec`] resolves to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ServerSpec {
    /// Spawn a process and speak JSON-RPC over its stdin/stdout.
    Stdio(StdioSpec),
    /// POST JSON-RPC to a streamable-HTTP endpoint.
    Http(HttpSpec),
}

/// A server spawned as a child process.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct StdioSpec {
    /// Program to run.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (added to the inherited environment).
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
}

impl StdioSpec {
    /// `command` with no arguments.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ..Self::default()
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
}

/// A streamable-HTTP server.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct HttpSpec {
    /// The endpoint URL (`http://127.0.0.1:8931/mcp`).
    pub url: String,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
}

impl HttpSpec {
    /// The endpoint `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

impl From<StdioSpec> for ServerSpec {
    fn from(s: StdioSpec) -> Self {
        Self::Stdio(s)
    }
}

impl From<HttpSpec> for ServerSpec {
    fn from(s: HttpSpec) -> Self {
        Self::Http(s)
    }
}

impl ServerConfig {
    /// Resolves the transport: `url` means HTTP, `command` means stdio; both, neither, or
    /// a `type` that contradicts them is a [`McpError::Config`].
    pub fn spec(&self) -> Result<ServerSpec, McpError> {
        let kind = self.kind.as_deref().map(str::to_ascii_lowercase);
        let config = |message: String| McpError::Config { message };
        match (kind.as_deref(), &self.command, &self.url) {
            (Some("sse"), _, _) => Err(config(
                "the legacy SSE transport is not supported; use the streamable-HTTP endpoint"
                    .to_owned(),
            )),
            (_, Some(_), Some(_)) => Err(config(
                "give either `command` or `url`, not both".to_owned(),
            )),
            (None | Some("stdio"), Some(command), None) => Ok(ServerSpec::Stdio(StdioSpec {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
                cwd: self.cwd.clone(),
            })),
            (None | Some("http" | "streamable-http" | "streamablehttp"), None, Some(url)) => {
                Ok(ServerSpec::Http(HttpSpec {
                    url: url.clone(),
                    headers: self.headers.clone(),
                }))
            }
            (Some(other), _, _)
                if !matches!(
                    other,
                    "stdio" | "http" | "streamable-http" | "streamablehttp"
                ) =>
            {
                Err(config(format!("unknown transport type {other:?}")))
            }
            (Some(k), _, _) => Err(config(format!(
                "type {k:?} needs {}",
                if k == "stdio" { "`command`" } else { "`url`" }
            ))),
            (None, None, None) => Err(config("a server needs `command` or `url`".to_owned())),
        }
    }

    /// The per-call timeout, when one is configured (and positive).
    pub fn call_timeout(&self) -> Option<Duration> {
        self.timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(Duration::from_secs_f64)
    }
}

/// The `mcpServers` object: server names to their configuration, sorted by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct McpServers {
    servers: BTreeMap<String, ServerConfig>,
}

impl McpServers {
    /// No servers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `{"mcpServers": {...}}` (the usual file) or a bare `{name: config}` object.
    pub fn from_json_str(text: &str) -> Result<Self, McpError> {
        let value: Value = serde_json::from_str(text).map_err(|e| McpError::Config {
            message: format!("not JSON: {e}"),
        })?;
        Self::from_value(value)
    }

    /// Like [`McpServers::from_json_str`] from a parsed value.
    pub fn from_value(value: Value) -> Result<Self, McpError> {
        let Value::Object(mut top) = value else {
            return Err(McpError::Config {
                message: "expected a JSON object".to_owned(),
            });
        };
        let map = match top.remove("mcpServers") {
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(McpError::Config {
                    message: "`mcpServers` must be an object".to_owned(),
                });
            }
            None => top,
        };
        let mut servers = BTreeMap::new();
        for (name, v) in map {
            let cfg: ServerConfig = serde_json::from_value(v).map_err(|e| McpError::Config {
                message: format!("server {name:?}: {e}"),
            })?;
            servers.insert(name, cfg);
        }
        Ok(Self { servers })
    }

    /// Reads and parses a file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, McpError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| McpError::Config {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::from_json_str(&text)
    }

    /// Adds (or replaces) a server.
    pub fn insert(&mut self, name: impl Into<String>, config: ServerConfig) {
        self.servers.insert(name.into(), config);
    }

    /// The server named `name`.
    pub fn get(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.get(name)
    }

    /// Server names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.servers.keys().map(String::as_str).collect()
    }

    /// The servers not marked `disabled`, by name.
    pub fn enabled(&self) -> impl Iterator<Item = (&str, &ServerConfig)> {
        self.servers
            .iter()
            .filter(|(_, c)| !c.disabled)
            .map(|(n, c)| (n.as_str(), c))
    }

    /// The configuration as `{"mcpServers": {...}}`.
    pub fn to_value(&self) -> Value {
        serde_json::json!({ "mcpServers": self.servers })
    }
}

impl From<ServerConfig> for Value {
    fn from(c: ServerConfig) -> Self {
        serde_json::to_value(c).unwrap_or(Value::Null)
    }
}

impl ServerConfig {
    /// A stdio server entry.
    pub fn stdio<I, S>(command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            command: Some(command.into()),
            args: args.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// A streamable-HTTP server entry.
    pub fn http(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_transports() {
        let s = McpServers::from_json_str(
            r#"{"mcpServers": {
                "a": {"command": "x", "args": ["1"], "env": {"K": "V"}, "autoApprove": []},
                "b": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "headers": {"X-A": "1"}},
                "c": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
                "d": {"command": "x", "url": "http://127.0.0.1:1"},
                "e": {},
                "f": {"type": "stdio", "url": "http://127.0.0.1:1"},
                "g": {"type": "carrier-pigeon", "command": "x"},
                "h": {"command": "x", "timeout": 2.5}
            }}"#,
        )
        .expect("parse");
        let Ok(ServerSpec::Stdio(a)) = s.get("a").expect("a").spec() else {
            panic!("a is stdio");
        };
        assert_eq!(a, StdioSpec::new("x").args(["1"]).env("K", "V"));
        let Ok(ServerSpec::Http(b)) = s.get("b").expect("b").spec() else {
            panic!("b is http");
        };
        assert_eq!(
            b,
            HttpSpec::new("http://127.0.0.1:1/mcp").header("X-A", "1")
        );
        for bad in ["c", "d", "e", "f", "g"] {
            let err = s.get(bad).expect(bad).spec().expect_err(bad);
            assert!(matches!(err, McpError::Config { .. }), "{bad}: {err}");
        }
        assert_eq!(
            s.get("h").expect("h").call_timeout(),
            Some(Duration::from_millis(2500))
        );
    }

    #[test]
    fn bare_map_and_errors() {
        let s = McpServers::from_json_str(r#"{"t": {"command": "x"}}"#).expect("bare");
        assert_eq!(s.names(), vec!["t"]);
        assert!(McpServers::from_json_str("[]").is_err());
        assert!(McpServers::from_json_str("{").is_err());
        assert!(McpServers::from_json_str(r#"{"mcpServers": 3}"#).is_err());
        assert!(McpServers::from_json_str(r#"{"mcpServers": {"x": {"args": 3}}}"#).is_err());
    }

    #[test]
    fn round_trips() {
        let mut s = McpServers::new();
        s.insert(
            "t",
            ServerConfig::stdio("python3", ["-m", "mcp_server_time"]),
        );
        s.insert("h", ServerConfig::http("http://127.0.0.1:9/mcp"));
        let again = McpServers::from_value(s.to_value()).expect("round trip");
        assert_eq!(again, s);
    }
}
