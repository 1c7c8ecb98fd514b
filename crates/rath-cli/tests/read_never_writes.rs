//! Issue 47: reading a store never writes it, copying never loses a session silently, and
//! no number on the command line is used unbounded.
//!
//! - Items 5 and 6: `rath sessions`, `show`, `verify`, `lineage`, `view`, `store stats` and
//!   `store copy` from a foreign SQLite file, a zero-length file and a store in DELETE
//!   journal mode leave each byte for byte as it was (the first two refused as not a store);
//!   a read-only store (mode 0444, owned by another user) is read.
//! - Items 2 and 3: a torn session file fails `store copy`, naming it, unless
//!   `--skip-unreadable`, which names it in a warning; a missing source is an error and is
//!   not created; an OpenRath home copies as its `sessions/` directory.
//! - Items 9 and 11: `--lease-ms` and `--transcript-chunks` of 2^64-1 are refused with
//!   their range (exit 2), never an internal error.

mod common;
#[path = "common/run.rs"]
mod run;
use run::rath;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::write_raw_session;
use rath_persist::SessionStore as _;
use rath_session::{Chunk, Session, Stamper};
use sqlx::ConnectOptions as _;

/// Runs `rath args` (as `uid` when given, through `setpriv`); returns (exit code, stdout,
/// stderr).
fn rath_as(uid: Option<u32>, args: &[&str]) -> (i32, String, String) {
    let cmd = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .arg("--clear-groups")
                .arg(env!("CARGO_BIN_EXE_rath"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_rath")),
    };
    run::run(cmd, args)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs `sql` on the SQLite file `path` through a plain connection.
fn raw(path: &Path, sql: &str) -> Vec<String> {
    runtime().block_on(async {
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .connect()
            .await
            .expect("connect");
        let rows = sqlx::query_scalar::<_, String>(sql)
            .fetch_all(&mut c)
            .await
            .unwrap_or_default();
        sqlx::Connection::close(c).await.expect("close");
        rows
    })
}

/// A store of a root and its fork in the SQLite file `path`; returns the root's id.
fn sqlite_store(path: &Path) -> String {
    runtime().block_on(async {
        let store = rath_store_sql::SqliteStore::open(path).await.expect("open");
        let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
        store.save(&s).await.expect("save");
        store.save(&s.fork()).await.expect("save fork");
        store.close().await;
        s.id().to_string()
    })
}

/// The files of `dir`, by name, with their bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// Every read command on the store `url`, writing its outputs under `out`.
fn read_commands(url: &str, id: &str, out: &Path) -> Vec<Vec<String>> {
    let page = out.join("view.html").display().to_string();
    let copy = out.join("copied").display().to_string();
    let url = url.to_owned();
    let store = |rest: &[&str]| {
        let mut v = vec!["--store".to_owned(), url.clone()];
        v.extend(rest.iter().map(|s| (*s).to_owned()));
        v
    };
    vec![
        store(&["sessions"]),
        store(&["show", id]),
        store(&["verify"]),
        store(&["lineage"]),
        store(&["view", "--out", &page]),
        store(&["store", "stats"]),
        vec!["store".into(), "copy".into(), url.clone(), copy],
    ]
}

#[test]
fn read_commands_leave_foreign_empty_and_delete_mode_files_byte_identical() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dbs, out) = (tmp.path().join("dbs"), tmp.path().join("out"));
    std::fs::create_dir_all(&dbs).expect("mkdir");
    std::fs::create_dir_all(&out).expect("mkdir");
    let foreign = dbs.join("foreign.db");
    raw(&foreign, "CREATE TABLE notes (body TEXT)");
    raw(&foreign, "INSERT INTO notes VALUES ('not yours')");
    let empty = dbs.join("empty.db");
    std::fs::write(&empty, b"").expect("write");
    let delete = dbs.join("delete.db");
    let id = sqlite_store(&delete);
    assert_eq!(raw(&delete, "PRAGMA journal_mode = DELETE"), ["delete"]);
    let before = snapshot(&dbs);

    for (file, is_store) in [(&foreign, false), (&empty, false), (&delete, true)] {
        let url = format!("sqlite://{}", file.display());
        for args in read_commands(&url, &id, &out) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, stdout, stderr) = rath(&args);
            if is_store {
                assert_eq!(code, 0, "{args:?}: {stderr}\n{stdout}");
            } else {
                assert_eq!(code, 2, "{args:?}: {stderr}\n{stdout}");
                assert!(
                    stderr.contains("not an openrath store"),
                    "{args:?}: {stderr}"
                );
            }
            assert_eq!(
                snapshot(&dbs),
                before,
                "{args:?} changed a file of {}",
                file.display()
            );
        }
    }
    assert_eq!(raw(&delete, "PRAGMA journal_mode"), ["delete"]);
    assert_eq!(
        raw(&foreign, "SELECT name FROM sqlite_master ORDER BY name"),
        ["notes"]
    );
}

