//! Where a stopped workflow stopped, written on the stopped session itself, so that
//! forwarding that session (also after loading it in another process) resumes it.
//!
//! A combinator whose output holds pending work records its place as a lineage extra of that
//! output: a [`crate::Sequence`] its step (`flow.sequence.<name>`), a [`crate::LoopUntil`]
//! its iteration (`flow.loop.<name>`), a [`crate::Selector`] the running candidate and step
//! (`flow.selector.<name>`), a [`crate::Parallel`] every branch's id, usage, lineage and
//! pending call ids (`flow.parallel.<name>`), from which it rebuilds the branch sessions.
//! On a forward whose input holds pending work, each one reads its marker and skips what had
//! finished.
//!
//! A crash leaves no marker: the session a persist-as-you-go sink left partial is a loop
//! output with its round's calls unanswered. Inside a `LoopUntil` or a `Parallel` it says
//! where it ran (the lineage extra `flow.at`, the context's position): the loop resumes
//! that iteration and runs the rest, the fan-out takes its other branches from the sink's
//! store and merges them.
//!
//! ```
//! use rath_flow::{FnWorkflow, Sequence, WorkflowExt};
//! use rath_session::{PendingCall, Session, ToolCall};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let call = ToolCall::function("c1", "write", "{}");
//! let stop = FnWorkflow::new("stop", "Stops.", move |s: Session| {
//!     Ok(if s.pending().is_empty() {
//!         s.with_pending(PendingCall { call: call.clone(), agent: None, reason: "require_approval".into() })
//!     } else {
//!         s.take_pending("c1")?.1
//!     })
//! });
//! let seq = Sequence::new("seq").then(FnWorkflow::new("first", "", |s: Session| Ok(s.push(rath_session::Chunk::user("once")))))
//!     .then(stop);
//! let stopped = seq.run(Session::user("go")).await?;
//! assert_eq!(stopped.lineage().extra("flow.sequence.seq"), Some(&serde_json::json!(1)));
//! let done = seq.run(stopped).await?; // resumes at step 1: "first" does not run again
//! assert!(done.pending().is_empty());
//! assert_eq!(done.chunks().iter().filter(|c| c.text() == Some("once")).count(), 1);
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;

use rath_session::{
    Chunk, ChunkBody, Lineage, Session, SessionId, SessionParts, Stamper, StamperState, Usage,
};
use serde_json::{Value, json};

use crate::FlowError;
use crate::workflow::SharedWorkflow;

/// The marker `key` of `session`, when `session` holds work to resume.
pub(crate) fn marker<'s>(session: &'s Session, key: &str) -> Option<&'s Value> {
    if is_resumption(session) {
        session.lineage().extra(key)
    } else {
        None
    }
}

/// The marker key of a combinator.
pub(crate) fn key(kind: &str, name: &str) -> String {
    format!("flow.{kind}.{name}")
}

/// For a session cut off mid-round with no stop marker (the process died while its tool
/// calls ran: unanswered calls, nothing pending), the index of the step among `steps` that
/// was running, found from the session alone: the one holding the agent of the session's
/// last model call. `None` when the session was not cut off or no step holds that agent.
pub(crate) fn cut_in(session: &Session, steps: &[SharedWorkflow]) -> Option<usize> {
    if !session.pending().is_empty() || session.unanswered_tool_calls().is_empty() {
        return None;
    }
    let agent = session.chunks().iter().rev().find_map(|c| match c.body() {
        ChunkBody::ModelCall(m) => m.agent.clone(),
        _ => None,
    })?;
    let suffix = format!(".{agent}");
    steps.iter().position(|s| {
        crate::workflow::agent_paths(s.as_ref())
            .iter()
            .any(|path| *path == agent || path.ends_with(&suffix))
    })
}

/// The lineage extra of a loop output run inside a `LoopUntil` or a `Parallel`: where in the
/// workflow it ran, one entry per combinator around it, outermost first
/// (`{"loop": name, "iteration": i}`, `{"parallel": name, "branch": i, "input": id,
/// "prefix": n, "input_usage": .., "input_agent_usage": ..}`, and `{"sequence": name,
/// "step": i}` for a `Sequence` inside those). A session a crash cut off carries it, so a
/// forward of it through the workflow finds the iteration and the branch it was in.
pub(crate) const POSITION_KEY: &str = "flow.at";

