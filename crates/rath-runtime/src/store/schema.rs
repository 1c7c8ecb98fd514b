//! The run store's schema: its migrations on SQLite and PostgreSQL and the `rt_group`
//! function a PostgreSQL group commit calls.

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 7;

/// The migrations, in order: `(version, what it adds, statements)`. The statements are the
/// same text on SQLite and PostgreSQL; what a version adds on PostgreSQL only is in
/// [`PG_MIGRATIONS`].
pub const MIGRATIONS: &[(i64, &str, &[&str])] = &[
    (
        1,
        "runs, leases, replay journal, effect ledger, run events",
        &[
            "CREATE TABLE IF NOT EXISTS rt_runs (
            id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            input_session TEXT NOT NULL,
            options TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts BIGINT NOT NULL,
            failures BIGINT NOT NULL,
            resume_session TEXT,
            segment BIGINT NOT NULL,
            output_session TEXT,
            detail TEXT,
            submitted_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS rt_runs_status ON rt_runs (status, submitted_ms)",
            "CREATE TABLE IF NOT EXISTS rt_leases (
            run_id TEXT PRIMARY KEY,
            worker TEXT,
            token BIGINT NOT NULL,
            expires_ms BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS rt_journal (
            run_id TEXT NOT NULL,
            step TEXT NOT NULL,
            seq BIGINT NOT NULL,
            request_hash TEXT NOT NULL,
            payload TEXT NOT NULL,
            token BIGINT NOT NULL,
            PRIMARY KEY (run_id, step, seq))",
            "CREATE TABLE IF NOT EXISTS rt_effects (
            run_id TEXT NOT NULL,
            step TEXT NOT NULL,
            call_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            idem_key TEXT NOT NULL,
            args TEXT NOT NULL,
            state TEXT NOT NULL,
            result TEXT,
            token BIGINT NOT NULL,
            PRIMARY KEY (run_id, step, call_id))",
            "CREATE TABLE IF NOT EXISTS rt_events (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            by_worker TEXT NOT NULL,
            token BIGINT NOT NULL,
            at_ms BIGINT NOT NULL,
            PRIMARY KEY (run_id, seq))",
        ],
    ),
    (
        2,
        "retry backoff (not_before_ms) and deadlines (deadline_ms) on runs",
        &[
            "ALTER TABLE rt_runs ADD COLUMN not_before_ms BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE rt_runs ADD COLUMN deadline_ms BIGINT",
            "CREATE INDEX IF NOT EXISTS rt_runs_deadline ON rt_runs (deadline_ms)",
        ],
    ),
    (
        3,
        "PostgreSQL: rt_group(), a group commit in one statement (nothing on SQLite)",
        &[],
    ),
    (
        4,
        "PostgreSQL: rt_group() keeps one plan per statement (nothing on SQLite)",
        &[],
    ),
    (
        5,
        "PostgreSQL: rt_group() takes its rows as arrays, not JSON (nothing on SQLite)",
        &[],
    ),
    (
        6,
        "PostgreSQL: run ids, steps and call ids compare byte by byte (nothing on SQLite)",
        &[],
    ),
    (
        7,
        "PostgreSQL: rt_group() plans its claim in the warm-up (nothing on SQLite)",
        &[],
    ),
];

/// What a migration adds on PostgreSQL only, by version (applied after its
/// [`MIGRATIONS`] statements, in the same transaction).
pub const PG_MIGRATIONS: &[(i64, &[&str])] = &[
    (3, &[RT_GROUP]),
    (4, &[RT_GROUP]),
    (5, &[RT_GROUP_V4_DROP, RT_GROUP]),
    (6, BYTE_KEYS),
    (7, &[RT_GROUP]),
];

/// Schema version 6 on PostgreSQL: the key columns (run ids, step paths, call ids) take the
/// `"C"` collation, so the indexes, the fence's run order and the joins compare them as
/// bytes. Under a database's default collation every comparison went through the C
/// library's `strcoll` (PostgreSQL 15 treats only `C` and `POSIX` as byte order, not
/// `C.UTF-8`): inserting journal and ledger rows took 14-19% longer (40,000 rows, 40 a
/// statement), and in interleaved profile drains of the durable bench (20-30 a side, four
/// A/Bs, 2026-12-06) the server's CPU per drain was 4-11% lower with byte order, our steps/s
/// about the same (+6% to -1%). The ids are ASCII, so their order is unchanged. The
/// statements rewrite the tables (an `ACCESS EXCLUSIVE` lock each, for as long as a large
/// store takes to copy); SQLite compares text as bytes already.
pub(super) const BYTE_KEYS: &[&str] = &[
    r#"ALTER TABLE rt_runs ALTER COLUMN id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_leases ALTER COLUMN run_id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_journal ALTER COLUMN run_id TYPE text COLLATE "C", ALTER COLUMN step TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_effects ALTER COLUMN run_id TYPE text COLLATE "C", ALTER COLUMN step TYPE text COLLATE "C", ALTER COLUMN call_id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_events ALTER COLUMN run_id TYPE text COLLATE "C""#,
];

