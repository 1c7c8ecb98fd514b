//! Runs of a thread: create, stream (Server-Sent Events in LangGraph's framing), wait,
//! get, list, join, join the stream, cancel.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rath_runtime::{FeedEvent, FeedReceiver, Run, RunId, RunOptions, RunStatus};
use rath_session::{ChunkKind, Session};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::body::Answer;
use super::convert::{self, settled};
use super::threads::{self, Loaded, assistant_id, interrupts, reached, resolve};
use super::{LgError, LgErrorBody, LgJson, LgPath, LgPrincipal, not_found, rfc3339, unprocessable};
use crate::db::{Principal, ThreadRunRow};
use crate::{AppState, ServerError};

/// A new run on a thread (other keys, such as `config`, `context`, `stream_subgraphs`,
/// `stream_resumable`, `on_disconnect`, are accepted and ignored).
#[derive(Debug, Deserialize, ToSchema)]
pub struct RunCreate {
    /// An assistant id or a graph id (a registered workflow's name).
    pub assistant_id: String,
    /// `{"messages": [...]}`: appended to the thread's state as the run's input.
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// A mode or a list of them: `values` (the default), `updates`, `messages-tuple`,
    /// `messages`; other modes are accepted and send nothing.
    #[schema(value_type = Option<Object>)]
    pub stream_mode: Option<Value>,
    /// Free-form metadata, an object.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// Only `reject` (the default): a run on a thread whose newest run has not finished is
    /// a 409.
    pub multitask_strategy: Option<String>,
}

/// A run as LangGraph shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LgRun {
    /// The run's id (the same run is `/v1/runs/{id}`).
    pub run_id: String,
    /// Its thread.
    pub thread_id: String,
    /// The assistant it runs.
    pub assistant_id: String,
    /// Submission time (RFC 3339).
    pub created_at: String,
    /// Its newest event's time (RFC 3339).
    pub updated_at: String,
    /// `pending`, `running`, `success`, `error`, `timeout` or `interrupted`.
    pub status: String,
    /// The metadata given at creation.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// What it was asked for (`input`, `stream_mode`).
    #[schema(value_type = Object)]
    pub kwargs: Value,
    /// Always `reject`.
    pub multitask_strategy: String,
}

/// A path segment with everything but unreserved characters percent-encoded.
fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn run_path(tid: &str, rid: &str) -> String {
    format!("/threads/{}/runs/{}", seg(tid), seg(rid))
}

fn set_header(resp: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

async fn run_view(state: &AppState, row: &ThreadRunRow, run: &Run) -> Result<LgRun, LgError> {
    let events = state.runtime.runs().events(&run.id, 0).await?;
    let updated = events.last().map_or(run.submitted_ms, |e| e.at_ms);
    Ok(LgRun {
        run_id: row.run_id.clone(),
        thread_id: row.thread_id.clone(),
        assistant_id: row.assistant_id.clone(),
        created_at: rfc3339(run.submitted_ms),
        updated_at: rfc3339(updated),
        status: convert::status(run.status).to_owned(),
        metadata: serde_json::from_str(&row.metadata).unwrap_or_else(|_| json!({})),
        kwargs: serde_json::from_str(&row.kwargs).unwrap_or_else(|_| json!({})),
        multitask_strategy: "reject".into(),
    })
}

/// The stream modes asked for.
#[derive(Clone, Copy, Debug, Default)]
struct Modes {
    values: bool,
    updates: bool,
    tuple: bool,
    messages: bool,
}

fn modes(v: Option<&Value>) -> Result<(Modes, Vec<String>), LgError> {
    let names: Vec<String> = match v {
        None | Some(Value::Null) => vec!["values".into()],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|m| {
                m.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| unprocessable("stream_mode is a string or a list of strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(unprocessable(
                "stream_mode is a string or a list of strings",
            ));
        }
    };
    let mut m = Modes::default();
    for n in &names {
        match n.as_str() {
            "values" => m.values = true,
            "updates" => m.updates = true,
            "messages-tuple" => m.tuple = true,
            "messages" => m.messages = true,
            "events" | "debug" | "custom" | "tasks" | "checkpoints" => {}
            other => return Err(unprocessable(format!("unknown stream_mode {other:?}"))),
        }
    }
    Ok((m, names))
}

