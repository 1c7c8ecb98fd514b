//! The rows a group's set path writes (new sessions, their segments, appends), and how each
//! database takes many of them in one statement: SQLite as a JSON array of objects (bytes as
//! hex), PostgreSQL as arrays, a column each, bound in the binary protocol (bytes as bytes:
//! no hex, and no JSON text for the server to parse a character at a time).

use serde::Serialize;
use sqlx::Row as _;

use crate::codec::hex;

/// A new session's row (see `rath_sessions`), borrowed from the set path's plan. Its fields
/// are the table's columns, named as they are (SQLite takes the rows as JSON, bytes as hex).
#[derive(Serialize)]
pub(crate) struct NewSessionRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) base_key: Option<i64>,
    pub(crate) base_len: i64,
    pub(crate) len: i64,
    #[serde(serialize_with = "as_hex")]
    pub(crate) digest: &'a [u8],
    #[serde(serialize_with = "as_hex_or_null")]
    pub(crate) last_hash: Option<&'a [u8]>,
    #[serde(serialize_with = "as_hex")]
    pub(crate) content: &'a [u8],
    pub(crate) created_us: i64,
    pub(crate) header: &'a str,
    pub(crate) trailer: Option<&'a str>,
    pub(crate) failure: Option<&'a str>,
    pub(crate) conversation: i64,
    pub(crate) evidence: i64,
    pub(crate) graft_key: Option<i64>,
    pub(crate) graft_len: i64,
}

/// A segment row (see `rath_segments`): `docs` as [`crate::codec::encode_segment`] made it.
#[derive(Serialize)]
pub(crate) struct SegmentRow<'a> {
    pub(crate) session_key: i64,
    pub(crate) pos: i64,
    pub(crate) n: i32,
    #[serde(serialize_with = "as_hex")]
    pub(crate) docs: &'a [u8],
}

/// A segment of a row a group writes: a new row's, named by its session (the insert makes
/// its key), or a stored row's, by key.
pub(crate) struct NewSegment<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) key: Option<i64>,
    pub(crate) pos: i64,
    pub(crate) n: i32,
    /// As [`crate::codec::encode_segment`] made it.
    pub(crate) docs: Vec<u8>,
}

/// What an append changes in a stored session's row (`key` names the row).
#[derive(Serialize)]
pub(crate) struct AppendedRow<'a> {
    pub(crate) key: i64,
    pub(crate) len: i64,
    #[serde(serialize_with = "as_hex")]
    pub(crate) digest: &'a [u8],
    #[serde(serialize_with = "as_hex_or_null")]
    pub(crate) last_hash: Option<&'a [u8]>,
    #[serde(serialize_with = "as_hex")]
    pub(crate) content: &'a [u8],
    pub(crate) header: &'a str,
    pub(crate) trailer: Option<&'a str>,
    pub(crate) failure: Option<&'a str>,
    pub(crate) conversation: i64,
    pub(crate) evidence: i64,
}

fn as_hex<S: serde::Serializer>(bytes: impl AsRef<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(bytes.as_ref()))
}

fn as_hex_or_null<S: serde::Serializer>(bytes: &Option<&[u8]>, s: S) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(b) => as_hex(b, s),
        None => s.serialize_none(),
    }
}

/// The columns of [`NewSessionRow`] (and of the insert), in order.
const SESSION_COLUMNS: &str = "id, base_key, base_len, len, digest, last_hash, content, \
    created_us, header, trailer, failure, conversation, evidence, graft_key, graft_len";

/// SQLite's statements: each takes its rows as one JSON array (`$1`).
pub(crate) struct SqliteRows;

impl SqliteRows {
    /// The rows source `v` of the JSON array `$1`: a column per name in `cols` (a
    /// comma-separated list) and `i`, the row's position in the array.
    fn json_rows(cols: &str) -> String {
        let picks: Vec<String> = cols
            .split(',')
            .map(|n| format!("json_extract(value, '$.{0}') AS {0}", n.trim()))
            .collect();
        format!(
            "(SELECT key AS i, {} FROM json_each($1)) AS v",
            picks.join(", ")
        )
    }

