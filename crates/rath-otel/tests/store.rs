//! Spans from a store: the sessions a traced-or-not run left behind, exported later.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{attr_str, http_collector, team};
use rath_flow::{FlowContext, FlowEvent, Workflow};
use rath_otel::conv::{self, is_known_attribute};
use rath_otel::store::spans_from_sessions;
use rath_otel::{OtlpConfig, OtlpExporter, SpanKind, SpanSink, TraceId, Value, load_for_export};
use rath_persist::{SessionRecorder, Store};
use rath_session::{Session, Stamper};

async fn stored_run(dir: &std::path::Path) -> (Store, Session, Session) {
    let recorder = SessionRecorder::new();
    let rec = recorder.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            rec.record(session);
        }
    });
    let root = Session::user_with("Count the words.", Stamper::counter());
    cx.record(&root);
    let out = team().forward(root.clone(), &cx).await.unwrap();
    cx.record(&out);
    let store = Store::at(dir);
    store.save_all(&recorder.sessions()).unwrap();
    (store, root, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_sessions_become_one_linked_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (store, root, out) = stored_run(dir.path()).await;
    let loaded = load_for_export(&store, None).unwrap();
    let spans = spans_from_sessions(&loaded);
    assert_eq!(spans, spans_from_sessions(&loaded), "stable");
    let trace = TraceId::for_stored_root(root.id().as_str());
    let ids: HashMap<_, _> = spans.iter().map(|s| (s.span_id, s)).collect();
    assert_eq!(ids.len(), spans.len(), "unique span ids");
    assert_eq!(spans.iter().filter(|s| s.parent.is_none()).count(), 1);
    let workflow = &spans[0];
    assert_eq!(workflow.name, "invoke_workflow");
    for s in &spans {
        assert_eq!(s.trace_id, trace);
        for (k, _) in s
            .attributes
            .0
            .iter()
            .chain(s.events.iter().flat_map(|e| e.attributes.0.iter()))
        {
            assert!(is_known_attribute(k), "{}: {k}", s.name);
        }
        assert_eq!(
            s.attribute(conv::GEN_AI_CONVERSATION_ID),
            Some(&Value::from(root.id().as_str()))
        );
        if let Some(p) = s.parent {
            assert!(ids.contains_key(&p), "{}'s parent is in the trace", s.name);
        }
        let client = s.attribute(conv::GEN_AI_OPERATION_NAME) == Some(&Value::from("chat"));
        assert_eq!(s.kind == SpanKind::Client, client, "{}", s.name);
    }
    // Every session is a span; every model call and tool call exactly once.
    assert_eq!(
        spans
            .iter()
            .filter(|s| s.attribute(conv::RATH_SESSION_ID).is_some())
            .count(),
        loaded.len()
    );
    let chats = spans
        .iter()
        .filter(|s| s.name == "chat" || s.name.starts_with("chat "))
        .count();
    assert_eq!(chats, 6, "two model calls for each of three agents");
    let tools: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "execute_tool word_count")
        .collect();
    assert_eq!(tools.len(), 3);
    for t in &tools {
        let parent = ids[&t.parent.unwrap()];
        assert!(parent.name.starts_with("invoke_agent "), "{}", parent.name);
        assert_eq!(
            parent.attribute(conv::GEN_AI_AGENT_NAME),
            t.attribute(conv::GEN_AI_AGENT_NAME)
        );
    }
    let lead = spans
        .iter()
        .find(|s| s.name == "invoke_agent lead")
        .unwrap();
    assert_eq!(
        lead.attribute(conv::GEN_AI_USAGE_INPUT_TOKENS),
        Some(&Value::Int(210))
    );
    // The merge links both branches' loop outputs, which are agent spans.
    let merge = spans
        .iter()
        .find(|s| s.attribute(conv::RATH_LINEAGE_KIND) == Some(&Value::from("op_merge")))
        .unwrap();
    assert_eq!(merge.links.len(), 2);
    let mut branch_agents: Vec<String> = merge
        .links
        .iter()
        .map(
            |l| match ids[&l.span_id].attribute(conv::GEN_AI_AGENT_NAME) {
                Some(Value::Str(a)) => a.clone(),
                other => panic!("merge parent is not an agent span: {other:?}"),
            },
        )
        .collect();
    branch_agents.sort();
    assert_eq!(branch_agents, ["left", "right"]);
    let choices: Vec<_> = workflow
        .events
        .iter()
        .map(|e| e.attributes.get(conv::RATH_ROUTE_CHOICE).cloned())
        .collect();
    assert_eq!(
        choices,
        [
            Some(Value::from("lead")),
            Some(Value::from("workers")),
            Some(Value::from("done"))
        ]
    );
    // One id: that session and its ancestors only.
    let all = load_for_export(&store, Some(out.id().as_str())).unwrap();
    assert_eq!(
        all.len(),
        loaded.len(),
        "the final session descends from every session"
    );
    let Some(Value::Str(lead_id)) = lead.attribute(conv::RATH_SESSION_ID) else {
        panic!("the lead's span names its session")
    };
    let one = load_for_export(&store, Some(lead_id)).unwrap();
    assert!(one.len() < loaded.len());
    assert!(one.iter().any(|l| l.session.id().as_str() == lead_id));
    assert!(one.iter().any(|l| l.session.id() == root.id()));
    assert!(matches!(
        load_for_export(&store, Some("no-such-session")),
        Err(rath_otel::OtelError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_export_arrives_at_a_collector() {
    let dir = tempfile::tempdir().unwrap();
    let (store, root, _) = stored_run(dir.path()).await;
    let spans = spans_from_sessions(&load_for_export(&store, None).unwrap());
    let (endpoint, received) = http_collector().await;
    let vars = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)];
    let config =
        OtlpConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
            .unwrap()
            .timeout(Duration::from_secs(5));
    let exporter = OtlpExporter::new(&config).unwrap();
    for s in &spans {
        exporter.emit(s.clone());
    }
    let report = exporter.shutdown();
    assert_eq!(report.exported as usize, spans.len(), "{report:?}");
    let got = received.spans();
    assert_eq!(got.len(), spans.len());
    let merge = got
        .iter()
        .find(|s| attr_str(&s.attributes, conv::RATH_LINEAGE_KIND).as_deref() == Some("op_merge"))
        .unwrap();
    assert_eq!(merge.links.len(), 2);
    assert!(got.iter().all(
        |s| attr_str(&s.attributes, conv::GEN_AI_CONVERSATION_ID).as_deref()
            == Some(root.id().as_str())
    ));
}
