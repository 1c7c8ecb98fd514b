//! Crash safety: a child process is SIGKILLed between writing an item to the log and indexing
//! it (and, separately, halfway through writing the log line). The store must reopen; the
//! acknowledged-on-disk item must be recalled after the rebuild, and a torn line must vanish
//! without harming later writes.

#![cfg(unix)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use rath_memory::{CRASH_POINT_ENV, LocalMemory, LocalOptions, Memory, MemoryUri, NewItem, Scope};

const CHILD_DIR_ENV: &str = "RATH_MEMORY_TEST_CRASH_DIR";
const SIGKILL: i32 = 9;

fn uri(p: &str) -> MemoryUri {
    MemoryUri::new(Scope::Agent, p).unwrap()
}

/// Runs only as the child: commits one item with a crash point armed by the parent.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return; // not the child: nothing to do
    };
    let mem = LocalMemory::open_at(Path::new(&dir), "crash", LocalOptions::default()).unwrap();
    let item = NewItem::new(uri("crossing"), "the zebra crossing is outside the school");
    let _ = mem.commit("commit_crash", vec![item]);
    // Reaching here means the crash point did not fire.
    std::process::exit(3);
}

fn seed(dir: &Path) {
    let mem = LocalMemory::open_at(dir, "crash", LocalOptions::default()).unwrap();
    mem.commit(
        "commit_seed",
        vec![NewItem::new(uri("kettle"), "descale the kettle monthly")],
    )
    .unwrap();
}

fn run_child(dir: &Path, point: &str) {
    let exe = std::env::current_exe().unwrap();
    let status = Command::new(exe)
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .env(CRASH_POINT_ENV, point)
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(SIGKILL),
        "child should die by SIGKILL at {point}, got {status:?}"
    );
}

#[test]
fn killed_after_log_write_before_indexing_recovers_the_item() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    run_child(dir.path(), "after_log_write");
    // The child held the lock when it died; the kernel released it.
    let mem = LocalMemory::open_at(dir.path(), "crash", LocalOptions::default()).unwrap();
    let hits = mem.recall("zebra crossing", None, 3).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].uri, uri("crossing"));
    assert_eq!(hits[0].commit_id.as_deref(), Some("commit_crash"));
    assert_eq!(mem.recall("kettle", None, 3).unwrap()[0].uri, uri("kettle"));
    // An explicit rebuild agrees.
    mem.rebuild_index().unwrap();
    assert_eq!(
        mem.recall("zebra", None, 3).unwrap()[0].uri,
        uri("crossing")
    );
}

#[test]
fn killed_mid_log_write_drops_the_torn_line_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let log = dir.path().join("items.jsonl");
    let before = std::fs::metadata(&log).unwrap().len();
    run_child(dir.path(), "mid_log_write");
    assert!(
        std::fs::metadata(&log).unwrap().len() > before,
        "torn bytes on disk"
    );

    let mem = LocalMemory::open_at(dir.path(), "crash", LocalOptions::default()).unwrap();
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        before,
        "torn tail cut"
    );
    assert!(mem.recall("zebra", None, 3).unwrap().is_empty());
    assert_eq!(mem.list(None).unwrap(), [uri("kettle")]);
    mem.commit(
        "commit_after",
        vec![NewItem::new(uri("plants"), "water the fern twice a week")],
    )
    .unwrap();
    drop(mem);
    let mem = LocalMemory::open_at(dir.path(), "crash", LocalOptions::default()).unwrap();
    assert_eq!(mem.recall("fern", None, 3).unwrap()[0].uri, uri("plants"));
    assert_eq!(mem.len(), 2);
}

#[test]
fn a_corrupt_middle_line_is_reported_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let log = dir.path().join("items.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.insert_str(0, "{not json}\n");
    std::fs::write(&log, text).unwrap();
    let err = LocalMemory::open_at(dir.path(), "crash", LocalOptions::default()).unwrap_err();
    match err {
        rath_memory::MemoryError::CorruptLog { line, .. } => assert_eq!(line, 1),
        other => panic!("unexpected {other}"),
    }
}
