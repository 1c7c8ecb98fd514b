//! Smoke tests: the logic of each small example, offline, against a temporary store.

mod common;

use openrath::demos::hello_agent::DemoConfig;
use openrath::demos::{
    dynamic_selector, hello_agent, lineage_export, research_synthesis, sandbox_isolated,
};
use openrath::persist::Store;

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Runtime::new().expect("runtime").block_on(f)
}

fn stored(dir: &std::path::Path) -> usize {
    Store::at(dir).list().expect("list store").len()
}

#[test]
fn hello_agent_counts_words_with_its_tool() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = block_on(hello_agent::run(DemoConfig::offline(tmp.path()))).expect("run");
    assert_eq!(r.tool_words, Some(5));
    assert_eq!(
        openrath::demos::dynamic_selector::final_answer(&r.session),
        "There are 5 words."
    );
    assert_eq!(r.session.usage().expect("usage").total_tokens, 171);
    assert!(r.summary.contains("word_count"), "{}", r.summary);
    assert_eq!(stored(&r.store_dir), 3);
}

#[test]
fn lineage_export_writes_three_formats() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = block_on(lineage_export::run(DemoConfig::offline(tmp.path()))).expect("run");
    assert_eq!(
        r.kinds,
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
    let jsonl = std::fs::read_to_string(&r.jsonl_path).expect("jsonl");
    assert_eq!(jsonl.lines().count(), 7);
    assert_eq!(jsonl, r.jsonl);
    assert!(
        std::fs::read_to_string(&r.dot_path)
            .expect("dot")
            .starts_with("digraph")
    );
    assert!(
        std::fs::read_to_string(&r.mermaid_path)
            .expect("mmd")
            .contains("-->")
    );
    assert_eq!(stored(&r.store_dir), 7);
}

#[test]
fn dynamic_selector_records_route_decisions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = block_on(dynamic_selector::run(DemoConfig::offline(tmp.path()))).expect("run");
    let choices: Vec<Option<&str>> = r.decisions.iter().map(|d| d.choice.as_deref()).collect();
    assert_eq!(
        choices,
        [Some("researcher"), Some("writer"), Some("reviewer"), None]
    );
    assert!(r.decisions.iter().all(|d| d.decided_by == "function"));
    assert!(dynamic_selector::final_answer(&r.final_session).starts_with("APPROVED"));
    assert_eq!(stored(&r.store_dir), r.sessions);
}

#[test]
fn sandbox_isolated_refuses_network_and_root_writes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    match block_on(sandbox_isolated::run(DemoConfig::offline(tmp.path()))).expect("run") {
        sandbox_isolated::SandboxOutcome::Unavailable(reason) => {
            common::missing(&format!("the isolated backend needs bubblewrap: {reason}"));
        }
        sandbox_isolated::SandboxOutcome::Ran(r) => {
            assert!(
                r.evidence
                    .iter()
                    .all(|e| e.backend.as_deref() == Some("isolated")),
                "{:?}",
                r.evidence
            );
            assert!(matches!(r.network_exit, Some(c) if c != 0), "{r:?}");
            assert!(matches!(r.readonly_exit, Some(c) if c != 0), "{r:?}");
            assert!(!std::path::Path::new("/usr/openrath_probe").exists());
            let note = std::fs::read_to_string(r.workspace.join("notes/hello.txt")).expect("note");
            assert!(note.contains("isolated sandbox"));
            assert!(r.read_back.is_some_and(|t| t.contains("isolated sandbox")));
            // The user's root, the agent's system session and the loop's output.
            assert_eq!(stored(&r.store_dir), 3);
        }
    }
}

#[test]
fn research_synthesis_records_its_compression() {
    if !python_available() {
        common::missing("python3 is not installed (run_code runs Python)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = block_on(research_synthesis::run(DemoConfig::offline(tmp.path()))).expect("run");
    let rec = r.compression.expect("compression record");
    assert!(rec.lossy);
    assert!(!rec.dropped.is_empty());
    assert!(rec.dropped.iter().all(|d| d.sha256.len() == 64));
    assert!(
        r.reproduction_output
            .as_deref()
            .is_some_and(|o| o.contains("5.0")),
        "{:?}",
        r.reproduction_output
    );
    let choices: Vec<&str> = r.routes.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(choices, ["literature", "reproduction", "done"]);
    assert_eq!(
        r.answer.as_deref(),
        Some("Report: Smith 2024's claim (mean 5) is reproduced exactly.")
    );
    assert_eq!(stored(&r.store_dir), r.sessions);
}
