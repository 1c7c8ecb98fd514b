//! Group commit: concurrent writes on one store handle share a transaction, each batch under
//! a savepoint of its own. A batch that fails (a conflict, a fence) fails alone: the others
//! commit, and nothing of the failed one is stored.

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
