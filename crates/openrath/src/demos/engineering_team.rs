//! `engineering_team`: a lead plans, two specialists fix different files in parallel on forks
//! of one sandbox, the forks merge, and a QA agent runs the real test suite; a Selector routes
//! until QA's real exit code is 0.
//!
//! Offline (the default) every agent answers from a script; with `OPENAI_BASE_URL` set
//! ([`TeamConfig::from_env`]) the same workflow runs on a real model. Either way the tests run
//! for real (`python3 -m unittest` through `run_shell_command` in a `local` sandbox holding a
//! seeded copy of a small repo) and the decision to stop is taken from the tool evidence's
//! exit code, never from what a model says.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rath_flow::{
    Agent, Decision, FlowContext, FlowEvent, LoopOptions, Parallel, Selector, ToolSet, Workflow,
};
use rath_persist::{LineageRow, Store, export_jsonl_string};
use rath_provider::ScriptedResponse;
use rath_session::{ChunkBody, SandboxSpec, Session, SessionId, Usage};
use serde_json::json;

use super::hello_agent::{LIVE_MAX_STEPS, bounded, provider};
use super::{DemoError, io};
use crate::inspect::{lineage_tree, usage_text};

/// The seeded repository: `(path, buggy content)`.
pub const SEED_FILES: &[(&str, &str)] = &[
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
    (
        "tests/test_calc.py",
        "import unittest\n\nfrom calc.stats import mean\nfrom calc.text import word_count\n\n\nclass StatsTest(unittest.TestCase):\n    def test_mean(self):\n        self.assertEqual(mean([1, 2, 3, 4]), 2.5)\n\n\nclass TextTest(unittest.TestCase):\n    def test_word_count_ignores_extra_spaces(self):\n        self.assertEqual(word_count(\"  the quick  brown fox \"), 4)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n",
    ),
];

const FIXED_STATS: &str = "def mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / len(values)\n";
const FIXED_TEXT: &str = "def word_count(text):\n    \"\"\"Number of whitespace-separated words.\"\"\"\n    return len(text.split())\n";

/// The command QA runs.
pub const QA_COMMAND: &str =
    "PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -t . -v";

const TASK: &str = "The test suite of the calc package fails. Fix calc/stats.py and calc/text.py \
                    so that `python3 -m unittest` passes, then have QA run the tests.";

/// How to run the team.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TeamConfig {
    /// The OpenRath home: sessions go to `<home>/sessions`, the lineage export to
    /// `<home>/lineage/`, the report to `<home>/reports/`, the sandbox workspace to
    /// `<home>/workspaces/engineering_team`.
    pub home: PathBuf,
    /// Use the OpenAI-compatible provider from the environment instead of scripts.
    pub live: bool,
    /// Print a progress line per step.
    pub progress: bool,
    /// Counter ids and clock instead of unique UUIDv7 ids (see
    /// [`super::deterministic_requested`]): the same bytes on every run, so one run per store.
    pub deterministic: bool,
}

impl TeamConfig {
    /// Offline, scripted, silent, unique ids, writing under `home`.
    pub fn offline(home: impl Into<PathBuf>) -> Self {
        TeamConfig {
            home: home.into(),
            live: false,
            progress: false,
            deterministic: false,
        }
    }

    /// `home` from the OPENRATH_HOME rules; live when `OPENAI_BASE_URL` is set; progress on;
    /// deterministic when `--deterministic` or `OPENRATH_DETERMINISTIC=1` is given.
    pub fn from_env() -> Self {
        TeamConfig {
            home: rath_persist::openrath_home(),
            live: std::env::var("OPENAI_BASE_URL").is_ok_and(|v| !v.trim().is_empty()),
            progress: true,
            deterministic: super::deterministic_requested(),
        }
    }

    /// Sets [`TeamConfig::deterministic`].
    pub fn deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }
}

