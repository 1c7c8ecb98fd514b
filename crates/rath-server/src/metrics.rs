//! `/metrics`: Prometheus text exposition (format 0.0.4) of requests, their latencies, runs
//! by status and the queue depth.
//!
//! Requests are counted by method, matched route (the route template, never the ids in
//! the path) and status; latencies go into one histogram per route. Runs by status are read
//! from the run store at scrape time, so every server of a fleet reports the same figures.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use rath_runtime::RunStatus;
use tracing::Instrument as _;

use crate::AppState;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }
}

/// What the server counts about its requests.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
}

impl Metrics {
    fn record(&self, method: &str, route: &str, status: u16, secs: f64) {
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *r.entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        drop(r);
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.entry(route.to_owned()).or_default().observe(secs);
    }

    /// The request metrics in text exposition.
    fn render_requests(&self, out: &mut String) {
        out.push_str(
            "# HELP rath_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE rath_http_requests_total counter\n");
        let r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        for ((m, route, s), n) in r.iter() {
            let _ = writeln!(
                out,
                "rath_http_requests_total{{method=\"{m}\",route=\"{}\",status=\"{s}\"}} {n}",
                escape(route)
            );
        }
        drop(r);
        out.push_str("# HELP rath_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE rath_http_request_duration_seconds histogram\n");
        let l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        for (route, h) in l.iter() {
            let route = escape(route);
            for (le, c) in BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "rath_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {c}"
                );
            }
            let _ = writeln!(
                out,
                "rath_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "rath_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "rath_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The middleware that times and counts every request.
pub(crate) async fn track(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    // One SERVER span a request (HTTP semantic conventions: named by method and route
    // template, never by an id), exported when the process installs rath-otel's layer.
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    span.record("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.record("error.type", status.to_string());
        span.record("otel.status_code", "ERROR");
    }
    state.metrics.record(
        &method,
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}

/// The whole exposition: requests, latencies, then runs by status and the queue depth read
/// from the run store (`runs` is `None` when the store did not answer).
pub(crate) fn render(state: &AppState, runs: Option<&HashMap<RunStatus, u64>>) -> String {
    let mut out = String::with_capacity(4096);
    state.metrics.render_requests(&mut out);
    out.push_str("# HELP rath_runs Runs in the run store by status.\n");
    out.push_str("# TYPE rath_runs gauge\n");
    if let Some(runs) = runs {
        for st in RunStatus::ALL {
            let n = runs.get(&st).copied().unwrap_or(0);
            let _ = writeln!(out, "rath_runs{{status=\"{st}\"}} {n}");
        }
        out.push_str("# HELP rath_queue_depth Runs queued for a worker.\n");
        out.push_str("# TYPE rath_queue_depth gauge\n");
        let q = runs.get(&RunStatus::Queued).copied().unwrap_or(0);
        let _ = writeln!(out, "rath_queue_depth {q}");
    }
    out.push_str("# HELP rath_store_up 1 when the run store answered this scrape.\n");
    out.push_str("# TYPE rath_store_up gauge\n");
    let _ = writeln!(out, "rath_store_up {}", u8::from(runs.is_some()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(0.002);
        h.observe(0.2);
        assert_eq!(h.counts[0], 0);
        assert_eq!(h.counts[2], 1); // le 0.0025
        assert_eq!(h.counts[8], 2); // le 0.25
        assert_eq!(h.count, 2);
    }
}
