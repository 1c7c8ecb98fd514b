//! A thread's history costs memory in proportion to what it returns (issue 47, item 1): after
//! one run whose input was 250,000 empty messages, `history` with `limit: 1` used to build
//! every step's whole message list first (+1.7 GB for one call). Alone in its binary, so the
//! process's peak RSS is this test's.

mod common;

use std::time::Duration;

use common::{Harness, config};
use rath_server::ServerConfig;
use serde_json::{Value, json};

const MESSAGES: usize = 250_000;

/// `VmRSS` and `VmHWM` (peak) of this process, in MiB.
fn rss_and_peak() -> Option<(f64, f64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Resets the peak (`VmHWM`) to the current RSS.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_with_limit_one_costs_what_it_returns() {
    if rss_and_peak().is_none() || !reset_peak() {
        rath_testkit::skip("history memory: needs Linux /proc/self/status and clear_refs");
        return;
    }
    let h = Harness::sqlite(ServerConfig {
        body_limit: 4 << 20,
        ..config()
    })
    .await;
    let key = h.a.clone();
    let post = |path: String, body: Value| {
        h.http
            .post(format!("{}{path}", h.base))
            .header("x-api-key", &key)
            .json(&body)
            .send()
    };
    let thread: Value = post("/threads".into(), json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let input = vec![""; MESSAGES];
    let r = post(
        format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "echo", "input": {"messages": input}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();

    // Settle, then measure one history call from the current RSS.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reset_peak());
    let (before, _) = rss_and_peak().unwrap();
    let r = post(format!("/threads/{tid}/history"), json!({"limit": 1}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.unwrap();
    let (_, peak) = rss_and_peak().unwrap();
    let states: Value = serde_json::from_slice(&body).unwrap();
    let states = states.as_array().unwrap();
    assert_eq!(states.len(), 1);
    let messages = states[0]["values"]["messages"].as_array().unwrap().len();
    assert_eq!(messages, MESSAGES + 1, "the input and the answer");
    let grew = peak - before;
    println!(
        "history limit 1 over {MESSAGES} messages: answer {:.1} MiB, peak {grew:.1} MiB above \
         the RSS before the call",
        body.len() as f64 / 1048576.0
    );
    // Built whole, every step's message list made this call take 1.7 GB (quadratic in the
    // thread's length); now the states are built only for what is returned. The issue's
    // bound, 50 MB above the idle server, needs the answer (31 MiB of JSON here) streamed
    // rather than built, and the run's sessions not held whole: not done yet, so this
    // asserts the linear cost, with room, and fails for the quadratic one.
    assert!(grew < 1024.0, "history with limit 1 took {grew:.0} MiB");
    drop(body);
    h.stop().await;
}
