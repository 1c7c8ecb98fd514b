//! The store conformance suite (feature `conformance`): public async functions that check a
//! [`SessionStore`] against the contract. A store crate calls each from one of its tests with
//! a fresh, empty store; this crate runs them against the JSONL directory
//! (`tests/conformance.rs`).
//!
//! ```
//! use rath_persist::{Store, conformance};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! conformance::round_trip(&Store::at(dir.path())).await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Each function panics (failing the calling test) with a message naming the store and the
//! broken promise. Every function needs an empty store; they write sessions whose ids come
//! from a counter stamper, so two functions must not share one store.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rath_session::{
    Chunk, ChunkBody, CounterSource, Lineage, LineageKind, PendingCall, RunFailure, SandboxSpec,
    Session, SessionId, StampSource, Stamper, Timestamp, ToolCall, Usage,
};

use crate::PersistError;
use crate::contract::{Fence, SessionStore, Write, WriteBatch};
use crate::loader::{LoadedSession, load_file};
use crate::store::Store;

/// Every function of the suite, in order, each on a fresh store from `fresh`.
pub async fn run_all<F, Fut, S>(mut fresh: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = S>,
    S: SessionStore,
{
    round_trip(&fresh().await).await;
    lossless_against_jsonl(&fresh().await).await;
    save_is_idempotent(&fresh().await).await;
    append_and_conflict(&fresh().await).await;
    racing_appenders(&fresh().await).await;
    listing_and_lineage(&fresh().await).await;
    delete_keeps_sharers(&fresh().await).await;
    prune_by_age(&fresh().await).await;
    batches(&fresh().await).await;
    fencing(&fresh().await).await;
    missing_sessions(&fresh().await).await;
    windows(&fresh().await).await;
    stored_documents(&fresh().await).await;
}

/// [`SessionStore::chunk_docs`] gives, for every chunk of every stored session (evidence,
/// branch tags, forks and merges included), exactly the document
/// [`crate::doc::encode_chunk`] writes for it; [`SessionStore::replace_chunk_doc`] replaces
/// a chunk in every session that holds it and nothing else; both answer
/// [`PersistError::NotFound`] or zero for what is not stored.
pub async fn stored_documents(store: &dyn SessionStore) {
    let name = store.name();
    let st = Stamper::counter();
    let root = Session::system_with("be brief", st)
        .push(Chunk::user("tell me about \"quotes\" and ünïcödé"))
        .push(Chunk::note("router", "evidence between turns"))
        .push(Chunk::assistant_text("ok"));
    let a = root
        .fork()
        .push(Chunk::user("secret plan"))
        .push(Chunk::note("n", "tail evidence"));
    let b = root
        .fork()
        .push(Chunk::assistant_text("tagged").with_branch("b1"));
    let m = a.merge(&b).expect("merge");
    for s in [&root, &a, &b, &m] {
        store.save(s).await.expect("save");
    }
    for s in [&root, &a, &b, &m] {
        let docs = match store.chunk_docs(s.id()).await {
            Err(PersistError::Unsupported { .. }) => return,
            other => other.expect("chunk_docs"),
        };
        let want: Vec<Result<Vec<u8>, String>> = s
            .chunks()
            .iter()
            .map(|c| Ok(crate::doc::encode_chunk(c).expect("encode")))
            .collect();
        assert_eq!(docs, want, "{name}: chunk_docs of {}", s.id());
    }
    assert!(
        matches!(
            store.chunk_docs(&SessionId::new("absent")).await,
            Err(PersistError::NotFound { .. })
        ),
        "{name}: chunk_docs of an absent session"
    );
    let old = crate::doc::encode_chunk(&Chunk::user("secret plan")).expect("encode");
    let tomb = Chunk::note("rath-erase", "erased");
    let new = crate::doc::encode_chunk(&tomb).expect("encode");
    let replaced = store.replace_chunk_doc(&old, &new).await.expect("replace");
    assert!(replaced >= 1, "{name}: replaced {replaced}");
    for s in [&a, &m] {
        let loaded = store.load(s.id()).await.expect("load").session;
        assert_eq!(loaded.len(), s.len(), "{name}");
        let at = s
            .chunks()
            .iter()
            .position(|c| c.text() == Some("secret plan"))
            .expect("there");
        assert_eq!(loaded.chunks()[at], tomb, "{name}: {} chunk {at}", s.id());
        for (i, (x, y)) in loaded.chunks().iter().zip(s.chunks().iter()).enumerate() {
            if i != at {
                assert_eq!(x, y, "{name}: {} chunk {i} untouched", s.id());
            }
        }
    }
    assert_eq!(
        store.load(root.id()).await.expect("load").session.chunks(),
        root.chunks(),
        "{name}"
    );
    assert_eq!(
        store.replace_chunk_doc(&old, &new).await.expect("again"),
        0,
        "{name}: nothing left"
    );
}

/// A clock that always says `at`, with counter ids: sessions built with it are saved with
/// the same `created_at` and `closed_at` by every store, so their JSONL bytes can be compared.
#[derive(Debug)]
struct Pinned {
    ids: CounterSource,
    at: Timestamp,
}

impl StampSource for Pinned {
    fn next_id(&self) -> SessionId {
        self.ids.next_id()
    }
    fn next_token(&self, prefix: &str) -> String {
        self.ids.next_token(prefix)
    }
    fn now(&self) -> Timestamp {
        self.at
    }
    fn is_deterministic(&self) -> bool {
        true
    }
}

fn pinned() -> Stamper {
    let at = Timestamp::from_unix_micros(1_767_225_600_000_000);
    Stamper::new(Pinned {
        ids: CounterSource::new(at, 1_000_000),
        at,
    })
}

/// Sessions with every part the format has: system and user rows, tool calls and results,
/// evidence chunks (alone, between rows, at the end), branch tags, usage per agent, pending
/// calls, placement, lineage extras, a fork, a merge, a detach and a failed run. Built with a
/// pinned clock.
pub fn sample_sessions() -> Vec<Session> {
    let st = pinned();
    let agent = Session::system_with("You are careful.", st.clone());
    let root = Session::user_with("Count the words in 'a b c'.", st.clone())
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    let fork = root.fork();
    let call = ToolCall::function("call_1", "word_count", r#"{"text": "a b c"}"#);
    let looped = fork
        .derive(Lineage::new(
            vec![fork.id().clone(), agent.id().clone()],
            "run_session_loop",
            LineageKind::OpSessionLoop,
        ))
        .push(Chunk::note("policy", "allowed word_count"))
        .push(Chunk::assistant(None, Some(vec![call.clone()])))
        .with_usage(Some("counter"), Usage::new(40, 12))
        .push(Chunk::note("backend", "ran on local"))
        .push(Chunk::tool_result(
            "call_1",
            "word_count",
            r#"{"words": 3}"#,
        ))
        .push(Chunk::assistant_text("Three words: é ü 😀 \"quoted\" \\ \n").with_branch("b1"))
        .with_usage(Some("counter"), Usage::new(70, 11))
        .push(Chunk::note("trace", "done"));
    let other = root.fork().push(Chunk::assistant_text("another answer"));
    let merged = looped.merge(&other).expect("merge of samples");
    let detached = merged.detach();
    let pending = looped.fork().with_pending(PendingCall {
        call,
        agent: Some("counter".to_owned()),
        reason: "require_approval".to_owned(),
    });
    let failed = root
        .fork()
        .push(Chunk::new(ChunkBody::RunFailure(RunFailure {
            kind: "provider".to_owned(),
            message: "HTTP 500".to_owned(),
            step: "model_call".to_owned(),
            ..RunFailure::default()
        })));
    vec![
        agent, root, fork, looped, other, merged, detached, pending, failed,
    ]
}

fn tmp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "rath-conformance-{}-{tag}-{n}-{}",
        std::process::id(),
        Timestamp::now_utc().unix_micros()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Removes its directory when dropped.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn same_session(store: &str, got: &Session, want: &Session) {
    let id = want.id();
    assert_eq!(got.id(), id, "{store}: id");
    assert_eq!(got.lineage(), want.lineage(), "{store}: lineage of {id}");
    assert_eq!(got.chunks(), want.chunks(), "{store}: chunks of {id}");
    assert_eq!(got.usage(), want.usage(), "{store}: usage of {id}");
    assert_eq!(
        got.agent_usage(),
        want.agent_usage(),
        "{store}: agent usage of {id}"
    );
    assert_eq!(
        got.pending(),
        want.pending(),
        "{store}: pending calls of {id}"
    );
    assert_eq!(
        (
            got.placement().backend(),
            got.placement().spec(),
            got.placement().handle_id()
        ),
        (
            want.placement().backend(),
            want.placement().spec(),
            want.placement().handle_id()
        ),
        "{store}: placement of {id}"
    );
}

/// Saved sessions load back equal in every part, closed, with the store's timestamps.
pub async fn round_trip(store: &dyn SessionStore) {
    let name = store.name();
    let sessions = sample_sessions();
    for s in &sessions {
        let r = store
            .save(s)
            .await
            .unwrap_or_else(|e| panic!("{name}: save: {e}"));
        assert_eq!(r.len, s.len(), "{name}: reported length");
        assert!(!r.unchanged, "{name}: a first save changes the store");
    }
    for s in &sessions {
        let l = store
            .load(s.id())
            .await
            .unwrap_or_else(|e| panic!("{name}: load: {e}"));
        same_session(&name, &l.session, s);
        assert!(l.closed, "{name}: a saved session is closed");
        assert_eq!(l.created_at, s.stamper().now(), "{name}: created_at");
        assert_eq!(
            store.stored_len(s.id()).await.expect("stored_len"),
            Some(s.len())
        );
    }
}

/// The JSONL file written from a session loaded from this store has the bytes the JSONL
/// store writes for the session itself: nothing is lost or changed on the way.
pub async fn lossless_against_jsonl(store: &dyn SessionStore) {
    let name = store.name();
    let direct = TmpDir(tmp_dir("direct"));
    let copied = TmpDir(tmp_dir("copied"));
    let (direct_store, copied_store) = (Store::at(&direct.0), Store::at(&copied.0));
    for s in sample_sessions() {
        direct_store.save(&s).expect("direct JSONL save");
        store
            .save(&s)
            .await
            .unwrap_or_else(|e| panic!("{name}: save: {e}"));
        let l = store
            .load(s.id())
            .await
            .unwrap_or_else(|e| panic!("{name}: load: {e}"));
        SessionStore::restore(&copied_store, &l)
            .await
            .unwrap_or_else(|e| panic!("{name}: restore into JSONL: {e}"));
        let file = format!("{}.jsonl", s.id());
        let want = std::fs::read(direct.0.join(&file)).expect("direct file");
        let got = std::fs::read(copied.0.join(&file)).expect("copied file");
        assert!(
            got == want,
            "{name}: {file} differs after a round trip:\n{}\nvs\n{}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }
}

/// Copies every session file of `dir` (a JSONL store, e.g. the Python OpenRath fixtures) into
/// `store` and back out to a JSONL directory: each file comes back byte for byte, closed
/// files as closed files and a crashed writer's `__partial__` file as one.
pub async fn interop_round_trip(store: &dyn SessionStore, dir: &Path) {
    let name = store.name();
    let out = TmpDir(tmp_dir("interop"));
    let out_store = Store::at(&out.0);
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("interop dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".jsonl") || n.ends_with(".jsonl.__partial__"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no session files in {}", dir.display());
    for file in names {
        let original = load_file(&dir.join(&file)).expect("original loads");
        store
            .restore(&original)
            .await
            .unwrap_or_else(|e| panic!("{name}: restore {file}: {e}"));
        let back: LoadedSession = store
            .load(original.session.id())
            .await
            .unwrap_or_else(|e| panic!("{name}: load {file}: {e}"));
        assert_eq!(back.closed, original.closed, "{name}: {file} closed");
        SessionStore::restore(&out_store, &back)
            .await
            .unwrap_or_else(|e| panic!("{name}: restore {file} into JSONL: {e}"));
        let id = original.session.id();
        let written = if back.closed {
            out_store.path_of(id)
        } else {
            out_store.partial_path_of(id)
        };
        let got = std::fs::read(&written).expect("written file");
        let want = std::fs::read(dir.join(&file)).expect("original file");
        assert!(
            got == want,
            "{name}: {file} differs after the copy:\n{}\nvs\n{}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }
}

/// Saving a stored session again writes nothing; another session under its id is refused
/// with [`PersistError::Exists`] and the stored one is kept.
pub async fn save_is_idempotent(store: &dyn SessionStore) {
    let name = store.name();
    let s = Session::user_with("hi", pinned()).push(Chunk::assistant_text("hello"));
    store.save(&s).await.expect("first save");
    let again = store.save(&s).await.expect("second save");
    assert!(
        again.unchanged,
        "{name}: saving the same session again is a no-op"
    );
    assert_eq!(again.chunks_written, 0, "{name}: the no-op wrote chunks");
    let other = s.push(Chunk::user("a different session under one id"));
    let refused = store.save(&other).await;
    assert!(
        matches!(refused, Err(PersistError::Exists { .. })),
        "{name}: a different session under a stored id: {refused:?}"
    );
    let kept = store.load(s.id()).await.expect("load");
    same_session(&name, &kept.session, &s);
}

/// Appends write what is new; a stale `expected_len` is a [`PersistError::Conflict`] that
/// writes nothing; a session that does not continue the stored one is refused.
pub async fn append_and_conflict(store: &dyn SessionStore) {
    let name = store.name();
    let st = pinned();
    let s0 = Session::user_with("round 0", st.clone());
    let r = store
        .append(&s0, 0)
        .await
        .expect("append to nothing creates");
    assert_eq!((r.len, r.chunks_written), (1, 1), "{name}: first append");
    let s1 = s0
        .push(Chunk::assistant_text("answer 0"))
        .with_usage(Some("a"), Usage::new(3, 4))
        .push(Chunk::note("loop", "round 1"));
    let r = store.append(&s1, 1).await.expect("append");
    assert_eq!((r.len, r.chunks_written), (3, 2), "{name}: second append");
    let s2 = s1.push(Chunk::user("round 2"));
    match store.append(&s2, 1).await {
        Err(PersistError::Conflict {
            expected, found, ..
        }) => assert_eq!((expected, found), (1, Some(3)), "{name}: conflict figures"),
        other => panic!("{name}: a stale append must conflict: {other:?}"),
    }
    match store.append(&Session::user_with("absent", st), 2).await {
        Err(PersistError::Conflict { found: None, .. }) => {}
        other => panic!("{name}: appending to an absent session with expected 2: {other:?}"),
    }
    let liar = s0
        .push(Chunk::assistant_text("not what is stored"))
        .push(Chunk::user("x"));
    let refused = store.append(&liar, 3).await;
    assert!(
        matches!(refused, Err(PersistError::NotAContinuation { .. })),
        "{name}: a session that does not continue the stored chunks: {refused:?}"
    );
    let l = store.load(s1.id()).await.expect("load");
    same_session(&name, &l.session, &s1);
    store
        .append(&s2, 3)
        .await
        .expect("append after the refusals");
    let l = store.load(s2.id()).await.expect("load");
    same_session(&name, &l.session, &s2);
    assert_eq!(store.stored_len(s2.id()).await.expect("len"), Some(4));
}

/// Two writers append to one session from the same stored state at once: one wins, the other
/// gets a [`PersistError::Conflict`], and the stored session is exactly the winner's.
pub async fn racing_appenders(store: &dyn SessionStore) {
    let name = store.name();
    let base = Session::user_with("race", pinned());
    store.save(&base).await.expect("save");
    for round in 0..4 {
        let stored = store.load(base.id()).await.expect("load").session;
        let n = stored.len();
        let a = stored.push(Chunk::assistant_text(format!("writer a, round {round}")));
        let b = stored
            .push(Chunk::assistant_text(format!("writer b, round {round}")))
            .push(Chunk::user("b wrote two"));
        let (ra, rb) = futures_join(store.append(&a, n), store.append(&b, n)).await;
        let winner = match (&ra, &rb) {
            (Ok(_), Err(PersistError::Conflict { .. })) => &a,
            (Err(PersistError::Conflict { .. }), Ok(_)) => &b,
            other => panic!("{name}: exactly one racing appender wins: {other:?}"),
        };
        let l = store.load(base.id()).await.expect("load");
        same_session(&name, &l.session, winner);
    }
}

/// Polls two futures to completion on the current task (no runtime needed here).
async fn futures_join<A, B>(a: A, b: B) -> (A::Output, B::Output)
where
    A: std::future::Future,
    B: std::future::Future,
{
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    match (ra, rb) {
        (Some(a), Some(b)) => (a, b),
        _ => unreachable!("poll_fn returns only when both are ready"),
    }
}

/// The listing and lineage rows are what the JSONL store gives for the same sessions.
pub async fn listing_and_lineage(store: &dyn SessionStore) {
    let name = store.name();
    let dir = TmpDir(tmp_dir("listing"));
    let jsonl = Store::at(&dir.0);
    let sessions = sample_sessions();
    for s in &sessions {
        jsonl.save(s).expect("JSONL save");
        store.save(s).await.expect("save");
    }
    let want = jsonl.list().expect("JSONL list");
    let got = store.list().await.expect("list");
    assert_eq!(got.len(), want.len(), "{name}: listing length");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            (
                &g.id,
                g.created_at,
                &g.parents,
                &g.operator,
                &g.kind,
                &g.extras,
                g.chunk_count,
                g.evidence_count,
                g.closed,
                g.usage,
                &g.failure
            ),
            (
                &w.id,
                w.created_at,
                &w.parents,
                &w.operator,
                &w.kind,
                &w.extras,
                w.chunk_count,
                w.evidence_count,
                w.closed,
                w.usage,
                &w.failure
            ),
            "{name}: summary of {}",
            w.id
        );
    }
    assert!(
        got.iter().any(|s| s.failure.is_some()),
        "{name}: the failed run shows"
    );
    let rows = store.lineage_rows().await.expect("lineage rows");
    assert_eq!(
        crate::export_jsonl_string(&rows),
        crate::export_jsonl_string(&jsonl.lineage_rows().expect("JSONL rows")),
        "{name}: lineage export"
    );
}

/// Deleting a session never breaks another that shares its chunks; after `gc` the sharer
/// still loads whole, and deleting everything lets `gc` free what was shared.
pub async fn delete_keeps_sharers(store: &dyn SessionStore) {
    let name = store.name();
    let root = Session::user_with("shared question", pinned())
        .push(Chunk::assistant_text("shared answer"));
    let fork = root.fork().push(Chunk::user("the fork's own turn"));
    let deeper = fork.fork().push(Chunk::assistant_text("deeper"));
    for s in [&root, &fork, &deeper] {
        store.save(s).await.expect("save");
    }
    assert!(
        store.delete(root.id()).await.expect("delete"),
        "{name}: delete says stored"
    );
    assert!(
        !store.delete(root.id()).await.expect("delete"),
        "{name}: deleted once"
    );
    assert!(matches!(
        store.load(root.id()).await,
        Err(PersistError::NotFound { .. })
    ));
    store.gc().await.expect("gc");
    for s in [&fork, &deeper] {
        let l = store.load(s.id()).await.expect("a sharer still loads");
        same_session(&name, &l.session, s);
    }
    assert!(store.delete(fork.id()).await.expect("delete"));
    store.gc().await.expect("gc");
    let l = store
        .load(deeper.id())
        .await
        .expect("the deepest sharer still loads");
    same_session(&name, &l.session, &deeper);
    assert!(store.delete(deeper.id()).await.expect("delete"));
    let freed = store.gc().await.expect("gc");
    if store.capabilities().shared_structure {
        assert!(
            freed.chunks >= 4,
            "{name}: gc freed the shared chunks: {freed:?}"
        );
        assert!(freed.bytes > 0, "{name}: gc reports bytes freed: {freed:?}");
    }
    assert!(
        store.list().await.expect("list").is_empty(),
        "{name}: empty after deletes"
    );
    // The id is free again.
    store.save(&root).await.expect("save under a deleted id");
    same_session(
        &name,
        &store.load(root.id()).await.expect("load").session,
        &root,
    );
}

/// `read_chunks` answers every window of every stored session as `load` does, on sessions
/// that share structure (forks, appends, a fork of a cut prefix, a merge) and across saves
/// of several segments; a window past the end is cut; a session not stored is `NotFound`.
/// `known_to_extend` is true only of real prefixes, and of a saved fork's parent on a store
/// that shares structure.
pub async fn windows(store: &dyn SessionStore) {
    let name = store.name();
    let all = save_window_sessions(store, &name).await;
    every_window_as_loaded(store, &name, &all).await;
    known_to_extend_is_true(store, &name, &all).await;
    assert!(
        matches!(
            store
                .read_chunks(&SessionId::new("never-stored"), 0..10)
                .await,
            Err(PersistError::NotFound { .. })
        ),
        "{name}: a window of a session not stored"
    );
}

/// Stores the sessions [`windows`] reads: a long session saved in three segments (first in
/// the list), a fork of it, a fork of a cut prefix of it, a merge, and the sample sessions.
async fn save_window_sessions(store: &dyn SessionStore, name: &str) -> Vec<Session> {
    // System ids: the sample sessions below use the pinned clock's.
    let mut root = Session::user_with("first", Stamper::system());
    for i in 0..40 {
        root = root.push(Chunk::assistant_text(format!("reply {i}")));
    }
    store.save(&root).await.expect("save");
    // Appended in two more saves: three segments.
    let grown = root.push(Chunk::user("more"));
    store.append(&grown, root.len()).await.expect("append");
    let grown2 = grown.push(Chunk::assistant_text("and more"));
    store.append(&grown2, grown.len()).await.expect("append");
    let fork = grown2.fork().push(Chunk::user("the fork's own turn"));
    let cut = grown2
        .fork()
        .with_chunks(grown2.slice(0..20).expect("slice"))
        .push(Chunk::user("after a cut"));
    let other = Session::user_with("other", Stamper::system()).push(Chunk::assistant_text("o"));
    store.save(&other).await.expect("save");
    let merged = fork
        .merge(&other)
        .unwrap_or_else(|e| panic!("{name}: merge: {e}"));
    let mut all = vec![grown2.clone(), fork, cut, merged];
    all.extend(sample_sessions());
    for s in all.iter().skip(1) {
        store.save(s).await.expect("save");
    }
    all
}

/// Every window of each of `all` (from and to a few cut points, some past the end) reads
/// the chunks `load` gives for it.
async fn every_window_as_loaded(store: &dyn SessionStore, name: &str, all: &[Session]) {
    for s in all {
        let loaded = store.load(s.id()).await.expect("load").session;
        let n = loaded.len();
        let cuts = [0, 1, 2, 19, 20, 21, n / 2, n.saturating_sub(1), n, n + 5];
        for &a in &cuts {
            for &b in &cuts {
                let got = store
                    .read_chunks(s.id(), a..b)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: read_chunks {a}..{b}: {e}"));
                let end = b.min(n);
                let want: Vec<Chunk> = if a < end {
                    loaded.chunks().range(a..end).iter().cloned().collect()
                } else {
                    Vec::new()
                };
                assert_eq!(got, want, "{name}: chunks {a}..{b} of {} ({n})", s.id());
            }
        }
    }
}

/// `known_to_extend` between any two of `all` is never wrong and says a session starts with
/// itself; on a store that shares structure it also knows that the fork and the merge of
/// `all` (second and fourth, as [`save_window_sessions`] returns them) start with what they
/// were made from.
async fn known_to_extend_is_true(store: &dyn SessionStore, name: &str, all: &[Session]) {
    let mut loaded = Vec::new();
    for s in all {
        loaded.push(store.load(s.id()).await.expect("load").session);
    }
    for a in &loaded {
        for b in &loaded {
            let known = store
                .known_to_extend(a.id(), b.id())
                .await
                .unwrap_or_else(|e| panic!("{name}: known_to_extend: {e}"));
            let really =
                b.len() <= a.len() && a.chunks().range(0..b.len()).iter().eq(b.chunks().iter());
            assert!(
                !known || really,
                "{name}: {} said to start with {}",
                a.id(),
                b.id()
            );
            if a.id() == b.id() {
                assert!(known, "{name}: a session starts with itself");
            }
        }
    }
    if store.capabilities().shared_structure {
        for (a, b) in [(&all[1], &all[0]), (&all[3], &all[1]), (&all[3], &all[0])] {
            assert!(
                store.known_to_extend(a.id(), b.id()).await.expect("known"),
                "{name}: a fork saved after its parent shares it"
            );
        }
    }
}

/// `prune` deletes the sessions created before the cut-off and keeps the others.
pub async fn prune_by_age(store: &dyn SessionStore) {
    let t0 = Timestamp::from_unix_micros(1_767_225_600_000_000);
    let hour = 3_600_000_000;
    let st = Stamper::new(CounterSource::new(t0, hour));
    // Created at t0 + 1 h (the first save's first stamp) and t0 + 4 h.
    let old = Session::user_with("old", st.clone());
    store.save(&old).await.expect("save");
    let young = Session::user_with("young", st);
    store.save(&young).await.expect("save");
    let removed = store
        .prune(Duration::from_secs(9000), t0.plus_micros(5 * hour))
        .await
        .expect("prune");
    assert_eq!(removed, vec![old.id().clone()], "{}: pruned", store.name());
    assert!(store.load(young.id()).await.is_ok());
    assert!(store.load(old.id()).await.is_err());
}

/// A batch reports each write; on a store with transactions a failing write stores nothing
/// of its batch.
pub async fn batches(store: &dyn SessionStore) {
    let name = store.name();
    let a = Session::user_with("a", pinned());
    let b = a.fork().push(Chunk::assistant_text("b"));
    let reports = store
        .write(
            WriteBatch::new()
                .with(Write::Save(&a))
                .with(Write::Save(&b)),
        )
        .await
        .expect("batch");
    assert_eq!(reports.len(), 2, "{name}: one report per write");
    if store.capabilities().shared_structure {
        assert_eq!(
            reports[1].chunks_written, 1,
            "{name}: the fork wrote only its own chunk"
        );
    }
    let c = Session::user_with("c", a.stamper().clone());
    let stale = Write::Append {
        session: &b,
        expected_len: 7,
    };
    let failed = store
        .write(WriteBatch::new().with(Write::Save(&c)).with(stale))
        .await;
    assert!(
        matches!(failed, Err(PersistError::Conflict { .. })),
        "{name}: {failed:?}"
    );
    if store.capabilities().atomic_batch {
        assert!(
            matches!(store.load(c.id()).await, Err(PersistError::NotFound { .. })),
            "{name}: a failed batch stored part of itself"
        );
    }
}

/// A fenced batch is refused once a newer token was accepted for its key, and stores nothing;
/// stores without fencing refuse fenced batches as unsupported.
pub async fn fencing(store: &dyn SessionStore) {
    let name = store.name();
    let s = Session::user_with("fenced", pinned());
    let batch = |t: u64| {
        WriteBatch::new()
            .with(Write::Save(&s))
            .fenced(Fence::new("run-1", t))
    };
    if !store.capabilities().fencing {
        assert!(
            matches!(
                store.write(batch(1)).await,
                Err(PersistError::Unsupported { .. })
            ),
            "{name}: a store without fencing must refuse a fenced batch"
        );
        return;
    }
    store.write(batch(5)).await.expect("token 5");
    let grown = s.push(Chunk::assistant_text("late"));
    let stale = WriteBatch::new()
        .with(Write::Append {
            session: &grown,
            expected_len: 1,
        })
        .fenced(Fence::new("run-1", 4));
    match store.write(stale).await {
        Err(PersistError::Fenced { token, current, .. }) => {
            assert_eq!((token, current), (4, 5), "{name}: fence figures");
        }
        other => panic!("{name}: a stale token must be fenced: {other:?}"),
    }
    assert_eq!(store.stored_len(s.id()).await.expect("len"), Some(1));
    store.write(batch(5)).await.expect("the same token again");
    let newer = WriteBatch::new()
        .with(Write::Append {
            session: &grown,
            expected_len: 1,
        })
        .fenced(Fence::new("run-1", 6));
    store.write(newer).await.expect("token 6");
    assert_eq!(store.stored_len(s.id()).await.expect("len"), Some(2));
    store
        .write(
            WriteBatch::new()
                .with(Write::Save(&grown))
                .fenced(Fence::new("run-2", 1)),
        )
        .await
        .expect("another key has its own tokens");
}

/// Absent sessions: `load` is [`PersistError::NotFound`], `stored_len` is `None`, `delete`
/// is false; an empty store lists nothing and collects nothing.
pub async fn missing_sessions(store: &dyn SessionStore) {
    let name = store.name();
    let id = SessionId::from("no-such-session");
    assert!(
        matches!(store.load(&id).await, Err(PersistError::NotFound { .. })),
        "{name}: load of an absent session"
    );
    assert_eq!(store.stored_len(&id).await.expect("stored_len"), None);
    assert!(!store.delete(&id).await.expect("delete"));
    assert!(store.list().await.expect("list").is_empty());
    assert_eq!(store.gc().await.expect("gc").chunks, 0);
}