#[test]
fn a_read_only_store_of_another_owner_is_read() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // Root writes a 0444 file anyway: run `rath` as another user, as the issue's reader was.
    let uid = if root {
        if Command::new("setpriv").arg("--version").output().is_err() {
            rath_testkit::skip("setpriv (util-linux) is needed to read as another user");
            return;
        }
        Some(65534)
    } else {
        None
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let open = |p: &Path, mode: u32| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    // The directory of the store: readable by the reader, not writable.
    let (dbs, out) = (tmp.path().join("dbs"), tmp.path().join("out"));
    std::fs::create_dir_all(&dbs).expect("mkdir");
    std::fs::create_dir_all(&out).expect("mkdir");
    open(tmp.path(), 0o755);
    open(&out, 0o777);
    let wal = dbs.join("wal.db");
    let id = sqlite_store(&wal);
    assert_eq!(raw(&wal, "PRAGMA journal_mode"), ["wal"]);
    let delete = dbs.join("delete.db");
    sqlite_store(&delete);
    assert_eq!(raw(&delete, "PRAGMA journal_mode = DELETE"), ["delete"]);
    open(&wal, 0o444);
    open(&delete, 0o444);
    open(&dbs, 0o555);
    let before = snapshot(&dbs);
    for file in [&wal, &delete] {
        let url = format!("sqlite://{}", file.display());
        for args in read_commands(&url, &id, &out) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, stdout, stderr) = rath_as(uid, &args);
            assert_eq!(code, 0, "{args:?}: {stderr}\n{stdout}");
            assert!(!stderr.contains("readonly"), "{args:?}: {stderr}");
            if args[..] == ["--store", url.as_str(), "sessions"] {
                assert!(stdout.contains(&id), "{stdout}");
            }
        }
        assert_eq!(snapshot(&dbs), before);
    }
    open(&dbs, 0o755);
}

/// `<tmp>/home/sessions` with two sessions and `extra` (a file name and its text).
fn jsonl_home(tmp: &Path, extra: Option<(&str, &str)>) -> PathBuf {
    let home = tmp.join("home");
    let dir = home.join("sessions");
    std::fs::create_dir_all(&dir).expect("mkdir");
    write_raw_session(&dir, "a.jsonl", "a", &[], &["first"]);
    write_raw_session(&dir, "b.jsonl", "b", &["a"], &["second"]);
    if let Some((name, text)) = extra {
        std::fs::write(dir.join(name), text).expect("write");
    }
    home
}

#[test]
fn copy_fails_naming_a_torn_file_unless_told_to_skip_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A session file cut short inside its header: the store holds 3 files, 2 readable.
    let torn = r#"{"record_type": "header", "schema_version": 1, "id": "c", "crea"#;
    let home = jsonl_home(tmp.path(), Some(("torn.jsonl", torn)));
    let sessions = home.join("sessions").display().to_string();
    let to = tmp.path().join("to");
    let to_s = to.display().to_string();
    let (code, stdout, stderr) = rath(&["store", "copy", &sessions, &to_s]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("torn.jsonl"), "{stderr}");
    assert!(stderr.contains("nothing copied"), "{stderr}");
    assert!(!to.join("a.jsonl").exists() && !to.join("b.jsonl").exists());

    let (code, stdout, stderr) = rath(&["store", "copy", &sessions, &to_s, "--skip-unreadable"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("copied 2 of 2 sessions") && stdout.contains("1 unreadable left out"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: left out (unreadable)") && stderr.contains("torn.jsonl"),
        "{stderr}"
    );
    assert!(to.join("a.jsonl").exists() && to.join("b.jsonl").exists());
    let (code, stdout, stderr) = rath(&[
        "store",
        "copy",
        &sessions,
        &to_s,
        "--skip-unreadable",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let skipped = report["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].as_str().unwrap().contains("torn.jsonl"));
}

#[test]
fn copy_from_a_missing_source_fails_and_a_home_is_its_sessions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("no/such.db");
    let to = tmp.path().join("to.db");
    let (code, stdout, stderr) = rath(&[
        "store",
        "copy",
        &format!("sqlite://{}", missing.display()),
        &format!("sqlite://{}", to.display()),
    ]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("no such store"), "{stderr}");
    assert!(!missing.exists() && !tmp.path().join("no").exists());
    let missing_dir = tmp.path().join("nowhere").display().to_string();
    let (code, _, stderr) = rath(&["store", "copy", &missing_dir, &to.display().to_string()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(!tmp.path().join("nowhere").exists());

    // An OpenRath home (a directory holding sessions/) is the store of its sessions/.
    let home = jsonl_home(tmp.path(), None);
    let db = format!("sqlite://{}", to.display());
    let (code, stdout, stderr) = rath(&["store", "copy", &home.display().to_string(), &db]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("copied 2 of 2 sessions"), "{stdout}");
    let (code, stdout, _) = rath(&["--store", &db, "sessions", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).expect("json")["rows"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{stdout}"
    );
}

#[test]
fn numbers_past_their_bounds_are_refused_with_the_range() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = jsonl_home(tmp.path(), None);
    let home = home.display().to_string();
    let out = tmp.path().join("v.html").display().to_string();
    let huge = u64::MAX.to_string();
    for args in [
        vec![
            "--store",
            &home,
            "view",
            "--out",
            &out,
            "--transcript-chunks",
            &huge,
        ],
        vec!["--store", &home, "show", "a", "--from", &huge],
        vec!["--store", &home, "show", "a", "--limit", &huge],
        vec!["worker", "--lease-ms", &huge],
        vec!["worker", "--lease-ms", "86400001"],
        vec!["worker", "--grace-ms", &huge],
        vec!["worker", "--concurrency", &huge],
        vec![
            "runs",
            "submit",
            "team",
            "--input",
            "x",
            "--deadline-ms",
            &huge,
        ],
    ] {
        let (code, stdout, stderr) = rath(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(!stderr.contains("internal error"), "{args:?}: {stderr}");
        assert!(stderr.contains("not in"), "{args:?}: {stderr}");
    }
    // The largest count allowed allocates nothing in advance: the small store is viewed.
    let (code, _, stderr) = rath(&[
        "--store",
        &home,
        "view",
        "--out",
        &out,
        "--transcript-chunks",
        "100000",
    ]);
    assert_eq!(code, 0, "{stderr}");
}
