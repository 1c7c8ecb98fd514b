//! **rath-server**: the agent server. Sessions and durable runs over HTTP (axum), API keys
//! scoped to a tenant, run events as Server-Sent Events, Prometheus metrics and an OpenAPI
//! document generated from the handlers.
//!
//! ```
//! use rath_runtime::WorkflowRegistry;
//! use rath_server::{Server, ServerConfig};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store = format!("sqlite:{}", dir.path().join("sessions.db").display());
//! let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
//! let server = Server::connect(&store, &runs, WorkflowRegistry::new(), ServerConfig::default())
//!     .await?;
//! // The first admin key comes from the database side (`rath keys create --admin`).
//! let admin = server.db().create_key("acme", true, "ops").await?;
//! assert!(admin.secret.starts_with("rath_"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let stop = server.shutdown_token();
//! let task = tokio::spawn(server.serve(listener));
//! stop.cancel(); // graceful: in-flight requests finish, SSE streams end, workers hand back
//! task.await??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Routes (every `/v1` route needs `Authorization: Bearer <key>`; see `GET /openapi.json`):
//! - the live viewer: `GET /` (an HTML page that reads the API with a key it is given);
//! - operations: `GET /health/live`, `GET /health/ready` (every store answers),
//!   `GET /metrics` (Prometheus text), `GET /openapi.json`;
//! - keys (admin keys only): `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{id}`;
//! - sessions: `GET|POST /v1/sessions`, `GET /v1/sessions/{id}`, `.../chunks`,
//!   `.../lineage?format=jsonl|dot|mermaid`, `POST .../fork|detach|merge`, `GET .../export`;
//! - runs: `GET|POST /v1/runs`, `GET /v1/runs/{id}`, `POST .../wait|cancel`,
//!   `GET .../events` (SSE, `Last-Event-ID`), `GET .../interrupts`,
//!   `POST .../interrupts/{call_id}`;
//! - the LangGraph-compatible subset ([`langgraph`], `x-api-key` or a bearer key):
//!   `POST /assistants/search`, `GET /assistants/{id}`, `POST /threads`,
//!   `GET /threads/{id}`, `.../state`, `POST .../history`, `GET|POST .../runs`,
//!   `POST .../runs/stream|wait`, `GET .../runs/{run_id}`, `.../join`, `.../stream`,
//!   `POST .../runs/{run_id}/cancel`.
//!
//! **Tenants.** A key belongs to one tenant and reaches only that tenant's sessions and runs:
//! another tenant's id answers 404, exactly as an id that does not exist. Ownership lives in
//! the server's own tables ([`ServerDb`], `sv_*` beside the runtime's `rt_*`); the session
//! store is not changed. **Errors.** Every failure is a [`ServerError`], answered as a status
//! and `{"error": {"kind", "message"}}`; bad input is always a 4xx and a handler that panics
//! answers 500 without taking the server down.

#![warn(missing_docs)]

mod auth;
mod cache;
mod db;
mod error;
mod extract;
pub mod langgraph;
mod listen;
mod metrics;
mod ops;
mod runs;
mod sessions;
mod viewer;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rath_flow::CancellationToken;
use rath_persist::SessionStore;
use rath_runtime::{RunStore, Runtime, Worker, WorkerOptions, WorkflowRegistry};
use rath_session::Stamper;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa::OpenApi;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Admin, RateLimit};
pub use db::{
    KEY_CACHE_TTL, KeyInfo, MIGRATIONS, MintedKey, Principal, SCHEMA_VERSION, ServerDb, key_hash,
};
pub use error::{ErrorBody, ErrorDetail, ServerError};
pub use langgraph::langgraph_messages;
pub use ops::{Health, NewKey};
pub use runs::{Decision, EventData, NewRun, RunPage, RunResult, RunView};
pub use sessions::{
    ChunkPage, ChunkView, MergeRequest, NewSession, PendingView, SessionDetail, SessionPage,
    SessionRow,
};

