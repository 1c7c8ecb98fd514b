//! `otel_export`: the OpenTelemetry GenAI spans of a team run (a lead, two workers on forks
//! of one session merged back, a function selector), live and from the store. Every model is
//! scripted, the run's stamper and the tracer's clock are counters, and span ids are hashes
//! of stable keys, so the spans reproduce byte for byte.

use std::time::{Duration, Instant};

use anyhow::Result;
use rath_flow::{
    Agent, Decision, FlowContext, FlowEvent, Parallel, Selector, ToolContext, ToolError, ToolSet,
    Workflow, typed_tool,
};
use rath_otel::conv::{self, is_known_attribute};
use rath_otel::store::spans_from_sessions;
use rath_otel::{
    Clock, OtlpConfig, OtlpExporter, Span, SpanBuffer, SpanKind, SpanSink, TraceId, TraceOptions,
    Traced, Value, load_for_export,
};
use rath_persist::{SessionRecorder, Store};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// The packet.
pub fn otel_export() -> Packet {
    Packet {
        name: "otel_export",
        about: "A team run (lead, two workers on forks merged back, a function selector) traced \
                as OpenTelemetry GenAI spans, live and from its store; the spans, their tree, \
                links and events, and an export to a closed collector port.",
        env: &[],
        build: build_otel,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct TextArgs {
    /// The text to count.
    text: String,
}

fn counter(name: &str, text: &str, p: u64, c: u64) -> Agent {
    let tool = typed_tool(
        "word_count",
        "Count the words of a text.",
        |_cx: ToolContext, a: TextArgs| async move {
            Ok::<_, ToolError>(json!({"words": a.text.split_whitespace().count()}))
        },
    );
    let model = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(
            format!("{name}_c"),
            "word_count",
            json!({"text": text}),
        )])
        .usage(p, c),
        ScriptedResponse::text(format!("{name}: counted.")).usage(p + 10, 4),
    ])
    .named(format!("scripted:{name}"));
    Agent::new(name, format!("You are {name}."), model)
        .with_tools(ToolSet::new().with(tool).expect("one tool"))
}

fn team() -> Selector {
    let workers = Parallel::new("workers")
        .branch(counter("left", "a b c", 50, 5))
        .branch(counter("right", "d e", 60, 6));
    Selector::by_function("router", |s: &Session, _c: &[rath_flow::Candidate]| {
        let spoke = |a: &str| {
            s.chunks().iter().any(
                |c| matches!(c.body(), ChunkBody::ModelCall(m) if m.agent.as_deref() == Some(a)),
            )
        };
        if !spoke("lead") {
            Decision::to("lead", "no plan yet")
        } else if !spoke("left") {
            Decision::to("workers", "plan ready")
        } else {
            Decision::done("both counted")
        }
    })
    .candidate(counter("lead", "plan the work", 100, 10))
    .candidate(workers)
    .max_steps(4)
}

/// One traced run into `sink`: the root session and every session made.
async fn traced_run(sink: impl SpanSink + 'static) -> Result<(Session, Vec<Session>)> {
    let recorder = SessionRecorder::new();
    let rec = recorder.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            rec.record(session);
        }
    });
    let options = TraceOptions::from_lookup(|_| None).clock(Clock::Stamper(Stamper::counter()));
    let root = Session::user_with("Count the words.", Stamper::counter());
    cx.record(&root);
    let out = Traced::new(team(), sink)
        .with_options(options)
        .forward(root.clone(), &cx)
        .await?;
    cx.record(&out);
    Ok((root, recorder.sessions()))
}

/// `name -> [child names]` for a readable tree.
fn tree(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: Option<rath_otel::SpanId>, depth: usize, out: &mut String) {
        for s in spans.iter().filter(|s| s.parent == parent) {
            let kind = match s.kind {
                SpanKind::Client => "CLIENT",
                SpanKind::Internal => "INTERNAL",
            };
            let links = if s.links.is_empty() {
                String::new()
            } else {
                format!(" ({} links)", s.links.len())
            };
            out.push_str(&format!(
                "{}{} [{kind}]{links}\n",
                "  ".repeat(depth),
                s.name
            ));
            walk(spans, Some(s.span_id), depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(spans, None, 0, &mut out);
    out
}

fn attr_str<'a>(s: &'a Span, name: &str) -> Option<&'a str> {
    match s.attribute(name) {
        Some(Value::Str(v)) => Some(v),
        _ => None,
    }
}

