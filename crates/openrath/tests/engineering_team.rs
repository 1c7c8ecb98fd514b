//! Acceptance: the flagship example offline. QA's real `python3 -m unittest` run inside the
//! local sandbox passes, and the run leaves a store, a lineage export, a report and a view.

mod common;

use openrath::demos::engineering_team::{SEED_FILES, TeamConfig, qa_verdict, run};
use openrath::inspect::StoreView;
use openrath::prelude::*;

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn engineering_team_offline_passes_real_tests_in_the_sandbox() {
    if !python_available() {
        common::missing("python3 is not installed (QA runs python3 -m unittest)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let report = rt
        .block_on(run(TeamConfig::offline(tmp.path())))
        .expect("team run");
    assert_eq!(report.qa_exit_code, Some(0), "{}", report.summary);
    assert!(report.qa_passed);
    assert_eq!(qa_verdict(&report.final_session), (Some(0), true));

    // The seeded repo really was broken: the same tests fail on a fresh copy.
    let fresh = tmp.path().join("fresh");
    for (path, text) in SEED_FILES {
        let p = fresh.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
    }
    let before = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "."])
        .current_dir(&fresh)
        .output()
        .expect("run unittest");
    assert!(!before.status.success(), "seeded repo must fail its tests");

    // Evidence of the route: lead, specialists, qa, then done.
    let routes: Vec<Option<String>> = report
        .final_session
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
    let agents: Vec<&String> = report.final_session.agent_usage().keys().collect();
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
    assert_eq!(listing.rows.len(), report.sessions);
    assert!(view.verify().expect("verify").is_clean());
    let lineage = std::fs::read_to_string(&report.lineage_path).expect("lineage export");
    assert_eq!(lineage.lines().count(), report.sessions);
    let merges = listing.rows.iter().filter(|r| r.kind == "op_merge").count();
    assert!(merges >= 1, "the specialists' forks merge");
    assert!(
        std::fs::read_to_string(&report.report_path)
            .expect("report")
            .contains("PASSED")
    );
    let page = std::fs::read_to_string(&report.view_path).expect("view");
    assert_eq!(page.matches("<g class=\"node").count(), report.sessions);
}
