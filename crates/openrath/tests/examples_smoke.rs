//! Smoke tests: each small example, offline, against a temporary store.

mod common;

use std::path::Path;
use std::process::Command;

use openrath::persist::Store;
use openrath::prelude::*;

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn stored(dir: &std::path::Path) -> usize {
    Store::at(dir).list().expect("list store").len()
}

/// Runs example `name` offline with `OPENRATH_HOME=home` and `args`; returns its stdout.
fn run_example(name: &str, home: &Path, args: &[&str]) -> String {
    let out = Command::new(common::example_binary(name))
        .args(args)
        .env("OPENRATH_HOME", home)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENRATH_DETERMINISTIC")
        .current_dir(home)
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every session in the store at `dir`.
fn sessions(dir: &Path) -> Vec<Session> {
    let store = Store::at(dir);
    let list = store.list().expect("list store");
    list.iter()
        .map(|s| store.load(&s.id).expect("load").session)
        .collect()
}

#[test]
fn hello_agent_counts_words_with_its_tool() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("hello_agent", tmp.path(), &[]);
    let all = sessions(&tmp.path().join("sessions"));
    assert_eq!(all.len(), 3, "user, agent and the loop's output");
    let session = all
        .iter()
        .find(|s| s.lineage().operator == "run_session_loop")
        .expect("the loop's session");
    let tool_words = session.chunks().iter().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r) => serde_json::from_str::<serde_json::Value>(&r.content)
            .ok()
            .and_then(|v| v["words"].as_u64()),
        _ => None,
    });
    assert_eq!(tool_words, Some(5));
    assert_eq!(session.final_text(), Some("There are 5 words."));
    assert_eq!(session.usage().expect("usage").total_tokens, 171);
    assert!(stdout.contains("word_count"), "{stdout}");
    assert!(stdout.contains("  tool word_count -> ok"), "{stdout}");
    assert!(stdout.contains("Usage: 150/21/171"), "{stdout}");
    assert!(
        stdout.contains(&format!("(session {})", session.id())),
        "{stdout}"
    );
}

/// The README's quick example is `examples/quick_agent.rs`, and it runs.
#[test]
fn readme_quick_example_is_quick_agent_and_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let section = readme
        .split("## Quick example")
        .nth(1)
        .expect("a Quick example section");
    let shown = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a rust block");
    let file = std::fs::read_to_string(root.join("examples/quick_agent.rs")).expect("example");
    let code: Vec<&str> = file
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .collect();
    assert_eq!(
        shown,
        code.join("\n"),
        "README's quick example = examples/quick_agent.rs"
    );

    // Issue 48 (6): the whole lineage is saved, not the answer alone (its parents were
    // missing from the store).
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("quick_agent", tmp.path(), &["--deterministic"]);
    assert!(stdout.starts_with("There are 3 words.\n"), "{stdout}");
    let all = sessions(&tmp.path().join("sessions"));
    assert_eq!(
        all.len(),
        3,
        "the question, the agent's system prompt, the answer"
    );
    let answer = all
        .iter()
        .find(|s| s.final_text() == Some("There are 3 words."))
        .expect("the answer");
    assert_eq!(answer.lineage().parents.len(), 2);
    assert_no_dangling_parents(&all);
    assert!(
        stdout.contains(&format!(
            "saved 3 sessions to {}",
            tmp.path().join("sessions").display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("the answer is {}", answer.id())),
        "{stdout}"
    );
}

/// Every parent a session of `all` names is among them.
fn assert_no_dangling_parents(all: &[Session]) {
    let ids: Vec<&SessionId> = all.iter().map(Session::id).collect();
    for s in all {
        for p in &s.lineage().parents {
            assert!(
                ids.contains(&p),
                "{} names {p}, which is not stored",
                s.id()
            );
        }
    }
}

/// Issue 48 (6): the quick example keeps a failed run (its `?` lost it): on a model server
/// that refuses, it exits 1 with one line naming the failure, and the store holds the run's
/// sessions, the failed one ending in its failure record.
#[test]
fn the_quick_example_keeps_a_failed_run() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(common::example_binary("quick_agent"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("ANTHROPIC_") || k == "RATH_PROVIDER" {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(["--deterministic"])
        .env("OPENRATH_HOME", tmp.path())
        .env_remove("OPENRATH_STORE")
        .env_remove("OPENRATH_DETERMINISTIC")
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENAI_MAX_RETRIES", "0")
        .current_dir(tmp.path())
        .output()
        .expect("run quick_agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("quick_agent: run failed: "), "{stderr}");
    let all = sessions(&tmp.path().join("sessions"));
    let failed: Vec<&Session> = all.iter().filter(|s| s.failure().is_some()).collect();
    assert_eq!(failed.len(), 1, "the session the run stopped in");
    assert_eq!(failed[0].failure().unwrap().kind, "provider");
    assert!(
        stderr.contains(&format!("failed session {}", failed[0].id())),
        "{stderr}"
    );
    assert_eq!(
        all.len(),
        3,
        "the question, the system prompt, the failed session"
    );
    assert_no_dangling_parents(&all);
}

#[test]
fn lineage_export_writes_three_formats() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("lineage_export", tmp.path(), &[]);
    let dir = tmp.path().join("lineage");
    let jsonl = std::fs::read_to_string(dir.join("lineage_export.jsonl")).expect("jsonl");
    let kinds: Vec<String> = jsonl
        .lines()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l).expect("row");
            row["lineage_kind"].as_str().expect("kind").to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "leaf_user",
            "op_fork",
            "op_fork",
            "op_merge",
            "op_detach",
            "leaf_system",
            "op_session_loop"
        ]
    );
    assert_eq!(jsonl.lines().count(), 7);
    assert!(
        stdout.contains(&jsonl),
        "the printed export is the file\n{stdout}"
    );
    assert!(
        std::fs::read_to_string(dir.join("lineage_export.dot"))
            .expect("dot")
            .starts_with("digraph")
    );
    assert!(
        std::fs::read_to_string(dir.join("lineage_export.mmd"))
            .expect("mmd")
            .contains("-->")
    );
    assert_eq!(stored(&tmp.path().join("sessions")), 7);
}

