//! Group commit of the run store: the writes a worker hands over ([`Op`], [`Job`]), the
//! barrier a claim waits on, and the [`Committer`] each lane of `rath_group_commit` runs.

use std::sync::Arc;
use std::time::Duration;

use rath_group_commit::Group;
use tokio::sync::oneshot;

use super::*;

/// One write of a worker, for the group committer.
#[derive(Debug)]
pub(super) enum Op {
    Record(JournalEntry),
    Effect(Effect),
    Event { kind: String, detail: String },
    Heartbeat { expires_ms: i64 },
    Check,
    Finish(Finish),
    Claim { worker: String, lease_ms: i64 },
}

/// [`Transition`], owned (it travels to the committer).
#[derive(Debug)]
pub(super) struct Finish {
    pub(super) status: RunStatus,
    pub(super) output: Option<String>,
    pub(super) detail: Option<String>,
    pub(super) resume: Option<String>,
    pub(super) failed: bool,
    pub(super) not_before_ms: i64,
}

impl Finish {
    /// The run's row as the release statement takes it (an object of its JSON array).
    pub(super) fn row(&self, run: &str) -> serde_json::Value {
        serde_json::json!({
            "id": run, "status": self.status.as_str(),
            "output": self.output, "detail": self.detail, "resume": self.resume,
            "failed": i64::from(self.failed), "not_before": self.not_before_ms,
        })
    }

    /// The detail of the `status` event the release adds.
    pub(super) fn event_detail(&self) -> String {
        format!("{{\"status\": \"{}\"}}", self.status)
    }
}

/// What a write answers.
#[derive(Debug)]
pub(super) enum Answer {
    Done,
    Claimed(Option<Box<(Run, i64)>>),
}

/// Who is told when a write is committed: a caller waiting for it, or a run's [`Barrier`]
/// (a write handed over without waiting) with the write's position.
#[derive(Debug)]
pub(super) enum Waiter {
    One(oneshot::Sender<Result<Answer, RuntimeError>>),
    Barrier(Arc<Barrier>, u64),
}

#[derive(Debug)]
pub(super) struct Job {
    /// The lease a fenced write carries (`None`: a claim).
    pub(super) lease: Option<Lease>,
    pub(super) op: Op,
    pub(super) done: Waiter,
}

impl Job {
    /// Tells this process's subscribers what the write added once it committed (`r`):
    /// an event (a status change, for a finish) of the run it was for, or a claim's.
    pub(super) fn tell(&self, r: &Result<Answer, RuntimeError>, hub: &crate::events::Hub) {
        let Ok(a) = r else {
            return;
        };
        match (&self.op, &self.lease) {
            (Op::Event { .. }, Some(l)) => hub.notify(l.run.as_str()),
            (Op::Finish(_), Some(l)) => hub.notify_moved(l.run.as_str()),
            _ => {}
        }
        if let Answer::Claimed(Some(c)) = a {
            hub.notify(c.0.id.as_str());
        }
    }

    pub(super) fn answer(self, r: Result<Answer, RuntimeError>, hub: &crate::events::Hub) {
        self.tell(&r, hub);
        match self.done {
            Waiter::One(tx) => {
                let _ = tx.send(r);
            }
            Waiter::Barrier(b, seq) => b.landed(seq, r.map(|_| ())),
        }
    }
}

/// A failed write as a run's barrier keeps it (every waiter gets a copy).
#[derive(Clone, Debug)]
pub(super) enum Failed {
    Fenced {
        run: String,
        token: i64,
        current: i64,
    },
    Other(String),
}

impl Failed {
    pub(super) fn of(e: &RuntimeError) -> Self {
        match e {
            RuntimeError::Fenced {
                run,
                token,
                current,
            } => Failed::Fenced {
                run: run.clone(),
                token: *token,
                current: *current,
            },
            other => Failed::Other(other.to_string()),
        }
    }

    pub(super) fn error(&self) -> RuntimeError {
        match self {
            Failed::Fenced {
                run,
                token,
                current,
            } => RuntimeError::Fenced {
                run: run.clone(),
                token: *token,
                current: *current,
            },
            Failed::Other(message) => RuntimeError::Db {
                store: "run store".into(),
                message: message.clone(),
            },
        }
    }
}

/// A journal row as the group statements take it (an object of their JSON array of rows),
/// borrowed from the write: the reply's text is escaped once, never copied.
#[derive(serde::Serialize)]
pub(super) struct RecordRow<'a> {
    pub(super) run_id: &'a str,
    pub(super) step: &'a str,
    pub(super) seq: i64,
    pub(super) request_hash: &'a str,
    pub(super) payload: &'a str,
    pub(super) token: i64,
}

