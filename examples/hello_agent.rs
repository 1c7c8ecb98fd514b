//! One agent, one typed tool (`word_count`), one session loop, saved to the store.
//!
//! ```sh
//! cargo run --release --example hello_agent          # offline, scripted model
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example hello_agent
//! RATH_PROVIDER=anthropic ANTHROPIC_API_KEY=... ANTHROPIC_MODEL=... cargo run --release --example hello_agent
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME). Sessions go to the
//! store the OPENRATH_HOME rules resolve ($OPENRATH_HOME, else ./.openrath, else ~/.openrath).

use std::sync::Arc;

use openrath::flow::FlowEvent;
use openrath::prelude::*;
use serde::Deserialize;

const QUESTION: &str = "How many words are in 'the quick brown fox jumps'? Use word_count.";

/// The tool's arguments; the derive gives the model their JSON Schema.
#[derive(Deserialize, JsonSchema)]
struct WordCountArgs {
    /// The text whose whitespace-separated words are counted.
    text: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let live = openrath::select::live_requested();
    // `--store URL` or $OPENRATH_STORE, else the JSONL directory $OPENRATH_HOME/sessions.
    let store = openrath::run_store::RunStore::from_args().await?;
    let mode = if live {
        openrath::select::describe()
    } else {
        "offline, scripted model".to_owned()
    };
    println!("hello_agent ({mode}), store {store}");

    let word_count = typed_tool(
        "word_count",
        "Count the whitespace-separated words of a text.",
        |_cx, a: WordCountArgs| async move { Ok(json!({"words": a.text.split_whitespace().count()})) },
    );
    // Live: the OpenAI-compatible server from the environment, kept short for small local
    // models. Offline: a script that calls the tool, then answers.
    let model: Arc<dyn Provider> = if live {
        // What RATH_PROVIDER (or the key set) chooses: the wire, retries, a token budget.
        openrath::select::live()?
    } else {
        Arc::new(
            ScriptedProvider::new(vec![
                ScriptedResponse::tool_calls(vec![(
                    "call_wc",
                    "word_count",
                    json!({"text": "the quick brown fox jumps"}),
                )])
                .usage(60, 14),
                ScriptedResponse::text("There are 5 words.").usage(90, 7),
            ])
            .named("scripted:hello"),
        )
    };

    let user = Session::user_with(QUESTION, Stamper::from_env());
    let agent = Session::system_with(
        "You are a precise assistant. Count words with the word_count tool, then answer.",
        user.stamper().clone(),
    );
    println!("  user: {QUESTION}");
    let cx = FlowContext::new().with_observer(|ev: &FlowEvent<'_>| {
        if let FlowEvent::ToolEnd { call, outcome, .. } = ev {
            println!("  tool {} -> {outcome}", call.function.name);
        }
    });
    let rounds = if live { 1 } else { 4 };
    let run = SessionLoop::new(model, ToolSet::new().with(word_count)?)
        .with_agent_name("hello")
        .with_options(LoopOptions::default().max_tool_rounds(rounds))
        .run(&user, &agent, &cx)
        .await;
    let out = match run {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, [&user, &agent]).await?;
            eprintln!("hello_agent: {kept}");
            std::process::exit(1);
        }
    };
    println!("  session loop finished");
    let saved = store.save_all([&user, &agent, &out]).await?;
    println!("  saved {saved} sessions to {store}");

    println!("\nTranscript:");
    for c in out.conversation() {
        let line = match (c.text(), c.body()) {
            (Some(t), _) if !t.is_empty() => t.to_owned(),
            (_, ChunkBody::Assistant(a)) => {
                let calls = a.tool_calls.iter().flatten();
                let calls: Vec<String> = calls
                    .map(|t| format!("{}({})", t.function.name, t.function.arguments))
                    .collect();
                format!("(calls {})", calls.join(", "))
            }
            _ => String::new(),
        };
        println!("  {:>12}: {line}", c.kind().as_str());
    }
    println!("Usage: {}", usage(out.usage()));
    for (agent, u) in out.agent_usage() {
        println!("  {agent}: {}", usage(Some(*u)));
    }
    println!("Store: {store} (session {})", out.id());
    Ok(())
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