/// What a run left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TeamReport {
    /// The final session.
    pub final_session: Session,
    /// Exit code of QA's last real test run.
    pub qa_exit_code: Option<i64>,
    /// True when QA's last run exited 0.
    pub qa_passed: bool,
    /// The sessions directory written.
    pub store_dir: PathBuf,
    /// The lineage export (JSONL).
    pub lineage_path: PathBuf,
    /// The markdown report.
    pub report_path: PathBuf,
    /// The HTML view of the store.
    pub view_path: PathBuf,
    /// The sandbox workspace (the fixed repo).
    pub workspace: PathBuf,
    /// Sessions written to the store.
    pub sessions: usize,
    /// The report's text (also printed as the summary).
    pub summary: String,
}

fn fixer(live: bool, name: &str, path: &str, fixed: &str, what: &str) -> Result<Agent, DemoError> {
    let script = vec![
        ScriptedResponse::tool_calls(vec![(
            format!("{name}_read"),
            "read_workspace_file",
            json!({"path": path}),
        )])
        .usage(180, 20),
        ScriptedResponse::tool_calls(vec![(
            format!("{name}_write"),
            "write_workspace_file",
            json!({"path": path, "content": fixed}),
        )])
        .usage(260, 60),
        ScriptedResponse::text(format!("Fixed {path}: {what}.")).usage(300, 15),
    ];
    Ok(Agent::new(
        name,
        format!("You are a careful Python engineer. Fix only {path} so the tests pass; use the workspace tools."),
        provider(live, script, name)?,
    )
    .describe(format!("Fixes {path}."))
    .with_tools(ToolSet::builtins())
    .with_options(bounded(live, LoopOptions::default())))
}

fn team(live: bool) -> Result<Selector, DemoError> {
    let lead = Agent::new(
        "lead",
        "You are the tech lead. Read the repository and write a short plan: who fixes which file.",
        provider(
            live,
            vec![
                ScriptedResponse::tool_calls(vec![(
                    "lead_ls",
                    "run_shell_command",
                    json!({"cmd": "ls calc tests"}),
                )])
                .usage(150, 12),
                ScriptedResponse::text(
                    "Plan: stats_fixer fixes calc/stats.py (mean divides by n-1); text_fixer fixes \
                     calc/text.py (word_count must split on any whitespace). Then QA runs the tests.",
                )
                .usage(210, 40),
            ],
            "lead",
        )?,
    )
    .describe("Plans the work.")
    .with_tools(ToolSet::builtins())
    .with_options(bounded(live, LoopOptions::default()));
    let specialists = Parallel::new("specialists")
        .describe("Two engineers fix their files in parallel.")
        .branch(fixer(
            live,
            "stats_fixer",
            "calc/stats.py",
            FIXED_STATS,
            "divide by len(values)",
        )?)
        .branch(fixer(
            live,
            "text_fixer",
            "calc/text.py",
            FIXED_TEXT,
            "split on any whitespace",
        )?);
    let qa = Agent::new(
        "qa",
        "You are QA. Run the test suite with run_shell_command and report the result.",
        provider(
            live,
            vec![
                ScriptedResponse::tool_calls(vec![(
                    "qa_tests",
                    "run_shell_command",
                    json!({"cmd": QA_COMMAND}),
                )])
                .usage(400, 25),
                ScriptedResponse::text(
                    "QA: ran the test suite; the exit code above is the verdict.",
                )
                .usage(520, 14),
            ],
            "qa",
        )?,
    )
    .describe("Runs the real tests.")
    .with_tools(ToolSet::builtins())
    .with_options(bounded(live, LoopOptions::default()));
    Ok(Selector::by_function("router", route)
        .describe("Routes lead -> specialists -> qa until the tests pass.")
        .candidate(lead)
        .candidate(specialists)
        .candidate(qa)
        .max_steps(if live { LIVE_MAX_STEPS } else { 8 }))
}