impl<'a> RecordRow<'a> {
    pub(super) fn of(run: &'a str, token: i64, e: &'a JournalEntry) -> Self {
        RecordRow {
            run_id: run,
            step: &e.step,
            seq: e.seq,
            request_hash: &e.request_hash,
            payload: &e.payload,
            token,
        }
    }
}

/// A ledger row as the group statements take it (see [`RecordRow`]).
#[derive(serde::Serialize)]
pub(super) struct EffectRow<'a> {
    pub(super) run_id: &'a str,
    pub(super) step: &'a str,
    pub(super) call_id: &'a str,
    pub(super) tool: &'a str,
    pub(super) idem_key: &'a str,
    pub(super) args: &'a str,
    pub(super) state: &'a str,
    pub(super) result: Option<&'a str>,
    pub(super) token: i64,
}

impl<'a> EffectRow<'a> {
    pub(super) fn of(run: &'a str, token: i64, e: &'a Effect) -> Self {
        EffectRow {
            run_id: run,
            step: &e.step,
            call_id: &e.call_id,
            tool: &e.tool,
            idem_key: &e.idempotency_key,
            args: &e.args,
            state: e.state.as_str(),
            result: e.result.as_deref(),
            token,
        }
    }
}

/// The rows of a batch's ledger writes, the last write of each row only (one statement may
/// not touch a row twice), in first-seen order.
#[derive(Default)]
pub(super) struct EffectRows<'a> {
    pub(super) rows: Vec<EffectRow<'a>>,
    pub(super) at: std::collections::HashMap<(&'a str, &'a str, &'a str), usize>,
}

impl<'a> EffectRows<'a> {
    pub(super) fn put(&mut self, row: EffectRow<'a>) {
        let key = (row.run_id, row.step, row.call_id);
        match self.at.get(&key) {
            Some(&i) => self.rows[i] = row,
            None => {
                self.at.insert(key, self.rows.len());
                self.rows.push(row);
            }
        }
    }
}

/// The event rows of one group transaction, each numbered after its run's stored events
/// and the batch's earlier ones for the run (inserted in one statement).
#[derive(Default)]
pub(super) struct Events {
    pub(super) rows: Vec<serde_json::Value>,
    pub(super) nth: std::collections::HashMap<String, i64>,
}

impl Events {
    pub(super) fn push(&mut self, run: &str, kind: &str, detail: &str, by: &str, token: i64) {
        let n = self.nth.entry(run.to_owned()).or_insert(0);
        *n += 1;
        self.rows.push(serde_json::json!({
            "run_id": run, "nth": *n, "kind": kind, "detail": detail, "by_worker": by, "token": token,
        }));
    }

    /// The rows pushed so far as one JSON array (the statement's `$1`), leaving none.
    pub(super) fn take_json(&mut self) -> String {
        self.nth.clear();
        serde_json::Value::Array(std::mem::take(&mut self.rows)).to_string()
    }

