//! The flagship: a lead plans, two specialists fix different files in parallel on forks of one
//! sandbox, the forks merge, QA runs the real tests, and a Selector routes until they pass.
//!
//! ```sh
//! cargo run --release --example engineering_team          # offline, scripted agents
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example engineering_team
//! RATH_PROVIDER=anthropic ANTHROPIC_API_KEY=... ANTHROPIC_MODEL=... \
//!     cargo run --release --example engineering_team -- --cassette run.jsonl
//! cargo run --release --example engineering_team -- --replay run.jsonl   # offline again
//! ```
//!
//! Offline every agent answers from a script; live the same workflow runs on the model the
//! environment selects (`RATH_PROVIDER=openai|anthropic`, by default the provider whose
//! variables are set; see `openrath::select`). A small OpenAI-compatible model gets short
//! bounds (one tool round per agent, three routing steps); Anthropic models and replays get
//! the offline ones. `--cassette FILE` records every model call; `--replay FILE` answers every
//! call from such a cassette, without network.
//! Either way the tests run for real (`python3 -m unittest` through `run_shell_command` in a
//! `local` sandbox holding a seeded copy of a small repo) and the decision to stop is taken
//! from the tool evidence's exit code, never from what a model says.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set (e.g. `http://127.0.0.1:6006` for a local Arize
//! Phoenix) the run's OpenTelemetry GenAI spans go there over OTLP; the line `otel: trace ...`
//! names the trace and says how many spans were exported and dropped.
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).
//!
//! Sessions go to the store the OPENRATH_HOME rules resolve ($OPENRATH_HOME, else ./.openrath,
//! else ~/.openrath); the lineage export (`lineage/`), a report and an HTML view (`reports/`)
//! go next to it. Then try `cargo run -p rath-cli -- sessions` or `-- view`.
//! `--store URL` (or `$OPENRATH_STORE`) puts the sessions in another store instead
//! (`sqlite://FILE`, `postgres://USER@HOST/DB`; see `openrath::run_store`), e.g.
//! `cargo run --example engineering_team -- --store sqlite://team.sqlite`, then
//! `cargo run -p rath-cli -- --store sqlite://team.sqlite sessions`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use openrath::flow::{Candidate, Decision, FlowEvent};
use openrath::inspect::view::{ViewOptions, render_store};
use openrath::inspect::{ChunkCounts, lineage_tree};
use openrath::otel::{OtlpConfig, OtlpExporter, TraceId, Traced};
use openrath::persist::{LineageRow, SessionRecorder, export_jsonl_string};
use openrath::prelude::*;
use openrath::provider::{RecordingProvider, ReplayProvider};
use openrath::run_store::{RunStore, program_args};
use openrath::select::{ProviderKind, live_provider};

/// The seeded repository: `(path, buggy content)`.
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
    (
        "tests/test_calc.py",
        "import unittest\n\nfrom calc.stats import mean\nfrom calc.text import word_count\n\n\nclass StatsTest(unittest.TestCase):\n    def test_mean(self):\n        self.assertEqual(mean([1, 2, 3, 4]), 2.5)\n\n\nclass TextTest(unittest.TestCase):\n    def test_word_count_ignores_extra_spaces(self):\n        self.assertEqual(word_count(\"  the quick  brown fox \"), 4)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n",
    ),
];

const FIXED_STATS: &str = "def mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / len(values)\n";
const FIXED_TEXT: &str = "def word_count(text):\n    \"\"\"Number of whitespace-separated words.\"\"\"\n    return len(text.split())\n";

/// The command QA runs: the tests, their report without the run time (`Ran 2 tests`, so the
/// same run gives the same bytes, and a recorded run replays), and their exit code.
const QA_COMMAND: &str = "out=$(PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -t . -v 2>&1); \
                          code=$?; printf '%s\\n' \"$out\" | sed 's/ in [0-9.]*s$//'; exit $code";

const TASK: &str = "The test suite of the calc package fails. Fix calc/stats.py and calc/text.py \
                    so that `python3 -m unittest` passes, then have QA run the tests.";

/// Where every agent's model comes from: the live provider the environment selects, a
/// cassette (`--replay FILE`), or the agent's script; `--cassette FILE` records every call.
struct Models {
    live: bool,
    /// Short bounds for small local models (the OpenAI-compatible wire).
    bounded: bool,
    replay: Option<Arc<ReplayProvider>>,
    record: Option<PathBuf>,
}

