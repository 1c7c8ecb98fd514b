//! A PostgreSQL store speaks TLS when its URL asks for it (`sslmode`), and plain text when
//! its URL forbids it: checked on the server side, in `pg_stat_ssl`, for the store's own
//! connections (found by an `application_name` no other test uses).

mod common;

use common::with_params;
use rath_persist::SessionStore;
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::PgStore;

/// A pool on `url` in plain text, for reading the server's settings and views.
async fn admin(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect(&with_params(url, "sslmode=disable"))
        .await
        .expect("connect to RATH_TEST_POSTGRES_URL")
}

/// `RATH_TEST_POSTGRES_URL` when its server has TLS on (`None` after a skip: no URL, or a
/// server with ssl off, which fails under `RATH_CI=1`; `.ci/install.d/60-postgres.sh` sets
/// the URL and turns TLS on).
async fn tls_server() -> Option<String> {
    let url = common::postgres_url()?;
    let pool = admin(&url).await;
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(&pool)
        .await
        .expect("SHOW ssl");
    pool.close().await;
    if ssl == "on" {
        Some(url)
    } else {
        rath_testkit::skip(
            "the PostgreSQL server at RATH_TEST_POSTGRES_URL has ssl off \
             (see .ci/install.d/60-postgres.sh)",
        );
        None
    }
}

/// For the backends of `app`'s connections: how many there are and how many use TLS.
async fn backends(url: &str, app: &str) -> (i64, i64) {
    let pool = admin(url).await;
    let row: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
    )
    .bind(app)
    .fetch_one(&pool)
    .await
    .expect("read pg_stat_ssl");
    pool.close().await;
    row
}

/// A store at `url` plus `sslmode` (none: the URL as it is): a session saved and loaded
/// back through it, and its connections as the server sees them.
async fn store_with(url: &str, sslmode: Option<&str>) -> (i64, i64) {
    let tag = sslmode.unwrap_or("default");
    let app = format!("rath_tls_{tag}_{}", std::process::id());
    let params = match sslmode {
        Some(mode) => format!("sslmode={mode}&application_name={app}"),
        None => format!("application_name={app}"),
    };
    let at = with_params(url, &params);
    let schema = common::fresh_schema(&format!("tls_{tag}"));
    let store = PgStore::connect_in(&at, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("connect with sslmode {tag}: {e}"));
    let s = Session::user_with("over the wire", Stamper::seeded(7))
        .push(Chunk::assistant(Some("and back".to_owned()), None));
    store.save(&s).await.expect("save");
    let back = store.load(s.id()).await.expect("load").session;
    assert_eq!(back.chunks(), s.chunks(), "sslmode {tag}");
    let seen = backends(url, &app).await;
    store.close().await;
    common::Schema {
        url: url.to_owned(),
        name: schema,
    }
    .drop_now()
    .await;
    seen
}

#[tokio::test]
async fn a_store_uses_tls_when_its_url_requires_it_and_plain_text_when_it_forbids_it() {
    let Some(url) = tls_server().await else {
        return;
    };
    let (open, encrypted) = store_with(&url, Some("require")).await;
    assert!(open > 0, "the store kept no connection open");
    assert_eq!(
        encrypted, open,
        "sslmode=require: every connection uses TLS"
    );
    let (open, encrypted) = store_with(&url, Some("disable")).await;
    assert!(open > 0, "the store kept no connection open");
    assert_eq!(encrypted, 0, "sslmode=disable: no connection uses TLS");
}

#[tokio::test]
async fn a_store_prefers_tls_when_the_url_says_nothing() {
    let Some(url) = tls_server().await else {
        return;
    };
    // `prefer`, the default (libpq's too): the durable bench's URL names no `sslmode`, so
    // our stores and the Python peer both speak TLS to a server that offers it.
    let (open, encrypted) = store_with(&url, None).await;
    assert!(open > 0, "the store kept no connection open");
    assert_eq!(encrypted, open, "no sslmode: every connection uses TLS");
}
