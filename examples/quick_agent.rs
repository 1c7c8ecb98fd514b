//! The README's quick example: an agent with a typed tool on a scripted model (or a real one
//! when the environment names one), its whole lineage saved to the store, and a failed run
//! kept. `cargo run --example quick_agent` (add `-- --store sqlite://FILE` for another
//! store); a test checks the README shows this file's code and runs it, also failing.

use std::sync::Arc;

use openrath::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The text to count the words of.
    text: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let word_count = typed_tool("word_count", "Count words.", |_cx, a: Args| async move {
        Ok(json!({"words": a.text.split_whitespace().count()}))
    });
    // A real model when the environment names one (OPENAI_BASE_URL, ANTHROPIC_API_KEY, ...).
    let model: Arc<dyn Provider> = match openrath::select::live_provider()? {
        Some(live) => live,
        None => Arc::new(ScriptedProvider::new(vec![
            ScriptedResponse::tool_calls(vec![("c1", "word_count", json!({"text": "a b c"}))]),
            ScriptedResponse::text("There are 3 words."),
        ])),
    };
    let agent = Agent::new("counter", "Count words with the tool.", model)
        .with_tools(ToolSet::new().with(word_count)?);

    // `--store URL` or $OPENRATH_STORE, else the JSONL directory $OPENRATH_HOME/sessions.
    let store = openrath::run_store::RunStore::from_args().await?;
    let question = Session::user_with("How many words are in 'a b c'?", Stamper::from_env());
    // The context records every session the run makes: the question, the agent's system
    // prompt and the answer (the answer names the other two as its parents).
    let cx = FlowContext::new();
    match cx.forward(&agent, question).await {
        Ok(answer) => {
            println!("{}", answer.final_text().unwrap_or("-"));
            let saved = store.save_all(&cx.journal().sessions()).await?;
            println!(
                "saved {saved} sessions to {store}; the answer is {}",
                answer.id()
            );
        }
        Err(e) => {
            // A failed run is kept, not lost: what it made, and the session it stopped in,
            // ending in a record of why (`rath show <id>` prints it).
            let kept = store.keep_failed(&e, &cx.journal().sessions()).await?;
            eprintln!("quick_agent: {kept}");
            std::process::exit(1);
        }
    }
    Ok(())
}
