//! A session loop calling tools of a real MCP server (server-everything), offline: the
//! "model" is a scripted provider. Prints the server's tools and the transcript.
//!
//! `cargo run --release --example mcp_tools` (needs `mcp-server-everything` on `PATH` or
//! `RATH_MCP_EVERYTHING` pointing at it; `.ci/install.d/50-mcp.sh` installs it).

use std::sync::Arc;

use rath_flow::{FlowContext, SessionLoop};
use rath_mcp::{ConnectOptions, McpClient, McpError, StdioSpec};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

fn server_command() -> Option<String> {
    if let Ok(bin) = std::env::var("RATH_MCP_EVERYTHING")
        && std::path::Path::new(&bin).exists()
    {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mcp-server-everything"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(command) = server_command() else {
        println!(
            "mcp_tools: mcp-server-everything is not installed (set RATH_MCP_EVERYTHING or put it \
             on PATH; `npm install @modelcontextprotocol/server-everything`). Nothing to do."
        );
        return Ok(());
    };
    let client = match McpClient::connect(
        "everything",
        StdioSpec::new(command).args(["stdio"]),
        &ConnectOptions::default(),
    )
    .await
    {
        Ok(c) => c,
        Err(e @ (McpError::Spawn { .. } | McpError::Initialize { .. })) => {
            println!("mcp_tools: could not start server-everything: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "connected to {:?} over {}, protocol {}",
        client
            .server_info()
            .map(|(n, v)| format!("{n} {v}"))
            .unwrap_or_default(),
        client.transport().as_str(),
        client.protocol_version().unwrap_or_default()
    );
    let tools = client.tool_set().await?;
    println!("{} tools: {}", tools.len(), tools.names().join(", "));

    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![
            ("call_sum", "get-sum", json!({"a": 19, "b": 23})),
            (
                "call_echo",
                "echo",
                json!({"message": "hello from openrath"}),
            ),
        ]),
        ScriptedResponse::text("19 + 23 = 42, and the server echoed our greeting."),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("You can call MCP tools.", stamper.clone());
    let user = Session::user_with("What is 19 + 23? Then say hello.", stamper);
    let out = SessionLoop::new(provider, tools)
        .run(&user, &agent, &FlowContext::new())
        .await?;

    println!("\ntranscript ({} chunks):", out.len());
    for chunk in out.chunks().iter() {
        match chunk.body() {
            ChunkBody::ToolEvidence(ev) => println!(
                "  [tool_evidence] {} {} backend={} outcome={} detail={}",
                ev.tool_call_id,
                ev.tool,
                ev.backend.as_deref().unwrap_or("-"),
                ev.outcome,
                serde_json::to_string(&ev.detail)?
            ),
            _ => println!("  {}", serde_json::to_string(chunk)?),
        }
    }
    client.close().await;
    Ok(())
}
