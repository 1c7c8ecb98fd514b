//! Against the fixture server (tests/fixtures/fixture_server.py): pagination, list_changed,
//! result mapping, faults (exit mid-call, no answer, isError, invalid arguments), reaping,
//! and the snapshot of a session loop transcript.

mod common;

use std::time::Duration;

use rath_flow::LoopOptions;
use rath_mcp::{ConnectOptions, McpClient, McpError, McpServers, ServerConfig, TransportKind};
use serde_json::{Value, json};

use common::*;

async fn connect(options: &ConnectOptions) -> Option<McpClient> {
    let spec = fixture()?;
    Some(
        McpClient::connect("fixture", spec, options)
            .await
            .expect("fixture connects"),
    )
}

#[tokio::test]
async fn lists_all_pages_and_follows_list_changed() {
    let Some(c) = connect(&ConnectOptions::default()).await else {
        return;
    };
    assert_eq!(c.transport(), TransportKind::Stdio);
    assert_eq!(c.protocol_version().as_deref(), Some("2025-06-18"));
    assert_eq!(
        c.server_info(),
        Some(("rath-fixture".to_owned(), "1.0.0".to_owned()))
    );
    let names: Vec<String> = c
        .list_tools()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    // Four pages of two.
    assert_eq!(
        names,
        ["add", "calls", "crash", "echo", "fail", "grow", "hang"]
    );
    // The server announced a change right after initialization; that was tolerated.
    assert!(eventually(|| c.tool_list_changes() >= 1).await);

    let before = c.tool_list_changes();
    let grown = c.call_tool("grow", json!({}), None).await.expect("grow");
    assert_eq!(grown.text, "grown");
    assert!(
        eventually(|| c.tool_list_changes() > before).await,
        "list_changed seen"
    );
    let names: Vec<String> = c
        .list_tools()
        .await
        .expect("relist")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(names.contains(&"late".to_owned()), "{names:?}");
    let set = c.tool_set().await.expect("tool set");
    assert_eq!(set.len(), 8);
    let add = set.get("add").expect("add");
    assert!(add.parallel_safe(), "readOnlyHint makes it parallel-safe");
    assert_eq!(add.parameters()["required"], json!(["a", "b"]));
}

#[tokio::test]
async fn maps_text_structured_and_error_results() {
    let Some(c) = connect(&ConnectOptions::default()).await else {
        return;
    };
    let echo = c
        .call_tool("echo", json!({"text": "hi"}), None)
        .await
        .expect("echo");
    assert_eq!(
        (echo.text.as_str(), echo.is_error, echo.structured.is_none()),
        ("echo: hi", false, true)
    );
    let add = c
        .call_tool("add", json!({"a": 2, "b": 40}), None)
        .await
        .expect("add");
    assert_eq!(add.structured, Some(json!({"sum": 42})));
    let fail = c
        .call_tool("fail", json!({}), None)
        .await
        .expect("fail answers");
    assert!(fail.is_error);
    assert_eq!(fail.text, "fixture failure: as requested");
    let unknown = c
        .call_tool("nope", json!({}), None)
        .await
        .expect_err("unknown tool");
    assert!(
        matches!(unknown, McpError::Rpc { code: -32602, .. }),
        "{unknown}"
    );
}

#[tokio::test]
async fn loop_turns_faults_into_results_and_goes_on() {
    let opts = ConnectOptions::default().call_timeout(Duration::from_millis(700));
    let Some(c) = connect(&opts).await else {
        return;
    };
    let tools = c.tool_set().await.expect("tools");
    let out = run_loop(
        &tools,
        vec![
            ("c1", "echo", json!({"text": 5})),
            ("c2", "calls", json!({})),
            ("c3", "fail", json!({})),
            ("c4", "hang", json!({})),
            ("c5", "echo", json!({"text": "still here"})),
            ("c6", "crash", json!({})),
            ("c7", "echo", json!({"text": "after the crash"})),
        ],
        LoopOptions::default(),
    )
    .await;

    // Invalid arguments are refused by our schema check: the server never saw c1.
    let c1 = result_of(&out, "c1");
    assert_eq!(error_kind(&c1), "invalid_tool_arguments", "{c1}");
    assert_eq!(
        result_of(&out, "c2"),
        "1",
        "only `calls` itself reached the server"
    );

    let c3 = result_of(&out, "c3");
    assert_eq!(error_kind(&c3), "tool_execution_exception");
    assert!(c3.contains("fixture failure: as requested"), "{c3}");
    assert_eq!(evidence_of(&out, "c3").detail["mcp_is_error"], json!(true));

    let c4 = result_of(&out, "c4");
    assert_eq!(error_kind(&c4), "tool_timeout", "{c4}");
    let ev4 = evidence_of(&out, "c4");
    assert_eq!(ev4.outcome, "tool_timeout");
    assert_eq!(ev4.backend.as_deref(), Some("mcp:fixture"));

    assert_eq!(
        result_of(&out, "c5"),
        "echo: still here",
        "a hung call does not block the next"
    );

    let c6 = result_of(&out, "c6");
    assert_eq!(error_kind(&c6), "tool_execution_exception", "{c6}");
    assert!(c6.contains("closed the connection"), "{c6}");
    let c7 = result_of(&out, "c7");
    assert_eq!(error_kind(&c7), "tool_execution_exception", "{c7}");
    // The loop went on to the final answer.
    let final_text = out.chunks().iter().any(|c| {
        serde_json::to_value(c)
            .is_ok_and(|v| v["kind"] == "assistant" && v["payload"]["content"] == "done")
    });
    assert!(final_text, "the loop reached the final answer");
    assert!(c.is_closed());
    assert!(
        c.stderr_tail().contains("crashing on purpose"),
        "{}",
        c.stderr_tail()
    );
}