/// The routing rule, read from evidence only: which agents have spoken (model_call
/// evidence) and the exit code of the last test run after the last file write.
pub fn route(s: &Session, _candidates: &[rath_flow::Candidate]) -> Decision {
    let mut spoke: Vec<String> = Vec::new();
    let (mut last_write, mut last_qa): (Option<usize>, Option<(usize, Option<i64>)>) = (None, None);
    for (i, c) in s.chunks().iter().enumerate() {
        match c.body() {
            ChunkBody::ModelCall(m) => spoke.extend(m.agent.clone()),
            ChunkBody::ToolEvidence(e) if e.tool == "write_workspace_file" => last_write = Some(i),
            ChunkBody::ToolEvidence(e)
                if e.tool == "run_shell_command" && e.tool_call_id.starts_with("qa") =>
            {
                last_qa = Some((i, e.exit_code));
            }
            ChunkBody::ToolEvidence(e)
                if e.tool == "run_shell_command"
                    && e.summary.as_deref().is_some_and(|x| x.contains("unittest")) =>
            {
                last_qa = Some((i, e.exit_code));
            }
            _ => {}
        }
    }
    let has = |a: &str| {
        spoke
            .iter()
            .any(|x| x == a || x.ends_with(&format!(".{a}")))
    };
    if !has("lead") {
        return Decision::to("lead", "no plan yet");
    }
    if !has("stats_fixer") || !has("text_fixer") {
        return Decision::to("specialists", "the plan assigns two files");
    }
    match last_qa {
        Some((i, code)) if last_write.is_none_or(|w| i > w) => {
            if code == Some(0) {
                Decision::done("QA's test run exited 0")
            } else {
                Decision::to(
                    "specialists",
                    format!(
                        "QA's test run exited {}",
                        code.map_or("?".to_owned(), |c| c.to_string())
                    ),
                )
            }
        }
        _ => Decision::to("qa", "files changed since the last test run"),
    }
}

/// Seeds the workspace: removes what a previous run left and writes [`SEED_FILES`].
pub fn seed_workspace(dir: &Path) -> Result<(), DemoError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    for (path, text) in SEED_FILES {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&p, text).map_err(io(&p))?;
    }
    Ok(())
}

#[derive(Default)]
struct Collected {
    order: Vec<SessionId>,
    latest: HashMap<SessionId, Session>,
}

impl Collected {
    /// Keeps the latest version of each session (a loop reports it as it grows; a parallel
    /// fan-out reports its merge before and after laying out the branches).
    fn add(&mut self, s: &Session) {
        if self.latest.insert(s.id().clone(), s.clone()).is_none() {
            self.order.push(s.id().clone());
        }
    }
}

