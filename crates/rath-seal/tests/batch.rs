//! `Sealer::seal_all` on more sessions than one batch of ledger entries: every session is
//! sealed once, the ledger holds one entry per session, and the store verifies clean; a
//! second run records nothing.

use std::sync::Arc;

use rath_persist::{SessionStore, Store};
use rath_seal::{LEDGER_ID, Sealer, VerifyOptions, read_ledger, verify_store};
use rath_session::{Chunk, Session, SessionId, Stamper};

#[tokio::test]
async fn seal_all_in_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
    let st = Stamper::counter();
    let root = Session::user_with("root", st.clone()).push(Chunk::assistant_text("hi"));
    store.save(&root).await.expect("save");
    // 1,100 forks of the root, each adding one chunk: more than a batch (1,024 entries).
    for i in 0..1_100 {
        let f = root.fork().push(Chunk::user(format!("fork {i}")));
        store.save(&f).await.expect("save");
    }
    let sealer = Sealer::open(store.clone(), None, Stamper::counter())
        .await
        .expect("sealer");
    assert_eq!(sealer.seal_all().await.expect("seal"), 1_101);
    assert_eq!(
        store
            .stored_len(&SessionId::new(LEDGER_ID))
            .await
            .expect("len"),
        Some(1_101)
    );
    let (_, entries) = read_ledger(store.as_ref())
        .await
        .expect("read")
        .expect("sealed");
    // Each fork's seal records only its own chunk: the root's two are its base's.
    let last = entries.last().expect("an entry").1.clone().expect("reads");
    let seal = last.seal.expect("a seal");
    assert_eq!((seal.from, seal.leaves.len()), (2, 64));
    let report = verify_store(store.as_ref(), &VerifyOptions::default())
        .await
        .expect("verify");
    assert!(report.is_clean(), "{}", report.render());
    assert_eq!((report.sessions, report.chunks), (1_101, 2 + 1_100 * 3));
    // A second sealer (reading the ledger back) finds nothing new.
    let again = Sealer::open(store.clone(), None, Stamper::counter())
        .await
        .expect("sealer");
    assert_eq!(again.seal_all().await.expect("seal"), 0);
}
