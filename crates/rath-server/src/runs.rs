//! The runs API on rath-runtime's [`rath_runtime::Runtime`]: create on a registered
//! workflow, get, list, wait, cancel, interrupts (list, decide), and the run's events as
//! Server-Sent Events resumable with `Last-Event-ID`. Scoped to the key's tenant.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use rath_runtime::{
    EventSubscription, FeedEvent, FeedReceiver, Run, RunEvent, RunId, RunOptions, RunStatus,
};
use rath_session::{Session, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::db::Principal;
use crate::error::ErrorBody;
use crate::extract::{ApiJson, ApiPath, ApiQuery, decode_cursor, encode_cursor, page_size};
use crate::sessions::{PendingView, load_owned};
use crate::{AppState, ServerError};

/// A run as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// The run's id.
    pub id: String,
    /// The registered workflow it runs.
    pub workflow: String,
    /// `queued`, `running`, `waiting`, `succeeded`, `failed`, `cancelled`, `timed_out`,
    /// `needs_review`.
    pub status: String,
    /// Claims so far.
    pub attempts: i64,
    /// Failed attempts.
    pub failures: i64,
    /// The input session's id.
    pub input_session: String,
    /// The output session's id, once there is one.
    pub output_session: Option<String>,
    /// The last error, or the call under review (JSON text).
    pub detail: Option<String>,
    /// Submission time (ms since the Unix epoch).
    pub submitted_ms: i64,
    /// Tags given at submission.
    pub tags: Vec<String>,
}

impl From<&Run> for RunView {
    fn from(r: &Run) -> Self {
        RunView {
            id: r.id.to_string(),
            workflow: r.workflow.clone(),
            status: r.status.to_string(),
            attempts: r.attempts,
            failures: r.failures,
            input_session: r.input_session.clone(),
            output_session: r.output_session.clone(),
            detail: r.detail.clone(),
            submitted_ms: r.submitted_ms,
            tags: r.options.tags.clone(),
        }
    }
}

/// A new run: a workflow and its input (a user message, or a session of the tenant).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    /// The registered workflow's name.
    pub workflow: String,
    /// A user message to start a new session with (or give `session_id`).
    pub input: Option<String>,
    /// A stored session of the tenant to run on (or give `input`).
    pub session_id: Option<String>,
    /// The run is `timed_out` when unfinished this long after submission.
    pub deadline_ms: Option<u64>,
    /// Attempts in all (1: no retry).
    pub max_attempts: Option<u32>,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Filters and paging of the run listing.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunQuery {
    /// Only runs in this status.
    pub status: Option<String>,
    /// At most this many rows (1..=500, default 50).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A page of runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    /// The runs, oldest first.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// How long to wait.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Milliseconds to wait at most (default and cap: the server's wait limit).
    pub timeout_ms: Option<u64>,
}

/// A run once it settled (or the wait ran out), with its final answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunResult {
    /// The run.
    pub run: RunView,
    /// The output session's final assistant text, if any.
    pub output_text: Option<String>,
}

/// A decision on a pending call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// `approve` or `reject`.
    pub decision: String,
    /// Why (for a rejection; the call is answered with it).
    pub reason: Option<String>,
}

/// Where a resumed event stream starts.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Events after this id (what `Last-Event-ID` says; the header wins).
    pub after: Option<i64>,
}

