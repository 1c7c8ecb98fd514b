//! Assistants (the registered workflows) and threads: create, get, state, history.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use rath_runtime::{Run, RunId, RunStatus, WorkflowDef};
use rath_session::{Session, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::body::Answer;
use super::convert;
use super::history::{History, Planned};
use super::{LgError, LgErrorBody, LgJson, LgPath, LgPrincipal, derived_uuid, not_found, rfc3339};
use crate::AppState;
use crate::db::{ThreadRow, ThreadRunRow};

/// An assistant: a registered workflow.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Assistant {
    /// A UUID derived from the workflow's name and definition hash.
    pub assistant_id: String,
    /// The workflow's name.
    pub graph_id: String,
    /// Always `{}` (a workflow takes no per-assistant configuration).
    #[schema(value_type = Object)]
    pub config: Value,
    /// Always `{}`.
    #[schema(value_type = Object)]
    pub context: Value,
    /// `{"created_by": "system", "definition_hash": ...}`.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// The workflow's name.
    pub name: String,
    /// When the server started (RFC 3339).
    pub created_at: String,
    /// When the server started (RFC 3339).
    pub updated_at: String,
    /// Always 1.
    pub version: i64,
    /// Always null.
    pub description: Option<String>,
}

/// A search of the assistants (other keys are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct AssistantSearch {
    /// Only this workflow.
    pub graph_id: Option<String>,
    /// Only this name.
    pub name: Option<String>,
    /// At most this many (default 10).
    pub limit: Option<usize>,
    /// Skip this many.
    pub offset: Option<usize>,
}

fn assistant(state: &AppState, def: &WorkflowDef) -> Assistant {
    let at = rfc3339(state.started_ms);
    Assistant {
        assistant_id: assistant_id(def),
        graph_id: def.name.clone(),
        config: json!({}),
        context: json!({}),
        metadata: json!({"created_by": "system", "definition_hash": def.definition_hash}),
        name: def.name.clone(),
        created_at: at.clone(),
        updated_at: at,
        version: 1,
        description: None,
    }
}

/// The assistant id of a workflow.
pub(crate) fn assistant_id(def: &WorkflowDef) -> String {
    derived_uuid(&["assistant", &def.name, &def.definition_hash])
}

/// The workflow an assistant id or graph id names.
pub(crate) fn resolve<'a>(state: &'a AppState, id: &str) -> Option<&'a WorkflowDef> {
    let reg = state.runtime.registry();
    reg.get(id).or_else(|| {
        reg.names()
            .into_iter()
            .filter_map(|n| reg.get(n))
            .find(|d| assistant_id(d) == id)
    })
}

/// Lists the assistants: every registered workflow, by name.
#[utoipa::path(post, path = "/assistants/search", tag = "langgraph",
    request_body = AssistantSearch, security(("api_key" = [])),
    responses((status = 200, body = Vec<Assistant>),
        (status = 401, body = LgErrorBody), (status = 422, body = LgErrorBody)))]
pub(crate) async fn search_assistants(
    State(state): State<Arc<AppState>>,
    _who: LgPrincipal,
    LgJson(q): LgJson<AssistantSearch>,
) -> Result<axum::Json<Vec<Assistant>>, LgError> {
    let reg = state.runtime.registry();
    let mut names = reg.names();
    names.sort_unstable();
    let out = names
        .into_iter()
        .filter_map(|n| reg.get(n))
        .filter(|d| q.graph_id.as_deref().is_none_or(|g| g == d.name))
        .filter(|d| q.name.as_deref().is_none_or(|g| g == d.name))
        .skip(q.offset.unwrap_or(0))
        .take(q.limit.unwrap_or(10))
        .map(|d| assistant(&state, d))
        .collect();
    Ok(axum::Json(out))
}