/// A run just submitted: its thread row, the run, the modes asked for.
struct Submitted {
    row: ThreadRunRow,
    run: Run,
    input: Session,
    modes: Modes,
    /// The run's feed, watched from before it was queued (when its modes show what the
    /// feed carries: `messages-tuple`, `messages`, `updates`).
    feed: Option<FeedReceiver>,
}

/// Appends the input to the thread's state and submits a run of the assistant on it;
/// `watch`: its feed is subscribed to (for a stream of it) before it is queued.
async fn submit(
    state: &AppState,
    who: &Principal,
    tid: &str,
    req: RunCreate,
    watch: bool,
) -> Result<Submitted, LgError> {
    let t = threads::load(state, &who.tenant, tid).await?;
    let def = resolve(state, &req.assistant_id)
        .ok_or_else(|| not_found("assistant", &req.assistant_id))?
        .clone();
    match req.multitask_strategy.as_deref() {
        None | Some("reject") => {}
        Some(other) => {
            return Err(unprocessable(format!(
                "multitask_strategy {other:?} is not supported (only reject)"
            )));
        }
    }
    if let Some((_, last)) = t.runs.last()
        && !last.status.is_final()
    {
        return Err(LgError(ServerError::Conflict(format!(
            "thread {tid} has a run that has not finished ({}: {})",
            last.id, last.status
        ))));
    }
    let (modes, mode_names) = modes(req.stream_mode.as_ref())?;
    let metadata = match req.metadata {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) => m,
        Some(_) => return Err(unprocessable("metadata is an object")),
    };
    let chunks = convert::input_chunks(req.input.as_ref().unwrap_or(&Value::Null))?;
    let input = continue_state(state, &t, chunks).await?;
    let stamper = &state.config.stamper;
    let id = RunId(format!("run_{}", stamper.next_id()));
    // Watched before it is queued, so a stream misses nothing its worker publishes.
    let feed = (watch && (modes.tuple || modes.messages || modes.updates))
        .then(|| state.runtime.feed().subscribe(&id));
    let row = ThreadRunRow {
        run_id: id.to_string(),
        thread_id: tid.to_owned(),
        seq: t.runs.last().map_or(1, |(r, _)| r.seq + 1),
        assistant_id: assistant_id(&def),
        metadata: metadata.to_string(),
        kwargs: json!({"input": req.input, "stream_mode": mode_names}).to_string(),
        created_ms: rath_runtime::now_ms(),
    };
    // Both owned, and the run's place in the thread taken, before either is stored (one
    // commit): a stored session or queued run is always some tenant's, and a place whose
    // run is never submitted is a run that never ran.
    state
        .db
        .own_thread_run(&who.tenant, input.id().as_str(), &row)
        .await?;
    state.runtime.sessions().save(&input).await?;
    state
        .runtime
        .runs()
        .submit(
            id.clone(),
            &def.name,
            &def.definition_hash,
            input.id().as_str(),
            &RunOptions::default(),
        )
        .await?;
    let run = state.runtime.runs().get(&id).await?;
    Ok(Submitted {
        row,
        run,
        input,
        modes,
        feed,
    })
}

/// The run's input: a fork of the thread's state with the new messages appended (a
/// trailing `run_failure` chunk and pending calls of a run that stopped are left in the
/// parent), or a new session of them on a thread with no state.
async fn continue_state(
    state: &AppState,
    t: &Loaded,
    chunks: Vec<rath_session::Chunk>,
) -> Result<Session, LgError> {
    let stamper = state.config.stamper.clone();
    let mut base = None;
    for (_, run) in t.runs.iter().rev() {
        if let Some(s) = reached(state, run).await? {
            base = Some(s);
            break;
        }
    }
    let Some(base) = base else {
        if chunks.is_empty() {
            return Err(unprocessable(
                "the first run of a thread needs input messages",
            ));
        }
        if let [only] = chunks.as_slice()
            && only.kind() == ChunkKind::User
        {
            return Ok(Session::user_with(only.text().unwrap_or(""), stamper));
        }
        return Ok(Session::empty_with(stamper).extend(chunks));
    };
    let mut s = base.with_stamper(stamper).fork();
    if s.last().is_some_and(|c| c.kind() == ChunkKind::RunFailure) {
        let kept = s
            .slice(0..s.len() - 1)
            .map_err(|e| LgError(ServerError::Conflict(e.to_string())))?;
        s = s.with_chunks(kept);
    }
    let pending: Vec<String> = s.pending().iter().map(|p| p.call.id.clone()).collect();
    for call in pending {
        s = s
            .take_pending(&call)
            .map_err(|e| LgError(ServerError::Conflict(e.to_string())))?
            .1;
    }
    Ok(s.extend(chunks))
}

