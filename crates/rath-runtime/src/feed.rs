//! What a run does as it happens, for watchers in the same process: the reply text as the
//! model streams it and each agent's step as it ends. Nothing here is stored (the run's
//! events and sessions are the record; the final reply is a chunk like any other), and
//! nothing is kept for a watcher that comes late or reads slowly: a feed is a window on
//! the run's present.
//!
//! ```
//! use rath_runtime::{FeedEvent, RunFeed, RunId};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let feed = RunFeed::new();
//! let run = RunId("run_1".into());
//! let mut watching = feed.subscribe(&run);
//! assert!(feed.watched(&run));
//!
//! // The worker running `run` publishes (here by hand).
//! let publisher = feed.publisher(&run);
//! publisher.send(FeedEvent::Token { agent: Some("helper".into()), reply: 0, text: "Hel".into() });
//! drop(publisher);
//!
//! match watching.recv().await.as_deref() {
//!     Some(FeedEvent::Token { text, .. }) => assert_eq!(text, "Hel"),
//!     other => panic!("{other:?}"),
//! }
//! drop(watching);
//! assert!(!feed.watched(&run)); // nobody left: nothing kept
//! # });
//! ```
//!
//! A worker installs a [`FeedObserver`] on the context of each run it executes
//! ([`crate::Worker`] does so on every claim); its session loops then make streamed model
//! calls while someone watches the run and plain ones while nobody does. The server's
//! event streams subscribe ([`RunFeed::subscribe`]) before the run is queued, so they miss
//! nothing the worker publishes. A worker in another process publishes to its own feed:
//! its watchers are in its process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rath_flow::{FlowEvent, Observer};
use rath_session::Session;
use tokio::sync::broadcast;

use crate::model::RunId;

/// Events a watcher may fall behind by before the oldest are dropped for it.
pub const FEED_CAPACITY: usize = 1024;

/// Something a run did just now.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum FeedEvent {
    /// A piece of reply text as the model streamed it.
    Token {
        /// The agent (or selector, compressor) whose reply it is.
        agent: Option<String>,
        /// Which model reply of this attempt it belongs to (0, 1, ...: one per model call
        /// the attempt made, replayed ones included, so the same reply has the same number
        /// on every attempt).
        reply: u64,
        /// The text.
        text: String,
    },
    /// An agent finished a step (one forward: its model rounds and tool calls).
    Step {
        /// The agent.
        agent: String,
        /// The session it returned.
        output: Session,
        /// Where in `output` what the agent added begins (the length of the session it was
        /// given, when `output` continues it; 0 otherwise).
        from: usize,
    },
}

/// One run's channel and how many publishers hold it.
struct Slot {
    tx: broadcast::Sender<Arc<FeedEvent>>,
    publishers: usize,
}

/// The feeds of the runs of one process: cheap to clone, shared by a
/// [`crate::Runtime`]'s clones (its workers publish, its servers subscribe). Memory is
/// bounded by the runs being watched: a watcher makes a run's channel, publishers join it,
/// and it exists while either holds it, with at most [`FEED_CAPACITY`] events a slow
/// watcher has not read. A run nobody watches costs no channel.
#[derive(Clone, Default)]
pub struct RunFeed {
    slots: Arc<Mutex<HashMap<RunId, Slot>>>,
}

impl std::fmt::Debug for RunFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunFeed")
            .field("runs", &self.lock().len())
            .finish()
    }
}

impl RunFeed {
    /// An empty feed.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, Slot>> {
        // A panic while the map was held leaves it consistent (every update is one map
        // operation), so a poisoned lock is taken as it is.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watches `run`: every event published for it from now on, until the receiver is
    /// dropped.
    pub fn subscribe(&self, run: &RunId) -> FeedReceiver {
        let rx = self
            .lock()
            .entry(run.clone())
            .or_insert_with(|| Slot {
                tx: broadcast::channel(FEED_CAPACITY).0,
                publishers: 0,
            })
            .tx
            .subscribe();
        FeedReceiver {
            feed: self.clone(),
            run: run.clone(),
            rx: Some(rx),
            missed: 0,
        }
    }

    /// Publishes for `run` until the publisher is dropped. No channel is made for it: it
    /// joins the run's channel once a watcher has made one (a worker publishes for every
    /// run it executes, and most are never watched).
    pub fn publisher(&self, run: &RunId) -> FeedPublisher {
        let p = FeedPublisher {
            feed: self.clone(),
            run: run.clone(),
            tx: Mutex::new(None),
        };
        drop(p.joined());
        p
    }

    /// The sender of `run`'s channel when a watcher has made one, counting one more
    /// publisher on it.
    fn join(&self, run: &RunId) -> Option<broadcast::Sender<Arc<FeedEvent>>> {
        let mut slots = self.lock();
        let slot = slots.get_mut(run)?;
        slot.publishers += 1;
        Some(slot.tx.clone())
    }

