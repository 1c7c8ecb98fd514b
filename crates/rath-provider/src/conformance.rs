//! The conformance kit every provider crate runs against its mock server (feature
//! `conformance`): the same contract checks for the OpenAI-compatible provider, the
//! Anthropic one, and any third-party provider.
//!
//! ```
//! use rath_provider::conformance::{self, ProviderUnderTest};
//! use rath_provider::mock::MockServer;
//! use rath_provider::{OpenAiConfig, OpenAiProvider, ProviderError};
//!
//! struct OpenAi;
//!
//! impl ProviderUnderTest for OpenAi {
//!     type Mock = MockServer;
//!     type Wire = OpenAiProvider;
//!     async fn start_mock(&self) -> std::io::Result<MockServer> {
//!         MockServer::start().await
//!     }
//!     fn wire(&self, mock: &MockServer, api_key: &str) -> Result<OpenAiProvider, ProviderError> {
//!         let cfg = OpenAiConfig::new(mock.base_url(), "mock-model").with_api_key(api_key);
//!         OpenAiProvider::new(cfg)
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let report = conformance::run_all(&OpenAi).await;
//! assert!(report.is_ok(), "{report}");
//! assert_eq!(report.passed.len(), conformance::CHECKS.len());
//! # });
//! ```
//!
//! A provider crate implements [`ProviderUnderTest`] (how to start its mock, how to build its
//! wire for that mock with a given key) and its mock implements
//! [`ScriptedMock`] (script a reply or a fault in its own
//! wire format). Every check starts its own mock, so one failure does not hide the next.
//! The kit wraps the wire in the retry layer itself ([`kit_retry`]) to check which faults are
//! retried. The checks, in [`CHECKS`] order:
//!
//! - `plain_text`, `one_tool_call`, `several_tool_calls`: the reply as our assistant chunk,
//!   finish reason, usage and a session the reply applies to;
//! - `stream_equals_complete`: the streamed reply equals the non-streamed one chunk for
//!   chunk (text and tool calls), and the deltas add up to it;
//! - `usage_accumulates`: usage lands on the session and adds up over calls;
//! - `faults_not_retried`: 400, 401, 403, 404 and 413 come back typed with their status
//!   after one request;
//! - `faults_retried`: 429 (honouring `Retry-After`), 529, 500 and 503 are retried and
//!   the attempts are on record;
//! - `key_never_stored`: the API key reaches the server and nothing else: not sessions,
//!   cassettes, manifests, `Debug` output (logs) or errors, even when a proxy echoes it;
//! - `cassette_replay_identical`: a recorded cassette replays offline to the same
//!   responses and sessions, and re-recording the replay gives the same bytes.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rath_session::{Chunk, Session, Stamper, Usage};
use serde_json::{Value, json};

use crate::mock::host::ScriptedMock;
use crate::{
    Jitter, Provider, ProviderError, ProviderExt, ProviderRequest, ProviderResponse,
    RecordingProvider, ReplayProvider, Retry, StreamAssembler, StreamEvent, ToolSchema,
};

/// A provider crate's side of the kit: its mock server and its wire.
pub trait ProviderUnderTest: Sync {
    /// The provider's mock server.
    type Mock: ScriptedMock;
    /// The provider (`Debug`, since what a log would print is checked for the key).
    type Wire: Provider + fmt::Debug + 'static;

    /// Starts a fresh mock server.
    fn start_mock(&self) -> impl Future<Output = std::io::Result<Self::Mock>> + Send;

    /// The bare wire (no layers) talking to `mock`, sending `api_key` as the API expects.
    fn wire(&self, mock: &Self::Mock, api_key: &str) -> Result<Self::Wire, ProviderError>;
}

/// The outcome of [`run_all`].
#[derive(Clone, Debug, Default)]
pub struct ConformanceReport {
    /// The provider's name (as it reports it).
    pub provider: String,
    /// Names of the checks that passed.
    pub passed: Vec<String>,
    /// Checks that failed, with what went wrong.
    pub failed: Vec<(String, String)>,
}