/// Creates a run on the thread; it is queued for a worker (`status: pending`).
#[utoipa::path(post, path = "/threads/{thread_id}/runs", tag = "langgraph",
    request_body = RunCreate, security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, body = LgRun),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody),
        (status = 409, body = LgErrorBody), (status = 422, body = LgErrorBody)))]
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
    LgJson(req): LgJson<RunCreate>,
) -> Result<Response, LgError> {
    let sub = submit(&state, &who, &tid, req, false).await?;
    let view = run_view(&state, &sub.row, &sub.run).await?;
    let mut resp = axum::Json(view).into_response();
    set_header(
        &mut resp,
        header::CONTENT_LOCATION,
        &run_path(&tid, &sub.row.run_id),
    );
    Ok(resp)
}

/// The thread's runs, newest first.
#[utoipa::path(get, path = "/threads/{thread_id}/runs", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, body = Vec<LgRun>),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
) -> Result<axum::Json<Vec<LgRun>>, LgError> {
    let t = threads::load(&state, &who.tenant, &tid).await?;
    let mut out = Vec::new();
    for (row, run) in t.runs.iter().rev() {
        out.push(run_view(&state, row, run).await?);
    }
    Ok(axum::Json(out))
}

/// The thread's run `run_id` (404 when either is not the tenant's).
async fn thread_run(
    state: &AppState,
    who: &Principal,
    tid: &str,
    rid: &str,
) -> Result<(ThreadRunRow, Run), LgError> {
    let t = threads::load(state, &who.tenant, tid).await?;
    t.runs
        .into_iter()
        .find(|(r, _)| r.run_id == rid)
        .ok_or_else(|| not_found("run", rid))
}

/// A run of the thread.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id"),
        ("run_id" = String, Path, description = "The run's id")),
    responses((status = 200, body = LgRun),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath((tid, rid)): LgPath<(String, String)>,
) -> Result<axum::Json<LgRun>, LgError> {
    let (row, run) = thread_run(&state, &who, &tid, &rid).await?;
    Ok(axum::Json(run_view(&state, &row, &run).await?))
}

fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\r\ndata: {data}\r\n\r\n"))
}

/// What a run's event stream keeps between polls.
struct Follow {
    state: Arc<AppState>,
    tid: String,
    run: RunId,
    graph: String,
    assistant: String,
    modes: Modes,
    /// Messages already sent.
    sent: usize,
    out: VecDeque<Bytes>,
    done: bool,
    quiet_since: Instant,
    /// The run as it happens (streamed reply text, agent steps), when a worker in this
    /// process runs it.
    feed: Option<FeedReceiver>,
    /// Steps came from the feed: `updates` are sent per agent step from it, not from the
    /// stored state's growth.
    live_steps: bool,
    /// Reply text streamed so far, by stream id (kept for the stream's life: it is what
    /// the run's model wrote, which its state holds too); a streamed reply's whole message
    /// is not sent again as a `messages` tuple (its pieces were), as LangGraph does.
    streamed: HashMap<String, String>,
    /// When the stored state was last read.
    polled: Option<Instant>,
}

impl Follow {
    fn new(
        state: Arc<AppState>,
        row: &ThreadRunRow,
        run: &Run,
        modes: Modes,
        feed: Option<FeedReceiver>,
    ) -> Follow {
        let mut f = Follow {
            state,
            tid: row.thread_id.clone(),
            run: run.id.clone(),
            graph: run.workflow.clone(),
            assistant: row.assistant_id.clone(),
            modes,
            sent: 0,
            out: VecDeque::new(),
            done: false,
            quiet_since: Instant::now(),
            feed,
            live_steps: false,
            streamed: HashMap::new(),
            polled: None,
        };
        f.out.push_back(sse(
            "metadata",
            &json!({"run_id": run.id.as_str(), "attempt": run.attempts.max(1)}),
        ));
        f
    }

