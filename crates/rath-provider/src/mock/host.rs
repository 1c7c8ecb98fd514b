//! The scaffolding every mock provider server builds on: an axum server on a free port of
//! `127.0.0.1`, a script of steps served in order (then a responder, then a fallback), the
//! record of every request body and its headers, and the response shapes faults need (SSE
//! with an optional cut, a JSON body cut halfway, a JSON error with `Retry-After`).
//!
//! ```
//! use axum::routing::post;
//! use axum::extract::State;
//! use axum::body::Bytes;
//! use axum::http::HeaderMap;
//! use rath_provider::mock::host::{HostShared, MockHost, json_response};
//! use serde_json::{Value, json};
//!
//! async fn answer(State(s): State<HostShared<String>>, h: HeaderMap, body: Bytes) -> axum::response::Response {
//!     let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
//!     let step = s.lock().unwrap().record_and_next(req, h);
//!     json_response(200, &json!({"said": step}), None)
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let host: MockHost<String> = MockHost::start(axum::Router::new().route("/say", post(answer))).await.unwrap();
//! host.push("hello".to_owned());
//! assert_eq!(host.remaining(), 1);
//! assert!(host.base_url().starts_with("http://127.0.0.1:"));
//! # });
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Picks the step for a request when the script is empty (see [`MockHost::set_responder`]).
pub type Responder<S> = Arc<dyn Fn(&Value) -> Option<S> + Send + Sync>;

/// What a mock holds: its script, what it received, and `X`, the mock's own switches.
pub struct HostState<S, X = ()> {
    /// Steps served in order.
    pub script: VecDeque<S>,
    /// Asked for a step when the script is empty.
    pub responder: Option<Responder<S>>,
    /// Served when the script is empty and no responder answers.
    pub fallback: Option<S>,
    /// Every request body received, in order (`null` when it was not JSON).
    pub requests: Vec<Value>,
    /// Every request's headers, in order.
    pub headers: Vec<HeaderMap>,
    /// The mock's own settings.
    pub extra: X,
}

impl<S, X: Default> Default for HostState<S, X> {
    fn default() -> Self {
        Self {
            script: VecDeque::new(),
            responder: None,
            fallback: None,
            requests: Vec::new(),
            headers: Vec::new(),
            extra: X::default(),
        }
    }
}

impl<S: Clone, X> HostState<S, X> {
    /// Records `request` and `headers`, then takes the next step: the script's first, else
    /// the responder's answer, else the fallback; `None` when there is none.
    pub fn record_and_next(&mut self, request: Value, headers: HeaderMap) -> Option<S> {
        let step = self.next_for(&request);
        self.requests.push(request);
        self.headers.push(headers);
        step
    }

    /// Records `request` and `headers` without taking a step.
    pub fn record(&mut self, request: Value, headers: HeaderMap) {
        self.requests.push(request);
        self.headers.push(headers);
    }

    fn next_for(&mut self, request: &Value) -> Option<S> {
        if let Some(step) = self.script.pop_front() {
            return Some(step);
        }
        if let Some(r) = &self.responder
            && let Some(step) = r(request)
        {
            return Some(step);
        }
        self.fallback.clone()
    }
}

/// The state a mock's handlers receive.
pub type HostShared<S, X = ()> = Arc<Mutex<HostState<S, X>>>;

/// Locks `state`, recovering from a poisoned lock (a panicking handler loses nothing).
pub fn lock<S, X>(state: &HostShared<S, X>) -> MutexGuard<'_, HostState<S, X>> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running mock server. Dropping it stops the server.
pub struct MockHost<S, X = ()> {
    addr: SocketAddr,
    state: HostShared<S, X>,
    task: tokio::task::JoinHandle<()>,
}

