//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rath_persist::{SessionWriter, Store, WriterOptions};
use rath_session::{
    Chunk, CounterSource, Lineage, LineageKind, SandboxSpec, Session, Stamper, Timestamp, ToolCall,
    Usage,
};

/// `../shared/interop/openrath-1.3.0`, relative to this crate.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

/// The eight sessions of the interop README, made with a counter stamper, in id order
/// (agent, root, fork_a, fork_b, loop_a, merged, detached, crash).
pub fn interop_sessions() -> Vec<Session> {
    let st = Stamper::counter();
    let agent = Session::system_with(
        "You are a careful assistant. Use tools when helpful.",
        st.clone(),
    );
    let root = Session::user_with("How many words are in 'the quick brown fox'?", st.clone())
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    let fork_a = root.fork();
    let fork_b = root.fork();
    let loop_a = fork_a
        .derive(Lineage::new(
            vec![fork_a.id().clone(), agent.id().clone()],
            "run_session_loop",
            LineageKind::OpSessionLoop,
        ))
        .push(Chunk::assistant(
            None,
            Some(vec![ToolCall::function(
                "call_wc_1",
                "word_count",
                r#"{"text": "the quick brown fox"}"#,
            )]),
        ))
        .with_usage(None, Usage::new(40, 12))
        .push(Chunk::tool_result(
            "call_wc_1",
            "word_count",
            r#"{"words": 4, "unique_lowercase": 4}"#,
        ))
        .push(Chunk::assistant_text(
            "The text 'the quick brown fox' has 4 words.",
        ))
        .with_usage(None, Usage::new(70, 11));
    let merged = loop_a.merge(&fork_b).expect("same backend, unbound");
    let detached = merged.detach();
    let crash = Session::from_chunks([Chunk::user("partial write")], Lineage::implicit(), st);
    vec![agent, root, fork_a, fork_b, loop_a, merged, detached, crash]
}

/// A clock like the fixture script's pinned `datetime.now`: 2026-01-01T00:00:01Z + k s.
pub fn fixture_clock() -> Stamper {
    Stamper::new(CounterSource::new(
        Timestamp::from_unix_micros(1_767_225_601_000_000),
        1_000_000,
    ))
}

/// Writes the interop store the way the fixture script did (loop_a first, by the loop's
/// writer; then the others; then the abandoned crash file). Returns (store dir, crash dir).
pub fn write_interop_like(root: &Path) -> (PathBuf, PathBuf) {
    let sessions = interop_sessions();
    let clock = fixture_clock();
    let store = Store::at(root.join("openrath_home/sessions"));
    let opts = || WriterOptions::default().clock(clock.clone());
    // loop_a: header at loop start, rows as the loop makes them, trailer at the end.
    let loop_a = &sessions[4];
    let mut w = store.writer(loop_a, opts()).expect("open loop_a");
    for c in loop_a.chunks() {
        w.append(c).expect("append");
    }
    w.close_with(loop_a).expect("close loop_a");
    for (i, s) in sessions.iter().enumerate().take(7) {
        if i != 4 {
            store.save_with(s, opts()).expect("save");
        }
    }
    let crash_dir = root.join("crash");
    let crash = &sessions[7];
    let mut w = SessionWriter::create(crash_dir.join("abandoned.jsonl"), crash, opts())
        .expect("open crash");
    w.sync_to(crash).expect("row");
    w.abandon().expect("abandon");
    (store.dir().to_path_buf(), crash_dir)
}
