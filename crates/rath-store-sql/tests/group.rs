//! Group commit: concurrent writes on one store handle share a transaction. A batch that
//! fails (a conflict, a fence) fails alone: the batches are then done again one transaction
//! each, so the others commit, and nothing of the failed one is stored. Concurrent loads
//! share a query and come back as they would one at a time.

mod common;

use std::sync::Arc;

use rath_persist::{Fence, PersistError, SessionStore, Write, WriteBatch};
use rath_session::{Chunk, Session, Stamper};

async fn concurrent_batches_fail_alone(store: Arc<dyn SessionStore>) {
    let name = store.name();
    // 40 sessions stored with 1 chunk each, then appended to at once: every 5th append
    // claims a wrong stored length, every 7th carries a fence token below the newest.
    let mut grown = Vec::new();
    for i in 0..40u64 {
        let s = Session::user_with(format!("task {i}"), Stamper::seeded(900 + i));
        store.save(&s).await.expect("save");
        grown.push(
            s.push(Chunk::assistant_text(format!("reply {i}")))
                .push(Chunk::user(format!("more {i}"))),
        );
    }
    let fence_key = format!("group-{name}");
    store
        .write(WriteBatch::new().fenced(Fence::new(fence_key.as_str(), 5)))
        .await
        .expect("raise the fence to 5");
    let mut tasks = Vec::new();
    for (i, s) in grown.iter().cloned().enumerate() {
        let store = store.clone();
        let key = fence_key.clone();
        tasks.push(tokio::spawn(async move {
            let expected = if i % 5 == 0 { 2 } else { 1 };
            let mut batch = WriteBatch::new().with(Write::Append {
                session: &s,
                expected_len: expected,
            });
            if i % 7 == 0 {
                batch = batch.fenced(Fence::new(key.as_str(), 4));
            }
            store.write(batch).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.expect("task");
        let stored = store.stored_len(grown[i].id()).await.expect("stored_len");
        if i % 5 == 0 || i % 7 == 0 {
            match r {
                Err(PersistError::Conflict { .. } | PersistError::Fenced { .. }) => {}
                other => panic!("{name}: batch {i} should fail alone, got {other:?}"),
            }
            assert_eq!(stored, Some(1), "{name}: batch {i} left nothing");
        } else {
            let reports = r.unwrap_or_else(|e| panic!("{name}: batch {i}: {e}"));
            assert_eq!(reports[0].len, 3, "{name}");
            assert_eq!(stored, Some(3), "{name}: batch {i} committed");
            let loaded = store.load(grown[i].id()).await.expect("load");
            assert_eq!(loaded.session.chunks(), grown[i].chunks(), "{name}");
        }
    }
}

/// Batches fenced on keys of their own (as runs' writes are): the group checks their fences
/// in one statement, and a stale one still fails alone.
async fn distinct_fences_fail_alone(store: Arc<dyn SessionStore>) {
    let name = store.name();
    let mut grown = Vec::new();
    for i in 0..30u64 {
        let s = Session::user_with(format!("run {i}"), Stamper::seeded(700 + i));
        store.save(&s).await.expect("save");
        if i % 4 == 0 {
            store
                .write(WriteBatch::new().fenced(Fence::new(format!("run-{name}-{i}"), 5)))
                .await
                .expect("raise the fence to 5");
        }
        grown.push(s.push(Chunk::assistant_text(format!("reply {i}"))));
    }
    let mut tasks = Vec::new();
    for (i, s) in grown.iter().cloned().enumerate() {
        let store = store.clone();
        let key = format!("run-{name}-{i}");
        tasks.push(tokio::spawn(async move {
            let token = if i % 4 == 0 { 4 } else { 1 + i as u64 };
            store
                .write(
                    WriteBatch::new()
                        .with(Write::Append {
                            session: &s,
                            expected_len: 1,
                        })
                        .fenced(Fence::new(key, token)),
                )
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.expect("task");
        let stored = store.stored_len(grown[i].id()).await.expect("stored_len");
        if i % 4 == 0 {
            assert!(
                matches!(
                    r,
                    Err(PersistError::Fenced {
                        token: 4,
                        current: 5,
                        ..
                    })
                ),
                "{name}: batch {i} should be fenced, got {r:?}"
            );
            assert_eq!(stored, Some(1), "{name}: batch {i} left nothing");
        } else {
            r.unwrap_or_else(|e| panic!("{name}: batch {i}: {e}"));
            assert_eq!(stored, Some(2), "{name}: batch {i} committed");
        }
    }
    // A token below the one a committed batch left (2, for session 1) is refused too.
    let late = grown[1].push(Chunk::user("late"));
    let r = store
        .write(
            WriteBatch::new()
                .with(Write::Append {
                    session: &late,
                    expected_len: 2,
                })
                .fenced(Fence::new(format!("run-{name}-1"), 1)),
        )
        .await;
    assert!(
        matches!(
            r,
            Err(PersistError::Fenced {
                token: 1,
                current: 2,
                ..
            })
        ),
        "{name}: a late token: {r:?}"
    );
    assert_eq!(
        store.stored_len(late.id()).await.expect("stored_len"),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_fences_fail_alone_on_sqlite() {
    let (_dir, store) = common::sqlite().await;
    distinct_fences_fail_alone(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_fences_fail_alone_on_postgres() {
    let Some((schema, store)) = common::postgres("group_fences").await else {
        return;
    };
    distinct_fences_fail_alone(Arc::new(store)).await;
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_fail_alone_on_sqlite() {
    let (_dir, store) = common::sqlite().await;
    concurrent_batches_fail_alone(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_fail_alone_on_postgres() {
    let Some((schema, store)) = common::postgres("group").await else {
        return;
    };
    concurrent_batches_fail_alone(Arc::new(store)).await;
    schema.drop_now().await;
}

/// Many writers at once, each growing its own session round after round and saving a fork
/// of it, every batch under one shared fence: on PostgreSQL their batches spread over both
/// group committers, which then lock the same fence row and the forks' parents from two
/// transactions. Nothing is lost, nothing is refused, and every session loads as written.
async fn writers_across_committers_lose_nothing(store: Arc<dyn SessionStore>) {
    let name = store.name();
    let fence = format!("shared-{name}");
    let tasks: Vec<_> = (0..48u64)
        .map(|i| {
            let store = store.clone();
            let fence = fence.clone();
            tokio::spawn(async move {
                let mut s = Session::user_with(format!("writer {i}"), Stamper::seeded(300 + i));
                store
                    .write(
                        WriteBatch::new()
                            .with(Write::Save(&s))
                            .fenced(Fence::new(fence.as_str(), 3)),
                    )
                    .await?;
                let mut forks = Vec::new();
                for round in 0..4 {
                    let before = s.len();
                    s = s
                        .push(Chunk::assistant_text(format!("reply {i}.{round}")))
                        .push(Chunk::user(format!("next {i}.{round}")));
                    let fork = s
                        .fork()
                        .push(Chunk::assistant_text(format!("aside {i}.{round}")));
                    store
                        .write(
                            WriteBatch::new()
                                .with(Write::Append {
                                    session: &s,
                                    expected_len: before,
                                })
                                .fenced(Fence::new(fence.as_str(), 3)),
                        )
                        .await?;
                    store
                        .write(
                            WriteBatch::new()
                                .with(Write::Save(&fork))
                                .fenced(Fence::new(fence.as_str(), 3)),
                        )
                        .await?;
                    forks.push(fork);
                }
                Ok::<_, PersistError>((s, forks))
            })
        })
        .collect();
    for t in tasks {
        let (s, forks) = t
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("{name}: a writer was refused: {e}"));
        for want in std::iter::once(&s).chain(&forks) {
            let loaded = store.load(want.id()).await.expect("load");
            assert_eq!(
                loaded.session.chunks(),
                want.chunks(),
                "{name}: {}",
                want.id()
            );
            assert_eq!(
                loaded.session.lineage(),
                want.lineage(),
                "{name}: {}",
                want.id()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_across_committers_lose_nothing_on_sqlite() {
    let (_dir, store) = common::sqlite().await;
    writers_across_committers_lose_nothing(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_across_committers_lose_nothing_on_postgres() {
    let Some((schema, store)) = common::postgres("group_writers").await else {
        return;
    };
    writers_across_committers_lose_nothing(Arc::new(store)).await;
    schema.drop_now().await;
}

/// Concurrent loads (many sessions at once, some sharing their stored chunks with a
/// parent, some asked for several times, one never stored) are read in shared queries and
/// come back exactly as the same loads one at a time.
async fn concurrent_loads_match_lone_loads(store: Arc<dyn SessionStore>) {
    let name = store.name();
    let mut ids = Vec::new();
    for i in 0..12u64 {
        let s = Session::user_with(format!("load {i}"), Stamper::seeded(500 + i))
            .push(Chunk::assistant_text(format!("answer {i}")));
        store.save(&s).await.expect("save");
        let child = s.fork().push(Chunk::user(format!("then {i}")));
        store.save(&child).await.expect("save a fork");
        let grandchild = child.fork().push(Chunk::assistant_text(format!("and {i}")));
        store
            .save(&grandchild)
            .await
            .expect("save a fork of a fork");
        ids.extend([s.id().clone(), child.id().clone(), grandchild.id().clone()]);
    }
    let missing = rath_session::SessionId::new("never-stored");
    let mut lone = Vec::new();
    for id in &ids {
        let l = store.load(id).await.expect("lone load");
        lone.push(format!("{:?}", l.session));
    }
    let mut asks = Vec::new();
    for round in 0..3 {
        for (i, id) in ids.iter().enumerate() {
            if round == 0 || i % 4 == 0 {
                asks.push((Some(i), id.clone()));
            }
        }
        asks.push((None, missing.clone()));
    }
    let tasks: Vec<_> = asks
        .iter()
        .cloned()
        .map(|(i, id)| {
            let store = store.clone();
            tokio::spawn(async move { (i, store.load(&id).await) })
        })
        .collect();
    for t in tasks {
        match t.await.expect("task") {
            (Some(i), Ok(l)) => assert_eq!(format!("{:?}", l.session), lone[i], "{name}: {i}"),
            (None, Err(PersistError::NotFound { .. })) => {}
            (i, other) => panic!("{name}: load {i:?}: {:?}", other.map(|l| l.session.len())),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_match_lone_loads_on_sqlite() {
    let (_dir, store) = common::sqlite().await;
    concurrent_loads_match_lone_loads(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_match_lone_loads_on_postgres() {
    let Some((schema, store)) = common::postgres("group_loads").await else {
        return;
    };
    concurrent_loads_match_lone_loads(Arc::new(store)).await;
    schema.drop_now().await;
}