impl<S, X> std::fmt::Debug for MockHost<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHost")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<S, X> MockHost<S, X>
where
    S: Clone + Send + 'static,
    X: Default + Send + 'static,
{
    /// Serves `routes` on a free port of `127.0.0.1` in the current tokio runtime.
    pub async fn start(routes: Router<HostShared<S, X>>) -> std::io::Result<Self> {
        let state: HostShared<S, X> = Arc::new(Mutex::new(HostState::default()));
        let app = routes.with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // No Nagle: every piece the handler writes (a streamed fragment, an SSE event)
        // reaches the client at once. With Nagle a small write can wait in the kernel for the
        // client's delayed ACK, which a test on tokio's paused clock cannot see: the runtime
        // looks idle, the clock jumps to the next timer and a request times out that was
        // never slow.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, state, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a step to the script.
    pub fn push(&self, step: S) {
        self.lock().script.push_back(step);
    }

    /// The step served whenever the script is empty and no responder answers.
    pub fn set_fallback(&self, step: Option<S>) {
        self.lock().fallback = step;
    }

    /// A function that picks the step from the request body when the script is empty: what
    /// a test needs when several agents share one mock and their calls interleave.
    pub fn set_responder(&self, responder: impl Fn(&Value) -> Option<S> + Send + Sync + 'static) {
        self.lock().responder = Some(Arc::new(responder));
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// Every request's headers, in order.
    pub fn request_headers(&self) -> Vec<HeaderMap> {
        self.lock().headers.clone()
    }

    /// Steps of the script not yet served.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    /// The shared state, locked.
    pub fn lock(&self) -> MutexGuard<'_, HostState<S, X>> {
        lock(&self.state)
    }
}

impl<S, X> Drop for MockHost<S, X> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A `text/event-stream` response of `frames`; with `cut: Some(n)` only the first `n`
/// frames go out and the connection is then reset.
pub fn sse_response(frames: Vec<Bytes>, cut: Option<usize>) -> Response {
    let mut parts: Vec<Result<Bytes, std::io::Error>> = frames.into_iter().map(Ok).collect();
    if let Some(n) = cut {
        parts.truncate(n);
        parts.push(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "mock: connection cut mid-stream",
        )));
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(futures::stream::iter(parts)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The first half of `full` (announced whole by `Content-Length`), then a reset connection.
pub fn cut_json(full: &str) -> Response {
    let half = full.as_bytes()[..full.len() / 2].to_vec();
    let parts: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(half)),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "mock: connection cut",
        )),
    ];
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, full.len().to_string())
        .body(Body::from_stream(futures::stream::iter(parts)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `body` as JSON with `status`, and `Retry-After: <secs>` when given.
pub fn json_response(status: u16, body: &Value, retry_after_secs: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut b = Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(secs) = retry_after_secs {
        b = b.header(header::RETRY_AFTER, secs.to_string());
    }
    b.body(Body::from(body.to_string()))
        .unwrap_or_else(|_| code.into_response())
}

/// A `200` response of `body` as it is, with `content_type` (for bodies that are not JSON).
pub fn raw_response(content_type: &'static str, body: impl Into<Body>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// What the provider conformance kit (`rath_provider::conformance`, feature `conformance`)
/// needs from a provider's mock server: scripted replies, injected faults, and what it
/// received. Every mock built on [`MockHost`] implements it in a few lines, in the mock's
/// own wire format.
pub trait ScriptedMock: Send + Sync {
    /// The base URL the provider under test is configured with.
    fn base_url(&self) -> String;
    /// Scripts a text reply (finish reason `stop`) with this usage.
    fn push_text(&self, text: &str, prompt_tokens: u64, completion_tokens: u64);
    /// Scripts a reply of tool calls `(id, name, arguments)`, in order, with this usage.
    fn push_tool_calls(
        &self,
        calls: &[(&str, &str, Value)],
        prompt_tokens: u64,
        completion_tokens: u64,
    );
    /// Scripts an HTTP error of `status` in the API's own error shape, with `Retry-After`
    /// when given.
    fn push_status(&self, status: u16, retry_after_secs: Option<u64>);
    /// Scripts an error of `status` whose body echoes the credential header the request
    /// carried (as a careless proxy might).
    fn push_key_echo(&self, status: u16);
    /// Every request body received, in order.
    fn requests(&self) -> Vec<Value>;
    /// Every request's headers, in order.
    fn request_headers(&self) -> Vec<HeaderMap>;
    /// Script steps not yet served.
    fn remaining(&self) -> usize;
}