    /// True while someone watches `run`.
    pub fn watched(&self, run: &RunId) -> bool {
        self.lock()
            .get(run)
            .is_some_and(|s| s.tx.receiver_count() > 0)
    }

    /// Runs with a channel now (watched or being published), for tests and metrics.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Drops `run`'s channel once nobody holds it.
    fn release(&self, run: &RunId, publisher: bool) {
        let mut slots = self.lock();
        if let Some(slot) = slots.get_mut(run) {
            if publisher {
                slot.publishers = slot.publishers.saturating_sub(1);
            }
            if slot.publishers == 0 && slot.tx.receiver_count() == 0 {
                slots.remove(run);
            }
        }
    }
}

/// Publishes one run's events (see [`RunFeed::publisher`]).
pub struct FeedPublisher {
    feed: RunFeed,
    run: RunId,
    /// The run's channel, once a watcher made one and this publisher joined it.
    tx: Mutex<Option<broadcast::Sender<Arc<FeedEvent>>>>,
}

impl std::fmt::Debug for FeedPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedPublisher")
            .field("run", &self.run)
            .finish()
    }
}

impl FeedPublisher {
    /// The run's channel, joined now if a watcher has made one since.
    fn joined(&self) -> MutexGuard<'_, Option<broadcast::Sender<Arc<FeedEvent>>>> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if tx.is_none() {
            *tx = self.feed.join(&self.run);
        }
        tx
    }

    /// True while someone watches the run.
    pub fn watched(&self) -> bool {
        self.joined()
            .as_ref()
            .is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// Sends `event` to the run's watchers (nothing when there are none).
    pub fn send(&self, event: FeedEvent) {
        if let Some(tx) = self.joined().as_ref().filter(|tx| tx.receiver_count() > 0) {
            let _ = tx.send(Arc::new(event));
        }
    }
}

impl Drop for FeedPublisher {
    fn drop(&mut self) {
        let joined = self
            .tx
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if joined {
            self.feed.release(&self.run, true);
        }
    }
}

/// Watches one run (see [`RunFeed::subscribe`]).
pub struct FeedReceiver {
    feed: RunFeed,
    run: RunId,
    rx: Option<broadcast::Receiver<Arc<FeedEvent>>>,
    missed: u64,
}

impl std::fmt::Debug for FeedReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedReceiver")
            .field("run", &self.run)
            .field("missed", &self.missed)
            .finish()
    }
}

impl FeedReceiver {
    /// The next event; pending for good while nothing is published (select it against
    /// the run's end). Events a slow reader fell [`FEED_CAPACITY`] behind on are skipped and
    /// counted ([`FeedReceiver::missed`]).
    pub async fn recv(&mut self) -> Option<Arc<FeedEvent>> {
        let rx = self.rx.as_mut()?;
        loop {
            match rx.recv().await {
                Ok(e) => return Some(e),
                Err(broadcast::error::RecvError::Lagged(n)) => self.missed += n,
                // The slot keeps a sender while it exists, and it exists while this
                // receiver does: never closed. Pend rather than spin if it ever is.
                Err(broadcast::error::RecvError::Closed) => {
                    return std::future::pending().await;
                }
            }
        }
    }

    /// The next event if one is waiting, without waiting (skipped events are counted as
    /// by [`FeedReceiver::recv`]).
    pub fn try_recv(&mut self) -> Option<Arc<FeedEvent>> {
        let rx = self.rx.as_mut()?;
        loop {
            match rx.try_recv() {
                Ok(e) => return Some(e),
                Err(broadcast::error::TryRecvError::Lagged(n)) => self.missed += n,
                Err(_) => return None,
            }
        }
    }

    /// Events skipped because this reader fell too far behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }
}

impl Drop for FeedReceiver {
    fn drop(&mut self) {
        // The receiver goes first, so the count the release reads no longer includes it.
        drop(self.rx.take());
        self.feed.release(&self.run, false);
    }
}

/// An [`Observer`] that publishes a run's streamed reply text and agent steps to its feed,
/// and wants text deltas only while someone watches (so model calls are streamed only
/// then).
pub struct FeedObserver {
    publisher: FeedPublisher,
    state: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    /// Model calls begun.
    replies: u64,
    /// The current reply's number, per agent (`None`: calls made outside any agent).
    current: HashMap<Option<String>, u64>,
    /// Input lengths of the agents working now, innermost last.
    started: HashMap<String, Vec<usize>>,
}

impl std::fmt::Debug for FeedObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedObserver")
            .field("publisher", &self.publisher)
            .finish()
    }
}

impl FeedObserver {
    /// Publishes through `publisher`.
    pub fn new(publisher: FeedPublisher) -> Self {
        Self {
            publisher,
            state: Mutex::new(Tally::default()),
        }
    }

