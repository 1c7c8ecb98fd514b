//! Shared helpers: fresh stores for each test.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rath_store_sql::{PgStore, SqliteStore};

/// A fresh SQLite store in its own temporary directory (kept alive by the returned guard).
pub async fn sqlite() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("store.sqlite"))
        .await
        .expect("open sqlite");
    (dir, store)
}

/// `RATH_TEST_POSTGRES_URL`, or `None` after `rath_testkit::skip` (a failure under
/// `RATH_CI=1`: `.ci/install.d/60-postgres.sh` sets it).
pub fn postgres_url() -> Option<String> {
    match std::env::var("RATH_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            rath_testkit::skip(
                "RATH_TEST_POSTGRES_URL is not set to a PostgreSQL database \
                 (see .ci/install.d/60-postgres.sh)",
            );
            None
        }
    }
}

/// `url` with `params` (`k=v&...`) added to its query string.
pub fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// A schema name no other test uses.
pub fn fresh_schema(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!(
        "rath_test_{tag}_{}_{}_{micros}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh PostgreSQL store in its own schema; `None` when PostgreSQL is not configured.
pub async fn postgres(tag: &str) -> Option<(Schema, PgStore)> {
    let url = postgres_url()?;
    let schema = fresh_schema(tag);
    let store = PgStore::connect_in(&url, Some(&schema))
        .await
        .expect("connect to RATH_TEST_POSTGRES_URL");
    Some((Schema { url, name: schema }, store))
}

/// A test schema; [`Schema::drop_now`] removes it.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    /// Drops the schema and everything in it.
    pub async fn drop_now(self) {
        if let Ok(pool) = sqlx::PgPool::connect(&self.url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
                .execute(&pool)
                .await;
            pool.close().await;
        }
    }
}

/// `../shared/interop/openrath-1.3.0`, relative to this crate.
pub fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

/// The private PostgreSQL cluster of the fault tests (`.ci/install.d/62-postgres-faults.sh`):
/// one they may restart and fill up without disturbing the shared cluster.
pub struct FaultCluster {
    /// `RATH_TEST_PG_FAULTS_URL`.
    pub url: String,
    /// `RATH_TEST_PG_FAULTS_CLUSTER`: the `pg_ctlcluster` arguments naming it (`15 rathfaults`).
    pub cluster: Vec<String>,
    /// `RATH_TEST_PG_SMALL_TABLESPACE`: a tablespace on a small filesystem of its own.
    pub small_tablespace: String,
}

impl FaultCluster {
    /// Restarts the cluster (`pg_ctlcluster VERSION NAME restart`).
    pub fn restart(&self) {
        let status = std::process::Command::new("pg_ctlcluster")
            .args(&self.cluster)
            .arg("restart")
            .status()
            .expect("pg_ctlcluster");
        assert!(
            status.success(),
            "pg_ctlcluster {:?} restart: {status}",
            self.cluster
        );
    }
}

/// The private fault cluster, or `None` after `rath_testkit::skip` (a failure under
/// `RATH_CI=1`).
pub fn fault_cluster() -> Option<FaultCluster> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    match (
        var("RATH_TEST_PG_FAULTS_URL"),
        var("RATH_TEST_PG_FAULTS_CLUSTER"),
        var("RATH_TEST_PG_SMALL_TABLESPACE"),
    ) {
        (Some(url), Some(cluster), Some(small_tablespace)) => Some(FaultCluster {
            url,
            cluster: cluster.split_whitespace().map(str::to_owned).collect(),
            small_tablespace,
        }),
        _ => {
            rath_testkit::skip(
                "RATH_TEST_PG_FAULTS_URL, RATH_TEST_PG_FAULTS_CLUSTER and \
                 RATH_TEST_PG_SMALL_TABLESPACE are not set to the private fault cluster \
                 (see .ci/install.d/62-postgres-faults.sh)",
            );
            None
        }
    }
}

/// Held by each test that restarts or fills the private fault cluster, so they take turns.
pub static FAULT_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
