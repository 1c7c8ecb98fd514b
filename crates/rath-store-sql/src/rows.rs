//! The rows a group's set path writes (new sessions, their segments, appends), and how each
//! database takes many of them in one statement: SQLite as a JSON array of objects (bytes as
//! hex), PostgreSQL as arrays, a column each, bound in the binary protocol (bytes as bytes:
//! no hex, and no JSON text for the server to parse a character at a time).

use sqlx::Row as _;

use crate::codec::hex;

/// A new session's row (see `rath_sessions`), borrowed from the set path's plan.
pub(crate) struct NewSessionRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) base_key: Option<i64>,
    pub(crate) base_len: i64,
    pub(crate) len: i64,
    pub(crate) digest: &'a [u8],
    pub(crate) last_hash: Option<&'a [u8]>,
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
pub(crate) struct SegmentRow {
    pub(crate) session_key: i64,
    pub(crate) pos: i64,
    pub(crate) n: i32,
    pub(crate) docs: Vec<u8>,
}

/// What an append changes in a stored session's row.
pub(crate) struct AppendedRow<'a> {
    pub(crate) key: i64,
    pub(crate) len: i64,
    pub(crate) digest: &'a [u8],
    pub(crate) last_hash: Option<&'a [u8]>,
    pub(crate) content: &'a [u8],
    pub(crate) header: &'a str,
    pub(crate) trailer: Option<&'a str>,
    pub(crate) failure: Option<&'a str>,
    pub(crate) conversation: i64,
    pub(crate) evidence: i64,
}

/// SQLite's statements: each takes its rows as one JSON array (`$1`).
pub(crate) struct SqliteRows;

impl SqliteRows {
    /// The rows source `v` of the JSON array `$1`, with `cols` as its columns.
    fn json_rows(cols: &[&str]) -> String {
        let picks: Vec<String> = cols
            .iter()
            .map(|n| format!("json_extract(value, '$.{n}') AS {n}"))
            .collect();
        format!("(SELECT {} FROM json_each($1)) AS v", picks.join(", "))
    }

    /// Inserts `rows` in their order; answers each one's `(id, key)`.
    pub(crate) async fn insert_sessions(
        conn: &mut sqlx::SqliteConnection,
        rows: &[NewSessionRow<'_>],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let json: Vec<serde_json::Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "i": i, "id": r.id, "base_key": r.base_key, "base_len": r.base_len,
                    "len": r.len, "digest": hex(r.digest), "last_hash": r.last_hash.map(hex),
                    "content": hex(r.content), "created_us": r.created_us, "header": r.header,
                    "trailer": r.trailer, "failure": r.failure,
                    "conversation": r.conversation, "evidence": r.evidence,
                    "graft_key": r.graft_key, "graft_len": r.graft_len,
                })
            })
            .collect();
        let sql = format!(
            "INSERT INTO rath_sessions (id, base_key, base_len, len, digest, saved_digest, \
             last_hash, content, created_us, header, trailer, failure, conversation, \
             evidence, graft_key, graft_len) SELECT v.id, v.base_key, v.base_len, v.len, \
             unhex(v.digest), unhex(v.digest), unhex(v.last_hash), unhex(v.content), \
             v.created_us, v.header, v.trailer, v.failure, v.conversation, v.evidence, \
             v.graft_key, v.graft_len FROM {} ORDER BY v.i RETURNING id, key",
            Self::json_rows(&[
                "i",
                "id",
                "base_key",
                "base_len",
                "len",
                "digest",
                "last_hash",
                "content",
                "created_us",
                "header",
                "trailer",
                "failure",
                "conversation",
                "evidence",
                "graft_key",
                "graft_len",
            ]),
        );
        let mut out = Vec::with_capacity(rows.len());
        for row in sqlx::query(&sql)
            .bind(serde_json::Value::Array(json).to_string())
            .fetch_all(&mut *conn)
            .await?
        {
            out.push((row.try_get("id")?, row.try_get("key")?));
        }
        Ok(out)
    }

    /// Inserts `rows`.
    pub(crate) async fn insert_segments(
        conn: &mut sqlx::SqliteConnection,
        rows: &[SegmentRow],
    ) -> Result<(), sqlx::Error> {
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|s| {
                serde_json::json!({
                    "session_key": s.session_key, "pos": s.pos, "n": s.n, "docs": hex(&s.docs),
                })
            })
            .collect();
        let sql = format!(
            "INSERT INTO rath_segments (session_key, pos, n, docs) \
             SELECT v.session_key, v.pos, v.n, unhex(v.docs) FROM {}",
            Self::json_rows(&["session_key", "pos", "n", "docs"])
        );
        sqlx::query(&sql)
            .bind(serde_json::Value::Array(json).to_string())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Applies `rows` to the stored rows they name.
    pub(crate) async fn update_appended(
        conn: &mut sqlx::SqliteConnection,
        rows: &[AppendedRow<'_>],
    ) -> Result<(), sqlx::Error> {
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|a| {
                serde_json::json!({
                    "key": a.key, "len": a.len, "digest": hex(a.digest),
                    "last_hash": a.last_hash.map(hex), "content": hex(a.content),
                    "header": a.header, "trailer": a.trailer, "failure": a.failure,
                    "conversation": a.conversation, "evidence": a.evidence,
                })
            })
            .collect();
        let sql = format!(
            "UPDATE rath_sessions AS r SET len = v.len, digest = unhex(v.digest), \
             last_hash = unhex(v.last_hash), content = unhex(v.content), header = v.header, \
             trailer = v.trailer, failure = v.failure, conversation = v.conversation, \
             evidence = v.evidence FROM {} WHERE r.key = v.key",
            Self::json_rows(&[
                "key",
                "len",
                "digest",
                "last_hash",
                "content",
                "header",
                "trailer",
                "failure",
                "conversation",
                "evidence",
            ])
        );
        sqlx::query(&sql)
            .bind(serde_json::Value::Array(json).to_string())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
}

