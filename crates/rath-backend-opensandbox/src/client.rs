//! HTTP clients for the lifecycle API (`/v1/sandboxes...`, header `OPEN-SANDBOX-API-KEY`) and
//! the execd API inside a sandbox (`/command`, `/files/*`, `/directories*`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use rath_backend::{BackendError, ToolError, ToolErrorKind};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::sse::{SseParser, StreamEvent};

pub(crate) const BACKEND: &str = "opensandbox";

fn http_err(status: Option<StatusCode>, message: impl Into<String>) -> BackendError {
    BackendError::Http {
        backend: BACKEND.to_owned(),
        status: status.map(|s| s.as_u16()),
        message: message.into(),
    }
}

async fn error_text(resp: Response) -> String {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<Value>(&body) {
        Ok(v) => format!(
            "{} {}",
            v["code"].as_str().unwrap_or(status.as_str()),
            v["message"].as_str().unwrap_or("")
        ),
        Err(_) => format!("{status} {}", body.chars().take(200).collect::<String>()),
    }
}

/// The lifecycle server.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) api_key: Option<String>,
}

/// A sandbox as the lifecycle API describes it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SandboxInfo {
    pub(crate) id: String,
    pub(crate) status: SandboxStatus,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SandboxStatus {
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EndpointInfo {
    pub(crate) endpoint: String,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
}

impl Lifecycle {
    fn req(&self, method: Method, path: &str) -> RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(k) => r.header("OPEN-SANDBOX-API-KEY", k),
            None => r,
        }
    }

    async fn send(&self, r: RequestBuilder) -> Result<Response, BackendError> {
        let resp = r.send().await.map_err(|e| http_err(None, e.to_string()))?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            let status = resp.status();
            Err(http_err(Some(status), error_text(resp).await))
        }
    }

    pub(crate) async fn create(&self, body: &Value) -> Result<SandboxInfo, BackendError> {
        let resp = self
            .send(self.req(Method::POST, "/sandboxes").json(body))
            .await?;
        resp.json().await.map_err(|e| http_err(None, e.to_string()))
    }

    pub(crate) async fn get(&self, id: &str) -> Result<SandboxInfo, BackendError> {
        let resp = self
            .send(self.req(Method::GET, &format!("/sandboxes/{id}")))
            .await?;
        resp.json().await.map_err(|e| http_err(None, e.to_string()))
    }

    pub(crate) async fn delete(&self, id: &str) -> Result<(), BackendError> {
        self.send(self.req(Method::DELETE, &format!("/sandboxes/{id}")))
            .await
            .map(drop)
    }

    pub(crate) async fn renew(&self, id: &str, expires_at: &str) -> Result<String, BackendError> {
        let resp = self
            .send(
                self.req(Method::POST, &format!("/sandboxes/{id}/renew-expiration"))
                    .json(&json!({ "expiresAt": expires_at })),
            )
            .await?;
        let v: Value = resp
            .json()
            .await
            .map_err(|e| http_err(None, e.to_string()))?;
        Ok(v["expiresAt"].as_str().unwrap_or_default().to_owned())
    }

    pub(crate) async fn endpoint(&self, id: &str, port: u16) -> Result<EndpointInfo, BackendError> {
        let resp = self
            .send(self.req(Method::GET, &format!("/sandboxes/{id}/endpoints/{port}")))
            .await?;
        resp.json().await.map_err(|e| http_err(None, e.to_string()))
    }

    /// Polls until the sandbox is `Running` (or fails, or `wait` passes).
    pub(crate) async fn wait_running(&self, id: &str, wait: Duration) -> Result<(), BackendError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let info = self.get(id).await?;
            match info.status.state.as_str() {
                "Running" => return Ok(()),
                "Failed" | "Terminated" | "Stopping" => {
                    return Err(BackendError::Open {
                        backend: BACKEND.to_owned(),
                        message: format!(
                            "sandbox {id} is {}: {}",
                            info.status.state,
                            info.status.message.unwrap_or_default()
                        ),
                    });
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(BackendError::Open {
                        backend: BACKEND.to_owned(),
                        message: format!("sandbox {id} not running after {wait:?}"),
                    });
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

fn fail(kind: ToolErrorKind, message: impl Into<String>) -> ToolError {
    ToolError::new(kind, message)
}

fn transport(e: reqwest::Error) -> ToolError {
    fail(
        ToolErrorKind::ToolExecutionException,
        format!("execd request failed: {e}"),
    )
}

/// What one `/command` run streamed back.
#[derive(Debug, Default)]
pub(crate) struct CommandRun {
    pub(crate) id: Option<String>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) stdout_total: u64,
    pub(crate) stderr_total: u64,
    pub(crate) error: Option<(String, String)>,
}

/// The execd daemon of one sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Execd {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) headers: BTreeMap<String, String>,
}