/// The checks both sources must pass.
fn check_spans(r: &mut Report, label: &str, spans: &[Span], trace: TraceId) {
    let unknown: Vec<String> = spans
        .iter()
        .flat_map(|s| {
            s.attributes
                .0
                .iter()
                .chain(s.events.iter().flat_map(|e| e.attributes.0.iter()))
                .chain(s.links.iter().flat_map(|l| l.attributes.0.iter()))
                .map(|(k, _)| k.clone())
        })
        .filter(|k| !is_known_attribute(k))
        .collect();
    r.check(
        format!("{label}: every attribute name is a GenAI convention or a listed rath.* name"),
        unknown.is_empty(),
        format!("unknown: {unknown:?}"),
    );
    r.check(
        format!("{label}: one trace, derived from the lineage root"),
        spans.iter().all(|s| s.trace_id == trace),
        trace.to_hex(),
    );
    let kinds_ok = spans.iter().all(|s| {
        let chat = s.attribute(conv::GEN_AI_OPERATION_NAME) == Some(&Value::from("chat"));
        (s.kind == SpanKind::Client) == chat
    });
    r.check(
        format!("{label}: chat spans are CLIENT, the rest INTERNAL"),
        kinds_ok,
        "",
    );
    let ids: std::collections::HashSet<_> = spans.iter().map(|s| s.span_id).collect();
    let tree_ok = spans.iter().filter(|s| s.parent.is_none()).count() == 1
        && spans
            .iter()
            .all(|s| s.parent.is_none_or(|p| ids.contains(&p)));
    r.check(
        format!("{label}: one root, every parent in the trace"),
        tree_ok,
        "",
    );
    let tools_ok = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool"))
        .all(|t| {
            spans
                .iter()
                .find(|p| Some(p.span_id) == t.parent)
                .is_some_and(|p| {
                    attr_str(p, conv::GEN_AI_AGENT_NAME) == attr_str(t, conv::GEN_AI_AGENT_NAME)
                        && p.name.starts_with("invoke_agent ")
                })
        });
    r.check(
        format!("{label}: each tool call is a child of its agent's span"),
        tools_ok,
        "",
    );
    let merge_ok = spans
        .iter()
        .find(|s| attr_str(s, conv::RATH_LINEAGE_KIND) == Some("op_merge"))
        .is_some_and(|m| {
            let mut agents: Vec<_> = m
                .links
                .iter()
                .filter_map(|l| spans.iter().find(|s| s.span_id == l.span_id))
                .filter_map(|s| attr_str(s, conv::GEN_AI_AGENT_NAME))
                .collect();
            agents.sort();
            agents == ["left", "right"]
        });
    r.check(
        format!("{label}: the merge links both branch agents' spans"),
        merge_ok,
        "",
    );
    let routes: Vec<_> = spans
        .iter()
        .flat_map(|s| s.events.iter())
        .filter(|e| e.name == conv::EVENT_ROUTE_DECISION)
        .filter_map(|e| match e.attributes.get(conv::RATH_ROUTE_CHOICE) {
            Some(Value::Str(c)) => Some(c.clone()),
            _ => None,
        })
        .collect();
    r.check_eq(
        &format!("{label}: route decisions as events"),
        routes,
        vec!["lead".to_owned(), "workers".to_owned(), "done".to_owned()],
    );
}

fn build_otel(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "a traced run reports invoke_workflow, invoke_agent, chat (CLIENT) and execute_tool \
             spans with GenAI attribute names only (plus listed rath.* lineage names)",
            "fork and merge parents are span links, selector decisions are span events, and the \
             trace id is derived from the lineage root",
            "the same kinds of spans come from the stored sessions",
            "with the collector's port closed the run finishes and every span is counted as \
             dropped, within one export timeout",
        ],
        &[
            "how a trace UI renders the spans (the Phoenix test in crates/openrath/tests checks \
             a real Arize Phoenix; this packet stays offline)",
            "live timings: the tracer's clock here is a counter",
        ],
    );
    let live = SpanBuffer::new();
    let (root, sessions) = ctx.block_on(traced_run(live.clone()))??;
    let again = SpanBuffer::new();
    ctx.block_on(traced_run(again.clone()))??;
    let live_spans = live.spans();
    r.check(
        "live: a second run gives byte-identical spans",
        serde_json::to_string(&live_spans)? == serde_json::to_string(&again.spans())?,
        format!("{} spans", live_spans.len()),
    );
    check_spans(
        &mut r,
        "live",
        &live_spans,
        TraceId::for_root(root.id().as_str()),
    );
    ctx.write_json("live_spans.json", &live_spans)?;
    ctx.write("live_tree.txt", tree(&live_spans))?;

    let dir = ctx.tmp_dir("store")?;
    let store = Store::at(&dir);
    store.save_all(&sessions)?;
    let loaded = load_for_export(&store, None)?;
    let stored = spans_from_sessions(&loaded);
    check_spans(
        &mut r,
        "store",
        &stored,
        TraceId::for_stored_root(root.id().as_str()),
    );
    r.check_eq(
        "store: one span per stored session",
        stored
            .iter()
            .filter(|s| s.attribute(conv::RATH_SESSION_ID).is_some())
            .count(),
        loaded.len(),
    );
    ctx.write_json("store_spans.json", &stored)?;
    ctx.write("store_tree.txt", tree(&stored))?;

    // A collector that is down: the closed port of a listener just dropped.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let timeout = Duration::from_secs(2);
    let endpoint = format!("http://127.0.0.1:{port}/v1/traces");
    let config = OtlpConfig::from_lookup(|k| {
        (k == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").then(|| endpoint.clone())
    })?
    .timeout(timeout);
    let exporter = OtlpExporter::new(&config)?;
    let started = Instant::now();
    let ran = ctx.block_on(traced_run(exporter.clone()))?;
    let report = exporter.shutdown();
    let took = started.elapsed();
    r.check("down collector: the run succeeds", ran.is_ok(), "");
    r.check(
        "down collector: every span counted as dropped",
        report.exported == 0 && report.dropped == report.submitted && report.submitted > 0,
        format!("{report:?}"),
    );
    r.check(
        "down collector: run and shutdown within one export timeout",
        took < timeout + Duration::from_secs(1),
        format!("timeout {timeout:?}"),
    );
    ctx.write_json(
        "closed_port_export.json",
        &json!({
            "submitted": report.submitted,
            "exported": report.exported,
            "dropped": report.dropped,
            "export_timeout_ms": timeout.as_millis() as u64,
        }),
    )?;
    Ok(r)
}
