//! The test harness: a real server bound to 127.0.0.1:0 over SQLite files or a fresh
//! PostgreSQL database, driven with plain HTTP (reqwest).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rath_flow::{
    Agent, CancellationToken, SharedWorkflow, ToolContext, ToolError, ToolPolicy, typed_tool,
};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_runtime::WorkflowRegistry;
use rath_server::{Server, ServerConfig};
use rath_session::Role;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Calls `record` once, then answers `done`.
#[derive(Debug)]
struct OneCall;

#[async_trait]
impl Provider for OneCall {
    fn name(&self) -> &str {
        "one-call"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let answered = req.messages.iter().any(|m| m.role == Role::Tool);
        let reply = if answered {
            ScriptedResponse::text("done")
        } else {
            ScriptedResponse::tool_calls(vec![("call_1", "record", json!({"text": "x"}))])
        };
        ScriptedProvider::new(vec![reply]).complete(req).await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("one-call")
    }
}

/// Thinks for [`SLOW_MS`] before answering `slow done`: a run a shutdown catches in flight.
#[derive(Debug)]
struct Slow;

/// How long [`Slow`] thinks.
pub const SLOW_MS: u64 = 1500;

#[async_trait]
impl Provider for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        tokio::time::sleep(Duration::from_millis(SLOW_MS)).await;
        ScriptedProvider::new(vec![ScriptedResponse::text("slow done")])
            .complete(req)
            .await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("slow")
    }
}

/// Refuses every request: the model of a run that fails.
#[derive(Debug)]
struct Refuses;

#[async_trait]
impl Provider for Refuses {
    fn name(&self) -> &str {
        "refuses"
    }
    async fn complete(&self, _req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        Err(ProviderError::Http {
            status: 400,
            message: "the test model refuses".into(),
            retry_after: None,
        })
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("refuses")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    text: String,
}

/// `echo` answers `hello`; `gated` stops on an approval-gated `record` call, then answers
/// `done`; `slow` thinks for [`SLOW_MS`], then answers `slow done`; `broken`'s model refuses
/// every request (a run that fails).
pub fn registry() -> WorkflowRegistry {
    WorkflowRegistry::new()
        .register("echo", "echo v1", || {
            let model = ScriptedProvider::new(vec![ScriptedResponse::text("hello")]);
            Ok(Arc::new(Agent::new("greeter", "Greet.", model)) as SharedWorkflow)
        })
        .register("slow", "slow v1", || {
            Ok(Arc::new(Agent::new("thinker", "Think.", Slow)) as SharedWorkflow)
        })
        .register("broken", "broken v1: its model refuses", || {
            Ok(Arc::new(Agent::new("broken", "Fail.", Refuses)) as SharedWorkflow)
        })
        .register("gated", "gated v1: record needs approval", || {
            let record = typed_tool(
                "record",
                "Record a text.",
                |_cx: ToolContext, a: Args| async move {
                    Ok::<_, ToolError>(json!({"recorded": a.text}))
                },
            );
            let agent = Agent::new("writer", "Write.", OneCall)
                .with_tool(record)?
                .with_policy(ToolPolicy::allow_all().require_approval("record"));
            Ok(Arc::new(agent) as SharedWorkflow)
        })
}

/// Where the stores are.
#[derive(Clone, Debug)]
pub struct Stores {
    pub store: String,
    pub runs: String,
    _dir: Arc<tempfile::TempDir>,
}

impl Stores {
    pub fn sqlite() -> Stores {
        let dir = tempfile::tempdir().unwrap();
        Stores {
            store: format!("sqlite:{}", dir.path().join("sessions.db").display()),
            runs: format!("sqlite:{}", dir.path().join("runs.db").display()),
            _dir: Arc::new(dir),
        }
    }

    /// A fresh PostgreSQL database for this test, or `None` (skipped; fails under RATH_CI).
    pub async fn postgres(name: &str) -> Option<Stores> {
        let url = rath_testkit::fresh_postgres_database("h6_sv_", &format!("h6_sv_{name}")).await?;
        Some(Stores {
            store: url.clone(),
            runs: url,
            _dir: Arc::new(tempfile::tempdir().unwrap()),
        })
    }
}

/// A running server and a client.
pub struct Harness {
    pub base: String,
    pub http: reqwest::Client,
    /// An admin key of tenant `ops`.
    pub admin: String,
    /// A key of tenant `a`.
    pub a: String,
    /// A key of tenant `b`.
    pub b: String,
    pub server: Server,
    pub stores: Stores,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), rath_server::ServerError>>>,
}

/// The configuration the tests use: embedded workers, fast polls, a 64 KiB body limit.
pub fn config() -> ServerConfig {
    ServerConfig {
        workers: 2,
        body_limit: 64 * 1024,
        poll: Duration::from_millis(20),
        wait_max: Duration::from_secs(20),
        grace: Duration::from_secs(2),
        ..ServerConfig::default()
    }
}

impl Harness {
    /// A server over `stores` with `config`; mints the admin and two tenant keys when the
    /// tables are new (`keys`: reuse these).
    pub async fn start(stores: Stores, config: ServerConfig, keys: Option<[String; 3]>) -> Harness {
        let server = Server::connect(&stores.store, &stores.runs, registry(), config)
            .await
            .expect("server connects");
        let [admin, a, b] = match keys {
            Some(k) => k,
            None => {
                let db = server.db();
                [
                    db.create_key("ops", true, "admin").await.unwrap().secret,
                    db.create_key("a", false, "tenant a").await.unwrap().secret,
                    db.create_key("b", false, "tenant b").await.unwrap().secret,
                ]
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = server.shutdown_token();
        let task = tokio::spawn(server.clone().serve(listener));
        Harness {
            base,
            http: reqwest::Client::new(),
            admin,
            a,
            b,
            server,
            stores,
            stop,
            task: Some(task),
        }
    }

    pub async fn sqlite(config: ServerConfig) -> Harness {
        Harness::start(Stores::sqlite(), config, None).await
    }

    pub async fn postgres(name: &str, config: ServerConfig) -> Option<Harness> {
        Some(Harness::start(Stores::postgres(name).await?, config, None).await)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> ([String; 3], Stores) {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("the server stops")
                .unwrap()
                .unwrap();
        }
        (
            [self.admin.clone(), self.a.clone(), self.b.clone()],
            self.stores.clone(),
        )
    }

    /// A request with `key` (`None`: no key) and an optional JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("the server answers");
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn get(&self, path: &str, key: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(key), Some(body)).await
    }

    /// The raw text answer of a GET.
    pub async fn text(&self, path: &str, key: &str) -> (StatusCode, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (resp.status(), resp.text().await.unwrap())
    }

    /// Reads a run's event stream to its end: (id, event, data) of each event.
    pub async fn events(
        &self,
        run: &str,
        key: &str,
        last_event_id: Option<i64>,
    ) -> Vec<(i64, String, Value)> {
        let mut req = self
            .http
            .get(format!("{}/v1/runs/{run}/events", self.base))
            .bearer_auth(key);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = tokio::time::timeout(Duration::from_secs(20), resp.text())
            .await
            .expect("the stream ends with the run")
            .unwrap();
        parse_sse(&body)
    }
}

/// The events of an SSE body (comments and keep-alives skipped).
pub fn parse_sse(body: &str) -> Vec<(i64, String, Value)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut event, mut data) = (None, String::new(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if let Some(id) = id {
            out.push((
                id,
                event,
                serde_json::from_str(&data).unwrap_or(Value::String(data)),
            ));
        }
    }
    out
}

/// The kind of an error answer.
pub fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or("<no error kind>")
}
