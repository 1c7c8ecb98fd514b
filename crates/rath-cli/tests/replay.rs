//! `rath replay` on a cassette recorded in the test: the `long_running_coding` example runs
//! offline through the cassette recorder, then its session is replayed as is (identical) and
//! against a tampered cassette (first difference), in text and JSON.

mod common;

use common::{rath, run_example};
use openrath::persist::Store;

#[test]
fn replay_against_a_recorded_cassette() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let cassette = tmp.path().join("run.jsonl");
    run_example(
        "long_running_coding",
        tmp.path(),
        &[
            "--store",
            "home",
            "--cassette",
            "run.jsonl",
            "--deterministic",
        ],
    );
    // The run's final session: the closed loop session.
    let store = Store::at(home.join("sessions"));
    let id = store
        .list()
        .expect("list")
        .into_iter()
        .find(|s| s.operator == "run_session_loop" && s.closed)
        .expect("the loop session")
        .id
        .to_string();
    let cwd = tmp.path();

    insta::assert_snapshot!(
        "replay_identical",
        rath(
            cwd,
            &["--store", "home", "replay", &id, "--cassette", "run.jsonl"]
        )
    );
    insta::assert_snapshot!(
        "replay_identical_json",
        rath(
            cwd,
            &[
                "--store",
                "home",
                "--json",
                "replay",
                &id,
                "--cassette",
                "run.jsonl"
            ]
        )
    );

    // The model "answers differently" at the last turn.
    let text = std::fs::read_to_string(&cassette).expect("read cassette");
    let changed = text.replace(
        "the check passes (4 shapes ok)",
        "the check needs another look",
    );
    assert_ne!(text, changed, "the final answer is in the cassette");
    std::fs::write(tmp.path().join("changed.jsonl"), changed).expect("write cassette");
    insta::assert_snapshot!(
        "replay_different",
        rath(
            cwd,
            &[
                "--store",
                "home",
                "replay",
                &id,
                "--cassette",
                "changed.jsonl"
            ]
        )
    );
    insta::assert_snapshot!(
        "replay_different_json",
        rath(
            cwd,
            &[
                "--store",
                "home",
                "--json",
                "replay",
                &id,
                "--cassette",
                "changed.jsonl"
            ]
        )
    );

    // A cassette without the session's first request: the difference is at turn 0.
    let tail: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(tmp.path().join("tail.jsonl"), tail).expect("write cassette");
    let missing = rath(
        cwd,
        &["--store", "home", "replay", &id, "--cassette", "tail.jsonl"],
    );
    assert!(missing.starts_with("exit: 1"), "{missing}");
    assert!(missing.contains("different at model turn 0"), "{missing}");
    assert!(missing.contains("no recorded request"), "{missing}");

    // Bad input: exit 2 with one line.
    std::fs::write(tmp.path().join("junk.jsonl"), "not json\n").expect("write junk");
    insta::assert_snapshot!(
        "replay_bad_cassette",
        rath(
            cwd,
            &["--store", "home", "replay", &id, "--cassette", "junk.jsonl"]
        )
    );
    let absent = rath(
        cwd,
        &["--store", "home", "replay", &id, "--cassette", "nope.jsonl"],
    );
    assert!(absent.starts_with("exit: 2"), "{absent}");
    let no_flag = rath(cwd, &["--store", "home", "replay", &id]);
    assert!(no_flag.starts_with("exit: 2"), "{no_flag}");
}
