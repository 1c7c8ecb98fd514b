//! The schema, as forward-only migrations, one list per database. Version `n` is the state
//! after the first `n` migrations; a store records its version in `rath_meta` and a build
//! refuses a store whose version is newer than [`SCHEMA_VERSION`].
//!
//! Tables (the same structure on both databases; `docs/formats.md` explains them):
//! - `rath_sessions`: one row per session: its id, the session it shares a prefix with
//!   (`base_key`, `base_len`: a fork, detach or loop round's session points at its parent
//!   instead of copying its chunks), the session whose first `graft_len` chunks follow that
//!   prefix (`graft_key`: a merge points at the other parent), its length, the chain digest
//!   of its chunks, the digest it was saved with (`saved_digest`, never updated: the indexed
//!   one, so an append changes no indexed column and PostgreSQL updates the row in place,
//!   HOT), the content address of its last chunk, the header and trailer lines of its JSONL
//!   file, listing counts.
//! - `rath_segments(session_key, pos, n, docs)`: the chunks one save or append adds after
//!   the session's base and graft, `n` of them from absolute position `pos`, their
//!   documents in one value (joined by line breaks, deflated when that is smaller). A
//!   session's chunks are its base chain's segments below each link's cut, its graft's,
//!   then its own: one recursive query returning a row per segment.
//! - `rath_meta(key, value)`: `schema_version`, and `fence:<key>` the newest fencing token
//!   accepted per key.

/// The newest schema this build knows.
pub const SCHEMA_VERSION: i64 = 3;

/// SQLite migrations: `SQLITE[n]` takes a store from version `n` to `n + 1`.
pub(crate) const SQLITE: &[&[&str]] = &[
    &[
        "CREATE TABLE rath_chunks (
        hash BLOB PRIMARY KEY,
        doc TEXT NOT NULL
    )",
        "CREATE TABLE rath_sessions (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE,
        base_key INTEGER REFERENCES rath_sessions(key),
        base_len INTEGER NOT NULL,
        len INTEGER NOT NULL,
        digest BLOB NOT NULL,
        last_hash BLOB,
        content BLOB NOT NULL,
        created_us INTEGER NOT NULL,
        header TEXT NOT NULL,
        trailer TEXT,
        failure TEXT,
        conversation INTEGER NOT NULL,
        evidence INTEGER NOT NULL
    )",
        "CREATE INDEX rath_sessions_base ON rath_sessions(base_key)",
        "CREATE INDEX rath_sessions_digest ON rath_sessions(digest)",
        "CREATE TABLE rath_refs (
        session_key INTEGER NOT NULL REFERENCES rath_sessions(key),
        pos INTEGER NOT NULL,
        hash BLOB NOT NULL,
        PRIMARY KEY (session_key, pos)
    ) WITHOUT ROWID",
        "CREATE TABLE rath_fences (
        key TEXT PRIMARY KEY,
        token INTEGER NOT NULL
    )",
    ],
    // 2: the detach lookup reads the digest a session was saved with, which never changes.
    &[
        "ALTER TABLE rath_sessions ADD COLUMN saved_digest BLOB",
        "UPDATE rath_sessions SET saved_digest = digest",
        "DROP INDEX rath_sessions_digest",
        "CREATE INDEX rath_sessions_saved ON rath_sessions(saved_digest)",
    ],
    // 3: a save's or append's chunk documents in one segment row instead of a chunk row
    // and a ref row per chunk (a v2 session's own refs become one segment); a merge points
    // at its other parent (`graft_key`); fencing tokens move into `rath_meta`.
    &[
        "CREATE TABLE rath_segments (
        session_key INTEGER NOT NULL REFERENCES rath_sessions(key),
        pos INTEGER NOT NULL,
        n INTEGER NOT NULL,
        docs BLOB NOT NULL,
        PRIMARY KEY (session_key, pos)
    ) WITHOUT ROWID",
        "INSERT INTO rath_segments (session_key, pos, n, docs) \
         SELECT r.session_key, min(r.pos), count(*), \
         CAST(group_concat(d.doc, char(10) ORDER BY r.pos) AS BLOB) \
         FROM rath_refs r JOIN rath_chunks d ON d.hash = r.hash GROUP BY r.session_key",
        "ALTER TABLE rath_sessions ADD COLUMN graft_key INTEGER REFERENCES rath_sessions(key)",
        "ALTER TABLE rath_sessions ADD COLUMN graft_len INTEGER NOT NULL DEFAULT 0",
        "DROP TABLE rath_refs",
        "DROP TABLE rath_chunks",
        "INSERT INTO rath_meta (key, value) SELECT 'fence:' || key, token FROM rath_fences",
        "DROP TABLE rath_fences",
    ],
];

