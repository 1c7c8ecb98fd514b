//! Acceptance 2: a store we write is accepted by Python OpenRath 2.0's own loader.
//!
//! Runs `tests/python/check_store.py` with the interpreter named by `RATH_OPENRATH_PYTHON`
//! (set by `.ci/install.d/30-persist-python.sh`, a venv with `openrath==2.0.0`); skips with a
//! printed reason when it is absent, and fails instead under `RATH_CI=1`. The examples' stores
//! are covered by `crates/openrath/tests/shared_home.rs` with the same script.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::interop_sessions;
use rath_persist::{LineageRow, Store, WriterOptions, export_jsonl_string};
use rath_session::{
    Chunk, ChunkBody, ModelCall, PendingCall, Session, ToolCall, ToolEvidence, Usage,
};

fn python() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("RATH_OPENRATH_PYTHON")?);
    p.is_file().then_some(p)
}

/// A session exercising every extension: evidence between and after conversation rows,
/// a branch tag, per-agent usage, a pending call, and text Python's splitlines would break.
fn extended(base: &Session) -> Session {
    let call = ToolCall::function("call_1", "echo", r#"{"text": "x"}"#);
    base.fork()
        .with_extra("note", "é \u{2028} ünïcödé")
        .with_extra("ratio", 0.25)
        .push(Chunk::new(ChunkBody::ModelCall(ModelCall {
            request_id: "req_000001".into(),
            agent: Some("helper".into()),
            provider: "scripted".into(),
            finish_reason: Some("tool_calls".into()),
            usage: Some(Usage::new(5, 1)),
            messages_sent: 2,
            // How the provider got the answer: a stream fallback after an empty stream.
            detail: [
                ("stream".to_owned(), serde_json::json!(false)),
                (
                    "stream_fallback".to_owned(),
                    serde_json::json!("empty_stream"),
                ),
                (
                    "attempts".to_owned(),
                    serde_json::json!([
                        {"attempt": 1, "mode": "stream", "outcome": "empty_stream",
                         "elapsed_ms": 3, "fallback": true},
                        {"attempt": 2, "mode": "complete", "outcome": "ok", "elapsed_ms": 41}
                    ]),
                ),
            ]
            .into_iter()
            .collect(),
            ..ModelCall::default()
        })))
        .push(Chunk::assistant(None, Some(vec![call.clone()])))
        .push(
            Chunk::tool_result("call_1", "echo", "{\"echo\": \"line\u{2029}sep\u{85}\"}")
                .with_branch("b1"),
        )
        .push(Chunk::new(ChunkBody::ToolEvidence(ToolEvidence {
            tool_call_id: "call_1".into(),
            tool: "echo".into(),
            outcome: "ok".into(),
            ..ToolEvidence::default()
        })))
        .with_usage(Some("helper"), Usage::new(5, 1))
        .with_pending(PendingCall {
            call,
            agent: Some("helper".into()),
            reason: "require_approval".into(),
        })
        .push(Chunk::note("test", "trailing evidence"))
}

fn run(py: &Path, home: &Path, rows: &Path, files: usize) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_store.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(home)
        .arg(rows)
        .arg(files.to_string())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python loader rejected our store:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("OK"), "{stdout}");
}

#[test]
fn python_openrath_loads_our_store() {
    let Some(py) = python() else {
        rath_testkit::skip(
            "RATH_OPENRATH_PYTHON is not set to a Python with openrath==2.0.0 \
             (see .ci/install.d/30-persist-python.sh)",
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path().join("home");
    let store = Store::at(home.join("sessions"));
    let sessions = interop_sessions();
    let mut rows: Vec<LineageRow> = Vec::new();
    for s in &sessions[..7] {
        store.save(s).expect("save");
        rows.push(LineageRow::from_session(s));
    }
    let ext = extended(&sessions[4]);
    store.save(&ext).expect("save extended");
    rows.push(LineageRow::from_session(&ext));
    // A crashed writer, evidence included: Python sees closed=False and no usage.
    let crashed = sessions[7]
        .push(Chunk::note("test", "evidence before the crash"))
        .push(Chunk::user("more"));
    let mut w = store
        .writer(&crashed, WriterOptions::default())
        .expect("open");
    w.sync_to(&crashed).expect("rows");
    w.abandon().expect("abandon");
    rows.push(LineageRow::from_session(&crashed));

    let rows_path = tmp.path().join("rows.jsonl");
    std::fs::write(&rows_path, export_jsonl_string(&rows)).expect("rows");
    run(&py, &home, &rows_path, 9);

    // Ids from the default stamper (UUIDv7), a seeded one and a deterministic parallel branch
    // (UUIDv8) are all UUIDs Python reads, parents included.
    let live = Session::user("live ids");
    let fork = live.fork().push(Chunk::assistant_text("a"));
    let seeded = Session::user_with("seeded", rath_session::Stamper::seeded(9));
    let branch = Session::user_with("branch", rath_session::Stamper::counter().branch());
    let merged = branch.fork().merge(&branch).expect("merge");
    let home2 = tmp.path().join("home2");
    let store2 = Store::at(home2.join("sessions"));
    let mut rows2 = Vec::new();
    for s in [&live, &fork, &seeded, &branch, &merged] {
        assert!(rath_session::is_uuid(s.id().as_str()), "{}", s.id());
        store2.save(s).expect("save");
        rows2.push(LineageRow::from_session(s));
    }
    let rows2_path = tmp.path().join("rows2.jsonl");
    std::fs::write(&rows2_path, export_jsonl_string(&rows2)).expect("rows");
    run(&py, &home2, &rows2_path, 5);

    // And our loader reads back exactly what we wrote, evidence and all.
    let back = store.load(ext.id()).expect("load");
    assert_eq!(back.session.chunks(), ext.chunks());
    assert_eq!(back.session.agent_usage(), ext.agent_usage());
    assert_eq!(back.session.pending(), ext.pending());
    assert_eq!(back.session.lineage(), ext.lineage());
    let c = store.load(crashed.id()).expect("load crashed");
    assert!(!c.closed);
    assert_eq!(c.session.chunks(), crashed.chunks());
}
