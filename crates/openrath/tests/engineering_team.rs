//! Acceptance: the flagship example offline. QA's real `python3 -m unittest` run inside the
//! local sandbox passes, and the run leaves a store, a lineage export, a report and a view.

mod common;

use openrath::inspect::StoreView;
use openrath::prelude::*;

/// The example's seeded repository (the files QA's tests cover), as the example writes it.
const SEED_FILES: &[(&str, &str)] = &[
    ("calc/__init__.py", ""),
    (
        "calc/stats.py",
        "def mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / (len(values) - 1)\n",
    ),
    (
        "calc/text.py",
        "def word_count(text):\n    \"\"\"Number of whitespace-separated words.\"\"\"\n    return len(text.split(\" \"))\n",
    ),
    ("tests/__init__.py", ""),
];

/// The exit code of QA's last test run in `s` (its `qa*` run_shell_command evidence).
fn qa_exit(s: &Session) -> Option<i64> {
    s.chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e)
                if e.tool == "run_shell_command" && e.tool_call_id.starts_with("qa") =>
            {
                Some(e.exit_code)
            }
            _ => None,
        })
        .next_back()
        .flatten()
}

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn engineering_team_offline_passes_real_tests_in_the_sandbox() {
    if !python_available() {
        rath_testkit::skip("python3 is not installed (QA runs python3 -m unittest)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(common::example_binary("engineering_team"))
        .env("OPENRATH_HOME", tmp.path())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENRATH_DETERMINISTIC")
        .current_dir(tmp.path())
        .output()
        .expect("run engineering_team");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("QA test run inside the sandbox: PASSED (exit 0)"),
        "{stdout}"
    );
    // The final session: the selector's output, which holds every route decision.
    let store = Store::at(tmp.path().join("sessions"));
    let stored: Vec<Session> = store
        .list()
        .expect("list")
        .iter()
        .map(|s| store.load(&s.id).expect("load").session)
        .collect();
    let route_count = |s: &Session| {
        s.chunks()
            .iter()
            .filter(|c| matches!(c.body(), ChunkBody::RouteDecision(_)))
            .count()
    };
    let final_session = stored
        .iter()
        .filter(|s| s.lineage().operator.starts_with("Selector"))
        .max_by_key(|s| (route_count(s), s.len()))
        .expect("the selector's final session");
    assert_eq!(qa_exit(final_session), Some(0));
    let sessions = stored.len();

    // The seeded repo really was broken: the same tests fail on a fresh copy.
    let fresh = tmp.path().join("fresh");
    for (path, text) in SEED_FILES {
        let p = fresh.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
    }
    // The tests themselves are the example's, untouched by the fixers.
    let tests = tmp
        .path()
        .join("workspaces/engineering_team/tests/test_calc.py");
    std::fs::copy(&tests, fresh.join("tests/test_calc.py")).expect("copy the tests");
    let before = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "."])
        .current_dir(&fresh)
        .output()
        .expect("run unittest");
    assert!(!before.status.success(), "seeded repo must fail its tests");

    // Evidence of the route: lead, specialists, qa, then done.
    let routes: Vec<Option<String>> = final_session
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::RouteDecision(r) => Some(r.choice.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        routes,
        [
            Some("lead".to_owned()),
            Some("specialists".to_owned()),
            Some("qa".to_owned()),
            None
        ]
    );
    let agents: Vec<&String> = final_session.agent_usage().keys().collect();
    for a in ["lead", "stats_fixer", "text_fixer", "qa"] {
        assert!(
            agents.iter().any(|x| x.ends_with(a)),
            "{a} missing in {agents:?}"
        );
    }

    // Store, lineage export, report and view exist and agree.
    let view = StoreView::open(tmp.path()).expect("store");
    let listing = view.sessions().expect("list");
    assert!(listing.warnings.is_empty());
    assert_eq!(listing.rows.len(), sessions);
    assert!(view.verify().expect("verify").is_clean());
    let lineage = std::fs::read_to_string(tmp.path().join("lineage/engineering_team.jsonl"))
        .expect("lineage export");
    assert_eq!(lineage.lines().count(), sessions);
    let merges = listing.rows.iter().filter(|r| r.kind == "op_merge").count();
    assert!(merges >= 1, "the specialists' forks merge");
    assert!(
        std::fs::read_to_string(tmp.path().join("reports/engineering_team.md"))
            .expect("report")
            .contains("PASSED")
    );
    let page =
        std::fs::read_to_string(tmp.path().join("reports/engineering_team.html")).expect("view");
    assert_eq!(page.matches("<g class=\"node").count(), sessions);
}

