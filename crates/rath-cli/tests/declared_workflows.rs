//! Declared workflows in the `rath` commands (issue 50, items 2 and 4): `rath run FILE`
//! runs one on the embedded store, `rath serve --workflows DIR` serves every file of DIR to
//! LangGraph's routes, and a bad directory stops `serve` before it listens, naming the file
//! and line. The agents' model is a mock OpenAI-compatible server.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rath_provider::mock::{MockReply, MockServer};
use serde_json::{Value, json};

#[path = "common/served.rs"]
#[allow(dead_code)] // `serve` starts the bundled workflows; these tests start their own
mod served;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows")
}

/// `rath` with the model at `base_url` (none: no model in the environment).
fn rath(base_url: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("ANTHROPIC_") || k == "RATH_PROVIDER" {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("OPENRATH_HOME").env_remove("OPENRATH_STORE");
    if let Some(url) = base_url {
        cmd.env("OPENAI_BASE_URL", url)
            .env("OPENAI_API_KEY", "test-key")
            .env("OPENAI_MAX_RETRIES", "0");
    }
    cmd
}

fn mock() -> (tokio::runtime::Runtime, MockServer) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(MockServer::start()).expect("mock model server");
    (rt, server)
}

#[test]
fn rath_run_runs_a_declared_team_file() {
    let (_rt, model) = mock();
    for text in [
        "Fact: it recedes 3.8 cm a year.",
        "Doubt: none.",
        "Yes, slowly.",
    ] {
        model.push(MockReply::text(text));
    }
    let home = tempfile::tempdir().unwrap();
    let research = examples().join("research.toml");
    let out = rath(Some(&model.base_url()))
        .args(["--store", &home.path().display().to_string(), "run"])
        .arg(&research)
        .args(["--input", "Is the Moon drifting away?"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.lines().next(), Some("Yes, slowly."), "{stdout}");
    for step in [
        "facts: started",
        "doubts: started",
        "writer: started",
        "writer: done (",
    ] {
        assert!(stderr.contains(step), "{step:?} in {stderr}");
    }
    assert_eq!(model.requests().len(), 3, "one call per agent");
}

/// `rath run FILE` with a file that declares an MCP server (`mcp-server-everything` over
/// stdio): the server is started with the command, and the agent's call of its `echo` tool
/// is answered by it.
#[test]
fn rath_run_starts_the_mcp_server_a_file_declares_and_its_agent_calls_it() {
    let Ok(bin) = std::env::var("RATH_MCP_EVERYTHING") else {
        rath_testkit::skip(
            "RATH_MCP_EVERYTHING is not set to mcp-server-everything (see .ci/install.d/50-mcp.sh)",
        );
        return;
    };
    let (_rt, model) = mock();
    model.push(MockReply::tool_calls(vec![(
        "c1",
        "echo",
        json!({"message": "ping"}),
    )]));
    model.push(MockReply::text("It said ping."));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("echo.toml");
    std::fs::write(
        &file,
        format!(
            "[agents.echoer]\ninstructions = \"Echo.\"\ntools = [\"mcp:everything/echo\"]\n\n\
             [mcp.everything]\ncommand = {bin:?}\nargs = [\"stdio\"]\n"
        ),
    )
    .unwrap();
    let out = rath(Some(&model.base_url()))
        .args([
            "--store",
            &dir.path().join("home").display().to_string(),
            "run",
        ])
        .arg(&file)
        .args(["--input", "Say ping."])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.lines().next(), Some("It said ping."), "{stdout}");
    assert!(stderr.contains("echoer: tool echo ok"), "{stderr}");
    // The model's second request carries the server's answer.
    let second = model.requests()[1].to_string();
    assert!(second.contains("Echo: ping"), "{second}");
}

#[test]
fn a_bad_workflow_directory_stops_serve_before_it_listens() {
    let (_rt, model) = mock();
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join("flows");
    std::fs::create_dir(&flows).unwrap();
    std::fs::copy(examples().join("helper.toml"), flows.join("helper.toml")).unwrap();
    std::fs::write(
        flows.join("zbad.toml"),
        "[agents.a]\ninstructions = \"x\"\ntools = [\"launch_rockets\"]\n",
    )
    .unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let serve = |base: Option<&str>, flows: &Path| {
        rath(base)
            .args([
                "serve",
                "--runs",
                &runs,
                "--bind",
                "127.0.0.1:0",
                "--workflows",
            ])
            .arg(flows)
            .output()
            .unwrap()
    };
    let out = serve(Some(&model.base_url()), &flows);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:3: agent \"a\": unknown tool",
            flows.join("zbad.toml").display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("serving on"), "{stderr}");
    assert!(!dir.path().join("runs.db").exists(), "nothing was opened");
    // An MCP server whose program is not there: refused at its line, before any run.
    std::fs::write(
        flows.join("zbad.toml"),
        "[agents.a]\ninstructions = \"x\"\ntools = [\"mcp:fs\"]\n\n[mcp.fs]\ncommand = \"no-such-mcp-server\"\n",
    )
    .unwrap();
    let out = serve(Some(&model.base_url()), &flows);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:5: MCP server \"fs\": program \"no-such-mcp-server\" not found",
            flows.join("zbad.toml").display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("serving on"), "{stderr}");
    assert!(!dir.path().join("runs.db").exists(), "nothing was opened");
    // Good files and no model in the environment: refused too.
    std::fs::remove_file(flows.join("zbad.toml")).unwrap();
    let out = serve(None, &flows);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("declared workflows need a model"),
        "{stderr}"
    );
}

