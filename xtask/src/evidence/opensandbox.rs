//! `opensandbox_optional`: the OpenSandbox client contract against the spec mock.

use std::process::Command;

use anyhow::{Context as _, Result};
use serde_json::json;

use super::testreport::{Counts, parse_result};
use super::{Ctx, Packet, Report};

/// The `opensandbox_optional` packet.
pub fn opensandbox_optional() -> Packet {
    Packet {
        name: "opensandbox_optional",
        about: "Runs rath-backend-opensandbox's contract tests (the backend conformance suite \
                and lifecycle checks) against the in-repo mock of the OpenSandbox lifecycle and \
                execd specs; a real server is not exercised unless OPEN_SANDBOX_DOMAIN is set.",
        env: &["OPEN_SANDBOX_DOMAIN", "OPEN_SANDBOX_API_KEY"],
        build: build_opensandbox,
    }
}

fn build_opensandbox(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the OpenSandbox backend's client passes the backend conformance suite and its \
             lifecycle tests (create, attach, renew, close, last-drop delete, auth errors) \
             against a mock built from the published OpenSandbox specs",
        ],
        &[
            "behaviour of a real OpenSandbox server: not exercised here (see real_server.json)",
            "spec drift: the mock follows the spec files in ../shared/opensandbox",
        ],
    );
    let root = crate::workspace_root();
    let out = Command::new("bash")
        .args([
            "-c",
            "cargo test -p rath-backend-opensandbox --no-fail-fast -- --test-threads=1 2>&1",
        ])
        .current_dir(&root)
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("OPEN_SANDBOX_DOMAIN")
        .output()
        .context("cargo test -p rath-backend-opensandbox")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = Counts::default();
    let mut tests: Vec<String> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(c) = parse_result(t) {
            total.binaries += c.binaries;
            total.passed += c.passed;
            total.failed += c.failed;
            total.ignored += c.ignored;
        } else if let Some(rest) = t.strip_prefix("test ")
            && (rest.ends_with(" ... ok") || rest.ends_with(" ... FAILED"))
        {
            tests.push(rest.to_string());
        }
    }
    tests.sort();
    ctx.write_json(
        "mock_contract.json",
        &json!({"command": "cargo test -p rath-backend-opensandbox --no-fail-fast",
                "counts": {"binaries": total.binaries, "passed": total.passed,
                           "failed": total.failed, "ignored": total.ignored},
                "tests": tests}),
    )?;
    r.check(
        "cargo test exited 0",
        out.status.success(),
        out.status.to_string(),
    );
    r.check(
        "contract tests ran",
        total.passed > 0,
        format!("{} passed", total.passed),
    );
    r.check_eq("no failed contract test", total.failed, 0);
    let real = match std::env::var("OPEN_SANDBOX_DOMAIN") {
        Ok(d) if !d.trim().is_empty() => json!({"status": "skip",
            "reason": "OPEN_SANDBOX_DOMAIN is set, but this packet runs only the mock contract; \
                       run rath-backend-opensandbox's tests against the server directly"}),
        _ => json!({"status": "skip", "reason": "OPEN_SANDBOX_DOMAIN is not set: no real server"}),
    };
    r.note(format!(
        "real server: {}",
        real["reason"].as_str().unwrap_or_default()
    ));
    ctx.write_json("real_server.json", &real)?;
    Ok(r)
}
