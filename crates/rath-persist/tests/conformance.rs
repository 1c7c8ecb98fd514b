//! The JSONL directory store passes the store conformance suite (`rath_persist::conformance`),
//! and the Python OpenRath fixtures survive a copy into it and out again byte for byte.
#![cfg(feature = "conformance")]

mod common;

use rath_persist::{Store, conformance};

fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::at(dir.path().join("sessions"));
    (dir, store)
}

macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let (_dir, store) = fresh();
            conformance::$name(&store).await;
        }
    )*};
}

conformance_tests!(
    round_trip,
    lossless_against_jsonl,
    save_is_idempotent,
    append_and_conflict,
    racing_appenders,
    listing_and_lineage,
    delete_keeps_sharers,
    prune_by_age,
    batches,
    fencing,
    missing_sessions,
    windows,
    stored_documents,
);

#[tokio::test]
async fn python_fixtures_copy_byte_for_byte() {
    let (_dir, store) = fresh();
    let sessions = common::interop_dir().join("openrath_home/sessions");
    conformance::interop_round_trip(&store, &sessions).await;
    let (_dir, store) = fresh();
    conformance::interop_round_trip(&store, &common::interop_dir().join("crash")).await;
}
