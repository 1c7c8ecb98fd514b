//! Declared workflows (issue 50, item 2): the shipped examples load; a declared team and
//! the same team written in Rust make byte-identical sessions; every bad file is refused at
//! load with its file and line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rath_declare::{DeclareError, Declared};
use rath_flow::{Agent, FlowContext, Parallel, Sequence, Workflow};
use rath_provider::{Provider, ProviderError, ScriptedProvider, ScriptedResponse};
use rath_session::{Session, Stamper};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows")
}

/// Each agent's script: one text reply naming the agent.
fn scripted(agent: &str) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::text(format!("{agent} says so.")).usage(10, 3),
    ])))
}

#[test]
fn the_shipped_examples_load() {
    let declared = Declared::load_dir(examples()).expect("examples/workflows");
    assert_eq!(declared.names(), vec!["coder", "helper", "research"]);
    let coder = declared.get("coder").unwrap();
    assert_eq!(coder.agents["coder"].approve, vec!["write_workspace_file"]);
    let registry = declared.registry(scripted);
    for name in ["coder", "helper", "research"] {
        let def = registry.get(name).expect(name);
        (def.constructor)().expect("builds");
    }
}

/// The sessions a run of `w` records, as their stored JSON, under a deterministic stamper.
async fn run(w: &dyn Workflow) -> Vec<String> {
    let cx = FlowContext::new();
    let question = Session::user_with("Is the Moon drifting away?", Stamper::seeded(7));
    cx.forward(w, question).await.expect("the run");
    cx.journal()
        .sessions()
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect()
}

#[tokio::test]
async fn a_declared_team_and_the_same_team_in_rust_make_the_same_bytes() {
    let declared = Declared::load_dir(examples()).unwrap();
    let from_file = declared.build("research", &scripted).unwrap();
    let agent =
        |name: &str, instructions: &str| Agent::new(name, instructions, scripted(name).unwrap());
    let in_rust = Sequence::new("research")
        .describe("Two researchers in parallel, then a writer.")
        .then(
            Parallel::new("parallel")
                .branch(agent(
                    "facts",
                    "List the facts the question needs, one per line. Do not answer it.",
                ))
                .branch(agent(
                    "doubts",
                    "List what could make a quick answer to the question wrong, one per line.",
                )),
        )
        .then(agent(
            "writer",
            "Answer the question in two sentences, from the facts and doubts above.",
        ));
    let (a, b) = (run(from_file.as_ref()).await, run(&in_rust).await);
    assert!(
        a.len() >= 5,
        "the question, each agent's work, the merge: {}",
        a.len()
    );
    assert_eq!(a, b);
}

/// The one line a bad file is refused with.
fn refused(text: &str) -> String {
    match Declared::parse_str("bad.toml", text) {
        Err(e @ DeclareError::Invalid { .. }) => e.to_string(),
        other => panic!("refused, not {other:?}"),
    }
}

#[test]
fn bad_files_are_refused_with_their_file_and_line() {
    // A syntax error: the array left open on line 3.
    let e = refused("[agents.a]\ninstructions = \"x\"\ntools = [\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("unclosed array"),
        "{e}"
    );
    // An unknown field.
    let e = refused("[agents.a]\ninstructions = \"x\"\ntemperature = 2\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("temperature"),
        "{e}"
    );
    // An unknown tool.
    let e = refused(
        "[agents.a]\ninstructions = \"x\"\ntools = [\n  \"read_workspace_file\",\n  \"launch_rockets\",\n]\n",
    );
    assert!(
        e.starts_with("bad.toml:5: ") && e.contains("unknown tool \"launch_rockets\""),
        "{e}"
    );
    // An approval of a tool the agent does not have.
    let e = refused("[agents.a]\ninstructions = \"x\"\napprove = [\"write_workspace_file\"]\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("not one of its tools"),
        "{e}"
    );
    // A key in the file, as a key or as a value.
    let e = refused("[agents.a]\ninstructions = \"x\"\napi_key = \"abc\"\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("no credentials"),
        "{e}"
    );
    let e = refused(
        "description = \"x\"\n\n[agents.a]\ninstructions = \"sk-proj-0123456789abcdefghij\"\n",
    );
    assert!(
        e.starts_with("bad.toml:4: ") && e.contains("credential-like value"),
        "{e}"
    );
    // A flow naming nothing declared.
    let e = refused(
        "flow = { sequence = [\n  \"a\",\n  \"ghost\",\n] }\n[agents.a]\ninstructions = \"x\"\n",
    );
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("\"ghost\""),
        "{e}"
    );
    // Two agents and no flow.
    let e = refused("[agents.a]\ninstructions = \"x\"\n[agents.b]\ninstructions = \"y\"\n");
    assert!(e.contains("no flow"), "{e}");
    // A loop without a bound.
    let e =
        refused("flow = { loop = \"a\", until = \"DONE\" }\n[agents.a]\ninstructions = \"x\"\n");
    assert!(e.starts_with("bad.toml:1: ") && e.contains("max"), "{e}");
}

