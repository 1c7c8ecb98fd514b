//! `rath keys signing new`, `rath seal`, `rath verify` on a sealed store and `rath erase`, on
//! a JSONL store and a SQLite store (the library's own tests cover every store kind and
//! every kind of tampering; these check the commands, their output and exit codes).

use std::path::Path;
use std::process::Command;

use rath_persist::{SessionStore, Store};
use rath_session::{Chunk, Session, Stamper};

const SECRET: &str = "my passport number is X1234567";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rath(cwd: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .current_dir(cwd)
        .env_remove("OPENRATH_HOME")
        .env_remove("OPENRATH_STORE")
        .env_remove("OPENRATH_SIGNING_KEY")
        .env("HOME", cwd)
        .output()
        .expect("run rath");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sessions() -> Vec<Session> {
    let a = Session::user_with(SECRET, Stamper::counter()).push(Chunk::assistant_text("noted"));
    let b = a.fork().push(Chunk::user("and then?"));
    vec![a, b]
}

fn flow(cwd: &Path, store: &str, files: &dyn Fn() -> Vec<u8>, tamper: &dyn Fn(bool)) {
    let key = cwd.join("signing.key");
    let key_s = key.to_str().expect("utf-8 path");
    let r = rath(
        cwd,
        &["--store", store, "keys", "signing", "new", "--out", key_s],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("public key recorded in the seal ledger"),
        "{}",
        r.stdout
    );
    let public = std::fs::read_to_string(cwd.join("signing.key.pub")).expect("pub");

    let r = rath(cwd, &["--store", store, "seal", "--key", key_s]);
    assert_eq!(
        (r.code, r.stdout.trim()),
        (
            0,
            format!("sealed 2 session(s), signed by {}", public.trim()).as_str()
        ),
        "{}",
        r.stderr
    );
    let r = rath(
        cwd,
        &["--store", store, "verify", "--trusted-key", public.trim()],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("clean: 2 session(s), 5 chunk(s) verified"),
        "{}",
        r.stdout
    );

    // Another trusted key than the one that signed: every entry is by an unknown key.
    let r = rath(
        cwd,
        &[
            "--store",
            store,
            "verify",
            "--trusted-key",
            &"11".repeat(32),
        ],
    );
    assert!(r.code == 2 || r.code == 3, "{}", r.stderr);

    tamper(true);
    let id = sessions()[0].id().to_string();
    let r = rath(cwd, &["--store", store, "verify"]);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("TAMPERED {id} chunk 1: content changed")),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("verify: tampered"), "{}", r.stderr);
    let r = rath(cwd, &["--store", store, "--json", "verify", &id]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(
        v["seals"]["failures"][0]["kind"], "content_changed",
        "{}",
        r.stdout
    );
    assert_eq!(v["seals"]["failures"][0]["chunk"], 1, "{}", r.stdout);
    tamper(false);

    assert!(String::from_utf8_lossy(&files()).contains(SECRET));
    let chunk = format!("{id}:0");
    let r = rath(
        cwd,
        &[
            "--store",
            store,
            "erase",
            "--chunk",
            &chunk,
            "--reason",
            "request 7",
            "--by",
            "dpo",
            "--key",
            key_s,
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("erased 1 chunk(s)"), "{}", r.stdout);
    let r = rath(cwd, &["--store", store, "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("2 chunk(s) erased"),
        "the chunk and its fork's copy: {}",
        r.stdout
    );
    assert!(
        !String::from_utf8_lossy(&files()).contains(SECRET),
        "the erased text is gone"
    );

    let r = rath(cwd, &["--store", store, "erase", "--reason", "x"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn jsonl_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("home/sessions");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = Store::at(&dir);
    for s in sessions() {
        rt.block_on(SessionStore::save(&store, &s)).expect("save");
    }
    let file = dir.join(format!("{}.jsonl", sessions()[0].id()));
    let original = std::fs::read(&file).expect("read");
    let files = || {
        let mut all = Vec::new();
        for e in std::fs::read_dir(&dir).expect("dir") {
            all.extend(std::fs::read(e.expect("entry").path()).expect("read"));
        }
        all
    };
    let tamper = |on: bool| {
        let bytes = if on {
            String::from_utf8(original.clone())
                .expect("utf-8")
                .replace("noted", "NOTED")
                .into_bytes()
        } else {
            original.clone()
        };
        std::fs::write(&file, bytes).expect("write");
    };
    flow(tmp.path(), "home", &files, &tamper);
}

#[test]
fn sqlite_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("store.db");
    let url = format!("sqlite://{}", db.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = rath_store_sql::open_store(&url).await.expect("open");
        for s in sessions() {
            store.save(&s).await.expect("save");
        }
    });
    let files = || {
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm"] {
            all.extend(std::fs::read(format!("{}{suffix}", db.display())).unwrap_or_default());
        }
        all
    };
    // The first session's own segment (its two chunks), written back as plain text with the
    // answer changed, then put back as it was stored (plain or deflated).
    let id = sessions()[0].id().to_string();
    let original = std::cell::RefCell::new(None::<Vec<u8>>);
    let tamper = |on: bool| {
        rt.block_on(async {
            let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
            let key = "(SELECT key FROM rath_sessions WHERE id = $2)";
            if on {
                let stored: Vec<u8> = sqlx::query_scalar(&format!(
                    "SELECT docs FROM rath_segments WHERE session_key = {key} AND pos = $1"
                ))
                .bind(0i64)
                .bind(&id)
                .fetch_one(&pool)
                .await
                .expect("segment");
                original.replace(Some(stored));
            }
            let docs = if on {
                let changed = [Chunk::user(SECRET), Chunk::assistant_text("NOTED")];
                let docs: Vec<Vec<u8>> = changed
                    .iter()
                    .map(|c| rath_persist::doc::encode_chunk(c).expect("encode"))
                    .collect();
                docs.join(&b'\n')
            } else {
                original.borrow().clone().expect("saved")
            };
            sqlx::query(&format!(
                "UPDATE rath_segments SET docs = $1 WHERE session_key = {key} AND pos = 0"
            ))
            .bind(docs)
            .bind(&id)
            .execute(&pool)
            .await
            .expect("update");
            pool.close().await;
        });
    };
    flow(tmp.path(), &url, &files, &tamper);
}
