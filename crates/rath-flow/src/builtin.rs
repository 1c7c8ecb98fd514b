//! The built-in workspace tools, with OpenRath's names, descriptions and parameter schemas.
//!
//! ```
//! use rath_flow::ToolSet;
//!
//! let names = ToolSet::builtins().names();
//! assert_eq!(names, [
//!     "list_workspace_files", "read_workspace_file", "run_code",
//!     "run_shell_command", "workspace_path_exists", "write_workspace_file",
//! ]);
//! ```
//!
//! Every one dispatches through the session's sandbox ([`ToolContext::dispatch`]), opened
//! lazily from the session's placement. Results are the backend output's JSON (`"ok": true`
//! plus fields) in Python's layout; failures keep the backend's error kind (`path_escape`,
//! `not_found`, `tool_timeout`, ...). Reads, existence checks and writes are parallel-safe with
//! the path as resource key, so calls on one path in one round keep their call order.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use rath_backend::{CodePayload, CommandPayload, Output, Payload};
use serde_json::{Value, json};

use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSet, py_json};

/// All six built-ins.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ListWorkspaceFiles),
        Arc::new(ReadWorkspaceFile),
        Arc::new(RunCode),
        Arc::new(RunShellCommand),
        Arc::new(WorkspacePathExists),
        Arc::new(WriteWorkspaceFile),
    ]
}

fn path_only() -> Value {
    json!({
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": false
    })
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid_arguments(format!("missing string argument {key:?}")))
}

fn output(out: &Output) -> ToolOutput {
    ToolOutput::text(py_json(&out.to_tool_result_json()))
}

macro_rules! schema_cell {
    ($f:expr) => {{
        static CELL: OnceLock<Value> = OnceLock::new();
        CELL.get_or_init($f)
    }};
}

/// `run_shell_command {cmd}`: one shell command in the sandbox workspace.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunShellCommand;

#[async_trait]
impl Tool for RunShellCommand {
    fn name(&self) -> &str {
        "run_shell_command"
    }
    fn description(&self) -> &str {
        "Run one shell command inside the active sandbox workspace. Prefer short commands such as ``echo Hello``."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(|| json!({
            "type": "object",
            "properties": {"cmd": {"type": "string", "description": "Shell command string"}},
            "required": ["cmd"],
            "additionalProperties": false
        }))
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let cmd = str_arg(&args, "cmd")?;
        let out = cx
            .dispatch(&Payload::Command(CommandPayload::shell(cmd)))
            .await?;
        Ok(output(&out))
    }
}

/// `read_workspace_file {path, encoding?}`: a file's text (or hex bytes with `encoding: null`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadWorkspaceFile;

#[async_trait]
impl Tool for ReadWorkspaceFile {
    fn idempotent(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "read_workspace_file"
    }
    fn description(&self) -> &str {
        "Read a file from the sandbox workspace. Omit encoding or set null to return raw bytes."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(|| json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "encoding": {
                    "type": ["string", "null"],
                    "description": "Text encoding; null for binary",
                    "default": "utf-8"
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
    }
    fn parallel_safe(&self) -> bool {
        true
    }
    fn resource_key(&self, args: &Value) -> Option<String> {
        args.get("path").and_then(Value::as_str).map(str::to_owned)
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&args, "path")?;
        let encoding = match args.get("encoding") {
            None => Some("utf-8".to_owned()),
            Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.to_ascii_lowercase().replace('_', "-")),
            Some(_) => {
                return Err(ToolError::invalid_arguments(
                    "encoding must be a string or null",
                ));
            }
        };
        if let Some(e) = &encoding
            && !matches!(e.as_str(), "utf-8" | "utf8" | "ascii" | "us-ascii")
        {
            return Err(ToolError::invalid_arguments(format!(
                "unsupported encoding {e:?}; use \"utf-8\" or null"
            )));
        }
        let out = cx.dispatch(&Payload::read(path)).await?;
        let Output::FileContent(bytes) = out else {
            return Ok(output(&out));
        };
        match encoding {
            None => Ok(ToolOutput::json(&json!({
                "ok": true,
                "encoding": null,
                "bytes_hex": to_hex(&bytes),
            }))),
            Some(_) => match String::from_utf8(bytes) {
                Ok(text) => Ok(ToolOutput::json(&json!({"ok": true, "content": text}))),
                Err(_) => Err(ToolError::exception(format!(
                    "{path} is not valid UTF-8; read it with encoding null"
                ))),
            },
        }
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// `write_workspace_file {path, content}`: writes UTF-8 text, creating parent directories.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteWorkspaceFile;

#[async_trait]
impl Tool for WriteWorkspaceFile {
    fn idempotent(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "write_workspace_file"
    }
    fn description(&self) -> &str {
        "Write UTF-8 text to a path inside the sandbox workspace."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(|| json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
            "additionalProperties": false
        }))
    }
    fn parallel_safe(&self) -> bool {
        true
    }
    fn resource_key(&self, args: &Value) -> Option<String> {
        args.get("path").and_then(Value::as_str).map(str::to_owned)
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&args, "path")?;
        let content = str_arg(&args, "content")?;
        let out = cx.dispatch(&Payload::write(path, content)).await?;
        Ok(output(&out))
    }
}