/// One assistant, by assistant id or graph id.
#[utoipa::path(get, path = "/assistants/{assistant_id}", tag = "langgraph",
    security(("api_key" = [])),
    params(("assistant_id" = String, Path, description = "An assistant id or a graph id")),
    responses((status = 200, body = Assistant),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn get_assistant(
    State(state): State<Arc<AppState>>,
    _who: LgPrincipal,
    LgPath(id): LgPath<String>,
) -> Result<axum::Json<Assistant>, LgError> {
    let def = resolve(&state, &id).ok_or_else(|| not_found("assistant", &id))?;
    Ok(axum::Json(assistant(&state, def)))
}

/// A thread as LangGraph shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Thread {
    /// Its id.
    pub thread_id: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// The last time a run was added (RFC 3339).
    pub updated_at: String,
    /// The same as `updated_at`.
    pub state_updated_at: String,
    /// The metadata given at creation.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// `idle`, `busy` (a run is pending or running), `interrupted` (its run waits for a
    /// decision) or `error` (its newest run failed).
    pub status: String,
    /// Always `{}`.
    #[schema(value_type = Object)]
    pub config: Value,
    /// The state values, null before the first run produced one.
    #[schema(value_type = Option<Object>)]
    pub values: Value,
    /// The pending interrupts by task, `{}` when none.
    #[schema(value_type = Object)]
    pub interrupts: Value,
    /// The newest run's error, when it failed.
    #[schema(value_type = Option<Object>)]
    pub error: Value,
}

/// A new thread (other keys are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ThreadCreate {
    /// The id to give it (a fresh UUID when absent).
    pub thread_id: Option<String>,
    /// Free-form metadata, an object.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// What to do when `thread_id` exists: `raise` (409, the default) or `do_nothing`
    /// (answer the existing thread).
    pub if_exists: Option<String>,
}

/// A thread and its runs, each with the runtime's view of it.
pub(crate) struct Loaded {
    pub(crate) row: ThreadRow,
    pub(crate) runs: Vec<(ThreadRunRow, Run)>,
}

