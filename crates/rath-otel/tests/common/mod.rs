//! A test OTLP collector (HTTP/protobuf and gRPC) that decodes the export requests with
//! `opentelemetry-proto`, and a small team workflow with forks, a merge, tools and a
//! selector.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span as ProtoSpan;
use prost::Message;
use rath_flow::{Agent, Decision, Parallel, Selector, ToolSet, typed_tool};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session};
use serde_json::json;

/// What the collector received.
#[derive(Clone, Default)]
pub struct Received(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

impl Received {
    pub fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.0.lock().unwrap().clone()
    }

    /// Every span of every request, with the resource attributes of its batch.
    pub fn spans(&self) -> Vec<ProtoSpan> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .collect()
    }
}

/// An HTTP/protobuf collector on a free loopback port: `(endpoint, received)`.
pub async fn http_collector() -> (String, Received) {
    let received = Received::default();
    let state = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let state = state.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body.as_ref())
                    .expect("an OTLP protobuf export request");
                state.0.lock().unwrap().push(req);
                (
                    [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1/traces"), received)
}

struct Grpc(Received);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A gRPC collector on a free loopback port: `(endpoint, received)`.
pub async fn grpc_collector() -> (String, Received) {
    let received = Received::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    drop(listener);
    let svc = TraceServiceServer::new(Grpc(received.clone()));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve(addr)
            .await
            .unwrap()
    });
    // Wait until it accepts connections.
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    (format!("http://{addr}"), received)
}

/// A loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    port
}

pub fn attr<'a>(attrs: &'a [KeyValue], name: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == name)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

pub fn attr_str(attrs: &[KeyValue], name: &str) -> Option<String> {
    match attr(attrs, name) {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

pub fn attr_int(attrs: &[KeyValue], name: &str) -> Option<i64> {
    match attr(attrs, name) {
        Some(any_value::Value::IntValue(i)) => Some(*i),
        _ => None,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountArgs {
    /// Text to count.
    text: String,
}

fn counter_agent(name: &str, call: &str, text: &str, usage: (u64, u64)) -> Agent {
    let tool = typed_tool(
        "word_count",
        "Count words.",
        |_cx, a: CountArgs| async move { Ok(json!({"words": a.text.split_whitespace().count()})) },
    );
    let model = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(call.to_owned(), "word_count", json!({"text": text}))])
            .usage(usage.0, usage.1),
        ScriptedResponse::text(format!("{name}: counted")).usage(usage.0 + 10, 4),
    ])
    .named(format!("scripted:{name}"));
    Agent::new(name, format!("You are {name}."), model)
        .with_tools(ToolSet::new().with(tool).unwrap())
}

/// A lead, then two counters in parallel (forks of one session, merged), routed by a
/// function selector until both spoke.
pub fn team() -> Selector {
    let lead = counter_agent("lead", "lead_c", "plan the work", (100, 10));
    let workers = Parallel::new("workers")
        .branch(counter_agent("left", "left_c", "a b c", (50, 5)))
        .branch(counter_agent("right", "right_c", "d e", (60, 6)));
    Selector::by_function("router", |s: &Session, _c| {
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
    .candidate(lead)
    .candidate(workers)
    .max_steps(4)
}
