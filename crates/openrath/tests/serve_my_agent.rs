//! `examples/serve_my_agent.rs` (issue 50, item 1): a user-defined team served in one call.
//! The example runs as a process on a mock OpenAI-compatible server, is called over HTTP
//! with the key its first start prints, answers from both agents, stops on SIGTERM and
//! leaves the run's sessions in its store.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use openrath::provider::mock::{MockReply, MockServer};
use serde_json::{Value, json};

/// The address and the key the example prints on stderr, read line by line; the rest of
/// its stderr goes on being read (and kept) until it ends.
fn address_and_key(
    stderr: impl std::io::Read + Send + 'static,
) -> (String, String, std::thread::JoinHandle<String>) {
    let mut lines = BufReader::new(stderr).lines();
    let (mut addr, mut key) = (None, None);
    while let Some(Ok(line)) = lines.next() {
        if let Some(rest) = line.strip_prefix("openrath: serving on ") {
            addr = rest.split_whitespace().next().map(str::to_owned);
        } else if line.starts_with("openrath: first start: key ") {
            key = lines.next().and_then(Result::ok);
        }
        if let (Some(a), Some(k)) = (&addr, &key) {
            let rest = std::thread::spawn(move || {
                lines.map_while(Result::ok).collect::<Vec<_>>().join("\n")
            });
            return (a.clone(), k.clone(), rest);
        }
    }
    panic!("the example ended before printing its address and key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_my_agent_answers_a_run_of_its_team() {
    let model = MockServer::start().await.expect("mock model server");
    model.push(MockReply::text("Mont Blanc: 4,806 m (2021 survey)."));
    model.push(MockReply::text("Mont Blanc is 4,806 metres tall."));
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite:{}", tmp.path().join("agent.db").display());
    let mut cmd = Command::new(common::example_binary_with("serve_my_agent", &["server"]));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("ANTHROPIC_") || k == "RATH_PROVIDER" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .env("OPENAI_BASE_URL", model.base_url())
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENRATH_STORE", &store)
        .env("RATH_BIND", "127.0.0.1:0")
        .current_dir(tmp.path())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run serve_my_agent");
    let stderr = child.stderr.take().expect("stderr");
    let (base, key, rest) = tokio::task::spawn_blocking(move || address_and_key(stderr))
        .await
        .expect("stderr reader");

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let thread: Value = post("/threads", json!({}))
        .await
        .expect("create a thread")
        .json()
        .await
        .expect("thread json");
    let tid = thread["thread_id"].as_str().expect("thread id");
    let answer = post(
        &format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "team", "input": {"messages": ["How tall is Mont Blanc?"]}}),
    )
    .await
    .expect("run the team");
    assert_eq!(answer.status(), 200);
    let values: Value = answer.json().await.expect("answer json");
    let said: Vec<&str> = values["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["type"] == "ai")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        said,
        [
            "Mont Blanc: 4,806 m (2021 survey).",
            "Mont Blanc is 4,806 metres tall."
        ],
        "{values}"
    );
    assert_eq!(model.requests().len(), 2, "one model call per agent");

    // SIGTERM: a graceful stop, exit 0.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    let rest = rest.join().expect("stderr");
    assert!(status.success(), "{status}: {rest}");
    assert!(rest.contains("openrath: shutting down"), "{rest}");

    // The run's sessions are in the example's store.
    let sessions = openrath::store::open_store(&store)
        .await
        .expect("open the store");
    let listed = sessions.list().await.expect("list");
    assert!(
        listed.len() >= 3,
        "the input, each agent's session: {}",
        listed.len()
    );
}
