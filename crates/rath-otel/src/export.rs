//! OTLP export: HTTP/protobuf or gRPC, configured by the standard `OTEL_EXPORTER_OTLP_*`
//! variables, batched by the SDK's [`BatchSpanProcessor`] on a thread of its own, so a slow
//! or absent collector never blocks a run. The first failed export marks the collector
//! down: it costs at most one export timeout, and every span after it is dropped at once and
//! counted ([`ExportReport::dropped`]).
//!
//! ```
//! use rath_otel::{OtlpConfig, Protocol};
//!
//! let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
//! let config = OtlpConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))?;
//! assert_eq!(config.protocol, Protocol::Grpc);
//! assert_eq!(config.endpoint, "http://127.0.0.1:4317");
//! # Ok::<(), rath_otel::OtelError>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};

use crate::bridge::LineageTracer;
use crate::span::Span;
use crate::{OtelError, SpanSink};

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf` (the default), POST to `/v1/traces`.
    HttpProtobuf,
    /// `grpc`.
    Grpc,
}

/// Where and how spans are exported.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    /// The transport.
    pub protocol: Protocol,
    /// The full endpoint (`http://host:4318/v1/traces` for HTTP, `http://host:4317` for gRPC).
    pub endpoint: String,
    /// How long one export may take.
    pub timeout: Duration,
    /// Extra request headers (gRPC metadata).
    pub headers: Vec<(String, String)>,
    /// `service.name` of the resource.
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, `k=v,k2=v2`).
    pub resource: Vec<(String, String)>,
}

/// Reads a variable: the traces-specific one first, then the generic one.
fn pick(get: &impl Fn(&str) -> Option<String>, names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| {
        get(n)
            .filter(|v| !v.trim().is_empty())
            .map(|v| ((*n).to_owned(), v.trim().to_owned()))
    })
}

impl OtlpConfig {
    /// The configuration from the process environment.
    pub fn from_env() -> Result<Self, OtelError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The configuration when an endpoint variable is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), else `None`: tracing stays off unless asked for.
    pub fn from_env_if_set() -> Result<Option<Self>, OtelError> {
        let get = |k: &str| std::env::var(k).ok();
        if pick(&get, &[TRACES_ENDPOINT, ENDPOINT]).is_none() {
            return Ok(None);
        }
        Self::from_lookup(get).map(Some)
    }

    /// The configuration from a variable lookup: `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`
    /// (`http/protobuf` or `grpc`), `_ENDPOINT` (the generic one gets `/v1/traces` appended
    /// for HTTP), `_TIMEOUT` (milliseconds), `_HEADERS` (`k=v,k2=v2`), `OTEL_SERVICE_NAME`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, OtelError> {
        let protocol = match pick(&get, &[TRACES_PROTOCOL, PROTOCOL]) {
            None => Protocol::HttpProtobuf,
            Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
            Some((_, v)) if v == "grpc" => Protocol::Grpc,
            Some((var, v)) => {
                return Err(OtelError::Config {
                    var,
                    message: format!("{v:?} is not supported (use http/protobuf or grpc)"),
                });
            }
        };
        let endpoint = match (pick(&get, &[TRACES_ENDPOINT]), pick(&get, &[ENDPOINT])) {
            (Some((_, v)), _) => v,
            (None, Some((_, v))) if protocol == Protocol::HttpProtobuf => {
                format!("{}/v1/traces", v.trim_end_matches('/'))
            }
            (None, Some((_, v))) => v,
            (None, None) if protocol == Protocol::Grpc => "http://localhost:4317".to_owned(),
            (None, None) => "http://localhost:4318/v1/traces".to_owned(),
        };
        let timeout = match pick(&get, &[TRACES_TIMEOUT, TIMEOUT]) {
            None => Duration::from_secs(10),
            Some((var, v)) => Duration::from_millis(v.parse().map_err(|_| OtelError::Config {
                var,
                message: format!("{v:?} is not a number of milliseconds"),
            })?),
        };
        let headers = match pick(&get, &[TRACES_HEADERS, HEADERS]) {
            None => Vec::new(),
            Some((var, v)) => parse_headers(&var, &v)?,
        };
        let resource = match get("OTEL_RESOURCE_ATTRIBUTES").filter(|v| !v.trim().is_empty()) {
            None => Vec::new(),
            Some(v) => parse_headers("OTEL_RESOURCE_ATTRIBUTES", &v)?,
        };
        let service_name = get("OTEL_SERVICE_NAME")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "openrath".to_owned());
        Ok(Self {
            protocol,
            endpoint,
            timeout,
            headers,
            service_name,
            resource,
        })
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a resource attribute (Phoenix files spans under `openinference.project.name`).
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.resource.push((key.into(), value.into()));
        self
    }

    /// Sets the service name.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }
}