/// How a server behaves: limits, CORS, ids and clock, embedded workers.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest request body accepted, in bytes (413 above it). Default 1 MiB.
    pub body_limit: usize,
    /// The per-key rate limit (`None`: unlimited).
    pub rate_limit: Option<RateLimit>,
    /// Origins allowed by CORS; empty (the default) sends no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// Ids and clock of the sessions and runs the server makes (inject a seeded stamper
    /// for deterministic ids).
    pub stamper: Stamper,
    /// Worker loops run inside the server process (0: runs wait for `rath worker`).
    pub workers: usize,
    /// The embedded workers' name.
    pub worker_name: String,
    /// How often waits and event streams look at the run store.
    pub poll: Duration,
    /// The longest a `wait` holds a request.
    pub wait_max: Duration,
    /// On shutdown, how long an embedded worker's in-flight runs may go on before they are
    /// handed back to the queue.
    pub grace: Duration,
    /// The silence after which a LangGraph event stream sends a `: heartbeat` comment and a
    /// LangGraph `wait`/`join` a `\n` (default 5 s, as LangGraph's server).
    pub heartbeat: Duration,
    /// How long a key check is trusted before its row is read again ([`KEY_CACHE_TTL`];
    /// see [`ServerDb::key_cache`]).
    pub key_cache: Duration,
    /// Rendered session answers kept in memory at most (0: none kept). Each is served
    /// only while the session store says the session is unchanged.
    pub render_cache_entries: usize,
    /// Bytes of rendered answers kept at most.
    pub render_cache_bytes: usize,
    /// How long a connection may take to send a request's headers, and how long an idle
    /// connection (before its first request or between two) is kept: hyper closes it after
    /// this. Default 10 s. A response being streamed (an event stream) is not cut by it.
    pub header_timeout: Duration,
    /// Connections open at once, at most: past it, new connections wait in the kernel's
    /// accept queue until one closes. Default: the soft file limit less an eighth (at least
    /// 256 descriptors kept for the stores), so no accept fails for want of a descriptor.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            body_limit: 1 << 20,
            rate_limit: None,
            cors_origins: Vec::new(),
            stamper: Stamper::system(),
            workers: 0,
            worker_name: "server".into(),
            poll: Duration::from_millis(50),
            wait_max: Duration::from_secs(60),
            grace: Duration::from_secs(10),
            heartbeat: Duration::from_secs(5),
            key_cache: KEY_CACHE_TTL,
            render_cache_entries: 1024,
            render_cache_bytes: 64 << 20,
            header_timeout: Duration::from_secs(10),
            max_connections: listen::default_max_connections(),
        }
    }
}

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    pub(crate) runtime: Runtime,
    pub(crate) db: ServerDb,
    pub(crate) config: ServerConfig,
    pub(crate) limiter: auth::Limiter,
    pub(crate) metrics: metrics::Metrics,
    pub(crate) shutdown: CancellationToken,
    /// Rendered session answers (see [`ServerConfig::render_cache_entries`]).
    pub(crate) rendered: cache::RenderCache,
    /// The session store's revision reads, coalesced per session.
    pub(crate) revisions: Arc<cache::RevisionReads>,
    /// When the server was made (ms since the Unix epoch; 0 with a deterministic stamper,
    /// so deterministic output stays byte-identical): the assistants' creation time.
    pub(crate) started_ms: i64,
}

/// The agent server: a runtime, the server's tables and its configuration.
#[derive(Clone, Debug)]
pub struct Server {
    state: Arc<AppState>,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "openrath agent server", description = "Sessions and durable runs over HTTP."),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody, ErrorDetail))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

fn api_router() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(ops::live))
        .routes(routes!(ops::ready))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::create_key, ops::list_keys))
        .routes(routes!(ops::revoke_key))
        .routes(routes!(sessions::list, sessions::create))
        .routes(routes!(sessions::get))
        .routes(routes!(sessions::chunks))
        .routes(routes!(sessions::lineage))
        .routes(routes!(sessions::fork))
        .routes(routes!(sessions::detach))
        .routes(routes!(sessions::merge))
        .routes(routes!(sessions::export))
        .routes(routes!(runs::create, runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(runs::wait))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::interrupts))
        .routes(routes!(runs::decide))
        .routes(routes!(runs::events))
        .merge(langgraph::router())
}

