//! Test helpers shared by openrath's integration tests (a dev-dependency only; never
//! published): a missing prerequisite skips the test locally and fails it in CI.
//!
//! ```
//! /// A test that needs Python OpenRath 2.0 checks for it first.
//! fn python_loads_the_store() {
//!     let Some(python) = std::env::var_os("RATH_OPENRATH_PYTHON") else {
//!         // Locally: prints `RATH-SKIP: <test>: ...` and returns; under RATH_CI=1: fails.
//!         rath_testkit::skip(
//!             "RATH_OPENRATH_PYTHON is not set to a Python with openrath==2.0.0 \
//!              (see .ci/install.d/30-persist-python.sh)",
//!         );
//!         return;
//!     };
//!     // ... run `python` on the store ...
//! #   drop(python);
//! }
//! # let _ = python_loads_the_store;
//! ```
//!
//! The rule these helpers keep (docs/TESTING.md): a skipped test is not a pass. Locally,
//! [`skip`] prints one marker line that the `test_report` evidence packet counts as skipped;
//! under `RATH_CI=1` it panics, so a broken install step turns CI red.

#![warn(missing_docs)]

/// True under CI (`RATH_CI` set and not empty or `0`; `.ci/run` sets `RATH_CI=1`), where a
/// missing prerequisite fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("RATH_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test's prerequisite `what` is missing (name it and say how to get it). Under
/// `RATH_CI=1` this panics, failing the calling test; locally it prints the one marker line
/// `RATH-SKIP: <test>: <what>` and returns, and the caller returns early. The line goes
/// straight to stderr, past the harness's output capture, so `cargo test` shows what was
/// skipped and the `test_report` packet counts it as skipped, not passed (docs/TESTING.md).
/// Whitespace runs in `what` (a wrapped string literal) collapse to one space.
pub fn skip(what: &str) {
    let test = test_name();
    let what = collapse(what);
    assert!(
        !in_ci(),
        "{test}: RATH_CI=1 and a prerequisite is missing: {what}"
    );
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "RATH-SKIP: {test}: {what}");
}

/// The databases among `names` that test processes which have ended left behind: named
/// `<prefix>..._<pid>` (the pid of the test process that made it) for a pid with no
/// running process. A test that makes a database per process drops these before making its
/// own, so a machine's database server does not collect one per test run (each one more
/// database for autovacuum to visit). Where running processes cannot be listed (no
/// `/proc`), none is called stale.
///
/// ```
/// let mine = format!("rt_chaos_{}", std::process::id());
/// let names = [mine.as_str(), "rt_chaos_4294967295", "rt_chaos_x", "other_12"];
/// // Only the one whose process cannot be running (its pid is out of range).
/// let stale = rath_testkit::stale_databases(names, "rt_");
/// if std::path::Path::new("/proc/self").exists() {
///     assert_eq!(stale, ["rt_chaos_4294967295"]);
/// }
/// ```
pub fn stale_databases<'a>(names: impl IntoIterator<Item = &'a str>, prefix: &str) -> Vec<String> {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return Vec::new();
    }
    names
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .filter(|n| {
            n.rsplit_once('_')
                .and_then(|(_, pid)| pid.parse::<u32>().ok())
                .is_some_and(|pid| !proc.join(pid.to_string()).exists())
        })
        .map(str::to_owned)
        .collect()
}

/// A fresh, empty PostgreSQL database for this test process on the server at
/// `RATH_TEST_POSTGRES_URL`: `<name>_<pid>` (dropped and made again if it exists), after
/// dropping the databases starting with `prefix` that ended test processes left behind
/// ([`stale_databases`]). Its URL, or `None` when the variable is unset ([`skip`]ped:
/// fails under `RATH_CI=1`). Panics when the server cannot be reached or refuses: a test
/// that asked for PostgreSQL and cannot have it fails.
#[cfg(feature = "postgres")]
pub async fn fresh_postgres_database(prefix: &str, name: &str) -> Option<String> {
    let Ok(base) = std::env::var("RATH_TEST_POSTGRES_URL") else {
        skip("RATH_TEST_POSTGRES_URL is not set (see .ci/install.d/60-postgres.sh)");
        return None;
    };
    let db = format!("{name}_{}", std::process::id());
    let admin = sqlx::PgPool::connect(&base)
        .await
        .expect("PostgreSQL at RATH_TEST_POSTGRES_URL");
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database")
        .fetch_all(&admin)
        .await
        .expect("list the databases");
    for stale in stale_databases(names.iter().map(String::as_str), prefix) {
        // Best effort: another test process may be dropping it too.
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {stale}"))
            .execute(&admin)
            .await;
    }
    for sql in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        sqlx::query(&sql)
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    admin.close().await;
    let cut = base
        .rfind('/')
        .expect("RATH_TEST_POSTGRES_URL names a database");
    Some(format!("{}/{db}", &base[..cut]))
}

/// The calling test's name: libtest names each test's thread after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned()
}

/// `what` with each run of whitespace (a wrapped string literal) made one space.
fn collapse(what: &str) -> String {
    what.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Set in the child run of [`child_skips`]: only then does it call [`skip`].
    const CHILD: &str = "RATH_TESTKIT_CHILD";

    #[test]
    fn child_skips() {
        if std::env::var_os(CHILD).is_some() {
            skip("a prerequisite\n        that is missing");
        }
    }

    /// Runs [`child_skips`] in a child process of this test binary, with `RATH_CI` = `ci`.
    fn run_child(ci: &str) -> std::process::Output {
        Command::new(std::env::current_exe().expect("test exe"))
            .args([
                "--exact",
                "tests::child_skips",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("RATH_CI", ci)
            .output()
            .expect("run the child test")
    }

    #[test]
    fn locally_a_skip_prints_one_marker_line_and_passes() {
        for ci in ["", "0"] {
            let out = run_child(ci);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "RATH_CI={ci:?}: {stderr}");
            let markers: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("RATH-SKIP"))
                .collect();
            assert_eq!(
                markers,
                ["RATH-SKIP: tests::child_skips: a prerequisite that is missing"],
                "RATH_CI={ci:?}"
            );
        }
    }

    #[test]
    fn under_ci_a_skip_fails_the_test_naming_the_prerequisite() {
        let out = run_child("1");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success(),
            "the child passed under RATH_CI=1:\n{all}"
        );
        assert!(
            all.contains(
                "tests::child_skips: RATH_CI=1 and a prerequisite is missing: \
                 a prerequisite that is missing"
            ),
            "{all}"
        );
        assert!(!all.contains("RATH-SKIP"), "{all}");
    }

    #[test]
    fn whitespace_runs_collapse() {
        assert_eq!(
            collapse(" needs\n    bubblewrap  (bwrap) "),
            "needs bubblewrap (bwrap)"
        );
    }
}
