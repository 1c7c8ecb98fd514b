//! Structure shared on disk: a fork or detach writes one session row and no chunk data, a
//! loop round writes only its new chunks (one segment row), a merge writes one row and no
//! chunk data, and stored chunk data grows with distinct chunks, not sessions x chunks. Loading costs the same
//! queries whatever the fork depth.

mod common;

use rath_persist::SessionStore;
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{SqliteStore, TableStats};

fn rows(stats: &[TableStats], table: &str) -> u64 {
    stats
        .iter()
        .find(|s| s.table == table)
        .map_or(0, |s| s.rows)
}

/// The chunk documents stored (in `rath_segments`).
fn chunks(stats: &[TableStats]) -> u64 {
    stats
        .iter()
        .find(|s| s.table == "rath_segments")
        .map_or(0, |s| s.chunks)
}

async fn sharing_on(store: &dyn SessionStore, stats: impl AsyncFn() -> Vec<TableStats>) {
    let name = store.name();
    let mut s = Session::user_with("question", Stamper::counter());
    for i in 0..50 {
        s = s
            .push(Chunk::assistant_text(format!("answer {i}")))
            .push(Chunk::user(format!("turn {i}")));
    }
    let r = store.save(&s).await.expect("save");
    assert_eq!(r.chunks_written, 101, "{name}");
    let before = stats().await;
    // A chain of 200 forks, each adding one chunk: depth 200.
    let mut tip = s.clone();
    for i in 0..200 {
        tip = tip
            .fork()
            .push(Chunk::assistant_text(format!("fork step {i}")));
        let r = store.save(&tip).await.expect("save fork");
        assert_eq!(r.chunks_written, 1, "{name}: fork {i} wrote only its chunk");
    }
    let after = stats().await;
    assert_eq!(chunks(&after) - chunks(&before), 200, "{name}");
    assert_eq!(
        rows(&after, "rath_segments") - rows(&before, "rath_segments"),
        200,
        "{name}: a segment per fork"
    );
    let loaded = store.load(tip.id()).await.expect("load the deepest fork");
    assert_eq!(loaded.session.chunks(), tip.chunks(), "{name}");
    // A plain fork and a detach: one row each, nothing else.
    let before = stats().await;
    let fork = s.fork();
    let detached = s.detach();
    assert_eq!(
        store.save(&fork).await.expect("fork").chunks_written,
        0,
        "{name}"
    );
    assert_eq!(
        store.save(&detached).await.expect("detach").chunks_written,
        0,
        "{name}"
    );
    let after = stats().await;
    assert_eq!(
        rows(&after, "rath_sessions") - rows(&before, "rath_sessions"),
        2,
        "{name}"
    );
    assert_eq!(chunks(&after), chunks(&before), "{name}");
    assert_eq!(
        rows(&after, "rath_segments"),
        rows(&before, "rath_segments"),
        "{name}"
    );
    // A loop round on the fork: its two new chunks only.
    let round = fork
        .push(Chunk::assistant_text("round"))
        .push(Chunk::user("next"));
    assert_eq!(
        store
            .append(&round, fork.len())
            .await
            .expect("append")
            .chunks_written,
        2
    );
    // A merge of two stored sessions: one row pointing at both, no chunk data.
    let other = s.fork().push(Chunk::assistant_text("other branch"));
    store.save(&other).await.expect("other");
    let merged = round.merge(&other).expect("merge");
    let before = stats().await;
    assert_eq!(
        store.save(&merged).await.expect("merge").chunks_written,
        0,
        "{name}"
    );
    let after = stats().await;
    assert_eq!(chunks(&after), chunks(&before), "{name}");
    assert_eq!(
        rows(&after, "rath_segments"),
        rows(&before, "rath_segments"),
        "{name}"
    );
    assert_eq!(
        rows(&after, "rath_sessions") - rows(&before, "rath_sessions"),
        1
    );
    let l = store.load(merged.id()).await.expect("load merge");
    assert_eq!(l.session.chunks(), merged.chunks());
    // A session that shares only the first chunks of what its parent stores (the parent
    // grew in one write after the fork, so the cut falls inside that write's segment):
    // its own chunks only, and it loads cut where it forked.
    let base = Session::user_with("grows", s.stamper().clone()).push(Chunk::assistant_text("a"));
    store.save(&base).await.expect("base");
    let early = base.fork().push(Chunk::user("early fork"));
    let grown = base
        .push(Chunk::user("b"))
        .push(Chunk::assistant_text("c"))
        .push(Chunk::user("d"));
    store.append(&grown, base.len()).await.expect("grow");
    // A route-like child of the grown session: its first three chunks, then its own.
    let partial = grown
        .fork()
        .with_chunks(grown.slice(0..3).expect("slice"))
        .push(Chunk::assistant_text("route"));
    let before = stats().await;
    assert_eq!(store.save(&early).await.expect("early").chunks_written, 1);
    assert_eq!(
        store.save(&partial).await.expect("partial").chunks_written,
        1
    );
    let after = stats().await;
    assert_eq!(chunks(&after) - chunks(&before), 2, "{name}");
    for s in [&early, &partial] {
        let l = store
            .load(s.id())
            .await
            .expect("load a partly shared session");
        assert_eq!(l.session.chunks(), s.chunks(), "{name}");
    }
}