/// Thread `id` of `tenant` with its runs; 404 for an unknown id and for another tenant's.
pub(crate) async fn load(state: &AppState, tenant: &str, id: &str) -> Result<Loaded, LgError> {
    let row = state
        .db
        .thread(tenant, id)
        .await?
        .ok_or_else(|| not_found("thread", id))?;
    let mut runs = Vec::new();
    for r in state.db.thread_runs(tenant, id).await? {
        // A row whose submission failed after it was recorded has no run: it never ran.
        match state.runtime.runs().get(&RunId(r.run_id.clone())).await {
            Ok(run) => runs.push((r, run)),
            Err(rath_runtime::RuntimeError::NoSuchRun(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Loaded { row, runs })
}

/// The session a run has reached: its output session, or else the newest session it
/// wrote (the worker stores a run's sessions as they grow): while it runs, and for a run
/// that failed or was cancelled on the way. `None` for a run that never started.
pub(crate) async fn reached(state: &AppState, run: &Run) -> Result<Option<Session>, LgError> {
    match reached_id(state, run).await? {
        None => Ok(None),
        Some(id) => match state.runtime.sessions().load(&id).await {
            Ok(l) => Ok(Some(l.session)),
            Err(rath_persist::PersistError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        },
    }
}

/// The id of the session [`reached`] loads, without loading it (it may not be stored).
pub(crate) async fn reached_id(state: &AppState, run: &Run) -> Result<Option<SessionId>, LgError> {
    if let Some(s) = &run.output_session {
        return Ok(Some(SessionId::new(s)));
    }
    let events = state.runtime.runs().events(&run.id, 0).await?;
    Ok(events
        .iter()
        .rev()
        .filter(|e| e.kind == "session")
        .find_map(|e| {
            serde_json::from_str::<Value>(&e.detail)
                .ok()?
                .get("session")?
                .as_str()
                .map(SessionId::new)
        }))
}

/// A checkpoint's address.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Checkpoint {
    /// The thread.
    pub thread_id: String,
    /// Always `""` (no subgraphs).
    pub checkpoint_ns: String,
    /// The checkpoint's id (null for a thread with no state yet).
    pub checkpoint_id: Option<String>,
}

/// A thread's state at one checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ThreadState {
    /// The state values: `{"messages": [...]}`.
    #[schema(value_type = Object)]
    pub values: Value,
    /// The workflow still to run from here (`[]` once its run settled).
    pub next: Vec<String>,
    /// Always `[]`.
    #[schema(value_type = Vec<Object>)]
    pub tasks: Vec<Value>,
    /// `source` (`input`, `loop`), `step`, `run_id`, `graph_id`, `assistant_id`,
    /// `session_id` (the session this state is, or is a prefix of).
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// When the run reached it (RFC 3339): its submission for an input, its newest event
    /// for a step.
    pub created_at: Option<String>,
    /// This checkpoint.
    pub checkpoint: Checkpoint,
    /// The one before it.
    pub parent_checkpoint: Option<Checkpoint>,
    /// The calls waiting for a decision here (`{"value": {...}, "id": call_id}`).
    #[schema(value_type = Vec<Object>)]
    pub interrupts: Vec<Value>,
    /// The same as `checkpoint.checkpoint_id`.
    pub checkpoint_id: Option<String>,
    /// The same as `parent_checkpoint.checkpoint_id`.
    pub parent_checkpoint_id: Option<String>,
}

/// The pending calls of a session as LangGraph interrupts.
pub(crate) fn interrupts(s: &Session) -> Vec<Value> {
    s.pending()
        .iter()
        .map(|p| {
            json!({"value": {"call_id": p.call.id, "tool": p.call.function.name,
                "arguments": p.call.function.arguments, "agent": p.agent, "reason": p.reason},
                "id": p.call.id})
        })
        .collect()
}

/// The state of a thread with no checkpoint yet.
fn empty_state(tid: &str) -> ThreadState {
    ThreadState {
        values: json!({}),
        next: Vec::new(),
        tasks: Vec::new(),
        metadata: json!({}),
        created_at: None,
        checkpoint: Checkpoint {
            thread_id: tid.to_owned(),
            checkpoint_ns: String::new(),
            checkpoint_id: None,
        },
        parent_checkpoint: None,
        interrupts: Vec::new(),
        checkpoint_id: None,
        parent_checkpoint_id: None,
    }
}

fn thread_status(t: &Loaded) -> &'static str {
    match t.runs.last().map(|(_, r)| r.status) {
        Some(RunStatus::Queued | RunStatus::Running) => "busy",
        Some(RunStatus::Waiting) => "interrupted",
        Some(RunStatus::Failed | RunStatus::TimedOut | RunStatus::NeedsReview) => "error",
        _ => "idle",
    }
}

async fn thread_view(state: &Arc<AppState>, t: &Loaded) -> Result<Response, LgError> {
    let latest = History::of(state, t).await?.latest();
    let mut interrupts = json!({});
    if let (Some(s), Some((_, run))) = (latest.as_ref(), t.runs.last())
        && !s.state.interrupts.is_empty()
    {
        interrupts[run.id.as_str()] = Value::Array(s.state.interrupts.clone());
    }
    let error = match t.runs.last() {
        Some((_, r))
            if matches!(
                r.status,
                RunStatus::Failed | RunStatus::TimedOut | RunStatus::NeedsReview
            ) =>
        {
            convert::run_error(r)
        }
        _ => Value::Null,
    };
    let updated = rfc3339(t.row.updated_ms);
    let thread = Thread {
        thread_id: t.row.thread_id.clone(),
        created_at: rfc3339(t.row.created_ms),
        updated_at: updated.clone(),
        state_updated_at: updated,
        metadata: serde_json::from_str(&t.row.metadata).unwrap_or_else(|_| json!({})),
        status: thread_status(t).to_owned(),
        config: json!({}),
        values: Value::Null,
        interrupts,
        error,
    };
    Ok(Answer::thread(thread, latest)?.into_response(state.clone(), &t.row.thread_id))
}

/// Creates a thread of the key's tenant.
#[utoipa::path(post, path = "/threads", tag = "langgraph", request_body = ThreadCreate,
    security(("api_key" = [])),
    responses((status = 200, body = Thread),
        (status = 401, body = LgErrorBody), (status = 409, body = LgErrorBody),
        (status = 422, body = LgErrorBody)))]