/// `rt_group(now_ms, t_run, t_token, r_run, ...) RETURNS json`: a group commit's writes in
/// one statement, so one round trip (and no `BEGIN`/`COMMIT` of their own) instead of one
/// per statement. It locks, in run order, the lease row of every run the batch writes for
/// that still holds the token its writes carry, and writes nothing unless every run does:
/// then it answers
/// `{"fenced": true}` and the committer does the batch the general way, which refuses the
/// stale writes alone. Otherwise it stores, in this order, the journal rows, the ledger rows
/// (the last write of each), the heartbeats (the last of each run), the finishes and their
/// releases, the events (each numbered after its run's stored ones), the claims (the `i`-th
/// claim takes the `i`-th run found, `FOR UPDATE SKIP LOCKED`; each adds a `claimed`
/// event), and notifies `rt_events` of every run in `notify` and every run claimed; it
/// answers `{"claimed": [{"i", "token", "run"}]}`.
///
/// Its arguments after the time are columns: one array per column of each kind of row, the
/// `i`-th row of a kind being the `i`-th element of each of its arrays: the fence (`t_`: run
/// id, token), then journal rows (`r_`), ledger rows (`e_`), heartbeats (`b_`), finishes
/// (`f_`), events (`v_`), claims (`c_`) and the runs to notify. A kind with no rows is `NULL`
/// (the fence's arrays are never `NULL`; empty, they hold nothing). Arrays, since schema
/// version 5: they arrive in the binary protocol, each element a length and its bytes, where
/// the JSON rows of versions 3 and 4 were parsed twice on the server (once when the `json`
/// argument was read, once when the rows were taken apart, a character at a time), which
/// was 18% of the server's CPU on the durable bench's drains (perf, 2026-12-04).
///
/// Its statements run with generic plans from the first call (`plan_cache_mode`, version 4):
/// each reads its rows from the arguments, so a plan made for one call's values is no
/// better than the one kept, and PostgreSQL otherwise plans every statement again on each of
/// a connection's first five calls, which on the durable bench's new stores was 6% of the
/// server's CPU (interleaved profile drains, 18 each, 2026-12-04: 6264 vs 6082 steps/s
/// median, the server's CPU per drain 0.13 s vs 0.16 s).
///
/// Since version 7 its claim statement runs when nothing was picked too (it then writes
/// nothing), so the warm-up's empty claim plans it: before, the first real claim on each
/// connection did, and every run of a bench drain waited behind it (interleaved profile
/// drains, 32-40 a side, 2026-12-07: the server's CPU per drain 8 ms lower; steps/s +2% and
/// +12% in two A/Bs). The claimed runs it notifies are the ids it picked (before, it parsed
/// its own JSON answer again for them).
pub(super) const RT_GROUP: &str = r#"CREATE OR REPLACE FUNCTION rt_group(now_ms bigint,
    t_run text[], t_token bigint[],
    r_run text[], r_step text[], r_seq bigint[], r_hash text[], r_payload text[], r_token bigint[],
    e_run text[], e_step text[], e_call text[], e_tool text[], e_key text[], e_args text[],
    e_state text[], e_result text[], e_token bigint[],
    b_run text[], b_expires bigint[],
    f_run text[], f_status text[], f_output text[], f_detail text[], f_resume text[],
    f_failed bigint[], f_not_before bigint[],
    v_run text[], v_nth bigint[], v_kind text[], v_detail text[], v_worker text[], v_token bigint[],
    c_worker text[], c_worker_json text[], c_expires bigint[],
    notify text[])
RETURNS json LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    held bigint;
    picked text[];
    claimed json;