    /// Starts the stream at `s`: its whole state as a `values` event.
    fn start_at(&mut self, s: &Session) {
        let v = convert::values(&self.tid, s);
        self.sent = v["messages"].as_array().map_or(0, Vec::len);
        if self.modes.values {
            self.out.push_back(sse("values", &v));
        }
    }

    /// The metadata of a message of `node` (the workflow, or the agent whose reply or
    /// step it is) at `step`.
    fn meta(&self, node: &str, step: usize) -> Value {
        json!({"langgraph_node": node, "langgraph_step": step,
            "langgraph_triggers": [node], "langgraph_path": ["__pregel_pull", node],
            "langgraph_checkpoint_ns": "", "run_id": self.run.as_str(),
            "thread_id": self.tid, "graph_id": self.graph, "assistant_id": self.assistant})
    }

    /// The messages the run added since the last poll, as `messages`, `updates` and
    /// `values` events.
    fn grew(&mut self, s: &Session) {
        let v = convert::values(&self.tid, s);
        let all = v["messages"].as_array().cloned().unwrap_or_default();
        if all.len() <= self.sent {
            return;
        }
        let new = all[self.sent..].to_vec();
        for (i, m) in new.iter().enumerate() {
            let meta = self.meta(&self.graph, self.sent + i);
            if self.modes.tuple && !self.was_streamed(m) {
                self.out.push_back(sse("messages", &json!([m, meta])));
            }
            if self.modes.messages {
                let id = m["id"].as_str().unwrap_or_default();
                self.out
                    .push_back(sse("messages/metadata", &json!({ id: {"metadata": meta} })));
                self.out.push_back(sse("messages/complete", &json!([m])));
            }
        }
        if self.modes.updates && !self.live_steps {
            let mut u = serde_json::Map::new();
            u.insert(self.graph.clone(), json!({ "messages": new }));
            self.out.push_back(sse("updates", &Value::Object(u)));
        }
        if self.modes.values {
            self.out.push_back(sse("values", &v));
        }
        self.sent = all.len();
    }

    /// True when `m` is an AI message whose text was streamed in pieces. A streamed reply
    /// answers for every message with its text: the state a poll reads may be an agent's
    /// fork before it is the merged session, and the same message is new in both.
    fn was_streamed(&self, m: &Value) -> bool {
        if m["type"] != "ai" {
            return false;
        }
        let Some(text) = m["content"].as_str().filter(|t| !t.is_empty()) else {
            return false;
        };
        self.streamed.values().any(|t| t.as_str() == text)
    }

    /// What the run did just now, as LangGraph's events: reply text as `AIMessageChunk`
    /// tuples (and `messages/partial`), an agent's step as an `updates` event keyed by the
    /// agent.
    fn fed(&mut self, e: &FeedEvent) {
        match e {
            FeedEvent::Token { agent, reply, text } => {
                let id = format!("run--{}-{reply}", self.run.as_str());
                let node = agent.as_deref().unwrap_or(&self.graph).to_owned();
                let meta = self.meta(&node, self.sent);
                let so_far = self.streamed.entry(id.clone()).or_default();
                let first = so_far.is_empty();
                so_far.push_str(text);
                let partial = self
                    .modes
                    .messages
                    .then(|| convert::ai_partial(&id, so_far));
                if self.modes.tuple {
                    self.out.push_back(sse(
                        "messages",
                        &json!([convert::ai_chunk(&id, text), meta]),
                    ));
                }
                if let Some(partial) = partial {
                    if first {
                        self.out.push_back(sse(
                            "messages/metadata",
                            &json!({ id.as_str(): {"metadata": meta} }),
                        ));
                    }
                    self.out
                        .push_back(sse("messages/partial", &json!([partial])));
                }
            }
            FeedEvent::Step {
                agent,
                output,
                from,
            } => {
                if !self.modes.updates {
                    return;
                }
                self.live_steps = true;
                let new = convert::messages_from(&self.tid, output, *from);
                let mut u = serde_json::Map::new();
                u.insert(agent.clone(), json!({ "messages": new }));
                self.out.push_back(sse("updates", &Value::Object(u)));
            }
            _ => {}
        }
    }