pub(crate) async fn create_thread(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgJson(req): LgJson<ThreadCreate>,
) -> Result<Response, LgError> {
    let metadata = match req.metadata {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) => m,
        Some(_) => return Err(super::unprocessable("metadata is an object")),
    };
    let raise = match req.if_exists.as_deref() {
        None | Some("raise") => true,
        Some("do_nothing") => false,
        Some(other) => {
            return Err(super::unprocessable(format!(
                "if_exists {other:?} (raise, do_nothing)"
            )));
        }
    };
    let id = match req.thread_id {
        Some(id) if id.trim().is_empty() || id.len() > 128 || id.chars().any(char::is_control) => {
            return Err(super::unprocessable(
                "a thread id is 1 to 128 characters, none a control character",
            ));
        }
        Some(id) => id,
        None => derived_uuid(&["thread", &state.config.stamper.next_token("thread")]),
    };
    let (row, created) = state
        .db
        .create_thread(&who.tenant, &id, &metadata.to_string())
        .await?;
    if !created && raise {
        return Err(LgError(crate::ServerError::Conflict(format!(
            "thread {id} exists"
        ))));
    }
    let t = load(&state, &who.tenant, &row.thread_id).await?;
    thread_view(&state, &t).await
}

/// A thread of the key's tenant (404 for an unknown id and for another tenant's).
#[utoipa::path(get, path = "/threads/{thread_id}", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, body = Thread),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn get_thread(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
) -> Result<Response, LgError> {
    let t = load(&state, &who.tenant, &tid).await?;
    thread_view(&state, &t).await
}

/// The thread's newest state.
#[utoipa::path(get, path = "/threads/{thread_id}/state", tag = "langgraph",
    security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, body = ThreadState),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody)))]
pub(crate) async fn get_state(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
) -> Result<Response, LgError> {
    let t = load(&state, &who.tenant, &tid).await?;
    let latest = History::of(&state, &t).await?.latest();
    let latest = latest.unwrap_or_else(|| Planned {
        state: empty_state(&tid),
        messages: None,
    });
    Ok(Answer::one_state(latest)?.into_response(state.clone(), &tid))
}

/// Which states of the history to answer (other keys are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct HistoryRequest {
    /// At most this many (default 10).
    pub limit: Option<usize>,
    /// Only states older than this checkpoint: its id, or `{"checkpoint_id": ...}`, or
    /// `{"configurable": {"checkpoint_id": ...}}`.
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// Only states whose metadata has these keys with these values.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
}

fn checkpoint_id_of(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("checkpoint_id").and_then(Value::as_str))
        .or_else(|| {
            v.get("configurable")
                .and_then(|c| c.get("checkpoint_id"))
                .and_then(Value::as_str)
        })
}

/// The thread's states, newest first.
#[utoipa::path(post, path = "/threads/{thread_id}/history", tag = "langgraph",
    request_body = HistoryRequest, security(("api_key" = [])),
    params(("thread_id" = String, Path, description = "The thread's id")),
    responses((status = 200, body = Vec<ThreadState>),
        (status = 401, body = LgErrorBody), (status = 404, body = LgErrorBody),
        (status = 422, body = LgErrorBody)))]
pub(crate) async fn history(
    State(state): State<Arc<AppState>>,
    LgPrincipal(who): LgPrincipal,
    LgPath(tid): LgPath<String>,
    LgJson(req): LgJson<HistoryRequest>,
) -> Result<Response, LgError> {
    let t = load(&state, &who.tenant, &tid).await?;
    let history = History::of(&state, &t).await?;
    // Only the states answered are built: what a call costs follows what it returns, not
    // how many steps the thread has.
    let end = match req.before.as_ref().and_then(checkpoint_id_of) {
        Some(before) => history
            .position(before)
            .ok_or_else(|| not_found("checkpoint", before))?,
        None => history.len(),
    };
    let filter = match &req.metadata {
        Some(Value::Object(f)) => Some(f),
        _ => None,
    };
    let planned = history.newest_first(end, req.limit.unwrap_or(10), filter);
    Ok(Answer::states(planned)?.into_response(state.clone(), &tid))
}