impl ConformanceReport {
    /// True when every check passed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    fn note(&mut self, name: &str, outcome: CheckResult) {
        match outcome {
            Ok(()) => self.passed.push(name.to_owned()),
            Err(why) => self.failed.push((name.to_owned(), why)),
        }
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "provider conformance of {}: {} passed, {} failed",
            self.provider,
            self.passed.len(),
            self.failed.len()
        )?;
        for (name, why) in &self.failed {
            writeln!(f, "  FAILED {name}: {why}")?;
        }
        Ok(())
    }
}

/// The result of one check: `Err` says what did not hold.
pub type CheckResult = Result<(), String>;

/// The names of the checks, in the order [`run_all`] runs them.
pub const CHECKS: &[&str] = &[
    "plain_text",
    "one_tool_call",
    "several_tool_calls",
    "stream_equals_complete",
    "usage_accumulates",
    "faults_not_retried",
    "faults_retried",
    "key_never_stored",
    "cassette_replay_identical",
];

/// Statuses a provider must return typed, after one request, without a retry.
pub const NOT_RETRIED: &[u16] = &[400, 401, 403, 404, 413];
/// Statuses the retry layer must retry (429 with `Retry-After`).
pub const RETRIED: &[u16] = &[429, 529, 500, 503];

/// The key the checks configure; long and unusual, so finding it anywhere is a leak.
pub const TEST_KEY: &str = "sk-conformance-7f3a9c1e-SECRET-d04b";

/// Runs every check against `target`.
pub async fn run_all<T: ProviderUnderTest>(target: &T) -> ConformanceReport {
    let mut report = ConformanceReport::default();
    if let Ok(mock) = target.start_mock().await
        && let Ok(wire) = target.wire(&mock, TEST_KEY)
    {
        report.provider = wire.name().to_owned();
    }
    report.note("plain_text", plain_text(target).await);
    report.note("one_tool_call", one_tool_call(target).await);
    report.note("several_tool_calls", several_tool_calls(target).await);
    report.note(
        "stream_equals_complete",
        stream_equals_complete(target).await,
    );
    report.note("usage_accumulates", usage_accumulates(target).await);
    report.note("faults_not_retried", faults_not_retried(target).await);
    report.note("faults_retried", faults_retried(target).await);
    report.note("key_never_stored", key_never_stored(target).await);
    report.note(
        "cassette_replay_identical",
        cassette_replay_identical(target).await,
    );
    report
}

/// The retry layer the kit wraps the wire in: 2 retries, backoff from 10 ms, at most 2 s
/// (a 1 s `Retry-After` is honoured exactly), no jitter.
pub fn kit_retry() -> Retry {
    Retry::default()
        .with_max_retries(2)
        .with_backoff(Duration::from_millis(10), Duration::from_secs(2))
        .with_jitter(Jitter::Off)
}

/// The tool the checks offer.
pub fn word_count() -> ToolSchema {
    ToolSchema::new(
        "word_count",
        "Count the words in a text",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )
}

/// The conversation the checks send: a system prompt and a question.
pub fn session() -> Session {
    Session::system_with("You count words.", Stamper::counter())
        .push(Chunk::user("How many words in 'the quick brown fox'?"))
}

fn request(s: &Session) -> ProviderRequest {
    ProviderRequest::from_session(s, vec![word_count()])
}

/// `s` ready for the next request, as a session loop leaves it: every open call answered
/// (the first with a failure, the rest with a count), or a follow-up question after text.
pub fn next_turn(s: Session) -> Session {
    let open = s.unanswered_tool_calls();
    if open.is_empty() {
        return s.push(Chunk::user("And in 'a b c'?"));
    }
    open.into_iter().enumerate().fold(s, |s, (i, call)| {
        let content = if i == 0 {
            r#"{"ok": false, "error_kind": "tool_failed", "message": "no such text"}"#.to_owned()
        } else {
            json!({"ok": true, "words": 4}).to_string()
        };
        s.push(Chunk::tool_result(call.id, call.function.name, content))
    })
}

