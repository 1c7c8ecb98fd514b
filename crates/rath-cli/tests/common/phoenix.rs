//! Reading spans back from Arize Phoenix (`RATH_PHOENIX_URL`, started by
//! `.ci/install.d/70-phoenix.sh`) through its REST API, for the tests that check what the
//! `rath` processes export over OTLP.

use std::time::{Duration, Instant};

use serde_json::Value;

/// Phoenix's base URL, when the environment names one.
pub fn url() -> Option<String> {
    std::env::var("RATH_PHOENIX_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.trim_end_matches('/').to_owned())
}

/// A Phoenix project name of this test's own (`OTEL_RESOURCE_ATTRIBUTES` names it).
pub fn project(prefix: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{stamp}", std::process::id())
}

/// The spans Phoenix holds for `project` (name, span id, parent id, flattened attributes),
/// once `ready` says they are all there or 60 s passed.
pub fn phoenix_spans(url: &str, project: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut spans = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut req = client
                    .get(format!("{url}/v1/projects/{project}/spans"))
                    .query(&[("limit", "1000")]);
                if let Some(c) = &cursor {
                    req = req.query(&[("cursor", c.as_str())]);
                }
                let Ok(resp) = req.send().await else { break };
                if !resp.status().is_success() {
                    break;
                }
                let body: Value = resp.json().await.expect("Phoenix answers JSON");
                spans.extend(body["data"].as_array().cloned().unwrap_or_default());
                cursor = body["next_cursor"].as_str().map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
            if ready(&spans) || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// A span attribute by its dotted name, whether Phoenix nests it or keeps it flat.
pub fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    let attrs = &span["attributes"];
    if let Some(v) = attrs.get(key) {
        return v;
    }
    key.split('.').fold(attrs, |at, part| &at[part])
}

pub fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}
