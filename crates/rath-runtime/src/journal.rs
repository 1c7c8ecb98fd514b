//! The replay journal and the effect ledger as one [`Layer`] a worker installs on each
//! run's context: a registered workflow is plain flow code, and every model and tool call
//! it makes (agents, selectors, compressors, nested workflows) goes through them.
//!
//! - A model reply is recorded under `segment/agent#n` (the agent's n-th call in this
//!   segment of the run) with the sha256 of the normalized request, committed (fenced)
//!   before the workflow sees it. On re-execution the same key serves the recorded reply
//!   and the model is not asked; a request whose hash differs is
//!   [`RuntimeError::ReplayMismatch`].
//! - A tool call goes `prepared` → `dispatched` → `succeeded | failed` in the effect ledger
//!   under `segment/agent` and its call id, with the idempotency key
//!   (sha256 of run, step path, call id and canonical arguments) that the tool reads with
//!   [`current_call`]. A recorded answer is served back; a call found `dispatched` (its
//!   worker died before recording the answer) is re-run when the tool declares itself
//!   idempotent ([`rath_flow::Tool::idempotent`]) and is otherwise
//!   [`RuntimeError::Ambiguous`]: the run goes to review.
//!
//! Crash points for tests (compiled in only with the `failpoints` feature):
//! `RATH_RUNTIME_CRASH=<point>:<n>` SIGKILLs the process at the
//! n-th `<point>` it reaches (`model_reply`: a reply received, not recorded, everything
//! before it committed; `tool_effect`: a tool ran, its answer not recorded; `step`: a reply
//! recorded, before the workflow sees it); `RATH_RUNTIME_STOP=<point>:<n>` SIGSTOPs it
//! there (a worker paused past its lease, heartbeat and all, until someone sends SIGCONT;
//! it first waits for the store transactions under way, so the stopped process holds
//! none), and `RATH_RUNTIME_PAUSE=<point>:<n>:<ms>` sleeps there (the heartbeat goes on).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rath_flow::service::BoxFuture;
use rath_flow::{
    CancellationToken, Layer, ModelCall, ModelService, ToolError, ToolOutput, ToolRequest,
    ToolService,
};
use rath_provider::{
    ProviderError, ProviderRequest, ProviderResponse, StreamAssembler, ToolChoice, ToolSchema,
};
use rath_session::ChatMessage;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{Effect, EffectState, Lease, RunId};
use crate::store::{Barrier, JournalEntry, RunStore};
use crate::{RuntimeError, sha256_hex};

/// What a tool call running under a durable run can read about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallInfo {
    /// The run.
    pub run: RunId,
    /// The step path (`segment/agent`).
    pub step: String,
    /// The tool call id.
    pub call_id: String,
    /// sha256 of run, step path, call id and canonical arguments (hex): the same on every
    /// re-execution of the call, so an external system can refuse a duplicate.
    pub idempotency_key: String,
}

tokio::task_local! {
    static CALL: CallInfo;
}

/// The call a tool is running for, when it runs in a durable run (under the ledger).
pub fn current_call() -> Option<CallInfo> {
    CALL.try_with(Clone::clone).ok()
}

