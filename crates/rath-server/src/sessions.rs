//! The sessions API: list, create, get, chunks, lineage of a tree, fork, detach, merge and
//! export, each scoped to the key's tenant (another tenant's ids are 404).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rath_persist::{LineageRow, LoadedSession, SessionSummary};
use rath_session::{MergeStrategy, Session, SessionError, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::cache::RenderKey;
use crate::db::Principal;
use crate::error::ErrorBody;
use crate::extract::{ApiJson, ApiPath, ApiQuery, decode_cursor, encode_cursor, page_size};
use crate::{AppState, ServerError};

/// Filters and paging of the session listing.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    /// At most this many rows (1..=500, default 50).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only sessions of this lineage kind (`leaf_user`, `op_fork`, ...).
    pub kind: Option<String>,
    /// Only sessions made by this operator (`Session.fork`, ...).
    pub operator: Option<String>,
    /// Only sessions in this status (`closed`, `open`, `failed`, `cancelled`).
    pub status: Option<String>,
    /// Only direct children of this session.
    pub parent: Option<String>,
}

/// One row of the session listing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionRow {
    /// The session's id.
    pub id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Its parents' ids.
    pub parents: Vec<String>,
    /// The operator that made it.
    pub operator: String,
    /// Its lineage kind.
    pub kind: String,
    /// Conversation chunks (what Python OpenRath counts).
    pub chunk_count: u64,
    /// Evidence chunks.
    pub evidence_count: u64,
    /// `closed`, `open`, `failed` or `cancelled` (the session ends in a failure record, of
    /// kind `cancelled` for the latter).
    pub status: String,
    /// Cumulative token usage, when counted.
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
}

/// A page of the session listing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionPage {
    /// The rows, oldest first.
    pub sessions: Vec<SessionRow>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A session: header, usage, lineage, pending calls and a first page of chunks.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionDetail {
    /// The session's id.
    pub id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// `closed`, `open`, `failed` or `cancelled` (the session ends in a failure record, of
    /// kind `cancelled` for the latter).
    pub status: String,
    /// Its lineage row, in Python OpenRath's field names.
    #[schema(value_type = Object)]
    pub lineage: Value,
    /// Cumulative usage, when counted.
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
    /// Usage per agent.
    #[schema(value_type = Object)]
    pub agent_usage: Value,
    /// The backend its tools run on, when placed.
    pub backend: Option<String>,
    /// All chunks (conversation and evidence).
    pub chunks_total: usize,
    /// Tool calls waiting for a decision.
    pub pending: Vec<PendingView>,
    /// The first page of chunks.
    pub chunks: ChunkPage,
}

/// A tool call waiting for approval.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PendingView {
    /// The call id (what a decision names).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments as the model wrote them (JSON text).
    pub arguments: String,
    /// The agent that stopped on it.
    pub agent: Option<String>,
    /// Why it waits (`require_approval`, ...).
    pub reason: String,
}

/// One chunk and its position.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChunkView {
    /// Its index in the session.
    pub index: usize,
    /// The chunk document (`{"kind", "payload"}`, as the stores keep it).
    #[schema(value_type = Object)]
    pub chunk: Value,
}

/// A page of chunks.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChunkPage {
    /// The chunks, in order.
    pub chunks: Vec<ChunkView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Paging of chunks.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChunkQuery {
    /// At most this many chunks (1..=500, default 50).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A new session: one user message, optionally placed on a backend.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    /// The user message it starts with.
    pub input: String,
    /// The sandbox backend its tools are to run on (`local`, `isolated`, ...).
    pub backend: Option<String>,
}

/// What to merge into the session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    /// The other session's id.
    pub other: String,
    /// `concat` (default: this session then the other) or `shared_prefix`.
    pub strategy: Option<String>,
}

/// The lineage format.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LineageQuery {
    /// `jsonl` (default, Python OpenRath's export rows), `dot` or `mermaid`.
    pub format: Option<String>,
}

