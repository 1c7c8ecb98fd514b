//! The server against schemathesis (PyPI), the OpenAPI fuzzer: every operation of
//! `/openapi.json`, with examples, coverage and generated input, as a tenant and as an
//! admin. No answer may be a server error, and every answer must match the document:
//! its status, content type and body schema.

mod common;

use std::process::Stdio;

use common::{Harness, config};
use reqwest::StatusCode;
use serde_json::json;

/// Runs schemathesis against `base` with `key`; returns its exit status and output.
async fn fuzz(bin: &str, base: &str, key: &str, seed: u32) -> (bool, String) {
    // schemathesis and hypothesis keep caches in the working directory: a scratch one, so
    // nothing is left in the checkout.
    let scratch = tempfile::tempdir().expect("scratch dir");
    let out = tokio::process::Command::new(bin)
        .current_dir(scratch.path())
        .arg("run")
        .arg(format!("{base}/openapi.json"))
        .args(["--url", base])
        .args(["--header", &format!("Authorization: Bearer {key}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", "40"])
        .args(["--seed", &seed.to_string()])
        // One worker: with two, hypothesis (under schemathesis) parses lambda sources from two
        // threads at once and CPython 3.11 fails with "AST constructor recursion depth
        // mismatch", an error in the fuzzer, not in the server.
        .args(["--workers", "1"])
        .args(["--request-timeout", "30"])
        .arg("--no-color")
        .env("SCHEMATHESIS_HOOKS", "")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("schemathesis starts");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_schema_violation() {
    let Ok(bin) = std::env::var("RATH_SCHEMATHESIS") else {
        rath_testkit::skip("RATH_SCHEMATHESIS is not set (see .ci/install.d/68-schemathesis.sh)");
        return;
    };
    let h = Harness::sqlite(config()).await;
    // Something to find: a session, a finished run and a waiting one.
    let (s, _) = h.post("/v1/sessions", &h.a, json!({"input": "hi"})).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, run) = h
        .post("/v1/runs", &h.a, json!({"workflow": "echo", "input": "x"}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let (s, _) = h
        .post("/v1/runs", &h.a, json!({"workflow": "gated", "input": "y"}))
        .await;
    assert_eq!(s, StatusCode::CREATED);

    let mut failures = Vec::new();
    for (who, key, seed) in [("tenant", h.a.clone(), 1), ("admin", h.admin.clone(), 2)] {
        let (ok, text) = fuzz(&bin, &h.base, &key, seed).await;
        println!("--- schemathesis as {who}:\n{text}");
        if !ok {
            failures.push(who);
        }
    }
    // The server is still up and answers.
    let (s, _) = h.get("/health/live", &h.a).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        failures.is_empty(),
        "schemathesis failed as {failures:?} (its report is printed above)"
    );
    h.stop().await;
}
