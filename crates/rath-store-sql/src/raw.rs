//! Chunk documents as stored, for a verifier and for erasure: read undecoded
//! (`SessionStore::chunk_docs`, and what the window reader `read_chunks` decodes) and
//! replaced in place (`SessionStore::replace_chunk_doc`). Instantiated by `sql_store!`
//! (`crate::core`) inside each database's module, with its pool and dialect.

/// Gives the documents of one stored segment holding chunks `at..at + take` that fall in
/// `next..end` to `each`, in order (an `Err` for each when the segment does not inflate);
/// returns how many were given.
pub(crate) fn segment_docs(
    stored: &[u8],
    at: usize,
    take: usize,
    (next, end): (usize, usize),
    scratch: &mut Vec<u8>,
    each: &mut impl FnMut(Result<&[u8], String>) -> Result<(), rath_persist::PersistError>,
) -> Result<usize, rath_persist::PersistError> {
    let want = (at + take).min(end).saturating_sub(next);
    scratch.clear();
    match crate::codec::decode_segment(stored, scratch) {
        Ok(()) => {
            let mut given = 0;
            let lines = scratch.split(|b| *b == b'\n').take(take);
            for line in lines.skip(next - at).take(end - next) {
                each(Ok(line))?;
                given += 1;
            }
            Ok(given)
        }
        Err(m) => {
            for _ in 0..want {
                each(Err(m.clone()))?;
            }
            Ok(want)
        }
    }
}

/// A segment's documents with every line equal to `old` replaced by `new`, and how many were.
pub(crate) fn replace_in_segment(plain: &[u8], old: &[u8], new: &[u8]) -> (Vec<u8>, u64) {
    let mut here = 0u64;
    let mut out = Vec::with_capacity(plain.len());
    for (i, line) in plain.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        if line == old {
            out.extend_from_slice(new);
            here += 1;
        } else {
            out.extend_from_slice(line);
        }
    }
    (out, here)
}

/// The raw-document functions of one store module; invoked by `sql_store!` only.
macro_rules! sql_raw {
    () => {
        /// The stored documents of chunks `range` of session `id` (cut to its length), each
        /// given to `each` in order, undecoded: a segment that does not inflate is an `Err`
        /// for each of its chunks in the window, and the rest are still read. Only the
        /// segments of its chain the window covers are read, in one transaction.
        async fn read_docs_in(
            pool: &Pool,
            name: &str,
            id: &SessionId,
            range: std::ops::Range<usize>,
            mut each: impl FnMut(Result<&[u8], String>) -> Result<(), PersistError>,
        ) -> Result<(), PersistError> {
            let get = |e: sqlx::Error| backend(name, "load", e);
            let mut tx = pool.begin().await.map_err(get)?;
            let row = sqlx::query("SELECT key, len FROM rath_sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(get)?;
            let Some(row) = row else {
                return Err(PersistError::NotFound {
                    id: id.to_string(),
                    dir: PathBuf::from(name),
                });
            };
            let key: i64 = row.try_get("key").map_err(get)?;
            let len = row.try_get::<i64, _>("len").map_err(get)?.max(0) as usize;
            let end = range.end.min(len);
            let start = range.start.min(end);
            if start == end {
                return Ok(());
            }
            let sql = format!(
                "WITH RECURSIVE {} SELECT * FROM ({CHAIN_SEGMENTS}) s \
                 WHERE s.at < $2 AND s.at + CASE WHEN s.n < s.room THEN s.n ELSE s.room END > $3 \
                 ORDER BY at",
                chain_cte("key = $1")
            );
            let rows = sqlx::query(&sql)
                .bind(key)
                .bind(end as i64)
                .bind(start as i64)
                .fetch_all(&mut *tx)
                .await
                .map_err(get)?;
            tx.commit().await.map_err(get)?;
            let mut given = 0usize;
            let mut scratch = Vec::new();
            for row in &rows {
                let at: i64 = row.try_get("at").map_err(get)?;
                let n: i32 = row.try_get("n").map_err(get)?;
                let room: i64 = row.try_get("room").map_err(get)?;
                let stored: &[u8] = row.try_get("docs").map_err(get)?;
                let next = start + given;
                let (Ok(at), Ok(take)) = (usize::try_from(at), usize::try_from(i64::from(n).min(room))) else {
                    return Err(corrupt(name, id, format!("a segment of {n} chunks at {at}")));
                };
                if at > next || take == 0 {
                    return Err(corrupt(
                        name,
                        id,
                        format!("a segment of {n} chunks at {at} where chunk {next} belongs"),
                    ));
                }
                given += crate::raw::segment_docs(stored, at, take, (next, end), &mut scratch, &mut each)?;
            }
            if given != end - start {
                return Err(corrupt(name, id, format!("{given} of chunks {start}..{end} are stored")));
            }
            Ok(())
        }

        /// The stored documents of every chunk of `id` (see `SessionStore::chunk_docs`).
        pub(crate) async fn chunk_docs(
            pool: &Pool,
            name: &str,
            id: &SessionId,
        ) -> Result<Vec<rath_persist::StoredDoc>, PersistError> {
            let mut out = Vec::new();
            read_docs_in(pool, name, id, 0..usize::MAX, |doc| {
                out.push(doc.map(<[u8]>::to_vec));
                Ok(())
            })
            .await?;
            Ok(out)
        }

        /// Replaces every stored chunk document equal to `old` by `new` (see
        /// `SessionStore::replace_chunk_doc`): each segment holding it is rewritten in one
        /// write transaction, then the database is compacted so that no free page, old
        /// row version or log keeps the old bytes (SQLite: `VACUUM` and a truncating WAL
        /// checkpoint; PostgreSQL: `VACUUM FULL` of the segments, which rewrites the table
        /// and its TOAST table).
        pub(crate) async fn replace_chunk_doc(
            pool: &Pool,
            name: &str,
            old: &[u8],
            new: &[u8],
        ) -> Result<u64, PersistError> {
            let get = |e: sqlx::Error| backend(name, "erase", e);
            let mut tx = begin(pool, name, DIALECT.begin_write).await?;
            exec(&mut tx, name, "lock", DIALECT.gc_lock).await?;
            let rows = sqlx::query("SELECT session_key, pos, docs FROM rath_segments")
                .fetch_all(&mut *tx)
                .await
                .map_err(get)?;
            let mut replaced = 0u64;
            let mut plain = Vec::new();
            for row in &rows {
                let stored: &[u8] = row.try_get("docs").map_err(get)?;
                plain.clear();
                if decode_segment(stored, &mut plain).is_err() {
                    // A damaged segment is verification's to report; erasure leaves it.
                    continue;
                }
                let (out, here) = crate::raw::replace_in_segment(&plain, old, new);
                if here == 0 {
                    continue;
                }
                sqlx::query("UPDATE rath_segments SET docs = $1 WHERE session_key = $2 AND pos = $3")
                    .bind(crate::codec::pack_segment(out))
                    .bind(row.try_get::<i64, _>("session_key").map_err(get)?)
                    .bind(row.try_get::<i64, _>("pos").map_err(get)?)
                    .execute(&mut *tx)
                    .await
                    .map_err(get)?;
                replaced += here;
            }
            tx.commit().await.map_err(get)?;
            if replaced > 0 {
                let compact: &[&str] = if DIALECT.pg {
                    &["VACUUM (FULL) rath_segments"]
                } else {
                    &["VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"]
                };
                for sql in compact {
                    sqlx::query(sql).execute(pool).await.map_err(get)?;
                }
            }
            Ok(replaced)
        }
    };
}

pub(crate) use sql_raw;