fn status_of(closed: bool, failure: Option<&rath_session::RunFailure>) -> &'static str {
    if failure.is_some_and(rath_session::RunFailure::is_cancellation) {
        "cancelled"
    } else if failure.is_some() {
        "failed"
    } else if closed {
        "closed"
    } else {
        "open"
    }
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn row_of(s: &SessionSummary) -> SessionRow {
    SessionRow {
        id: s.id.as_str().to_owned(),
        created_at: s.created_at.to_string(),
        parents: s.parents.iter().map(|p| p.as_str().to_owned()).collect(),
        operator: s.operator.clone(),
        kind: s.kind.as_str().to_owned(),
        chunk_count: s.chunk_count,
        evidence_count: s.evidence_count,
        status: status_of(s.closed, s.failure.as_ref()).to_owned(),
        usage: s.usage.as_ref().map(to_json),
    }
}

/// The summaries of the tenant's sessions, in store order (oldest first).
async fn summaries(state: &AppState, tenant: &str) -> Result<Vec<SessionSummary>, ServerError> {
    let owned = state.db.sessions_of(tenant).await?;
    let all = state.runtime.sessions().list().await?;
    Ok(all
        .into_iter()
        .filter(|s| owned.contains(s.id.as_str()))
        .collect())
}

/// Loads session `id` when the tenant owns it; 404 otherwise (whether it exists or not).
pub(crate) async fn load_owned(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> Result<LoadedSession, ServerError> {
    let not_found = || ServerError::NotFound {
        what: "session",
        id: id.to_owned(),
    };
    if !state.db.owns_session(tenant, id).await? {
        return Err(not_found());
    }
    match state.runtime.sessions().load(&SessionId::new(id)).await {
        Ok(l) => Ok(l),
        Err(rath_persist::PersistError::NotFound { .. }) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// The JSON answer `render` makes of the tenant's session `id` (404 when it is not the
/// tenant's or not stored), from the render cache while one read of the session store
/// says the session is as it was rendered; a store that cannot say renders every time.
async fn cached_answer(
    state: &AppState,
    key: RenderKey,
    render: impl FnOnce(&LoadedSession) -> Result<Vec<u8>, ServerError>,
) -> Result<Response, ServerError> {
    let not_found = || ServerError::NotFound {
        what: "session",
        id: key.id.clone(),
    };
    if !state.db.owns_session(&key.tenant, &key.id).await? {
        return Err(not_found());
    }
    let sid = SessionId::new(key.id.as_str());
    let revision = match state.revisions.read(state.runtime.sessions(), &sid).await {
        Ok(Some(r)) => Some(r),
        Ok(None) => return Err(not_found()),
        Err(rath_persist::PersistError::Unsupported { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(rev) = &revision
        && let Some(body) = state.rendered.get(&key, rev)
    {
        return Ok(json_bytes(body));
    }
    // The revision was read first: a write between it and this load leaves an entry whose
    // revision is already old, so the next request renders again; never the reverse.
    let loaded = match state.runtime.sessions().load(&sid).await {
        Ok(l) => l,
        Err(rath_persist::PersistError::NotFound { .. }) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let body = Bytes::from(render(&loaded)?);
    if let Some(rev) = revision {
        state.rendered.put(key, rev, body.clone());
    }
    Ok(json_bytes(body))
}

fn json_bytes(body: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn to_vec<T: Serialize>(v: &T) -> Result<Vec<u8>, ServerError> {
    serde_json::to_vec(v).map_err(|e| ServerError::Db(format!("rendering an answer: {e}")))
}

fn matches(q: &SessionQuery, s: &SessionSummary) -> bool {
    q.kind.as_deref().is_none_or(|k| s.kind.as_str() == k)
        && q.operator.as_deref().is_none_or(|o| s.operator == o)
        && q.status
            .as_deref()
            .is_none_or(|st| status_of(s.closed, s.failure.as_ref()) == st)
        && q.parent
            .as_deref()
            .is_none_or(|p| s.parents.iter().any(|x| x.as_str() == p))
}

/// Lists the tenant's sessions, oldest first, filtered and paged.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(SessionQuery),
    security(("bearer" = [])),
    responses((status = 200, body = SessionPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiQuery(q): ApiQuery<SessionQuery>,
) -> Result<axum::Json<SessionPage>, ServerError> {
    let limit = page_size(q.limit)?;
    let after = q
        .cursor
        .as_deref()
        .map(|c| decode_cursor("sessions", c))
        .transpose()?;
    let rows = summaries(&state, &who.tenant).await?;
    // The cursor is the (created_at, id) of the last row shown: the store lists in that
    // order, so a session stored meanwhile never shifts a page.
    let key = |s: &SessionSummary| format!("{:020}\n{}", s.created_at.unix_micros(), s.id);
    let mut page: Vec<&SessionSummary> = rows
        .iter()
        .filter(|s| after.as_deref().is_none_or(|a| key(s).as_str() > a))
        .filter(|s| matches(&q, s))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next_cursor = match (more, page.last()) {
        (true, Some(last)) => Some(encode_cursor("sessions", &key(last))),
        _ => None,
    };
    Ok(axum::Json(SessionPage {
        sessions: page.into_iter().map(row_of).collect(),
        next_cursor,
    }))
}

/// Creates a session holding one user message.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = NewSession,
    security(("bearer" = [])),
    responses((status = 201, body = SessionDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiJson(req): ApiJson<NewSession>,
) -> Result<(StatusCode, axum::Json<SessionDetail>), ServerError> {
    let mut s = Session::user_with(req.input, state.config.stamper.clone());
    if let Some(b) = req.backend {
        if b.trim().is_empty() {
            return Err(ServerError::BadRequest("an empty backend name".into()));
        }
        s = s.to(b);
    }
    store_new(&state, &who, &s).await
}

/// Records `s` as the tenant's, stores it and answers 201 with it.
async fn store_new(
    state: &AppState,
    who: &Principal,
    s: &Session,
) -> Result<(StatusCode, axum::Json<SessionDetail>), ServerError> {
    // Ownership first: a crash between the two leaves an owned id with no session (a 404),
    // never a stored session nobody can reach.
    state.db.own_session(&who.tenant, s.id().as_str()).await?;
    state.runtime.sessions().save(s).await?;
    let loaded = state.runtime.sessions().load(s.id()).await?;
    Ok((StatusCode::CREATED, axum::Json(detail(&loaded, 0, 50)?)))
}

fn chunk_page(s: &Session, from: usize, limit: usize) -> Result<ChunkPage, ServerError> {
    let mut chunks = Vec::new();
    for (index, c) in s.chunks().iter().enumerate().skip(from).take(limit) {
        let doc = rath_persist::doc::encode_chunk(c)?;
        let chunk = serde_json::from_slice(&doc)
            .map_err(|e| ServerError::Db(format!("chunk document: {e}")))?;
        chunks.push(ChunkView { index, chunk });
    }
    let end = from.saturating_add(limit);
    let next_cursor = (end < s.len()).then(|| encode_cursor("chunks", &end.to_string()));
    Ok(ChunkPage {
        chunks,
        next_cursor,
    })
}

fn detail(l: &LoadedSession, from: usize, limit: usize) -> Result<SessionDetail, ServerError> {
    let s = &l.session;
    let pending = s
        .pending()
        .iter()
        .map(|p| PendingView {
            call_id: p.call.id.clone(),
            tool: p.call.function.name.clone(),
            arguments: p.call.function.arguments.clone(),
            agent: p.agent.clone(),
            reason: p.reason.clone(),
        })
        .collect();
    Ok(SessionDetail {
        id: s.id().as_str().to_owned(),
        created_at: l.created_at.to_string(),
        status: status_of(l.closed, s.failure()).to_owned(),
        lineage: to_json(&LineageRow::from_session(s)),
        usage: s.usage().as_ref().map(to_json),
        agent_usage: to_json(s.agent_usage()),
        backend: s.placement().backend().map(str::to_owned),
        chunks_total: s.len(),
        pending,
        chunks: chunk_page(s, from, limit)?,
    })
}

/// A session of the tenant: header, usage, lineage, pending calls, first chunks.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", security(("bearer" = [])),
    params(("id" = String, Path, description = "The session's id"), ChunkQuery),
    responses((status = 200, body = SessionDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ChunkQuery>,
) -> Result<Response, ServerError> {
    let limit = page_size(q.limit)?;
    let from = chunk_from(q.cursor.as_deref())?;
    let key = RenderKey {
        route: "session",
        tenant: who.tenant,
        id,
        from,
        limit,
    };
    cached_answer(&state, key, |l| to_vec(&detail(l, from, limit)?)).await
}

fn chunk_from(cursor: Option<&str>) -> Result<usize, ServerError> {
    match cursor {
        None => Ok(0),
        Some(c) => decode_cursor("chunks", c)?
            .parse()
            .map_err(|_| ServerError::BadRequest(format!("bad cursor {c:?}"))),
    }
}

/// A page of a session's chunks.
#[utoipa::path(get, path = "/v1/sessions/{id}/chunks", tag = "sessions",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The session's id"), ChunkQuery),
    responses((status = 200, body = ChunkPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn chunks(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ChunkQuery>,
) -> Result<Response, ServerError> {
    let limit = page_size(q.limit)?;
    let from = chunk_from(q.cursor.as_deref())?;
    let key = RenderKey {
        route: "chunks",
        tenant: who.tenant,
        id,
        from,
        limit,
    };
    cached_answer(&state, key, |l| {
        to_vec(&chunk_page(&l.session, from, limit)?)
    })
    .await
}

/// The rows of the tree `id` is in: every session of the tenant connected to it through
/// parent links, in store order.
fn tree_rows(rows: Vec<LineageRow>, id: &str) -> Vec<LineageRow> {
    let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in &rows {
        for p in &r.parent_session_ids {
            adj.entry(r.id.as_str()).or_default().push(p.as_str());
            adj.entry(p.as_str()).or_default().push(r.id.as_str());
        }
    }
    let mut seen: BTreeSet<&str> = BTreeSet::from([id]);
    let mut todo = vec![id];
    while let Some(n) = todo.pop() {
        for m in adj.get(n).into_iter().flatten() {
            if seen.insert(m) {
                todo.push(m);
            }
        }
    }
    let keep: BTreeSet<String> = seen.into_iter().map(str::to_owned).collect();
    rows.into_iter()
        .filter(|r| keep.contains(r.id.as_str()))
        .collect()
}

/// The lineage of the tree a session is in, as Python OpenRath's JSONL export rows, DOT or
/// Mermaid.
#[utoipa::path(get, path = "/v1/sessions/{id}/lineage", tag = "sessions",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "Any session of the tree"), LineageQuery),
    responses((status = 200, description = "The rendering: JSONL, DOT or Mermaid text",
            content((String = "application/x-ndjson"), (String = "text/vnd.graphviz"),
                (String = "text/plain"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn lineage(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<LineageQuery>,
) -> Result<impl IntoResponse, ServerError> {
    let format = q.format.as_deref().unwrap_or("jsonl");
    let content_type = match format {
        "jsonl" => "application/x-ndjson",
        "dot" => "text/vnd.graphviz",
        "mermaid" => "text/plain; charset=utf-8",
        other => {
            return Err(ServerError::BadRequest(format!(
                "unknown lineage format {other:?} (jsonl, dot, mermaid)"
            )));
        }
    };
    if !state.db.owns_session(&who.tenant, &id).await? {
        return Err(ServerError::NotFound {
            what: "session",
            id,
        });
    }
    let all: Vec<LineageRow> = summaries(&state, &who.tenant)
        .await?
        .iter()
        .map(SessionSummary::lineage_row)
        .collect();
    let rows = tree_rows(all, &id);
    let body = match format {
        "jsonl" => rath_persist::export_jsonl_string(&rows),
        "dot" => rath_persist::to_dot(&rows),
        _ => rath_persist::to_mermaid(&rows),
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body))
}

/// Forks a session (O(1): the fork shares its chunks); the fork is the tenant's.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The session to fork")),
    responses((status = 201, body = SessionDetail),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn fork(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, axum::Json<SessionDetail>), ServerError> {
    let l = load_owned(&state, &who.tenant, &id).await?;
    let f = l.session.with_stamper(state.config.stamper.clone()).fork();
    store_new(&state, &who, &f).await
}

/// Detaches a session: the same chunks with no parents.
#[utoipa::path(post, path = "/v1/sessions/{id}/detach", tag = "sessions",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The session to detach")),
    responses((status = 201, body = SessionDetail),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn detach(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, axum::Json<SessionDetail>), ServerError> {
    let l = load_owned(&state, &who.tenant, &id).await?;
    let d = l
        .session
        .with_stamper(state.config.stamper.clone())
        .detach();
    store_new(&state, &who, &d).await
}

/// Merges another session of the tenant into this one; the strict placement rule's refusal
/// is a 409 with its reason.
#[utoipa::path(post, path = "/v1/sessions/{id}/merge", tag = "sessions",
    security(("bearer" = [])), request_body = MergeRequest,
    params(("id" = String, Path, description = "The left session")),
    responses((status = 201, body = SessionDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn merge(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MergeRequest>,
) -> Result<(StatusCode, axum::Json<SessionDetail>), ServerError> {
    let strategy = match req.strategy.as_deref() {
        None | Some("concat") => MergeStrategy::Concat,
        Some("shared_prefix") => MergeStrategy::SharedPrefix,
        Some(other) => {
            return Err(ServerError::BadRequest(format!(
                "unknown merge strategy {other:?} (concat, shared_prefix)"
            )));
        }
    };
    let left = load_owned(&state, &who.tenant, &id).await?;
    let right = load_owned(&state, &who.tenant, &req.other).await?;
    let merged = left
        .session
        .with_stamper(state.config.stamper.clone())
        .merge_with(&right.session, strategy)
        .map_err(|e| match e {
            SessionError::MergeRefused { .. } => ServerError::Conflict(e.to_string()),
            other => ServerError::BadRequest(other.to_string()),
        })?;
    store_new(&state, &who, &merged).await
}

/// The session as a Python OpenRath JSONL session file (header, chunk records, trailer):
/// the bytes the JSONL store writes for it.
#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "sessions",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The session's id")),
    responses((status = 200, description = "The session file", body = String,
        content_type = "application/x-ndjson"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn export(
    State(state): State<Arc<AppState>>,
    who: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<impl IntoResponse, ServerError> {
    let loaded = load_owned(&state, &who.tenant, &id).await?;
    let bytes = export_bytes(&loaded).await?;
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], bytes))
}

/// Writes the session through the JSONL store into a scratch directory and reads the file
/// back: the one writer of the format, so the bytes are the store's own. (The JSONL store
/// does its small file I/O inline.)
async fn export_bytes(loaded: &LoadedSession) -> Result<Vec<u8>, ServerError> {
    let dir = tempfile::tempdir()?;
    let store = rath_persist::Store::at(dir.path());
    rath_persist::SessionStore::restore(&store, loaded).await?;
    let mut files = std::fs::read_dir(dir.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file());
    let path = files
        .next()
        .ok_or_else(|| ServerError::Db("export wrote no file".into()))?;
    Ok(std::fs::read(path)?)
}
