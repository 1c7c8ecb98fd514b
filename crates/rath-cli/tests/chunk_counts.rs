//! Issue 48 (5): one chunk count for a session, whichever command shows it. A session's
//! chunks are all of them, conversation and evidence (what `rath show` numbers `[0]` to
//! `[N-1]`); `rath sessions`, `rath show`, `rath lineage`, `rath verify` and `rath view`
//! say the same N for it, on a JSONL directory and on SQLite.

use std::process::Command;

use openrath::prelude::*;

/// Runs `rath --store STORE ARGS`; returns stdout (and asserts exit 0).
fn rath(store: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("OPENRATH_HOME")
        .env_remove("OPENRATH_STORE")
        .output()
        .expect("run rath");
    assert_eq!(
        out.status.code(),
        Some(0),
        "rath {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(store: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&rath(store, &all)).expect("JSON output")
}

#[derive(serde::Deserialize, JsonSchema)]
struct Args {
    text: String,
}

/// An agent's loop output with model-call and tool evidence, and its parents, saved.
async fn agent_sessions() -> Vec<Session> {
    let count = typed_tool("count", "Count words.", |_cx, a: Args| async move {
        Ok(json!({"words": a.text.split_whitespace().count()}))
    });
    let model = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("c1", "count", json!({"text": "a b c"}))]),
        ScriptedResponse::text("3 words."),
    ]);
    let agent =
        Agent::new("counter", "Count.", model).with_tools(ToolSet::new().with(count).unwrap());
    let cx = FlowContext::new();
    cx.forward(
        &agent,
        Session::user_with("Count 'a b c'.", Stamper::counter()),
    )
    .await
    .unwrap();
    cx.journal().sessions()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_command_gives_a_session_the_same_chunk_count() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = agent_sessions().await;
    let out = sessions
        .iter()
        .find(|s| s.lineage().kind.as_str() == "op_session_loop")
        .unwrap();
    let conversation = out.conversation().count();
    assert!(out.len() > conversation, "the loop output holds evidence");
    let jsonl = tmp.path().join("sessions");
    let store = openrath::persist::Store::at(&jsonl);
    store.save_all(sessions.iter()).unwrap();
    let sqlite = format!("sqlite://{}", tmp.path().join("s.sqlite").display());
    let jsonl = jsonl.display().to_string();
    rath(&jsonl, &["store", "copy", &jsonl, &sqlite]);
    for store in [&jsonl, &sqlite] {
        let id = out.id().as_str();
        let want = out.len() as u64;
        let listing = json(store, &["sessions"]);
        let row = listing["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .expect("the loop output is listed");
        assert_eq!(row["chunks"], want, "{store}: rath sessions --json");
        assert_eq!(row["evidence"], want - conversation as u64, "{store}");
        let table = rath(store, &["sessions"]);
        let line = table.lines().find(|l| l.starts_with(id)).unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[4], want.to_string(), "{store}: rath sessions: {line}");
        let shown = json(store, &["show", id]);
        assert_eq!(shown["chunk_count"], want, "{store}: rath show --json");
        let text = rath(store, &["show", id]);
        assert!(
            text.contains(&format!("chunks    {want} (")),
            "{store}: rath show: {text}"
        );
        let tree = rath(store, &["lineage"]);
        let line = tree.lines().find(|l| l.contains(id)).unwrap();
        assert!(
            line.contains(&format!("  {want} chunks  ")),
            "{store}: rath lineage: {line}"
        );
        let verify = json(store, &["verify"]);
        let check = verify["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["file"].as_str().unwrap().starts_with(id))
            .unwrap();
        assert_eq!(check["chunks"], want, "{store}: rath verify --json");
        let page = tmp.path().join("view.html");
        rath(store, &["view", "--out", page.to_str().unwrap()]);
        let html = std::fs::read_to_string(&page).unwrap();
        let row = html
            .lines()
            .find(|l| l.contains("class=\"row\"") && l.contains(id))
            .unwrap();
        assert!(
            row.contains(&format!("<td>{want} (")),
            "{store}: rath view's session list: {row}"
        );
    }
}