BEGIN
    SELECT count(*) INTO held
    FROM (SELECT l.run_id FROM rt_leases l
          JOIN unnest(t_run, t_token) AS t(run, token) ON l.run_id = t.run AND l.token = t.token
          ORDER BY l.run_id FOR UPDATE OF l) AS s;
    IF held <> COALESCE(cardinality(t_run), 0) THEN
        RETURN json_build_object('fenced', true);
    END IF;
    IF r_run IS NOT NULL THEN
        INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token)
        SELECT * FROM unnest(r_run, r_step, r_seq, r_hash, r_payload, r_token);
    END IF;
    IF e_run IS NOT NULL THEN
        INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token)
        SELECT * FROM unnest(e_run, e_step, e_call, e_tool, e_key, e_args, e_state, e_result, e_token)
        ON CONFLICT (run_id, step, call_id) DO UPDATE
            SET state = excluded.state, result = excluded.result, token = excluded.token;
    END IF;
    IF b_run IS NOT NULL THEN
        UPDATE rt_leases AS l SET expires_ms = v.expires
        FROM unnest(b_run, b_expires) AS v(run_id, expires)
        WHERE l.run_id = v.run_id;
    END IF;
    IF f_run IS NOT NULL THEN
        UPDATE rt_runs AS r SET status = v.status, output_session = COALESCE(v.output, r.output_session),
            detail = v.detail, resume_session = COALESCE(v.resume, r.resume_session),
            failures = r.failures + v.failed, updated_ms = now_ms, not_before_ms = v.not_before
        FROM unnest(f_run, f_status, f_output, f_detail, f_resume, f_failed, f_not_before)
            AS v(id, status, output, detail, resume, failed, not_before)
        WHERE r.id = v.id;
        UPDATE rt_leases AS l SET worker = NULL, expires_ms = 0
        FROM unnest(f_run) AS v(id) WHERE l.run_id = v.id;
    END IF;
    IF v_run IS NOT NULL THEN
        INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms)
        SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth,
            v.kind, v.detail, v.by_worker, v.token, now_ms
        FROM unnest(v_run, v_nth, v_kind, v_detail, v_worker, v_token)
            AS v(run_id, nth, kind, detail, by_worker, token);
    END IF;
    IF c_worker IS NOT NULL THEN
        SELECT array_agg(s.id ORDER BY s.submitted_ms, s.id) INTO picked
        FROM (SELECT r.id, r.submitted_ms FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id
              WHERE (r.status = 'queued' AND r.not_before_ms <= now_ms)
                 OR (r.status = 'running' AND l.expires_ms < now_ms)
              ORDER BY r.submitted_ms, r.id LIMIT cardinality(c_worker)
              FOR UPDATE OF r, l SKIP LOCKED) AS s;
        -- Run even when nothing was picked (it then writes nothing): a connection's
        -- first run of a statement plans it, and the warm-up's empty claim does it here.
        WITH take AS (
            SELECT f.id, f.i, c.worker, c.worker_json, c.expires
            FROM unnest(picked) WITH ORDINALITY AS f(id, i)
            JOIN unnest(c_worker, c_worker_json, c_expires) WITH ORDINALITY
                AS c(worker, worker_json, expires, i) ON c.i = f.i),
        moved AS (
            UPDATE rt_leases AS l SET worker = take.worker, token = l.token + 1, expires_ms = take.expires
            FROM take WHERE l.run_id = take.id RETURNING l.run_id, l.token),
        marked AS (
            UPDATE rt_runs AS r SET status = 'running', attempts = r.attempts + 1, updated_ms = now_ms
            FROM take WHERE r.id = take.id
            RETURNING r.id, r.workflow, r.definition_hash, r.input_session, r.options, r.status,
                r.attempts, r.failures, r.resume_session, r.segment, r.output_session, r.detail,
                r.submitted_ms, r.not_before_ms, r.deadline_ms),
        logged AS (
            INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms)
            SELECT take.id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = take.id), 0) + 1,
                'claimed', '{"worker": ' || take.worker_json || ', "token": ' || moved.token || '}',
                take.worker, moved.token, now_ms
            FROM take JOIN moved ON moved.run_id = take.id)
        SELECT json_agg(json_build_object('i', take.i, 'token', moved.token, 'run', row_to_json(marked)))
        INTO claimed
        FROM take JOIN moved ON moved.run_id = take.id JOIN marked ON marked.id = take.id;
    END IF;
    PERFORM pg_notify('rt_events', n.r)
    FROM (SELECT unnest(notify) AS r UNION SELECT unnest(picked)) AS n
    ORDER BY n.r;
    RETURN json_build_object('claimed', COALESCE(claimed, '[]'::json));
END
$fn$"#;

/// Columns of [`RT_GROUP`] after its time argument: what the warm-up passes as empty arrays.
pub(super) const RT_GROUP_COLUMNS: usize = 36;

/// What schema version 5 drops: `rt_group` as versions 3 and 4 made it (JSON rows). A
/// worker of version 4 still running against a version 5 store finds it gone and commits
/// its groups the general way (a transaction of a statement per kind), which is correct.
pub(super) const RT_GROUP_V4_DROP: &str =
    "DROP FUNCTION IF EXISTS rt_group(bigint, json, json, json, json, json, json, json, json)";
