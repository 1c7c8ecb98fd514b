//! Spans of stored sessions: what a run recorded offline, as a trace to look at later.
//!
//! Every session becomes a span (`invoke_agent {agent}` for a session loop's output, its
//! lineage operator otherwise) under one `invoke_workflow` span per lineage root (trace id
//! [`TraceId::for_stored_root`]); each model
//! call and tool call a session made becomes a `chat` / `execute_tool` child of it. Times come
//! from the files: a session's span runs from its header's `created_at` to its trailer's
//! `closed_at`; its calls are laid out from the start in chunk order, each as long as the
//! `elapsed_ms` its evidence recorded.
//!
//! ```
//! use rath_otel::store::spans_from_sessions;
//! use rath_session::{Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let store = rath_persist::Store::at(dir.path());
//! let root = Session::user_with("hi", Stamper::counter());
//! let fork = root.fork();
//! store.save_all([&root, &fork])?;
//! let loaded: Vec<_> = [&root, &fork].iter().map(|s| store.load(s.id())).collect::<Result<_, _>>()?;
//! let spans = spans_from_sessions(&loaded);
//! assert_eq!(spans.len(), 3); // the workflow and one span per session
//! assert_eq!(spans[2].links.len(), 1); // the fork links to its parent
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};

use rath_persist::LoadedSession;
use rath_session::{ChunkBody, LineageKind, Session};

use crate::conv::*;
use crate::genai::{
    chat_attributes, chat_name, compression_event, route_event, set_lineage, tool_attributes,
};
use crate::span::{Attributes, Link, Span, SpanId, SpanKind, Status, TraceId};

/// The span key of a session (its span id is `trace.span(key)`).
pub(crate) fn session_key(id: &str) -> String {
    format!("session:{id}")
}

/// The spans of `sessions` (any set loaded from a store; parents outside the set are
/// linked by id but get no span), in a stable order: per trace, the workflow span first,
/// then sessions parents-first with each session's calls after it.
pub fn spans_from_sessions(sessions: &[LoadedSession]) -> Vec<Span> {
    let by_id: HashMap<&str, &LoadedSession> = sessions
        .iter()
        .map(|l| (l.session.id().as_str(), l))
        .collect();
    let order = topological(sessions, &by_id);
    let roots = roots(sessions, &by_id);
    let mut traces: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    let mut claimed: HashSet<String> = HashSet::new();
    for l in order {
        let root = roots[l.session.id().as_str()].clone();
        let trace = TraceId::for_stored_root(&root);
        let spans = traces.entry(root.clone()).or_default();
        if spans.is_empty() {
            spans.push(workflow_span(trace, &root));
        }
        let workflow = spans[0].span_id;
        let (mut own, events) = session_spans(l, trace, &root, &mut claimed);
        own[0].parent = Some(workflow);
        let ws = &mut spans[0];
        ws.events.extend(events);
        let (start, end) = (own[0].start_unix_micros, own[0].end_unix_micros);
        if ws.start_unix_micros == 0 || start < ws.start_unix_micros {
            ws.start_unix_micros = start;
        }
        ws.end_unix_micros = ws.end_unix_micros.max(end);
        spans.extend(own);
    }
    traces.into_values().flatten().collect()
}

/// The trace's root span: the run as a whole.
fn workflow_span(trace: TraceId, root: &str) -> Span {
    Span::new(
        OP_INVOKE_WORKFLOW,
        SpanKind::Internal,
        trace,
        trace.span("workflow"),
    )
    .attr(GEN_AI_OPERATION_NAME, OP_INVOKE_WORKFLOW)
    .attr(GEN_AI_CONVERSATION_ID, root)
}

/// Sessions with every parent (inside the set) before its children; ties by header time,
/// then id.
fn topological<'a>(
    sessions: &'a [LoadedSession],
    by_id: &HashMap<&str, &'a LoadedSession>,
) -> Vec<&'a LoadedSession> {
    fn depth(
        id: &str,
        by_id: &HashMap<&str, &LoadedSession>,
        memo: &mut HashMap<String, usize>,
        guard: usize,
    ) -> usize {
        if let Some(d) = memo.get(id) {
            return *d;
        }
        let d = match by_id.get(id) {
            Some(l) if guard < 10_000 => l
                .session
                .lineage()
                .parents
                .iter()
                .filter(|p| by_id.contains_key(p.as_str()))
                .map(|p| 1 + depth(p.as_str(), by_id, memo, guard + 1))
                .max()
                .unwrap_or(0),
            _ => 0,
        };
        memo.insert(id.to_owned(), d);
        d
    }
    let mut memo = HashMap::new();
    let mut out: Vec<(usize, i64, &str, &LoadedSession)> = sessions
        .iter()
        .map(|l| {
            let id = l.session.id().as_str();
            (
                depth(id, by_id, &mut memo, 0),
                l.created_at.unix_micros(),
                id,
                l,
            )
        })
        .collect();
    out.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    out.into_iter().map(|t| t.3).collect()
}

