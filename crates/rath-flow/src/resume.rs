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

use rath_session::{Chunk, Lineage, Session, SessionId, SessionParts, Usage};
use serde_json::{Value, json};

use crate::FlowError;
use crate::layers::is_resumption;

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

/// The marker of a stopped fan-out: the merged length, the shared prefix, the input's usage
/// and each branch's id, usage, lineage and pending call ids.
pub(crate) fn parallel_marker(
    input_usage: &(Option<Usage>, BTreeMap<String, Usage>),
    outs: &[Session],
    prefix: usize,
    merged_len: usize,
) -> Value {
    let branches: Vec<Value> = outs
        .iter()
        .map(|o| {
            json!({
                "id": o.id().as_str(),
                "usage": o.usage(),
                "agent_usage": o.agent_usage(),
                "lineage": o.lineage(),
                "pending": o.pending().iter().map(|p| p.call.id.as_str()).collect::<Vec<_>>(),
            })
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

/// What a stopped fan-out left: the input's usage and each branch session with whether it
/// stopped (holds pending work).
pub(crate) struct StoppedFanOut {
    /// The input's usage and attribution.
    pub input_usage: (Option<Usage>, BTreeMap<String, Usage>),
    /// Branch sessions in declared order, and whether each one stopped.
    pub branches: Vec<(Session, bool)>,
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
        let calls: Vec<String> = field(spec, "pending")?;
        let mut list = chunks.clone().slice(0..prefix);
        list.extend(
            (prefix..len)
                .filter_map(|i| chunks.get(i))
                .filter(|c| c.branch() == Some(id.as_str()))
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
        branches.push((
            Session::from_parts(parts, stopped.stamper().clone()),
            stopped_here,
        ));
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