/// PostgreSQL's statements: each takes its rows as arrays, one per column (`unnest`).
pub(crate) struct PgRows;

impl PgRows {
    /// Inserts `rows` in their order; answers each one's `(id, key)`.
    pub(crate) async fn insert_sessions(
        conn: &mut sqlx::PgConnection,
        rows: &[NewSessionRow<'_>],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let col = |f: fn(&NewSessionRow<'_>) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
        let opt = |f: fn(&NewSessionRow<'_>) -> Option<i64>| {
            rows.iter().map(f).collect::<Vec<Option<i64>>>()
        };
        let mut out = Vec::with_capacity(rows.len());
        for row in sqlx::query(
            "INSERT INTO rath_sessions (id, base_key, base_len, len, digest, saved_digest, \
             last_hash, content, created_us, header, trailer, failure, conversation, evidence, \
             graft_key, graft_len) SELECT v.id, v.base_key, v.base_len, v.len, v.digest, \
             v.digest, encode(v.last_hash, 'hex')::uuid, v.content, v.created_us, v.header, \
             v.trailer, v.failure, v.conversation, v.evidence, v.graft_key, v.graft_len \
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[], \
             $6::bytea[], $7::bytea[], $8::bigint[], $9::text[], $10::text[], $11::text[], \
             $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[]) WITH ORDINALITY \
             AS v(id, base_key, base_len, len, digest, last_hash, content, created_us, header, \
             trailer, failure, conversation, evidence, graft_key, graft_len, i) \
             ORDER BY v.i RETURNING id, key",
        )
        .bind(rows.iter().map(|r| r.id).collect::<Vec<&str>>())
        .bind(opt(|r| r.base_key))
        .bind(col(|r| r.base_len))
        .bind(col(|r| r.len))
        .bind(rows.iter().map(|r| r.digest).collect::<Vec<&[u8]>>())
        .bind(
            rows.iter()
                .map(|r| r.last_hash)
                .collect::<Vec<Option<&[u8]>>>(),
        )
        .bind(rows.iter().map(|r| r.content).collect::<Vec<&[u8]>>())
        .bind(col(|r| r.created_us))
        .bind(rows.iter().map(|r| r.header).collect::<Vec<&str>>())
        .bind(
            rows.iter()
                .map(|r| r.trailer)
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            rows.iter()
                .map(|r| r.failure)
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(col(|r| r.conversation))
        .bind(col(|r| r.evidence))
        .bind(opt(|r| r.graft_key))
        .bind(col(|r| r.graft_len))
        .fetch_all(&mut *conn)
        .await?
        {
            out.push((row.try_get("id")?, row.try_get("key")?));
        }
        Ok(out)
    }

    /// Inserts `rows`.
    pub(crate) async fn insert_segments(
        conn: &mut sqlx::PgConnection,
        rows: &[SegmentRow],
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO rath_segments (session_key, pos, n, docs) \
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::bytea[])",
        )
        .bind(rows.iter().map(|s| s.session_key).collect::<Vec<i64>>())
        .bind(rows.iter().map(|s| s.pos).collect::<Vec<i64>>())
        .bind(rows.iter().map(|s| s.n).collect::<Vec<i32>>())
        .bind(
            rows.iter()
                .map(|s| s.docs.as_slice())
                .collect::<Vec<&[u8]>>(),
        )
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// Applies `rows` to the stored rows they name.
    pub(crate) async fn update_appended(
        conn: &mut sqlx::PgConnection,
        rows: &[AppendedRow<'_>],
    ) -> Result<(), sqlx::Error> {
        let col = |f: fn(&AppendedRow<'_>) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
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
        .bind(col(|a| a.key))
        .bind(col(|a| a.len))
        .bind(rows.iter().map(|a| a.digest).collect::<Vec<&[u8]>>())
        .bind(
            rows.iter()
                .map(|a| a.last_hash)
                .collect::<Vec<Option<&[u8]>>>(),
        )
        .bind(rows.iter().map(|a| a.content).collect::<Vec<&[u8]>>())
        .bind(rows.iter().map(|a| a.header).collect::<Vec<&str>>())
        .bind(
            rows.iter()
                .map(|a| a.trailer)
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            rows.iter()
                .map(|a| a.failure)
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(col(|a| a.conversation))
        .bind(col(|a| a.evidence))
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
