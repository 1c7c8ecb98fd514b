//! `sandbox_isolated`: a session placed on the `isolated` backend (bubblewrap) runs
//! `write_workspace_file`, `read_workspace_file` and `run_shell_command` through it, and the
//! tool evidence shows that the network is refused and the root file system is read-only.
//! Where `bwrap` is missing or cannot create namespaces, [`run`] returns the backend's own
//! reason instead of running.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rath_backend::{Backend, isolated::IsolatedBackend};
use rath_flow::{Agent, FlowContext, FlowEvent, LoopOptions, ToolSet, Workflow};
use rath_provider::ScriptedResponse;
use rath_session::{ChunkBody, SandboxSpec, Session, ToolEvidence};
use serde_json::json;

use super::hello_agent::{DemoConfig, provider, save_all};
use super::{DemoError, engineering_team::display, io};

/// The network probe: a TCP connection to a public address (refused inside the sandbox).
pub const NETWORK_PROBE: &str = "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" \
     || (echo 'network refused' >&2; exit 7)";
/// The read-only probe: writing outside the workspace.
pub const READONLY_PROBE: &str =
    "touch /usr/openrath_probe || (echo 'root is read-only' >&2; exit 9)";

/// What `sandbox_isolated` did.
#[derive(Clone, Debug)]
pub enum SandboxOutcome {
    /// `isolated` is unavailable here; the backend's reason.
    Unavailable(String),
    /// The run happened.
    Ran(Box<SandboxReport>),
}

/// A finished run on the isolated backend.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SandboxReport {
    /// The final session.
    pub session: Session,
    /// Tool evidence in call order.
    pub evidence: Vec<ToolEvidence>,
    /// Exit code of the network probe (non-zero: refused).
    pub network_exit: Option<i64>,
    /// Exit code of the read-only probe (non-zero: refused).
    pub readonly_exit: Option<i64>,
    /// The text read back through `read_workspace_file`.
    pub read_back: Option<String>,
    /// The host workspace directory bound into the sandbox.
    pub workspace: PathBuf,
    /// The sessions directory written.
    pub store_dir: PathBuf,
}

const NOTE: &str = "written inside the isolated sandbox\n";

/// Runs the probes on the isolated backend, or returns why it cannot.
pub async fn run(config: DemoConfig) -> Result<SandboxOutcome, DemoError> {
    let backend = IsolatedBackend::new();
    if let Some(reason) = backend.availability().reason() {
        config.step(format!("isolated backend unavailable: {reason}"));
        return Ok(SandboxOutcome::Unavailable(reason.to_owned()));
    }
    config.step("isolated backend available (bubblewrap)");
    let workspace = config.home.join("workspaces/sandbox_isolated");
    if workspace.exists() {
        std::fs::remove_dir_all(&workspace).map_err(io(&workspace))?;
    }
    std::fs::create_dir_all(&workspace).map_err(io(&workspace))?;
    let workspace = workspace.canonicalize().map_err(io(&workspace))?;

    let script = vec![
        ScriptedResponse::tool_calls(vec![(
            "sb_write",
            "write_workspace_file",
            json!({"path": "notes/hello.txt", "content": NOTE}),
        )])
        .usage(90, 20),
        ScriptedResponse::tool_calls(vec![(
            "sb_read",
            "read_workspace_file",
            json!({"path": "notes/hello.txt"}),
        )])
        .usage(120, 12),
        ScriptedResponse::tool_calls(vec![(
            "sb_whoami",
            "run_shell_command",
            json!({"cmd": "pwd; ls notes; cat /proc/net/dev | tail -n +3 | cut -d: -f1"}),
        )])
        .usage(140, 16),
        ScriptedResponse::tool_calls(vec![(
            "sb_network",
            "run_shell_command",
            json!({"cmd": NETWORK_PROBE}),
        )])
        .usage(170, 30),
        ScriptedResponse::tool_calls(vec![(
            "sb_readonly",
            "run_shell_command",
            json!({"cmd": READONLY_PROBE}),
        )])
        .usage(200, 22),
        ScriptedResponse::text(
            "The workspace is writable, the network is refused and the root is read-only.",
        )
        .usage(240, 18),
    ];
    let agent = Agent::new(
        "prober",
        format!(
            "You probe a sandbox. Using the tools, in order: write notes/hello.txt, read it \
             back, run `pwd`, run exactly `{NETWORK_PROBE}`, run exactly `{READONLY_PROBE}`, \
             then summarize in one sentence."
        ),
        provider(config.live, script, "prober")?,
    )
    .describe("Probes the sandbox.")
    .with_tools(ToolSet::builtins())
    .with_options(LoopOptions::default().max_tool_rounds(8));

    let progress = config.progress;
    // Every session the flow reports (the agent's system session included), latest version
    // of each, so the stored lineage has no missing parent.
    let recorded: Arc<Mutex<Vec<Session>>> = Arc::default();
    let sink = recorded.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            let mut all = sink.lock().unwrap_or_else(|p| p.into_inner());
            match all.iter().position(|s| s.id() == session.id()) {
                Some(i) => all[i] = (*session).clone(),
                None => all.push((*session).clone()),
            }
        }
        if progress && let FlowEvent::ToolEnd { call, content, .. } = ev {
            let short: String = content.chars().take(110).collect();
            println!("  {} -> {short}", call.function.name);
        }
    });
    let root = Session::user_with("Show what the isolated sandbox allows.", config.stamper())
        .to_with(
            "isolated",
            SandboxSpec::working_dir(workspace.to_string_lossy().into_owned()),
        );
    let store_dir = config.store_dir();
    let recorded_now = || -> Vec<Session> {
        recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| s.id() != root.id())
            .cloned()
            .collect()
    };
    let out = agent.forward(root.clone(), &cx).await.map_err(|e| {
        let mut kept = vec![root.clone()];
        kept.extend(recorded_now());
        super::keep_failed(&store_dir, kept, e)
    })?;

    let mut sessions = vec![root.clone()];
    sessions.extend(recorded_now().into_iter().filter(|s| s.id() != out.id()));
    sessions.push(out.clone());
    save_all(&store_dir, &sessions)?;
    config.step(format!(
        "saved {} sessions to {}",
        sessions.len(),
        display(&store_dir)
    ));

    let evidence: Vec<ToolEvidence> = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let exit_of = |needle: &str| {
        evidence
            .iter()
            .filter(|e| {
                e.tool == "run_shell_command"
                    && e.summary.as_deref().is_some_and(|s| s.contains(needle))
            })
            .filter_map(|e| e.exit_code)
            .next_back()
    };
    let network_exit = exit_of("socket");
    let readonly_exit = exit_of("/usr/openrath_probe");
    let read_back = out.chunks().iter().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r)
            if r.tool_call_id == "sb_read" || r.content.contains("isolated sandbox") =>
        {
            Some(r.content.clone())
        }
        _ => None,
    });
    Ok(SandboxOutcome::Ran(Box::new(SandboxReport {
        session: out,
        evidence,
        network_exit,
        readonly_exit,
        read_back,
        workspace,
        store_dir,
    })))
}
