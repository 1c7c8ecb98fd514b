//! An agent with two typed tools, run on a scripted model or, when `OPENAI_BASE_URL` is set,
//! on that OpenAI-compatible server; the session is saved to the store given as the first
//! argument. Depends on `openrath`, `serde` and `tokio` only.

use std::sync::Arc;

use openrath::prelude::*;
use serde::Deserialize;

/// `word_count`'s arguments: the derive resolves through the prelude's `schemars`.
#[derive(Deserialize, JsonSchema)]
struct WordCount {
    /// The text whose whitespace-separated words are counted.
    text: String,
}

/// `shout`'s arguments: the derive named through the facade, with the crate path spelled out.
#[derive(Deserialize, openrath::JsonSchema)]
#[schemars(crate = "openrath::schemars")]
struct Shout {
    /// The text to upper-case.
    text: String,
}

const QUESTION: &str = "How many words are in 'the quick brown fox jumps'? Use word_count.";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store_dir = std::env::args().nth(1).ok_or("usage: outside-agent STORE_DIR")?;

    let word_count = typed_tool(
        "word_count",
        "Count the whitespace-separated words of a text.",
        |_cx, a: WordCount| async move {
            Ok(json!({"words": a.text.split_whitespace().count()}))
        },
    );
    let shout = typed_tool(
        "shout",
        "Upper-case a text.",
        |_cx, a: Shout| async move {
            Ok(json!({"text": a.text.to_uppercase()}))
        },
    );
    let tools = ToolSet::new().with(word_count)?.with(shout)?;

    let live = std::env::var("OPENAI_BASE_URL").is_ok_and(|v| !v.is_empty());
    let model: Arc<dyn Provider> = if live {
        Arc::new(OpenAiProvider::new(OpenAiConfig::from_env()?)?)
    } else {
        Arc::new(ScriptedProvider::new(vec![
            ScriptedResponse::tool_calls(vec![(
                "call_1",
                "word_count",
                json!({"text": "the quick brown fox jumps"}),
            )]),
            ScriptedResponse::text("There are 5 words."),
        ]))
    };

    let agent = Agent::new("counter", "Count words with the word_count tool.", model)
        .with_tools(tools);
    let out = agent
        .run(Session::user_with(QUESTION, Stamper::counter()))
        .await?;

    let path = Store::at(&store_dir).save(&out)?;
    println!("provider: {}", if live { "openai-compatible" } else { "scripted" });
    println!("answer: {}", out.final_text().unwrap_or("-"));
    println!("saved: {} {}", out.id(), path.display());
    Ok(())
}