/// Each session's trace root: its lineage root (first parents followed), except that a
/// parentless session that only ever is a later parent (an agent's system prompt beside the
/// session it works on) joins the trace of the first session that uses it.
fn roots(
    sessions: &[LoadedSession],
    by_id: &HashMap<&str, &LoadedSession>,
) -> HashMap<String, String> {
    let mut roots: HashMap<String, String> = sessions
        .iter()
        .map(|l| {
            (
                l.session.id().as_str().to_owned(),
                root_of(&l.session, by_id),
            )
        })
        .collect();
    let mut first_parents = HashSet::new();
    let mut later: BTreeMap<&str, &str> = BTreeMap::new();
    for l in sessions {
        let parents = &l.session.lineage().parents;
        if let Some(p) = parents.first() {
            first_parents.insert(p.as_str());
        }
        for p in parents.iter().skip(1) {
            later.entry(p.as_str()).or_insert(l.session.id().as_str());
        }
    }
    for (p, child) in later {
        let alone = by_id
            .get(p)
            .is_some_and(|l| l.session.lineage().parents.is_empty());
        if alone && !first_parents.contains(p) {
            let r = roots[child].clone();
            roots.insert(p.to_owned(), r);
        }
    }
    roots
}

/// The lineage root: first parents followed while they are in the set.
fn root_of(s: &Session, by_id: &HashMap<&str, &LoadedSession>) -> String {
    let mut id = s.id().as_str().to_owned();
    let mut seen = HashSet::new();
    while seen.insert(id.clone()) {
        let Some(l) = by_id.get(id.as_str()) else {
            break;
        };
        match l.session.lineage().parents.iter().next() {
            Some(p) => id = p.as_str().to_owned(),
            None => break,
        }
    }
    id
}

/// The decision a selector's route session records (its last chunk); `None` for every other
/// session, forks of a route session included.
pub(crate) fn route_decision_of(s: &Session) -> Option<&rath_session::RouteDecision> {
    if s.lineage().operator != ROUTE_OPERATOR {
        return None;
    }
    match s.last().map(|c| c.body()) {
        Some(ChunkBody::RouteDecision(r)) => Some(r),
        _ => None,
    }
}

/// The lineage operator of the session a selector's decision is recorded on.
const ROUTE_OPERATOR: &str = "Selector.route";

/// The span name of a session: its agent for a loop output, its operator otherwise.
fn session_name(s: &Session, agent: Option<&str>) -> String {
    match (s.lineage().kind.clone(), agent) {
        (LineageKind::OpSessionLoop | LineageKind::OpResume, Some(a)) => {
            format!("{OP_INVOKE_AGENT} {a}")
        }
        _ => s.lineage().operator.to_string(),
    }
}

/// One session's span (first) and the spans of the calls it made itself (model calls not
/// claimed by an earlier session), plus the workflow-level events it carries.
fn session_spans(
    l: &LoadedSession,
    trace: TraceId,
    root: &str,
    claimed: &mut HashSet<String>,
) -> (Vec<Span>, Vec<crate::span::Event>) {
    let s = &l.session;
    let start = l.created_at.unix_micros();
    let sid = trace.span(&session_key(s.id().as_str()));
    let calls = call_spans(s, trace, sid, root, start, claimed);
    let events = session_events(s, start);
    let end = l
        .closed_at
        .map_or(start, |t| t.unix_micros())
        .max(calls.end);
    let mut span = Span::new(
        session_name(s, calls.agent.as_deref()),
        SpanKind::Internal,
        trace,
        sid,
    );
    span.attributes = session_attributes(s, calls.agent.as_deref(), root);
    span.links = lineage_links(s, trace);
    span.start_unix_micros = start;
    span.end_unix_micros = end;
    if let Some(f) = s.failure() {
        span.attributes.set(ERROR_TYPE, &f.kind);
        span.status = Status::Error(f.message.clone());
    }
    let mut out = vec![span];
    out.extend(calls.spans);
    (out, events)
}