const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";

fn parse_headers(var: &str, text: &str) -> Result<Vec<(String, String)>, OtelError> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(OtelError::Config {
                var: var.to_owned(),
                message: format!("{p:?} is not key=value"),
            }),
        })
        .collect()
}

/// What an exporter did, from [`OtlpExporter::shutdown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Spans handed to the exporter (by [`SpanSink::emit`] and by `tracing`).
    pub submitted: u64,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped: a failed export, the collector already marked down, a full queue, or
    /// still queued when the shutdown timeout ran out.
    pub dropped: u64,
    /// Failed export attempts (at most one wait for the timeout: after the first failure
    /// the collector counts as down).
    pub failed_exports: u64,
}

impl fmt::Display for ExportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} spans exported, {} dropped",
            self.exported, self.dropped
        )
    }
}

#[derive(Debug, Default)]
struct Stats {
    submitted: AtomicU64,
    exported: AtomicU64,
    failed_exports: AtomicU64,
    down: AtomicBool,
}

/// The SDK's OTLP exporter, gRPC on a small runtime of its own (so exports never depend on
/// the caller's runtime).
enum Transport {
    Http(opentelemetry_otlp::SpanExporter),
    Grpc {
        exporter: Arc<opentelemetry_otlp::SpanExporter>,
        runtime: Option<tokio::runtime::Runtime>,
    },
}

impl Drop for Transport {
    fn drop(&mut self) {
        if let Transport::Grpc { runtime, .. } = self
            && let Some(rt) = runtime.take()
        {
            rt.shutdown_background();
        }
    }
}

/// Counts what was exported, and stops trying once the collector failed.
struct Counting {
    transport: Transport,
    stats: Arc<Stats>,
}

impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting")
            .field("stats", &self.stats)
            .finish()
    }
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if self.stats.down.load(Ordering::Relaxed) {
            return Err(OTelSdkError::InternalFailure(
                "collector down: batch dropped".into(),
            ));
        }
        let n = batch.len() as u64;
        let result = match &self.transport {
            Transport::Http(e) => e.export(batch).await,
            Transport::Grpc { exporter, runtime } => match runtime {
                Some(rt) => {
                    let e = exporter.clone();
                    rt.spawn(async move { e.export(batch).await })
                        .await
                        .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
                }
                None => Err(OTelSdkError::AlreadyShutdown),
            },
        };
        match &result {
            Ok(()) => {
                self.stats.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.failed_exports.fetch_add(1, Ordering::Relaxed);
                self.stats.down.store(true, Ordering::Relaxed);
            }
        }
        result
    }

    fn set_resource(&mut self, resource: &Resource) {
        match &mut self.transport {
            Transport::Http(e) => e.set_resource(resource),
            Transport::Grpc { exporter, .. } => {
                if let Some(e) = Arc::get_mut(exporter) {
                    e.set_resource(resource);
                }
            }
        }
    }
}

/// The batch processor, shared by the tracer provider (for `tracing` spans) and direct
/// [`SpanSink::emit`] calls; counts what it is given.
#[derive(Debug, Clone)]
struct Shared {
    processor: Arc<BatchSpanProcessor>,
    stats: Arc<Stats>,
}

impl SpanProcessor for Shared {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        self.stats.submitted.fetch_add(1, Ordering::Relaxed);
        self.processor.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.processor.force_flush()
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // The exporter's owner shuts the processor down ([`OtlpExporter::shutdown`]).
        Ok(())
    }
}

/// A span sink that exports over OTLP in batches. Cheap to clone; clones share the batch
/// queue. Call [`OtlpExporter::shutdown`] once at the end to flush and read the counts.
#[derive(Clone)]
pub struct OtlpExporter {
    shared: Shared,
    provider: SdkTracerProvider,
    timeout: Duration,
    report: Arc<Mutex<Option<ExportReport>>>,
}