/// `rath serve --workflows examples/workflows` on SQLite stores in `dir`, its model at
/// `model`: the child, the address it serves on, a key of tenant `t`, and the thread that
/// drains its stderr (joined after the child ends: what it printed).
fn serve_examples(
    dir: &Path,
    model: &str,
) -> (
    std::process::Child,
    String,
    String,
    std::thread::JoinHandle<Vec<String>>,
) {
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let key = rath(None)
        .args(["keys", "create", "--runs", &runs, "--tenant", "t"])
        .output()
        .unwrap();
    assert!(key.status.success());
    let key = String::from_utf8_lossy(&key.stdout)
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let mut child = rath(Some(model))
        .args([
            "--store",
            &store,
            "serve",
            "--runs",
            &runs,
            "--bind",
            "127.0.0.1:0",
        ])
        .arg("--workflows")
        .arg(examples())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served::served_at(&mut lines);
    // Keep reading stderr, so the server never blocks writing to it.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    (child, addr, key, rest)
}

/// Stops a server started by [`serve_examples`] with SIGTERM: it exits 0.
fn stop(mut child: std::process::Child, rest: std::thread::JoinHandle<Vec<String>>) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let rest = rest.join().unwrap();
    assert!(status.success(), "{status:?}: {rest:?}");
}