impl Models {
    fn from_args() -> anyhow::Result<Self> {
        let (mut record, mut replay) = (None, None);
        let mut args = program_args().into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--cassette" => {
                    record = Some(PathBuf::from(
                        args.next().context("--cassette needs a file")?,
                    ))
                }
                "--replay" => {
                    replay = Some(PathBuf::from(args.next().context("--replay needs a file")?))
                }
                "--deterministic" => {}
                other => anyhow::bail!(
                    "unknown argument {other:?} (expected --deterministic, --store URL, --cassette FILE, \
                     --replay FILE)"
                ),
            }
        }
        if record.is_some() && replay.is_some() {
            anyhow::bail!("--cassette records and --replay replays: give one of them");
        }
        let replay = replay.map(ReplayProvider::load).transpose()?.map(Arc::new);
        if let Some(path) = &record {
            std::fs::File::create(path)?; // a fresh cassette every agent appends to
        }
        let kind = if replay.is_some() {
            None
        } else {
            ProviderKind::from_env()?
        };
        Ok(Self {
            live: kind.is_some(),
            bounded: kind == Some(ProviderKind::OpenAi),
            replay,
            record,
        })
    }

    /// What the run's header line says about its models.
    fn mode(&self) -> String {
        match (&self.replay, ProviderKind::from_env().ok().flatten()) {
            (Some(_), _) => "offline, replaying a cassette".to_owned(),
            (None, Some(kind)) if self.live => format!("live model: {}", kind.as_str()),
            _ => "offline, scripted agents".to_owned(),
        }
    }

    /// An agent's model: the cassette, the live provider or `script`, recorded if asked.
    fn model(
        &self,
        script: Vec<ScriptedResponse>,
        name: &str,
    ) -> anyhow::Result<Arc<dyn Provider>> {
        if let Some(replay) = &self.replay {
            return Ok(replay.clone());
        }
        let model: Arc<dyn Provider> = match live_provider()? {
            Some(live) => live, // the wire, retries and a token budget
            None => Arc::new(ScriptedProvider::new(script).named(format!("scripted:{name}"))),
        };
        Ok(match &self.record {
            Some(path) => Arc::new(RecordingProvider::append(model, path)?),
            None => model,
        })
    }

    /// Loop options: bounded, one tool round per agent (small models wander).
    fn rounds(&self) -> LoopOptions {
        let options = LoopOptions::default();
        if self.bounded {
            let n = options.max_tool_rounds.min(1);
            options.max_tool_rounds(n)
        } else {
            options
        }
    }
}

fn fixer(m: &Models, name: &str, path: &str, fixed: &str, what: &str) -> anyhow::Result<Agent> {
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
        m.model(script, name)?,
    )
    .describe(format!("Fixes {path}."))
    .with_tools(ToolSet::builtins())
    .with_options(m.rounds()))
}