/// The OpenAPI document of every route, generated from the handlers (what
/// `GET /openapi.json` serves), with what every route shares written in once: the answers
/// of the key check (401, 429) on every keyed route, those of the JSON body check (400,
/// 413, 415, 422) on every route that takes one, and each event stream described per
/// event (`id`, `event`, and `data` as JSON of the handler's schema).
pub fn openapi() -> serde_json::Value {
    complete(api_router().split_for_parts().1)
}

/// `api` as JSON, with what its routes share written in (see [`openapi`]).
fn complete(api: utoipa::openapi::OpenApi) -> serde_json::Value {
    use serde_json::Value;
    let mut doc = serde_json::to_value(api).unwrap_or_default();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return doc;
    };
    for op in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in op.values_mut().filter_map(Value::as_object_mut) {
            complete_operation(op);
        }
    }
    doc
}

/// Adds to one operation of the OpenAPI document the error answers it shares with others
/// (the key check's on a keyed route, the JSON body check's on a route that takes a body)
/// and describes each of its event streams per event.
fn complete_operation(op: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::{Value, json};
    // The LangGraph-compatible routes answer errors as `{"detail"}`, read any content type
    // as JSON (no 415) and refuse a bad path or query with a 400.
    let error = |what: &str, schema: &str| {
        json!({"description": what, "content": {"application/json": {
            "schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
    };
    let keyed = [
        ("401", "No key, or an unknown or revoked key"),
        (
            "429",
            "The key's rate limit is spent (`Retry-After` says when to retry)",
        ),
    ];
    let with_body = [
        ("400", "The body is not JSON"),
        ("413", "The body is over the server's limit"),
        ("415", "The body is not `application/json`"),
        ("422", "JSON of the wrong shape"),
    ];
    let secured = op
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let body = op.contains_key("requestBody");
    let lg = op
        .get("tags")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t == "langgraph"));
    let schema = if lg { "LgErrorBody" } else { "ErrorBody" };
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    let bad_path = ("400", "A path or query parameter that is not one");
    let shared = keyed
        .iter()
        .filter(|_| secured)
        .chain(with_body.iter().filter(|_| body))
        .chain(std::iter::once(&bad_path).filter(|_| lg && secured))
        .filter(|(status, _)| !(lg && *status == "415"));
    for (status, what) in shared {
        responses
            .entry(status.to_string())
            .or_insert_with(|| error(what, schema));
    }
    for response in responses.values_mut() {
        describe_event_stream(response);
    }
}

/// Describes an event stream answer (`text/event-stream`) per event: `id`, `event`, and
/// `data` as JSON of the schema the handler gave the stream. Other answers are left as
/// they are.
fn describe_event_stream(response: &mut serde_json::Value) {
    use serde_json::{Value, json};
    let Some(stream) = response
        .pointer_mut("/content/text~1event-stream")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let data = stream.remove("schema").unwrap_or(json!({}));
    stream.insert(
        "schema".into(),
        json!({
            "type": "object",
            "required": ["data"],
            "properties": {
                "id": {"type": "string", "description": "The event's id (`Last-Event-ID`)"},
                "event": {"type": "string", "description": "The event's kind"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": data,
                },
            },
        }),
    );
}

async fn not_found() -> Response {
    error::error_response(StatusCode::NOT_FOUND, "not_found", "no such route".into())
}

async fn method_not_allowed() -> Response {
    error::error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method".into(),
    )
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a handler panicked");
    error::error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the server failed".into(),
    )
}