/// JSON with object keys sorted and no whitespace: what the idempotency key hashes.
pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    // Only JSON text was written, and JSON text is UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// [`canonical_json`] appended to `out` in one pass (no string per nested value).
fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Writing into a Vec cannot fail, and a string always serializes.
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                write_canonical(&m[k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

/// The canonical JSON of `req` without its `request_id` (what the journal hashes): the
/// same bytes as [`canonical_json`] of [`ProviderRequest::normalized`], written without
/// building that tree when the request allows. `tools` keeps the text of the last tool
/// list written: an agent offers the same tools on every call, and their schemas were
/// about half of this text's cost.
fn request_text(req: &ProviderRequest, tools: &Mutex<ToolsText>) -> Vec<u8> {
    let mut text = Vec::new();
    if write_request(req, tools, &mut text).is_err() {
        text.clear();
        write_canonical(&req.normalized(), &mut text);
    }
    text
}

/// The canonical JSON of a tool list, kept with the list it was written from.
#[derive(Default)]
pub(crate) struct ToolsText {
    tools: Vec<ToolSchema>,
    text: Option<Vec<u8>>,
}

fn no_thinking(t: &&std::collections::BTreeMap<String, Vec<Value>>) -> bool {
    t.is_empty()
}

/// The canonical text of a request around its messages and tools. Its keys in order are
/// `agent`, `max_tokens`, `messages`, `model`, `seed`, `temperature`, `thinking` (left out
/// when empty), `tool_choice`, `tools`; so the text is `head`, the messages' texts
/// comma-separated, `tail`, then `,"tools":` and the tools' text and `}`.
struct RequestParts<'a> {
    /// `{"agent":…,"max_tokens":…,"messages":[`.
    head: Vec<u8>,
    messages: &'a [ChatMessage],
    /// `],"model":…,"tool_choice":…` (no closing brace).
    tail: Vec<u8>,
    tools: &'a [ToolSchema],
}

/// [`RequestParts`] of `req`, each field serialized as [`ProviderRequest`] serializes it
/// (the same names, values and omissions).
fn request_parts(req: &ProviderRequest) -> Result<RequestParts<'_>, crate::canon::Unsupported> {
    use crate::canon::{Unsupported, write};
    #[derive(serde::Serialize)]
    struct Head<'a> {
        agent: &'a Option<String>,
        max_tokens: &'a Option<u32>,
    }
    #[derive(serde::Serialize)]
    struct Tail<'a> {
        model: &'a Option<String>,
        seed: &'a Option<i64>,
        temperature: &'a Option<f32>,
        #[serde(skip_serializing_if = "no_thinking")]
        thinking: &'a std::collections::BTreeMap<String, Vec<Value>>,
        tool_choice: &'a ToolChoice,
    }
    // Every field by name: one added to `ProviderRequest` does not compile here until it is
    // written (or left out on purpose, as the id is).
    let ProviderRequest {
        request_id: _,
        model,
        messages,
        tools,
        tool_choice,
        temperature,
        seed,
        max_tokens,
        agent,
        thinking,
    } = req;
    // `{"agent":…,"max_tokens":…}` becomes `{"agent":…,"max_tokens":…,"messages":[`.
    let mut head = Vec::new();
    write(&Head { agent, max_tokens }, None, &mut head)?;
    if head.pop() != Some(b'}') {
        return Err(Unsupported);
    }
    head.extend_from_slice(b",\"messages\":[");
    // `{"model":…,"tool_choice":…}` becomes `],"model":…,"tool_choice":…`.
    let mut tail = b"],".to_vec();
    write(
        &Tail {
            model,
            seed,
            temperature,
            thinking,
            tool_choice,
        },
        None,
        &mut tail,
    )?;
    if tail.remove(2) != b'{' || tail.pop() != Some(b'}') {
        return Err(Unsupported);
    }
    Ok(RequestParts {
        head,
        messages,
        tail,
        tools,
    })
}

/// [`request_text`]'s direct path: the [`RequestParts`] and the messages between them, then
/// the tools' text (kept when the list is the one it was written from).
fn write_request(
    req: &ProviderRequest,
    kept: &Mutex<ToolsText>,
    out: &mut Vec<u8>,
) -> Result<(), crate::canon::Unsupported> {
    let parts = request_parts(req)?;
    out.extend_from_slice(&parts.head);
    for (i, m) in parts.messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::canon::write(m, None, out)?;
    }
    out.extend_from_slice(&parts.tail);
    out.extend_from_slice(b",\"tools\":");
    with_tools_text(parts.tools, kept, |text| out.extend_from_slice(text))?;
    out.push(b'}');
    Ok(())
}

/// Calls `f` with the canonical JSON of `tools`: the kept text when `tools` is the list it
/// was written from, else a new text, which is kept.
fn with_tools_text(
    tools: &[ToolSchema],
    kept: &Mutex<ToolsText>,
    f: impl FnOnce(&[u8]),
) -> Result<(), crate::canon::Unsupported> {
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    match &kept.text {
        Some(text) if kept.tools == tools => f(text),
        _ => {
            let mut text = Vec::new();
            crate::canon::write(tools, None, &mut text)?;
            f(&text);
            kept.tools = tools.to_vec();
            kept.text = Some(text);
        }
    }
    Ok(())
}