    /// The insert of a batch: `$1` its rows (see [`Events::take_json`]), `$2` the time.
    pub(super) fn sql(pg: bool) -> &'static str {
        if pg {
            "INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms) \
             SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth, \
             v.kind, v.detail, v.by_worker, v.token, $2 FROM json_to_recordset($1::json) \
             AS v(run_id text, nth bigint, kind text, detail text, by_worker text, token bigint)"
        } else {
            "INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms) \
             SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth, \
             v.kind, v.detail, v.by_worker, v.token, $2 FROM (SELECT json_extract(value, '$.run_id') AS run_id, \
             json_extract(value, '$.nth') AS nth, json_extract(value, '$.kind') AS kind, \
             json_extract(value, '$.detail') AS detail, json_extract(value, '$.by_worker') AS by_worker, \
             json_extract(value, '$.token') AS token FROM json_each($1)) AS v"
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Landed {
    /// Every write up to this position is committed.
    pub(super) done: u64,
    /// The first write of the run that failed (fenced or refused).
    pub(super) failed: Option<Failed>,
}

/// The writes one claim of a run handed to the committer without waiting (its journal
/// records and tool answers), and how far they are committed. Anything that must come
/// after them (the run's next tool dispatch, a session write, the release)
/// waits on [`Barrier::wait`] first: that is how a recorded reply is durable before the
/// tool it asks for runs, while the reply's commit shares its transaction with the tool
/// call's `dispatched` row.
#[derive(Debug)]
pub(crate) struct Barrier {
    /// Positions handed out (under the lock, so they reach the committer in order).
    pub(super) sent: std::sync::Mutex<u64>,
    pub(super) state: tokio::sync::watch::Sender<Landed>,
}

impl Default for Barrier {
    fn default() -> Self {
        Self {
            sent: std::sync::Mutex::new(0),
            state: tokio::sync::watch::Sender::new(Landed::default()),
        }
    }
}

impl Barrier {
    pub(super) fn landed(&self, seq: u64, r: Result<(), RuntimeError>) {
        self.state.send_modify(|s| {
            s.done = s.done.max(seq);
            if let Err(e) = &r
                && s.failed.is_none()
            {
                s.failed = Some(Failed::of(e));
            }
        });
    }

    /// The first failed write's error, if one is known to have failed by now (no wait).
    pub(crate) fn failed(&self) -> Option<RuntimeError> {
        self.state.borrow().failed.as_ref().map(Failed::error)
    }

    /// Waits until every write handed over so far is committed; the first failed one's
    /// error otherwise (a fence: the lease passed on).
    pub(crate) async fn wait(&self) -> Result<(), RuntimeError> {
        let target = *self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let mut rx = self.state.subscribe();
        let landed = rx
            .wait_for(|s| s.done >= target || s.failed.is_some())
            .await
            .map(|s| s.clone())
            .unwrap_or_default();
        match landed.failed {
            Some(f) => Err(f.error()),
            None => Ok(()),
        }
    }
}

/// Most writes one transaction takes.
pub(super) const GROUP_MAX: usize = 512;

/// How long a group committer keeps its connection without a write to do.
pub(super) const KEEP_IDLE: Duration = Duration::from_secs(1);

/// The arguments of one [`RT_GROUP`] call after its time, column by column (see there),
/// borrowed from the batch's writes: the texts are copied once, into the call's message.
#[derive(Default)]
pub(super) struct GroupArgs<'a> {
    pub(super) t_run: Vec<&'a str>,
    pub(super) t_token: Vec<i64>,
    pub(super) r_run: Vec<&'a str>,
    pub(super) r_step: Vec<&'a str>,
    pub(super) r_seq: Vec<i64>,
    pub(super) r_hash: Vec<&'a str>,
    pub(super) r_payload: Vec<&'a str>,
    pub(super) r_token: Vec<i64>,
    pub(super) e_run: Vec<&'a str>,
    pub(super) e_step: Vec<&'a str>,
    pub(super) e_call: Vec<&'a str>,
    pub(super) e_tool: Vec<&'a str>,
    pub(super) e_key: Vec<&'a str>,
    pub(super) e_args: Vec<&'a str>,
    pub(super) e_state: Vec<&'a str>,
    pub(super) e_result: Vec<Option<&'a str>>,
    pub(super) e_token: Vec<i64>,
    pub(super) b_run: Vec<&'a str>,
    pub(super) b_expires: Vec<i64>,
    pub(super) f_run: Vec<&'a str>,
    pub(super) f_status: Vec<&'a str>,
    pub(super) f_output: Vec<Option<&'a str>>,
    pub(super) f_detail: Vec<Option<&'a str>>,
    pub(super) f_resume: Vec<Option<&'a str>>,
    pub(super) f_failed: Vec<i64>,
    pub(super) f_not_before: Vec<i64>,
    pub(super) v_run: Vec<&'a str>,
    pub(super) v_nth: Vec<i64>,
    pub(super) v_kind: Vec<&'a str>,
    pub(super) v_detail: Vec<&'a str>,
    pub(super) v_worker: Vec<&'a str>,
    pub(super) v_token: Vec<i64>,
    /// Each event's position among its run's events in this batch (1, 2, ...).
    pub(super) nth: std::collections::HashMap<&'a str, i64>,
    pub(super) c_worker: Vec<&'a str>,
    pub(super) c_worker_json: Vec<String>,
    pub(super) c_expires: Vec<i64>,
    pub(super) notify: Vec<&'a str>,
}

impl<'a> GroupArgs<'a> {
    /// Adds an event row of `held`'s run, numbered after the batch's earlier ones for it.
    pub(super) fn event(&mut self, held: &'a Lease, kind: &'a str, detail: &'a str) {
        let n = self.nth.entry(held.run.as_str()).or_insert(0);
        *n += 1;
        self.v_run.push(held.run.as_str());
        self.v_nth.push(*n);
        self.v_kind.push(kind);
        self.v_detail.push(detail);
        self.v_worker.push(&held.worker);
        self.v_token.push(held.token);
    }

