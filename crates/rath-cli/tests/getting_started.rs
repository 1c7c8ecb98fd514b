//! `docs/getting-started.md` runs as written (issue 50, item 5): its shell blocks in order in
//! one bash script, its Rust block as the new program's `src/main.rs`, its Python block with
//! LangGraph's SDK. What the test changes, and only that: `rath` is the one this workspace
//! built (on `PATH`, in place of the install block), the model server is a mock (its URL in
//! place of the page's), the build is offline and shares this workspace's target directory.

use std::path::Path;
use std::process::Command;

use rath_provider::mock::{MockReply, MockServer};

/// The page's fenced blocks, in order: (info string, body).
fn blocks(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        out.push((info.trim().to_owned(), body));
    }
    out
}

const ANSWER: &str = "Mont Blanc is 4,806 metres tall.";

#[test]
fn the_getting_started_page_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/getting-started.md")).unwrap();
    let sdk = std::env::var("RATH_LANGGRAPH_SDK_PYTHON")
        .ok()
        .filter(|p| Path::new(p).is_file());
    let curl = Command::new("curl").arg("--version").output();
    if !curl.is_ok_and(|o| o.status.success()) {
        rath_testkit::skip("curl is not installed (see .ci/install.d/71-curl.sh)");
        return;
    }
    if sdk.is_none() {
        rath_testkit::skip(
            "RATH_LANGGRAPH_SDK_PYTHON is not a Python with langgraph-sdk \
             (see .ci/install.d/67-langgraph-sdk.sh)",
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let model = rt.block_on(MockServer::start()).unwrap();
    model.set_fallback(Some(MockReply::text(ANSWER)));

    // Servers and workers the page starts in the background stop with the script.
    let mut script =
        String::from("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    let mut ran = Vec::new();
    for (info, body) in blocks(&page) {
        match info.as_str() {
            // `rath` is already built: this workspace's, on PATH.
            "sh install" => ran.push("install (skipped: rath is on PATH)".to_owned()),
            "sh" => {
                script.push_str(&body.replace("http://127.0.0.1:8099/v1", &model.base_url()));
                ran.push("sh".into());
            }
            "rust" => {
                script.push_str(&format!("cat > src/main.rs <<'RUST_EOF'\n{body}RUST_EOF\n"));
                ran.push("rust".into());
            }
            "python" => {
                let python = sdk.as_deref().unwrap_or("python3");
                script.push_str(&format!("{python} - <<'PY_EOF'\n{body}PY_EOF\n"));
                ran.push("python".into());
            }
            "toml" | "text" | "" => {}
            other => panic!("a block the test does not know how to run: {other:?}"),
        }
    }
    // The program's main.rs is written before its first `cargo run`: the Rust block comes
    // after the block that made the project and before the one that runs it.
    assert_eq!(
        ran,
        [
            "install (skipped: rath is on PATH)",
            "sh",
            "rust",
            "sh",
            "sh",
            "sh",
            "python",
            "sh"
        ],
        "the page's blocks changed: update this test with them"
    );

    let dir = tempfile::tempdir().unwrap();
    let rath = Path::new(env!("CARGO_BIN_EXE_rath"));
    let path = format!(
        "{}:{}",
        rath.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The workspace's target directory (target/<profile>/deps/<test> is this binary), so
    // the new program reuses the dependencies the workspace compiled.
    let exe = std::env::current_exe().unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| exe.ancestors().nth(3).unwrap().to_path_buf());
    // A guard against a page whose server never comes up (its `until` loops would wait
    // forever), not a measurement.
    let mut cmd = Command::new("timeout");
    cmd.args(["900", "bash", "-c"])
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("OPENRATH", root.canonicalize().unwrap())
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_NET_OFFLINE", "true")
        .env_remove("OPENRATH_HOME")
        .env_remove("OPENRATH_STORE")
        .env_remove("RATH_RUNS");
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("ANTHROPIC_") || k == "RATH_PROVIDER" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}\n---\n{stdout}");
    // Step 2 on the scripted model (no model in the environment yet), step 3 shows its
    // tool call, step 4 the team's answer, step 5 the server's (curl, then the SDK's wait
    // and stream), step 6 the resumed run.
    assert!(stdout.contains("There are 3 words."), "{stdout}");
    assert!(stdout.contains("word_count"), "{stdout}");
    assert!(stdout.matches(ANSWER).count() >= 4, "{stdout}");
    // The SDK's stream: the reply in pieces, then the steps of the team's agents.
    assert!(stdout.contains(" done]"), "{stdout}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    let home = dir.path().join("my_agent/.openrath/sessions");
    assert!(home.is_dir(), "the sessions went to ./.openrath/sessions");
    assert!(dir.path().join("my_agent/view.html").is_file());
}
