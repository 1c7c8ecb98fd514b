//! `hello_agent`: one agent, one typed tool (`word_count`), one session loop; the transcript
//! and the usage are printed and both sessions go to the store.
//!
//! Offline (the default) the model answers from a script; with `OPENAI_BASE_URL` set the
//! OpenAI-compatible provider from the environment answers instead.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rath_flow::{
    FlowContext, LoopOptions, SessionLoop, ToolContext, ToolError, ToolSet, typed_tool,
};
use rath_persist::Store;
use rath_provider::{Provider, ScriptedProvider, ScriptedResponse, StackConfig};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

use super::DemoError;
use crate::inspect::usage_text;

/// The question the agent answers.
pub const QUESTION: &str = "How many words are in 'the quick brown fox jumps'? Use word_count.";

/// How to run a small demo: where the store is, live or scripted, progress lines or silent.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DemoConfig {
    /// The OpenRath home; sessions go to `<home>/sessions`.
    pub home: PathBuf,
    /// Use the OpenAI-compatible provider from the environment instead of scripts.
    pub live: bool,
    /// Print a progress line per step.
    pub progress: bool,
    /// Counter ids and clock ([`Stamper::counter`]) instead of unique UUIDv7 ids: the same
    /// bytes on every run, so one run per store. See [`super::deterministic_requested`].
    pub deterministic: bool,
}

impl DemoConfig {
    /// Offline, scripted, silent, unique ids, writing under `home`.
    pub fn offline(home: impl Into<PathBuf>) -> Self {
        DemoConfig {
            home: home.into(),
            live: false,
            progress: false,
            deterministic: false,
        }
    }

    /// `home` from the OPENRATH_HOME rules; live when `OPENAI_BASE_URL` is set; progress on;
    /// deterministic when `--deterministic` or `OPENRATH_DETERMINISTIC=1` is given.
    pub fn from_env() -> Self {
        DemoConfig {
            home: rath_persist::openrath_home(),
            live: std::env::var("OPENAI_BASE_URL").is_ok_and(|v| !v.trim().is_empty()),
            progress: true,
            deterministic: super::deterministic_requested(),
        }
    }

    /// Sets [`DemoConfig::deterministic`].
    pub fn deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }

    /// The stamper the demo's root sessions start from (see [`super::demo_stamper`]).
    pub fn stamper(&self) -> Stamper {
        super::demo_stamper(self.deterministic)
    }

    /// The sessions directory (`<home>/sessions`).
    pub fn store_dir(&self) -> PathBuf {
        self.home.join("sessions")
    }

    /// Prints `line` when progress is on.
    pub fn step(&self, line: impl AsRef<str>) {
        if self.progress {
            println!("  {}", line.as_ref());
        }
    }

    /// Saves `sessions` to [`DemoConfig::store_dir`] (never replacing another run's file; see
    /// [`save_all`]), reports it as a step, and returns the directory.
    pub fn save_sessions(&self, sessions: &[Session]) -> Result<PathBuf, DemoError> {
        let store_dir = self.store_dir();
        save_all(&store_dir, sessions)?;
        self.step(format!(
            "saved {} sessions to {}",
            sessions.len(),
            super::engineering_team::display(&store_dir)
        ));
        Ok(store_dir)
    }
}

/// Completion tokens per model call in a live run, unless the configuration sets a limit:
/// small local models ramble, and every token costs time.
pub const LIVE_MAX_TOKENS: u32 = 96;

/// Tool rounds per session loop in a live run (offline scripts set their own pace).
pub const LIVE_MAX_TOOL_ROUNDS: usize = 1;

/// Select-and-run steps of a selector in a live run.
pub const LIVE_MAX_STEPS: usize = 3;

/// `options` bounded for a live run ([`LIVE_MAX_TOOL_ROUNDS`]); unchanged offline.
pub fn bounded(live: bool, options: LoopOptions) -> LoopOptions {
    if live {
        let rounds = options.max_tool_rounds.min(LIVE_MAX_TOOL_ROUNDS);
        options.max_tool_rounds(rounds)
    } else {
        options
    }
}

/// The live provider from the environment — the standard stack
/// ([`rath_provider::StackConfig`]: OpenAI wire, retry, budget), temperature 0, seed 0 and
/// at most [`LIVE_MAX_TOKENS`] per call unless configured otherwise — or `script` as a
/// scripted provider named `name`.
pub fn provider(
    live: bool,
    script: Vec<ScriptedResponse>,
    name: &str,
) -> Result<Arc<dyn Provider>, DemoError> {
    if live {
        let mut stack = StackConfig::from_env()?;
        let wire = &mut stack.openai;
        wire.max_tokens = wire.max_tokens.or(Some(LIVE_MAX_TOKENS));
        wire.temperature = wire.temperature.or(Some(0.0));
        wire.seed = wire.seed.or(Some(0));
        Ok(Arc::new(stack.build()?))
    } else {
        Ok(Arc::new(
            ScriptedProvider::new(script).named(format!("scripted:{name}")),
        ))
    }
}

