//! Contract tests of the `rath` binary on the Python OpenRath 1.3.0 store (read in place) and
//! on damaged copies of it. Outputs are insta snapshots; every path in them is relative.

use std::path::{Path, PathBuf};
use std::process::Command;

fn interop() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

/// Runs `rath` in `cwd` and returns `exit / stdout / stderr` as one text.
fn rath(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .current_dir(cwd)
        .env_remove("OPENRATH_HOME")
        .env("HOME", cwd)
        .env("NO_COLOR", "1")
        .output()
        .expect("run rath");
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if code == 2 {
        assert_eq!(
            stderr.lines().count(),
            1,
            "bad input must give exactly one stderr line: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    format!(
        "exit: {code}\n--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr
    )
}

fn on_interop(args: &[&str]) -> String {
    let mut full = vec!["--store", "openrath_home"];
    full.extend_from_slice(args);
    rath(&interop(), &full)
}

/// A writable copy of the interop store in a temp dir, as `<tmp>/home/sessions`.
fn copy_store() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dst = tmp.path().join("home/sessions");
    std::fs::create_dir_all(&dst).expect("mkdir");
    for e in std::fs::read_dir(interop().join("openrath_home/sessions")).expect("read store") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), dst.join(e.file_name())).expect("copy");
    }
    tmp
}

macro_rules! snap {
    ($name:literal, $value:expr) => {
        insta::assert_snapshot!($name, $value)
    };
}

#[test]
fn sessions_human_and_json() {
    snap!("sessions", on_interop(&["sessions"]));
    snap!("sessions_json", on_interop(&["sessions", "--json"]));
}

#[test]
fn show_human_and_json() {
    snap!(
        "show_loop",
        on_interop(&["show", "00000000-0000-4000-8000-000000000005"])
    );
    snap!("show_merged_by_suffix", on_interop(&["show", "006"]));
    snap!("show_loop_json", on_interop(&["--json", "show", "5"]));
}

#[test]
fn lineage_formats() {
    snap!("lineage_tree", on_interop(&["lineage"]));
    snap!(
        "lineage_jsonl",
        on_interop(&["lineage", "--format", "jsonl"])
    );
    snap!("lineage_dot", on_interop(&["lineage", "--format", "dot"]));
    snap!(
        "lineage_mermaid",
        on_interop(&["lineage", "--format", "mermaid"])
    );
    snap!("lineage_json", on_interop(&["lineage", "--json"]));
}

#[test]
fn lineage_jsonl_matches_python_explicit_export_rows() {
    let out = on_interop(&["lineage", "--format", "jsonl"]);
    let expected =
        std::fs::read_to_string(interop().join("lineage_explicit.jsonl")).expect("read export");
    for line in expected.lines() {
        assert!(out.contains(line), "missing Python row {line}\nin\n{out}");
    }
}

#[test]
fn diff_human_and_json() {
    snap!("diff_fork_vs_loop", on_interop(&["diff", "3", "5"]));
    snap!("diff_merged_vs_detached", on_interop(&["diff", "6", "7"]));
    snap!(
        "diff_siblings_json",
        on_interop(&["diff", "4", "5", "--json"])
    );
}

#[test]
fn verify_clean_store_and_crash_dir() {
    snap!("verify", on_interop(&["verify"]));
    snap!(
        "verify_crash_dir",
        rath(&interop(), &["--store", "crash", "verify"])
    );
    snap!("verify_json", on_interop(&["verify", "--json"]));
}

#[test]
fn verify_reports_corrupt_and_torn_files_and_modifies_nothing() {
    let tmp = copy_store();
    let dir = tmp.path().join("home/sessions");
    let one = dir.join("00000000-0000-4000-8000-000000000001.jsonl");
    let text = std::fs::read_to_string(&one).expect("read");
    std::fs::write(&one, text.replacen("\"chunk\"", "\"chunk", 1)).expect("corrupt");
    let two = dir.join("00000000-0000-4000-8000-000000000002.jsonl");
    let mut torn = std::fs::read_to_string(&two).expect("read");
    torn.push_str("{\"record_type\": \"chu");
    std::fs::write(&two, &torn).expect("tear");
    let before: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| {
            let p = e.expect("entry").path();
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect();
    snap!(
        "verify_damaged",
        rath(tmp.path(), &["--store", "home", "verify"])
    );
    for (p, bytes) in before {
        assert_eq!(
            std::fs::read(&p).expect("read"),
            bytes,
            "{} changed",
            p.display()
        );
    }
    // Aggregate commands skip the unreadable file and say so; show of it is an error.
    snap!(
        "sessions_damaged",
        rath(tmp.path(), &["--store", "home", "sessions"])
    );
    snap!(
        "show_corrupt",
        rath(tmp.path(), &["--store", "home", "show", "1"])
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    snap!("bad_unknown_id", on_interop(&["show", "nope"]));
    snap!("bad_ambiguous_id", on_interop(&["show", "00000000"]));
    snap!(
        "bad_missing_store",
        rath(&interop(), &["--store", "no/such/dir", "sessions"])
    );
    snap!("bad_flag", on_interop(&["sessions", "--bogus"]));
    snap!("bad_format", on_interop(&["lineage", "--format", "png"]));
    snap!("bad_missing_arg", on_interop(&["diff", "5"]));
    snap!("bad_unknown_command", on_interop(&["frobnicate"]));
    snap!(
        "bad_view_out_dir",
        on_interop(&["view", "--out", "no/such/dir/x.html"])
    );
}

#[test]
fn store_from_openrath_home_env() {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(["sessions", "--json"])
        .env("OPENRATH_HOME", interop().join("openrath_home"))
        .output()
        .expect("run rath");
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(7));
}

#[test]
fn view_writes_one_self_contained_page() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let page = tmp.path().join("v.html");
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(["--store", "openrath_home", "view", "--out"])
        .arg(&page)
        .current_dir(interop())
        .output()
        .expect("run rath");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).expect("page");
    assert_eq!(html.matches("<g class=\"node").count(), 7);
    // Parent links: 03,04 <- 02; 05 <- 03, 01; 06 <- 05, 04; 07 detached.
    assert_eq!(html.matches("<path class=\"edge\"").count(), 6);
    assert_eq!(html.matches("<article class=\"transcript\"").count(), 7);
    for bad in ["http://", "https://", "<link", "src=", "@import"] {
        assert!(!html.contains(bad), "page refers outside itself: {bad}");
    }
}
