//! A mock OpenSandbox written from the published specs: the lifecycle API under `/v1` and one
//! execd per sandbox under `/execd/{sandbox}`, running real processes over a temp dir that
//! stands in for the sandbox's file system (sandbox path `/x` is `<tmp>/<sandbox>/x`).

#![allow(dead_code)]
// Handlers return early with a ready `Response`; boxing it would only add noise to a mock.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Multipart, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

pub const API_KEY: &str = "test-key";

#[derive(Default)]
struct Sandbox {
    polls: u32,
    deleted: bool,
}

pub struct Mock {
    root: tempfile::TempDir,
    addr: Mutex<String>,
    sandboxes: Mutex<BTreeMap<String, Sandbox>>,
    commands: Mutex<BTreeMap<String, CommandStatus>>,
    pub deletes: Mutex<Vec<String>>,
    counter: Mutex<u64>,
}

type Shared = Arc<Mock>;
/// A finished command's exit code and error.
type CommandStatus = (Option<i32>, Option<String>);

fn err(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "code": code, "message": message })),
    )
        .into_response()
}

impl Mock {
    /// Starts the mock on 127.0.0.1:0; returns it and its base URL.
    pub async fn start() -> (Shared, String) {
        let mock = Arc::new(Mock {
            root: tempfile::tempdir().expect("temp dir"),
            addr: Mutex::new(String::new()),
            sandboxes: Mutex::default(),
            commands: Mutex::default(),
            deletes: Mutex::default(),
            counter: Mutex::new(0),
        });
        let app = Router::new()
            .route("/v1/sandboxes", post(create))
            .route(
                "/v1/sandboxes/{id}",
                get(get_sandbox).delete(delete_sandbox),
            )
            .route("/v1/sandboxes/{id}/renew-expiration", post(renew))
            .route("/v1/sandboxes/{id}/endpoints/{port}", get(endpoint))
            .route("/execd/{sid}/command", post(command))
            .route("/execd/{sid}/command/status/{cid}", get(command_status))
            .route("/execd/{sid}/files/download", get(download))
            .route("/execd/{sid}/files/upload", post(upload))
            .route("/execd/{sid}/files/info", get(info))
            .route("/execd/{sid}/directories", post(make_dirs))
            .route("/execd/{sid}/directories/list", get(list))
            .with_state(mock.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        *mock.addr.lock().unwrap() = addr.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (mock, format!("http://{addr}"))
    }

    pub fn live_sandboxes(&self) -> usize {
        self.sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|s| !s.deleted)
            .count()
    }

    fn next(&self, prefix: &str) -> String {
        let mut c = self.counter.lock().unwrap();
        *c += 1;
        format!("{prefix}-{:04}", *c)
    }

    /// The host path of sandbox path `p` (absolute, no `..`).
    fn host(&self, sid: &str, p: &str) -> Option<PathBuf> {
        let path = Path::new(p);
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return None;
        }
        Some(self.root.path().join(sid).join(p.trim_start_matches('/')))
    }

    fn sandbox_path(&self, sid: &str, host: &Path) -> String {
        let base = self.root.path().join(sid);
        format!(
            "/{}",
            host.strip_prefix(&base).unwrap_or(host).to_string_lossy()
        )
    }

    fn execd_ok(&self, sid: &str, headers: &HeaderMap) -> Result<(), Response> {
        let live = self
            .sandboxes
            .lock()
            .unwrap()
            .get(sid)
            .is_some_and(|s| !s.deleted);
        if !live {
            return Err(err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such sandbox"));
        }
        let token = headers
            .get("X-EXECD-ACCESS-TOKEN")
            .and_then(|v| v.to_str().ok());
        if token != Some(format!("tok-{sid}").as_str()) {
            return Err(err(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "bad execd token",
            ));
        }
        Ok(())
    }
}

fn authed(headers: &HeaderMap) -> Result<(), Response> {
    match headers
        .get("OPEN-SANDBOX-API-KEY")
        .and_then(|v| v.to_str().ok())
    {
        Some(API_KEY) => Ok(()),
        _ => Err(err(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "missing or wrong API key",
        )),
    }
}

const CREATED_AT: &str = "2026-01-01T00:00:00Z";

async fn create(
    State(m): State<Shared>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Err(r) = authed(&headers) {
        return r;
    }
    let image_ok = body["image"]["uri"].as_str().is_some_and(|s| !s.is_empty());
    let entry_ok = body["entrypoint"].as_array().is_some_and(|a| !a.is_empty());
    let timeout_ok = body["timeout"].as_u64().is_none_or(|t| t >= 60);
    let limits_ok = body["resourceLimits"].is_object();
    if !(image_ok && entry_ok && timeout_ok && limits_ok) {
        return err(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "image, entrypoint, resourceLimits required; timeout >= 60",
        );
    }
    let id = m.next("sbx");
    std::fs::create_dir_all(m.root.path().join(&id)).expect("sandbox root");
    m.sandboxes
        .lock()
        .unwrap()
        .insert(id.clone(), Sandbox::default());
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "id": id,
            "status": { "state": "Pending", "reason": "provisioning" },
            "metadata": body["metadata"],
            "createdAt": CREATED_AT,
            "entrypoint": body["entrypoint"],
        })),
    )
        .into_response()
}

