//! The schema, as forward-only migrations, one list per database. Version `n` is the state
//! after the first `n` migrations; a store records its version in `rath_meta` and a build
//! refuses a store whose version is newer than [`SCHEMA_VERSION`].
//!
//! Tables (the same structure on both databases; `docs/formats.md` explains them):
//! - `rath_chunks(hash, doc)`: every distinct chunk once, addressed by a 16-byte SHA-256 of
//!   its document (`rath_persist::doc::encode_chunk`); on PostgreSQL the address is a `uuid`
//!   (16 bytes inline, no length header: narrower rows and index entries than `bytea`).
//! - `rath_sessions`: one row per session: its id, the session it shares a prefix with
//!   (`base_key`, `base_len`: a fork, detach or merge points at its parent instead of copying
//!   its chunks), its length, the chain digest of its chunks, the digest it was saved with
//!   (`saved_digest`, never updated: the indexed one, so an append changes no indexed
//!   column and PostgreSQL updates the row in place, HOT, leaving no index entries behind),
//!   the header and trailer lines of its JSONL file, listing counts.
//! - `rath_refs(session_key, pos, hash)`: the chunks a session adds after its base, by
//!   absolute position. A session's chunks are its base chain's refs below each link's cut,
//!   then its own: one recursive query.
//! - `rath_fences(key, token)`: the newest fencing token accepted per key.
//! - `rath_meta(key, value)`: `schema_version`.

/// The newest schema this build knows.
pub const SCHEMA_VERSION: i64 = 2;

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
];