impl fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtlpExporter")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OtlpExporter {
    /// An exporter for `config`; the batch settings come from the standard `OTEL_BSP_*`
    /// variables (the SDK reads them); each export is bounded by `config.timeout`.
    pub fn new(config: &OtlpConfig) -> Result<Self, OtelError> {
        let stats = Arc::new(Stats::default());
        let transport = build_transport(config)?;
        let mut counting = Counting {
            transport,
            stats: stats.clone(),
        };
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attributes(
                config
                    .resource
                    .iter()
                    .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        counting.set_resource(&resource);
        let batch = BatchConfigBuilder::default().build();
        let processor = BatchSpanProcessor::builder(counting)
            .with_batch_config(batch)
            .build();
        let shared = Shared {
            processor: Arc::new(processor),
            stats,
        };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(shared.clone())
            .with_resource(resource)
            .build();
        Ok(Self {
            shared,
            provider,
            timeout: config.timeout,
            report: Arc::new(Mutex::new(None)),
        })
    }

    /// A tracer on the same batch queue and exporter, for the `tracing` integration and for
    /// code that uses the OpenTelemetry API directly.
    pub fn tracer(&self, name: &'static str) -> opentelemetry_sdk::trace::Tracer {
        self.provider.tracer(name)
    }

    /// A `tracing` layer that turns the runtime's own `tracing` spans (session and run
    /// stores, worker, server) into OpenTelemetry spans on this exporter:
    /// `tracing_subscriber::registry().with(exporter.tracing_layer())`. A root span with a
    /// `gen_ai.conversation.id` (a worker's `worker.execute`) joins that conversation's trace
    /// ([`crate::bridge`]). Spans carry their own fields only: no source file, thread or
    /// module attributes, no busy/idle times.
    pub fn tracing_layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, LineageTracer>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(LineageTracer::new(self.tracer("openrath")))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
    }

    /// Flushes what is queued (waiting at most the export timeout) and stops; the counts.
    /// A second call returns the first call's report.
    pub fn shutdown(&self) -> ExportReport {
        let mut slot = self.report.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = *slot {
            return r;
        }
        let started = Instant::now();
        let _ = self.shared.processor.shutdown_with_timeout(self.timeout);
        let _ = self
            .provider
            .shutdown_with_timeout(self.timeout.saturating_sub(started.elapsed()));
        let s = &self.shared.stats;
        let submitted = s.submitted.load(Ordering::Relaxed);
        let exported = s.exported.load(Ordering::Relaxed);
        let report = ExportReport {
            submitted,
            exported,
            dropped: submitted.saturating_sub(exported),
            failed_exports: s.failed_exports.load(Ordering::Relaxed),
        };
        *slot = Some(report);
        report
    }
}

impl SpanSink for OtlpExporter {
    fn emit(&self, span: Span) {
        self.shared.on_end(span.to_span_data());
    }
}

fn build_transport(config: &OtlpConfig) -> Result<Transport, OtelError> {
    let build = |e: opentelemetry_otlp::ExporterBuildError| OtelError::Build(e.to_string());
    match config.protocol {
        Protocol::HttpProtobuf => {
            let headers: HashMap<String, String> = config.headers.iter().cloned().collect();
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.endpoint.clone())
                .with_timeout(config.timeout)
                .with_headers(headers)
                .build()
                .map_err(build)?;
            Ok(Transport::Http(exporter))
        }
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("rath-otel-grpc")
                .enable_all()
                .build()
                .map_err(|e| OtelError::Build(e.to_string()))?;
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &config.headers {
                let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                    .map_err(|e| OtelError::Build(format!("header {k:?}: {e}")))?;
                let value = v
                    .parse()
                    .map_err(|e| OtelError::Build(format!("header {k:?}: {e}")))?;
                metadata.insert(key, value);
            }
            let exporter = {
                let _entered = runtime.enter();
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(config.endpoint.clone())
                    .with_timeout(config.timeout)
                    .with_metadata(metadata)
                    .build()
                    .map_err(build)?
            };
            Ok(Transport::Grpc {
                exporter: Arc::new(exporter),
                runtime: Some(runtime),
            })
        }
    }
}