/// PostgreSQL migrations, the same structure as [`SQLITE`].
pub(crate) const POSTGRES: &[&[&str]] = &[
    &[
        "CREATE TABLE rath_chunks (
        hash BYTEA PRIMARY KEY,
        doc TEXT NOT NULL
    )",
        "CREATE TABLE rath_sessions (
        key BIGSERIAL PRIMARY KEY,
        id TEXT UNIQUE,
        base_key BIGINT REFERENCES rath_sessions(key),
        base_len BIGINT NOT NULL,
        len BIGINT NOT NULL,
        digest BYTEA NOT NULL,
        last_hash BYTEA,
        content BYTEA NOT NULL,
        created_us BIGINT NOT NULL,
        header TEXT NOT NULL,
        trailer TEXT,
        failure TEXT,
        conversation BIGINT NOT NULL,
        evidence BIGINT NOT NULL
    )",
        "CREATE INDEX rath_sessions_base ON rath_sessions(base_key)",
        "CREATE INDEX rath_sessions_digest ON rath_sessions(digest)",
        "CREATE TABLE rath_refs (
        session_key BIGINT NOT NULL REFERENCES rath_sessions(key),
        pos BIGINT NOT NULL,
        hash BYTEA NOT NULL,
        PRIMARY KEY (session_key, pos)
    )",
        "CREATE TABLE rath_fences (
        key TEXT PRIMARY KEY,
        token BIGINT NOT NULL
    )",
    ],
    // 2: chunk addresses as `uuid` (16 bytes inline: `rath_refs` needs no TOAST table and
    // its rows and the chunk index shrink); the detach lookup indexes `saved_digest`, which
    // an append never changes, so an append is a HOT update (room kept by fillfactor 90)
    // instead of a new entry in every index of `rath_sessions` per turn.
    &[
        "ALTER TABLE rath_chunks ALTER COLUMN hash TYPE uuid USING encode(hash, 'hex')::uuid",
        "ALTER TABLE rath_refs ALTER COLUMN hash TYPE uuid USING encode(hash, 'hex')::uuid",
        "ALTER TABLE rath_sessions ALTER COLUMN last_hash TYPE uuid \
         USING encode(last_hash, 'hex')::uuid",
        "ALTER TABLE rath_sessions ADD COLUMN saved_digest BYTEA",
        "UPDATE rath_sessions SET saved_digest = digest",
        "ALTER TABLE rath_sessions ALTER COLUMN saved_digest SET NOT NULL",
        "DROP INDEX rath_sessions_digest",
        "CREATE INDEX rath_sessions_saved ON rath_sessions(saved_digest)",
        "ALTER TABLE rath_sessions SET (fillfactor = 90)",
    ],
    // 3: as SQLite's 3 (segments, grafts, fences in `rath_meta`): per turn one segment row
    // and its index entry instead of two chunk rows, two ref rows and four index entries,
    // and two tables (each a heap, a TOAST table and an index) fewer.
    &[
        "CREATE TABLE rath_segments (
        session_key BIGINT NOT NULL REFERENCES rath_sessions(key),
        pos BIGINT NOT NULL,
        n INTEGER NOT NULL,
        docs BYTEA NOT NULL,
        PRIMARY KEY (session_key, pos)
    )",
        "INSERT INTO rath_segments (session_key, pos, n, docs) \
         SELECT r.session_key, min(r.pos), count(*), \
         convert_to(string_agg(d.doc, E'\\n' ORDER BY r.pos), 'UTF8') \
         FROM rath_refs r JOIN rath_chunks d ON d.hash = r.hash GROUP BY r.session_key",
        "ALTER TABLE rath_sessions ADD COLUMN graft_key BIGINT REFERENCES rath_sessions(key), \
         ADD COLUMN graft_len BIGINT NOT NULL DEFAULT 0",
        "DROP TABLE rath_refs",
        "DROP TABLE rath_chunks",
        "INSERT INTO rath_meta (key, value) SELECT 'fence:' || key, token FROM rath_fences",
        "DROP TABLE rath_fences",
    ],
];