async fn start<T: ProviderUnderTest>(target: &T) -> Result<(T::Mock, Arc<T::Wire>), String> {
    let mock = target
        .start_mock()
        .await
        .map_err(|e| format!("mock server did not start: {e}"))?;
    let wire = target
        .wire(&mock, TEST_KEY)
        .map_err(|e| format!("wire did not build: {e}"))?;
    Ok((mock, Arc::new(wire)))
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> CheckResult {
    if cond { Ok(()) } else { Err(what()) }
}

fn ensure_eq<A: PartialEq + fmt::Debug>(what: &str, got: A, want: A) -> CheckResult {
    ensure(got == want, || {
        format!("{what}: got {got:?}, want {want:?}")
    })
}

fn args_of(resp: &ProviderResponse) -> Result<Vec<(String, String, Value)>, String> {
    resp.tool_calls()
        .iter()
        .map(|c| {
            let args: Value = serde_json::from_str(&c.function.arguments).map_err(|e| {
                format!(
                    "arguments of {} are not JSON ({e}): {}",
                    c.id, c.function.arguments
                )
            })?;
            Ok((c.id.clone(), c.function.name.clone(), args))
        })
        .collect()
}

/// A text reply: text, `stop`, usage, no calls; one request carrying the question.
pub async fn plain_text<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    mock.push_text("Four.", 21, 2);
    let s = session();
    let req = request(&s);
    let resp = wire.complete(&req).await.map_err(|e| e.to_string())?;
    ensure_eq("text", resp.text(), Some("Four."))?;
    ensure_eq("finish_reason", resp.finish_reason.as_deref(), Some("stop"))?;
    ensure_eq("usage", resp.usage, Some(Usage::new(21, 2)))?;
    ensure_eq("tool calls", resp.tool_calls().len(), 0)?;
    ensure_eq(
        "request id",
        resp.request_id.as_str(),
        req.request_id.as_str(),
    )?;
    let sent = mock.requests();
    ensure_eq("requests sent", sent.len(), 1)?;
    let body = sent[0].to_string();
    ensure(body.contains("the quick brown fox"), || {
        format!("the question is not in the request: {body}")
    })?;
    ensure(body.contains("You count words."), || {
        format!("the system prompt is not in the request: {body}")
    })?;
    let next = resp.apply(&s, &req, 0.0);
    ensure_eq(
        "last message",
        next.messages().last().and_then(|m| m.content.clone()),
        Some("Four.".to_owned()),
    )
}

/// A reply with one tool call: id, name and arguments intact, `tool_calls`, one call left
/// for the session to answer.
pub async fn one_tool_call<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    let args = json!({"text": "the quick brown fox"});
    mock.push_tool_calls(&[("call_1", "word_count", args.clone())], 40, 12);
    let s = session();
    let req = request(&s);
    let resp = wire.complete(&req).await.map_err(|e| e.to_string())?;
    ensure_eq(
        "calls",
        args_of(&resp)?,
        vec![("call_1".to_owned(), "word_count".to_owned(), args)],
    )?;
    ensure_eq(
        "finish_reason",
        resp.finish_reason.as_deref(),
        Some("tool_calls"),
    )?;
    ensure_eq("text", resp.text().filter(|t| !t.is_empty()), None)?;
    let next = resp.apply(&s, &req, 0.0);
    ensure_eq("unanswered calls", next.unanswered_tool_calls().len(), 1)?;
    let tools = mock.requests()[0].to_string();
    ensure(
        tools.contains("word_count") && tools.contains("Count the words"),
        || format!("the tool schema is not in the request: {tools}"),
    )
}

fn three_calls() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("call_a", "word_count", json!({"text": "a b"})),
        (
            "call_b",
            "word_count",
            json!({"text": "ünïcödé \"quoted\" \\ text"}),
        ),
        (
            "call_c",
            "lookup",
            json!({"path": ["x", 1, null], "deep": {"k": true}}),
        ),
    ]
}

/// A reply with three calls (one with escapes and non-ASCII text): all of them, in order.
pub async fn several_tool_calls<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    let calls = three_calls();
    mock.push_tool_calls(&calls, 50, 30);
    let resp = wire
        .complete(&request(&session()))
        .await
        .map_err(|e| e.to_string())?;
    let want: Vec<_> = calls
        .into_iter()
        .map(|(i, n, a)| (i.to_owned(), n.to_owned(), a))
        .collect();
    ensure_eq("calls", args_of(&resp)?, want)
}

