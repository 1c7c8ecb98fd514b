//! The engineering_team example's OpenTelemetry spans in a real Arize Phoenix: the run exports
//! over OTLP/HTTP to Phoenix (`RATH_PHOENIX_URL`, started by `.ci/install.d/70-phoenix.sh`),
//! and the spans are read back through Phoenix's REST API: the parent/child tree, agent names,
//! tool names and token counts. Then the same from the store the run left behind
//! (`openrath::otel::store`). Without Phoenix the test skips with a printed reason; under
//! `RATH_CI=1` it fails.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use common::example_binary;
use openrath::otel::store::spans_from_sessions;
use openrath::otel::{OtlpConfig, OtlpExporter, SpanSink, TraceId, load_for_export};
use openrath::persist::Store;
use rath_testkit::skip;
use serde_json::Value;

fn phoenix_url() -> Option<String> {
    std::env::var("RATH_PHOENIX_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.trim_end_matches('/').to_owned())
}

async fn healthy(client: &reqwest::Client, url: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{url}/healthz")).send().await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// One span as Phoenix returns it, reduced to what the test checks.
#[derive(Debug, Clone)]
struct PSpan {
    name: String,
    span_id: String,
    parent_id: Option<String>,
    trace_id: String,
    attributes: HashMap<String, Value>,
}

/// Flattens `{"gen_ai": {"agent": {"name": "x"}}}` and `{"gen_ai.agent.name": "x"}` alike.
fn flatten(prefix: &str, v: &Value, out: &mut HashMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

fn parse_span(v: &Value) -> Option<PSpan> {
    let ctx = v.get("context")?;
    let mut attributes = HashMap::new();
    if let Some(a) = v.get("attributes") {
        flatten("", a, &mut attributes);
    }
    Some(PSpan {
        name: v.get("name")?.as_str()?.to_owned(),
        span_id: ctx.get("span_id")?.as_str()?.to_owned(),
        trace_id: ctx.get("trace_id")?.as_str()?.to_owned(),
        parent_id: v
            .get("parent_id")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        attributes,
    })
}

/// Every span of `project`, once at least `want` arrived (or the deadline passed).
async fn read_spans(client: &reqwest::Client, url: &str, project: &str, want: usize) -> Vec<PSpan> {
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
            if let Some(data) = body.get("data").and_then(Value::as_array) {
                spans.extend(data.iter().filter_map(parse_span));
            }
            cursor = body
                .get("next_cursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        if spans.len() >= want || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn s<'a>(span: &'a PSpan, key: &str) -> Option<&'a str> {
    span.attributes.get(key).and_then(Value::as_str)
}

fn n(span: &PSpan, key: &str) -> Option<u64> {
    span.attributes.get(key).and_then(Value::as_u64)
}

/// The checks both exports must pass in Phoenix.
fn check_in_phoenix(label: &str, spans: &[PSpan], trace: &TraceId, sessions_usage: (u64, u64)) {
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert!(!spans.is_empty(), "{label}: no spans in Phoenix");
    for sp in spans {
        assert_eq!(
            sp.trace_id,
            trace.to_hex(),
            "{label}: {} in the run's trace",
            sp.name
        );
        if let Some(p) = &sp.parent_id {
            assert!(
                ids.contains(p.as_str()),
                "{label}: {}'s parent {p} is in Phoenix",
                sp.name
            );
        }
    }
    let roots: Vec<_> = spans.iter().filter(|s| s.parent_id.is_none()).collect();
    assert_eq!(
        roots.len(),
        1,
        "{label}: one root span: {:?}",
        roots.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    assert!(
        roots[0].name.starts_with("invoke_workflow"),
        "{label}: {}",
        roots[0].name
    );
    let by_id: HashMap<&str, &PSpan> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let agents: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent "))
        .filter_map(|a| s(a, "gen_ai.agent.name"))
        .collect();
    assert_eq!(
        agents,
        BTreeSet::from(["lead", "qa", "stats_fixer", "text_fixer"]),
        "{label}: agent names"
    );
    let mut tools: BTreeMap<&str, usize> = BTreeMap::new();
    for t in spans.iter().filter(|s| s.name.starts_with("execute_tool ")) {
        *tools
            .entry(s(t, "gen_ai.tool.name").expect("tool name"))
            .or_default() += 1;
        let parent = by_id[t.parent_id.as_deref().expect("a tool span has a parent")];
        assert!(
            parent.name.starts_with("invoke_agent "),
            "{label}: tool under {}",
            parent.name
        );
        assert_eq!(s(parent, "gen_ai.agent.name"), s(t, "gen_ai.agent.name"));
        assert!(s(t, "gen_ai.tool.call.id").is_some());
    }
    let names: BTreeSet<&str> = tools.keys().copied().collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "read_workspace_file",
            "run_shell_command",
            "write_workspace_file"
        ]),
        "{label}: tool names"
    );
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    assert!(!chats.is_empty());
    let (mut input, mut output) = (0, 0);
    for c in &chats {
        let parent = by_id[c.parent_id.as_deref().expect("a chat span has a parent")];
        assert!(
            parent.name.starts_with("invoke_agent "),
            "{label}: chat under {}",
            parent.name
        );
        assert_eq!(s(c, "gen_ai.operation.name"), Some("chat"));
        input += n(c, "gen_ai.usage.input_tokens").expect("input tokens");
        output += n(c, "gen_ai.usage.output_tokens").expect("output tokens");
    }
    assert_eq!((input, output), sessions_usage, "{label}: token counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engineering_team_spans_arrive_in_phoenix_live_and_from_the_store() {
    let Some(url) = phoenix_url() else {
        skip("RATH_PHOENIX_URL is not set (.ci/install.d/70-phoenix.sh starts Arize Phoenix)");
        return;
    };
    let client = reqwest::Client::new();
    if !healthy(&client, &url).await {
        skip(&format!("Phoenix at {url} does not answer /healthz"));
        return;
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let project = format!("rath-et-{}-{stamp}", std::process::id());
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(example_binary("engineering_team"))
        .env("OPENRATH_HOME", home.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("openinference.project.name={project}"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RATH_PROVIDER")
        .env_remove("OPENRATH_DETERMINISTIC")
        .current_dir(home.path())
        .output()
        .expect("engineering_team runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("otel: trace "))
        .unwrap_or_else(|| panic!("no otel line in\n{stdout}"));
    // "otel: trace <hex>: N spans exported, 0 dropped"
    let exported: usize = line
        .split(": ")
        .nth(2)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the count in {line:?}"));
    assert!(line.ends_with(" 0 dropped"), "{line}");

    let store = Store::at(home.path().join("sessions"));
    let loaded = load_for_export(&store, None).unwrap();
    let root = loaded
        .iter()
        .find(|l| {
            l.session.lineage().parents.is_empty()
                && l.session.lineage().kind.as_str() == "leaf_user"
        })
        .expect("the run's root session is stored");
    let trace = TraceId::for_root(root.session.id().as_str());
    assert!(line.contains(&trace.to_hex()), "{line}");
    // Every model call's usage, once: the sum over the agents of the final session.
    let last = loaded
        .iter()
        .max_by_key(|l| l.session.usage().map_or(0, |u| u.total_tokens))
        .unwrap();
    let usage = last.session.usage().unwrap();
    let want = (usage.prompt_tokens, usage.completion_tokens);

    let live = read_spans(&client, &url, &project, exported).await;
    assert_eq!(live.len(), exported, "every exported span is in Phoenix");
    check_in_phoenix("live", &live, &trace, want);

    // The same run from its store, into a project of its own.
    let stored = spans_from_sessions(&loaded);
    let store_project = format!("{project}-store");
    let config = OtlpConfig::from_lookup(|k| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(url.clone()),
        "OTEL_RESOURCE_ATTRIBUTES" => Some(format!("openinference.project.name={store_project}")),
        _ => None,
    })
    .unwrap();
    let exporter = OtlpExporter::new(&config).unwrap();
    for sp in &stored {
        exporter.emit(sp.clone());
    }
    let report = exporter.shutdown();
    assert_eq!(report.exported as usize, stored.len(), "{report:?}");
    let from_store = read_spans(&client, &url, &store_project, stored.len()).await;
    assert_eq!(from_store.len(), stored.len());
    let stored_trace = TraceId::for_stored_root(root.session.id().as_str());
    check_in_phoenix("store", &from_store, &stored_trace, want);
    println!(
        "Phoenix {url}: {} live spans in project {project}, {} store spans in {store_project}",
        live.len(),
        from_store.len()
    );
}
