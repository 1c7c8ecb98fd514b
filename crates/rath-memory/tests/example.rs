//! Acceptance 4: the `memory_assisted` example runs (two phases in separate processes) and the
//! second session's recall event names the first run's commit.

use std::path::PathBuf;
use std::process::Command;

fn example_binary() -> Option<PathBuf> {
    // tests live in target/<profile>/deps; cargo builds examples into target/<profile>/examples
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join("examples").join("memory_assisted");
    bin.exists().then_some(bin)
}

#[test]
fn second_run_recalls_the_first_runs_commit() {
    let Some(bin) = example_binary() else {
        rath_testkit::skip(
            "the memory_assisted example binary is not built (cargo test builds it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let home = dir.path().join("home");
    let out = Command::new(&bin)
        .arg("--store")
        .arg(&store)
        .arg("--deterministic")
        .env("OPENRATH_HOME", &home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let commit = stdout
        .lines()
        .find_map(|l| l.strip_prefix("commit_id="))
        .expect("run 1 commit id");
    let recalled = stdout
        .lines()
        .find_map(|l| l.strip_prefix("recalled_commit_id="))
        .expect("run 2 recall");
    assert_eq!(commit, recalled);
    assert!(stdout.contains("ok: run 2's recall event names run 1's commit"));
    // The recall event chunk of run 2 carries the hit with the commit id.
    let recall_line = stdout
        .lines()
        .find(|l| l.starts_with("chunk ") && l.contains("\"memory_event\""))
        .expect("recall event chunk");
    let chunk: serde_json::Value = serde_json::from_str(&recall_line["chunk ".len()..]).unwrap();
    assert_eq!(chunk["payload"]["operation"], "recall");
    assert_eq!(chunk["payload"]["hits"][0]["commit_id"], commit);

    // Both runs' sessions are in the session store, and they load.
    let sessions = rath_persist::Store::at(home.join("sessions"));
    let listed = sessions.list().expect("list sessions");
    assert!(!listed.is_empty(), "no sessions stored");
    let recalled_in_store = listed.iter().any(|s| {
        let loaded = sessions.load(&s.id).expect("load session");
        loaded.session.chunks().iter().any(|c| {
            matches!(c.body(), rath_session::ChunkBody::MemoryEvent(e)
                if e.operation == "recall" && e.commit_id.as_deref() == Some(commit))
        })
    });
    assert!(
        recalled_in_store,
        "run 2's recall event is not in the session store"
    );

    // Deterministic: a second pair of runs on a fresh store prints the same bytes.
    let store2 = dir.path().join("store2");
    let home2 = dir.path().join("home2");
    let again = Command::new(&bin)
        .arg("--store")
        .arg(&store2)
        .arg("--deterministic")
        .env("OPENRATH_HOME", &home2)
        .output()
        .unwrap();
    let again = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        stdout.replace("store", "").replace("home", ""),
        again
            .replace("store2", "")
            .replace("store", "")
            .replace("home2", "")
            .replace("home", "")
    );
}

fn commit_ids_in(store: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(store.join("items.jsonl"))
        .expect("items.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("record");
            v["commit_id"].as_str().map(str::to_owned)
        })
        .collect()
}

fn run_ok(bin: &std::path::Path, home: &std::path::Path, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(bin)
        .args(args)
        .env("OPENRATH_HOME", home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn two_runs_on_one_store_never_share_a_commit_id() {
    let Some(bin) = example_binary() else {
        rath_testkit::skip(
            "the memory_assisted example binary is not built (cargo test builds it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let args = ["--store".as_ref(), store.as_os_str()];
    let home = dir.path().join("home");
    let first = run_ok(&bin, &home, &args);
    let second = run_ok(&bin, &home, &args);
    let id = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("commit_id="))
            .expect("commit id")
            .to_owned()
    };
    let (a, b) = (id(&first), id(&second));
    assert_ne!(a, b, "the second run reused the first run's commit id");
    assert!(
        rath_session::is_uuid(&a) && rath_session::is_uuid(&b),
        "{a} {b}"
    );
    let ids = commit_ids_in(&store);
    assert_eq!(ids, [a, b], "one commit per run, each under its own id");
    // Both runs' sessions are stored side by side: 2 phases x 2 runs, none replaced.
    let sessions = rath_persist::Store::at(home.join("sessions"));
    assert_eq!(sessions.list().expect("list").len(), 4);

    // Deterministic runs repeat the same commit; the store keeps it once.
    let det = dir.path().join("det");
    let args = [
        "--store".as_ref(),
        det.as_os_str(),
        "--deterministic".as_ref(),
    ];
    let det_home = dir.path().join("det_home");
    let (x, y) = (
        id(&run_ok(&bin, &det_home, &args)),
        id(&run_ok(&bin, &det_home, &args)),
    );
    assert_eq!(x, y);
    assert_eq!(commit_ids_in(&det), [x]);
    // Run 1 and run 2 never share a session id, even in deterministic mode.
    let det_sessions = rath_persist::Store::at(det_home.join("sessions"));
    assert_eq!(det_sessions.list().expect("list").len(), 2);
}
