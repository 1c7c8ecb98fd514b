//! Acceptance: the flagship example on Anthropic's Messages API (the mock, with the agents'
//! replies scripted), chosen by `RATH_PROVIDER=anthropic`; its cassette then replays the run
//! offline, and the replayed store is byte-identical to the live one.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use openrath::anthropic::mock::{MockAnthropic, MockMessage, MockStep};
use openrath::prelude::*;
use serde_json::Value;

const KEY: &str = "sk-ant-engineering-team-4b1d";

/// The example's command for QA (the tool call the scripted QA makes).
const QA_COMMAND: &str = "out=$(PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -t . -v 2>&1); \
                          code=$?; printf '%s\\n' \"$out\" | sed 's/ in [0-9.]*s$//'; exit $code";

const FIXED_STATS: &str = "def mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / len(values)\n";
const FIXED_TEXT: &str = "def word_count(text):\n    \"\"\"Number of whitespace-separated words.\"\"\"\n    return len(text.split())\n";

/// Each agent's replies (as the Messages API sends them): the tool_use id of every step
/// that calls a tool, so the responder can tell how far an agent has got.
fn script(agent: &str) -> Vec<(Option<&'static str>, MockMessage)> {
    let call = |id: &'static str, name: &str, input: Value, usage: (u64, u64)| {
        (
            Some(id),
            MockMessage::tool_use(vec![(id, name, input)]).usage(usage.0, usage.1),
        )
    };
    let text = |t: &str, usage: (u64, u64)| (None, MockMessage::text(t).usage(usage.0, usage.1));
    match agent {
        "lead" => vec![
            call(
                "lead_ls",
                "run_shell_command",
                json!({"cmd": "ls calc tests"}),
                (150, 12),
            ),
            text(
                "Plan: stats_fixer fixes calc/stats.py (mean divides by n-1); text_fixer fixes \
                 calc/text.py (word_count must split on any whitespace). Then QA runs the tests.",
                (210, 40),
            ),
        ],
        "stats_fixer" => vec![
            call(
                "stats_fixer_read",
                "read_workspace_file",
                json!({"path": "calc/stats.py"}),
                (180, 20),
            ),
            call(
                "stats_fixer_write",
                "write_workspace_file",
                json!({"path": "calc/stats.py", "content": FIXED_STATS}),
                (260, 60),
            ),
            text("Fixed calc/stats.py: divide by len(values).", (300, 15)),
        ],
        "text_fixer" => vec![
            call(
                "text_fixer_read",
                "read_workspace_file",
                json!({"path": "calc/text.py"}),
                (180, 20),
            ),
            call(
                "text_fixer_write",
                "write_workspace_file",
                json!({"path": "calc/text.py", "content": FIXED_TEXT}),
                (260, 60),
            ),
            text("Fixed calc/text.py: split on any whitespace.", (300, 15)),
        ],
        _ => vec![
            call(
                "qa_tests",
                "run_shell_command",
                json!({"cmd": QA_COMMAND}),
                (400, 25),
            ),
            text(
                "QA: ran the test suite; the exit code above is the verdict.",
                (520, 14),
            ),
        ],
    }
}

/// The agent a request comes from, by its system prompt (the last one named, should a
/// conversation carry several).
fn agent_of(request: &Value) -> &'static str {
    let system = request["system"].as_str().unwrap_or_default();
    [
        ("You are the tech lead", "lead"),
        ("Fix only calc/stats.py", "stats_fixer"),
        ("Fix only calc/text.py", "text_fixer"),
        ("You are QA", "qa"),
    ]
    .into_iter()
    .filter_map(|(needle, agent)| system.rfind(needle).map(|at| (at, agent)))
    .max()
    .map_or("unknown", |(_, agent)| agent)
}

/// The next reply of the agent asking: the first step whose tool_use id the conversation
/// does not hold yet. Parallel agents share the mock, so order of arrival does not matter.
fn respond(request: &Value) -> Option<MockStep> {
    let sent = request["messages"].to_string();
    script(agent_of(request))
        .into_iter()
        .find(|(id, _)| id.is_none_or(|id| !sent.contains(&format!("\"id\":\"{id}\""))))
        .map(|(_, reply)| MockStep::Reply(reply))
}

fn python_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Every file under `dir`, by path relative to it.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

