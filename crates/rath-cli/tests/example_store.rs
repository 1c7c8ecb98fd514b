//! The CLI on the store the `engineering_team` example leaves (run offline into a temp home).

mod common;

use common::{rath, run_example};
use std::process::Command;

#[test]
fn cli_on_the_engineering_team_store() {
    let python = Command::new("python3").arg("--version").output();
    if !python.is_ok_and(|o| o.status.success()) {
        rath_testkit::skip("python3 is not installed (the example's QA runs unittest)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    // Deterministic ids, so the snapshots name the same sessions on every run; it exits 0
    // only when QA's tests passed.
    run_example("engineering_team", tmp.path(), &["--deterministic"]);
    insta::assert_snapshot!(
        "team_sessions",
        rath(tmp.path(), &["--store", "home", "sessions"])
    );
    insta::assert_snapshot!(
        "team_lineage",
        rath(tmp.path(), &["--store", "home", "lineage"])
    );
    insta::assert_snapshot!(
        "team_diff_branches",
        rath(
            tmp.path(),
            &[
                "--store",
                "home",
                "diff",
                "7e8ed40a-0fc5-834e-b334-acace87f89fa",
                "b6f5cfce-c034-87c7-9c9c-0f7705ad597c"
            ]
        )
    );
    let verify = rath(tmp.path(), &["--store", "home", "verify", "--json"]);
    assert!(verify.starts_with("exit: 0"), "{verify}");
    let show = rath(tmp.path(), &["--store", "home", "show", "12"]);
    assert!(show.contains("route_decision router"), "{show}");
    assert!(
        show.contains("tool_evidence run_shell_command (qa_tests)"),
        "{show}"
    );
    assert!(show.contains("exit=0"), "{show}");
    let bad = rath(tmp.path(), &["--store", "home", "show", "branch_"]);
    assert!(bad.starts_with("exit: 2"), "{bad}");
}