    fn tally(&self) -> MutexGuard<'_, Tally> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Observer for FeedObserver {
    fn on_event(&self, event: &FlowEvent<'_>) {
        match event {
            FlowEvent::Request { agent, .. } => {
                let mut t = self.tally();
                let n = t.replies;
                t.replies += 1;
                t.current.insert(agent.map(str::to_owned), n);
            }
            FlowEvent::TextDelta { agent, text } => {
                if !self.publisher.watched() {
                    return;
                }
                let agent = agent.map(str::to_owned);
                let reply = self.tally().current.get(&agent).copied().unwrap_or(0);
                self.publisher.send(FeedEvent::Token {
                    agent,
                    reply,
                    text: (*text).to_owned(),
                });
            }
            FlowEvent::AgentStart { agent, session } => {
                self.tally()
                    .started
                    .entry((*agent).to_owned())
                    .or_default()
                    .push(session.len());
            }
            FlowEvent::AgentEnd { agent, outcome } => {
                let given = self
                    .tally()
                    .started
                    .get_mut(*agent)
                    .and_then(Vec::pop)
                    .unwrap_or(0);
                if let Ok(output) = outcome {
                    let from = if output.len() >= given { given } else { 0 };
                    self.publisher.send(FeedEvent::Step {
                        agent: (*agent).to_owned(),
                        output: (*output).clone(),
                        from,
                    });
                }
            }
            _ => {}
        }
    }

    fn wants_text_deltas(&self) -> bool {
        self.publisher.watched()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> FeedEvent {
        FeedEvent::Token {
            agent: None,
            reply: 0,
            text: text.into(),
        }
    }

    #[tokio::test]
    async fn a_run_s_channel_lives_while_someone_holds_it_and_no_longer() {
        let feed = RunFeed::new();
        let run = RunId("r".into());
        // Published with nobody watching: nothing sent, nothing kept.
        let p = feed.publisher(&run);
        assert!(!p.watched());
        p.send(token("lost"));
        let mut w = feed.subscribe(&run);
        assert!(p.watched() && feed.watched(&run));
        p.send(token("seen"));
        assert!(
            matches!(w.try_recv().as_deref(), Some(FeedEvent::Token { text, .. }) if text == "seen")
        );
        assert!(w.try_recv().is_none());
        // The publisher goes first: the channel stays for the watcher.
        drop(p);
        assert_eq!(feed.open(), 1);
        drop(w);
        assert_eq!(feed.open(), 0);
        // The watcher goes first: the channel stays for the publisher.
        let w = feed.subscribe(&run);
        let p = feed.publisher(&run);
        drop(w);
        assert_eq!(feed.open(), 1);
        assert!(!feed.watched(&run));
        drop(p);
        assert_eq!(feed.open(), 0);
    }

    #[tokio::test]
    async fn a_slow_watcher_skips_what_it_fell_behind_on_and_counts_it() {
        let feed = RunFeed::new();
        let run = RunId("r".into());
        let mut w = feed.subscribe(&run);
        let p = feed.publisher(&run);
        for i in 0..FEED_CAPACITY + 10 {
            p.send(token(&i.to_string()));
        }
        let first = w.recv().await.unwrap();
        assert!(matches!(&*first, FeedEvent::Token { text, .. } if text == "10"));
        assert_eq!(w.missed(), 10);
    }

    #[test]
    fn the_observer_numbers_replies_and_reports_what_each_agent_added() {
        let feed = RunFeed::new();
        let run = RunId("r".into());
        let mut w = feed.subscribe(&run);
        let obs = FeedObserver::new(feed.publisher(&run));
        assert!(obs.wants_text_deltas());
        let given = Session::user("hi");
        let req = rath_provider::ProviderRequest::from_session(&given, vec![]);
        obs.on_event(&FlowEvent::AgentStart {
            agent: "a",
            session: &given,
        });
        for text in ["x", "y"] {
            obs.on_event(&FlowEvent::Request {
                agent: Some("a"),
                request: &req,
            });
            obs.on_event(&FlowEvent::TextDelta {
                agent: Some("a"),
                text,
            });
        }
        let out = given.push(rath_session::Chunk::assistant_text("xy"));
        obs.on_event(&FlowEvent::AgentEnd {
            agent: "a",
            outcome: Ok(&out),
        });
        let got: Vec<_> = std::iter::from_fn(|| w.try_recv()).collect();
        assert!(matches!(&*got[0], FeedEvent::Token { reply: 0, text, .. } if text == "x"));
        assert!(matches!(&*got[1], FeedEvent::Token { reply: 1, text, .. } if text == "y"));
        assert!(
            matches!(&*got[2], FeedEvent::Step { agent, from: 1, output } if agent == "a" && output.len() == 2)
        );
        drop(w);
        assert!(!obs.wants_text_deltas(), "nobody watches: calls unstreamed");
    }
}
