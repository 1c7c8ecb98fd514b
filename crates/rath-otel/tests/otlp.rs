//! The spans a traced run sends over OTLP, decoded by a test collector: attribute names
//! against the conventions list, span kinds, the parent/child tree, links for forks and
//! merges, events for route decisions; gRPC as well as HTTP; a collector that is down.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{attr_int, attr_str, closed_port, grpc_collector, http_collector, team};
use opentelemetry_proto::tonic::trace::v1::Span as ProtoSpan;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as ProtoKind;
use rath_flow::{FlowContext, FlowEvent, Workflow};
use rath_otel::conv::{self, is_known_attribute};
use rath_otel::{
    Clock, OtlpConfig, OtlpExporter, Protocol, SpanBuffer, SpanSink, TraceId, TraceOptions, Traced,
};
use rath_persist::SessionRecorder;
use rath_session::{Session, Stamper};

fn config(protocol: Protocol, endpoint: &str, timeout: Duration) -> OtlpConfig {
    let proto = match protocol {
        Protocol::Grpc => "grpc",
        Protocol::HttpProtobuf => "http/protobuf",
    };
    let vars = [
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.to_owned()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", proto.to_owned()),
        (
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            timeout.as_millis().to_string(),
        ),
        ("OTEL_SERVICE_NAME", "rath-otel-test".to_owned()),
    ];
    OtlpConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
}

/// Runs the team traced into `sink`; returns the output and every session made.
async fn run_team(sink: impl SpanSink + 'static) -> (Session, Vec<Session>) {
    let recorder = SessionRecorder::new();
    let rec = recorder.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            rec.record(session);
        }
    });
    let options = TraceOptions::from_lookup(|_| None).clock(Clock::Stamper(Stamper::counter()));
    let traced = Traced::new(team(), sink).with_options(options);
    let root = Session::user_with("Count the words.", Stamper::counter());
    cx.record(&root);
    let out = traced
        .forward(root, &cx)
        .await
        .expect("the team run succeeds");
    cx.record(&out);
    (out, recorder.sessions())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Checks a decoded trace: names, kinds, tree, links, events, attribute names.