#[test]
fn a_cycle_between_workflows_is_refused() {
    let one = "name = \"one\"\nflow = { sequence = [\"a\", \"two\"] }\n[agents.a]\ninstructions = \"x\"\n";
    let two = "name = \"two\"\n\nflow = { sequence = [\"b\", \"one\"] }\n[agents.b]\ninstructions = \"y\"\n";
    let e = Declared::parse_all(vec![
        ("one.toml".into(), one.into()),
        ("two.toml".into(), two.into()),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("two.toml:3: "), "{e}");
    assert!(e.contains("one -> two -> one"), "{e}");
    // Without the cycle, one workflow uses the other.
    let two = two.replace("\"one\"", "\"b\"");
    let d = Declared::parse_all(vec![
        ("one.toml".into(), one.into()),
        ("two.toml".into(), two),
    ])
    .unwrap();
    assert_eq!(d.names(), vec!["one", "two"]);
}

#[test]
fn a_directory_without_files_or_with_a_duplicate_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Declared::load_dir(dir.path()),
        Err(DeclareError::Io { .. })
    ));
    std::fs::write(
        dir.path().join("a.toml"),
        "name = \"x\"\n[agents.a]\ninstructions = \"x\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.toml"),
        "name = \"x\"\n[agents.b]\ninstructions = \"y\"\n",
    )
    .unwrap();
    let e = Declared::load_dir(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("b.toml:1: ") && e.contains("also declared in"),
        "{e}"
    );
}

#[test]
fn bad_mcp_declarations_are_refused_with_their_file_and_line() {
    // A program that is not there (the server would fail only at the first run).
    let e = refused(
        "[agents.a]\ninstructions = \"x\"\ntools = [\"mcp:fs\"]\n\n[mcp.fs]\ncommand = \"no-such-mcp-server-here\"\n",
    );
    assert!(
        e.starts_with("bad.toml:5: ") && e.contains("\"no-such-mcp-server-here\" not found"),
        "{e}"
    );
    // A path that is not a program.
    let e = refused("[agents.a]\ninstructions = \"x\"\n[mcp.fs]\ncommand = \"/no/such/server\"\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("not found"),
        "{e}"
    );
    // Neither a program nor a URL, or both.
    let e = refused("[agents.a]\ninstructions = \"x\"\n[mcp.fs]\nargs = [\"x\"]\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("`command` or `url`"),
        "{e}"
    );
    let e = refused("[agents.a]\ninstructions = \"x\"\n[mcp.fs]\nurl = \"ftp://host/mcp\"\n");
    assert!(e.contains("not http(s)"), "{e}");
    // A field MCP tables do not have (headers carry credentials: not in a file).
    let e = refused(
        "[agents.a]\ninstructions = \"x\"\n[mcp.fs]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { X = \"y\" }\n",
    );
    assert!(
        e.starts_with("bad.toml:5: ") && e.contains("headers"),
        "{e}"
    );
    // A tool of a server the file does not declare.
    let e = refused("[agents.a]\ninstructions = \"x\"\ntools = [\"mcp:web/fetch\"]\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("does not declare ([mcp.web])"),
        "{e}"
    );
}

