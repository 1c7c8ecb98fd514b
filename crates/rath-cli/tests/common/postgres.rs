//! A PostgreSQL session store for a CLI test, in a schema of its own. A file of its own, so a
//! test binary includes it (`#[path]`) without the rest of `common`.

/// A PostgreSQL store for this test (a schema of its own on `RATH_TEST_POSTGRES_URL`'s
/// database, emptied through the store itself), or a skip.
pub fn postgres_store(schema: &str) -> Option<String> {
    let Some(base) = std::env::var("RATH_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        rath_testkit::skip(
            "RATH_TEST_POSTGRES_URL is not set (start PostgreSQL: .ci/install.d/60-postgres.sh)",
        );
        return None;
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let emptied = rt.block_on(async {
        let store = rath_store_sql::open_store(&url).await?;
        for s in store.list().await? {
            store.delete(&s.id).await?;
        }
        store.gc().await?;
        Ok::<_, rath_persist::PersistError>(())
    });
    match emptied {
        Ok(()) => Some(url),
        Err(e) => {
            rath_testkit::skip(&format!(
                "PostgreSQL at RATH_TEST_POSTGRES_URL unusable: {e}"
            ));
            None
        }
    }
}