/// `list_workspace_files {path}`: a directory's entries, not recursive.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListWorkspaceFiles;

#[async_trait]
impl Tool for ListWorkspaceFiles {
    fn idempotent(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "list_workspace_files"
    }
    fn description(&self) -> &str {
        "List non-recursive directory entries under a sandbox path."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(path_only)
    }
    fn parallel_safe(&self) -> bool {
        true
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&args, "path")?;
        Ok(output(&cx.dispatch(&Payload::list(path)).await?))
    }
}

/// `workspace_path_exists {path}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkspacePathExists;

#[async_trait]
impl Tool for WorkspacePathExists {
    fn idempotent(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "workspace_path_exists"
    }
    fn description(&self) -> &str {
        "Return whether a path exists inside the sandbox workspace."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(path_only)
    }
    fn parallel_safe(&self) -> bool {
        true
    }
    fn resource_key(&self, args: &Value) -> Option<String> {
        args.get("path").and_then(Value::as_str).map(str::to_owned)
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let path = str_arg(&args, "path")?;
        Ok(output(&cx.dispatch(&Payload::exists(path)).await?))
    }
}

/// `run_code {code, language?, timeout?}`: a snippet in the sandbox interpreter (python).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunCode;

#[async_trait]
impl Tool for RunCode {
    fn name(&self) -> &str {
        "run_code"
    }
    fn description(&self) -> &str {
        "Execute a code snippet inside the sandbox code interpreter (default language: python)."
    }
    fn parameters(&self) -> &Value {
        schema_cell!(|| json!({
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "language": {"type": "string", "description": "Interpreter language", "default": "python"},
                "timeout": {"type": ["number", "null"], "description": "Optional timeout in seconds"}
            },
            "required": ["code"],
            "additionalProperties": false
        }))
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let code = str_arg(&args, "code")?;
        let language = args
            .get("language")
            .and_then(Value::as_str)
            .unwrap_or("python");
        if !matches!(
            language.to_ascii_lowercase().as_str(),
            "python" | "python3" | "py"
        ) {
            return Err(ToolError::invalid_arguments(format!(
                "unsupported language {language:?}; only python is available"
            )));
        }
        let mut payload = CodePayload::python(code);
        if let Some(secs) = args.get("timeout").and_then(Value::as_f64) {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(ToolError::invalid_arguments(
                    "timeout must be a positive number",
                ));
            }
            payload = payload.timeout(Duration::from_secs_f64(secs.min(86_400.0)));
        }
        Ok(output(&cx.dispatch(&Payload::Code(payload)).await?))
    }
}

impl ToolSet {
    /// The six built-in workspace tools (`run_shell_command`, `read_workspace_file`,
    /// `write_workspace_file`, `list_workspace_files`, `workspace_path_exists`, `run_code`).
    pub fn builtins() -> Self {
        let mut set = Self::new();
        for t in all() {
            // Built-in names are distinct and their schemas compile (tested).
            let _ = set.add(t);
        }
        set
    }
}