/// Runs the flagship offline with `OPENRATH_HOME=home`, `args` and `env`; returns its stdout.
fn run_team(home: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(common::example_binary("engineering_team"))
        .args(args)
        .envs(env.iter().copied())
        .env("OPENRATH_HOME", home)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENRATH_DETERMINISTIC")
        .current_dir(home)
        .output()
        .expect("run engineering_team");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The run went to the store `url` and nowhere else: every session of the lineage export
/// is there and loads, the selector's final session holds QA's passing run, the HTML view
/// (read back from that store) draws each session, and no JSONL directory was written.
async fn check_team_stored_in(url: &str, home: &std::path::Path, stdout: &str) {
    assert!(
        stdout.contains("QA test run inside the sandbox: PASSED (exit 0)"),
        "{stdout}"
    );
    let store = openrath::store::open_store(url)
        .await
        .expect("open the store");
    assert!(
        stdout.contains(&format!("- store: {}", store.name())),
        "{stdout}"
    );
    let listed = store.list().await.expect("list");
    let lineage = std::fs::read_to_string(home.join("lineage/engineering_team.jsonl"))
        .expect("lineage export");
    assert_eq!(listed.len(), lineage.lines().count(), "{}", store.name());
    let mut best: Option<Session> = None;
    for s in &listed {
        let loaded = store.load(&s.id).await.expect("load").session;
        if loaded.lineage().operator.starts_with("Selector")
            && best.as_ref().is_none_or(|b| loaded.len() > b.len())
        {
            best = Some(loaded);
        }
    }
    assert_eq!(qa_exit(&best.expect("the selector's session")), Some(0));
    let page = std::fs::read_to_string(home.join("reports/engineering_team.html")).expect("view");
    assert_eq!(page.matches("<g class=\"node").count(), listed.len());
    assert!(
        !home.join("sessions").exists(),
        "the JSONL directory was written too"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn engineering_team_with_store_sqlite_stores_its_run_there() {
    if !python_available() {
        rath_testkit::skip("python3 is not installed (QA runs python3 -m unittest)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", tmp.path().join("team.sqlite").display());
    let stdout = run_team(tmp.path(), &["--store", &url], &[]);
    check_team_stored_in(&url, tmp.path(), &stdout).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn engineering_team_with_openrath_store_postgres_stores_its_run_there() {
    if !python_available() {
        rath_testkit::skip("python3 is not installed (QA runs python3 -m unittest)");
        return;
    }
    let Some(base) = std::env::var("RATH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        rath_testkit::skip(
            "RATH_TEST_POSTGRES_URL is not set to a PostgreSQL database \
             (see .ci/install.d/60-postgres.sh)",
        );
        return;
    };
    let schema = format!("rath_test_team_{}", std::process::id());
    let url = format!("{base}?schema={schema}");
    let tmp = tempfile::tempdir().expect("tempdir");
    // Through the environment this time: $OPENRATH_STORE names the store.
    let stdout = run_team(tmp.path(), &[], &[("OPENRATH_STORE", &url)]);
    check_team_stored_in(&url, tmp.path(), &stdout).await;
    let pool = sqlx::PgPool::connect(&base).await.expect("connect");
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .expect("drop the schema");
    pool.close().await;
}
