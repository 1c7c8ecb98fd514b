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
        about: "Runs `cargo test --workspace --no-fail-fast` and counts passed, skipped, failed \
                and ignored tests per crate and per test binary (unit, integration, doc), \
                without timings. A test that skipped for a missing prerequisite (its \
                `RATH-SKIP:` line) counts as skipped, not passed.",
        env: &["RATH_CI", "RATH_EVIDENCE_TESTS_RAN"],
        build: build_test_report,
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) binaries: u64,
    /// Tests that passed and did not skip.
    pub(super) passed: u64,
    /// Tests that returned early for a missing prerequisite (libtest counts them as passed;
    /// here they are taken out of `passed`).
    pub(super) skipped: u64,
    pub(super) failed: u64,
    pub(super) ignored: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.binaries += other.binaries;
        self.passed += other.passed;
        self.skipped += other.skipped;
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

/// What a skipping test prints, once, on a line of its own (the `skip` helper in each test
/// crate's `tests/common`, docs/TESTING.md): `RATH-SKIP: <test>: <reason>`.
pub(super) const SKIP_MARKER: &str = "RATH-SKIP: ";

/// The test and reason of a skip marker. The marker may follow other text on the line (a
/// single-threaded run prints `test name ... ` before the test writes to stderr).
pub(super) fn parse_skip(line: &str) -> Option<(&str, &str)> {
    let at = line.find(SKIP_MARKER)?;
    let rest = &line[at + SKIP_MARKER.len()..];
    let (test, reason) = rest.split_once(": ")?;
    let test = test.trim();
    (!test.is_empty()).then_some((test, reason.trim()))
}

/// The counts read from the output of `cargo test`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Suite {
    /// Counts by `<package> <binary>` (`<package> doc-tests` for doc tests).
    pub(super) per_binary: BTreeMap<String, Counts>,
    /// `test <name> ... FAILED` lines.
    pub(super) failures: Vec<String>,
    /// `<package> <binary>: <test>: <reason>`, one per skipped test.
    pub(super) skipped: Vec<String>,
}