/// The sha256 state of a provider's last request hashed through its messages, so that the
/// next request of the same conversation hashes only what it adds: an agent's requests
/// repeat every message before, and hashing each whole was quadratic in the run's length.
#[derive(Default)]
pub(crate) struct HashedPrefix {
    /// The canonical text before the first message: `{"agent":…,"max_tokens":…,"messages":[`.
    head: Vec<u8>,
    /// The messages hashed after it, in order.
    messages: Vec<ChatMessage>,
    /// sha256 of `head` and those messages' canonical JSON, comma-separated (no `]` yet).
    state: Sha256,
}

/// sha256 (hex) of [`request_text`]: from `prefix` when `req` begins with its head and
/// messages (hashing only the messages after them, then the rest of the request), else
/// from a new prefix. The same digest as hashing the whole text: the text is the same
/// bytes, fed in the same order.
fn request_hash(
    req: &ProviderRequest,
    tools: &Mutex<ToolsText>,
    prefix: &Mutex<HashedPrefix>,
) -> String {
    match hash_by_prefix(req, tools, prefix) {
        Ok(hash) => hash,
        Err(crate::canon::Unsupported) => sha256_hex(&request_text(req, tools)),
    }
}

/// [`request_hash`]'s incremental path: the head and the messages through the prefix,
/// then the tail and the tools, which are written again for each request (small, but for
/// `thinking`).
fn hash_by_prefix(
    req: &ProviderRequest,
    tools: &Mutex<ToolsText>,
    prefix: &Mutex<HashedPrefix>,
) -> Result<String, crate::canon::Unsupported> {
    let RequestParts {
        head,
        messages,
        tail,
        tools: offered,
    } = request_parts(req)?;
    let mut p = prefix.lock().unwrap_or_else(|p| p.into_inner());
    let hashed = p.messages.len();
    if p.head != head || messages.get(..hashed) != Some(&p.messages[..]) {
        p.state = Sha256::new();
        p.state.update(&head);
        p.head = head;
        p.messages.clear();
    }
    let mut text = Vec::new();
    for m in &messages[p.messages.len()..] {
        text.clear();
        if !p.messages.is_empty() {
            text.push(b',');
        }
        crate::canon::write(m, None, &mut text)?;
        p.state.update(&text);
        p.messages.push(m.clone());
    }
    let mut h = p.state.clone();
    drop(p);
    h.update(&tail);
    h.update(b",\"tools\":");
    with_tools_text(offered, tools, |text| h.update(text))?;
    h.update(b"}");
    Ok(hex::encode(h.finalize()))
}

/// sha256(run, step path, call id, canonical arguments), NUL-separated, hex.
pub fn idempotency_key(run: &RunId, step: &str, call_id: &str, args: &Value) -> String {
    let text = format!("{}\0{}\0{}\0{}", run, step, call_id, canonical_json(args));
    sha256_hex(text.as_bytes())
}

pub use crate::failpoint::{CrashPoint, crash_point};
pub(crate) use crate::failpoint::{armed, quiet_share};

#[derive(Debug, Default)]
struct ScopeState {
    journal: HashMap<(String, i64), JournalEntry>,
    counters: HashMap<String, i64>,
    effects: HashMap<(String, String), Effect>,
    fatal: Option<RuntimeError>,
    served: u64,
    live: u64,
}

/// One claim of one run: the journal and ledger as loaded at the claim, the lease every
/// write carries, and what stopped the run (if anything). Cheap to clone.
#[derive(Clone, Debug)]
pub struct RunScope {
    store: RunStore,
    lease: Lease,
    segment: i64,
    state: Arc<Mutex<ScopeState>>,
    cancel: CancellationToken,
    inflight: Arc<tokio::sync::Semaphore>,
    /// The writes handed to the committer without waiting, and how far they landed.
    barrier: Arc<Barrier>,
}

/// The suffix of a journal step that records when an execution started (`<segment>@clock`;
/// a model call's step is `<segment>/<agent>`, so the two never meet).
pub const CLOCK_STEP: &str = "@clock";

/// Tool calls one scope may have dispatched at once (far above any workflow's fan-out).
const INFLIGHT: u32 = 1 << 20;

