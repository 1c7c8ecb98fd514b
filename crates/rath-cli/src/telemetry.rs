//! What the long-running subcommands (`rath worker`, `rath serve`) report while they run:
//! log lines on stderr through `tracing`'s fmt layer (`RATH_LOG` sets the level, default
//! info) and, when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, with the other standard `OTEL_*` variables), the runtime's
//! own spans (worker, run store, session store, server) exported through rath-otel's
//! exporter. `RATH_TRACE` sets the level of the exported spans (default info: a worker's
//! `worker.execute` and the store operations under it; debug adds every claim poll and
//! heartbeat).

use rath_otel::{OtlpConfig, OtlpExporter};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::Failure;

/// The installed subscriber's exporter, flushed by [`Telemetry::shutdown`].
pub(crate) struct Telemetry {
    exporter: Option<OtlpExporter>,
}

impl Telemetry {
    /// Flushes the spans still queued (bounded by the export timeout) and stops exporting.
    pub(crate) fn shutdown(self) {
        if let Some(exporter) = self.exporter {
            let report = exporter.shutdown();
            tracing::debug!(?report, "spans exported");
        }
    }
}

fn level(var: &str) -> LevelFilter {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO)
}

/// Installs the process-wide subscriber (the SQL stores' threads need a global one for
/// their spans to close). Call it once, inside the async runtime the command runs on.
pub(crate) fn init() -> Result<Telemetry, Failure> {
    let exporter = match OtlpConfig::from_env_if_set() {
        Ok(Some(config)) => Some(
            OtlpExporter::new(&config)
                .map_err(|e| Failure(format!("cannot start the OTLP exporter: {e}")))?,
        ),
        Ok(None) => None,
        Err(e) => return Err(Failure(format!("bad OTLP settings: {e}"))),
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(level("RATH_LOG"));
    let spans = exporter
        .as_ref()
        .map(|e| e.tracing_layer().with_filter(level("RATH_TRACE")));
    // A subscriber already installed (a second call) keeps the first: nothing to report.
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    Ok(Telemetry { exporter })
}
