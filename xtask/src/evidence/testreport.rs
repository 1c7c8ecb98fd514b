//! `test_report`: the workspace test suite, counted per crate (no timings).

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::Value;

use super::{Ctx, Packet, Report};

/// The `test_report` packet.
pub fn test_report() -> Packet {
    Packet {
        name: "test_report",
        about: "Runs `cargo test --workspace --no-fail-fast` and counts passed, failed and \
                ignored tests per crate and per test binary (unit, integration, doc), without \
                timings.",
        env: &["RATH_CI", "RATH_EVIDENCE_TESTS_RAN"],
        build: build_test_report,
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) binaries: u64,
    pub(super) passed: u64,
    pub(super) failed: u64,
    pub(super) ignored: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.binaries += other.binaries;
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`
pub(super) fn parse_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut c = Counts {
        binaries: 1,
        ..Counts::default()
    };
    for part in rest.split(';') {
        let words: Vec<&str> = part.split_whitespace().collect();
        let n = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        // "ok. 3 passed" or "FAILED. 3 passed" puts the number second.
        let (num, what) = if words.len() >= 3 && words[0].ends_with('.') {
            (n(1), words.get(2).copied())
        } else {
            (n(0), words.get(1).copied())
        };
        match (num, what) {
            (Some(v), Some("passed")) => c.passed = v,
            (Some(v), Some("failed")) => c.failed = v,
            (Some(v), Some("ignored")) => c.ignored = v,
            _ => {}
        }
    }
    Some(c)
}

/// Package names by manifest directory, from `cargo metadata --no-deps`.
fn packages(root: &std::path::Path) -> Result<Vec<(std::path::PathBuf, String)>> {
    let out = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("cargo metadata")?;
    let v: Value = serde_json::from_slice(&out.stdout)?;
    let mut pkgs = Vec::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        let manifest = std::path::PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
        if let Some(dir) = manifest.parent() {
            pkgs.push((dir.to_path_buf(), name));
        }
    }
    Ok(pkgs)
}

/// Test executables (file names) to package, from a `--no-run` JSON build.
fn executables(root: &std::path::Path) -> Result<BTreeMap<String, String>> {
    let pkgs = packages(root)?;
    let out = Command::new("cargo")
        .args(["test", "--workspace", "--no-run", "--message-format=json"])
        .current_dir(root)
        .output()
        .context("cargo test --no-run")?;
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(exe), Some(manifest)) = (v["executable"].as_str(), v["manifest_path"].as_str())
        else {
            continue;
        };
        let dir = std::path::Path::new(manifest)
            .parent()
            .map(|d| d.to_path_buf());
        if let Some(name) = pkgs
            .iter()
            .find(|(d, _)| Some(d) == dir.as_ref())
            .map(|(_, n)| n.clone())
        {
            let file = std::path::Path::new(exe)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            map.insert(file, name);
        }
    }
    Ok(map)
}

fn build_test_report(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the workspace's unit, integration and doc tests pass at this commit, with the \
             counts per crate recorded (implementation contracts hold as tested)",
        ],
        &[
            "that the tests are sufficient; read them",
            "timings (never recorded, so the packet reproduces)",
            "tests that skip for a missing prerequisite (bwrap, a live model, Chromium) count \
             as passed: they print their reason in the test output, not here",
        ],
    );
    let root = crate::workspace_root();
    let exes = executables(&root)?;
    let pkgs = packages(&root)?;
    // A binary built after the `--no-run` pass (a test added meanwhile) is mapped by the one
    // package whose directory holds its source file.
    let by_source = |what: &str| -> Option<String> {
        let file = what.split_whitespace().last()?;
        let hits: Vec<&String> = pkgs
            .iter()
            .filter(|(d, _)| d.join(file).is_file())
            .map(|(_, n)| n)
            .collect();
        (hits.len() == 1).then(|| hits[0].clone())
    };
    let out = Command::new("bash")
        .args(["-c", "cargo test --workspace --no-fail-fast 2>&1"])
        .current_dir(&root)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .context("cargo test --workspace")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut per_binary: BTreeMap<String, Counts> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut failures = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            // "Running tests/x.rs (target/debug/deps/x-hash)" or "Running unittests src/lib.rs (...)"
            let (what, exe) = match (rest.rfind('('), rest.rfind(')')) {
                (Some(a), Some(b)) if b > a => (rest[..a].trim(), &rest[a + 1..b]),
                _ => (rest, ""),
            };
            let file = std::path::Path::new(exe)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let pkg = exes
                .get(&file)
                .cloned()
                .or_else(|| by_source(what))
                .unwrap_or_else(|| "unknown".into());
            current = Some(format!("{pkg} {what}"));
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            let pkg = krate.replace('_', "-");
            current = Some(format!("{pkg} doc-tests"));
        } else if let Some(c) = parse_result(t) {
            let key = current.take().unwrap_or_else(|| "unknown".into());
            per_binary.entry(key).or_default().add(&c);
        } else if t.starts_with("test ") && t.ends_with("FAILED") {
            failures.push(t.to_string());
        }
    }
    let mut per_crate: BTreeMap<String, Counts> = BTreeMap::new();
    for (k, c) in &per_binary {
        let pkg = k.split(' ').next().unwrap_or("unknown").to_string();
        per_crate.entry(pkg).or_default().add(c);
    }
    let mut total = Counts::default();
    for c in per_crate.values() {
        total.add(c);
    }
    failures.sort();
    ctx.write_json(
        "test_counts.json",
        &serde_json::json!({
            "command": "cargo test --workspace --no-fail-fast",
            "total": total,
            "per_crate": per_crate,
            "per_binary": per_binary,
            "failed_tests": failures,
        }),
    )?;
    let mut md = String::from(
        "| crate | binaries | passed | failed | ignored |\n| --- | --- | --- | --- | --- |\n",
    );
    for (k, c) in &per_crate {
        md.push_str(&format!(
            "| {k} | {} | {} | {} | {} |\n",
            c.binaries, c.passed, c.failed, c.ignored
        ));
    }
    md.push_str(&format!(
        "| **total** | {} | {} | {} | {} |\n",
        total.binaries, total.passed, total.failed, total.ignored
    ));
    ctx.write("test_counts.md", md)?;
    r.check(
        "cargo test exited 0",
        out.status.success(),
        out.status.to_string(),
    );
    r.check_eq("no failed test", total.failed, 0);
    r.check_eq("no ignored test", total.ignored, 0);
    r.check(
        "tests ran",
        total.passed > 0,
        format!("{} passed", total.passed),
    );
    r.check_eq(
        "every test binary mapped to a crate",
        per_crate.contains_key("unknown"),
        false,
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libtest_summaries() {
        let c = parse_result(
            "test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 3 filtered out; finished in 0.51s",
        );
        assert_eq!(
            c,
            Some(Counts {
                binaries: 1,
                passed: 12,
                failed: 0,
                ignored: 2
            })
        );
        let f = parse_result("test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured");
        assert_eq!(f.map(|c| (c.passed, c.failed)), Some((1, 2)));
        assert_eq!(parse_result("running 3 tests"), None);
    }
}