/// Saves `sessions` to the store at `dir`. A file already stored under one of their ids is
/// left alone when it holds the same session, and is an error
/// ([`rath_persist::PersistError::Exists`]) when it holds another: a run never replaces
/// another run's sessions (with unique ids that cannot happen; with `--deterministic`, use a
/// fresh store per run).
pub fn save_all(dir: &Path, sessions: &[Session]) -> Result<Store, DemoError> {
    let store = Store::at(dir);
    for s in sessions {
        store.save(s)?;
    }
    Ok(store)
}

/// What `hello_agent` left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HelloReport {
    /// The loop's output session.
    pub session: Session,
    /// The word count the tool returned.
    pub tool_words: Option<u64>,
    /// The sessions directory written.
    pub store_dir: PathBuf,
    /// Sessions written (user, agent, loop output).
    pub sessions: usize,
    /// Transcript and usage, as printed.
    pub summary: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WordCountArgs {
    /// The text whose whitespace-separated words are counted.
    text: String,
}

/// Runs one agent with one tool through one session loop and saves the sessions.
pub async fn run(config: DemoConfig) -> Result<HelloReport, DemoError> {
    let word_count = typed_tool(
        "word_count",
        "Count the whitespace-separated words of a text.",
        |_cx: ToolContext, a: WordCountArgs| async move {
            Ok::<_, ToolError>(json!({"words": a.text.split_whitespace().count()}))
        },
    );
    let tools = ToolSet::new().with(word_count)?;
    let provider = provider(
        config.live,
        vec![
            ScriptedResponse::tool_calls(vec![(
                "call_wc",
                "word_count",
                json!({"text": "the quick brown fox jumps"}),
            )])
            .usage(60, 14),
            ScriptedResponse::text("There are 5 words.").usage(90, 7),
        ],
        "hello",
    )?;
    let user = Session::user_with(QUESTION, config.stamper());
    let agent = Session::system_with(
        "You are a precise assistant. Count words with the word_count tool, then answer.",
        user.stamper().clone(),
    );
    config.step(format!("user: {QUESTION}"));
    let cx = FlowContext::new().with_observer({
        let progress = config.progress;
        move |ev: &rath_flow::FlowEvent<'_>| {
            if progress && let rath_flow::FlowEvent::ToolEnd { call, outcome, .. } = ev {
                println!("  tool {} -> {outcome}", call.function.name);
            }
        }
    });
    let store_dir = config.store_dir();
    let out = SessionLoop::new(provider, tools)
        .with_agent_name("hello")
        .with_options(bounded(
            config.live,
            LoopOptions::default().max_tool_rounds(4),
        ))
        .run(&user, &agent, &cx)
        .await
        .map_err(|e| super::keep_failed(&store_dir, vec![user.clone(), agent.clone()], e))?;
    config.step("session loop finished");

    save_all(&store_dir, &[user, agent, out.clone()])?;
    config.step(format!(
        "saved 3 sessions to {}",
        super::engineering_team::display(&store_dir)
    ));

    let tool_words = out.chunks().iter().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r) => serde_json::from_str::<serde_json::Value>(&r.content)
            .ok()
            .and_then(|v| v["words"].as_u64()),
        _ => None,
    });
    let mut summary = String::from("Transcript:\n");
    for c in out.chunks().iter() {
        let line = match c.body() {
            ChunkBody::ModelCall(_) | ChunkBody::ToolEvidence(_) => continue,
            _ => match c.text() {
                Some(t) if !t.is_empty() => t.to_owned(),
                _ => match c.body() {
                    ChunkBody::Assistant(a) => format!(
                        "(calls {})",
                        a.tool_calls
                            .iter()
                            .flatten()
                            .map(|t| format!("{}({})", t.function.name, t.function.arguments))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => String::new(),
                },
            },
        };
        let _ = writeln!(summary, "  {:>12}: {line}", c.kind().as_str());
    }
    let _ = writeln!(summary, "Usage: {}", usage_text(out.usage()));
    for (agent, u) in out.agent_usage() {
        let _ = writeln!(summary, "  {agent}: {}", usage_text(Some(*u)));
    }
    let _ = writeln!(
        summary,
        "Store: {} (session {})",
        super::engineering_team::display(&store_dir),
        out.id()
    );
    Ok(HelloReport {
        session: out,
        tool_words,
        store_dir,
        sessions: 3,
        summary,
    })
}