impl RunScope {
    /// A scope for `lease` on `store` at journal segment `segment`, with what the store
    /// recorded for the run so far; `cancel` stops the workflow when the run must stop.
    pub async fn load(
        store: RunStore,
        lease: Lease,
        segment: i64,
        cancel: CancellationToken,
    ) -> Result<RunScope, RuntimeError> {
        let mut state = ScopeState::default();
        for e in store.journal(&lease.run).await? {
            state.journal.insert((e.step.clone(), e.seq), e);
        }
        for e in store.effects(&lease.run).await? {
            state.effects.insert((e.step.clone(), e.call_id.clone()), e);
        }
        Ok(RunScope {
            store,
            lease,
            segment,
            state: Arc::new(Mutex::new(state)),
            cancel,
            inflight: Arc::new(tokio::sync::Semaphore::new(INFLIGHT as usize)),
            barrier: Arc::default(),
        })
    }

    /// A scope for a run's first claim ever (its `attempts` is 1): no worker held it
    /// before, so its journal and ledger are empty and are not read.
    pub fn first(
        store: RunStore,
        lease: Lease,
        segment: i64,
        cancel: CancellationToken,
    ) -> RunScope {
        RunScope {
            store,
            lease,
            segment,
            state: Arc::default(),
            cancel,
            inflight: Arc::new(tokio::sync::Semaphore::new(INFLIGHT as usize)),
            barrier: Arc::default(),
        }
    }

    /// The run.
    pub fn run(&self) -> &RunId {
        &self.lease.run
    }

    /// When this execution of the run first ran (ms since the Unix epoch), the time its
    /// sessions carry: on the first execution of this segment and attempt (`failures`, the
    /// run's failed attempts so far), `now`, recorded in the journal (step
    /// `<segment>@clock`, position `failures`; handed to the committer behind the run's
    /// other writes, so nothing stored with this time commits before it); on a
    /// re-execution (after a crash, a hand-back, a lost lease) the time recorded then, so
    /// the run mints the same ids and times again.
    pub fn started_at(&self, failures: i64, now: i64) -> i64 {
        let step = format!("{}{CLOCK_STEP}", self.segment);
        let mut s = self.lock();
        let recorded = s
            .journal
            .get(&(step.clone(), failures))
            .and_then(|e| serde_json::from_str::<Value>(&e.payload).ok())
            .and_then(|v| v.get("started_ms").and_then(Value::as_i64));
        if let Some(t) = recorded {
            return t;
        }
        let entry = JournalEntry {
            step,
            seq: failures,
            request_hash: String::new(),
            payload: serde_json::json!({ "started_ms": now }).to_string(),
            token: self.lease.token,
        };
        s.journal
            .insert((entry.step.clone(), entry.seq), entry.clone());
        drop(s);
        self.store.record_behind(&self.lease, entry, &self.barrier);
        now
    }

    /// The lease this scope's writes carry.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// What stopped the run (fenced, replay mismatch, an ambiguous call), if anything.
    pub fn take_fatal(&self) -> Option<RuntimeError> {
        self.lock().fatal.take()
    }

    /// Waits until every tool call this scope dispatched has its answer recorded (or failed
    /// to record it): a worker calls it before it gives a run up, so no call it handed to a
    /// tool is left `dispatched` (which the next worker would have to treat as ambiguous).
    /// It also waits for every journal and ledger write of the scope to be committed (a
    /// refused one stops the run: [`RunScope::take_fatal`] says why).
    pub async fn settle(&self) {
        let _all = self.inflight.acquire_many(INFLIGHT).await;
        let _ = self.durable().await;
    }

    /// Waits until every write this scope handed over is committed; a refused one (a
    /// fence) stops the run and is returned as text.
    pub(crate) async fn durable(&self) -> Result<(), String> {
        self.barrier.wait().await.map_err(|e| self.stop(e))
    }

    /// Stops the run when one of its writes is already known refused (no wait: a model may
    /// be asked while the run's last writes commit, see [`JournaledModel`]).
    pub(crate) fn not_failed(&self) -> Result<(), String> {
        match self.barrier.failed() {
            Some(e) => Err(self.stop(e)),
            None => Ok(()),
        }
    }