    /// The call, every column bound (a kind with no rows as `NULL`).
    pub(super) fn bind(
        self,
        now: i64,
    ) -> sqlx::query::QueryScalar<'a, sqlx::Postgres, String, sqlx::postgres::PgArguments> {
        fn col<T>(v: Vec<T>) -> Option<Vec<T>> {
            (!v.is_empty()).then_some(v)
        }
        sqlx::query_scalar(RT_GROUP_CALL)
            .bind(now)
            .bind(self.t_run)
            .bind(self.t_token)
            .bind(col(self.r_run))
            .bind(self.r_step)
            .bind(self.r_seq)
            .bind(self.r_hash)
            .bind(self.r_payload)
            .bind(self.r_token)
            .bind(col(self.e_run))
            .bind(self.e_step)
            .bind(self.e_call)
            .bind(self.e_tool)
            .bind(self.e_key)
            .bind(self.e_args)
            .bind(self.e_state)
            .bind(self.e_result)
            .bind(self.e_token)
            .bind(col(self.b_run))
            .bind(self.b_expires)
            .bind(col(self.f_run))
            .bind(self.f_status)
            .bind(self.f_output)
            .bind(self.f_detail)
            .bind(self.f_resume)
            .bind(self.f_failed)
            .bind(self.f_not_before)
            .bind(col(self.v_run))
            .bind(self.v_nth)
            .bind(self.v_kind)
            .bind(self.v_detail)
            .bind(self.v_worker)
            .bind(self.v_token)
            .bind(col(self.c_worker))
            .bind(self.c_worker_json)
            .bind(self.c_expires)
            .bind(col(self.notify))
    }
}

/// The statement a group committer calls [`RT_GROUP`] with (its result as text, which the
/// committer parses).
pub(super) const RT_GROUP_CALL: &str = "SELECT rt_group($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
    $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, \
    $31, $32, $33, $34, $35, $36, $37)::text";

/// Group commit: every write of every run this process works on (journal, ledger, events,
/// heartbeats, claims and releases) goes through one task that takes all that are waiting
/// and does them in one transaction. The fence is checked for all of them at once (one
/// query that reads, and on PostgreSQL locks, the lease rows of every run in the batch) and
/// each write is refused alone when its token is not its run's current one: a fenced write
/// fails only its own waiter, the others commit. Journal rows and ledger rows go in one
/// statement each (a JSON array of rows). Every write is committed (`synchronous = FULL`
/// on SQLite, `synchronous_commit` on PostgreSQL) before its waiter is told, so only the
/// commit's cost is shared. A batch that fails as a whole (a constraint) is done again one
/// write per transaction, so the bad write fails alone.
///
/// On PostgreSQL a batch is first tried as one `rt_group` call ([`RT_GROUP`]): one round
/// trip on a connection the committer keeps, where the general path takes one per
/// statement plus `BEGIN` and `COMMIT`. A batch with a stale token, or one the function does
/// not take, goes the general path.
pub(super) struct Committer {
    pub(super) db: Db,
    pub(super) clock: RunClock,
    /// The connection the committer's `rt_group` calls go through, kept between groups:
    /// one pool checkout for a burst of them, not one each (sqlx tests a pooled connection
    /// with a round trip when it hands it out and again when it takes it back). Given back
    /// to the pool after [`KEEP_IDLE`] without a write, and after an error (so a broken one
    /// is not used twice).
    pub(super) conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    /// On SQLite, the connection the committer's transactions run on, kept and given back
    /// the same way.
    pub(super) sqlite: Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>,
    /// Where a committed write's run events are announced to this process's subscribers.
    pub(super) hub: Arc<crate::events::Hub>,
}

/// The committer on the group-commit lane: a group is one `rt_group` call when it can be
/// (PostgreSQL), else the general path; a write is done alone by the general path.
impl Group for Committer {
    type Job = Job;
    type Answer = Answer;
    type Error = RuntimeError;

    async fn together(
        &mut self,
        jobs: &[Job],
    ) -> Result<Vec<Result<Answer, RuntimeError>>, RuntimeError> {
        match self.apply_as_one(jobs).await? {
            Some(done) => Ok(done),
            None => self.apply(jobs).await,
        }
    }

    async fn alone(&mut self, job: &Job) -> Result<Answer, RuntimeError> {
        self.apply(std::slice::from_ref(job))
            .await?
            .pop()
            .unwrap_or_else(|| Err(corrupt("group commit", "a write got no answer")))
    }

    fn answer(&mut self, job: Job, answer: Result<Answer, RuntimeError>) {
        job.answer(answer, &self.hub);
    }

