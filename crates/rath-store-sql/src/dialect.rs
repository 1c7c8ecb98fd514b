//! The SQL dialect seam: everything the store logic ([`crate::core::sql_store!`]) says
//! differently to SQLite and to PostgreSQL, as one value per database.
//!
//! The store logic is written once; a statement that differs takes its piece from the
//! module's `DIALECT` (a transaction start, a table or row lock, how a 16-byte chunk address
//! or a byte length is written, how a JSON array of ids is read).

use rath_persist::spans::StoreKind;

/// What one database says differently (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dialect {
    /// The migrations, oldest first.
    pub(crate) migrations: &'static [&'static [&'static str]],
    /// Starts a transaction that writes.
    pub(crate) begin_write: &'static str,
    /// Starts a write transaction that must not interleave with a collection.
    pub(crate) begin_locked: &'static str,
    /// What a collection locks first (empty: the transaction start already excludes
    /// writers).
    pub(crate) gc_lock: &'static str,
    /// What a migration locks first (empty: nothing more).
    pub(crate) migrate_lock: &'static str,
    /// Appended to a read whose rows the transaction then changes.
    pub(crate) for_update: &'static str,
    /// Appended to a read whose rows must not change before the transaction ends.
    pub(crate) for_share: &'static str,
    /// The byte length of a segment's documents.
    pub(crate) octets: &'static str,
    /// Turns parameter `{}` (16 bytes) into a stored chunk address.
    pub(crate) hash_in: &'static str,
    /// Reads a stored chunk address back as 16 bytes.
    pub(crate) hash_out: &'static str,
    /// The type of a byte column.
    pub(crate) blob: &'static str,
    /// Reads the ids of a JSON array given as `$1`, one row each.
    pub(crate) json_ids: &'static str,
    /// Reads the fences of a JSON array given as `$1` (`k`, `t`), one row each.
    pub(crate) fence_rows: &'static str,
    /// True for PostgreSQL.
    pub(crate) pg: bool,
    /// The store kind its spans name.
    pub(crate) kind: StoreKind,
}

/// SQLite: one writer at a time (`BEGIN IMMEDIATE`), so no table or row locks.
pub(crate) const SQLITE: Dialect = Dialect {
    migrations: crate::schema::SQLITE,
    begin_write: "BEGIN IMMEDIATE",
    begin_locked: "BEGIN IMMEDIATE",
    gc_lock: "",
    migrate_lock: "",
    for_update: "",
    for_share: "",
    octets: "length(docs)",
    hash_in: "{}",
    hash_out: "last_hash",
    blob: "BLOB",
    json_ids: "SELECT value FROM json_each($1)",
    fence_rows: "SELECT json_extract(value, '$.k'), json_extract(value, '$.t') FROM json_each($1) WHERE true",
    pg: false,
    kind: StoreKind::Sqlite,
};

/// PostgreSQL: concurrent writers, table and row locks.
pub(crate) const POSTGRES: Dialect = Dialect {
    migrations: crate::schema::POSTGRES,
    begin_write: "BEGIN",
    // A write transaction takes this lock before it reads anything, so a collection
    // (`gc_lock`) cannot remove rows between a writer's reads and its writes; sent with
    // the BEGIN (one round trip).
    begin_locked: "BEGIN; LOCK TABLE rath_segments IN ROW EXCLUSIVE MODE",
    gc_lock: "LOCK TABLE rath_segments IN SHARE ROW EXCLUSIVE MODE",
    migrate_lock: "SELECT pg_advisory_xact_lock(7243901)",
    for_update: " FOR UPDATE",
    for_share: " FOR SHARE",
    octets: "octet_length(docs)::BIGINT",
    hash_in: "encode({}, 'hex')::uuid",
    hash_out: "uuid_send(last_hash)",
    blob: "BYTEA",
    json_ids: "SELECT json_array_elements_text($1::json)",
    fence_rows: "SELECT v.k, v.t FROM json_to_recordset($1::json) AS v(k text, t bigint)",
    pg: true,
    kind: StoreKind::Postgres,
};
