//! The README's quick example: an agent with a typed tool on a scripted model, its session
//! saved to the store. `cargo run --example quick_agent` (add `-- --store sqlite://FILE` for
//! another store); a test checks the README shows this file's code and runs it.

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
    let model = ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("c1", "word_count", json!({"text": "a b c"}))]),
        ScriptedResponse::text("There are 3 words."),
    ]);
    let agent = Agent::new("counter", "Count words with the tool.", model)
        .with_tools(ToolSet::new().with(word_count)?);

    let question = Session::user_with("How many words are in 'a b c'?", Stamper::from_env());
    let answer = agent.run(question).await?;
    println!("{}", answer.final_text().unwrap_or("-"));

    // `--store URL` or $OPENRATH_STORE, else the JSONL directory $OPENRATH_HOME/sessions.
    let store = openrath::run_store::RunStore::from_args().await?;
    store.save_all([&answer]).await?;
    println!("saved {} to {store}", answer.id());
    Ok(())
}
