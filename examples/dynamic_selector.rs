//! A Selector routes among three self-describing agents (researcher, writer, reviewer) until
//! the reviewer approves; every decision is recorded as a `route_decision` chunk.
//!
//! ```sh
//! cargo run --release --example dynamic_selector          # offline, function decider
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example dynamic_selector
//! RATH_PROVIDER=anthropic ANTHROPIC_API_KEY=... ANTHROPIC_MODEL=... cargo run --release --example dynamic_selector
//! ```
//!
//! Offline the decider is a deterministic function that reads the session's evidence (which
//! agents have answered, and whether the reviewer approved); live a model decides from the
//! candidates' descriptions. Ids are fresh UUIDv7s on every run, so runs sharing a store never
//! collide; pass `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a
//! fixed clock (the same bytes every run: give each such run its own OPENRATH_HOME).

use std::sync::Arc;

use openrath::flow::{Candidate, Decision, FlowEvent};
use openrath::persist::SessionRecorder;
use openrath::prelude::*;

const TASK: &str = "Write a two-sentence release note for rath 1.2, which adds session \
                    compression and a bubblewrap sandbox.";

/// The live model from the environment (short answers for small local models), or `script`.
fn model(
    live: bool,
    script: Vec<ScriptedResponse>,
    name: &str,
) -> anyhow::Result<Arc<dyn Provider>> {
    if live {
        // What RATH_PROVIDER (or the key set) chooses: the wire, retries, a token budget.
        return Ok(openrath::select::live()?);
    }
    Ok(Arc::new(
        ScriptedProvider::new(script).named(format!("scripted:{name}")),
    ))
}

/// The agents whose model calls are on record in `s`, in order.
fn agents_who_spoke(s: &Session) -> Vec<String> {
    let calls = s.chunks().iter().filter_map(|c| match c.body() {
        ChunkBody::ModelCall(m) => m.agent.clone(),
        _ => None,
    });
    calls.collect()
}

/// The offline decider: the first candidate that has not answered yet runs next; then the
/// reviewer after every new draft; done once the reviewer approves, else back to the writer.
fn route(s: &Session, candidates: &[Candidate]) -> Decision {
    let spoke = agents_who_spoke(s);
    let has = |a: &str| {
        spoke
            .iter()
            .any(|x| x == a || x.ends_with(&format!(".{a}")))
    };
    if let Some(next) = candidates.iter().find(|c| !has(&c.name)) {
        let why = format!("not heard from yet; it {}", next.description.to_lowercase());
        return Decision::to(next.name.clone(), why);
    }
    let last = spoke.last().map(String::as_str).unwrap_or_default();
    if !last.ends_with("reviewer") {
        return Decision::to("reviewer", "the draft changed since the last review");
    }
    if s.final_text().is_some_and(|t| t.contains("APPROVED")) {
        Decision::done("the reviewer approved the draft")
    } else {
        Decision::to("writer", "the reviewer asked for changes")
    }
}

fn team(live: bool) -> anyhow::Result<Selector> {
    let facts = "Facts: - SummaryCompressor records dropped chunk digests. - The isolated \
                 backend runs tools under bubblewrap with no network.";
    let researcher = Agent::new(
        "researcher",
        "You collect the facts the release note needs, as a short bullet list.",
        model(
            live,
            vec![ScriptedResponse::text(facts).usage(70, 30)],
            "researcher",
        )?,
    )
    .describe("Collects the facts for the note.");
    let draft = "rath 1.2 adds session compression that records the digest of every dropped \
                 chunk. Tools can now run in a bubblewrap sandbox without network access.";
    let writer = Agent::new(
        "writer",
        "You write the release note from the facts, two sentences.",
        model(
            live,
            vec![ScriptedResponse::text(draft).usage(120, 36)],
            "writer",
        )?,
    )
    .describe("Drafts the note from the facts.");
    let verdict = ScriptedResponse::text("APPROVED: accurate, two sentences.").usage(160, 8);
    let reviewer = Agent::new(
        "reviewer",
        "You review the draft. Answer APPROVED if it is accurate and two sentences, else list \
         the changes needed.",
        model(live, vec![verdict], "reviewer")?,
    )
    .describe("Checks the draft and approves it or asks for changes.");
    let selector = if live {
        Selector::by_model("router", model(true, Vec::new(), "router")?)
    } else {
        Selector::by_function("router", route)
    };
    Ok(selector
        .describe("Routes researcher -> writer -> reviewer until the reviewer approves.")
        .candidate(researcher)
        .candidate(writer)
        .candidate(reviewer)
        .max_steps(if live { 3 } else { 8 }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let live = openrath::select::live_requested();
    // `--store URL` or $OPENRATH_STORE, else the JSONL directory $OPENRATH_HOME/sessions.
    let store = openrath::run_store::RunStore::from_args().await?;
    let mode = if live {
        openrath::select::describe()
    } else {
        "offline, function decider, scripted agents".to_owned()
    };
    println!("dynamic_selector ({mode}), store {store}");

    // Every session the run makes is recorded (and saved at the end, or when it fails); each
    // new route decision is printed as it is made.
    let recorder = SessionRecorder::new();
    let cx = FlowContext::new().with_observer({
        let recorder = recorder.clone();
        move |ev: &FlowEvent<'_>| {
            if let FlowEvent::Session { session } = ev
                && recorder.record(session)
                && session.lineage().operator == "Selector.route"
                && let Some(ChunkBody::RouteDecision(r)) = session.last().map(|x| x.body())
            {
                let choice = r.choice.as_deref().unwrap_or("done");
                println!("  route -> {choice} ({}; by {})", r.reason, r.decided_by);
            }
        }
    });
    let root = Session::user_with(TASK, Stamper::from_env());
    println!("  task: {TASK}");
    let out = match cx.forward(&team(live)?, root).await {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, &recorder.sessions()).await?;
            eprintln!("dynamic_selector: {kept}");
            std::process::exit(1);
        }
    };
    let saved = store.save_all(&recorder.sessions()).await?;
    println!("  saved {saved} sessions to {store}");

    println!("\nRoute decisions (route_decision chunks of the final session):");
    let decisions: Vec<_> = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::RouteDecision(r) => Some(r),
            _ => None,
        })
        .collect();
    for (i, d) in decisions.iter().enumerate() {
        let choice = d.choice.as_deref().unwrap_or("done");
        println!(
            "  {}. {} -> {choice}: {} [{}]",
            i + 1,
            d.selector,
            d.reason,
            d.decided_by
        );
    }
    println!("Final answer: {}", out.final_text().unwrap_or("(none)"));
    println!(
        "Summary: {} decisions, {saved} sessions saved to {}",
        decisions.len(),
        store
    );
    Ok(())
}
