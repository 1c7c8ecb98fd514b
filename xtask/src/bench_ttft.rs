//! `cargo xtask bench --only ttft`: time to first token of a one-agent workflow through the
//! server, against the same model called directly, on the local OpenAI-compatible server
//! (issue 50; the llama.cpp server of `.ci/install.d/20-llama.sh`).
//!
//! Direct: the agent's own request (captured from one run of the agent in this process),
//! sent through the same provider stack with a streamed call; the time from the call to its
//! first text delta. Through the server: a LangGraph `POST /threads/{id}/runs/stream` with
//! `stream_mode=messages-tuple` on a fresh thread, served by rath-server in this process on
//! SQLite with one embedded worker; the time from the request to the first `messages`
//! event that carries an `AIMessageChunk`. Both read their stream to the end before the
//! next sample (the model is idle when each starts), the two are interleaved, and the
//! overhead is the median of the paired differences.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use rath_flow::{Agent, FlowContext, FlowEvent, SharedWorkflow};
use rath_provider::{Provider, ProviderRequest, StreamEvent};
use rath_session::{Session, Stamper};
use serde_json::{Value, json};

/// The agent measured: one short answer.
const INSTRUCTIONS: &str = "Answer with one word.";
/// Its question.
const QUESTION: &str = "What colour is the sky on a clear day?";
/// Samples per side (a full run).
const SAMPLES: usize = 30;
/// Samples per side (`--quick`).
const QUICK_SAMPLES: usize = 5;
/// The goal: median overhead of the server path.
pub const GOAL_MS: f64 = 5.0;

/// What one sitting measured.
#[derive(Clone, Debug)]
pub struct TtftResults {
    /// The model server's base URL.
    pub base_url: String,
    /// The model it serves.
    pub model: String,
    /// Times to first token, direct, ms (in sample order).
    pub direct_ms: Vec<f64>,
    /// Times to first token through the server, ms (in sample order).
    pub served_ms: Vec<f64>,
    /// Load average before and after.
    pub load: (String, String),
}

impl TtftResults {
    /// The median of the paired differences (served − direct), ms.
    pub fn overhead_ms(&self) -> f64 {
        let mut d: Vec<f64> = self
            .served_ms
            .iter()
            .zip(&self.direct_ms)
            .map(|(s, d)| s - d)
            .collect();
        median(&mut d)
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    s[((s.len() - 1) as f64 * q).round() as usize]
}

/// The model server's base URL: `RATH_LIVE_BASE_URL` (what `cargo xtask setup` starts),
/// else `OPENAI_BASE_URL`.
fn base_url() -> Result<String> {
    std::env::var("RATH_LIVE_BASE_URL")
        .or_else(|_| std::env::var("OPENAI_BASE_URL"))
        .context(
            "no model server: set RATH_LIVE_BASE_URL (`cargo xtask setup` starts the local \
             llama.cpp server) or OPENAI_BASE_URL",
        )
}

/// The provider stack the environment would give an agent, on `base`.
fn provider(base: &str) -> Result<Arc<dyn Provider>> {
    let base = base.to_owned();
    openrath::select::live_from_lookup(move |k| match k {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "RATH_PROVIDER" => Some("openai".into()),
        other => std::env::var(other).ok(),
    })?
    .context("the environment chose no provider")
}

/// The agent's request, from one run of it in this process.
async fn agent_request(model: Arc<dyn Provider>) -> Result<ProviderRequest> {
    let seen: Arc<Mutex<Option<ProviderRequest>>> = Arc::default();
    let keep = seen.clone();
    let cx = FlowContext::new().with_observer(move |e: &FlowEvent<'_>| {
        if let FlowEvent::Request { request, .. } = e {
            keep.lock()
                .unwrap()
                .get_or_insert_with(|| (*request).clone());
        }
    });
    let agent = Agent::new("agent", INSTRUCTIONS, model);
    cx.forward(&agent, Session::user_with(QUESTION, Stamper::seeded(1)))
        .await
        .context("one run of the agent")?;
    let got = seen.lock().unwrap().take();
    got.context("the agent made no model call")
}

/// One direct sample: ms to the first text delta of a streamed call of `req`.
async fn direct(model: &dyn Provider, req: &ProviderRequest) -> Result<f64> {
    let start = Instant::now();
    let mut first = None;
    let mut sink = |e: StreamEvent| {
        if first.is_none() && matches!(&e, StreamEvent::TextDelta { text } if !text.is_empty()) {
            first = Some(start.elapsed());
        }
    };
    model.stream(req, &mut sink).await?;
    let first = first.context("the model streamed no text")?;
    Ok(first.as_secs_f64() * 1e3)
}

/// The server under test: its base URL, a key, and what stops it.
struct Served {
    base: String,
    key: String,
    stop: rath_flow::CancellationToken,
}

async fn start_server(dir: &std::path::Path, model: Arc<dyn Provider>) -> Result<Served> {
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let registry =
        rath_runtime::WorkflowRegistry::new().register("ttft", INSTRUCTIONS, move || {
            Ok(Arc::new(Agent::new("agent", INSTRUCTIONS, model.clone())) as SharedWorkflow)
        });
    let config = rath_server::ServerConfig {
        workers: 1,
        ..rath_server::ServerConfig::default()
    };
    let server = rath_server::Server::connect(&store, &runs, registry, config).await?;
    let key = server
        .db()
        .create_key("bench", false, "bench")
        .await?
        .secret;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = server.shutdown_token();
    tokio::spawn(server.serve(listener));
    Ok(Served {
        base: format!("http://{addr}"),
        key,
        stop,
    })
}

