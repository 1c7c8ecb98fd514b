//! Against the real servers `.ci/install.d/50-mcp.sh` installs: `mcp-server-everything
//! stdio` (node) and `python -m mcp_server_time`. Each test skips with a printed reason when
//! its server is not installed.

mod common;

use rath_flow::LoopOptions;
use rath_mcp::{ConnectOptions, McpClient};
use serde_json::{Value, json};

use common::*;

#[tokio::test]
async fn everything_lists_and_calls() {
    let Some(spec) = everything() else { return };
    let c = McpClient::connect("everything", spec, &ConnectOptions::default())
        .await
        .expect("server-everything connects");
    assert!(c.protocol_version().is_some());
    let tools = c.list_tools().await.expect("list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    eprintln!("server-everything offers {} tools: {names:?}", names.len());
    for expected in ["echo", "get-sum"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // It announces tools/list_changed early; that is tolerated (and re-listing works).
    let again = c.refresh_tools().await.expect("relist");
    assert_eq!(again.len(), tools.len());

    let echo = c
        .call_tool("echo", json!({"message": "hello mcp"}), None)
        .await
        .expect("echo");
    assert!(!echo.is_error);
    assert!(echo.text.contains("hello mcp"), "{}", echo.text);
    let sum = c
        .call_tool("get-sum", json!({"a": 2, "b": 40}), None)
        .await
        .expect("get-sum");
    assert!(sum.text.contains("42"), "{}", sum.text);
    if names.contains(&"get-structured-content") {
        let weather = c
            .call_tool(
                "get-structured-content",
                json!({"location": "Chicago"}),
                None,
            )
            .await
            .expect("structured");
        assert!(
            weather.structured.as_ref().is_some_and(Value::is_object),
            "{weather:?}"
        );
    }
    if names.contains(&"get-tiny-image") {
        let img = c
            .call_tool("get-tiny-image", json!({}), None)
            .await
            .expect("image");
        assert!(img.text.contains("[image image/png"), "{}", img.text);
    }
    c.close().await;
}

#[tokio::test]
async fn everything_in_a_session_loop() {
    let Some(spec) = everything() else { return };
    let c = McpClient::connect("everything", spec, &ConnectOptions::default())
        .await
        .expect("connect");
    let tools = c.tool_set().await.expect("tool set");
    let out = run_loop(
        &tools,
        vec![
            ("c1", "get-sum", json!({"a": 19, "b": 23})),
            ("c2", "echo", json!({"message": 7})),
            ("c3", "echo", json!({"message": "loop"})),
        ],
        LoopOptions::default(),
    )
    .await;
    assert!(result_of(&out, "c1").contains("42"));
    assert_eq!(error_kind(&result_of(&out, "c2")), "invalid_tool_arguments");
    assert!(result_of(&out, "c3").contains("loop"));
    let ev = evidence_of(&out, "c1");
    assert_eq!(ev.backend.as_deref(), Some("mcp:everything"));
    assert_eq!(ev.outcome, "ok");
    assert_eq!(ev.detail["mcp_transport"], json!("stdio"));
    assert_eq!(ev.detail["mcp_server"], json!("everything"));
    assert!(ev.detail["mcp_protocol_version"].is_string());
    assert!(ev.detail.contains_key("mcp_elapsed_ms"));
    c.close().await;
}

#[tokio::test]
async fn time_server_lists_and_calls() {
    let Some(spec) = time_server() else { return };
    let c = McpClient::connect("time", spec, &ConnectOptions::default())
        .await
        .expect("mcp-server-time connects");
    let tools = c.list_tools().await.expect("list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    eprintln!("mcp-server-time offers {} tools: {names:?}", names.len());
    assert!(
        names.contains(&"get_current_time") && names.contains(&"convert_time"),
        "{names:?}"
    );

    let now = c
        .call_tool("get_current_time", json!({"timezone": "UTC"}), None)
        .await
        .expect("get_current_time");
    assert!(!now.is_error, "{now:?}");
    let v: Value = serde_json::from_str(&now.text).expect("time JSON");
    assert_eq!(v["timezone"], json!("UTC"));

    let conv = c
        .call_tool(
            "convert_time",
            json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
            None,
        )
        .await
        .expect("convert_time");
    let v: Value = serde_json::from_str(&conv.text).expect("convert JSON");
    assert!(
        v["target"]["datetime"]
            .as_str()
            .is_some_and(|d| d.contains("T21:00")),
        "{v}"
    );

    let bad = c
        .call_tool("get_current_time", json!({"timezone": "Not/AZone"}), None)
        .await;
    match bad {
        Ok(o) => assert!(o.is_error, "{o:?}"),
        Err(e) => assert!(matches!(e, rath_mcp::McpError::Rpc { .. }), "{e}"),
    }

    let tools = c.tool_set().await.expect("tool set");
    let out = run_loop(
        &tools,
        vec![(
            "t1",
            "get_current_time",
            json!({"timezone": "Europe/Paris"}),
        )],
        LoopOptions::default(),
    )
    .await;
    assert!(result_of(&out, "t1").contains("Europe/Paris"));
    let ev = evidence_of(&out, "t1");
    assert_eq!(ev.backend.as_deref(), Some("mcp:time"));
    assert!(
        ev.detail["mcp_server_info"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    c.close().await;
}

/// The same server over streamable HTTP (`mcp-server-everything streamableHttp`, on a free
/// loopback port).
#[tokio::test]
async fn everything_over_streamable_http() {
    let Some(spec) = everything() else { return };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let mut server = tokio::process::Command::new(&spec.command)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the HTTP server");
    let mut up = false;
    for _ in 0..150 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(up, "server-everything did not listen on port {port}");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let c = McpClient::connect(
        "everything-http",
        rath_mcp::HttpSpec::new(url),
        &ConnectOptions::default(),
    )
    .await
    .expect("HTTP connect");
    assert_eq!(c.transport(), rath_mcp::TransportKind::StreamableHttp);
    let tools = c.list_tools().await.expect("list over HTTP");
    eprintln!("server-everything (HTTP) offers {} tools", tools.len());
    assert!(tools.iter().any(|t| t.name == "get-sum"));
    let set = c.tool_set().await.expect("tool set");
    let out = run_loop(
        &set,
        vec![("h1", "get-sum", json!({"a": 1, "b": 2}))],
        LoopOptions::default(),
    )
    .await;
    assert!(result_of(&out, "h1").contains('3'));
    let ev = evidence_of(&out, "h1");
    assert_eq!(ev.detail["mcp_transport"], json!("streamable_http"));
    assert_eq!(ev.backend.as_deref(), Some("mcp:everything-http"));
    c.close().await;
    let _ = server.kill().await;
}