    /// The scope's barrier (the live session writer waits on it before each write).
    pub(crate) fn barrier(&self) -> Arc<Barrier> {
        self.barrier.clone()
    }

    /// Replies and answers served from the journal and ledger, and those fetched live.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.lock();
        (s.served, s.live)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScopeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stopped(&self) -> Option<String> {
        self.lock().fatal.as_ref().map(ToString::to_string)
    }

    fn stop(&self, e: RuntimeError) -> String {
        let text = e.to_string();
        let mut s = self.lock();
        if s.fatal.is_none() {
            s.fatal = Some(e);
        }
        drop(s);
        self.cancel.cancel();
        text
    }

    fn step(&self, agent: Option<&str>) -> String {
        format!("{}/{}", self.segment, agent.unwrap_or("-"))
    }
}

/// The scope as a layer: the journal around the model service, the ledger around the tool
/// service. A worker installs it on the context of each run it executes.
impl Layer for RunScope {
    fn model(&self, inner: Arc<dyn ModelService>) -> Arc<dyn ModelService> {
        Arc::new(JournaledModel {
            scope: self.clone(),
            inner,
            hashing: Mutex::default(),
        })
    }

    fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
        Arc::new(JournaledTools {
            scope: self.clone(),
            inner,
        })
    }
}

/// Model calls whose replies are recorded in, and on re-execution served from, the run's
/// journal (see the [module docs](self)).
struct JournaledModel {
    scope: RunScope,
    inner: Arc<dyn ModelService>,
    /// Per step (`segment/agent`): the text of the tools its last request offered (see
    /// [`request_text`]) and its last request hashed through its messages (see
    /// [`request_hash`]), so a growing conversation is hashed a message at a time.
    hashing: Mutex<HashMap<String, Arc<Hashing>>>,
}

#[derive(Default)]
struct Hashing {
    tools: Mutex<ToolsText>,
    prefix: Mutex<HashedPrefix>,
}

enum Served {
    Recorded(ProviderResponse),
    Live {
        step: String,
        seq: i64,
        hash: String,
    },
}

impl JournaledModel {
    fn lookup(&self, req: &ProviderRequest) -> Result<Served, ProviderError> {
        if let Some(why) = self.scope.stopped() {
            return Err(ProviderError::Config(format!("durable run stopped: {why}")));
        }
        let step = self.scope.step(req.agent.as_deref());
        let hashing = self
            .hashing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(step.clone())
            .or_default()
            .clone();
        let hash = request_hash(req, &hashing.tools, &hashing.prefix);
        let mut s = self.scope.lock();
        let seq = {
            let c = s.counters.entry(step.clone()).or_insert(0);
            *c += 1;
            *c - 1
        };
        let Some(entry) = s.journal.get(&(step.clone(), seq)).cloned() else {
            s.live += 1;
            return Ok(Served::Live { step, seq, hash });
        };
        s.served += 1;
        drop(s);
        if entry.request_hash != hash {
            let e = RuntimeError::ReplayMismatch {
                run: self.scope.run().to_string(),
                key: format!("{step}#{seq}"),
            };
            return Err(ProviderError::Config(self.scope.stop(e)));
        }
        serde_json::from_str(&entry.payload)
            .map(Served::Recorded)
            .map_err(|e| ProviderError::Config(format!("journal entry {step}#{seq}: {e}")))
    }

    async fn record(
        &self,
        step: String,
        seq: i64,
        hash: String,
        resp: &ProviderResponse,
    ) -> Result<(), ProviderError> {
        if armed(CrashPoint::ModelReply) {
            // The `model_reply` point is "this reply arrived, not recorded" with what the run
            // recorded before it committed (the model is asked without waiting for that, so
            // a fast model's reply can arrive while the last answer or reply still commits).
            let _ = self.scope.durable().await;
        }
        crash_point(CrashPoint::ModelReply).await;
        let payload = serde_json::to_string(resp)
            .map_err(|e| ProviderError::Config(format!("reply not recordable: {e}")))?;
        let entry = JournalEntry {
            step,
            seq,
            request_hash: hash,
            payload,
            token: self.scope.lease.token,
        };
        // Handed over without waiting: the commit shares a transaction with what the
        // workflow does next (the tool call's `dispatched` row), and everything that must
        // come after it waits on the barrier (a tool dispatch, a session write, the
        // release).
        self.scope
            .store
            .record_behind(&self.scope.lease, entry, &self.scope.barrier);
        if armed(CrashPoint::Step) {
            // The `step` point is "a reply recorded": committed.
            self.scope.durable().await.map_err(ProviderError::Config)?;
        }
        crash_point(CrashPoint::Step).await;
        Ok(())
    }
}

