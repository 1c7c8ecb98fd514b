//! A failed run's `run_failure` chunk round-trips through the store, and a listing reports
//! the failure only when that chunk is the session's last.

use rath_persist::{Store, WriterOptions};
use rath_session::{Chunk, ChunkBody, FailedAttempt, RunFailure, Session, Stamper};

fn failure() -> RunFailure {
    RunFailure {
        kind: "provider".into(),
        message: "provider failed after 2 attempts; last error: HTTP 503".into(),
        agent: Some("worker".into()),
        step: "model_call".into(),
        round: Some(0),
        request_id: Some("req_000001".into()),
        attempts: (1..=2)
            .map(|attempt| FailedAttempt {
                attempt,
                outcome: "http".into(),
                status: Some(503),
                error: "HTTP 503 from provider: overloaded".into(),
            })
            .collect(),
    }
}

#[test]
fn failure_round_trips_and_is_listed_only_when_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::at(dir.path());
    let base = Session::user_with("go", Stamper::counter());
    let failed = base
        .push(Chunk::assistant_text("thinking"))
        .push(Chunk::new(ChunkBody::RunFailure(failure())));
    // Written as a run goes: the failure is evidence after the last conversation chunk, so
    // it rides on the trailer.
    let mut w = store
        .writer(&failed, WriterOptions::default())
        .expect("open");
    w.sync_to(&failed).expect("rows");
    w.close_with(&failed).expect("close");
    // A resumed run went on after its failure.
    let resumed = base
        .fork()
        .push(Chunk::new(ChunkBody::RunFailure(failure())))
        .push(Chunk::user("again"));
    store.save(&resumed).expect("save");

    let loaded = store.load(failed.id()).expect("load");
    assert_eq!(loaded.session.chunks(), failed.chunks());
    assert_eq!(loaded.session.failure(), Some(&failure()));

    let list = store.list().expect("list");
    let of = |id| list.iter().find(|s| &s.id == id).expect("listed");
    assert_eq!(of(failed.id()).failure, Some(failure()));
    assert!(of(failed.id()).closed);
    assert_eq!(of(resumed.id()).failure, None);
    assert_eq!(
        store.load(resumed.id()).expect("load").session.failure(),
        None
    );
}
