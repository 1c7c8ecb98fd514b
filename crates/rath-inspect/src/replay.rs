//! `rath replay`: re-ask a cassette for every model turn of a stored session and compare.
//!
//! ```no_run
//! use rath_inspect::StoreView;
//!
//! let view = StoreView::open(".openrath")?;
//! let report = view.replay(&view.resolve("0003")?, "run.jsonl".as_ref())?;
//! println!("{}", report.render()); // "identical" or the first difference
//! # Ok::<(), rath_inspect::InspectError>(())
//! ```

use std::future::Future;
use std::path::Path;
use std::task::{Context, Poll, Waker};

use rath_provider::{Interaction, Provider, ProviderRequest, ReplayProvider};
use rath_session::{AssistantPayload, ChatMessage, Role, SessionId};
use serde::Serialize;
use serde_json::Value;

use super::{InspectError, StoreView};

/// The outcome of replaying one session's model turns against a cassette.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The session replayed.
    pub session: SessionId,
    /// The cassette file name.
    pub cassette: String,
    /// Model turns (assistant messages) in the session.
    pub turns: usize,
    /// Turns replayed before the first difference (all of them when identical).
    pub replayed: usize,
    /// Recorded interactions in the cassette.
    pub recorded: usize,
    /// Recorded interactions no turn of this session used (other agents' calls, or calls the
    /// session no longer makes).
    pub unused: usize,
    /// True when every turn got back exactly the stored assistant reply.
    pub identical: bool,
    /// The first turn whose replayed reply differs, when one does.
    pub first_difference: Option<ReplayDifference>,
}

/// Where a replay first disagreed with the stored session.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ReplayDifference {
    /// Model turn index (0 = the session's first assistant message).
    pub index: usize,
    /// Index of that assistant message in the session's conversation.
    pub message: usize,
    /// The stored assistant reply (`{content, tool_calls}`).
    pub expected: Value,
    /// What the cassette answered, or `{"error": ...}` when it has no matching request.
    pub got: Value,
}

impl ReplayReport {
    /// Human text: `identical` or the first difference.
    pub fn render(&self) -> String {
        let head = format!(
            "session {} against {} ({} model turns, {} recorded interactions, {} unused)\n",
            self.session, self.cassette, self.turns, self.recorded, self.unused
        );
        match &self.first_difference {
            None => format!("{head}identical\n"),
            Some(d) => format!(
                "{head}different at model turn {} (conversation message {}), after {} identical turn(s)\n  expected: {}\n  got:      {}\n",
                d.index,
                d.message,
                self.replayed,
                compact(&d.expected),
                compact(&d.got)
            ),
        }
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Drives a future that never waits on I/O (the replay provider answers from memory).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

fn without_system(messages: &[ChatMessage]) -> &[ChatMessage] {
    let n = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    &messages[n..]
}

fn read_cassette(path: &Path) -> Result<Vec<Interaction>, InspectError> {
    let bad = |message: String| InspectError::Cassette {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let it: Interaction = serde_json::from_str(line)
            .map_err(|e| bad(format!("line {}: not a cassette interaction: {e}", n + 1)))?;
        out.push(it);
    }
    if out.is_empty() {
        return Err(bad("the cassette holds no interactions".to_owned()));
    }
    Ok(out)
}

fn payload_value(p: &AssistantPayload) -> Value {
    serde_json::to_value(p).unwrap_or(Value::Null)
}

impl StoreView {
    /// Replays every model turn of session `id` against the cassette at `cassette`, offline.
    ///
    /// Each assistant message's request is rebuilt from the conversation before it: the
    /// recorded request whose messages (leading system prompt aside) equal that prefix is sent
    /// to a [`ReplayProvider`] and its reply compared with the stored assistant message.
    pub fn replay(&self, id: &SessionId, cassette: &Path) -> Result<ReplayReport, InspectError> {
        let session = self.load(id)?.session;
        let mut recorded = Recorded::new(read_cassette(cassette)?);
        let messages = session.messages();
        let turns = messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let mut replayed = 0;
        let mut first_difference = None;
        for (p, msg) in messages.iter().enumerate() {
            if msg.role != Role::Assistant {
                continue;
            }
            let expected = AssistantPayload {
                content: msg.content.clone(),
                tool_calls: msg.tool_calls.clone(),
            };
            match recorded.answer(without_system(&messages[..p]), p) {
                Ok(got) if got == expected => replayed += 1,
                other => {
                    first_difference = Some(ReplayDifference {
                        index: replayed,
                        message: p,
                        expected: payload_value(&expected),
                        got: match other {
                            Ok(got) => payload_value(&got),
                            Err(error) => serde_json::json!({ "error": error }),
                        },
                    });
                    break;
                }
            }
        }
        Ok(ReplayReport {
            session: id.clone(),
            cassette: cassette.file_name().map_or_else(
                || cassette.display().to_string(),
                |f| f.to_string_lossy().into_owned(),
            ),
            turns,
            replayed,
            recorded: recorded.interactions.len(),
            unused: recorded.taken.iter().filter(|t| !**t).count(),
            identical: first_difference.is_none(),
            first_difference,
        })
    }
}

/// A cassette being replayed: its interactions, the messages each recorded request sent,
/// which of them a turn has used, and a provider that answers from them.
struct Recorded {
    /// The cassette's interactions, in file order.
    interactions: Vec<Interaction>,
    /// The `messages` of each interaction's request (`None` when it has none readable).
    messages: Vec<Option<Vec<ChatMessage>>>,
    /// True for each interaction a turn has used.
    taken: Vec<bool>,
    /// Answers a recorded request from the cassette.
    provider: ReplayProvider,
}

impl Recorded {
    /// The cassette of `interactions`, none of them used yet.
    fn new(interactions: Vec<Interaction>) -> Self {
        let provider = ReplayProvider::from_interactions(interactions.clone());
        let messages = interactions
            .iter()
            .map(|it| {
                it.request
                    .get("messages")
                    .and_then(|m| serde_json::from_value(m.clone()).ok())
            })
            .collect();
        Self {
            taken: vec![false; interactions.len()],
            interactions,
            messages,
            provider,
        }
    }

    /// What the cassette answers the model turn at conversation message `p`, whose messages
    /// before it (system prompt aside) are `prefix`: the first unused recorded request with
    /// those messages is marked used and sent to the replay provider; an error says why
    /// there is no answer.
    fn answer(&mut self, prefix: &[ChatMessage], p: usize) -> Result<AssistantPayload, String> {
        let hit = (0..self.interactions.len()).find(|&i| {
            !self.taken[i]
                && self.messages[i]
                    .as_deref()
                    .is_some_and(|m| without_system(m) == prefix)
        });
        let Some(i) = hit else {
            return Err(format!(
                "no recorded request has the {} message(s) before this turn",
                prefix.len()
            ));
        };
        self.taken[i] = true;
        let mut request = self.interactions[i].request.clone();
        if let Value::Object(map) = &mut request {
            map.insert("request_id".into(), Value::String(format!("replay_{p}")));
        }
        match serde_json::from_value::<ProviderRequest>(request) {
            Err(e) => Err(format!("recorded request {i} is unreadable: {e}")),
            Ok(req) => block_on(self.provider.complete(&req))
                .map(|r| r.payload())
                .map_err(|e| e.to_string()),
        }
    }
}