impl ModelService for JournaledModel {
    fn call<'a>(
        &'a self,
        call: ModelCall<'a>,
    ) -> BoxFuture<'a, Result<ProviderResponse, ProviderError>> {
        Box::pin(async move {
            match self.lookup(call.request)? {
                Served::Recorded(r) => {
                    if let Some(sink) = call.stream {
                        for ev in StreamAssembler::events_for(&r) {
                            sink(ev);
                        }
                    }
                    Ok(r)
                }
                Served::Live { step, seq, hash } => {
                    // A model call is no side effect: it does not wait for the run's last
                    // writes (the last tool answer) to commit. Its reply is recorded behind
                    // them on the run's lane, so it commits with them or after them, and
                    // the next tool dispatch waits for all of it. A write already known
                    // refused (the lease passed on) stops the run before the model is asked.
                    self.scope.not_failed().map_err(ProviderError::Config)?;
                    let resp = self.inner.call(call).await?;
                    self.record(step, seq, hash, &resp).await?;
                    Ok(resp)
                }
            }
        })
    }
}

/// Tool calls that go through the run's effect ledger (see the [module docs](self)).
#[derive(Clone)]
struct JournaledTools {
    scope: RunScope,
    inner: Arc<dyn ToolService>,
}

fn answer_json(r: &Result<ToolOutput, ToolError>) -> String {
    match r {
        Ok(o) => serde_json::json!({"ok": true, "content": o.content}).to_string(),
        Err(e) => serde_json::json!({"ok": false, "error": e}).to_string(),
    }
}

fn answer_from(text: &str) -> Result<Result<ToolOutput, ToolError>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if v["ok"] == Value::Bool(true) {
        let content = v["content"].as_str().ok_or("answer without content")?;
        Ok(Ok(ToolOutput::text(content)))
    } else {
        let e: ToolError = serde_json::from_value(v["error"].clone()).map_err(|e| e.to_string())?;
        Ok(Err(e))
    }
}

impl JournaledTools {
    fn fail(&self, e: RuntimeError) -> ToolError {
        ToolError::exception(self.scope.stop(e))
    }

    fn put_behind(&self, e: &Effect) {
        self.scope
            .store
            .put_effect_behind(&self.scope.lease, e.clone(), &self.scope.barrier);
        self.scope
            .lock()
            .effects
            .insert((e.step.clone(), e.call_id.clone()), e.clone());
    }

    async fn put(&self, e: &Effect) -> Result<(), ToolError> {
        self.scope
            .store
            .put_effect(&self.scope.lease, e)
            .await
            .map_err(|err| self.fail(err))?;
        self.scope
            .lock()
            .effects
            .insert((e.step.clone(), e.call_id.clone()), e.clone());
        Ok(())
    }
}

impl ToolService for JournaledTools {
    fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(self.ledgered(call))
    }
}