    /// Takes what the feed holds now.
    fn drain_feed(&mut self) {
        while let Some(e) = self.feed.as_mut().and_then(FeedReceiver::try_recv) {
            self.fed(&e);
        }
    }

    async fn poll(&mut self) -> Result<(), LgError> {
        // What the worker published before the state this poll reads comes first (a
        // reply's pieces before its message, a step before the state after it).
        self.drain_feed();
        let run = self.state.runtime.runs().get(&self.run).await?;
        let reached = reached(&self.state, &run).await?;
        if settled(run.status) {
            // Published before the run settled: taken before the stream ends.
            self.drain_feed();
        }
        if let Some(s) = &reached {
            self.grew(s);
        }
        if settled(run.status) {
            self.done = true;
            match run.status {
                RunStatus::Waiting if self.modes.updates => {
                    let pending = reached.as_ref().map(interrupts).unwrap_or_default();
                    self.out
                        .push_back(sse("updates", &json!({"__interrupt__": pending})));
                }
                RunStatus::Failed | RunStatus::TimedOut | RunStatus::NeedsReview => {
                    self.out.push_back(sse("error", &convert::run_error(&run)));
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Follow)> {
        loop {
            if let Some(b) = self.out.pop_front() {
                self.quiet_since = Instant::now();
                return Some((Ok(b), self));
            }
            if self.done || self.state.shutdown.is_cancelled() {
                return None;
            }
            let poll = self.state.config.poll;
            if self.polled.is_none_or(|at| at.elapsed() >= poll) {
                self.polled = Some(Instant::now());
                if let Err(e) = self.poll().await {
                    self.done = true;
                    let msg = e.0.to_string();
                    self.out.push_back(sse(
                        "error",
                        &json!({"error": "StreamError", "message": msg}),
                    ));
                }
                continue;
            }
            if self.quiet_since.elapsed() >= self.state.config.heartbeat {
                self.out
                    .push_back(Bytes::from_static(b": heartbeat\r\n\r\n"));
                continue;
            }
            let wait = self
                .polled
                .map_or(poll, |at| poll.saturating_sub(at.elapsed()));
            let shutdown = self.state.shutdown.clone();
            // Woken by what the run does (a piece of reply text goes out as it comes);
            // the stored state is read every poll interval.
            let fed = match self.feed.as_mut() {
                Some(feed) => tokio::select! {
                    e = feed.recv() => e,
                    _ = tokio::time::sleep(wait) => None,
                    _ = shutdown.cancelled() => None,
                },
                None => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => {}
                    }
                    None
                }
            };
            if let Some(e) = fed {
                self.fed(&e);
                self.drain_feed();
            }
        }
    }
}

/// A 200 about run `rid` of thread `tid`: `body` as `content_type`, `Location` where the
/// SDKs follow the run again (`.../{follow}`) and `Content-Location` the run itself.
fn run_response(body: Body, content_type: &str, tid: &str, rid: &str, follow: &str) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    set_header(&mut resp, header::CONTENT_TYPE, content_type);
    set_header(
        &mut resp,
        header::LOCATION,
        &format!("{}/{follow}", run_path(tid, rid)),
    );
    set_header(&mut resp, header::CONTENT_LOCATION, &run_path(tid, rid));
    resp
}

fn stream_response(follow: Follow, tid: &str, rid: &str) -> Response {
    let body = Body::from_stream(futures::stream::unfold(follow, Follow::next));
    let mut resp = run_response(body, "text/event-stream", tid, rid, "stream");
    set_header(&mut resp, header::CACHE_CONTROL, "no-store");
    resp
}

/// Creates a run and streams it as Server-Sent Events: `metadata` first, then per the
/// stream modes `values` (the state after the input, then after each step), `messages`
/// (each new message with its metadata), `updates` (`{graph_id: {"messages": [new]}}`);
/// `error` when the run failed; `: heartbeat` comments in silences. The stream closes when
/// the run settles (no `end` event, as LangGraph's server).
#[utoipa::path(post, path = "/threads/{thread_id}/runs/stream", tag = "langgraph",
    request_body = RunCreate, security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody),
        (status = 409, body = LgErrorBody), (status = 422, body = LgErrorBody)))]