#[tokio::test]
async fn sqlite_shares_structure() {
    let (_dir, store) = common::sqlite().await;
    let st = store.clone();
    sharing_on(&store, async || st.table_stats().await.expect("stats")).await;
}

#[tokio::test]
async fn postgres_shares_structure() {
    let Some((schema, store)) = common::postgres("sharing").await else {
        return;
    };
    let st = store.clone();
    sharing_on(&store, async || st.table_stats().await.expect("stats")).await;
    store.close().await;
    schema.drop_now().await;
}

#[tokio::test]
async fn a_reopened_sqlite_store_keeps_everything() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("a/b/store.sqlite");
    let s = Session::user_with("kept", Stamper::counter()).push(Chunk::assistant_text("yes"));
    {
        let store = SqliteStore::open(&path).await.expect("open");
        store.save(&s).await.expect("save");
        store.save(&s.fork()).await.expect("fork");
        store.close().await;
    }
    let store = SqliteStore::open(&path).await.expect("reopen");
    assert_eq!(store.list().await.expect("list").len(), 2);
    assert_eq!(
        store.load(s.id()).await.expect("load").session.chunks(),
        s.chunks()
    );
}

/// What a store remembers of the sessions it wrote is checked against the row: after another
/// handle (another process) appends to a session, a fork of the version this handle saved
/// shares only the grown row's first chunks and loses none; a fork of what it loaded shares
/// the row.
async fn remembered_rows_are_checked(
    a: &dyn SessionStore,
    b: &dyn SessionStore,
    stats: impl AsyncFn() -> Vec<TableStats>,
) {
    let name = a.name();
    let mut s = Session::user_with("question", Stamper::counter());
    for i in 0..10 {
        s = s.push(Chunk::assistant_text(format!("answer {i}")));
    }
    a.save(&s).await.expect("save");
    // Another handle grows the stored session by two chunks.
    let grown = s
        .push(Chunk::user("more"))
        .push(Chunk::assistant_text("and more"));
    b.append(&grown, s.len()).await.expect("append elsewhere");
    // This handle still remembers 11 chunks; the row has 13: the remembered row is not
    // taken as it is, the fork shares the row's first 11 chunks (found by reading them) and
    // loads as the 11, not the 13.
    let before = stats().await;
    let fork = s.fork();
    a.save(&fork).await.expect("fork of the old version");
    let after = stats().await;
    assert_eq!(
        chunks(&after) - chunks(&before),
        0,
        "{name}: the grown row's first chunks are shared"
    );
    assert_eq!(
        a.load(fork.id()).await.expect("load").session.chunks(),
        s.chunks(),
        "{name}"
    );
    // Loading refreshes what this handle knows: a fork of the loaded session is one row.
    let loaded = a
        .load(s.id())
        .await
        .expect("load the grown session")
        .session;
    assert_eq!(loaded.chunks(), grown.chunks(), "{name}");
    let before = stats().await;
    let fork = loaded.fork().push(Chunk::user("branch"));
    assert_eq!(
        a.save(&fork).await.expect("fork").chunks_written,
        1,
        "{name}"
    );
    let after = stats().await;
    assert_eq!(
        chunks(&after) - chunks(&before),
        1,
        "{name}: the fork shares the loaded row"
    );
    assert_eq!(
        b.load(fork.id()).await.expect("load").session.chunks(),
        fork.chunks(),
        "{name}"
    );
    // A second fork growing into exactly the first one's chunks shares that row whole.
    let twin = loaded.fork().push(Chunk::user("branch"));
    let before = stats().await;
    assert_eq!(
        a.save(&twin).await.expect("twin").chunks_written,
        0,
        "{name}"
    );
    let after = stats().await;
    assert_eq!(
        chunks(&after),
        chunks(&before),
        "{name}: the twin shares the first fork's row"
    );
    assert_eq!(
        b.load(twin.id()).await.expect("load").session.chunks(),
        twin.chunks(),
        "{name}"
    );
}

#[tokio::test]
async fn remembered_rows_are_checked_on_sqlite() {
    let (dir, a) = common::sqlite().await;
    let b = SqliteStore::open(dir.path().join("store.sqlite"))
        .await
        .expect("second handle");
    let st = a.clone();
    remembered_rows_are_checked(&a, &b, async || st.table_stats().await.expect("stats")).await;
}

#[tokio::test]
async fn remembered_rows_are_checked_on_postgres() {
    let Some((schema, a)) = common::postgres("remembered").await else {
        return;
    };
    let b = rath_store_sql::PgStore::connect_in(&schema.url, Some(&schema.name))
        .await
        .expect("second handle");
    let st = a.clone();
    remembered_rows_are_checked(&a, &b, async || st.table_stats().await.expect("stats")).await;
    a.close().await;
    b.close().await;
    schema.drop_now().await;
}
