//! Shared by the CLI tests: a runner for `rath`, and generators of stores to run it on.
#![allow(dead_code)] // each test binary uses its own part

pub mod big;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `rath` in `cwd` (with no `OPENRATH_HOME`) and returns `exit / stdout / stderr` as one
/// text, for snapshots.
pub fn rath(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .current_dir(cwd)
        .env_remove("OPENRATH_HOME")
        .output()
        .expect("run rath");
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `openrath` example `name`, built (`cargo build -p openrath --example name`, a no-op when
/// it is fresh) into this test binary's target directory: `target/<profile>/examples/<name>`.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "openrath", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd.status().expect("cargo build");
    assert!(status.success(), "cargo build --example {name}: {status}");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// Runs the `openrath` example `name` with `args` in `cwd`, offline (no `OPENAI_BASE_URL`),
/// with `OPENRATH_HOME=<cwd>/home`; panics with its output when it fails.
pub fn run_example(name: &str, cwd: &Path, args: &[&str]) {
    let out = Command::new(example_binary(name))
        .args(args)
        .current_dir(cwd)
        .env_remove("OPENAI_BASE_URL")
        .env("OPENRATH_HOME", cwd.join("home"))
        .env_remove("OPENRATH_DETERMINISTIC")
        .output()
        .expect("run example");
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes a closed session file by hand (so the header id and the file name can disagree):
/// `<dir>/<file>` with header id `id`, `parents`, and one user chunk per text.
pub fn write_raw_session(dir: &Path, file: &str, id: &str, parents: &[&str], texts: &[&str]) {
    let q = |s: &str| serde_json::to_string(s).expect("json string");
    let parents: Vec<String> = parents.iter().map(|p| q(p)).collect();
    let mut out = format!(
        "{{\"record_type\": \"header\", \"schema_version\": 1, \"id\": {}, \"created_at\": \"2026-01-01T00:00:0{}+00:00\", \"parent_session_ids\": [{}], \"lineage_operator\": \"hand\", \"lineage_kind\": \"{}\", \"lineage_extras\": [], \"sandbox_backend\": null, \"sandbox_spec\": null, \"sandbox_handle_id\": null}}\n",
        q(id),
        parents.len(),
        parents.join(", "),
        if parents.is_empty() {
            "leaf_user"
        } else {
            "op_fork"
        }
    );
    for (i, t) in texts.iter().enumerate() {
        out.push_str(&format!(
            "{{\"record_type\": \"chunk\", \"index\": {i}, \"kind\": \"user\", \"payload\": {{\"content\": {}}}}}\n",
            q(t)
        ));
    }
    out.push_str(&format!(
        "{{\"record_type\": \"trailer\", \"closed_at\": \"2026-01-01T00:01:00+00:00\", \"final_chunk_count\": {}, \"cumulative_usage\": null}}\n",
        texts.len()
    ));
    std::fs::write(dir.join(file), out).expect("write session");
}