#[tokio::test]
async fn direct_call_reports_exit_and_timeout() {
    let opts = ConnectOptions::default().call_timeout(Duration::from_millis(300));
    let Some(c) = connect(&opts).await else {
        return;
    };
    let hang = c
        .call_tool("hang", json!({}), None)
        .await
        .expect_err("hang");
    assert!(
        matches!(
            hang,
            McpError::Timeout {
                timeout_ms: 300,
                ..
            }
        ),
        "{hang}"
    );
    let crash = c
        .call_tool("crash", json!({}), Some(Duration::from_secs(10)))
        .await
        .expect_err("crash");
    assert!(matches!(crash, McpError::Closed { .. }), "{crash}");
    let after = c
        .call_tool("echo", json!({"text": "x"}), None)
        .await
        .expect_err("closed");
    assert!(matches!(after, McpError::Closed { .. }), "{after}");
}

#[tokio::test]
async fn child_is_reaped_on_drop_and_on_close() {
    let Some(c) = connect(&ConnectOptions::default()).await else {
        return;
    };
    let pid = c.pid().expect("pid");
    assert!(process_exists(pid));
    let tools = c.tool_set().await.expect("tools");
    drop(c);
    assert!(process_exists(pid), "tools still hold the connection");
    drop(tools);
    assert!(
        eventually(|| !process_exists(pid)).await,
        "pid {pid} killed and reaped after drop"
    );

    let Some(c) = connect(&ConnectOptions::default()).await else {
        return;
    };
    let pid = c.pid().expect("pid");
    c.close().await;
    assert!(c.is_closed());
    assert!(
        eventually(|| !process_exists(pid)).await,
        "pid {pid} reaped after close"
    );
}

#[tokio::test]
async fn spawn_and_handshake_failures_are_errors() {
    let missing = McpClient::connect(
        "missing",
        rath_mcp::StdioSpec::new("rath-mcp-no-such-server"),
        &ConnectOptions::default(),
    )
    .await
    .expect_err("no such program");
    assert!(matches!(missing, McpError::Spawn { .. }), "{missing}");
    if python3().is_none() {
        rath_testkit::skip("python3 is not installed (the rest of the test runs it)");
        return;
    }
    let not_mcp = McpClient::connect(
        "silent",
        rath_mcp::StdioSpec::new("python3")
            .args(["-c", "import sys; sys.stderr.write('no mcp here\\n')"]),
        &ConnectOptions::default(),
    )
    .await
    .expect_err("exits at once");
    assert!(matches!(not_mcp, McpError::Initialize { .. }), "{not_mcp}");
    let mute = McpClient::connect(
        "mute",
        rath_mcp::StdioSpec::new("python3").args(["-c", "import time; time.sleep(30)"]),
        &ConnectOptions::default().connect_timeout(Duration::from_millis(400)),
    )
    .await
    .expect_err("never answers initialize");
    assert!(matches!(mute, McpError::Timeout { .. }), "{mute}");
}

#[tokio::test]
async fn mcp_servers_config_builds_a_prefixed_tool_set() {
    let Some(spec) = fixture() else { return };
    let mut servers = McpServers::new();
    let cfg = ServerConfig::stdio(spec.command.clone(), spec.args.clone());
    servers.insert("one", cfg.clone());
    servers.insert("two", cfg.clone());
    // Same tool names on two servers clash without prefixes.
    let clash = servers
        .connect(&ConnectOptions::default())
        .await
        .expect_err("clash");
    assert!(matches!(clash, McpError::ToolSet(_)), "{clash}");
    let text = serde_json::to_string(&servers.to_value()).expect("json");
    let servers = McpServers::from_json_str(&text).expect("reload");
    let toolbox = servers
        .connect(&ConnectOptions::default().prefix_tool_names(true))
        .await
        .expect("connect");
    assert_eq!(toolbox.clients().len(), 2);
    assert_eq!(toolbox.tool_set().len(), 14);
    assert!(toolbox.skipped().is_empty());
    let out = run_loop(
        toolbox.tool_set(),
        vec![("c1", "two__echo", json!({"text": "prefixed"}))],
        LoopOptions::default(),
    )
    .await;
    assert_eq!(result_of(&out, "c1"), "echo: prefixed");
    let ev = evidence_of(&out, "c1");
    assert_eq!(ev.backend.as_deref(), Some("mcp:two"));
    assert_eq!(ev.detail["mcp_tool"], json!("echo"));
    toolbox.close().await;
}

/// The transcript of a loop calling MCP tools, snapshotted (deterministic stamper,
/// elapsed 0).
#[tokio::test]
async fn loop_transcript_snapshot() {
    let Some(c) = connect(&ConnectOptions::default()).await else {
        return;
    };
    let tools = c.tool_set().await.expect("tools");
    let out = run_loop(
        &tools,
        vec![
            ("call_add", "add", json!({"a": 2, "b": 3})),
            ("call_echo", "echo", json!({"text": "from the loop"})),
            ("call_fail", "fail", json!({})),
        ],
        LoopOptions::default(),
    )
    .await;
    let chunks: Value =
        serde_json::to_value(out.chunks().iter().collect::<Vec<_>>()).expect("json");
    insta::assert_json_snapshot!("fixture_loop_transcript", chunks);
}