#[test]
fn dynamic_selector_records_route_decisions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("dynamic_selector", tmp.path(), &[]);
    let decisions = stdout
        .split("Route decisions (route_decision chunks of the final session):\n")
        .nth(1)
        .expect("the decisions block");
    let decided: Vec<(&str, &str)> = decisions
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let choice = l.split(" -> ").nth(1).and_then(|r| r.split(':').next());
            let by = l.rsplit('[').next().and_then(|r| r.strip_suffix(']'));
            (choice.expect("choice"), by.expect("decided by"))
        })
        .collect();
    let choices: Vec<&str> = decided.iter().map(|d| d.0).collect();
    assert_eq!(choices, ["researcher", "writer", "reviewer", "done"]);
    assert!(decided.iter().all(|d| d.1 == "function"), "{stdout}");
    assert!(stdout.contains("Final answer: APPROVED"), "{stdout}");
    // The final session holds the same decisions.
    let all = sessions(&tmp.path().join("sessions"));
    let recorded = all
        .iter()
        .map(|s| {
            s.chunks()
                .iter()
                .filter_map(|c| match c.body() {
                    ChunkBody::RouteDecision(r) => Some(r.choice.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .max_by_key(Vec::len)
        .expect("sessions");
    assert_eq!(
        recorded,
        [
            Some("researcher".to_owned()),
            Some("writer".to_owned()),
            Some("reviewer".to_owned()),
            None
        ]
    );
    assert!(
        stdout.contains(&format!(
            "Summary: 4 decisions, {} sessions saved",
            all.len()
        )),
        "{stdout}"
    );
}

#[test]
fn sandbox_isolated_refuses_network_and_root_writes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("sandbox_isolated", tmp.path(), &[]);
    if let Some(reason) = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Skipped: the isolated backend is unavailable here: "))
    {
        rath_testkit::skip(&format!("the isolated backend needs bubblewrap: {reason}"));
        return;
    }
    let evidence: Vec<&str> = stdout
        .split("Tool evidence (backend, tool, exit code, outcome):\n")
        .nth(1)
        .expect("the evidence block")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(!evidence.is_empty(), "{stdout}");
    assert!(
        evidence.iter().all(|e| e.starts_with("  isolated ")),
        "{evidence:?}"
    );
    let summary_exit = |label: &str| -> Option<i64> {
        let line = stdout.lines().find(|l| l.trim_start().starts_with(label))?;
        let code = line.split("(exit ").nth(1)?.trim_end_matches(')');
        code.parse().ok()
    };
    assert!(
        matches!(summary_exit("network:"), Some(c) if c != 0),
        "{stdout}"
    );
    assert!(
        matches!(summary_exit("root fs:"), Some(c) if c != 0),
        "{stdout}"
    );
    assert!(stdout.contains("refused (exit"), "{stdout}");
    assert!(!Path::new("/usr/openrath_probe").exists());
    let workspace = tmp.path().join("workspaces/sandbox_isolated");
    let note = std::fs::read_to_string(workspace.join("notes/hello.txt")).expect("note");
    assert!(note.contains("isolated sandbox"));
    let read_back = stdout
        .lines()
        .find_map(|l| l.split("(read back: ").nth(1))
        .expect("the read-back line");
    assert!(read_back.contains("isolated sandbox"), "{stdout}");
    // The user's root, the agent's system session and the loop's output.
    assert_eq!(stored(&tmp.path().join("sessions")), 3);
}

#[test]
fn research_synthesis_records_its_compression() {
    if !python_available() {
        rath_testkit::skip("python3 is not installed (run_code runs Python)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let stdout = run_example("research_synthesis", tmp.path(), &[]);
    let record = stdout
        .lines()
        .find(|l| l.starts_with("Compression record ("))
        .expect("a compression record");
    assert!(record.contains("lossy=true"), "{record}");
    let dropped: Vec<&str> = stdout
        .split(record)
        .nth(1)
        .expect("dropped rows")
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  #"))
        .collect();
    assert!(!dropped.is_empty(), "{stdout}");
    assert!(
        dropped
            .iter()
            .all(|d| d.rsplit("sha256 ").next().is_some_and(|h| h.len() == 64)),
        "{dropped:?}"
    );
    let reproduction = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Reproduction (run_code): "));
    assert!(
        reproduction.is_some_and(|o| o.contains("5.0")),
        "{reproduction:?}"
    );
    let routes: Vec<&str> = stdout
        .split("\nRoute decisions:\n")
        .nth(1)
        .expect("routes")
        .lines()
        .map_while(|l| l.strip_prefix("  -> "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(routes, ["literature", "reproduction", "done"]);
    let n = stored(&tmp.path().join("sessions"));
    assert!(
        stdout.contains(&format!(
            "Summary: answer \"Report: Smith 2024's claim (mean 5) is reproduced exactly.\"; \
             {n} sessions saved to "
        )),
        "{stdout}"
    );
}