/// The same reply asked for whole and streamed: equal chunk, finish reason, usage and
/// model; the stream's deltas assemble to the same chunk.
pub async fn stream_equals_complete<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    let text = "The quick brown fox: four words, \"quoted\" ünïcödé.";
    mock.push_text(text, 30, 9);
    mock.push_text(text, 30, 9);
    mock.push_tool_calls(&three_calls(), 50, 30);
    mock.push_tool_calls(&three_calls(), 50, 30);
    let s = session();
    for kind in ["text", "tool calls"] {
        let req = request(&s);
        let whole = wire.complete(&req).await.map_err(|e| e.to_string())?;
        let mut events = Vec::new();
        let streamed = wire
            .stream(&req, &mut |e| events.push(e))
            .await
            .map_err(|e| e.to_string())?;
        ensure_eq(&format!("{kind}: chunk"), &streamed.chunk, &whole.chunk)?;
        ensure_eq(
            &format!("{kind}: finish_reason"),
            &streamed.finish_reason,
            &whole.finish_reason,
        )?;
        ensure_eq(&format!("{kind}: usage"), streamed.usage, whole.usage)?;
        ensure_eq(&format!("{kind}: model"), &streamed.model, &whole.model)?;
        ensure(events.len() > 1, || {
            format!("{kind}: the stream delivered {} events", events.len())
        })?;
        let mut asm = StreamAssembler::default();
        for e in &events {
            asm.push(e);
        }
        let assembled = asm.chunk();
        ensure_eq(
            &format!("{kind}: assembled text"),
            assembled.text(),
            whole.chunk.text(),
        )?;
        let assembled_calls: Vec<(String, String, Option<Value>)> = assembled
            .tool_calls()
            .iter()
            .map(|c| {
                let args = serde_json::from_str(&c.function.arguments).ok();
                (c.id.clone(), c.function.name.clone(), args)
            })
            .collect();
        let whole_calls: Vec<(String, String, Option<Value>)> = args_of(&whole)?
            .into_iter()
            .map(|(i, n, a)| (i, n, Some(a)))
            .collect();
        ensure_eq(
            &format!("{kind}: assembled calls"),
            assembled_calls,
            whole_calls,
        )?;
        if kind == "text" {
            let deltas = events
                .iter()
                .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
                .count();
            ensure(deltas > 1, || {
                format!("text arrived in {deltas} delta(s), not streamed")
            })?;
        }
    }
    Ok(())
}

/// Usage of each reply lands on the session it is applied to, and adds up.
pub async fn usage_accumulates<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    mock.push_tool_calls(&[("call_1", "word_count", json!({"text": "x"}))], 40, 12);
    mock.push_text("Four.", 60, 3);
    let s = session();
    let req = request(&s);
    let first = wire.complete(&req).await.map_err(|e| e.to_string())?;
    let s = next_turn(first.apply(&s, &req, 0.0));
    ensure_eq("usage after one call", s.usage(), Some(Usage::new(40, 12)))?;
    let req = request(&s);
    let second = wire
        .stream(&req, &mut |_| {})
        .await
        .map_err(|e| e.to_string())?;
    let s = second.apply(&s, &req, 0.0);
    ensure_eq(
        "usage after two calls",
        s.usage(),
        Some(Usage::new(100, 15)),
    )
}

/// Each of [`NOT_RETRIED`], through the retry layer, complete and streamed: an error with
/// that status, classified not retryable, and no request sent twice in the same mode (a
/// provider may answer a refused stream with one non-streamed request, as the
/// OpenAI-compatible one does for 400; it gets the same fault); the reply scripted behind
/// the faults is never served.
pub async fn faults_not_retried<T: ProviderUnderTest>(target: &T) -> CheckResult {
    for &status in NOT_RETRIED {
        for streamed in [false, true] {
            let (mock, wire) = start(target).await?;
            let p = wire.with_retry(kit_retry());
            mock.push_status(status, None);
            mock.push_status(status, None);
            mock.push_text("must not be reached", 1, 1);
            let req = request(&session());
            let got = if streamed {
                p.stream(&req, &mut |_| {}).await
            } else {
                p.complete(&req).await
            };
            let mode = if streamed { "stream" } else { "complete" };
            let err = match got {
                Ok(_) => return Err(format!("{status} ({mode}): answered instead of failing")),
                Err(e) => e,
            };
            ensure_eq(
                &format!("{status} ({mode}): status"),
                err.status(),
                Some(status),
            )?;
            ensure(!err.root().is_retryable(), || {
                format!("{status} ({mode}): classified retryable: {err}")
            })?;
            ensure(matches!(err.root(), ProviderError::Http { .. }), || {
                format!("{status} ({mode}): not ProviderError::Http: {err:?}")
            })?;
            let modes: Vec<bool> = mock
                .requests()
                .iter()
                .map(|r| r.get("stream").and_then(Value::as_bool).unwrap_or(false))
                .collect();
            let repeated = modes.iter().filter(|m| **m).count() > 1
                || modes.iter().filter(|m| !**m).count() > 1;
            ensure(!modes.is_empty() && !repeated, || {
                format!("{status} ({mode}): requests sent (streamed?) {modes:?}: retried")
            })?;
            if !streamed {
                ensure_eq(&format!("{status} ({mode}): requests sent"), modes.len(), 1)?;
            }
            ensure(mock.remaining() >= 1, || {
                format!("{status} ({mode}): the reply behind the fault was served")
            })?;
        }
    }
    Ok(())
}