pub(crate) async fn stream(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
    LgJson(req): LgJson<RunCreate>,
) -> Result<Response, LgError> {
    let sub = submit(&state, &who, &tid, req, true).await?;
    let mut follow = Follow::new(state.clone(), &sub.row, &sub.run, sub.modes, sub.feed);
    follow.start_at(&sub.input);
    Ok(stream_response(follow, &tid, &sub.row.run_id))
}

/// Joins a run's stream: `metadata`, the state it has reached as `values`, then what
/// follows, as `POST .../runs/stream` (where the SDKs reconnect after a cut).
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/stream", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id"),
        ("run_id" = String, Path, description = "The run's id")),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn join_stream(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath((tid, rid)): LgPath<(String, String)>,
) -> Result<Response, LgError> {
    let (row, run) = thread_run(&state, &who, &tid, &rid).await?;
    let modes = serde_json::from_str::<Value>(&row.kwargs)
        .ok()
        .and_then(|k| modes(k.get("stream_mode")).ok())
        .map_or(
            Modes {
                values: true,
                ..Modes::default()
            },
            |m| m.0,
        );
    let feed = (!run.status.is_final() && (modes.tuple || modes.messages || modes.updates))
        .then(|| state.runtime.feed().subscribe(&run.id));
    let mut follow = Follow::new(state.clone(), &row, &run, modes, feed);
    let at = match reached(&state, &run).await? {
        Some(s) => s,
        None => {
            let id = rath_session::SessionId::new(&run.input_session);
            state.runtime.sessions().load(&id).await?.session
        }
    };
    follow.start_at(&at);
    Ok(stream_response(follow, &tid, &rid))
}

/// What `wait` and `join` answer for a settled run: its state values; for a failed,
/// timed-out or in-review run `{"__error__": {"error", "message"}}`; for a waiting one the
/// values and `__interrupt__` (the calls to decide); `{}` for a run cancelled before it
/// reached a session.
async fn final_values(state: &AppState, tid: &str, run: &Run) -> Result<Value, LgError> {
    if matches!(
        run.status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::NeedsReview
    ) {
        return Ok(json!({"__error__": convert::run_error(run)}));
    }
    let Some(s) = reached(state, run).await? else {
        return Ok(json!({}));
    };
    let mut v = convert::values(tid, &s);
    if run.status == RunStatus::Waiting {
        v["__interrupt__"] = Value::Array(interrupts(&s));
    }
    Ok(v)
}

/// [`final_values`] as an answer written while it is sent: a run that succeeded or was
/// cancelled answers its session's messages a window of chunks at a time, never held whole
/// (the other answers are small).
async fn final_answer(state: &AppState, tid: &str, run: &Run) -> Result<Answer, LgError> {
    if matches!(run.status, RunStatus::Succeeded | RunStatus::Cancelled)
        && let Some(id) = threads::reached_id(state, run).await?
        && let Some(len) = state.runtime.sessions().stored_len(&id).await?
    {
        return Ok(Answer::values_of(id, len));
    }
    Ok(Answer::value(&final_values(state, tid, run).await?))
}