impl Execd {
    fn req(&self, method: Method, path: &str) -> RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in &self.headers {
            r = r.header(k, v);
        }
        r
    }

    async fn send(&self, r: RequestBuilder, path: &str) -> Result<Response, ToolError> {
        let resp = r.send().await.map_err(transport)?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = error_text(resp).await;
        let kind = if status == StatusCode::NOT_FOUND {
            ToolErrorKind::NotFound
        } else {
            ToolErrorKind::ToolExecutionException
        };
        Err(fail(kind, format!("{path}: {text}")).with_detail(json!({ "status": status.as_u16() })))
    }

    /// `POST /command`, reading the SSE stream with each stream capped at `cap` bytes.
    pub(crate) async fn run_command(
        &self,
        body: &Value,
        cap: usize,
    ) -> Result<CommandRun, ToolError> {
        let resp = self
            .send(self.req(Method::POST, "/command").json(body), "/command")
            .await?;
        let mut run = CommandRun::default();
        let mut parser = SseParser::default();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(transport)?;
            for ev in parser.feed(&chunk) {
                absorb(&mut run, ev, cap);
            }
        }
        for ev in parser.finish() {
            absorb(&mut run, ev, cap);
        }
        Ok(run)
    }

    /// `GET /command/status/{id}`: `(exit_code, error)`.
    pub(crate) async fn status(
        &self,
        id: &str,
    ) -> Result<(Option<i32>, Option<String>), ToolError> {
        let path = format!("/command/status/{id}");
        let resp = self.send(self.req(Method::GET, &path), &path).await?;
        let v: Value = resp.json().await.map_err(transport)?;
        let code = v["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok());
        let error = v["error"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok((code, error))
    }

    /// `DELETE /command?id=...`: interrupts a command.
    pub(crate) async fn interrupt(&self, id: &str) {
        let _ = self
            .req(Method::DELETE, "/command")
            .query(&[("id", id)])
            .send()
            .await;
    }

    /// `GET /files/download`.
    pub(crate) async fn download(&self, path: &str) -> Result<Vec<u8>, ToolError> {
        let resp = self
            .send(
                self.req(Method::GET, "/files/download")
                    .query(&[("path", path)]),
                "/files/download",
            )
            .await?;
        resp.bytes().await.map(|b| b.to_vec()).map_err(transport)
    }

    /// `POST /directories` (mkdir -p) for one directory.
    pub(crate) async fn make_dir(&self, path: &str) -> Result<(), ToolError> {
        let body = json!({ path: { "mode": 755 } });
        self.send(
            self.req(Method::POST, "/directories").json(&body),
            "/directories",
        )
        .await
        .map(drop)
    }

    /// `POST /files/upload`: a metadata part then the file part.
    pub(crate) async fn upload(
        &self,
        path: &str,
        content: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<(), ToolError> {
        let mut meta = json!({ "path": path });
        if let Some(m) = mode {
            meta["mode"] = json!(octal_digits(m));
        }
        let file_name = path.rsplit('/').next().unwrap_or("file").to_owned();
        let meta_part = reqwest::multipart::Part::text(meta.to_string())
            .mime_str("application/json")
            .map_err(transport)?;
        let file_part = reqwest::multipart::Part::bytes(content)
            .file_name(file_name)
            .mime_str("application/octet-stream")
            .map_err(transport)?;
        let form = reqwest::multipart::Form::new()
            .part("metadata", meta_part)
            .part("file", file_part);
        self.send(
            self.req(Method::POST, "/files/upload").multipart(form),
            "/files/upload",
        )
        .await
        .map(drop)
    }

    /// `GET /files/info`: whether `path` exists.
    pub(crate) async fn exists(&self, path: &str) -> Result<bool, ToolError> {
        match self
            .send(
                self.req(Method::GET, "/files/info")
                    .query(&[("path", path)]),
                "/files/info",
            )
            .await
        {
            Ok(resp) => {
                let v: Value = resp.json().await.map_err(transport)?;
                Ok(v.get(path).is_some() || v.as_object().is_some_and(|m| !m.is_empty()))
            }
            Err(f) if f.kind == ToolErrorKind::NotFound => Ok(false),
            Err(f) => Err(f),
        }
    }

    /// `GET /directories/list?depth=1`.
    pub(crate) async fn list(&self, path: &str) -> Result<Vec<Value>, ToolError> {
        let resp = self
            .send(
                self.req(Method::GET, "/directories/list")
                    .query(&[("path", path), ("depth", "1")]),
                "/directories/list",
            )
            .await?;
        resp.json().await.map_err(transport)
    }
}

/// Unix mode bits written the way the API spells them: octal digits as a decimal integer
/// (`0o755` → `755`).
pub(crate) fn octal_digits(mode: u32) -> u64 {
    format!("{:o}", mode & 0o7777).parse().unwrap_or(644)
}

fn absorb(run: &mut CommandRun, ev: StreamEvent, cap: usize) {
    let keep = |buf: &mut Vec<u8>, total: &mut u64, text: &str| {
        *total += text.len() as u64;
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&text.as_bytes()[..text.len().min(room)]);
    };
    match ev.kind.as_str() {
        "init" => run.id = ev.text.filter(|t| !t.is_empty()),
        "stdout" => keep(
            &mut run.stdout,
            &mut run.stdout_total,
            ev.text.as_deref().unwrap_or(""),
        ),
        "stderr" => keep(
            &mut run.stderr,
            &mut run.stderr_total,
            ev.text.as_deref().unwrap_or(""),
        ),
        "error" => {
            let e = ev.error.unwrap_or_default();
            run.error = Some((e.ename, e.evalue));
        }
        _ => {}
    }
}