    fn json<T: Serialize>(rows: &[T]) -> Result<String, sqlx::Error> {
        serde_json::to_string(rows).map_err(|e| sqlx::Error::Encode(Box::new(e)))
    }

    /// Inserts `rows` in their order; answers each one's `(id, key)`.
    pub(crate) async fn insert_sessions(
        conn: &mut sqlx::SqliteConnection,
        rows: &[NewSessionRow<'_>],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let sql = format!(
            "INSERT INTO rath_sessions (id, base_key, base_len, len, digest, saved_digest, \
             last_hash, content, created_us, header, trailer, failure, conversation, \
             evidence, graft_key, graft_len) SELECT v.id, v.base_key, v.base_len, v.len, \
             unhex(v.digest), unhex(v.digest), unhex(v.last_hash), unhex(v.content), \
             v.created_us, v.header, v.trailer, v.failure, v.conversation, v.evidence, \
             v.graft_key, v.graft_len FROM {} ORDER BY v.i RETURNING id, key",
            Self::json_rows(SESSION_COLUMNS),
        );
        let mut out = Vec::with_capacity(rows.len());
        for row in sqlx::query(&sql)
            .bind(Self::json(rows)?)
            .fetch_all(&mut *conn)
            .await?
        {
            out.push((row.try_get("id")?, row.try_get("key")?));
        }
        Ok(out)
    }