fn run(home: &Path, args: &[&str], anthropic: Option<&MockAnthropic>) -> Output {
    let mut cmd = Command::new(common::example_binary("engineering_team"));
    cmd.args(args)
        .env("OPENRATH_HOME", home)
        .env("OPENRATH_DETERMINISTIC", "1")
        .current_dir(home.parent().expect("home has a parent"));
    for var in [
        "RATH_PROVIDER",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ] {
        cmd.env_remove(var);
    }
    if let Some(mock) = anthropic {
        cmd.env("RATH_PROVIDER", "anthropic")
            .env("ANTHROPIC_BASE_URL", mock.base_url())
            .env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_MODEL", "claude-mock");
    }
    cmd.output().expect("run engineering_team")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn engineering_team_runs_on_the_anthropic_mock_and_its_cassette_replays_byte_identically() {
    if !python_available() {
        rath_testkit::skip("python3 is not installed (QA runs python3 -m unittest)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mock = rt.block_on(MockAnthropic::start()).expect("mock starts");
    mock.set_responder(respond);
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let cassette = tmp.path().join("engineering_team.jsonl");
    let cassette_arg = cassette.to_str().expect("utf-8 path");

    // Live, on the mock: every agent's calls go over the Messages API.
    let stdout = ok(&run(&home, &["--cassette", cassette_arg], Some(&mock)));
    assert!(stdout.contains("live model: anthropic"), "{stdout}");
    assert!(
        stdout.contains("QA test run inside the sandbox: PASSED (exit 0)"),
        "{stdout}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 10, "2 lead + 3 + 3 fixers + 2 qa calls");
    let mut asked: Vec<&str> = requests.iter().map(agent_of).collect();
    asked.sort_unstable();
    asked.dedup();
    assert_eq!(asked, ["lead", "qa", "stats_fixer", "text_fixer"]);
    for h in mock.request_headers() {
        assert_eq!(h["x-api-key"], KEY);
        assert_eq!(h["anthropic-version"], "2023-06-01");
    }
    let store = Store::at(home.join("sessions"));
    let mut model_calls = 0;
    for summary in store.list().expect("list") {
        let s = store.load(&summary.id).expect("load").session;
        for c in s.chunks().iter() {
            if let ChunkBody::ModelCall(m) = c.body() {
                assert_eq!(m.provider, "anthropic", "{m:?}");
                assert_eq!(m.model.as_deref(), Some("claude-mock"));
                model_calls += 1;
            }
        }
    }
    assert!(model_calls >= 10, "{model_calls} model_call chunks");
    let live = files(&home.join("sessions"));
    let live_lineage = std::fs::read(home.join("lineage/engineering_team.jsonl")).expect("lineage");
    let recorded = std::fs::read_to_string(&cassette).expect("cassette");
    assert_eq!(recorded.lines().count(), 10);
    for (name, bytes) in live
        .iter()
        .chain([(&"cassette".to_owned(), &recorded.clone().into_bytes())])
    {
        assert!(
            !String::from_utf8_lossy(bytes).contains(KEY),
            "the key is in {name}"
        );
    }
    common::python_loads("engineering_team on anthropic", &home);

    // Offline: the same run answered from the cassette, without the mock or any key.
    std::fs::remove_dir_all(&home).expect("clear the home");
    let stdout = ok(&run(&home, &["--replay", cassette_arg], None));
    assert!(stdout.contains("offline, replaying a cassette"), "{stdout}");
    assert!(
        stdout.contains("QA test run inside the sandbox: PASSED (exit 0)"),
        "{stdout}"
    );
    assert_eq!(mock.requests().len(), 10, "the replay made no request");
    let replayed = files(&home.join("sessions"));
    assert_eq!(
        replayed.keys().collect::<Vec<_>>(),
        live.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &live {
        assert!(
            replayed[name] == *bytes,
            "{name} differs after replay:\n{}\n---\n{}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&replayed[name])
        );
    }
    // The lineage export lists the same rows; their order follows which parallel branch
    // reported first, which is the scheduler's choice, not the cassette's.
    let replayed_lineage =
        std::fs::read(home.join("lineage/engineering_team.jsonl")).expect("lineage");
    let rows = |b: &[u8]| {
        let mut lines: Vec<String> = String::from_utf8_lossy(b)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(
        rows(&replayed_lineage),
        rows(&live_lineage),
        "the lineage export differs after replay"
    );
}
