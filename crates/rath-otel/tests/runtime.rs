//! The runtime's own `tracing` spans through the OTLP exporter, decoded by the test collector:
//! a durable run on SQLite (run store and session store) traced as worker spans
//! (`worker.claim`, `worker.execute`, `worker.heartbeat`, `worker.release`) over store spans
//! (`load rath_sessions`, `write rath_sessions`, `claim rt_runs`, ...), with the run's agent
//! spans under the worker span that ran them, and every claim of the run in one trace.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{attr, attr_int, attr_str, http_collector};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span as ProtoSpan;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as ProtoKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use rath_flow::{Agent, SharedWorkflow, ToolPolicy, typed_tool};
use rath_otel::conv::{self, is_known_attribute};
use rath_otel::{OtlpConfig, OtlpExporter, TraceId, TraceOptions, Traced};
use rath_persist::SessionStore;
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_runtime::{
    Outcome, RunId, RunOptions, RunStatus, Runtime, Worker, WorkerOptions, WorkflowRegistry,
};
use rath_session::{Role, Session, SessionId, Stamper};
use rath_store_sql::SqliteStore;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;

/// A test collector, an exporter to it, a `tracing` dispatcher with the exporter's layer,
/// and a directory for the stores.
struct Setup {
    received: common::Received,
    exporter: OtlpExporter,
    dispatch: tracing::Dispatch,
    dir: tempfile::TempDir,
    dir_text: String,
}

impl Setup {
    async fn new() -> Self {
        let (endpoint, received) = http_collector().await;
        let vars = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ];
        let config = OtlpConfig::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap();
        let exporter = OtlpExporter::new(&config).unwrap();
        let dispatch =
            tracing::Dispatch::new(tracing_subscriber::registry().with(exporter.tracing_layer()));
        let dir = tempfile::tempdir().unwrap();
        let dir_text = dir.path().display().to_string();
        Self {
            received,
            exporter,
            dispatch,
            dir,
            dir_text,
        }
    }
}

/// Asks for the `slow` tool until a tool result is in the conversation, then answers: the
/// same reply for the same request, whether served from the journal or asked again.
#[derive(Debug)]
struct OneToolModel;