    /// Inserts `rows` in their order, then `segments`; answers each row's `(id, key)`.
    pub(crate) async fn insert_rows(
        conn: &mut sqlx::SqliteConnection,
        rows: &[NewSessionRow<'_>],
        segments: &[NewSegment<'_>],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let keys = if rows.is_empty() {
            Vec::new()
        } else {
            Self::insert_sessions(&mut *conn, rows).await?
        };
        if !segments.is_empty() {
            let made: std::collections::HashMap<&str, i64> =
                keys.iter().map(|(id, key)| (id.as_str(), *key)).collect();
            // Each segment's row: its own key, else the one the insert made for its session.
            let segments = segments
                .iter()
                .map(|g| {
                    let key = g.key.or_else(|| made.get(g.id?).copied());
                    Ok(SegmentRow {
                        session_key: key.ok_or_else(|| {
                            sqlx::Error::Protocol(format!(
                                "a segment of an unknown row ({:?})",
                                g.id
                            ))
                        })?,
                        pos: g.pos,
                        n: g.n,
                        docs: &g.docs,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?;
            Self::insert_segments(&mut *conn, &segments).await?;
        }
        Ok(keys)
    }

    /// Inserts `rows`.
    pub(crate) async fn insert_segments(
        conn: &mut sqlx::SqliteConnection,
        rows: &[SegmentRow<'_>],
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "INSERT INTO rath_segments (session_key, pos, n, docs) \
             SELECT v.session_key, v.pos, v.n, unhex(v.docs) FROM {}",
            Self::json_rows("session_key, pos, n, docs")
        );
        sqlx::query(&sql)
            .bind(Self::json(rows)?)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Applies `rows` to the stored rows they name.
    pub(crate) async fn update_appended(
        conn: &mut sqlx::SqliteConnection,
        rows: &[AppendedRow<'_>],
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "UPDATE rath_sessions AS r SET len = v.len, digest = unhex(v.digest), \
             last_hash = unhex(v.last_hash), content = unhex(v.content), header = v.header, \
             trailer = v.trailer, failure = v.failure, conversation = v.conversation, \
             evidence = v.evidence FROM {} WHERE r.key = v.key",
            Self::json_rows(
                "key, len, digest, last_hash, content, header, trailer, failure, \
                 conversation, evidence"
            )
        );
        sqlx::query(&sql)
            .bind(Self::json(rows)?)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
}

/// One column of `rows`: what `f` takes from each (an array argument of a statement).
fn column<'r, R, T>(rows: &'r [R], f: impl Fn(&'r R) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

/// PostgreSQL's statements: each takes its rows as arrays, one per column (`unnest`).
pub(crate) struct PgRows;

impl PgRows {
    /// Inserts `rows` in their order and `segments`, in one statement (the segments' keys
    /// joined from the rows it inserts, or their own); answers each row's `(id, key)`. The
    /// segments' foreign key is checked when the statement ends, its rows inserted.
    pub(crate) async fn insert_rows(
        conn: &mut sqlx::PgConnection,
        rows: &[NewSessionRow<'_>],
        segments: &[NewSegment<'_>],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let sql = format!(
            "WITH made AS (INSERT INTO rath_sessions (id, base_key, base_len, len, digest, \
             saved_digest, last_hash, content, created_us, header, trailer, failure, \
             conversation, evidence, graft_key, graft_len) SELECT v.id, v.base_key, v.base_len, \
             v.len, v.digest, v.digest, encode(v.last_hash, 'hex')::uuid, v.content, \
             v.created_us, v.header, v.trailer, v.failure, v.conversation, v.evidence, \
             v.graft_key, v.graft_len \
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[], \
             $6::bytea[], $7::bytea[], $8::bigint[], $9::text[], $10::text[], $11::text[], \
             $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[]) WITH ORDINALITY \
             AS v({SESSION_COLUMNS}, i) ORDER BY v.i RETURNING id, key), \
             segs AS (INSERT INTO rath_segments (session_key, pos, n, docs) \
             SELECT COALESCE(g.key, made.key), g.pos, g.n, g.docs \
             FROM unnest($16::text[], $17::bigint[], $18::bigint[], $19::int[], $20::bytea[]) \
             AS g(id, key, pos, n, docs) LEFT JOIN made ON made.id = g.id) \
             SELECT id, key FROM made"
        );
        let mut out = Vec::with_capacity(rows.len());
        for row in sqlx::query(&sql)
            .bind(column(rows, |r| r.id))
            .bind(column(rows, |r| r.base_key))
            .bind(column(rows, |r| r.base_len))
            .bind(column(rows, |r| r.len))
            .bind(column(rows, |r| r.digest))
            .bind(column(rows, |r| r.last_hash))
            .bind(column(rows, |r| r.content))
            .bind(column(rows, |r| r.created_us))
            .bind(column(rows, |r| r.header))
            .bind(column(rows, |r| r.trailer))
            .bind(column(rows, |r| r.failure))
            .bind(column(rows, |r| r.conversation))
            .bind(column(rows, |r| r.evidence))
            .bind(column(rows, |r| r.graft_key))
            .bind(column(rows, |r| r.graft_len))
            .bind(column(segments, |g| g.id))
            .bind(column(segments, |g| g.key))
            .bind(column(segments, |g| g.pos))
            .bind(column(segments, |g| g.n))
            .bind(column(segments, |g| g.docs.as_slice()))
            .fetch_all(&mut *conn)
            .await?
        {
            out.push((row.try_get("id")?, row.try_get("key")?));
        }
        Ok(out)
    }

    /// Applies `rows` to the stored rows they name.
    pub(crate) async fn update_appended(
        conn: &mut sqlx::PgConnection,
        rows: &[AppendedRow<'_>],
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE rath_sessions AS r SET len = v.len, digest = v.digest, \
             last_hash = encode(v.last_hash, 'hex')::uuid, content = v.content, \
             header = v.header, trailer = v.trailer, failure = v.failure, \
             conversation = v.conversation, evidence = v.evidence \
             FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[], $5::bytea[], \
             $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[]) \
             AS v(key, len, digest, last_hash, content, header, trailer, failure, conversation, \
             evidence) WHERE r.key = v.key",
        )
        .bind(column(rows, |a| a.key))
        .bind(column(rows, |a| a.len))
        .bind(column(rows, |a| a.digest))
        .bind(column(rows, |a| a.last_hash))
        .bind(column(rows, |a| a.content))
        .bind(column(rows, |a| a.header))
        .bind(column(rows, |a| a.trailer))
        .bind(column(rows, |a| a.failure))
        .bind(column(rows, |a| a.conversation))
        .bind(column(rows, |a| a.evidence))
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