fn progress_line(ev: &FlowEvent<'_>) -> Option<String> {
    match ev {
        FlowEvent::ToolEnd {
            agent,
            call,
            outcome,
            ..
        } => Some(format!(
            "  [{}] {} -> {outcome}",
            agent.unwrap_or("-"),
            call.function.name
        )),
        FlowEvent::Session { session } if session.lineage().operator == "Selector.route" => {
            match session.last().map(|c| c.body()) {
                Some(ChunkBody::RouteDecision(r)) => Some(format!(
                    "  [{}] route -> {} ({})",
                    r.selector,
                    r.choice.as_deref().unwrap_or("done"),
                    r.reason
                )),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Runs the team, writes the store, the lineage export, the report and the HTML view.
pub async fn run(config: TeamConfig) -> Result<TeamReport, DemoError> {
    let home = config.home.clone();
    let workspace = home.join("workspaces/engineering_team");
    seed_workspace(&workspace)?;
    let workspace = workspace.canonicalize().map_err(io(&workspace))?;

    let collected = Arc::new(Mutex::new(Collected::default()));
    let sink = collected.clone();
    let progress = config.progress;
    let seen_routes = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            sink.lock().unwrap_or_else(|p| p.into_inner()).add(session);
        }
        if progress && let Some(line) = progress_line(ev) {
            let key = match ev {
                FlowEvent::Session { session } => Some(session.id().clone()),
                _ => None,
            };
            let fresh = key.is_none_or(|k| {
                seen_routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(k)
            });
            if fresh {
                println!("{line}");
            }
        }
    });

    let root = Session::user_with(TASK, super::demo_stamper(config.deterministic)).to_with(
        "local",
        SandboxSpec::working_dir(workspace.to_string_lossy().into_owned()),
    );
    cx.record(&root);
    let team = team(config.live)?;
    let store_dir = home.join("sessions");
    let recorded = || -> Vec<Session> {
        let c = collected.lock().unwrap_or_else(|p| p.into_inner());
        c.order
            .iter()
            .filter_map(|id| c.latest.get(id).cloned())
            .collect()
    };
    let out = match team.forward(root, &cx).await {
        Ok(out) => out,
        Err(e) => return Err(super::keep_failed(&store_dir, recorded(), e)),
    };
    cx.record(&out);

    let store = Store::at(&store_dir);
    let sessions: Vec<Session> = recorded();
    // Never replaces another run's file: an id already stored with other content is an error.
    for s in &sessions {
        store.save(s)?;
    }
    let rows: Vec<LineageRow> = sessions.iter().map(LineageRow::from_session).collect();
    let lineage_path = home.join("lineage/engineering_team.jsonl");
    write(&lineage_path, &export_jsonl_string(&rows))?;

    let (qa_exit_code, qa_passed) = qa_verdict(&out);
    let summary = summary(&out, &rows, qa_exit_code, &home, &workspace);
    let report_path = home.join("reports/engineering_team.md");
    write(&report_path, &summary)?;
    let view_path = home.join("reports/engineering_team.html");
    let view = crate::inspect::StoreView::open(&home).map_err(|e| DemoError::Io {
        path: home.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let page = crate::inspect::view::render_store(
        &view,
        crate::inspect::view::ViewOptions::default().title("engineering_team sessions"),
    )
    .map_err(|e| DemoError::Io {
        path: view_path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write(&view_path, &page)?;
    Ok(TeamReport {
        final_session: out,
        qa_exit_code,
        qa_passed,
        store_dir,
        lineage_path,
        report_path,
        view_path,
        workspace,
        sessions: sessions.len(),
        summary,
    })
}

fn write(path: &Path, text: &str) -> Result<(), DemoError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::write(path, text).map_err(io(path))
}

/// The exit code of the last `unittest` run in `s`, and whether it was 0.
pub fn qa_verdict(s: &Session) -> (Option<i64>, bool) {
    let code = s
        .chunks()
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
        .flatten();
    (code, code == Some(0))
}

fn summary(
    out: &Session,
    rows: &[LineageRow],
    qa: Option<i64>,
    home: &Path,
    workspace: &Path,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# engineering_team\n");
    let verdict = match qa {
        Some(0) => "PASSED (exit 0)".to_owned(),
        Some(c) => format!("FAILED (exit {c})"),
        None => "not run".to_owned(),
    };
    let _ = writeln!(o, "QA test run inside the sandbox: {verdict}\n");
    let _ = writeln!(o, "## Lineage ({} sessions)\n\n```", rows.len());
    o.push_str(&lineage_tree(rows));
    let _ = writeln!(o, "```\n\n## Final session\n");
    let conv = out.conversation_len();
    let _ = writeln!(
        o,
        "- id: {}\n- chunks: {} ({conv} conversation, {} evidence)\n- usage: {}",
        out.id(),
        out.len(),
        out.len() - conv,
        usage_text(out.usage())
    );
    let _ = writeln!(o, "\n## Usage per agent\n");
    let mut total = Usage::default();
    for (agent, u) in out.agent_usage() {
        total += *u;
        let _ = writeln!(o, "- {agent}: {}", usage_text(Some(*u)));
    }
    let _ = writeln!(o, "- (sum): {}", usage_text(Some(total)));
    let _ = writeln!(o, "\n## Where things are\n");
    let _ = writeln!(o, "- store: {}", display(&home.join("sessions")));
    let _ = writeln!(
        o,
        "- lineage export: {}",
        display(&home.join("lineage/engineering_team.jsonl"))
    );
    let _ = writeln!(
        o,
        "- report: {}",
        display(&home.join("reports/engineering_team.md"))
    );
    let _ = writeln!(
        o,
        "- HTML view: {}",
        display(&home.join("reports/engineering_team.html"))
    );
    let _ = writeln!(o, "- fixed repo: {}", display(workspace));
    o
}

/// `path` relative to the current directory when it is inside it.
pub fn display(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.as_ref().map_or(path.to_path_buf(), |c| c.join(path))
    };
    match cwd.as_ref().and_then(|c| abs.strip_prefix(c).ok()) {
        Some(rel) => rel.display().to_string(),
        None => path.display().to_string(),
    }
}