async fn get_sandbox(
    State(m): State<Shared>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Err(r) = authed(&headers) {
        return r;
    }
    let mut all = m.sandboxes.lock().unwrap();
    let Some(s) = all.get_mut(&id) else {
        return err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such sandbox");
    };
    s.polls += 1;
    // Pending on the first look, Running after: clients must poll.
    let state = if s.deleted {
        "Terminated"
    } else if s.polls < 2 {
        "Pending"
    } else {
        "Running"
    };
    axum::Json(json!({
        "id": id, "status": { "state": state }, "createdAt": CREATED_AT,
        "entrypoint": ["tail", "-f", "/dev/null"], "image": { "uri": "python:3.11" },
    }))
    .into_response()
}

async fn delete_sandbox(
    State(m): State<Shared>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Err(r) = authed(&headers) {
        return r;
    }
    let mut all = m.sandboxes.lock().unwrap();
    match all.get_mut(&id) {
        Some(s) if !s.deleted => {
            s.deleted = true;
            m.deletes.lock().unwrap().push(id);
            StatusCode::NO_CONTENT.into_response()
        }
        _ => err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such sandbox"),
    }
}

async fn renew(
    State(m): State<Shared>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Err(r) = authed(&headers) {
        return r;
    }
    if !m.sandboxes.lock().unwrap().contains_key(&id) {
        return err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such sandbox");
    }
    match body["expiresAt"].as_str() {
        Some(t) => axum::Json(json!({ "expiresAt": t })).into_response(),
        None => err(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "expiresAt required",
        ),
    }
}

async fn endpoint(
    State(m): State<Shared>,
    headers: HeaderMap,
    UrlPath((id, port)): UrlPath<(String, u16)>,
) -> Response {
    if let Err(r) = authed(&headers) {
        return r;
    }
    if port != 44772 || !m.sandboxes.lock().unwrap().contains_key(&id) {
        return err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint");
    }
    let addr = m.addr.lock().unwrap().clone();
    // No scheme, as in the spec's example: clients add one.
    axum::Json(json!({
        "endpoint": format!("{addr}/execd/{id}"),
        "headers": { "X-EXECD-ACCESS-TOKEN": format!("tok-{id}") },
    }))
    .into_response()
}