/// Reads `cargo test` output (stdout and stderr interleaved). `key` names a test binary from
/// its `Running` line: `(what, executable file name)` to `<package> <what>`.
pub(super) fn parse_suite(text: &str, key: &dyn Fn(&str, &str) -> String) -> Suite {
    let mut suite = Suite::default();
    let mut current: Option<String> = None;
    // Tests of the running binary that printed a skip marker (a test that skips two parts
    // counts once).
    let mut skips: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some((test, reason)) = parse_skip(line) {
            skips
                .entry(test.to_owned())
                .or_insert_with(|| reason.to_owned());
            continue;
        }
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
            current = Some(key(what, &file));
            skips.clear();
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            let pkg = krate.replace('_', "-");
            current = Some(format!("{pkg} doc-tests"));
            skips.clear();
        } else if let Some(mut c) = parse_result(t) {
            let key = current.take().unwrap_or_else(|| "unknown".into());
            let skipped = (skips.len() as u64).min(c.passed);
            c.skipped = skipped;
            c.passed -= skipped;
            for (test, reason) in std::mem::take(&mut skips) {
                suite.skipped.push(format!("{key}: {test}: {reason}"));
            }
            suite.per_binary.entry(key).or_default().add(&c);
        } else if t.starts_with("test ") && t.ends_with("FAILED") {
            suite.failures.push(t.to_string());
        }
    }
    suite.failures.sort();
    suite
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
            "tests that ran only part of their checks without printing a skip marker (every \
             prerequisite check in the test crates goes through the one `skip` helper)",
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
    let key = |what: &str, file: &str| {
        let pkg = exes
            .get(file)
            .cloned()
            .or_else(|| by_source(what))
            .unwrap_or_else(|| "unknown".into());
        format!("{pkg} {what}")
    };
    let Suite {
        per_binary,
        failures,
        skipped,
    } = parse_suite(&text, &key);
    let mut per_crate: BTreeMap<String, Counts> = BTreeMap::new();
    for (k, c) in &per_binary {
        let pkg = k.split(' ').next().unwrap_or("unknown").to_string();
        per_crate.entry(pkg).or_default().add(c);
    }
    let mut total = Counts::default();
    for c in per_crate.values() {
        total.add(c);
    }
    ctx.write_json(
        "test_counts.json",
        &serde_json::json!({
            "command": "cargo test --workspace --no-fail-fast",
            "total": total,
            "per_crate": per_crate,
            "per_binary": per_binary,
            "failed_tests": failures,
            "skipped_tests": skipped,
        }),
    )?;
    let mut md = String::from(
        "| crate | binaries | passed | skipped | failed | ignored |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for (k, c) in &per_crate {
        md.push_str(&format!(
            "| {k} | {} | {} | {} | {} | {} |\n",
            c.binaries, c.passed, c.skipped, c.failed, c.ignored
        ));
    }
    md.push_str(&format!(
        "| **total** | {} | {} | {} | {} | {} |\n",
        total.binaries, total.passed, total.skipped, total.failed, total.ignored
    ));
    for line in &skipped {
        md.push_str(&format!("\nskipped: {line}"));
    }
    if !skipped.is_empty() {
        md.push('\n');
    }
    ctx.write("test_counts.md", md)?;
    r.check(
        "cargo test exited 0",
        out.status.success(),
        out.status.to_string(),
    );
    r.check_eq("no failed test", total.failed, 0);
    r.check_eq("no ignored test", total.ignored, 0);
    r.check(
        "no test skipped for a missing prerequisite",
        total.skipped == 0,
        skipped.join("; "),
    );
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
                skipped: 0,
                failed: 0,
                ignored: 2
            })
        );
        let f = parse_result("test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured");
        assert_eq!(f.map(|c| (c.passed, c.failed)), Some((1, 2)));
        assert_eq!(parse_result("running 3 tests"), None);
    }

    #[test]
    fn parses_skip_markers() {
        assert_eq!(
            parse_skip("RATH-SKIP: isolated_conforms: isolated conformance: no bwrap"),
            Some(("isolated_conforms", "isolated conformance: no bwrap"))
        );
        // After libtest's `test name ... ` when one thread runs the tests.
        assert_eq!(
            parse_skip("test a::b ... RATH-SKIP: a::b: python3 is not installed"),
            Some(("a::b", "python3 is not installed"))
        );
        assert_eq!(parse_skip("skipping: python3 is not installed"), None);
        assert_eq!(parse_skip("RATH-SKIP: no reason"), None);
    }

    #[test]
    fn skipped_tests_are_counted_apart_from_passed_ones() {
        let out = "\
     Running tests/conformance.rs (target/debug/deps/conformance-0123)
running 2 tests
RATH-SKIP: isolated_conforms: isolated conformance: the isolated backend needs bubblewrap: `bwrap` is not installed
test local_conforms ... ok
test isolated_conforms ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s

     Running tests/escape.rs (target/debug/deps/escape-4567)
running 3 tests
test one ... RATH-SKIP: one: isolated: no bwrap
ok
RATH-SKIP: two: isolated half: no bwrap
RATH-SKIP: two: isolated half: no bwrap
test two ... ok
test three ... FAILED

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s

   Doc-tests rath_backend
running 1 test
test src/lib.rs - (line 3) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
";
        let key = |what: &str, file: &str| {
            assert!(file.contains('-'), "{file}");
            format!("rath-backend {what}")
        };
        let suite = parse_suite(out, &key);
        let get = |k: &str| suite.per_binary.get(k).cloned().unwrap_or_default();
        let conf = get("rath-backend tests/conformance.rs");
        assert_eq!((conf.passed, conf.skipped, conf.failed), (1, 1, 0));
        let esc = get("rath-backend tests/escape.rs");
        assert_eq!((esc.passed, esc.skipped, esc.failed), (0, 2, 1));
        let doc = get("rath-backend doc-tests");
        assert_eq!((doc.passed, doc.skipped), (1, 0));
        assert_eq!(suite.failures, vec!["test three ... FAILED".to_owned()]);
        assert_eq!(
            suite.skipped,
            vec![
                "rath-backend tests/conformance.rs: isolated_conforms: isolated conformance: \
                 the isolated backend needs bubblewrap: `bwrap` is not installed"
                    .to_owned(),
                "rath-backend tests/escape.rs: one: isolated: no bwrap".to_owned(),
                "rath-backend tests/escape.rs: two: isolated half: no bwrap".to_owned(),
            ]
        );
    }
}
