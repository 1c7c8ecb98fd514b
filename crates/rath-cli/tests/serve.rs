//! `rath keys` and `rath serve` as processes: a key minted on the database side opens the
//! API of a server (running the bundled workflows on its embedded worker) that a SIGTERM
//! stops gracefully (exit 0).

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "common/chromium.rs"]
mod chromium;
#[path = "common/phoenix.rs"]
mod phoenix;

#[path = "common/run.rs"]
mod run;
#[path = "common/served.rs"]
mod served;
use run::rath;
use served::{serve, served_at};

/// `method http://{addr}{path}` with `key` as the bearer token when given and `body` as
/// JSON when given: the status and the answer (JSON, else its text as a string).
fn call(
    addr: &str,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new().request(method, format!("http://{addr}{path}"));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    })
}

/// The status of `GET http://{addr}{path}`, with `key` as the bearer token when given.
fn get(addr: &str, path: &str, key: Option<&str>) -> u16 {
    call(addr, reqwest::Method::GET, path, key, None).0
}

/// A GET that must answer 200; its JSON.
fn get_json(addr: &str, path: &str, key: &str) -> Value {
    let (status, v) = call(addr, reqwest::Method::GET, path, Some(key), None);
    assert_eq!(status, 200, "GET {path}: {v}");
    v
}

/// A JSON POST that must answer `want`; its answer.
fn post(addr: &str, path: &str, key: &str, body: Value, want: u16) -> Value {
    let (status, v) = call(addr, reqwest::Method::POST, path, Some(key), Some(body));
    assert_eq!(status, want, "POST {path}: {v}");
    v
}

fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on a child we spawned and have not reaped; no memory effects.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        // A guard against a server that never stops, not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rath serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn keys_mint_list_revoke_and_a_served_api_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());

    let (code, out, err) = rath(&[
        "keys", "create", "--runs", &runs, "--tenant", "acme", "--label", "ci",
    ]);
    assert_eq!(code, 0, "{err}");
    let secret = out.lines().next().unwrap().to_owned();
    assert!(secret.starts_with("rath_"), "{out}");
    let (code, listed, _) = rath(&["keys", "list", "--runs", &runs]);
    assert_eq!(code, 0);
    assert!(listed.contains("tenant=acme") && listed.contains("live"));
    assert!(!listed.contains(&secret), "a listing never shows a secret");
    let id = listed.split_whitespace().next().unwrap().to_owned();
    let (code, _, err) = rath(&["keys", "revoke", "--runs", &runs, "key_nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no key key_nope"), "{err}");

    let mut child = serve(dir.path(), &[]);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);

    assert_eq!(get(&addr, "/health/ready", None), 200);
    assert_eq!(get(&addr, "/v1/sessions", Some(&secret)), 200);
    assert_eq!(get(&addr, "/v1/sessions", None), 401);
    let (code, _, _) = rath(&["keys", "revoke", "--runs", &runs, &id]);
    assert_eq!(code, 0);
    // Revoked by another process: refused once the server's key check expires
    // (rath_server::KEY_CACHE_TTL; the cache's own tests hold it to that time), and from
    // then on. The wait below is a guard of minutes against a revocation never seen.
    let revoked = Instant::now();
    while get(&addr, "/v1/sessions", Some(&secret)) != 401 {
        assert!(
            revoked.elapsed() < rath_server::KEY_CACHE_TTL + Duration::from_secs(120),
            "a key revoked by another process still works long after the key cache's time"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&addr, "/v1/sessions", Some(&secret)), 401);

    // SIGTERM: a graceful shutdown, exit 0.
    let status = stop(&mut child);
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
}

/// With an OTLP endpoint set, `rath serve` exports a SERVER span per request to a real
/// collector (Arize Phoenix): named by method and route template, with the status code,
/// and never an id or a key in a name.
#[test]
fn request_spans_reach_a_real_collector() {
    let Some(url) = phoenix::url() else {
        rath_testkit::skip(
            "RATH_PHOENIX_URL is not set (.ci/install.d/70-phoenix.sh starts Phoenix)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let project = phoenix::project("rath-serve");
    let resource = format!("openinference.project.name={project}");
    let mut child = serve(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", resource.as_str()),
        ],
    );
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);
    assert_eq!(get(&addr, "/health/live", None), 200);
    assert_eq!(
        get(&addr, "/v1/sessions/sess_nope", Some("rath_not_a_key")),
        401
    );
    assert!(stop(&mut child).success());

    let spans = phoenix::phoenix_spans(&url, &project, |s| {
        !phoenix::named(s, "GET /health/live").is_empty()
            && !phoenix::named(s, "GET /v1/sessions/{id}").is_empty()
    });
    let live = phoenix::named(&spans, "GET /health/live");
    assert_eq!(live.len(), 1, "{spans:#?}");
    assert_eq!(phoenix::attr(live[0], "http.response.status_code"), 200);
    assert_eq!(phoenix::attr(live[0], "http.route"), "/health/live");
    let got = phoenix::named(&spans, "GET /v1/sessions/{id}");
    assert_eq!(got.len(), 1, "{spans:#?}");
    assert_eq!(phoenix::attr(got[0], "http.response.status_code"), 401);
    assert_eq!(phoenix::attr(got[0], "http.request.method"), "GET");
    let text = serde_json::to_string(&spans).unwrap();
    assert!(
        !text.contains("sess_nope") && !text.contains("rath_not_a_key"),
        "{text}"
    );
}

