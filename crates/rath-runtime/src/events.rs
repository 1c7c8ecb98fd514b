//! A run's event stream, pushed: [`EventSubscription`] yields every event after a given
//! id, in order, without a gap or a duplicate, and waits for the next one.
//!
//! ```
//! use std::time::Duration;
//! use rath_runtime::{RunId, RunOptions, RunStore};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store = RunStore::connect(&format!("sqlite:{}", dir.path().join("runs.db").display())).await?;
//! let id = store
//!     .submit(RunId("run_1".into()), "greet", "hash", "in", &RunOptions::default())
//!     .await?;
//! let mut events = store.subscribe(&id, 0).await?;
//! let first = events.next().await?;
//! assert_eq!((first.seq, first.kind.as_str()), (1, "status"));
//! store.cancel(&id).await?;
//! let second = events.next().await?;
//! assert_eq!(second.seq, 2);
//! assert_eq!(second.status(), Some(rath_runtime::RunStatus::Cancelled));
//! // Nothing more: a bounded wait says so.
//! assert!(events.next_within(Duration::from_millis(50)).await?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every event of a run has an id, its position `seq` (1, 2, ...), given in the same
//! transaction that writes it while the run's lease row is locked (PostgreSQL) or the
//! database is (SQLite `BEGIN IMMEDIATE`), so ids commit in order. The id is what an SSE
//! stream sends as `id:` and takes back as `Last-Event-ID`.
//!
//! How the push works: every write that adds an event notifies its store's in-process hub
//! after it commits; on PostgreSQL the transaction also runs `pg_notify('rt_events', run)`,
//! which PostgreSQL delivers at commit to one `LISTEN rt_events` connection per store
//! (sqlx `PgListener`) that feeds the same hub. A notification only says "this run has
//! something new": the subscription then reads the table after the last id it yielded, so
//! a notification lost (a listener reconnecting, another process writing the same SQLite
//! file) costs at most [`EventSubscription::fallback`] of delay, never an event.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rath_flow::CancellationToken;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{OnceCell, broadcast};

use crate::RuntimeError;
use crate::model::{RunEvent, RunId};
use crate::store::RunStore;

/// The PostgreSQL channel event writes notify.
pub const CHANNEL: &str = "rt_events";

/// One store's notifications: run ids whose events grew.
#[derive(Debug)]
pub(crate) struct Hub {
    tx: broadcast::Sender<Arc<str>>,
    /// Runs whose status a write of this process moved, but for claims (a claim moves a
    /// run to `running`, which nothing waits for): what [`Runtime::wait`](crate::Runtime::wait)
    /// reads again on.
    moved: broadcast::Sender<Arc<str>>,
    /// A run was queued by this process (submitted, or put back by an operator's decision):
    /// wakes an idle worker of this process at once instead of at its next poll (a permit
    /// is kept when none waits, so a claim that was in flight is followed by another).
    queued: tokio::sync::Notify,
    listener: OnceCell<()>,
    stop: CancellationToken,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(4096).0,
            moved: broadcast::channel(4096).0,
            queued: tokio::sync::Notify::new(),
            listener: OnceCell::new(),
            stop: CancellationToken::new(),
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Hub {
    /// Tells this process's subscribers that `run` has new events (after the commit).
    pub(crate) fn notify(&self, run: &str) {
        let _ = self.tx.send(Arc::from(run));
    }

    /// Tells this process's subscribers and waiters that `run` has new events, one of
    /// them a status change (after the commit).
    pub(crate) fn notify_moved(&self, run: &str) {
        let run: Arc<str> = Arc::from(run);
        let _ = self.tx.send(run.clone());
        let _ = self.moved.send(run);
    }

    /// Tells an idle worker of this process that a run is queued (after the commit).
    pub(crate) fn notify_queued(&self) {
        self.queued.notify_one();
    }

    /// Resolves once a run is queued by this process (see [`Hub::notify_queued`]).
    pub(crate) async fn queued(&self) {
        self.queued.notified().await;
    }

    pub(crate) fn receiver(&self) -> broadcast::Receiver<Arc<str>> {
        self.tx.subscribe()
    }

    /// The runs whose status this process's writes moved (see [`Hub::notify_moved`]).
    pub(crate) fn moves(&self) -> broadcast::Receiver<Arc<str>> {
        self.moved.subscribe()
    }

    /// Starts (once per store) the task that forwards `NOTIFY rt_events` into the hub.
    pub(crate) async fn listen_postgres(&self, pool: &PgPool) -> Result<(), RuntimeError> {
        self.listener
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(pool).await?;
                listener.listen(CHANNEL).await?;
                let tx = self.tx.clone();
                let stop = self.stop.clone();
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            got = listener.recv() => match got {
                                Ok(n) => {
                                    let _ = tx.send(Arc::from(n.payload()));
                                }
                                Err(e) => {
                                    // recv reconnects on its next call; what was notified
                                    // meanwhile is found by the subscriptions' fallback reads.
                                    tracing::warn!(error = %e, "run events listener");
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                            },
                        }
                    }
                });
                Ok::<(), RuntimeError>(())
            })
            .await?;
        Ok(())
    }
}