fn team(m: &Models) -> anyhow::Result<Selector> {
    let lead = Agent::new(
        "lead",
        "You are the tech lead. Read the repository and write a short plan: who fixes which file.",
        m.model(
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
    .with_options(m.rounds());
    let specialists = Parallel::new("specialists")
        .describe("Two engineers fix their files in parallel.")
        .branch(fixer(
            m,
            "stats_fixer",
            "calc/stats.py",
            FIXED_STATS,
            "divide by len(values)",
        )?)
        .branch(fixer(
            m,
            "text_fixer",
            "calc/text.py",
            FIXED_TEXT,
            "split on any whitespace",
        )?);
    let qa = Agent::new(
        "qa",
        "You are QA. Run the test suite with run_shell_command and report the result.",
        m.model(
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
    .with_options(m.rounds());
    Ok(Selector::by_function("router", route)
        .describe("Routes lead -> specialists -> qa until the tests pass.")
        .candidate(lead)
        .candidate(specialists)
        .candidate(qa)
        .max_steps(if m.bounded { 3 } else { 8 }))
}

/// The routing rule, read from evidence only: which agents have spoken (model_call
/// evidence) and the exit code of the last test run after the last file write.
fn route(s: &Session, _candidates: &[Candidate]) -> Decision {
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
fn seed_workspace(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    for (path, text) in SEED_FILES {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, text)?;
    }
    Ok(())
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let models = Models::from_args()?;
    let home = openrath::persist::openrath_home();
    let store = RunStore::from_args().await?;
    let mode = models.mode();
    match store.url() {
        None => println!("engineering_team ({mode}), store under {}", display(&home)),
        Some(_) => println!("engineering_team ({mode}), store {store}"),
    }
    let workspace = home.join("workspaces/engineering_team");
    seed_workspace(&workspace)?;
    let workspace = workspace.canonicalize()?;

    // Every session the run makes (the latest version of each), and a progress line per tool
    // result and per new route decision.
    let recorder = SessionRecorder::new();
    let seen_routes = Mutex::new(HashSet::new());
    let cx = FlowContext::new().with_observer({
        let recorder = recorder.clone();
        move |ev: &FlowEvent<'_>| {
            if let FlowEvent::Session { session } = ev {
                recorder.record(session);
            }
            if let Some(line) = progress_line(ev) {
                let fresh = match ev {
                    FlowEvent::Session { session } => seen_routes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(session.id().clone()),
                    _ => true,
                };
                if fresh {
                    println!("{line}");
                }
            }
        }
    });

    let spec = SandboxSpec::working_dir(workspace.to_string_lossy().into_owned());
    let root = Session::user_with(TASK, Stamper::from_env()).to_with("local", spec);
    // With OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) set, the run is traced: GenAI
    // spans over OTLP to that collector (Phoenix, Jaeger, an OpenTelemetry Collector, ...).
    let exporter = match OtlpConfig::from_env_if_set()? {
        Some(config) => Some(OtlpExporter::new(&config)?),
        None => None,
    };
    let trace = TraceId::for_root(root.id().as_str());
    let team = team(&models)?;
    // Forwarded through the context: it records the root, every session the team makes and
    // the result.
    let result = match &exporter {
        Some(exporter) => cx.forward(&Traced::new(team, exporter.clone()), root).await,
        None => cx.forward(&team, root).await,
    };
    if let Some(exporter) = &exporter {
        // Never fails the run: a collector that is down costs one export timeout at most.
        println!("otel: trace {}: {}", trace.to_hex(), exporter.shutdown());
    }
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, &recorder.sessions()).await?;
            eprintln!("engineering_team: {kept}");
            std::process::exit(1);
        }
    };

    // Never replaces another run's file: an id already stored with other content is an error.
    let sessions = recorder.sessions();
    store.save_all(&sessions).await?;
    let rows: Vec<LineageRow> = sessions.iter().map(LineageRow::from_session).collect();
    write(
        &home.join("lineage/engineering_team.jsonl"),
        &export_jsonl_string(&rows),
    )?;
    let (qa_exit_code, qa_passed) = qa_verdict(&out);
    let stored_in = match store.url() {
        None => display(&home.join("sessions")),
        Some(_) => store.to_string(),
    };
    let counts = sessions
        .iter()
        .map(|s| (s.id().clone(), ChunkCounts::of(s)))
        .collect();
    let summary = summary(
        &out,
        &rows,
        &counts,
        qa_exit_code,
        &home,
        &stored_in,
        &workspace,
    );
    write(&home.join("reports/engineering_team.md"), &summary)?;
    let options = ViewOptions::default().title("engineering_team sessions");
    let page = render_store(&store.view(&home)?, options)?;
    write(&home.join("reports/engineering_team.html"), &page)?;

    println!();
    print!("{summary}");
    if !qa_passed {
        if models.live {
            // A real model may not fix the code within the live bounds; the run itself
            // finished and is stored, which is what the live tier checks.
            println!(
                "QA's tests did not pass within the live bounds (exit {qa_exit_code:?}); the run is stored."
            );
            return Ok(());
        }
        anyhow::bail!("QA's tests did not pass (exit {qa_exit_code:?})");
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

/// `prompt/completion/total` tokens, or `-`.
fn usage(u: Option<Usage>) -> String {
    u.map_or("-".into(), |u| {
        format!(
            "{}/{}/{}",
            u.prompt_tokens, u.completion_tokens, u.total_tokens
        )
    })
}

/// The exit code of the last `unittest` run in `s`, and whether it was 0.
fn qa_verdict(s: &Session) -> (Option<i64>, bool) {
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
    counts: &std::collections::HashMap<SessionId, ChunkCounts>,
    qa: Option<i64>,
    home: &Path,
    store: &str,
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
    o.push_str(&lineage_tree(rows, counts));
    let _ = writeln!(o, "```\n\n## Final session\n");
    let conv = out.conversation_len();
    let _ = writeln!(
        o,
        "- id: {}\n- chunks: {} ({conv} conversation, {} evidence)\n- usage: {}",
        out.id(),
        out.len(),
        out.len() - conv,
        usage(out.usage())
    );
    let _ = writeln!(o, "\n## Usage per agent\n");
    let mut total = Usage::default();
    for (agent, u) in out.agent_usage() {
        total += *u;
        let _ = writeln!(o, "- {agent}: {}", usage(Some(*u)));
    }
    let _ = writeln!(o, "- (sum): {}", usage(Some(total)));
    let _ = writeln!(o, "\n## Where things are\n");
    let _ = writeln!(o, "- store: {store}");
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