#[test]
fn serve_workflows_serves_every_declared_file_to_langgraph_routes() {
    let (rt, model) = mock();
    model.push(MockReply::text("Paris."));
    let dir = tempfile::tempdir().unwrap();
    let (child, addr, key, rest) = serve_examples(dir.path(), &model.base_url());

    let answer = rt.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let post = |path: String, body: Value| {
            http.post(format!("http://{addr}{path}"))
                .bearer_auth(&key)
                .json(&body)
                .send()
        };
        let found: Value = post("/assistants/search".into(), json!({}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut names: Vec<&str> = found
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["graph_id"].as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["coder", "helper", "research"], "{found}");
        let thread: Value = post("/threads".into(), json!({}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let tid = thread["thread_id"].as_str().unwrap().to_owned();
        let r = post(
            format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "helper", "input": {"messages": ["Capital of France?"]}}),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()
    });
    let last = answer["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "Paris.", "{answer}");
    stop(child, rest);
}

/// Issue 50's streaming acceptance: the LangGraph Python SDK streams a run of every declared
/// workflow with `stream_mode=["messages-tuple", "updates"]` and gets the reply in pieces as
/// the model streamed it (`AIMessageChunk`s, more than one per reply, one id per reply) and
/// one update per agent step, keyed by the agent, each after its agent's pieces; the
/// thread's state then holds the whole reply. The model streams each answer in 4-character
/// fragments.
#[test]
fn the_langgraph_sdk_streams_tokens_and_steps_of_every_declared_workflow() {
    let Some(python) = std::env::var_os("RATH_LANGGRAPH_SDK_PYTHON") else {
        rath_testkit::skip(
            "RATH_LANGGRAPH_SDK_PYTHON is not set (see .ci/install.d/67-langgraph-sdk.sh)",
        );
        return;
    };
    const REPLY: &str = "Four: two and two make four.";
    let (_rt, model) = mock();
    model.set_fallback(Some(MockReply::text(REPLY).fragment(4)));
    let dir = tempfile::tempdir().unwrap();
    let (child, addr, key, rest) = serve_examples(dir.path(), &model.base_url());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/declared/stream.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{addr}"))
        .arg("What is two and two?")
        .env("LG_KEY", &key)
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY")
        .output()
        .expect("python starts");
    stop(child, rest);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stream.py failed:\n{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("stream.py prints JSON");

    let agents: [(&str, &[&str]); 3] = [
        ("helper", &["helper"]),
        ("research", &["facts", "doubts", "writer"]),
        ("coder", &["coder"]),
    ];
    for (graph, steps) in agents {
        let run = &v[graph];
        assert_eq!(
            run["warnings"],
            json!([]),
            "{graph}: the stream ended cleanly"
        );
        let events = run["events"].as_array().expect("events");
        // Pieces of reply text by stream id, and the agent each came from.
        let mut replies: Vec<(String, String, String)> = Vec::new();
        let mut updates: Vec<(usize, String)> = Vec::new();
        let mut last_piece: std::collections::HashMap<String, usize> = Default::default();
        for (i, e) in events.iter().enumerate() {
            match e["event"].as_str().unwrap() {
                "messages" => {
                    let (m, meta) = (&e["data"][0], &e["data"][1]);
                    assert_eq!(m["type"], "AIMessageChunk", "{graph}: {e}");
                    let id = m["id"].as_str().unwrap().to_owned();
                    let node = meta["langgraph_node"].as_str().unwrap().to_owned();
                    last_piece.insert(node.clone(), i);
                    match replies.iter_mut().find(|r| r.0 == id) {
                        Some(r) => r.2.push_str(m["content"].as_str().unwrap()),
                        None => replies.push((id, node, m["content"].as_str().unwrap().into())),
                    }
                }
                "updates" => {
                    let u = e["data"].as_object().unwrap();
                    assert_eq!(u.len(), 1, "{graph}: {e}");
                    let (agent, body) = u.iter().next().unwrap();
                    let added = body["messages"].as_array().unwrap();
                    assert_eq!(
                        added.last().unwrap()["content"],
                        REPLY,
                        "{graph}: {agent}'s step ends with its reply"
                    );
                    updates.push((i, agent.clone()));
                }
                "metadata" => assert_eq!(i, 0, "{graph}"),
                other => panic!("{graph}: unexpected event {other}: {e}"),
            }
        }
        let mut stepped: Vec<&str> = updates.iter().map(|u| u.1.as_str()).collect();
        stepped.sort_unstable();
        let mut want = steps.to_vec();
        want.sort_unstable();
        assert_eq!(stepped, want, "{graph}: one update per agent step");
        assert_eq!(
            replies.len(),
            steps.len(),
            "{graph}: one streamed reply per agent"
        );
        for (id, node, text) in &replies {
            assert_eq!(text, REPLY, "{graph}: reply {id} of {node} whole");
        }
        let pieces = events.iter().filter(|e| e["event"] == "messages").count();
        assert!(
            pieces >= 2 * steps.len(),
            "{graph}: each reply came in pieces ({pieces} for {} replies)",
            steps.len()
        );
        for (i, agent) in &updates {
            assert!(
                last_piece[agent] < *i,
                "{graph}: {agent}'s update follows its reply's pieces"
            );
        }
        let state = run["state"]["values"]["messages"].as_array().unwrap();
        assert_eq!(state.last().unwrap()["content"], REPLY, "{graph}");
    }
}

/// The same stream on the live local model (`.ci/install.d/20-llama.sh`) for the one-agent
/// workflow: the reply comes in more than one piece, the pieces make its whole message in
/// the thread's state, and the agent's step is one update. The local server answers a
/// stream it cannot serve (another request holds the model: other tests use it too) with an
/// empty stream, and the provider then asks again unstreamed and passes the answer on in one
/// piece (`stream_fallback` in the evidence): so up to three runs are streamed, each is
/// checked, and one must come in pieces. (A `Parallel`'s agents ask the model at once for
/// the same reason; the mock test above covers the team.)
#[test]
fn the_langgraph_sdk_streams_a_live_model_s_tokens() {
    let (Some(python), Ok(base)) = (
        std::env::var_os("RATH_LANGGRAPH_SDK_PYTHON"),
        std::env::var("RATH_LIVE_BASE_URL"),
    ) else {
        rath_testkit::skip(
            "RATH_LANGGRAPH_SDK_PYTHON or RATH_LIVE_BASE_URL is not set (see \
             .ci/install.d/67-langgraph-sdk.sh and 20-llama.sh)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (child, addr, key, rest) = serve_examples(dir.path(), &base);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/declared/stream.py");
    let mut most = 0;
    for _ in 0..3 {
        let out = Command::new(&python)
            .arg(&script)
            .arg(format!("http://{addr}"))
            .arg("Why is the sky blue?")
            .arg("helper")
            .env("LG_KEY", &key)
            .env_remove("LANGGRAPH_API_KEY")
            .env_remove("LANGSMITH_API_KEY")
            .env_remove("LANGCHAIN_API_KEY")
            .output()
            .expect("python starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "stream.py failed:\n{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("stream.py prints JSON");
        let events = v["helper"]["events"].as_array().expect("events");
        let mut ids = std::collections::BTreeSet::new();
        let mut text = String::new();
        let mut pieces = 0;
        for e in events.iter().filter(|e| e["event"] == "messages") {
            let m = &e["data"][0];
            assert_eq!(m["type"], "AIMessageChunk", "{e}");
            ids.insert(m["id"].as_str().unwrap().to_owned());
            text.push_str(m["content"].as_str().unwrap());
            pieces += 1;
        }
        assert_eq!(ids.len(), 1, "one streamed reply: {events:?}");
        let updates: Vec<&Value> = events.iter().filter(|e| e["event"] == "updates").collect();
        assert_eq!(
            updates.len(),
            1,
            "one update for the agent's step: {updates:?}"
        );
        assert_eq!(
            updates[0]["data"]["helper"]["messages"][0]["content"],
            text.as_str()
        );
        let state = v["helper"]["state"]["values"]["messages"]
            .as_array()
            .unwrap();
        assert_eq!(
            state.last().unwrap()["content"],
            text.as_str(),
            "the pieces make the reply"
        );
        most = most.max(pieces);
        if pieces > 1 {
            break;
        }
    }
    stop(child, rest);
    assert!(most > 1, "no run's reply came in more than one piece");
}

/// Polls `rath --json runs show ID` until its status is `want` (a guard of minutes against
/// a hang; the test waits for the status, not for a clock).
fn wait_for(cmd: &dyn Fn() -> Command, id: &str, want: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        let out = cmd().args(["--json", "runs", "show", id]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        if shown["run"]["status"] == want {
            return shown;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "run {id} is {} after minutes, wanted {want}",
            shown["run"]["status"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The shipped files under `rath worker --workflows` on PostgreSQL: a worker killed
/// (SIGKILL) while its run's third model call is in flight; a second worker resumes the
/// run from its journal, asks only that call again, and finishes it.
#[test]
fn declared_workflows_on_postgres_survive_a_sigkill_of_their_worker() {
    let Some(base) = std::env::var("RATH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        rath_testkit::skip(
            "RATH_TEST_POSTGRES_URL is not set to a PostgreSQL database \
             (see .ci/install.d/60-postgres.sh)",
        );
        return;
    };
    let (rt, model) = mock();
    model.push(MockReply::text("Fact: it recedes 3.8 cm a year."));
    model.push(MockReply::text("Doubt: none."));
    // The writer's first call never answers: its worker is killed while it waits.
    model.push(rath_provider::mock::MockFault::Hang(Duration::from_secs(
        600,
    )));
    model.push(MockReply::text("Yes, slowly."));
    let schema = format!("rath_test_declared_{}", std::process::id());
    let runs = format!("{base}?schema={schema}_runs");
    let store = format!("{base}?schema={schema}");
    let base_url = model.base_url();
    let cmd = || {
        let mut c = rath(Some(&base_url));
        c.args(["--store", &store]).env("RATH_RUNS", &runs);
        c
    };
    let worker = |name: &str| {
        cmd()
            .args([
                "worker",
                "--name",
                name,
                "--lease-ms",
                "1000",
                "--poll-ms",
                "20",
            ])
            .arg("--workflows")
            .arg(examples())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let submitted = cmd()
        .args(["--json", "runs", "--workflows"])
        .arg(examples())
        .args([
            "submit",
            "research",
            "--input",
            "Is the Moon drifting away?",
        ])
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let run: Value = serde_json::from_slice(&submitted.stdout).unwrap();
    let id = run["id"].as_str().unwrap().to_owned();

    let mut a = worker("worker-a");
    let start = std::time::Instant::now();
    while model.requests().len() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the writer never called"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(a.id() as i32, libc::SIGKILL) };
    let killed = a.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9)
    );

    let mut b = worker("worker-b");
    let shown = wait_for(&cmd, &id, "succeeded");
    // SAFETY: as above.
    unsafe { libc::kill(b.id() as i32, libc::SIGTERM) };
    assert!(b.wait().unwrap().success());
    let asked = model.requests();
    assert_eq!(
        asked.len(),
        4,
        "the two answered calls came from the journal"
    );
    assert_eq!(asked[3], asked[2], "the cut call, asked again as it was");
    let claims: Vec<&str> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "claimed")
        .filter_map(|e| e["by"].as_str())
        .collect();
    assert_eq!(claims, ["worker-a", "worker-b"], "{shown}");

    rt.block_on(async {
        let pool = sqlx::PgPool::connect(&base).await.expect("connect");
        for s in [schema.clone(), format!("{schema}_runs")] {
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
                .execute(&pool)
                .await
                .expect("drop the schema");
        }
        pool.close().await;
    });
}