fn cors(origins: &[String]) -> Result<CorsLayer, ServerError> {
    let list = origins
        .iter()
        .map(|o| {
            HeaderValue::from_str(o)
                .map_err(|_| ServerError::BadRequest(format!("bad CORS origin {o:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CorsLayer::new()
        .allow_origin(AllowOrigin::list(list))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("last-event-id"),
            HeaderName::from_static("x-api-key"),
        ]))
}

impl Server {
    /// A server over `runtime` with the server's tables `db`.
    pub fn new(runtime: Runtime, db: ServerDb, config: ServerConfig) -> Self {
        Self {
            state: Arc::new(AppState {
                runtime,
                db: db.key_cache(config.key_cache),
                rendered: cache::RenderCache::new(
                    config.render_cache_entries,
                    config.render_cache_bytes,
                ),
                revisions: Arc::default(),
                limiter: auth::Limiter::default(),
                metrics: metrics::Metrics::default(),
                shutdown: CancellationToken::new(),
                started_ms: if config.stamper.is_deterministic() {
                    0
                } else {
                    rath_runtime::now_ms()
                },
                config,
            }),
        }
    }

    /// Opens the session store at `store_url` (any `rath_store_sql::open_store` URL), the
    /// run store and the server's tables at `runs_url` (`sqlite:<file>` or
    /// `postgres://...`), and makes a server running `registry`'s workflows.
    pub async fn connect(
        store_url: &str,
        runs_url: &str,
        registry: WorkflowRegistry,
        config: ServerConfig,
    ) -> Result<Self, ServerError> {
        let sessions: Arc<dyn SessionStore> =
            Arc::from(rath_store_sql::open_store(store_url).await?);
        let runs = RunStore::connect(runs_url).await?;
        let db = ServerDb::connect(runs_url).await?;
        Ok(Self::new(
            Runtime::new(runs, sessions, registry),
            db,
            config,
        ))
    }

    /// The server's tables (keys, tenant ownership).
    pub fn db(&self) -> &ServerDb {
        &self.state.db
    }

    /// The runtime the server submits to.
    pub fn runtime(&self) -> &Runtime {
        &self.state.runtime
    }

    /// The token that stops [`Server::serve`]: cancel it for a graceful shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// The router with every route and layer (body limit, metrics, panics caught, CORS
    /// when configured), for serving or for a test.
    pub fn router(&self) -> Result<Router, ServerError> {
        let (router, api) = api_router().split_for_parts();
        let api = Arc::new(complete(api));
        let state = self.state.clone();
        let mut router = router
            .route("/", get(viewer::page))
            .route(
                "/openapi.json",
                get(move || {
                    let api = api.clone();
                    async move { axum::Json(api.as_ref().clone()).into_response() }
                }),
            )
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                metrics::track,
            ))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(state.config.body_limit))
            .layer(CatchPanicLayer::custom(panic_response))
            .with_state(state.clone());
        if !state.config.cors_origins.is_empty() {
            router = router.layer(cors(&state.config.cors_origins)?);
        }
        Ok(router)
    }

    /// Serves on `listener` until [`Server::shutdown_token`] is cancelled, with
    /// `config.workers` worker loops in the process. On shutdown the listener stops
    /// accepting, in-flight requests finish, event streams end and the workers hand their
    /// in-flight runs back to the queue (`queued`, for any worker) before this returns.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> Result<(), ServerError> {
        let router = self.router()?;
        let stop = self.state.shutdown.clone();
        let cfg = &self.state.config;
        let workers = (cfg.workers > 0).then(|| {
            let mut opts = WorkerOptions::named(cfg.worker_name.clone())
                .concurrency(cfg.workers)
                .poll(cfg.poll);
            opts.grace = cfg.grace;
            let w = Worker::new(self.state.runtime.clone(), opts);
            let stop = stop.clone();
            tokio::spawn(async move { w.run(stop).await })
        });
        listen::serve(
            listener,
            router,
            stop.clone(),
            cfg.header_timeout,
            cfg.max_connections,
        )
        .await;
        stop.cancel();
        if let Some(w) = workers {
            match w.await {
                Ok(r) => r?,
                Err(e) => tracing::error!(error = %e, "the worker task failed"),
            }
        }
        Ok(())
    }
}