/// Each of [`RETRIED`] then a reply, through the retry layer: the reply arrives after two
/// requests, both attempts are in the evidence's `detail.attempts`, and 429's
/// `Retry-After: 1` is the wait taken (exactly 1000 ms, no jitter). Streamed too for 529.
pub async fn faults_retried<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let cases: Vec<(u16, bool)> = RETRIED
        .iter()
        .map(|s| (*s, false))
        .chain([(529, true)])
        .collect();
    for (status, streamed) in cases {
        let (mock, wire) = start(target).await?;
        let p = wire.with_retry(kit_retry());
        let hint = (status == 429).then_some(1);
        mock.push_status(status, hint);
        mock.push_text("Four.", 10, 1);
        let req = request(&session());
        let begun = std::time::Instant::now();
        let resp = if streamed {
            p.stream(&req, &mut |_| {}).await
        } else {
            p.complete(&req).await
        }
        .map_err(|e| format!("{status}: not retried to success: {e}"))?;
        let what = format!("{status} (stream: {streamed})");
        ensure_eq(&format!("{what}: text"), resp.text(), Some("Four."))?;
        ensure_eq(&format!("{what}: requests"), mock.requests().len(), 2)?;
        let attempts = resp
            .detail
            .get("attempts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        ensure_eq(&format!("{what}: attempts on record"), attempts.len(), 2)?;
        ensure_eq(
            &format!("{what}: first attempt's status"),
            attempts[0].get("status").and_then(Value::as_u64),
            Some(u64::from(status)),
        )?;
        if let Some(secs) = hint {
            ensure_eq(
                &format!("{what}: retry_after_ms"),
                attempts[0].get("retry_after_ms").and_then(Value::as_u64),
                Some(secs * 1000),
            )?;
            ensure_eq(
                &format!("{what}: backoff_ms"),
                attempts[0].get("backoff_ms").and_then(Value::as_u64),
                Some(secs * 1000),
            )?;
            ensure(begun.elapsed() >= Duration::from_secs(secs), || {
                format!(
                    "{what}: answered after {:?}, before Retry-After",
                    begun.elapsed()
                )
            })?;
        }
    }
    Ok(())
}

/// A temporary directory of the kit's own (no test-only dependency).
struct Scratch(PathBuf);

