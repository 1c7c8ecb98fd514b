//! `rath --store URL` and `rath store copy|gc|migrate|stats` on SQLite and PostgreSQL.
//!
//! The interop chain: the Python OpenRath 1.3.0 store in `../shared/interop/` copied into
//! PostgreSQL, and from there into a fresh JSONL directory, gives files byte-identical to
//! the originals; the lineage export is the same from every store on the way; and the files
//! written at the end load in Python OpenRath 2.0's own loader.

use std::path::{Path, PathBuf};
use std::process::Command;

fn interop_home() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/interop/openrath-1.3.0/openrath_home")
}

/// Runs `rath` with `args`; returns (exit code, stdout, stderr).
#[path = "common/postgres.rs"]
mod postgres;
#[path = "common/run.rs"]
mod run;
use postgres::postgres_store;
use run::rath;

fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = rath(args);
    assert_eq!(code, 0, "rath {args:?}: {stderr}\n{stdout}");
    stdout
}

fn session_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.contains(".jsonl"))
        .collect();
    names.sort();
    names
}

#[test]
fn interop_store_through_postgres_back_to_jsonl_is_byte_identical() {
    let Some(pg) = postgres_store("rath_cli_interop") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let original = interop_home().join("sessions");
    let back = tmp.path().join("back/sessions");
    let sqlite = format!("sqlite://{}", tmp.path().join("copy.sqlite").display());
    let original_s = original.to_str().expect("utf-8 path");
    let back_s = back.to_str().expect("utf-8 path");

    let copied = ok(&["store", "copy", original_s, &pg]);
    assert!(copied.starts_with("copied 7 of 7 sessions"), "{copied}");
    ok(&["store", "copy", &pg, &sqlite]);
    let out = ok(&["store", "copy", &sqlite, back_s]);
    assert!(out.starts_with("copied 7 of 7 sessions"), "{out}");

    // Byte for byte, file for file.
    let names = session_files(&original);
    assert_eq!(names.len(), 7);
    assert_eq!(session_files(&back), names);
    for n in &names {
        let a = std::fs::read(original.join(n)).expect("original");
        let b = std::fs::read(back.join(n)).expect("copy");
        assert!(
            a == b,
            "{n} differs after JSONL -> PostgreSQL -> SQLite -> JSONL"
        );
    }
    // Copying again writes nothing.
    let again = ok(&["store", "copy", original_s, &pg]);
    assert!(again.contains("(7 unchanged"), "{again}");

    // The lineage export is the same from every store.
    let want = ok(&["--store", original_s, "lineage", "--format", "jsonl"]);
    assert_eq!(want.lines().count(), 7);
    for store in [pg.as_str(), sqlite.as_str(), back_s] {
        let got = ok(&["--store", store, "lineage", "--format", "jsonl"]);
        assert_eq!(got, want, "lineage export from {store}");
    }
    // And so are the listing and a transcript.
    let sessions = ok(&["--store", original_s, "sessions"]);
    assert_eq!(ok(&["--store", &pg, "sessions"]), sessions);
    // (A transcript names the file it came from; a database has none, only the id.)
    let without_file = |t: String| {
        t.lines()
            .filter(|l| !l.starts_with("file "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let show = ok(&[
        "--store",
        original_s,
        "show",
        "00000000-0000-4000-8000-000000000005",
    ]);
    let from_pg = ok(&[
        "--store",
        &pg,
        "show",
        "00000000-0000-4000-8000-000000000005",
    ]);
    assert_eq!(without_file(from_pg), without_file(show));
    let verify = ok(&["--store", &sqlite, "verify"]);
    assert!(!verify.is_empty(), "{verify}");
}

#[test]
fn store_stats_gc_and_migrate_report_what_they_did() {
    let tmp = tempfile::tempdir().expect("tmp");
    let original = interop_home().join("sessions");
    let db = tmp.path().join("s.sqlite");
    let sqlite = format!("sqlite://{}", db.display());
    ok(&["store", "copy", original.to_str().expect("utf-8"), &sqlite]);

    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["--store", &sqlite, "--json", "store", "stats"])).expect("json");
    assert_eq!(stats["sessions"], 7);
    let chunks = stats["chunks"].as_u64().expect("chunks");
    let distinct = stats["distinct_chunks"].as_u64().expect("distinct");
    assert!(distinct < chunks, "forks share chunks: {stats}");
    let text = ok(&["--store", &sqlite, "store", "stats"]);
    assert!(text.contains("7 sessions"), "{text}");

    let migrated = ok(&["--store", &sqlite, "store", "migrate"]);
    assert!(migrated.contains("schema version"), "{migrated}");

    // Nothing to free while every session is stored; a deleted session's own chunks are
    // freed by gc and reported.
    let gc = ok(&["--store", &sqlite, "store", "gc"]);
    assert!(
        gc.contains("freed 0 session(s), 0 chunk(s), 0 bytes"),
        "{gc}"
    );

    // A store that is not there is one line and exit 2, never created.
    let missing = format!("sqlite://{}", tmp.path().join("absent.sqlite").display());
    let (code, _, stderr) = rath(&["--store", &missing, "sessions"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!tmp.path().join("absent.sqlite").exists());
    let (code, _, stderr) = rath(&["--store", "mysql://x/y", "sessions"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn files_copied_out_of_a_database_load_in_python_openrath() {
    let Some(py) = std::env::var_os("RATH_OPENRATH_PYTHON").map(PathBuf::from) else {
        rath_testkit::skip(
            "RATH_OPENRATH_PYTHON is not set to a Python with openrath==2.0.0 \
             (see .ci/install.d/30-persist-python.sh)",
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let sqlite = format!("sqlite://{}", tmp.path().join("s.sqlite").display());
    let original = interop_home().join("sessions");
    ok(&["store", "copy", original.to_str().expect("utf-8"), &sqlite]);
    let home = tmp.path().join("home");
    ok(&[
        "store",
        "copy",
        &sqlite,
        home.join("sessions").to_str().expect("utf-8"),
    ]);
    let rows = tmp.path().join("rows.jsonl");
    std::fs::write(
        &rows,
        ok(&["--store", &sqlite, "lineage", "--format", "jsonl"]),
    )
    .expect("rows");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../rath-persist/tests/python/check_store.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(&home)
        .arg(&rows)
        .arg("7")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "python loader rejected the copied store:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
