//! `dynamic_selector`: a [`Selector`] routes among three self-describing agents (researcher,
//! writer, reviewer) until done. Offline the decider is a deterministic function that reads
//! the session's evidence (which agents have answered, and whether the reviewer approved);
//! live (`OPENAI_BASE_URL` set) a model decides from the candidates' descriptions. Either
//! way every decision is recorded in the session as a `route_decision` chunk.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rath_flow::{Agent, Candidate, Decision, FlowContext, FlowEvent, Selector, Workflow};
use rath_provider::ScriptedResponse;
use rath_session::{ChunkBody, RouteDecision, Session, SessionId};

use super::DemoError;
use super::hello_agent::{DemoConfig, LIVE_MAX_STEPS, provider};

const TASK: &str = "Write a two-sentence release note for rath 1.2, which adds session \
                    compression and a bubblewrap sandbox.";

/// What `dynamic_selector` left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SelectorReport {
    /// The final session.
    pub final_session: Session,
    /// The route decisions recorded in the final session, in order.
    pub decisions: Vec<RouteDecision>,
    /// The sessions directory written.
    pub store_dir: PathBuf,
    /// Sessions written.
    pub sessions: usize,
}

fn agents_who_spoke(s: &Session) -> Vec<String> {
    s.chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ModelCall(m) => m.agent.clone(),
            _ => None,
        })
        .collect()
}

/// The deterministic decider: the first candidate (in the order offered) that has not
/// answered yet runs next; then the reviewer after every new draft; done once the reviewer's
/// last answer approves, else back to the writer.
pub fn route(s: &Session, candidates: &[Candidate]) -> Decision {
    let spoke = agents_who_spoke(s);
    let has = |a: &str| {
        spoke
            .iter()
            .any(|x| x == a || x.ends_with(&format!(".{a}")))
    };
    if let Some(next) = candidates.iter().find(|c| !has(&c.name)) {
        return Decision::to(
            next.name.clone(),
            format!("not heard from yet; it {}", next.description.to_lowercase()),
        );
    }
    let last = spoke.last().map(String::as_str).unwrap_or_default();
    if !last.ends_with("reviewer") {
        return Decision::to("reviewer", "the draft changed since the last review");
    }
    let approved = rath_flow::final_text(s).is_some_and(|t| t.contains("APPROVED"));
    if approved {
        Decision::done("the reviewer approved the draft")
    } else {
        Decision::to("writer", "the reviewer asked for changes")
    }
}

fn team(live: bool) -> Result<Selector, DemoError> {
    let researcher = Agent::new(
        "researcher",
        "You collect the facts the release note needs, as a short bullet list.",
        provider(
            live,
            vec![
                ScriptedResponse::text(
                    "Facts: - SummaryCompressor records dropped chunk digests. - The isolated \
                     backend runs tools under bubblewrap with no network.",
                )
                .usage(70, 30),
            ],
            "researcher",
        )?,
    )
    .describe("Collects the facts for the note.");
    let writer = Agent::new(
        "writer",
        "You write the release note from the facts, two sentences.",
        provider(
            live,
            vec![
                ScriptedResponse::text(
                    "rath 1.2 adds session compression that records the digest of every dropped \
                     chunk. Tools can now run in a bubblewrap sandbox without network access.",
                )
                .usage(120, 36),
            ],
            "writer",
        )?,
    )
    .describe("Drafts the note from the facts.");
    let reviewer = Agent::new(
        "reviewer",
        "You review the draft. Answer APPROVED if it is accurate and two sentences, else list \
         the changes needed.",
        provider(
            live,
            vec![ScriptedResponse::text("APPROVED: accurate, two sentences.").usage(160, 8)],
            "reviewer",
        )?,
    )
    .describe("Checks the draft and approves it or asks for changes.");
    let selector = if live {
        Selector::by_model("router", provider(true, Vec::new(), "router")?)
    } else {
        Selector::by_function("router", route)
    };
    Ok(selector
        .describe("Routes researcher -> writer -> reviewer until the reviewer approves.")
        .candidate(researcher)
        .candidate(writer)
        .candidate(reviewer)
        .max_steps(if live { LIVE_MAX_STEPS } else { 8 }))
}

/// Runs the selector and saves every session it produced.
pub async fn run(config: DemoConfig) -> Result<SelectorReport, DemoError> {
    let collected: Arc<Mutex<(Vec<SessionId>, Vec<Session>)>> = Arc::default();
    let sink = collected.clone();
    let progress = config.progress;
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            let mut c = sink.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = c.0.iter().position(|id| id == session.id()) {
                c.1[i] = (*session).clone();
            } else {
                c.0.push(session.id().clone());
                c.1.push((*session).clone());
                if progress
                    && session.lineage().operator == "Selector.route"
                    && let Some(ChunkBody::RouteDecision(r)) = session.last().map(|x| x.body())
                {
                    println!(
                        "  route -> {} ({}; by {})",
                        r.choice.as_deref().unwrap_or("done"),
                        r.reason,
                        r.decided_by
                    );
                }
            }
        }
    });
    let root = Session::user_with(TASK, config.stamper());
    config.step(format!("task: {TASK}"));
    cx.record(&root);
    let out = match team(config.live)?.forward(root, &cx).await {
        Ok(out) => out,
        Err(e) => {
            let so_far = super::sessions_so_far(&collected);
            return Err(super::keep_failed(&config.store_dir(), so_far, e));
        }
    };
    cx.record(&out);

    let sessions = super::sessions_so_far(&collected);
    let store_dir = config.save_sessions(&sessions)?;
    let decisions = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::RouteDecision(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    Ok(SelectorReport {
        final_session: out,
        decisions,
        store_dir,
        sessions: sessions.len(),
    })
}

/// The last assistant text of `s`, or `(none)`.
pub fn final_answer(s: &Session) -> &str {
    rath_flow::final_text(s).unwrap_or("(none)")
}