/// The recorded position of `session` (see [`POSITION_KEY`]); empty when it has none.
pub(crate) fn position_of(session: &Session) -> &[Value] {
    match session.lineage().extra(POSITION_KEY) {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

/// What a combinator finds of itself in the recorded position of a session it resumes
/// from after a crash.
pub(crate) struct Found {
    /// Its entry in the position (where it was).
    pub entry: Value,
    /// The session was made deeper down (inside its child combinator), not by its child
    /// directly.
    pub deeper: bool,
    /// The session was cut off (unanswered calls, or its file left partial), not finished.
    pub cut: bool,
}

/// The entry of the combinator at `cx`'s depth in `session`'s recorded position, when
/// `session` is work to resume from a crash (a cut session, or one a resuming fan-out took
/// from the store for this branch), its position runs through `cx`'s, and `mine` accepts
/// the entry. A finished session handed to a fresh run is never read this way.
pub(crate) fn found(
    session: &Session,
    cx: &crate::FlowContext,
    mine: impl Fn(&Value) -> bool,
) -> Option<Found> {
    let cut = match cx.recovered(session.id()) {
        Some(cut) => cut,
        None if session.pending().is_empty() && is_resumption(session) => true,
        None => return None,
    };
    let at = position_of(session);
    let here = cx.position();
    let d = here.len();
    if at.len() <= d || at[..d] != *here || !mine(&at[d]) {
        return None;
    }
    Some(Found {
        entry: at[d].clone(),
        deeper: at.len() > d + 1,
        cut,
    })
}

/// The lineage extra holding where a deterministic run's stamper was when it stopped.
pub(crate) const STAMPER_KEY: &str = "flow.stamper";

/// `session` stopped in a combinator: its place (`key`: `marker`), and, for a deterministic
/// stamper, where the stamper is, so that a resume in another process mints the ids and
/// tokens the run would have minted next (written once per state).
pub(crate) fn stopped(session: Session, key: String, marker: impl Into<Value>) -> Session {
    let session = session.with_extra(key, marker);
    match session.stamper().state().map(|st| json!(st)) {
        Some(state) if saved_state(&session) != Some(&state) => {
            session.with_extra(STAMPER_KEY, state)
        }
        _ => session,
    }
}

/// The last stamper state written on `session`.
fn saved_state(session: &Session) -> Option<&Value> {
    let extras = &session.lineage().extras;
    extras
        .iter()
        .rev()
        .find(|(k, _)| k == STAMPER_KEY)
        .map(|(_, v)| v)
}

/// `session` ready to resume: a stopped deterministic run loaded with a live stamper (as
/// the store loads every session) gets the stamper it stopped with back. A session whose
/// stamper is deterministic already (resumed in the same process) is left as it is.
pub(crate) fn restored(session: Session) -> Session {
    if !is_resumption(&session) {
        return session;
    }
    let session = with_evidence_usage(session);
    if session.stamper().is_deterministic() {
        return session;
    }
    let state = saved_state(&session).and_then(|v| serde_json::from_value(v.clone()).ok());
    match state.as_ref().and_then(Stamper::restore) {
        Some(stamper) => session.with_stamper(stamper),
        None => session,
    }
}

/// `s` with its usage totals, when it has none, rebuilt from its `model_call` evidence: a
/// session loaded from a file a crash left partial has no trailer to carry them, and every
/// call it counts is on record there, so a resumed run counts each once. Inside a fan-out
/// (its position names one) a branch counts from its fork, which starts with no usage: the
/// evidence of the fan-out's input (the first `prefix` chunks) is not its own.
pub(crate) fn with_evidence_usage(s: Session) -> Session {
    if s.usage().is_some() {
        return s;
    }
    let from = position_of(&s)
        .iter()
        .rev()
        .find(|e| e.get("parallel").is_some())
        .and_then(|e| e["prefix"].as_u64())
        .map_or(0, |p| p as usize);
    let mut total: Option<Usage> = None;
    let mut per_agent: BTreeMap<String, Usage> = BTreeMap::new();
    for c in s.chunks().iter().skip(from) {
        if let ChunkBody::ModelCall(m) = c.body()
            && let Some(u) = m.usage
        {
            *total.get_or_insert_with(Usage::default) += u;
            if let Some(a) = &m.agent {
                *per_agent.entry(a.clone()).or_default() += u;
            }
        }
    }
    if total.is_none() {
        return s;
    }
    s.with_usage_totals(total, per_agent)
}

/// The marker of a stopped fan-out: the merged length, the shared prefix, the input's usage
/// and each branch's id, usage, lineage and pending call ids.
pub(crate) fn parallel_marker(
    input_usage: &(Option<Usage>, BTreeMap<String, Usage>),
    outs: &[Branch],
    prefix: usize,
    merged_len: usize,
) -> Value {
    let branches: Vec<Value> = outs
        .iter()
        .map(|b| {
            let o = &b.out;
            let mut v = json!({
                "id": o.id().as_str(),
                "usage": o.usage(),
                "agent_usage": o.agent_usage(),
                "lineage": o.lineage(),
                "pending": o.pending().iter().map(|p| p.call.id.as_str()).collect::<Vec<_>>(),
            });
            if b.tag != o.id().as_str() {
                v["tag"] = json!(b.tag);
            }
            if let Some(st) = b.stamper.as_ref().filter(|_| !o.pending().is_empty()) {
                v["stamper"] = json!(st);
            }
            v
        })
        .collect();
    json!({
        "len": merged_len,
        "prefix": prefix,
        "input_usage": input_usage.0,
        "input_agent_usage": input_usage.1,
        "branches": branches,
    })
}

fn bad(what: &str) -> FlowError {
    FlowError::Config(format!("the parallel resume marker is malformed: {what}"))
}

fn field<T: serde::de::DeserializeOwned>(v: &Value, name: &str) -> Result<T, FlowError> {
    serde_json::from_value(v.get(name).cloned().unwrap_or(Value::Null))
        .map_err(|e| bad(&format!("{name}: {e}")))
}

/// One branch of a fan-out as it merges: its output, the tag its chunks carry in the merge
/// (the output's id, or, for a resumed branch, the id the branch first merged under, so a
/// resumed fan-out tags chunks as an uninterrupted one does), and where its stamper was.
pub(crate) struct Branch {
    /// The branch's output.
    pub out: Session,
    /// The tag of its chunks in the merge.
    pub tag: String,
    /// Its stamper's state when it finished or stopped (deterministic runs).
    pub stamper: Option<StamperState>,
}

/// What a stopped fan-out left: the input's usage and each branch.
pub(crate) struct StoppedFanOut {
    /// The input's usage and attribution.
    pub input_usage: (Option<Usage>, BTreeMap<String, Usage>),
    /// Branches in declared order, with whether each one stopped (holds pending work).
    pub branches: Vec<(Branch, bool)>,
}

/// Rebuilds the branch sessions of `stopped` from its marker: the shared prefix, then each
/// branch's tagged chunks (untagged again); a stopped branch also gets what was appended
/// after the merge (reviewers' decisions) and its pending calls.
pub(crate) fn branches_from(stopped: &Session, marker: &Value) -> Result<StoppedFanOut, FlowError> {
    let len: usize = field(marker, "len")?;
    let prefix: usize = field(marker, "prefix")?;
    let specs: Vec<Value> = field(marker, "branches")?;
    let chunks = stopped.chunks();
    if prefix > len || len > chunks.len() {
        return Err(bad("lengths do not fit the session"));
    }
    let mut branches = Vec::with_capacity(specs.len());
    for spec in &specs {
        let id: String = field(spec, "id")?;
        let tag: String = field::<Option<String>>(spec, "tag")?.unwrap_or_else(|| id.clone());
        let stamper: Option<StamperState> = field(spec, "stamper")?;
        let calls: Vec<String> = field(spec, "pending")?;
        let mut list = chunks.clone().slice(0..prefix);
        list.extend(
            (prefix..len)
                .filter_map(|i| chunks.get(i))
                .filter(|c| c.branch() == Some(tag.as_str()))
                .map(Chunk::untagged),
        );
        let stopped_here = !calls.is_empty();
        if stopped_here {
            list.extend((len..chunks.len()).filter_map(|i| chunks.get(i)).cloned());
        }
        let pending = stopped
            .pending()
            .iter()
            .filter(|p| calls.contains(&p.call.id))
            .cloned()
            .collect();
        let parts = SessionParts {
            id: SessionId::new(&id),
            created_at: stopped.created_at(),
            lineage: field::<Lineage>(spec, "lineage")?,
            chunks: list,
            usage: field(spec, "usage")?,
            agent_usage: field(spec, "agent_usage")?,
            placement: stopped.placement().clone(),
            pending,
        };
        let out = Session::from_parts(parts, stopped.stamper().clone());
        branches.push((Branch { out, tag, stamper }, stopped_here));
    }
    let input_usage = (
        field(marker, "input_usage")?,
        field(marker, "input_agent_usage")?,
    );
    Ok(StoppedFanOut {
        input_usage,
        branches,
    })
}

/// `merged` with the chunks tagged `from` tagged `to` instead, for each pair.
pub(crate) fn retagged(merged: Session, renames: &[(String, String)]) -> Session {
    if renames.is_empty() {
        return merged;
    }
    let chunks = merged
        .chunks()
        .iter()
        .map(|c| match c.branch() {
            Some(b) => match renames.iter().find(|(from, _)| from == b) {
                Some((_, to)) => c.with_branch(to.as_str()),
                None => c.clone(),
            },
            None => c.clone(),
        })
        .collect();
    let parts = SessionParts {
        id: merged.id().clone(),
        created_at: merged.created_at(),
        lineage: merged.lineage().clone(),
        chunks,
        usage: merged.usage(),
        agent_usage: merged.agent_usage().clone(),
        placement: merged.placement().clone(),
        pending: merged.pending().to_vec(),
    };
    Session::from_parts(parts, merged.stamper().clone())
}

/// True when `session` holds work a forward resumes rather than starts: pending calls, or
/// tool calls cut off before their results.
pub(crate) fn is_resumption(session: &Session) -> bool {
    !session.pending().is_empty() || !session.unanswered_tool_calls().is_empty()
}