impl JournaledTools {
    /// Serves a recorded answer, refuses an ambiguous call, or dispatches a new one.
    async fn ledgered(&self, call: ToolRequest) -> Result<ToolOutput, ToolError> {
        if let Some(why) = self.scope.stopped() {
            return Err(ToolError::exception(format!("durable run stopped: {why}")));
        }
        let cx = &call.context;
        let step = self.scope.step(cx.agent());
        let call_id = cx.call_id().to_owned();
        let recorded = self
            .scope
            .lock()
            .effects
            .get(&(step.clone(), call_id.clone()))
            .cloned();
        let key = idempotency_key(self.scope.run(), &step, &call_id, &call.args);
        let mut effect = Effect {
            run: self.scope.run().clone(),
            step: step.clone(),
            call_id: call_id.clone(),
            tool: call.name().to_owned(),
            idempotency_key: key.clone(),
            args: canonical_json(&call.args),
            state: EffectState::Prepared,
            result: None,
        };
        match recorded.as_ref().map(|e| (e.state, e.result.as_deref())) {
            Some((EffectState::Succeeded | EffectState::Failed, Some(text))) => {
                self.scope.lock().served += 1;
                return answer_from(text)
                    .unwrap_or_else(|m| Err(self.fail(crate::error::corrupt("effect answer", m))));
            }
            Some((EffectState::Dispatched | EffectState::Ambiguous, _))
                if !call.tool.idempotent() =>
            {
                effect.state = EffectState::Ambiguous;
                let _ = self.put(&effect).await;
                return Err(self.fail(RuntimeError::Ambiguous {
                    run: self.scope.run().to_string(),
                    tool: effect.tool.clone(),
                    call_id,
                }));
            }
            // Prepared (never handed over), dispatched to an idempotent tool, or new.
            _ => {}
        }
        self.scope.lock().live += 1;
        // No `prepared` row: a call with no row and a call found `prepared` are the same to
        // a resuming worker (never handed to the tool: run it). What must be durable before
        // the effect is `dispatched` (see `dispatch`).
        // Once handed to the tool, a call runs to its recorded answer even when the workflow
        // is cancelled meanwhile (a worker handing its runs back on shutdown): the task is
        // not aborted when this future is dropped, and `RunScope::settle` waits for it.
        let permit = self.scope.inflight.clone().acquire_owned().await.ok();
        let me = self.clone();
        let task = tokio::spawn(async move {
            let _permit = permit;
            me.dispatch(call, effect, step, key).await
        });
        task.await
            .unwrap_or_else(|e| Err(ToolError::exception(format!("tool task: {e}"))))
    }
}

