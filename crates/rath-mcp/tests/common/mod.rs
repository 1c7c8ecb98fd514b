//! Shared helpers: locating the fixture server and the real servers `.ci/run` installs.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rath_flow::{FlowContext, LoopOptions, SessionLoop, ToolSet};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session, Stamper, ToolEvidence};
use serde_json::Value;

use rath_mcp::StdioSpec;

pub fn python3() -> Option<String> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| "python3".to_owned())
}

/// The fixture server, or `None` (with the reason printed) when python3 is missing.
pub fn fixture() -> Option<StdioSpec> {
    let Some(py) = python3() else {
        rath_testkit::skip("python3 is not installed (the fixture MCP server needs it)");
        return None;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fixture_server.py");
    Some(StdioSpec::new(py).args([script.to_string_lossy().into_owned()]))
}

/// `mcp-server-everything stdio`, from `RATH_MCP_EVERYTHING` (set by .ci/install.d/50-mcp.sh).
pub fn everything() -> Option<StdioSpec> {
    match std::env::var("RATH_MCP_EVERYTHING") {
        Ok(bin) if !bin.is_empty() && std::path::Path::new(&bin).exists() => {
            Some(StdioSpec::new(bin).args(["stdio"]))
        }
        _ => {
            rath_testkit::skip(
                "RATH_MCP_EVERYTHING is not set to an installed mcp-server-everything \
                 (.ci/install.d/50-mcp.sh installs it)",
            );
            None
        }
    }
}

/// `python -m mcp_server_time`, from `RATH_MCP_TIME_PYTHON`.
pub fn time_server() -> Option<StdioSpec> {
    match std::env::var("RATH_MCP_TIME_PYTHON") {
        Ok(py) if !py.is_empty() && std::path::Path::new(&py).exists() => {
            Some(StdioSpec::new(py).args(["-m", "mcp_server_time"]))
        }
        _ => {
            rath_testkit::skip(
                "RATH_MCP_TIME_PYTHON is not set to a python with mcp-server-time \
                 (.ci/install.d/50-mcp.sh installs it)",
            );
            None
        }
    }
}

/// Runs a loop whose scripted model makes `calls` (one round each) and then answers "done".
pub async fn run_loop(
    tools: &ToolSet,
    calls: Vec<(&str, &str, Value)>,
    options: LoopOptions,
) -> Session {
    let mut responses: Vec<ScriptedResponse> = calls
        .into_iter()
        .map(|(id, name, args)| ScriptedResponse::tool_calls(vec![(id, name, args)]))
        .collect();
    responses.push(ScriptedResponse::text("done"));
    let provider = Arc::new(ScriptedProvider::new(responses));
    let stamper = Stamper::counter();
    let agent = Session::system_with("Use the tools.", stamper.clone());
    let user = Session::user_with("Go.", stamper);
    SessionLoop::new(provider, tools.clone())
        .with_options(options)
        .run(&user, &agent, &FlowContext::new())
        .await
        .expect("loop runs")
}

/// The tool result content of call `id`.
pub fn result_of(s: &Session, id: &str) -> String {
    s.chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == id => Some(r.content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool result for {id}"))
}

/// The tool evidence of call `id`.
pub fn evidence_of(s: &Session, id: &str) -> ToolEvidence {
    s.chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) if e.tool_call_id == id => Some(e.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool evidence for {id}"))
}

/// The error kind of a failed tool result.
pub fn error_kind(content: &str) -> String {
    let v: Value = serde_json::from_str(content).unwrap_or(Value::Null);
    v["error_kind"].as_str().unwrap_or_default().to_owned()
}

/// Waits (bounded) until `f` holds.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// True while process `pid` exists (zombies count: an unreaped child is still there).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