/// The run `id` when the tenant owns it; 404 otherwise.
async fn owned_run(state: &AppState, tenant: &str, id: &str) -> Result<Run, ServerError> {
    let not_found = || ServerError::NotFound {
        what: "run",
        id: id.to_owned(),
    };
    if !state.db.owns_run(tenant, id).await? {
        return Err(not_found());
    }
    match state.runtime.runs().get(&RunId(id.to_owned())).await {
        Ok(r) => Ok(r),
        Err(rath_runtime::RuntimeError::NoSuchRun(_)) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

fn options_of(req: &NewRun) -> Result<RunOptions, ServerError> {
    let mut o = RunOptions::default();
    if let Some(ms) = req.deadline_ms {
        o = o.deadline(Duration::from_millis(ms));
    }
    match req.max_attempts {
        Some(0) => return Err(ServerError::BadRequest("max_attempts is at least 1".into())),
        Some(n) => o = o.retry(n),
        None => {}
    }
    for t in &req.tags {
        o = o.tag(t.clone());
    }
    Ok(o)
}

/// Submits a run of a registered workflow; a worker picks it up.
#[utoipa::path(post, path = "/v1/runs", tag = "runs", request_body = NewRun,
    security(("bearer" = [])),
    responses((status = 201, body = RunView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiJson(req): ApiJson<NewRun>,
) -> Result<(StatusCode, axum::Json<RunView>), ServerError> {
    let def = state
        .runtime
        .registry()
        .get(&req.workflow)
        .ok_or_else(|| ServerError::BadRequest(format!("unknown workflow {:?}", req.workflow)))?
        .clone();
    let options = options_of(&req)?;
    // Ownership before storage and submission: a stored session or a queued run is always
    // some tenant's.
    let (input, id) = match (&req.input, &req.session_id) {
        (Some(text), None) => {
            let s = Session::user_with(text.clone(), state.config.stamper.clone());
            let id = RunId(format!("run_{}", state.config.stamper.next_id()));
            state
                .db
                .own_session_and_run(&who.tenant, s.id().as_str(), id.as_str())
                .await?;
            state.runtime.sessions().save(&s).await?;
            (s.id().clone(), id)
        }
        (None, Some(sid)) => {
            load_owned(&state, &who.tenant, sid).await?;
            let id = RunId(format!("run_{}", state.config.stamper.next_id()));
            state.db.own_run(&who.tenant, id.as_str()).await?;
            (SessionId::new(sid.as_str()), id)
        }
        _ => {
            return Err(ServerError::BadRequest(
                "give exactly one of input and session_id".into(),
            ));
        }
    };
    state
        .runtime
        .runs()
        .submit(
            id.clone(),
            &def.name,
            &def.definition_hash,
            input.as_str(),
            &options,
        )
        .await?;
    let run = state.runtime.runs().get(&id).await?;
    Ok((StatusCode::CREATED, axum::Json(RunView::from(&run))))
}

/// Lists the tenant's runs, oldest first.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunQuery),
    security(("bearer" = [])),
    responses((status = 200, body = RunPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiQuery(q): ApiQuery<RunQuery>,
) -> Result<axum::Json<RunPage>, ServerError> {
    let limit = page_size(q.limit)?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            s.parse::<RunStatus>()
                .map_err(|_| ServerError::BadRequest(format!("unknown run status {s:?}")))
        })
        .transpose()?;
    let after = q
        .cursor
        .as_deref()
        .map(|c| decode_cursor("runs", c))
        .transpose()?;
    let mine = state.db.runs_of(&who.tenant).await?;
    let key = |r: &Run| format!("{:020}\n{}", r.submitted_ms, r.id);
    let all = state.runtime.runs().list(status).await?;
    let mut page: Vec<&Run> = all
        .iter()
        .filter(|r| mine.contains(r.id.as_str()))
        .filter(|r| after.as_deref().is_none_or(|a| key(r).as_str() > a))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next_cursor = match (more, page.last()) {
        (true, Some(last)) => Some(encode_cursor("runs", &key(last))),
        _ => None,
    };
    Ok(axum::Json(RunPage {
        runs: page.into_iter().map(RunView::from).collect(),
        next_cursor,
    }))
}

/// A run of the tenant.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses((status = 200, body = RunView),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<RunView>, ServerError> {
    let run = owned_run(&state, &who.tenant, &id).await?;
    Ok(axum::Json(RunView::from(&run)))
}

/// The run once it is final, waiting or in review, or when `timeout` passed: read again
/// at each status event of its subscription (woken by this process's writes at once, by
/// other processes' within the server's poll).
async fn wait_settled(state: &AppState, id: &RunId, timeout: Duration) -> Result<Run, ServerError> {
    let until = tokio::time::Instant::now() + timeout;
    let mut sub = state
        .runtime
        .runs()
        .subscribe(id, 0)
        .await?
        .fallback(state.config.poll);
    loop {
        let run = state.runtime.runs().get(id).await?;
        let settled = run.status.is_final()
            || matches!(run.status, RunStatus::Waiting | RunStatus::NeedsReview);
        let now = tokio::time::Instant::now();
        if settled || now >= until {
            return Ok(run);
        }
        // Events up to the next status change (or the end of the wait).
        while let Some(e) = sub
            .next_within(until.saturating_duration_since(tokio::time::Instant::now()))
            .await?
        {
            if e.kind == "status" {
                break;
            }
        }
    }
}

/// Waits until the run is final, waiting for a decision or in review (or the timeout
/// passed), then answers it with its final text.
#[utoipa::path(post, path = "/v1/runs/{id}/wait", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id"), WaitQuery),
    responses((status = 200, body = RunResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn wait(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> Result<axum::Json<RunResult>, ServerError> {
    owned_run(&state, &who.tenant, &id).await?;
    let max = state.config.wait_max;
    let timeout = q
        .timeout_ms
        .map_or(max, |ms| Duration::from_millis(ms).min(max));
    let rid = RunId(id);
    let waited = tokio::select! {
        r = wait_settled(&state, &rid, timeout) => Some(r?),
        _ = state.shutdown.cancelled() => None,
    };
    let run = match waited {
        Some(r) => r,
        None => state.runtime.runs().get(&rid).await?,
    };
    let output_text = match state.runtime.output(&rid).await {
        Ok(s) => s.and_then(|s| s.final_text().map(str::to_owned)),
        Err(rath_runtime::RuntimeError::Persist(rath_persist::PersistError::NotFound {
            ..
        })) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(axum::Json(RunResult {
        run: RunView::from(&run),
        output_text,
    }))
}

/// Cancels a run that has not finished (409 for a finished one).
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses((status = 200, body = RunView),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<RunView>, ServerError> {
    owned_run(&state, &who.tenant, &id).await?;
    let rid = RunId(id);
    state.runtime.cancel(&rid).await?;
    Ok(axum::Json(RunView::from(
        &state.runtime.runs().get(&rid).await?,
    )))
}

/// The pending calls of a waiting run (empty for a run that is not waiting).
async fn pending_of(state: &AppState, run: &Run) -> Result<Vec<PendingView>, ServerError> {
    if run.status != RunStatus::Waiting {
        return Ok(Vec::new());
    }
    let Some(out) = state.runtime.output(&run.id).await? else {
        return Ok(Vec::new());
    };
    Ok(out
        .pending()
        .iter()
        .map(|p| PendingView {
            call_id: p.call.id.clone(),
            tool: p.call.function.name.clone(),
            arguments: p.call.function.arguments.clone(),
            agent: p.agent.clone(),
            reason: p.reason.clone(),
        })
        .collect())
}

/// The calls a waiting run waits on.
#[utoipa::path(get, path = "/v1/runs/{id}/interrupts", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses((status = 200, body = Vec<PendingView>),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn interrupts(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<Vec<PendingView>>, ServerError> {
    let run = owned_run(&state, &who.tenant, &id).await?;
    Ok(axum::Json(pending_of(&state, &run).await?))
}

/// Approves or rejects a pending call; the run is queued again for any worker. A decision
/// on a call already decided (the run is no longer waiting) is a 409.
#[utoipa::path(post, path = "/v1/runs/{id}/interrupts/{call_id}", tag = "runs",
    security(("bearer" = [])), request_body = Decision,
    params(("id" = String, Path, description = "The run's id"),
        ("call_id" = String, Path, description = "The pending call's id")),
    responses((status = 200, body = RunView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath((id, call_id)): ApiPath<(String, String)>,
    ApiJson(d): ApiJson<Decision>,
) -> Result<axum::Json<RunView>, ServerError> {
    let run = owned_run(&state, &who.tenant, &id).await?;
    let approve = match d.decision.as_str() {
        "approve" => true,
        "reject" => false,
        other => {
            return Err(ServerError::BadRequest(format!(
                "unknown decision {other:?} (approve, reject)"
            )));
        }
    };
    if run.status != RunStatus::Waiting {
        return Err(ServerError::Conflict(format!(
            "run {id} is {}: there is no call to decide",
            run.status
        )));
    }
    let pending = pending_of(&state, &run).await?;
    if !pending.iter().any(|p| p.call_id == call_id) {
        return Err(ServerError::NotFound {
            what: "pending call",
            id: call_id,
        });
    }
    let rt = &state.runtime;
    if approve {
        rt.approve(&run.id, &call_id, &who.key_id).await?;
    } else {
        let reason = d.reason.as_deref().unwrap_or("rejected");
        rt.reject(&run.id, &call_id, &who.key_id, reason).await?;
    }
    Ok(axum::Json(RunView::from(&rt.runs().get(&run.id).await?)))
}

/// The event's JSON data.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventData {
    /// The run.
    pub run: String,
    /// Its position in the run's stream (also the SSE `id`).
    pub seq: i64,
    /// `status`, `claimed`, `step`, `session`, ... (also the SSE `event`).
    pub kind: String,
    /// The event's detail (JSON when it parses, else the text).
    #[schema(value_type = Object)]
    pub detail: Value,
    /// Who wrote it (a worker's name, `operator`, `submitter`).
    pub by: String,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
}

fn sse_event(e: &RunEvent) -> Event {
    let data = EventData {
        run: e.run.to_string(),
        seq: e.seq,
        kind: e.kind.clone(),
        detail: serde_json::from_str(&e.detail).unwrap_or_else(|_| Value::String(e.detail.clone())),
        by: e.by.clone(),
        at_ms: e.at_ms,
    };
    Event::default()
        .id(e.seq.to_string())
        .event(e.kind.clone())
        .data(serde_json::to_string(&data).unwrap_or_default())
}

/// Where an event stream resumes: `Last-Event-ID`, else `?after=`, else the start.
fn resume_point(headers: &HeaderMap, q: &EventQuery) -> Result<i64, ServerError> {
    match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| ServerError::BadRequest("Last-Event-ID is not an event id".into())),
        None => match q.after {
            Some(n) if n < 0 => Err(ServerError::BadRequest("after is below 0".into())),
            Some(n) => Ok(n),
            None => Ok(0),
        },
    }
}

/// What a stream keeps between events: the run's event subscription (woken by the run
/// store's notifications, read again every ten polls when none came: a writer in another
/// process on SQLite notifies nobody here), or the events left of a run already final.
struct Tail {
    state: Arc<AppState>,
    sub: Option<EventSubscription>,
    buf: VecDeque<RunEvent>,
    done: bool,
    /// What the run does as it happens, when a worker in this process runs it: streamed
    /// reply text (`token` events) and agent steps (`agent` events), not stored and
    /// carrying no event id (a client resuming with `Last-Event-ID` gets the stored events
    /// it missed, not these).
    feed: Option<FeedReceiver>,
}

/// A feed event as an SSE event without an id: `token` `{run, agent, reply, text}` or
/// `agent` `{run, agent, added, session}` (how many chunks the agent's step added to its
/// session, and that session's id).
fn feed_event(run: &str, e: &FeedEvent) -> Option<Event> {
    let (kind, data) = match e {
        FeedEvent::Token { agent, reply, text } => (
            "token",
            serde_json::json!({"run": run, "agent": agent, "reply": reply, "text": text}),
        ),
        FeedEvent::Step {
            agent,
            output,
            from,
        } => (
            "agent",
            serde_json::json!({"run": run, "agent": agent,
                "added": output.len().saturating_sub(*from), "session": output.id().as_str()}),
        ),
        _ => return None,
    };
    Some(Event::default().event(kind).data(data.to_string()))
}

impl Tail {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Tail)> {
        if let Some(e) = self.buf.pop_front() {
            return Some((Ok(sse_event(&e)), self));
        }
        if self.done || self.state.shutdown.is_cancelled() {
            return None;
        }
        let sub = self.sub.as_mut()?;
        let got = loop {
            let fed = tokio::select! {
                got = sub.next() => break got,
                Some(e) = async {
                    match self.feed.as_mut() {
                        Some(f) => f.recv().await,
                        None => std::future::pending().await,
                    }
                } => e,
                _ = self.state.shutdown.cancelled() => return None,
            };
            if let Some(ev) = feed_event(sub.run().as_str(), &fed) {
                return Some((Ok(ev), self));
            }
        };
        match got {
            Ok(e) => {
                // A final status is the run's last event.
                self.done = e.status().is_some_and(|s| s.is_final());
                Some((Ok(sse_event(&e)), self))
            }
            Err(e) => {
                self.done = true;
                let ev = Event::default().event("error").data(e.to_string());
                Some((Ok(ev), self))
            }
        }
    }
}

/// The run's events as Server-Sent Events (`id` = the event's position, `event` = its
/// kind); the stream ends after the run's final status. A client that reconnects with
/// `Last-Event-ID` gets every later event once.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id"), EventQuery,
        ("Last-Event-ID" = Option<i64>, Header, description = "The last event id seen")),
    responses((status = 200, description = "An event stream; each data is an EventData",
        body = EventData, content_type = "text/event-stream"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ServerError> {
    let after = resume_point(&headers, &q)?;
    let run = owned_run(&state, &who.tenant, &id).await?;
    let tail = if run.status.is_final() {
        // Every event is written: what follows `after`, then the end.
        let buf = state.runtime.runs().events(&run.id, after).await?;
        Tail {
            state: state.clone(),
            sub: None,
            buf: buf.into_iter().filter(|e| e.seq > after).collect(),
            done: true,
            feed: None,
        }
    } else {
        let feed = state.runtime.feed().subscribe(&run.id);
        let sub = state
            .runtime
            .runs()
            .subscribe(&run.id, after)
            .await?
            .fallback(state.config.poll * 10);
        Tail {
            state: state.clone(),
            sub: Some(sub),
            buf: VecDeque::new(),
            done: false,
            feed: Some(feed),
        }
    };
    let stream = futures::stream::unfold(tail, Tail::next);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