/// `mcp-server-everything` over stdio (`.ci/install.d/50-mcp.sh`), or a skip.
fn everything() -> Option<String> {
    let found = std::env::var("RATH_MCP_EVERYTHING").ok();
    if found.is_none() {
        rath_testkit::skip(
            "RATH_MCP_EVERYTHING is not set to mcp-server-everything (see .ci/install.d/50-mcp.sh)",
        );
    }
    found
}

/// A file whose agent calls `echo` of the MCP server declared beside it.
fn echo_file(server: &str) -> String {
    format!(
        "description = \"Echoes through MCP.\"\n\n[agents.echoer]\ninstructions = \"Echo.\"\n\
         tools = [\"mcp:everything/echo\"]\n\n[mcp.everything]\n{server}\n"
    )
}

/// Runs the `echoer` agent of `declared`, its model asking for `echo` once: the tool's
/// answer, as the session's tool result.
async fn echo_through(mut declared: Declared) -> String {
    declared
        .connect_mcp(&rath_mcp::ConnectOptions::default())
        .await
        .expect("the server starts and has echo");
    let models = |_: &str| -> Result<Arc<dyn Provider>, ProviderError> {
        Ok(Arc::new(ScriptedProvider::new(vec![
            ScriptedResponse::tool_calls([("c1", "echo", serde_json::json!({"message": "ping"}))]),
            ScriptedResponse::text("done"),
        ])))
    };
    let registry = declared.registry(models);
    let w = (registry.get("echo").unwrap().constructor)().expect("builds");
    drop(registry);
    drop(declared);
    // The workflow alone keeps its server.
    let out = FlowContext::new()
        .forward(w.as_ref(), Session::user("say ping"))
        .await
        .expect("the run");
    out.chunks()
        .iter()
        .find_map(|c| match c.body() {
            rath_session::ChunkBody::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .expect("a tool result")
}

#[tokio::test]
async fn an_agent_calls_a_tool_of_an_mcp_server_its_file_declares_over_stdio() {
    let Some(bin) = everything() else { return };
    let text = echo_file(&format!("command = {bin:?}\nargs = [\"stdio\"]"));
    let declared = Declared::parse_str("echo.toml", &text).unwrap();
    assert!(declared.uses_mcp());
    let answer = echo_through(declared).await;
    assert!(answer.contains("ping"), "{answer}");

    // A tool the server does not have: refused when the servers start, at its line.
    let bad = text.replace("mcp:everything/echo", "mcp:everything/launch");
    let mut declared = Declared::parse_str("echo.toml", &bad).unwrap();
    let e = declared
        .connect_mcp(&rath_mcp::ConnectOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("echo.toml:5: ") && e.contains("has no tool \"launch\" (it has "),
        "{e}"
    );
    // Not started: building says so (never a silent agent without its tools).
    let declared = Declared::parse_str("echo.toml", &text).unwrap();
    let e = declared
        .build("echo", &scripted)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("was not started"), "{e}");
}

#[tokio::test]
async fn an_agent_calls_a_tool_of_an_mcp_server_its_file_declares_over_http() {
    let Some(bin) = everything() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mcp-server-everything starts");
    // Up when it accepts a connection (a guard of seconds against a hang).
    let start = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "never listened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let text = echo_file(&format!("url = \"http://127.0.0.1:{port}/mcp\""));
    let answer = echo_through(Declared::parse_str("echo.toml", &text).unwrap()).await;
    assert!(answer.contains("ping"), "{answer}");
    let _ = server.kill().await;

    // A server that is not there: refused when the servers start, at its table's line.
    let mut declared = Declared::parse_str("echo.toml", &text).unwrap();
    let e = declared
        .connect_mcp(
            &rath_mcp::ConnectOptions::default().connect_timeout(std::time::Duration::from_secs(5)),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("echo.toml:7: ") && e.contains("cannot be started or reached"),
        "{e}"
    );
}