/// The spans of the calls one session made itself, laid out from its start in chunk order.
struct CallSpans {
    /// A `chat` span per model call, each followed by the `execute_tool` spans of the tools
    /// it asked for.
    spans: Vec<Span>,
    /// The agent of the session's first model call that names one.
    agent: Option<String>,
    /// When the last call ended (the session's start when it made none).
    end: i64,
}

/// The spans of the calls session `s` made itself, children of its span `sid`, laid out one
/// after another from `start`, each as long as its evidence says: a `chat` span per model
/// call not in `claimed` (which then holds it) and an `execute_tool` span per tool that call
/// asked for.
fn call_spans(
    s: &Session,
    trace: TraceId,
    sid: SpanId,
    root: &str,
    start: i64,
    claimed: &mut HashSet<String>,
) -> CallSpans {
    let mut calls = Vec::new();
    let mut agent: Option<String> = None;
    let mut cursor = start;
    let mut current: Option<String> = None; // the request id the next tools answer
    for c in s.chunks().iter() {
        match c.body() {
            ChunkBody::ModelCall(m) => {
                if !claimed.insert(m.request_id.clone()) {
                    current = None;
                    continue;
                }
                current = Some(m.request_id.clone());
                if agent.is_none() {
                    agent = m.agent.clone();
                }
                let end = cursor + (m.elapsed_ms * 1000.0) as i64;
                let mut span = Span::new(
                    chat_name(m.model.as_deref()),
                    SpanKind::Client,
                    trace,
                    trace.span(&format!("chat:{}", m.request_id)),
                );
                span.parent = Some(sid);
                span.attributes = chat_attributes(m, root);
                span.start_unix_micros = cursor;
                span.end_unix_micros = end;
                cursor = end;
                calls.push(span);
            }
            ChunkBody::ToolEvidence(e) => {
                let Some(req) = &current else { continue };
                let end = cursor + (e.elapsed_ms * 1000.0) as i64;
                let mut span = Span::new(
                    format!("{OP_EXECUTE_TOOL} {}", e.tool),
                    SpanKind::Internal,
                    trace,
                    trace.span(&format!("tool:{req}:{}", e.tool_call_id)),
                );
                span.parent = Some(sid);
                span.attributes = tool_attributes(e, agent.as_deref(), root);
                if e.outcome != "ok" {
                    span.status = Status::Error(e.outcome.clone());
                }
                span.start_unix_micros = cursor;
                span.end_unix_micros = end;
                cursor = end;
                calls.push(span);
            }
            _ => {}
        }
    }
    CallSpans {
        spans: calls,
        agent,
        end: cursor,
    }
}

/// The workflow-level events session `s` carries, at its `start`: a selector's route
/// decision, and what a compression dropped.
fn session_events(s: &Session, start: i64) -> Vec<crate::span::Event> {
    let mut events = Vec::new();
    if let Some(r) = route_decision_of(s) {
        events.push(route_event(r, start));
    }
    if s.lineage().kind == LineageKind::OpSessionCompress {
        for c in s.chunks().iter() {
            if let ChunkBody::CompressionRecord(r) = c.body() {
                events.push(compression_event(r, s, start));
            }
        }
    }
    events
}

/// A session span's attributes.
fn session_attributes(s: &Session, agent: Option<&str>, root: &str) -> Attributes {
    let mut a = Attributes::default();
    if let Some(agent) = agent {
        a.set(GEN_AI_OPERATION_NAME, OP_INVOKE_AGENT);
        a.set(GEN_AI_AGENT_NAME, agent);
        if let Some(u) = s.agent_usage().get(agent) {
            crate::genai::set_usage(&mut a, u);
        }
    }
    a.set(GEN_AI_CONVERSATION_ID, root);
    set_lineage(&mut a, s);
    if let Some(u) = s.usage() {
        a.set(RATH_USAGE_TOTAL_TOKENS, u.total_tokens);
    }
    a
}

/// Links from a session's span to its parents' spans: `parent` for one parent,
/// `merge_parent` for each parent of a merge.
pub(crate) fn lineage_links(s: &Session, trace: TraceId) -> Vec<Link> {
    let merge = s.lineage().kind == LineageKind::OpMerge;
    s.lineage()
        .parents
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut a = Attributes::default();
            a.set(RATH_SESSION_ID, p.as_str());
            a.set(
                RATH_LINK_ROLE,
                if merge { "merge_parent" } else { "parent" },
            );
            a.set(RATH_LINK_INDEX, i as u64);
            Link {
                trace_id: trace,
                span_id: trace.span(&session_key(p.as_str())),
                attributes: a,
            }
        })
        .collect()
}