fn sse(events: &[Value]) -> Response {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: signals the process group the mock created for its child.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

async fn command(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let Some(line) = body["command"].as_str() else {
        return err(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST_BODY",
            "command required",
        );
    };
    let cwd = body["cwd"].as_str().unwrap_or("/");
    let Some(host_cwd) = m.host(&sid, cwd).filter(|p| p.is_dir()) else {
        return err(StatusCode::BAD_REQUEST, "INVALID_REQUEST_BODY", "bad cwd");
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .current_dir(host_cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(envs) = body["envs"].as_object() {
        for (k, v) in envs {
            cmd.env(k, v.as_str().unwrap_or_default());
        }
    }
    let cid = m.next("cmd");
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return err(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                &e.to_string(),
            );
        }
    };
    let pid = child.id();
    let (mut so, mut se) = (child.stdout.take(), child.stderr.take());
    let timeout = body["timeout"].as_u64().map(Duration::from_millis);
    let work = async {
        let mut out = Vec::new();
        let mut errb = Vec::new();
        let read_out = async {
            if let Some(s) = so.as_mut() {
                let _ = s.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(s) = se.as_mut() {
                let _ = s.read_to_end(&mut errb).await;
            }
        };
        let wait = async {
            let st = child.wait().await;
            kill_group(pid);
            st
        };
        let (st, (), ()) = tokio::join!(wait, read_out, read_err);
        (st, out, errb)
    };
    let finished = match timeout {
        Some(t) => tokio::time::timeout(t, work).await.ok(),
        None => Some(work.await),
    };
    let mut events = vec![json!({ "type": "init", "text": cid, "timestamp": 0 })];
    let (exit, error) = match finished {
        None => {
            kill_group(pid);
            events.push(json!({ "type": "error", "error": { "ename": "TimeoutError", "evalue": "command timed out", "traceback": [] } }));
            (None, Some("command timed out".to_owned()))
        }
        Some((st, out, errb)) => {
            if !out.is_empty() {
                events.push(json!({ "type": "stdout", "text": String::from_utf8_lossy(&out) }));
            }
            if !errb.is_empty() {
                events.push(json!({ "type": "stderr", "text": String::from_utf8_lossy(&errb) }));
            }
            let code = st.ok().and_then(|s| s.code());
            if code != Some(0) {
                events.push(json!({ "type": "error", "error": { "ename": "CommandExecError", "evalue": code.map(|c| c.to_string()).unwrap_or_default(), "traceback": [] } }));
            }
            (code, None)
        }
    };
    events.push(json!({ "type": "execution_complete", "execution_time": 1 }));
    m.commands.lock().unwrap().insert(cid, (exit, error));
    sse(&events)
}

async fn command_status(
    State(m): State<Shared>,
    UrlPath((sid, cid)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    match m.commands.lock().unwrap().get(&cid) {
        Some((code, error)) => axum::Json(json!({
            "id": cid, "content": "", "running": false, "exit_code": code,
            "error": error.clone().unwrap_or_default(), "started_at": CREATED_AT, "finished_at": CREATED_AT,
        }))
        .into_response(),
        None => err(StatusCode::NOT_FOUND, "NOT_FOUND", "no such command"),
    }
}

fn query_paths(q: &[(String, String)]) -> Vec<String> {
    q.iter()
        .filter(|(k, _)| k == "path")
        .map(|(_, v)| v.clone())
        .collect()
}

async fn download(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let Some(host) = query_paths(&q).first().and_then(|p| m.host(&sid, p)) else {
        return err(StatusCode::BAD_REQUEST, "INVALID_PATH", "path required");
    };
    match std::fs::read(&host) {
        Ok(bytes) => Response::builder()
            .header("content-type", "application/octet-stream")
            .body(Body::from(bytes))
            .unwrap_or_default(),
        Err(_) => err(StatusCode::NOT_FOUND, "FILE_NOT_FOUND", "no such file"),
    }
}

fn octal(mode: &Value) -> Option<u32> {
    u32::from_str_radix(&mode.as_u64()?.to_string(), 8).ok()
}

async fn upload(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let mut meta: Option<Value> = None;
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("metadata") => {
                meta = field
                    .text()
                    .await
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
            }
            Some("file") => {
                let Some(md) = meta.take() else {
                    return err(
                        StatusCode::BAD_REQUEST,
                        "INVALID_REQUEST_BODY",
                        "metadata must precede file",
                    );
                };
                let Some(host) = md["path"].as_str().and_then(|p| m.host(&sid, p)) else {
                    return err(StatusCode::BAD_REQUEST, "INVALID_PATH", "bad path");
                };
                let Ok(bytes) = field.bytes().await else {
                    return err(
                        StatusCode::BAD_REQUEST,
                        "INVALID_REQUEST_BODY",
                        "bad file part",
                    );
                };
                if let Err(e) = std::fs::write(&host, &bytes) {
                    return err(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "INTERNAL_ERROR",
                        &e.to_string(),
                    );
                }
                if let Some(mode) = octal(&md["mode"]) {
                    let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode));
                }
            }
            _ => {}
        }
    }
    StatusCode::OK.into_response()
}

fn file_info(m: &Mock, sid: &str, host: &Path) -> Option<Value> {
    let md = std::fs::symlink_metadata(host).ok()?;
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    };
    let mode: u64 = format!("{:o}", md.permissions().mode() & 0o7777)
        .parse()
        .unwrap_or(0);
    Some(json!({
        "path": m.sandbox_path(sid, host), "type": kind, "size": md.len(),
        "modified_at": CREATED_AT, "created_at": CREATED_AT, "owner": "root", "group": "root", "mode": mode,
    }))
}

async fn info(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let mut out = serde_json::Map::new();
    for p in query_paths(&q) {
        match m.host(&sid, &p).and_then(|h| file_info(&m, &sid, &h)) {
            Some(v) => {
                out.insert(p, v);
            }
            None => return err(StatusCode::NOT_FOUND, "FILE_NOT_FOUND", "no such file"),
        }
    }
    axum::Json(Value::Object(out)).into_response()
}

async fn make_dirs(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let Some(map) = body.as_object() else {
        return err(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST_BODY",
            "a map of paths",
        );
    };
    for (p, perm) in map {
        let Some(host) = m.host(&sid, p) else {
            return err(StatusCode::BAD_REQUEST, "INVALID_PATH", "bad path");
        };
        if let Err(e) = std::fs::create_dir_all(&host) {
            return err(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                &e.to_string(),
            );
        }
        if let Some(mode) = octal(&perm["mode"]) {
            let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode));
        }
    }
    StatusCode::OK.into_response()
}

async fn list(
    State(m): State<Shared>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Err(r) = m.execd_ok(&sid, &headers) {
        return r;
    }
    let Some(host) = query_paths(&q).first().and_then(|p| m.host(&sid, p)) else {
        return err(StatusCode::BAD_REQUEST, "INVALID_PATH", "path required");
    };
    if std::fs::symlink_metadata(&host).is_ok_and(|md| md.file_type().is_symlink()) {
        return err(StatusCode::BAD_REQUEST, "INVALID_PATH", "path is a symlink");
    }
    let Ok(rd) = std::fs::read_dir(&host) else {
        return err(StatusCode::NOT_FOUND, "DIR_NOT_FOUND", "no such directory");
    };
    let mut items: Vec<Value> = rd
        .flatten()
        .filter_map(|e| file_info(&m, &sid, &e.path()))
        .collect();
    items.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    axum::Json(Value::Array(items)).into_response()
}