/// A body that sends a `\n` every heartbeat while the run has not settled, then its final
/// values (JSON parsers skip the leading whitespace; the connection stays alive through
/// proxies meanwhile).
fn waiting_body(state: Arc<AppState>, tid: String, run: RunId) -> Body {
    type Bytestream = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;
    struct W {
        state: Arc<AppState>,
        tid: String,
        run: RunId,
        /// The final answer, once the run settled.
        answer: Option<Bytestream>,
        quiet_since: Instant,
    }
    let w = W {
        state,
        tid,
        run,
        answer: None,
        quiet_since: Instant::now(),
    };
    let stream = futures::stream::unfold(w, |mut w| async move {
        use futures::StreamExt as _;
        loop {
            if let Some(answer) = &mut w.answer {
                let next = answer.next().await?;
                return Some((next, w));
            }
            let answer = match w.state.runtime.runs().get(&w.run).await {
                Ok(run) if settled(run.status) => Some(
                    final_answer(&w.state, &w.tid, &run)
                        .await
                        .unwrap_or_else(|e| Answer::value(&json!({"__error__": {"error": "ServerError", "message": e.0.to_string()}}))),
                ),
                Ok(_) if w.state.shutdown.is_cancelled() => Some(Answer::value(
                    &json!({"__error__": {"error": "ServerShutdown", "message": "the server is shutting down; the run goes on (join it again)"}}),
                )),
                Ok(_) => None,
                Err(e) => Some(Answer::value(
                    &json!({"__error__": {"error": "ServerError", "message": ServerError::from(e).to_string()}}),
                )),
            };
            if let Some(a) = answer {
                let tid = w.tid.clone();
                w.answer = Some(a.into_stream(w.state.clone(), &tid).boxed());
                continue;
            }
            if w.quiet_since.elapsed() >= w.state.config.heartbeat {
                w.quiet_since = Instant::now();
                return Some((Ok(Bytes::from_static(b"\n")), w));
            }
            tokio::select! {
                _ = tokio::time::sleep(w.state.config.poll) => {}
                _ = w.state.shutdown.cancelled() => {}
            }
        }
    });
    Body::from_stream(stream)
}

fn waiting_response(state: Arc<AppState>, tid: &str, rid: &str) -> Response {
    let body = waiting_body(state, tid.to_owned(), RunId(rid.to_owned()));
    run_response(body, "application/json", tid, rid, "join")
}

/// Creates a run and answers its final state values once it settles (see `join`).
#[utoipa::path(post, path = "/threads/{thread_id}/runs/wait", tag = "langgraph",
    request_body = RunCreate, security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, description = "The final state values, or {\"__error__\": {...}}",
            body = Object),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody),
        (status = 409, body = LgErrorBody), (status = 422, body = LgErrorBody)))]
pub(crate) async fn wait(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
    LgJson(req): LgJson<RunCreate>,
) -> Result<Response, LgError> {
    let sub = submit(&state, &who, &tid, req, false).await?;
    Ok(waiting_response(state.clone(), &tid, &sub.row.run_id))
}

/// Waits for a run to settle and answers its final state values: `{"__error__": {...}}`
/// for a failed one, `{}` for one cancelled before it started.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/join", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id"),
        ("run_id" = String, Path, description = "The run's id")),
    responses((status = 200, description = "The final state values", body = Object),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn join(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath((tid, rid)): LgPath<(String, String)>,
) -> Result<Response, LgError> {
    thread_run(&state, &who, &tid, &rid).await?;
    Ok(waiting_response(state.clone(), &tid, &rid))
}

/// Cancels a run that has not finished: 202 with an empty body (409 for a finished run).
/// `action=interrupt` (the default) is the only action; `wait=1` answers once the run has
/// stopped.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/{run_id}/cancel", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id"),
        ("run_id" = String, Path, description = "The run's id"),
        ("wait" = Option<String>, Query, description = "1 or true: answer once it stopped"),
        ("action" = Option<String>, Query, description = "interrupt (rollback is not supported)")),
    responses((status = 202, description = "Cancelled; no body"),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody),
        (status = 409, body = LgErrorBody), (status = 422, body = LgErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath((tid, rid)): LgPath<(String, String)>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, LgError> {
    let Query(q) = query.map_err(|e| LgError(ServerError::BadRequest(e.body_text())))?;
    match q.get("action").map(String::as_str) {
        None | Some("interrupt") => {}
        Some(other) => {
            return Err(unprocessable(format!(
                "action {other:?} is not supported (only interrupt)"
            )));
        }
    }
    let wait = matches!(
        q.get("wait").map(String::as_str),
        Some("1" | "true" | "True")
    );
    let (_, run) = thread_run(&state, &who, &tid, &rid).await?;
    state.runtime.cancel(&run.id).await?;
    if wait {
        let max = state.config.wait_max;
        state.runtime.wait(&run.id, max, state.config.poll).await?;
    }
    Ok(StatusCode::ACCEPTED.into_response())
}