fn check_trace(spans: &[ProtoSpan], root_id: &str) {
    assert!(!spans.is_empty());
    let by_id: HashMap<Vec<u8>, &ProtoSpan> =
        spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");
    let trace = TraceId::for_root(root_id);
    for s in spans {
        assert_eq!(
            hex(&s.trace_id),
            trace.to_hex(),
            "{} in the run's trace",
            s.name
        );
        let names = s
            .attributes
            .iter()
            .chain(s.events.iter().flat_map(|e| e.attributes.iter()))
            .chain(s.links.iter().flat_map(|l| l.attributes.iter()));
        for kv in names {
            assert!(
                is_known_attribute(&kv.key),
                "{}: unknown attribute {}",
                s.name,
                kv.key
            );
        }
        assert_eq!(
            attr_str(&s.attributes, conv::GEN_AI_CONVERSATION_ID).as_deref(),
            Some(root_id),
            "{}",
            s.name
        );
        let op = attr_str(&s.attributes, conv::GEN_AI_OPERATION_NAME);
        let kind = ProtoKind::try_from(s.kind).unwrap();
        match op.as_deref() {
            Some("chat") => assert_eq!(kind, ProtoKind::Client, "{}", s.name),
            _ => assert_eq!(kind, ProtoKind::Internal, "{}", s.name),
        }
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano, "{}", s.name);
    }
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "one root");
    let workflow = roots[0];
    assert_eq!(workflow.name, "invoke_workflow router");
    assert_eq!(
        attr_str(&workflow.attributes, conv::GEN_AI_WORKFLOW_NAME).as_deref(),
        Some("router")
    );
    let parent = |s: &ProtoSpan| by_id.get(&s.parent_span_id).copied();
    let op_of = |s: &ProtoSpan| attr_str(&s.attributes, conv::GEN_AI_OPERATION_NAME);

    // Agents under the workflow; each ran one tool and made two model calls.
    let agents: Vec<_> = spans
        .iter()
        .filter(|s| op_of(s).as_deref() == Some("invoke_agent"))
        .collect();
    let mut agent_names: Vec<String> = agents
        .iter()
        .map(|s| attr_str(&s.attributes, conv::GEN_AI_AGENT_NAME).unwrap())
        .collect();
    agent_names.sort();
    assert_eq!(agent_names, ["lead", "left", "right"]);
    for a in &agents {
        assert_eq!(parent(a).unwrap().span_id, workflow.span_id);
        let name = attr_str(&a.attributes, conv::GEN_AI_AGENT_NAME).unwrap();
        assert_eq!(a.name, format!("invoke_agent {name}"));
        assert!(attr_str(&a.attributes, conv::RATH_SESSION_ID).is_some());
        assert_eq!(
            attr_str(&a.attributes, conv::RATH_LINEAGE_KIND).as_deref(),
            Some("op_session_loop")
        );
        let children: Vec<_> = spans
            .iter()
            .filter(|s| s.parent_span_id == a.span_id)
            .collect();
        let chats: Vec<_> = children
            .iter()
            .filter(|s| op_of(s).as_deref() == Some("chat"))
            .collect();
        let tools: Vec<_> = children
            .iter()
            .filter(|s| op_of(s).as_deref() == Some("execute_tool"))
            .collect();
        assert_eq!(chats.len(), 2, "{name}'s model calls");
        assert_eq!(tools.len(), 1, "{name}'s tool call");
        let tool = tools[0];
        assert_eq!(tool.name, "execute_tool word_count");
        assert_eq!(
            attr_str(&tool.attributes, conv::GEN_AI_TOOL_NAME).as_deref(),
            Some("word_count")
        );
        assert_eq!(
            attr_str(&tool.attributes, conv::GEN_AI_TOOL_CALL_ID),
            Some(format!("{name}_c"))
        );
        for c in &chats {
            assert_eq!(
                attr_str(&c.attributes, conv::GEN_AI_AGENT_NAME).as_deref(),
                Some(name.as_str())
            );
            assert_eq!(
                attr_str(&c.attributes, conv::GEN_AI_PROVIDER_NAME),
                Some(format!("scripted:{name}"))
            );
            assert!(attr_int(&c.attributes, conv::GEN_AI_USAGE_INPUT_TOKENS).unwrap() > 0);
            assert!(attr_int(&c.attributes, conv::GEN_AI_USAGE_OUTPUT_TOKENS).unwrap() > 0);
            assert!(
                c.attributes
                    .iter()
                    .any(|kv| kv.key == conv::GEN_AI_RESPONSE_FINISH_REASONS)
            );
        }
        // Content is off unless opted in.
        for c in children {
            assert!(
                !c.attributes
                    .iter()
                    .any(|kv| kv.key == conv::GEN_AI_INPUT_MESSAGES
                        || kv.key == conv::GEN_AI_TOOL_CALL_ARGUMENTS)
            );
        }
    }
    let lead = agents
        .iter()
        .find(|s| attr_str(&s.attributes, conv::GEN_AI_AGENT_NAME).as_deref() == Some("lead"))
        .unwrap();
    assert_eq!(
        attr_int(&lead.attributes, conv::GEN_AI_USAGE_INPUT_TOKENS),
        Some(210)
    );
    assert_eq!(
        attr_int(&lead.attributes, conv::GEN_AI_USAGE_OUTPUT_TOKENS),
        Some(14)
    );

    // Forks link to the session they forked; the merge links to both branch outputs.
    let forks: Vec<_> = spans
        .iter()
        .filter(|s| attr_str(&s.attributes, conv::RATH_LINEAGE_KIND).as_deref() == Some("op_fork"))
        .collect();
    assert!(forks.len() >= 2, "a fork per branch, got {}", forks.len());
    for f in &forks {
        assert_eq!(f.links.len(), 1);
        assert_eq!(
            attr_str(&f.links[0].attributes, conv::RATH_LINK_ROLE).as_deref(),
            Some("parent")
        );
    }
    let merges: Vec<_> = spans
        .iter()
        .filter(|s| attr_str(&s.attributes, conv::RATH_LINEAGE_KIND).as_deref() == Some("op_merge"))
        .collect();
    assert_eq!(merges.len(), 1, "one merge");
    let merge = merges[0];
    assert_eq!(merge.links.len(), 2);
    let mut linked: Vec<String> = merge
        .links
        .iter()
        .map(|l| {
            assert_eq!(
                attr_str(&l.attributes, conv::RATH_LINK_ROLE).as_deref(),
                Some("merge_parent")
            );
            let target = by_id
                .get(&l.span_id)
                .expect("a merge links to spans of this trace");
            attr_str(&target.attributes, conv::GEN_AI_AGENT_NAME).unwrap()
        })
        .collect();
    linked.sort();
    assert_eq!(
        linked,
        ["left", "right"],
        "the merge links to both branch agents"
    );

    // The selector's decisions are events on the workflow span.
    let choices: Vec<String> = workflow
        .events
        .iter()
        .filter(|e| e.name == conv::EVENT_ROUTE_DECISION)
        .map(|e| attr_str(&e.attributes, conv::RATH_ROUTE_CHOICE).unwrap())
        .collect();
    assert_eq!(choices, ["lead", "workers", "done"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_spans_over_http_protobuf() {
    let (endpoint, received) = http_collector().await;
    let exporter = OtlpExporter::new(&config(
        Protocol::HttpProtobuf,
        &endpoint,
        Duration::from_secs(5),
    ))
    .unwrap();
    let (_, sessions) = run_team(exporter.clone()).await;
    let report = exporter.shutdown();
    let spans = received.spans();
    assert_eq!(report.dropped, 0, "{report:?}");
    assert_eq!(report.exported as usize, spans.len());
    let root = sessions
        .iter()
        .find(|s| s.lineage().parents.is_empty())
        .unwrap();
    check_trace(&spans, root.id().as_str());
    let resource = &received.requests()[0].resource_spans[0].resource;
    let service = attr_str(&resource.as_ref().unwrap().attributes, "service.name");
    assert_eq!(service.as_deref(), Some("rath-otel-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_spans_over_grpc() {
    let (endpoint, received) = grpc_collector().await;
    let exporter =
        OtlpExporter::new(&config(Protocol::Grpc, &endpoint, Duration::from_secs(5))).unwrap();
    let (_, sessions) = run_team(exporter.clone()).await;
    let report = exporter.shutdown();
    assert_eq!(report.dropped, 0, "{report:?}");
    let spans = received.spans();
    assert_eq!(report.exported as usize, spans.len());
    let root = sessions
        .iter()
        .find(|s| s.lineage().parents.is_empty())
        .unwrap();
    check_trace(&spans, root.id().as_str());
}

/// A wait of minutes that only guards the tests below against a hang (a run that waited for
/// its collector would wait the exporter's whole timeout, ten minutes): never a measurement.
const HANG_GUARD: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_collector_port_neither_blocks_nor_fails_the_run() {
    let timeout = Duration::from_secs(2);
    for protocol in [Protocol::HttpProtobuf, Protocol::Grpc] {
        let endpoint = match protocol {
            Protocol::HttpProtobuf => format!("http://127.0.0.1:{}/v1/traces", closed_port()),
            Protocol::Grpc => format!("http://127.0.0.1:{}", closed_port()),
        };
        let exporter = OtlpExporter::new(&config(protocol, &endpoint, timeout)).unwrap();
        let (out, _) = run_team(exporter.clone()).await;
        assert!(out.final_text().is_some());
        let report = exporter.shutdown();
        assert!(report.submitted > 10, "{report:?}");
        assert_eq!(report.exported, 0);
        assert_eq!(
            report.dropped, report.submitted,
            "{protocol:?}: every span counted as dropped"
        );
        assert!(
            report.failed_exports <= 1,
            "{protocol:?}: at most one failed export, later batches dropped: {report:?}"
        );
        println!("{protocol:?}: {report}");
    }
}

/// The collector holds every request unanswered until the run is over; the exporter would
/// wait ten minutes for an answer. The run finishing at all shows it never waits for its
/// collector (a run that did would deadlock here until the hang guard fires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_never_waits_for_its_collector() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut held = Vec::new();
        tokio::pin!(released);
        loop {
            tokio::select! {
                Ok((sock, _)) = listener.accept() => held.push(sock),
                _ = &mut released => break,
            }
        }
        drop(held); // the exports in flight fail at once: the shutdown below is quick
    });
    let endpoint = format!("http://{addr}/v1/traces");
    let exporter = OtlpExporter::new(&config(
        Protocol::HttpProtobuf,
        &endpoint,
        Duration::from_secs(600),
    ))
    .unwrap();
    let (out, _) = tokio::time::timeout(HANG_GUARD, run_team(exporter.clone()))
        .await
        .expect("the run finished while its collector held every request");
    assert!(out.final_text().is_some());
    release.send(()).unwrap();
    let report = exporter.shutdown();
    assert!(report.submitted > 10, "{report:?}");
    assert_eq!(report.exported, 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_costs_at_most_one_timeout() {
    // Accepts connections and never replies.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let timeout = Duration::from_millis(1500);
    let endpoint = format!("http://{addr}/v1/traces");
    let exporter = OtlpExporter::new(&config(Protocol::HttpProtobuf, &endpoint, timeout)).unwrap();
    let (_, _) = run_team(exporter.clone()).await;
    // More spans after the first batch went out: dropped without another wait.
    let buffer = SpanBuffer::new();
    let (_, _) = run_team(buffer.clone()).await;
    for s in buffer.spans() {
        exporter.emit(s);
    }
    let report = exporter.shutdown();
    assert_eq!(report.exported, 0);
    assert_eq!(report.dropped, report.submitted);
    assert!(
        report.failed_exports <= 1,
        "one timed-out export at most, the rest dropped without a wait: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_content_only_when_opted_in() {
    let spans = SpanBuffer::new();
    let options = TraceOptions::from_lookup(|k| {
        (k == "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT").then(|| "true".to_owned())
    });
    assert!(options.capture_content);
    let traced = Traced::new(team(), spans.clone()).with_options(options);
    let cx = FlowContext::new();
    traced
        .forward(Session::user_with("Count.", Stamper::counter()), &cx)
        .await
        .unwrap();
    let all = spans.spans();
    let chat = all.iter().find(|s| s.name.starts_with("chat")).unwrap();
    assert!(chat.attribute(conv::GEN_AI_INPUT_MESSAGES).is_some());
    assert!(chat.attribute(conv::GEN_AI_OUTPUT_MESSAGES).is_some());
    let tool = all
        .iter()
        .find(|s| s.name.starts_with("execute_tool"))
        .unwrap();
    assert!(tool.attribute(conv::GEN_AI_TOOL_CALL_ARGUMENTS).is_some());
    assert!(tool.attribute(conv::GEN_AI_TOOL_CALL_RESULT).is_some());
    assert!(!TraceOptions::from_lookup(|_| Some("false".into())).capture_content);
    assert!(!TraceOptions::from_lookup(|_| None).capture_content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_id_is_the_lineage_roots_and_survives_a_resume() {
    let a = SpanBuffer::new();
    let b = SpanBuffer::new();
    let (_, s1) = run_team(a.clone()).await;
    let (_, s2) = run_team(b.clone()).await;
    // Deterministic ids: the same run gives the same spans, byte for byte.
    let ja = serde_json::to_string(&a.spans()).unwrap();
    let jb = serde_json::to_string(&b.spans()).unwrap();
    assert_eq!(ja, jb);
    assert_eq!(s1.len(), s2.len());
    // A run resumed from a later session of the same lineage keeps the trace.
    let root = s1.iter().find(|s| s.lineage().parents.is_empty()).unwrap();
    let later = root.fork();
    let c = SpanBuffer::new();
    let traced = Traced::new(team(), c.clone())
        .with_options(TraceOptions::from_lookup(|_| None).root(root.id().as_str()));
    let _ = traced.forward(later, &FlowContext::new()).await;
    let trace = TraceId::for_root(root.id().as_str());
    assert!(c.spans().iter().all(|s| s.trace_id == trace));
    assert!(a.spans().iter().all(|s| s.trace_id == trace));
}

#[test]
fn config_reads_the_standard_variables() {
    let get = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let c = OtlpConfig::from_lookup(get(&[])).unwrap();
    assert_eq!(c.protocol, Protocol::HttpProtobuf);
    assert_eq!(c.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(c.timeout, Duration::from_secs(10));
    let c = OtlpConfig::from_lookup(get(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:6006/"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "a=1, b = 2"),
        ("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=p1"),
    ]))
    .unwrap();
    assert_eq!(c.endpoint, "http://127.0.0.1:6006/v1/traces");
    assert_eq!(c.timeout, Duration::from_millis(250));
    assert_eq!(
        c.headers,
        [("a".into(), "1".into()), ("b".into(), "2".into())]
    );
    assert_eq!(
        c.resource,
        [("openinference.project.name".into(), "p1".into())]
    );
    let c = OtlpConfig::from_lookup(get(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:1/custom"),
    ]))
    .unwrap();
    assert_eq!(
        c.protocol,
        Protocol::HttpProtobuf,
        "the traces variable wins"
    );
    assert_eq!(
        c.endpoint, "http://h:1/custom",
        "a traces endpoint is used as is"
    );
    let e =
        OtlpConfig::from_lookup(get(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")])).unwrap_err();
    assert!(
        e.to_string().starts_with("OTEL_EXPORTER_OTLP_PROTOCOL:"),
        "{e}"
    );
    let e = OtlpConfig::from_lookup(get(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")])).unwrap_err();
    assert!(e.to_string().contains("milliseconds"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracing_spans_ride_the_same_exporter() {
    use tracing_subscriber::layer::SubscriberExt;
    let (endpoint, received) = http_collector().await;
    let exporter = OtlpExporter::new(&config(
        Protocol::HttpProtobuf,
        &endpoint,
        Duration::from_secs(5),
    ))
    .unwrap();
    let subscriber = tracing_subscriber::registry().with(exporter.tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        let outer = tracing::info_span!("store.save", sessions = 3);
        let _g = outer.enter();
        tracing::info_span!("worker.claim").in_scope(|| {});
    });
    let report = exporter.shutdown();
    assert_eq!(report.exported, 2, "{report:?}");
    let spans = received.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"store.save") && names.contains(&"worker.claim"),
        "{names:?}"
    );
    let outer = spans.iter().find(|s| s.name == "store.save").unwrap();
    let inner = spans.iter().find(|s| s.name == "worker.claim").unwrap();
    assert_eq!(inner.parent_span_id, outer.span_id);
}