/// A subscription to one run's events: [`EventSubscription::next`] yields them in id
/// order, each once, starting after the id it was opened with (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct EventSubscription {
    store: RunStore,
    run: RunId,
    last: i64,
    rx: broadcast::Receiver<Arc<str>>,
    buf: VecDeque<RunEvent>,
    fallback: Duration,
}

impl EventSubscription {
    pub(crate) fn new(
        store: RunStore,
        run: RunId,
        after: i64,
        rx: broadcast::Receiver<Arc<str>>,
    ) -> Self {
        Self {
            store,
            run,
            last: after,
            rx,
            buf: VecDeque::new(),
            fallback: Duration::from_millis(500),
        }
    }

    /// How long a wait goes without a notification before the table is read anyway (for
    /// writers in other processes on SQLite, and notifications lost on reconnect); 500 ms
    /// unless set.
    pub fn fallback(mut self, every: Duration) -> Self {
        self.fallback = every.max(Duration::from_millis(1));
        self
    }

    /// The run followed.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    /// The id of the last event yielded (or the id the subscription was opened after).
    pub fn last_id(&self) -> i64 {
        self.last
    }

    /// The next event, waiting as long as it takes.
    pub async fn next(&mut self) -> Result<RunEvent, RuntimeError> {
        loop {
            if let Some(ev) = self.poll().await? {
                return Ok(ev);
            }
            self.wait(self.fallback).await;
        }
    }

    /// The next event, or `None` when none came within `timeout` (an SSE keep-alive tick).
    pub async fn next_within(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<RunEvent>, RuntimeError> {
        let until = crate::later(timeout);
        loop {
            if let Some(ev) = self.poll().await? {
                return Ok(Some(ev));
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Ok(None);
            }
            self.wait(self.fallback.min(until - now)).await;
        }
    }

    /// An event already buffered or in the table after the last one yielded.
    async fn poll(&mut self) -> Result<Option<RunEvent>, RuntimeError> {
        if self.buf.is_empty() {
            let got = self.store.events(&self.run, self.last).await?;
            self.buf
                .extend(got.into_iter().filter(|e| e.seq > self.last));
        }
        Ok(self.buf.pop_front().inspect(|ev| self.last = ev.seq))
    }

    /// Waits for a notification about this run (or any sign one may have been missed),
    /// at most `at_most`.
    async fn wait(&mut self, at_most: Duration) {
        let sleep = tokio::time::sleep(at_most);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                got = self.rx.recv() => match got {
                    Ok(run) if *run == *self.run.as_str() => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut sleep).await;
                        return;
                    }
                },
            }
        }
    }
}
