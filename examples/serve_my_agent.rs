//! Your own team behind the agent server: one registry, one call. Runs are durable (a
//! journal and an effect ledger in the run store), and LangGraph's SDKs can call it.
//!
//! ```sh
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --features server --example serve_my_agent
//! # then, with the key it prints on a first start:
//! curl -s -H "Authorization: Bearer $KEY" -X POST localhost:8080/threads -d '{}'
//! curl -s -H "Authorization: Bearer $KEY" -X POST localhost:8080/threads/$THREAD/runs/wait \
//!   -H 'content-type: application/json' \
//!   -d '{"assistant_id": "team", "input": {"messages": ["How tall is Mont Blanc?"]}}'
//! ```
//!
//! The store is `$OPENRATH_STORE` (default `sqlite:agent.db`), the address `$RATH_BIND`
//! (default `127.0.0.1:8080`); the model is the one the environment chooses.

use openrath::prelude::*;
use openrath::runtime::WorkflowRegistry;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let registry = WorkflowRegistry::new().register("team", "team v1", || {
        let model = openrath::select::live()?;
        Ok(Sequence::new("team")
            .then(Agent::new(
                "researcher",
                "List the facts needed, briefly.",
                model.clone(),
            ))
            .then(Agent::new(
                "writer",
                "Answer from those facts in one sentence.",
                model,
            )))
    });
    let store = std::env::var("OPENRATH_STORE").unwrap_or_else(|_| "sqlite:agent.db".into());
    let bind = std::env::var("RATH_BIND").unwrap_or_else(|_| "127.0.0.1:8080".into());
    openrath::serve(store, registry).bind(bind).await?;
    Ok(())
}