    fn holds_connection(&self) -> bool {
        self.conn.is_some() || self.sqlite.is_some()
    }

    fn release(&mut self) {
        self.conn = None;
        self.sqlite = None;
    }
}

impl Committer {
    pub(super) fn new(db: Db, clock: RunClock, hub: Arc<crate::events::Hub>) -> Self {
        Committer {
            db,
            clock,
            conn: None,
            sqlite: None,
            hub,
        }
    }

    /// Does `jobs` in one `rt_group` call (PostgreSQL only): one result per job, as
    /// [`Committer::apply`] gives them; `None` when the general path must do the batch (not
    /// PostgreSQL, a write whose token is not its run's current one, a run written with two
    /// tokens or finished twice in the batch; nothing of it is stored then).
    pub(super) async fn apply_as_one(
        &mut self,
        jobs: &[Job],
    ) -> Result<Option<Vec<Result<Answer, RuntimeError>>>, RuntimeError> {
        let Db::Pg(pool) = &self.db else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        // The details of the finishes' status events, made as the rows are taken and put in
        // the event column once every row is in (the column borrows them).
        let mut details: Vec<(usize, String)> = Vec::new();
        let mut g = GroupArgs::default();
        let mut effects = EffectRows::default();
        let mut beat_at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut finished: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut token_at: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
        let mut notify: Vec<&str> = Vec::new();
        for j in jobs {
            let Some(held) = &j.lease else {
                if let Op::Claim { worker, lease_ms } = &j.op {
                    g.c_worker.push(worker);
                    g.c_worker_json.push(json_str(worker));
                    // Checked by `claim` (at most a day); saturating, so a clock far in
                    // the future cannot wrap a lease into the past either.
                    g.c_expires.push(now.saturating_add(*lease_ms));
                }
                continue;
            };
            let run = held.run.as_str();
            match token_at.get(run) {
                Some(&t) if t != held.token => return Ok(None),
                Some(_) => {}
                None => {
                    token_at.insert(run, held.token);
                    g.t_run.push(run);
                    g.t_token.push(held.token);
                }
            }
            match &j.op {
                Op::Record(e) => {
                    g.r_run.push(run);
                    g.r_step.push(&e.step);
                    g.r_seq.push(e.seq);
                    g.r_hash.push(&e.request_hash);
                    g.r_payload.push(&e.payload);
                    g.r_token.push(held.token);
                }
                Op::Effect(e) => effects.put(EffectRow::of(run, held.token, e)),
                Op::Event { kind, detail } => {
                    g.event(held, kind, detail);
                    notify.push(run);
                }
                Op::Heartbeat { expires_ms } => match beat_at.get(run) {
                    Some(&i) => g.b_expires[i] = *expires_ms,
                    None => {
                        beat_at.insert(run, g.b_run.len());
                        g.b_run.push(run);
                        g.b_expires.push(*expires_ms);
                    }
                },
                Op::Finish(to) => {
                    if !finished.insert(run) {
                        return Ok(None);
                    }
                    g.f_run.push(run);
                    g.f_status.push(to.status.as_str());
                    g.f_output.push(to.output.as_deref());
                    g.f_detail.push(to.detail.as_deref());
                    g.f_resume.push(to.resume.as_deref());
                    g.f_failed.push(i64::from(to.failed));
                    g.f_not_before.push(to.not_before_ms);
                    details.push((g.v_run.len(), to.event_detail()));
                    g.event(held, "status", "");
                    notify.push(run);
                }
                Op::Check | Op::Claim { .. } => {}
            }
        }
        for (i, d) in &details {
            g.v_detail[*i] = d;
        }
        for e in &effects.rows {
            g.e_run.push(e.run_id);
            g.e_step.push(e.step);
            g.e_call.push(e.call_id);
            g.e_tool.push(e.tool);
            g.e_key.push(e.idem_key);
            g.e_args.push(e.args);
            g.e_state.push(e.state);
            g.e_result.push(e.result);
            g.e_token.push(e.token);
        }
        notify.sort_unstable();
        notify.dedup();
        g.notify = notify;
        let _quiet = crate::journal::quiet_share().await;
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => pool.acquire().await?,
        };
        let answer: String = g.bind(now).fetch_one(&mut *conn).await?;
        self.conn = Some(conn);
        let answer: serde_json::Value =
            serde_json::from_str(&answer).map_err(|e| corrupt("rt_group answer", e))?;
        if answer.get("fenced").is_some() {
            return Ok(None);
        }
        let mut taken: std::collections::HashMap<i64, (Run, i64)> =
            std::collections::HashMap::new();
        for c in answer
            .get("claimed")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(i), Some(token), Some(run)) = (
                c.get("i").and_then(serde_json::Value::as_i64),
                c.get("token").and_then(serde_json::Value::as_i64),
                c.get("run"),
            ) else {
                return Err(corrupt(
                    "rt_group answer",
                    "a claim without i, token or run",
                ));
            };
            taken.insert(i, (run_from_json(run)?, token));
        }
        let mut nth = 0;
        Ok(Some(
            jobs.iter()
                .map(|j| match j.lease {
                    Some(_) => Ok(Answer::Done),
                    None => {
                        nth += 1;
                        Ok(Answer::Claimed(taken.remove(&nth).map(Box::new)))
                    }
                })
                .collect(),
        ))
    }

    /// Does `jobs` in one transaction: one result per job (fenced or done); `Err` when the
    /// transaction failed as a whole (nothing of it is stored).
    pub(super) async fn apply(
        &mut self,
        jobs: &[Job],
    ) -> Result<Vec<Result<Answer, RuntimeError>>, RuntimeError> {
        let mut ids: Vec<&str> = jobs
            .iter()
            .filter_map(|j| j.lease.as_ref().map(|l| l.run.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(committer_tx!(self, tx, pg, {
            // The fence of every run in the batch, in one query (locked on PostgreSQL, in
            // run order: one lock order for every committer of every process).
            let mut current: std::collections::HashMap<String, i64> =
                std::collections::HashMap::with_capacity(ids.len());
            if !ids.is_empty() {
                let sql = format!(
                    "SELECT run_id, token FROM rt_leases WHERE run_id IN ({}){}",
                    json_ids(pg),
                    if pg {
                        " ORDER BY run_id FOR UPDATE"
                    } else {
                        ""
                    }
                );
                let rows = sqlx::query(&sql)
                    .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(|r| {
                        Ok((
                            r.try_get::<String, _>("run_id")?,
                            r.try_get::<i64, _>("token")?,
                        ))
                    })
                    .collect::<Result<Vec<_>, sqlx::Error>>()?;
                current.extend(rows);
            }
            let mut out: Vec<Option<Result<Answer, RuntimeError>>> = Vec::with_capacity(jobs.len());
            let mut records = Vec::new();
            let mut effects = EffectRows::default();
            for j in jobs {
                let Some(held) = &j.lease else {
                    out.push(None);
                    continue;
                };
                let now = current.get(held.run.as_str()).copied().unwrap_or(-1);
                if now != held.token {
                    out.push(Some(Err(RuntimeError::Fenced {
                        run: held.run.to_string(),
                        token: held.token,
                        current: now,
                    })));
                    continue;
                }
                match &j.op {
                    Op::Record(e) => records.push(RecordRow::of(held.run.as_str(), held.token, e)),
                    Op::Effect(e) => effects.put(EffectRow::of(held.run.as_str(), held.token, e)),
                    _ => {}
                }
                out.push(Some(Ok(Answer::Done)));
            }
            if !records.is_empty() {
                let sql = if pg {
                    "INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) \
                     SELECT v.run_id, v.step, v.seq, v.request_hash, v.payload, v.token FROM json_to_recordset($1::json) \
                     AS v(run_id text, step text, seq bigint, request_hash text, payload text, token bigint)"
                } else {
                    "INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) \
                     SELECT json_extract(value, '$.run_id'), json_extract(value, '$.step'), json_extract(value, '$.seq'), \
                     json_extract(value, '$.request_hash'), json_extract(value, '$.payload'), json_extract(value, '$.token') \
                     FROM json_each($1)"
                };
                sqlx::query(sql)
                    .bind(serde_json::to_string(&records).map_err(|e| corrupt("journal rows", e))?)
                    .execute(&mut *tx)
                    .await?;
            }
            if !effects.rows.is_empty() {
                let sql = if pg {
                    "INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token) \
                     SELECT v.run_id, v.step, v.call_id, v.tool, v.idem_key, v.args, v.state, v.result, v.token \
                     FROM json_to_recordset($1::json) AS v(run_id text, step text, call_id text, tool text, \
                     idem_key text, args text, state text, result text, token bigint) WHERE true \
                     ON CONFLICT (run_id, step, call_id) DO UPDATE SET state = excluded.state, result = excluded.result, token = excluded.token"
                } else {
                    "INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token) \
                     SELECT json_extract(value, '$.run_id'), json_extract(value, '$.step'), json_extract(value, '$.call_id'), \
                     json_extract(value, '$.tool'), json_extract(value, '$.idem_key'), json_extract(value, '$.args'), \
                     json_extract(value, '$.state'), json_extract(value, '$.result'), json_extract(value, '$.token') \
                     FROM json_each($1) WHERE true \
                     ON CONFLICT (run_id, step, call_id) DO UPDATE SET state = excluded.state, result = excluded.result, token = excluded.token"
                };
                sqlx::query(sql)
                    .bind(
                        serde_json::to_string(&effects.rows)
                            .map_err(|e| corrupt("ledger rows", e))?,
                    )
                    .execute(&mut *tx)
                    .await?;
            }
            // Events, heartbeats and releases in the order they were handed over (a run's
            // events keep their order): every event row of the batch goes in one statement
            // at the end, each numbered after its run's stored ones and the batch's earlier
            // ones; the releases of runs finished once in the batch go in two statements.
            let mut notify: Vec<&str> = Vec::new();
            let mut events = Events::default();
            let mut finishes: Vec<(&str, serde_json::Value)> = Vec::new();
            let mut finishes_twice = false;
            for (j, o) in jobs.iter().zip(&out) {
                let (Some(held), Some(Ok(_))) = (&j.lease, o) else {
                    continue;
                };
                match &j.op {
                    Op::Event { kind, detail } => {
                        events.push(held.run.as_str(), kind, detail, &held.worker, held.token);
                        notify.push(held.run.as_str());
                    }
                    Op::Heartbeat { expires_ms } => {
                        sqlx::query("UPDATE rt_leases SET expires_ms = $2 WHERE run_id = $1")
                            .bind(held.run.as_str())
                            .bind(expires_ms)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Op::Finish(to) => {
                        let run = held.run.as_str();
                        finishes_twice |= finishes.iter().any(|(f, _)| *f == run);
                        finishes.push((run, to.row(run)));
                        events.push(run, "status", &to.event_detail(), &held.worker, held.token);
                        notify.push(held.run.as_str());
                    }
                    Op::Record(_) | Op::Effect(_) | Op::Check | Op::Claim { .. } => {}
                }
            }
            if !finishes.is_empty() {
                // One statement may not update a row twice: a run finished twice in one
                // batch has its releases done one at a time, in order.
                let sql = format!(
                    "UPDATE rt_runs AS r SET status = v.status, output_session = COALESCE(v.output, r.output_session), \
                     detail = v.detail, resume_session = COALESCE(v.resume, r.resume_session), failures = r.failures + v.failed, \
                     updated_ms = $2, not_before_ms = v.not_before FROM {} WHERE r.id = v.id",
                    if pg {
                        "json_to_recordset($1::json) AS v(id text, status text, output text, detail text, \
                         resume text, failed bigint, not_before bigint)"
                    } else {
                        "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.status') AS status, \
                         json_extract(value, '$.output') AS output, json_extract(value, '$.detail') AS detail, \
                         json_extract(value, '$.resume') AS resume, json_extract(value, '$.failed') AS failed, \
                         json_extract(value, '$.not_before') AS not_before FROM json_each($1)) AS v"
                    }
                );
                let release = format!(
                    "UPDATE rt_leases SET worker = NULL, expires_ms = 0 WHERE run_id IN ({})",
                    json_ids(pg)
                );
                let size = if finishes_twice { 1 } else { finishes.len() };
                for batch in finishes.chunks(size) {
                    let rows: Vec<&serde_json::Value> = batch.iter().map(|(_, f)| f).collect();
                    let ids: Vec<&str> = batch.iter().map(|(id, _)| *id).collect();
                    sqlx::query(&sql)
                        .bind(serde_json::to_string(&rows).map_err(|e| corrupt("run finishes", e))?)
                        .bind(self.clock.now_ms())
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&release)
                        .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            // Claims last: a write of the run's earlier holder in this batch was checked
            // against the token before the claim moves it on.
            let claims: Vec<usize> = (0..jobs.len())
                .filter(|&i| jobs[i].lease.is_none())
                .collect();
            let mut claimed: Vec<String> = Vec::new();
            if !claims.is_empty() {
                let now = self.clock.now_ms();
                let sql = format!(
                    "SELECT r.id AS id FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id \
                     WHERE (r.status = 'queued' AND r.not_before_ms <= $1) OR (r.status = 'running' AND l.expires_ms < $1) \
                     ORDER BY r.submitted_ms, r.id LIMIT $2{}",
                    if pg {
                        " FOR UPDATE OF r, l SKIP LOCKED"
                    } else {
                        ""
                    }
                );
                let found: Vec<String> = sqlx::query(&sql)
                    .bind(now)
                    .bind(claims.len() as i64)
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(|r| r.try_get::<String, _>("id"))
                    .collect::<Result<_, _>>()?;
                // The i-th claim takes the i-th run found: one statement moves every lease
                // on (a token one more than the last), one marks every run running and
                // reads it back for its worker.
                let mut takes: Vec<(usize, &str, i64, &String)> = Vec::new();
                for (&i, id) in claims.iter().zip(&found) {
                    if let Op::Claim { worker, lease_ms } = &jobs[i].op {
                        takes.push((i, worker.as_str(), *lease_ms, id));
                    }
                }
                for &i in &claims {
                    out[i] = Some(Ok(Answer::Claimed(None)));
                }
                if !takes.is_empty() {
                    let leases: Vec<serde_json::Value> = takes
                        .iter()
                        .map(|&(_, worker, lease_ms, id)| {
                            serde_json::json!({"id": id, "worker": worker, "expires": now.saturating_add(lease_ms)})
                        })
                        .collect();
                    let sql = if pg {
                        "UPDATE rt_leases AS l SET worker = v.worker, token = l.token + 1, expires_ms = v.expires \
                         FROM json_to_recordset($1::json) AS v(id text, worker text, expires bigint) \
                         WHERE l.run_id = v.id RETURNING run_id, token"
                    } else {
                        "UPDATE rt_leases AS l SET worker = v.worker, token = l.token + 1, expires_ms = v.expires \
                         FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.worker') AS worker, \
                         json_extract(value, '$.expires') AS expires FROM json_each($1)) AS v \
                         WHERE l.run_id = v.id RETURNING run_id, token"
                    };
                    let tokens: std::collections::HashMap<String, i64> = sqlx::query(sql)
                        .bind(serde_json::Value::Array(leases).to_string())
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
                        .collect::<Result<_, sqlx::Error>>()?;
                    let ids: Vec<&str> = takes.iter().map(|t| t.3.as_str()).collect();
                    let sql = format!(
                        "UPDATE rt_runs SET status = 'running', attempts = attempts + 1, updated_ms = $2 \
                         WHERE id IN ({}) RETURNING {RUN_COLS}",
                        json_ids(pg)
                    );
                    let mut runs: std::collections::HashMap<String, Run> =
                        std::collections::HashMap::new();
                    for r in sqlx::query(&sql)
                        .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                        .bind(now)
                        .fetch_all(&mut *tx)
                        .await?
                    {
                        let run = run_from(&r)?;
                        runs.insert(run.id.0.clone(), run);
                    }
                    for (i, worker, _, id) in takes {
                        let (Some(&token), Some(run)) = (tokens.get(id), runs.remove(id)) else {
                            continue;
                        };
                        let detail =
                            format!("{{\"worker\": {}, \"token\": {token}}}", json_str(worker));
                        events.push(id, "claimed", &detail, worker, token);
                        claimed.push(id.clone());
                        out[i] = Some(Ok(Answer::Claimed(Some(Box::new((run, token))))));
                    }
                }
            }
            if !events.rows.is_empty() {
                sqlx::query(Events::sql(pg))
                    .bind(events.take_json())
                    .bind(self.clock.now_ms())
                    .execute(&mut *tx)
                    .await?;
            }
            if pg && (!notify.is_empty() || !claimed.is_empty()) {
                let mut runs: Vec<String> = notify
                    .iter()
                    .map(|s| s.to_string())
                    .chain(claimed)
                    .collect();
                runs.sort_unstable();
                runs.dedup();
                sqlx::query(
                    "SELECT pg_notify('rt_events', r) FROM json_array_elements_text($1::json) AS r",
                )
                .bind(serde_json::to_string(&runs).map_err(|e| corrupt("run ids", e))?)
                .execute(&mut *tx)
                .await?;
            }
            out.into_iter()
                .map(|o| o.unwrap_or(Ok(Answer::Claimed(None))))
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warm-up's and the committer's calls of `rt_group` pass one argument per
    /// parameter of the function (the warm-up ignores its errors, so a count that drifted
    /// would go unnoticed there).
    #[test]
    pub(super) fn rt_group_calls_match_its_signature() {
        let signature = &RT_GROUP[..RT_GROUP.find("RETURNS").expect("RETURNS")];
        let params = signature.matches("[]").count();
        assert_eq!(params, RT_GROUP_COLUMNS);
        assert_eq!(RT_GROUP_CALL.matches('$').count(), RT_GROUP_COLUMNS + 1);
        assert!(RT_GROUP_CALL.contains(&format!("${}", RT_GROUP_COLUMNS + 1)));
    }
}
