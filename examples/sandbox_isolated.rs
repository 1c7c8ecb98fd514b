//! A session on the `isolated` (bubblewrap) backend: file tools and shell commands run inside
//! it; the tool evidence shows the network is refused and the root is read-only. Exits 0
//! with the backend's reason when bubblewrap is unavailable.
//!
//! ```sh
//! cargo run --release --example sandbox_isolated
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use std::sync::Arc;

use openrath::backend::Backend;
use openrath::backend::isolated::IsolatedBackend;
use openrath::flow::FlowEvent;
use openrath::persist::SessionRecorder;
use openrath::prelude::*;

/// The network probe: a TCP connection to a public address (refused inside the sandbox).
const NETWORK_PROBE: &str = "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" \
     || (echo 'network refused' >&2; exit 7)";
/// The read-only probe: writing outside the workspace.
const READONLY_PROBE: &str = "touch /usr/openrath_probe || (echo 'root is read-only' >&2; exit 9)";

const NOTE: &str = "written inside the isolated sandbox\n";

/// The scripted prober: write, read back, look around, probe the network and the root.
fn script() -> Vec<ScriptedResponse> {
    let call = |id: &str, tool: &str, args: serde_json::Value| {
        ScriptedResponse::tool_calls(vec![(id.to_owned(), tool.to_owned(), args)])
    };
    let look = "pwd; ls notes; cat /proc/net/dev | tail -n +3 | cut -d: -f1";
    vec![
        call(
            "sb_write",
            "write_workspace_file",
            json!({"path": "notes/hello.txt", "content": NOTE}),
        )
        .usage(90, 20),
        call(
            "sb_read",
            "read_workspace_file",
            json!({"path": "notes/hello.txt"}),
        )
        .usage(120, 12),
        call("sb_whoami", "run_shell_command", json!({"cmd": look})).usage(140, 16),
        call(
            "sb_network",
            "run_shell_command",
            json!({"cmd": NETWORK_PROBE}),
        )
        .usage(170, 30),
        call(
            "sb_readonly",
            "run_shell_command",
            json!({"cmd": READONLY_PROBE}),
        )
        .usage(200, 22),
        ScriptedResponse::text(
            "The workspace is writable, the network is refused and the root is read-only.",
        )
        .usage(240, 18),
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let live = openrath::select::live_requested();
    let home = openrath::persist::openrath_home();
    // `--store URL` or $OPENRATH_STORE, else the JSONL directory under `home`.
    let store = openrath::run_store::RunStore::from_args().await?;
    let mode = if live {
        openrath::select::describe()
    } else {
        "offline, scripted model".to_owned()
    };
    println!("sandbox_isolated ({mode}), store {store}");

    let backend = IsolatedBackend::new();
    if let Some(reason) = backend.availability().reason() {
        println!("  isolated backend unavailable: {reason}");
        println!("\nSkipped: the isolated backend is unavailable here: {reason}");
        return Ok(());
    }
    println!("  isolated backend available (bubblewrap)");
    let workspace = home.join("workspaces/sandbox_isolated");
    if workspace.exists() {
        std::fs::remove_dir_all(&workspace)?;
    }
    std::fs::create_dir_all(&workspace)?;
    let workspace = workspace.canonicalize()?;

    let model: Arc<dyn Provider> = if live {
        // What RATH_PROVIDER (or the key set) chooses: the wire, retries, a token budget.
        openrath::select::live()?
    } else {
        Arc::new(ScriptedProvider::new(script()).named("scripted:prober"))
    };
    let agent = Agent::new(
        "prober",
        format!(
            "You probe a sandbox. Using the tools, in order: write notes/hello.txt, read it \
             back, run `pwd`, run exactly `{NETWORK_PROBE}`, run exactly `{READONLY_PROBE}`, \
             then summarize in one sentence."
        ),
        model,
    )
    .describe("Probes the sandbox.")
    .with_tools(ToolSet::builtins())
    .with_options(LoopOptions::default().max_tool_rounds(8));

    // Every session the flow reports (the agent's system session included), so the stored
    // lineage has no missing parent; and a line per tool result.
    let recorder = SessionRecorder::new();
    let cx = FlowContext::new().with_observer({
        let recorder = recorder.clone();
        move |ev: &FlowEvent<'_>| match ev {
            FlowEvent::Session { session } => {
                recorder.record(session);
            }
            FlowEvent::ToolEnd { call, content, .. } => {
                let short: String = content.chars().take(110).collect();
                println!("  {} -> {short}", call.function.name);
            }
            _ => {}
        }
    });
    let spec = SandboxSpec::working_dir(workspace.to_string_lossy().into_owned());
    let root = Session::user_with(
        "Show what the isolated sandbox allows.",
        Stamper::from_env(),
    )
    .to_with("isolated", spec);
    recorder.record(&root);
    let out = match agent.forward(root, &cx).await {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, &recorder.sessions()).await?;
            eprintln!("sandbox_isolated: {kept}");
            std::process::exit(1);
        }
    };
    recorder.record(&out);
    let saved = store.save_all(&recorder.sessions()).await?;
    println!("  saved {saved} sessions to {store}");

    let evidence: Vec<_> = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) => Some(e),
            _ => None,
        })
        .collect();
    println!("\nTool evidence (backend, tool, exit code, outcome):");
    for e in &evidence {
        println!(
            "  {} {} exit={} {} {}",
            e.backend.as_deref().unwrap_or("-"),
            e.tool,
            e.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            e.outcome,
            e.summary.as_deref().unwrap_or("")
        );
    }
    // The exit code of the last shell command whose summary mentions `needle`.
    let exit_of = |needle: &str| {
        let shell = evidence.iter().filter(|e| e.tool == "run_shell_command");
        let probe = shell.filter(|e| e.summary.as_deref().is_some_and(|s| s.contains(needle)));
        probe.filter_map(|e| e.exit_code).next_back()
    };
    let refused = |c: Option<i64>| match c {
        Some(0) => "NOT refused (exit 0)".to_owned(),
        Some(c) => format!("refused (exit {c})"),
        None => "not probed".to_owned(),
    };
    let read_back = out.chunks().iter().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r)
            if r.tool_call_id == "sb_read" || r.content.contains("isolated sandbox") =>
        {
            Some(r.content.clone())
        }
        _ => None,
    });
    println!("Summary:");
    println!("  network:   {}", refused(exit_of("socket")));
    println!(
        "  root fs:   write {}",
        refused(exit_of("/usr/openrath_probe"))
    );
    println!(
        "  workspace: {} (read back: {})",
        workspace.display(),
        read_back.as_deref().unwrap_or("-").trim()
    );
    println!("  store:     {store}");
    Ok(())
}
