//! SQLite and PostgreSQL pass the store conformance suite (`rath_persist::conformance`), the
//! same functions the JSONL directory passes, and copy the Python OpenRath fixtures in and
//! out byte for byte.

mod common;

use rath_persist::conformance;

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let (_dir, store) = common::sqlite().await;
                    conformance::$name(&store).await;
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let Some((schema, store)) = common::postgres(stringify!($name)).await else {
                        return;
                    };
                    conformance::$name(&store).await;
                    store.close().await;
                    schema.drop_now().await;
                }
            )*
        }
    };
}

both!(
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
async fn python_fixtures_copy_through_sqlite_byte_for_byte() {
    for sub in ["openrath_home/sessions", "crash"] {
        let (_dir, store) = common::sqlite().await;
        conformance::interop_round_trip(&store, &common::interop_dir().join(sub)).await;
    }
}

#[tokio::test]
async fn python_fixtures_copy_through_postgres_byte_for_byte() {
    for sub in ["openrath_home/sessions", "crash"] {
        let Some((schema, store)) = common::postgres("interop").await else {
            return;
        };
        conformance::interop_round_trip(&store, &common::interop_dir().join(sub)).await;
        store.close().await;
        schema.drop_now().await;
    }
}