/// One sample through the server: ms from the stream request to its first token chunk (a
/// fresh thread each time, so every sample sends the model the same prompt).
async fn served(http: &reqwest::Client, s: &Served) -> Result<f64> {
    let thread: Value = http
        .post(format!("{}/threads", s.base))
        .header("x-api-key", &s.key)
        .json(&json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let tid = thread["thread_id"].as_str().context("a thread id")?;
    let start = Instant::now();
    let resp = http
        .post(format!("{}/threads/{tid}/runs/stream", s.base))
        .header("x-api-key", &s.key)
        .json(
            &json!({"assistant_id": "ttft", "stream_mode": ["messages-tuple"],
            "input": {"messages": [{"role": "user", "content": QUESTION}]}}),
        )
        .send()
        .await?
        .error_for_status()?;
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut first = None;
    while let Some(part) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&part?));
        if first.is_none() && buf.contains("\"AIMessageChunk\"") {
            first = Some(start.elapsed());
        }
    }
    let first = first.with_context(|| format!("no token chunk in the stream: {buf}"))?;
    Ok(first.as_secs_f64() * 1e3)
}

/// Measures in one sitting.
pub fn measure(quick: bool) -> Result<TtftResults> {
    let base = base_url()?;
    let model = provider(&base)?;
    let samples = if quick { QUICK_SAMPLES } else { SAMPLES };
    let load_before = crate::bench::loadavg();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let (direct_ms, served_ms) = rt.block_on(async {
        let req = agent_request(model.clone()).await?;
        let server = start_server(dir.path(), model.clone()).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?;
        // One of each first: connections made, the model's prompt cache warm.
        direct(model.as_ref(), &req).await?;
        served(&http, &server).await?;
        let (mut d, mut s) = (Vec::new(), Vec::new());
        for i in 0..samples {
            // Alternating which goes first, so neither always follows the other.
            if i % 2 == 0 {
                d.push(direct(model.as_ref(), &req).await?);
                s.push(served(&http, &server).await?);
            } else {
                s.push(served(&http, &server).await?);
                d.push(direct(model.as_ref(), &req).await?);
            }
        }
        server.stop.cancel();
        Ok::<_, anyhow::Error>((d, s))
    })?;
    if direct_ms.len() != samples || served_ms.len() != samples {
        bail!("samples missing");
    }
    Ok(TtftResults {
        model: model.manifest().model.unwrap_or_default(),
        base_url: base,
        direct_ms,
        served_ms,
        load: (load_before, crate::bench::loadavg()),
    })
}

/// The page's section.
pub fn render(r: &TtftResults) -> String {
    let mut md = String::new();
    let (mut d, mut s) = (r.direct_ms.clone(), r.served_ms.clone());
    let _ = writeln!(
        md,
        "## Time to first token through the server (issue 50)\n\n\
         Generated by `cargo xtask bench --only ttft`; load average before/after: {} / {}. \
         A one-agent workflow (\"{INSTRUCTIONS}\", one question) on the local model server \
         ({}, model `{}`), {} samples per side, interleaved. Direct: the agent's own request \
         through the same provider stack, streamed, to its first text delta. Through the \
         server: LangGraph's `POST /threads/{{id}}/runs/stream` (`messages-tuple`) on a fresh \
         thread, rath-server in the bench process on SQLite with one embedded worker, to the \
         first `AIMessageChunk` event: the request, the thread's state, the run's submission \
         and claim, the journal, the model call, and the token's way back as an SSE event.\n",
        r.load.0,
        r.load.1,
        host(&r.base_url),
        r.model.rsplit('/').next().unwrap_or(&r.model),
        r.direct_ms.len(),
    );
    let _ = writeln!(md, "| | median | p90 |\n|---|---|---|");
    let _ = writeln!(
        md,
        "| direct | {:.2} ms | {:.2} ms |",
        median(&mut d),
        percentile(&r.direct_ms, 0.9)
    );
    let _ = writeln!(
        md,
        "| through the server | {:.2} ms | {:.2} ms |",
        median(&mut s),
        percentile(&r.served_ms, 0.9)
    );
    let _ = writeln!(
        md,
        "| overhead (median of paired differences) | **{:.2} ms** | |\n\n\
         Goal: overhead ≤ {GOAL_MS} ms median.",
        r.overhead_ms()
    );
    md
}

/// `host:port` of a URL (no path, no credentials).
fn host(url: &str) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// The goal row.
pub(crate) fn goal_rows(r: &TtftResults) -> Vec<crate::bench::GoalRow> {
    let o = r.overhead_ms();
    vec![crate::bench::GoalRow {
        workload: "ttft".into(),
        goal: format!("time to first token through the server: overhead ≤ {GOAL_MS} ms median"),
        measured: format!("{o:.2} ms"),
        met: Some(o <= GOAL_MS),
        why: (o > GOAL_MS).then(|| {
            "before the model is asked, the server path commits four times at full durability \
             (the run's ownership with its place in the thread, the input session, the \
             submission, the worker's claim; SQLite synchronous=FULL, an fsync each) and \
             hands the run from the request to the worker: about 6-8 ms on this disk, the \
             token's way back is under 0.3 ms. What would meet it: a claim that is not \
             durable on its own (a lost claim is an unclaimed run) and the submission handing \
             the run to an idle worker of the same process in its own transaction"
                .to_owned()
        }),
    }]
}