/// The live viewer at `/` in real headless Chromium against a running `rath serve`: given a
/// key in the fragment it draws one node per session of the tenant and one edge per parent
/// link, lists the runs with the API's statuses, shows a session's transcript with its
/// evidence on a real click, and follows a run in flight: a gated run approved over the API
/// turns `succeeded` on the page, the reply its model streamed shows in its row as it
/// arrives, and its output joins the graph, without a reload.
#[test]
fn the_live_viewer_in_headless_chromium() {
    let Some(exe) = chromium::chromium() else {
        rath_testkit::skip("no chromium (set RATH_CHROMIUM or apt-get install chromium)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let (code, out, err) = rath(&["keys", "create", "--runs", &runs, "--tenant", "acme"]);
    assert_eq!(code, 0, "{err}");
    let key = out.lines().next().unwrap().to_owned();
    let mut child = serve(dir.path(), &[]);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);

    // What the tenant has: a finished team run, a session and its fork, a run waiting on an
    // approval.
    let team = post(
        &addr,
        "/v1/runs",
        &key,
        json!({"workflow": "team", "input": "a haiku"}),
        201,
    );
    let team_id = team["id"].as_str().unwrap().to_owned();
    let done = post(
        &addr,
        &format!("/v1/runs/{team_id}/wait"),
        &key,
        json!({}),
        200,
    );
    assert_eq!(done["run"]["status"], "succeeded", "{done}");
    let team_out = done["run"]["output_session"].as_str().unwrap().to_owned();
    let root = post(&addr, "/v1/sessions", &key, json!({"input": "hello"}), 201);
    let root_id = root["id"].as_str().unwrap().to_owned();
    post(
        &addr,
        &format!("/v1/sessions/{root_id}/fork"),
        &key,
        json!({}),
        201,
    );
    let gated = post(
        &addr,
        "/v1/runs",
        &key,
        json!({"workflow": "gated", "input": "note it"}),
        201,
    );
    let gated_id = gated["id"].as_str().unwrap().to_owned();
    let start = std::time::Instant::now();
    let waiting = loop {
        let run = get_json(&addr, &format!("/v1/runs/{gated_id}"), &key);
        if run["status"] == "waiting" {
            break run;
        }
        // A guard against a hang, not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the gated run never waited: {run}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(waiting["status"], "waiting");

    let sessions = |addr: &str| -> (BTreeSet<String>, BTreeSet<String>) {
        let page = get_json(addr, "/v1/sessions?limit=200", &key);
        let rows = page["sessions"].as_array().unwrap().clone();
        let ids: BTreeSet<String> = rows
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        let links = rows
            .iter()
            .flat_map(|r| {
                let to = r["id"].as_str().unwrap().to_owned();
                r["parents"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|p| p.as_str())
                    .filter(|p| ids.contains(*p))
                    .map(move |p| format!("{p}->{to}"))
                    .collect::<Vec<_>>()
            })
            .collect();
        (ids, links)
    };
    let (ids, links) = sessions(&addr);
    assert!(ids.len() >= 5 && !links.is_empty(), "{ids:?} {links:?}");

    let profile = dir.path().join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    let (_browser, ws) = chromium::launch(&exe, &profile);
    let mut cdp = chromium::Cdp::connect(&ws);
    let s = cdp.page();
    cdp.call(
        Some(&s),
        "Page.navigate",
        json!({"url": format!("http://{addr}/#key={key}")}),
    );
    cdp.wait_event("Page.loadEventFired");

    let node_ids = "JSON.stringify(Array.from(document.querySelectorAll('svg g.node')).map(n => n.getAttribute('data-session-id')).sort())";
    let want = json!(serde_json::to_string(&ids).unwrap());
    assert_eq!(
        cdp.eval_until(&s, node_ids, &want),
        want,
        "one node per session"
    );
    let edges = cdp.eval(
        &s,
        "Array.from(document.querySelectorAll('svg line.edge')).map(e => e.getAttribute('data-from') + '->' + e.getAttribute('data-to'))",
    );
    let edges: Vec<String> = serde_json::from_value(edges).unwrap();
    assert_eq!(edges.len(), links.len(), "one edge per parent link");
    assert_eq!(edges.into_iter().collect::<BTreeSet<_>>(), links);
    let statuses = "JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll('tr.run')).map(r => [r.getAttribute('data-run-id'), r.querySelector('td.status').textContent]).sort()))";
    let want = json!(json!({&team_id: "succeeded", &gated_id: "waiting"}).to_string());
    assert_eq!(
        cdp.eval_until(&s, statuses, &want),
        want,
        "the runs with their statuses"
    );
    assert_eq!(
        cdp.eval(&s, "location.hash"),
        json!(""),
        "the key left the address bar"
    );

    // A real click on the team run's output: its transcript, evidence included.
    cdp.click(&s, &format!("g.node[data-session-id=\"{team_out}\"]"));
    let shown = "document.querySelector('#transcript').hidden ? null : document.querySelector('#transcript').getAttribute('data-session-id')";
    assert_eq!(cdp.eval_until(&s, shown, &json!(team_out)), json!(team_out));
    let detail = get_json(&addr, &format!("/v1/sessions/{team_out}?limit=200"), &key);
    let total = detail["chunks_total"].as_u64().unwrap();
    assert_eq!(
        cdp.eval(&s, "document.querySelectorAll('#transcript .chunk').length"),
        json!(total.min(200)),
        "one row per chunk"
    );
    let text = cdp.eval(&s, "document.querySelector('#transcript').innerText");
    let text = text.as_str().unwrap();
    for kind in [
        "user",
        "assistant",
        "model_call",
        "tool_result",
        "tool_evidence",
    ] {
        assert!(text.contains(kind), "{kind} is shown: {text}");
    }
    assert!(text.contains("a haiku"), "{text}");

    // Live: the approvals (`gated` records twice), made over the API, reach the page
    // without a reload (the run's event stream, and the listing it polls for new runs).
    let run_status = |addr: &str| {
        let run = get_json(addr, &format!("/v1/runs/{gated_id}"), &key);
        run["status"].as_str().unwrap().to_owned()
    };
    let start = std::time::Instant::now();
    let mut approvals = 0;
    while run_status(&addr) != "succeeded" {
        // A guard against a hang, not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the gated run never finished"
        );
        let pending = get_json(&addr, &format!("/v1/runs/{gated_id}/interrupts"), &key);
        if let Some(call_id) = pending[0]["call_id"].as_str() {
            post(
                &addr,
                &format!("/v1/runs/{gated_id}/interrupts/{call_id}"),
                &key,
                json!({"decision": "approve"}),
                200,
            );
            approvals += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(approvals, 2);
    let row = format!(
        "document.querySelector('tr.run[data-run-id=\"{gated_id}\"] td.status').textContent"
    );
    let got = cdp.eval_until(&s, &row, &json!("succeeded"));
    if got != json!("succeeded") {
        let run = get_json(&addr, &format!("/v1/runs/{gated_id}"), &key);
        let status = cdp.eval(&s, "document.getElementById('status').textContent");
        panic!(
            "the page shows {got} for the approved run; the API: {run}; the page's status line: {status}; errors: {:?}",
            cdp.errors()
        );
    }
    // The reply the run's model streamed after the approvals, shown in the run's row as
    // it arrived (the page follows the run's events, so its model calls were streamed).
    let done = post(
        &addr,
        &format!("/v1/runs/{gated_id}/wait"),
        &key,
        json!({}),
        200,
    );
    let reply = done["output_text"].as_str().unwrap().to_owned();
    assert!(!reply.is_empty(), "{done}");
    let live = format!(
        "document.querySelector('tr.run[data-run-id=\"{gated_id}\"] td.live').textContent.endsWith({})",
        json!(reply)
    );
    assert_eq!(
        cdp.eval_until(&s, &live, &json!(true)),
        json!(true),
        "the streamed reply in the run's row: {}",
        cdp.eval(
            &s,
            &format!(
                "document.querySelector('tr.run[data-run-id=\"{gated_id}\"] td.live').textContent"
            )
        )
    );
    let (after, _) = sessions(&addr);
    assert!(after.len() > ids.len(), "the approved run made sessions");
    let want = json!(serde_json::to_string(&after).unwrap());
    assert_eq!(
        cdp.eval_until(&s, node_ids, &want),
        want,
        "its output joined the graph"
    );

    cdp.settle();
    let errors = cdp.errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    assert!(stop(&mut child).success());
}