impl JournaledTools {
    async fn dispatch(
        &self,
        call: ToolRequest,
        mut effect: Effect,
        step: String,
        key: String,
    ) -> Result<ToolOutput, ToolError> {
        effect.state = EffectState::Dispatched;
        self.put_behind(&effect);
        // The `dispatched` row and the reply that asked for this call (handed over before
        // it) are committed before the tool runs.
        self.scope.durable().await.map_err(ToolError::exception)?;
        let info = CallInfo {
            run: self.scope.run().clone(),
            step,
            call_id: effect.call_id.clone(),
            idempotency_key: key,
        };
        let answer = CALL.scope(info, self.inner.call(call)).await;
        crash_point(CrashPoint::ToolEffect).await;
        effect.state = if answer.is_ok() {
            EffectState::Succeeded
        } else {
            EffectState::Failed
        };
        effect.result = Some(answer_json(&answer));
        // Committed before the next tool dispatch or the release (they wait on the barrier);
        // the next model reply is recorded behind it, so it never commits before it.
        self.put_behind(&effect);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_and_keeps_scalars_compact() {
        let v = json!({
            "z": [3, 1.5, {"b": null, "a": "é\"\n"}],
            "a": {"y": true, "x": [], "\u{1}": {}},
            "m": -0.25,
        });
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"\u0001":{},"x":[],"y":true},"m":-0.25,"z":[3,1.5,{"a":"é\"\n","b":null}]}"#
        );
        assert_eq!(canonical_json(&json!("s")), r#""s""#);
    }

    /// `req` with every optional field set (and a thinking block for call `c1`).
    fn every_field(mut req: ProviderRequest) -> ProviderRequest {
        req.model = Some("m".into());
        req.temperature = Some(0.25);
        req.seed = Some(-3);
        req.max_tokens = Some(64);
        req.tool_choice = ToolChoice::Required;
        req.thinking.insert(
            "c1".into(),
            vec![json!({"type": "thinking", "signature": "s"})],
        );
        req
    }

    #[test]
    fn a_request_text_is_its_normalized_tree_whether_its_tools_were_kept_or_not() {
        use rath_session::{Chunk, Session, Stamper, ToolCall};
        let s = Session::user_with("plan it", Stamper::seeded(5))
            .push(Chunk::assistant(
                Some("calling".into()),
                Some(vec![ToolCall::function("c1", "noop", r#"{"i": 1}"#)]),
            ))
            .push(Chunk::tool_result("c1", "noop", "{}"));
        let noop = ToolSchema::new(
            "noop",
            "Do nothing.",
            json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}),
        );
        let other = ToolSchema::new("z_other", "Other \"quoted\".", json!({"b": 1, "a": [true]}));
        let full = every_field(
            ProviderRequest::from_session(&s, vec![noop.clone(), other.clone()]).with_agent("a"),
        );
        let requests = [
            ProviderRequest::from_session(&s, vec![noop.clone()]),
            // The same tools again (the kept text), then others, none, and the first again.
            ProviderRequest::from_session(
                &s.clone().push(Chunk::assistant_text("ok")),
                vec![noop.clone()],
            ),
            full,
            ProviderRequest::from_session(&s, Vec::new()),
            ProviderRequest::from_session(&s, vec![noop.clone()]).with_agent("b"),
            ProviderRequest::from_session(&s, vec![other, noop]),
        ];
        let kept = Mutex::new(ToolsText::default());
        for req in &requests {
            let text = request_text(req, &kept);
            assert_eq!(
                String::from_utf8(text).unwrap(),
                canonical_json(&req.normalized())
            );
        }
    }

    #[test]
    fn a_request_hash_continued_from_the_last_request_is_the_hash_of_its_whole_text() {
        use rath_session::{Chunk, Session, Stamper, ToolCall};
        let noop = ToolSchema::new("noop", "Do nothing.", json!({"type": "object"}));
        let other = ToolSchema::new("z_other", "Other \"quoted\".", json!({"b": 1, "a": [true]}));
        // A conversation growing a step at a time, as an agent's requests do.
        let mut s = Session::user_with("plan \"it\"\n\u{1}é", Stamper::seeded(9));
        let mut sessions = vec![s.clone()];
        for i in 0..4 {
            let id = format!("c{i}");
            s = s
                .push(Chunk::assistant(
                    (i % 2 == 0).then(|| format!("step {i}")),
                    Some(vec![ToolCall::function(
                        &id,
                        "noop",
                        format!(r#"{{"i": {i}}}"#),
                    )]),
                ))
                .push(Chunk::tool_result(&id, "noop", format!("answer {i}")));
            sessions.push(s.clone());
        }
        let grow =
            |s: &Session| ProviderRequest::from_session(s, vec![noop.clone()]).with_agent("a");
        let mut requests: Vec<ProviderRequest> = sessions.iter().map(grow).collect();
        // Then: the same again, a shorter one, an edited history, another agent, other
        // tools, every optional field, and the longest again.
        requests.push(grow(&sessions[4]));
        requests.push(grow(&sessions[2]));
        let mut edited = grow(&sessions[4]);
        edited.messages[1].content = Some("changed".into());
        requests.push(edited);
        requests
            .push(ProviderRequest::from_session(&sessions[4], vec![noop.clone()]).with_agent("b"));
        requests.push(ProviderRequest::from_session(
            &sessions[4],
            vec![other.clone(), noop.clone()],
        ));
        requests.push(every_field(grow(&sessions[4])));
        requests.push(ProviderRequest::from_session(
            &Session::empty_with(Stamper::seeded(1)),
            Vec::new(),
        ));
        requests.push(grow(&sessions[4]));
        let (tools, prefix) = (
            Mutex::new(ToolsText::default()),
            Mutex::new(HashedPrefix::default()),
        );
        for (i, req) in requests.iter().enumerate() {
            let whole = sha256_hex(canonical_json(&req.normalized()).as_bytes());
            assert_eq!(request_hash(req, &tools, &prefix), whole, "request {i}");
            // Each request is hashed through the prefix: it holds the request's messages.
            assert_eq!(prefix.lock().unwrap().messages, req.messages, "request {i}");
        }
    }

    #[test]
    fn the_idempotency_key_is_stable() {
        // Pinned: a journal or ledger written by an earlier build must match on replay.
        let key = idempotency_key(&RunId("r1".into()), "0/a", "c1", &json!({"b": 1, "a": [2]}));
        assert_eq!(
            key,
            sha256_hex("r1\u{0}0/a\u{0}c1\u{0}{\"a\":[2],\"b\":1}".as_bytes())
        );
    }
}
