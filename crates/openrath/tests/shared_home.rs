//! Runs that share one `OPENRATH_HOME` never touch each other's files, and everything the
//! examples write loads in Python OpenRath 2.0 with its lineage intact.
//!
//! - `engineering_team` then `hello_agent`, each as its own process (the example binaries,
//!   offline, default ids) in one home: every file of the first run is byte-identical
//!   afterwards, no id is shared, and every session file of both loads in Python OpenRath.
//! - Every example binary, offline with default ids, into one more home: all ids are
//!   UUIDs, all lineage parents are stored, and Python loads every file.
//!
//! Python OpenRath is the interpreter named by `RATH_OPENRATH_PYTHON` (see
//! `crates/rath-persist/tests/python_loader.rs`). Locally its absence skips the Python half
//! with a printed reason; under `RATH_CI=1` it fails.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use openrath::persist::Store;
use sha2::{Digest, Sha256};

fn python3_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs example `name` offline with `OPENRATH_HOME=home` and default (unique) ids.
fn run_example(name: &str, home: &Path) {
    let out = Command::new(common::example_binary(name))
        .env("OPENRATH_HOME", home)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENRATH_DETERMINISTIC")
        .current_dir(home)
        .output()
        .expect("run example");
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// sha256 of every file under `dir`, by path relative to it.
fn hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let ty = entry.file_type().expect("file type");
            if ty.is_dir() {
                walk(root, &path, out);
            } else if ty.is_file() {
                let bytes = std::fs::read(&path).expect("read");
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                out.insert(rel, hex::encode(Sha256::digest(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every file of the store at `<home>/sessions` loads, every id and parent is a UUID, and
/// every parent is stored (nothing of the lineage is missing). Returns the number of files.
fn check_store(home: &Path) -> usize {
    let store = Store::at(home.join("sessions"));
    let (summaries, bad) = store.scan().expect("scan");
    assert!(bad.is_empty(), "unreadable files: {bad:?}");
    let ids: HashSet<&str> = summaries.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), summaries.len(), "duplicate ids in the store");
    for s in &summaries {
        assert!(
            openrath::session::is_uuid(s.id.as_str()),
            "non-UUID id {}",
            s.id
        );
        let file = s.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(file.starts_with(s.id.as_str()), "{file} holds {}", s.id);
        for p in &s.parents {
            assert!(
                openrath::session::is_uuid(p.as_str()),
                "{}: parent {p}",
                s.id
            );
            assert!(
                ids.contains(p.as_str()),
                "{} ({} {:?}): parent {p} is not stored",
                s.id,
                s.operator,
                s.kind
            );
        }
    }
    summaries.len()
}

#[test]
fn two_examples_in_one_home_leave_each_other_alone_and_load_in_python() {
    if !python3_available() {
        rath_testkit::skip("python3 is not installed (engineering_team's QA runs unittest)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");

    run_example("engineering_team", &home);
    let first = hashes(&home);
    let first_sessions = check_store(&home);
    assert!(
        first_sessions >= 10,
        "engineering_team stored {first_sessions}"
    );

    run_example("hello_agent", &home);
    let after = hashes(&home);
    for (path, hash) in &first {
        assert_eq!(
            after.get(path),
            Some(hash),
            "{} changed or vanished when hello_agent ran",
            path.display()
        );
    }
    let both = check_store(&home);
    assert_eq!(both, first_sessions + 3, "hello_agent adds its 3 sessions");
    common::python_loads("two examples in one home", &home);
}

#[test]
fn every_example_store_loads_in_python_with_lineage_intact() {
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path();
    run_example("hello_agent", home);
    run_example("lineage_export", home);
    run_example("dynamic_selector", home);
    // (Where bubblewrap is unavailable it stores nothing and says why.)
    run_example("sandbox_isolated", home);
    // Twice: a second run of the same example adds its sessions beside the first's.
    run_example("hello_agent", home);
    if python3_available() {
        run_example("research_synthesis", home);
        run_example("engineering_team", home);
        run_example("long_running_coding", home);
    } else {
        rath_testkit::skip("python3 is not installed (three examples run Python code)");
    }
    let files = check_store(home);
    assert!(files >= 6 + 7 + 3, "{files} files");
    common::python_loads("every example in one home", home);
}

#[test]
fn deterministic_runs_repeat_ids_and_refuse_to_share_a_store() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // lineage_export with --deterministic into `home`; returns its JSONL export.
    let run = |home: &Path| {
        std::fs::create_dir_all(home).expect("home");
        let out = Command::new(common::example_binary("lineage_export"))
            .arg("--deterministic")
            .env("OPENRATH_HOME", home)
            .env_remove("OPENAI_BASE_URL")
            .current_dir(home)
            .output()
            .expect("run lineage_export");
        assert!(
            out.status.success(),
            "lineage_export failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(home.join("lineage/lineage_export.jsonl")).expect("export")
    };
    let first = run(&a);
    let second = run(&b);
    assert_eq!(first, second, "same ids, same export");
    assert!(first.contains("00000000-0000-4000-8000-000000000001"));
    let a_files = hashes(&a.join("sessions"));
    assert_eq!(
        a_files,
        hashes(&b.join("sessions")),
        "byte-identical stores"
    );
    // The same deterministic run again into the same store: identical sessions, a no-op.
    run(&a);
    assert_eq!(hashes(&a.join("sessions")), a_files);
    // A different deterministic example into that store: its counter ids are taken, so it
    // is refused with a typed error and the first run's files stay as they were.
    let out = Command::new(common::example_binary("hello_agent"))
        .arg("--deterministic")
        .env("OPENRATH_HOME", &a)
        .env_remove("OPENAI_BASE_URL")
        .current_dir(&a)
        .output()
        .expect("run hello_agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ids collide: hello_agent must fail");
    assert!(
        stderr.contains("already exists: session stored by another run or writer"),
        "{stderr}"
    );
    assert_eq!(hashes(&a.join("sessions")), a_files);
}