#[async_trait]
impl Provider for OneToolModel {
    fn name(&self) -> &str {
        "one-tool"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let answered = req.messages.iter().any(|m| m.role == Role::Tool);
        let reply = if answered {
            ScriptedResponse::text("done")
        } else {
            ScriptedResponse::tool_calls(vec![("c1".to_owned(), "slow", json!({"ms": 250}))])
        };
        ScriptedProvider::new(vec![reply.usage(12, 3)])
            .complete(req)
            .await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("one-tool")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SlowArgs {
    /// How long to take.
    ms: u64,
}

/// `gated`: one agent whose `slow` tool needs an approval and takes 250 ms (long enough for
/// heartbeats every 100 ms), traced into `exporter`.
fn registry(exporter: OtlpExporter) -> WorkflowRegistry {
    WorkflowRegistry::new().register("gated", "gated v1", move || {
        let slow = typed_tool("slow", "Take a while.", |_cx, a: SlowArgs| async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            Ok(json!({"slept_ms": a.ms}))
        });
        let agent = Agent::new("clerk", "Do it.", OneToolModel)
            .with_tool(slow)?
            .with_policy(ToolPolicy::allow_all().require_approval("slow"));
        let traced =
            Traced::new(agent, exporter.clone()).with_options(TraceOptions::from_lookup(|_| None));
        Ok(Arc::new(traced) as SharedWorkflow)
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn kind(s: &ProtoSpan) -> ProtoKind {
    ProtoKind::try_from(s.kind).unwrap()
}

fn named<'a>(spans: &'a [ProtoSpan], name: &str) -> Vec<&'a ProtoSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn children<'a>(spans: &'a [ProtoSpan], parent: &ProtoSpan) -> Vec<&'a ProtoSpan> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect()
}

fn child<'a>(spans: &'a [ProtoSpan], parent: &ProtoSpan, name: &str) -> &'a ProtoSpan {
    let found: Vec<_> = children(spans, parent)
        .into_iter()
        .filter(|s| s.name == name)
        .collect();
    assert_eq!(found.len(), 1, "one {name} under {}", parent.name);
    found[0]
}

/// Every attribute name is a known one, and no attribute value names the test's directory
/// (a path or a store URL).
fn check_names_and_values(spans: &[ProtoSpan], dir: &str) {
    for s in spans {
        for kv in &s.attributes {
            assert!(
                is_known_attribute(&kv.key),
                "{}: unknown attribute {}",
                s.name,
                kv.key
            );
            if let Some(any_value::Value::StringValue(v)) = attr(&s.attributes, &kv.key) {
                assert!(
                    !v.contains(dir) && !v.contains("sqlite:"),
                    "{}: {} = {v:?} names the store",
                    s.name,
                    kv.key
                );
            }
        }
    }
}

/// A store span: a CLIENT span on SQLite with the database conventions' names.
fn check_store_span(s: &ProtoSpan, op: &str, table: &str) {
    assert_eq!(s.name, format!("{op} {table}"));
    assert_eq!(kind(s), ProtoKind::Client, "{}", s.name);
    assert_eq!(
        attr_str(&s.attributes, conv::DB_SYSTEM_NAME).as_deref(),
        Some("sqlite")
    );
    assert_eq!(
        attr_str(&s.attributes, conv::DB_OPERATION_NAME).as_deref(),
        Some(op)
    );
    assert_eq!(
        attr_str(&s.attributes, conv::DB_COLLECTION_NAME).as_deref(),
        Some(table)
    );
}

/// A durable run of `gated` on SQLite (run store and session store): claimed, stopped at the
/// approval, approved, claimed again and finished. Returns its id and input.
async fn durable_run(t: &Setup) -> (RunId, Session) {
    let input = Session::user_with("Do the slow thing.", Stamper::seeded(1));
    let (id, outcomes) = {
        let sessions = Arc::new(
            SqliteStore::open(t.dir.path().join("sessions.sqlite"))
                .await
                .unwrap(),
        );
        let url = format!("sqlite:{}", t.dir.path().join("runs.db").display());
        let rt = Runtime::connect(&url, sessions, registry(t.exporter.clone()))
            .await
            .unwrap();
        let id = rt
            .submit(&Stamper::seeded(2), "gated", &input, RunOptions::default())
            .await
            .unwrap();
        let worker = Worker::new(
            rt.clone(),
            WorkerOptions::named("w1").lease(Duration::from_millis(300)),
        );
        // The first claim stops at the approval; the second runs the approved tool.
        let first = worker.run_once().await.unwrap().unwrap().1;
        let stopped = rt.output(&id).await.unwrap().unwrap();
        let call = stopped.pending()[0].call.id.clone();
        rt.approve(&id, &call, "reviewer").await.unwrap();
        let second = worker.run_once().await.unwrap().unwrap().1;
        (id, [first, second])
    };
    assert_eq!(
        outcomes,
        [
            Outcome::Moved(RunStatus::Waiting),
            Outcome::Moved(RunStatus::Succeeded)
        ]
    );
    (id, input)
}

/// The run's spans: the worker's over the stores', the agents' under the worker's, the
/// claims and the run in their traces.
fn check_durable_run(spans: &[ProtoSpan], id: &RunId, input: &Session) {
    let spans = spans.to_vec();
    let by_id: HashMap<&[u8], &ProtoSpan> =
        spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");

    // Two claims, each a trace of its own with the run store's claim under it.
    let claims = named(&spans, "worker.claim");
    assert_eq!(claims.len(), 2);
    for c in &claims {
        assert!(c.parent_span_id.is_empty());
        assert_eq!(
            attr_str(&c.attributes, conv::RATH_CLAIM_OUTCOME).as_deref(),
            Some("claimed")
        );
        assert_eq!(
            attr_str(&c.attributes, conv::RATH_RUN_ID).as_deref(),
            Some(id.as_str())
        );
        assert_eq!(
            attr_str(&c.attributes, conv::RATH_WORKER_NAME).as_deref(),
            Some("w1")
        );
        check_store_span(child(&spans, c, "claim rt_runs"), "claim", "rt_runs");
    }

    // Both claims' worker spans are roots of the run's one trace: its input session's.
    let trace = TraceId::for_root(input.id().as_str()).to_hex();
    let executes = named(&spans, "worker.execute");
    assert_eq!(executes.len(), 2);
    let mut tokens = Vec::new();
    for (e, want) in executes.iter().zip(["waiting", "succeeded"]) {
        assert!(e.parent_span_id.is_empty());
        assert_eq!(
            hex(&e.trace_id),
            trace,
            "the worker span is in the run's trace"
        );
        assert_eq!(kind(e), ProtoKind::Internal);
        assert_eq!(
            attr_str(&e.attributes, conv::RATH_RUN_OUTCOME).as_deref(),
            Some(want)
        );
        assert_eq!(
            attr_str(&e.attributes, conv::GEN_AI_CONVERSATION_ID).as_deref(),
            Some(input.id().as_str())
        );
        assert_eq!(
            attr_str(&e.attributes, conv::RATH_RUN_WORKFLOW).as_deref(),
            Some("gated")
        );
        let token = attr_int(&e.attributes, conv::RATH_LEASE_TOKEN).unwrap();
        tokens.push(token);
        // Linked from the claim that led to it.
        assert_eq!(e.links.len(), 1);
        let claim = by_id[e.links[0].span_id.as_slice()];
        assert_eq!(claim.name, "worker.claim");
        assert_eq!(
            attr_int(&claim.attributes, conv::RATH_LEASE_TOKEN),
            Some(token)
        );

        // Under it: the session load, the session write (fenced by its token), the release
        // and the workflow's own spans.
        let load = child(&spans, e, "load rath_sessions");
        check_store_span(load, "load", "rath_sessions");
        assert_eq!(
            attr_str(&load.attributes, conv::RATH_STORE_KIND).as_deref(),
            Some("sqlite")
        );
        assert!(attr_int(&load.attributes, conv::RATH_STORE_CHUNKS).unwrap() >= 1);
        let write = child(&spans, e, "write rath_sessions");
        check_store_span(write, "write", "rath_sessions");
        assert_eq!(
            attr_int(&write.attributes, conv::RATH_STORE_FENCE_TOKEN),
            Some(token)
        );
        // The output, in one batch with its agent's system session (every parent a stored
        // session names is stored) unless the live writer stored that one first: timing.
        let writes = attr_int(&write.attributes, conv::RATH_STORE_WRITES);
        assert!(
            matches!(writes, Some(1 | 2)),
            "one final write of the output (and its system session): {writes:?}"
        );
        // The worker's live writes stored the chunks as the session grew, and a run that
        // ends well leaves what the live writer had not yet stored (its output, or nothing
        // when the writer got there first: timing) to this final write, which adds only
        // that, never the whole session again.
        let written = attr_int(&write.attributes, conv::RATH_STORE_CHUNKS_WRITTEN)
            .expect("the final write says how many chunks it wrote");
        let finished = attr_int(&write.attributes, conv::RATH_STORE_CHUNKS)
            .or_else(|| attr_int(&load.attributes, conv::RATH_STORE_CHUNKS).map(|n| n + written));
        assert!(
            finished.is_some_and(|n| written < n),
            "the final write added {written} chunks of {finished:?}: not the whole session"
        );
        let release = child(&spans, e, "worker.release");
        assert_eq!(
            attr_str(&release.attributes, conv::RATH_RUN_STATUS).as_deref(),
            Some(want)
        );
        check_store_span(
            child(&spans, release, "finish rt_runs"),
            "finish",
            "rt_runs",
        );
        let workflow = child(&spans, e, "invoke_workflow clerk");
        let agent = child(&spans, workflow, "invoke_agent clerk");
        assert!(
            children(&spans, agent)
                .iter()
                .any(|s| s.name.starts_with("chat"))
        );
        // Everything under the worker span is in its trace.
        let mut stack = vec![*e];
        while let Some(s) = stack.pop() {
            assert_eq!(hex(&s.trace_id), trace, "{}", s.name);
            stack.extend(children(&spans, s));
        }
    }
    assert!(
        tokens[0] < tokens[1],
        "a new claim, a new token: {tokens:?}"
    );

    // The approved tool ran on the second claim, long enough for heartbeats under it.
    let second = executes[1];
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool slow")
        .expect("the tool's span");
    let agent = by_id[tool.parent_span_id.as_slice()];
    let workflow = by_id[agent.parent_span_id.as_slice()];
    assert_eq!(workflow.parent_span_id, second.span_id);
    let beats: Vec<_> = children(&spans, second)
        .into_iter()
        .filter(|s| s.name == "worker.heartbeat")
        .collect();
    assert!(!beats.is_empty(), "heartbeats during the 250 ms tool call");
    for b in beats {
        assert_eq!(
            attr_str(&b.attributes, conv::RATH_HEARTBEAT_OUTCOME).as_deref(),
            Some("renewed")
        );
        check_store_span(
            child(&spans, b, "heartbeat rt_leases"),
            "heartbeat",
            "rt_leases",
        );
    }
}

/// Saves, loads and fails to load one session on SQLite and on a JSONL directory.
async fn store_calls(t: &Setup) -> Session {
    let session = Session::user_with("hi", Stamper::counter());
    {
        let sqlite = SqliteStore::open(t.dir.path().join("s.sqlite"))
            .await
            .unwrap();
        let jsonl = rath_persist::Store::at(t.dir.path().join("sessions"));
        let stores: [&dyn SessionStore; 2] = [&sqlite, &jsonl];
        for store in stores {
            store.save(&session).await.unwrap();
            store.load(session.id()).await.unwrap();
            let missing = store.load(&SessionId::new("nope")).await;
            assert!(missing.is_err());
        }
    }
    session
}

/// Store spans name the store kind; a failure is an error status and an `error.type`, not a
/// message.
fn check_store_calls(spans: &[ProtoSpan], session: &Session) {
    let ids = [session.id().as_str(), "nope"];
    let spans: Vec<ProtoSpan> = spans
        .iter()
        .filter(|s| {
            s.parent_span_id.is_empty()
                && attr_str(&s.attributes, conv::RATH_SESSION_ID)
                    .is_some_and(|id| ids.contains(&id.as_str()))
        })
        .cloned()
        .collect();
    for (store, target, span_kind) in [
        ("sqlite", "rath_sessions", ProtoKind::Client),
        ("jsonl", "jsonl", ProtoKind::Internal),
    ] {
        let mine: Vec<_> = spans
            .iter()
            .filter(|s| attr_str(&s.attributes, conv::RATH_STORE_KIND).as_deref() == Some(store))
            .collect();
        let names: Vec<&str> = mine.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                format!("write {target}"),
                format!("load {target}"),
                format!("load {target}")
            ],
            "{store}"
        );
        for s in &mine {
            assert_eq!(kind(s), span_kind, "{}", s.name);
            assert!(s.parent_span_id.is_empty());
        }
        let db = attr_str(&mine[0].attributes, conv::DB_SYSTEM_NAME);
        assert_eq!(db.as_deref(), (store == "sqlite").then_some("sqlite"));
        assert_eq!(
            attr_int(&mine[0].attributes, conv::RATH_STORE_CHUNKS_WRITTEN),
            Some(1)
        );
        let ok = mine[1];
        assert_eq!(
            attr_str(&ok.attributes, conv::RATH_SESSION_ID).as_deref(),
            Some(session.id().as_str())
        );
        assert_eq!(attr_int(&ok.attributes, conv::RATH_STORE_CHUNKS), Some(1));
        assert!(
            ok.status
                .as_ref()
                .is_none_or(|s| s.code != StatusCode::Error as i32)
        );
        let failed = mine[2];
        assert_eq!(
            attr_str(&failed.attributes, conv::ERROR_TYPE).as_deref(),
            Some("not_found")
        );
        assert_eq!(
            failed.status.as_ref().map(|s| s.code),
            Some(StatusCode::Error as i32),
            "{store}"
        );
    }
}

/// One test (the binary's only one): its subscriber is the global default, as in a program.
/// A scoped subscriber would not do: a span dropped on a thread of its own (sqlx's SQLite
/// connection threads hold the span of the command they run) tells the thread's default
/// subscriber, so with a scoped one its parent would never close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimes_spans_reach_the_collector_in_the_runs_trace() {
    let t = Setup::new().await;
    tracing::dispatcher::set_global_default(t.dispatch.clone())
        .expect("the only subscriber of this test binary");
    let (id, input) = durable_run(&t).await;
    let session = store_calls(&t).await;
    let report = t.exporter.shutdown();
    assert_eq!(report.dropped, 0, "{report:?}");
    let spans = t.received.spans();
    assert_eq!(report.exported as usize, spans.len());
    check_names_and_values(&spans, &t.dir_text);
    check_durable_run(&spans, &id, &input);
    check_store_calls(&spans, &session);
}