impl Scratch {
    fn new(check: &str) -> Result<Self, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rath-provider-conformance-{}-{check}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("scratch dir: {e}"))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The key goes to the server in a header and nowhere else: not the session (as the store
/// writes it), the cassette, the manifest, the provider's `Debug` (what logs print) or an
/// error, even one whose body echoes the key back.
pub async fn key_never_stored<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    let scratch = Scratch::new("key")?;
    let cassette = scratch.0.join("key.jsonl");
    let p = RecordingProvider::create(wire.clone(), &cassette).map_err(|e| e.to_string())?;
    mock.push_tool_calls(&[("call_1", "word_count", json!({"text": "x"}))], 40, 12);
    mock.push_text("Four.", 60, 3);
    let s = session();
    let req = request(&s);
    let resp = p.complete(&req).await.map_err(|e| e.to_string())?;
    let s = next_turn(resp.apply(&s, &req, 0.0));
    let req = request(&s);
    let resp = p
        .stream(&req, &mut |_| {})
        .await
        .map_err(|e| e.to_string())?;
    let s = next_turn(resp.apply(&s, &req, 0.0));
    let sent_key = mock.request_headers().iter().all(|h| {
        h.values()
            .any(|v| v.to_str().is_ok_and(|v| v.contains(TEST_KEY)))
    });
    ensure(sent_key, || {
        "the key was not sent in a request header".to_owned()
    })?;

    let retried = wire.clone().with_retry(kit_retry());
    let mut errors = Vec::new();
    for streamed in [false, true] {
        mock.push_key_echo(401);
        let req = request(&s);
        let got = if streamed {
            retried.stream(&req, &mut |_| {}).await
        } else {
            retried.complete(&req).await
        };
        match got {
            Ok(_) => return Err("a 401 echoing the key was answered".to_owned()),
            Err(e) => errors.push(e),
        }
    }
    let mut places: Vec<(&str, String)> = vec![
        (
            "session",
            serde_json::to_string(&s).map_err(|e| e.to_string())?,
        ),
        (
            "cassette",
            std::fs::read_to_string(&cassette).map_err(|e| e.to_string())?,
        ),
        (
            "manifest",
            serde_json::to_string(&retried.manifest()).map_err(|e| e.to_string())?,
        ),
        ("provider Debug", format!("{retried:?} {p:?}")),
    ];
    for e in &errors {
        places.push(("error Display", e.to_string()));
        places.push(("error Debug", format!("{e:?}")));
    }
    for (place, text) in places {
        ensure(!text.contains(TEST_KEY), || {
            format!("the key appears in the {place}: {text}")
        })?;
    }
    Ok(())
}

/// Three calls (a tool call whole, a text streamed, a tool call streamed) recorded to a
/// cassette; replayed offline against the same requests they give the same responses and the
/// same session bytes; recording the replay gives a byte-identical cassette.
pub async fn cassette_replay_identical<T: ProviderUnderTest>(target: &T) -> CheckResult {
    let (mock, wire) = start(target).await?;
    let scratch = Scratch::new("cassette")?;
    let first = scratch.0.join("first.jsonl");
    let second = scratch.0.join("second.jsonl");
    mock.push_tool_calls(&[("call_1", "word_count", json!({"text": "x y"}))], 40, 12);
    mock.push_text("Two words.", 60, 3);
    mock.push_tool_calls(&three_calls(), 70, 30);
    let live = RecordingProvider::create(wire, &first).map_err(|e| e.to_string())?;
    let (live_session, live_responses) = conversation(&live).await?;
    let replay = ReplayProvider::load(&first).map_err(|e| e.to_string())?;
    let again = RecordingProvider::create(replay, &second).map_err(|e| e.to_string())?;
    let (replayed_session, replayed_responses) = conversation(&again).await?;
    again.inner().assert_complete().map_err(|e| e.to_string())?;
    ensure_eq("responses", replayed_responses, live_responses)?;
    let bytes = |s: &Session| serde_json::to_string(s).map_err(|e| e.to_string());
    ensure(bytes(&replayed_session)? == bytes(&live_session)?, || {
        "the replayed session differs from the live one".to_owned()
    })?;
    let a = std::fs::read(&first).map_err(|e| e.to_string())?;
    let b = std::fs::read(&second).map_err(|e| e.to_string())?;
    ensure_eq("cassette lines", a.split(|c| *c == b'\n').count(), 4)?;
    ensure(a == b, || {
        format!(
            "re-recorded cassette differs:\n{}\n---\n{}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        )
    })
}

/// The cassette check's conversation: complete, then stream twice, each reply applied.
async fn conversation(
    p: &(impl Provider + ?Sized),
) -> Result<(Session, Vec<ProviderResponse>), String> {
    let mut s = session();
    let mut out = Vec::new();
    for streamed in [false, true, true] {
        let req = request(&s);
        let resp = if streamed {
            p.stream(&req, &mut |_| {}).await
        } else {
            p.complete(&req).await
        }
        .map_err(|e| e.to_string())?;
        s = next_turn(resp.apply(&s, &req, 0.0));
        out.push(resp);
    }
    Ok((s, out))
}
