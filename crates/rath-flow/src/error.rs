//! The crate's one error type.

use rath_backend::BackendError;
use rath_memory::MemoryError;
use rath_persist::PersistError;
use rath_provider::ProviderError;
use rath_session::{
    Chunk, ChunkBody, FailedAttempt, Lineage, LineageKind, RunFailure, Session, SessionError,
};

/// Everything that can stop a flow component.
///
/// Tool failures are *not* errors: they become `tool_result` chunks with an `error_kind`
/// and the loop goes on. A `FlowError` means the component itself could not continue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// The model provider failed (after its own retries). Retry later or switch provider.
    #[error("provider failed: {0}")]
    Provider(#[from] ProviderError),
    /// The sandbox machinery failed outside a tool call (e.g. opening the shared sandbox
    /// before a parallel fan-out). Check the placement and the backend's availability.
    #[error("backend failed: {0}")]
    Backend(#[from] BackendError),
    /// Writing or reading a session store failed.
    #[error("persistence failed: {0}")]
    Persist(#[from] PersistError),
    /// A session operation was refused (e.g. a merge of branches on different sandboxes).
    #[error("session operation failed: {0}")]
    Session(#[from] SessionError),
    /// A memory store failed.
    #[error("memory failed: {0}")]
    Memory(#[from] MemoryError),
    /// The run was cancelled. `session` is valid and persistable: every tool call it
    /// requested is either answered or listed as pending work, so it can be resumed.
    #[error("cancelled; partial session {} is valid and resumable", session.id())]
    Cancelled {
        /// The session as it stood when cancellation was observed.
        session: Box<Session>,
    },
    /// Two tools share a name. Rename one of them (or drop a built-in).
    #[error("tool name {name:?} is defined twice; rename one of the tools")]
    ToolNameClash {
        /// The clashing name.
        name: String,
    },
    /// A tool's definition is unusable (e.g. its parameter schema does not compile).
    #[error("tool {name:?} is invalid: {message}")]
    InvalidTool {
        /// The tool.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A pending call needs an `approve` or `reject` decision before the loop can resume.
    #[error(
        "pending call {call_id} of session {session_id} awaits approval; record approve() or \
         reject() before resuming"
    )]
    AwaitingDecision {
        /// The session.
        session_id: String,
        /// The call.
        call_id: String,
    },
    /// A [`crate::Budget`] was spent: the next model call was not sent.
    #[error("budget spent: {used} {what} used of {limit}; the model call was not sent")]
    BudgetSpent {
        /// `steps` (model calls) or `tokens`.
        what: &'static str,
        /// How much was used.
        used: u64,
        /// The limit.
        limit: u64,
        /// The agent whose call was refused.
        agent: Option<String>,
    },
    /// A component is misconfigured (empty parallel, unknown candidate, ...).
    #[error("configuration error: {0}")]
    Config(String),
    /// The run stopped on `error` part way. `session` is the session as far as it got,
    /// ending in a `run_failure` chunk that records the error (kind, message, agent, step,
    /// provider attempts): a valid session to persist, so a failed run is kept, not lost.
    /// The message is `error`'s.
    #[error("{error}")]
    Failed {
        /// What stopped the run.
        error: Box<FlowError>,
        /// The session it had reached, its last chunk the `run_failure`.
        session: Box<Session>,
    },
}

impl FlowError {
    /// The session a failed or cancelled run left behind (see [`FlowError::Failed`] and
    /// [`FlowError::Cancelled`]); `None` for errors raised before any session existed.
    pub fn partial_session(&self) -> Option<&Session> {
        match self {
            FlowError::Failed { session, .. } | FlowError::Cancelled { session } => Some(session),
            _ => None,
        }
    }

    /// Saves `kept` (the sessions a program wants to keep from a failed run, e.g. its root and
    /// agent sessions) and the run's [`FlowError::partial_session`] into `store`, and returns
    /// what was kept; its `Display` is the one line a program prints before exiting.
    ///
    /// ```
    /// use rath_flow::FlowError;
    /// use rath_persist::Store;
    /// use rath_session::{Session, Stamper};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::at(dir.path());
    /// let root = Session::user_with("hi", Stamper::counter());
    /// let err = FlowError::Cancelled { session: Box::new(root.fork()) };
    /// let kept = err.keep_in(&store, [&root])?;
    /// assert_eq!(kept.saved, 2);
    /// assert!(kept.to_string().starts_with("run failed: cancelled"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep_in<'a>(
        &'a self,
        store: &rath_persist::Store,
        kept: impl IntoIterator<Item = &'a Session>,
    ) -> Result<KeptFailure, PersistError> {
        let kept: Vec<&Session> = kept.into_iter().collect();
        let partial = self
            .partial_session()
            .filter(|p| kept.iter().all(|k| k.id() != p.id()));
        let saved = store.save_all(kept.iter().copied().chain(partial))?;
        Ok(KeptFailure {
            error: self
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            saved,
            dir: store.dir().to_path_buf(),
            session: self.partial_session().map(|s| s.id().to_string()),
        })
    }

    /// [`FlowError::keep_in`] for any [`rath_persist::SessionStore`] (SQLite, PostgreSQL, or a
    /// JSONL directory through the trait): the same sessions saved, one transaction each; the
    /// [`KeptFailure`] names the store where `keep_in` names the directory.
    ///
    /// ```
    /// use rath_flow::FlowError;
    /// use rath_persist::{SessionStore, Store};
    /// use rath_session::{Session, Stamper};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::at(dir.path());
    /// let root = Session::user_with("hi", Stamper::counter());
    /// let err = FlowError::Cancelled { session: Box::new(root.fork()) };
    /// let kept = err.keep_in_store(&store, [&root]).await?;
    /// assert_eq!((kept.saved, SessionStore::list(&store).await?.len()), (2, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn keep_in_store<'a>(
        &'a self,
        store: &dyn rath_persist::SessionStore,
        kept: impl IntoIterator<Item = &'a Session>,
    ) -> Result<KeptFailure, PersistError> {
        let kept: Vec<&Session> = kept.into_iter().collect();
        let partial = self
            .partial_session()
            .filter(|p| kept.iter().all(|k| k.id() != p.id()));
        let mut saved = 0;
        for s in kept.iter().copied().chain(partial) {
            store.save(s).await?;
            saved += 1;
        }
        Ok(KeptFailure {
            error: self
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            saved,
            dir: std::path::PathBuf::from(store.name()),
            session: self.partial_session().map(|s| s.id().to_string()),
        })
    }

    /// Like [`FlowError::partial_session`], by value.
    pub fn into_partial_session(self) -> Option<Session> {
        match self {
            FlowError::Failed { session, .. } | FlowError::Cancelled { session } => Some(*session),
            _ => None,
        }
    }

    /// The error itself, without the [`FlowError::Failed`] wrapper.
    pub fn cause(&self) -> &FlowError {
        match self {
            FlowError::Failed { error, .. } => error.cause(),
            e => e,
        }
    }

    /// The failure record of the partial session, if it carries one.
    pub fn failure(&self) -> Option<&RunFailure> {
        self.partial_session().and_then(Session::failure)
    }

    /// The `run_failure` kind of this error: `provider`, `budget_exhausted`, `cancelled`,
    /// `backend`, `persist`, `session`, `memory` or `config`.
    pub fn failure_kind(&self) -> &'static str {
        match self.cause() {
            FlowError::Provider(ProviderError::BudgetExceeded { .. }) => "budget_exhausted",
            FlowError::BudgetSpent { .. } => "budget_exhausted",
            FlowError::Provider(_) => "provider",
            FlowError::Backend(_) => "backend",
            FlowError::Persist(_) => "persist",
            FlowError::Session(_) => "session",
            FlowError::Memory(_) => "memory",
            FlowError::Cancelled { .. } => RunFailure::CANCELLED,
            FlowError::AwaitingDecision { .. } => "awaiting_decision",
            _ => "config",
        }
    }
}

/// Where a failure happened, for its `run_failure` chunk.
#[derive(Clone, Debug, Default)]
pub(crate) struct FailedAt {
    pub agent: Option<String>,
    pub step: &'static str,
    pub round: Option<u64>,
    pub request_id: Option<String>,
}

impl FailedAt {
    pub(crate) fn new(agent: Option<&str>, step: &'static str) -> Self {
        FailedAt {
            agent: agent.map(str::to_owned),
            step,
            ..FailedAt::default()
        }
    }

    pub(crate) fn request(mut self, id: &str) -> Self {
        self.request_id = Some(id.to_owned());
        self
    }
}

/// Every attempt of the failed provider call in `e`, first included (empty when no
/// provider call failed, or none was sent).
pub(crate) fn attempts_of(e: &FlowError) -> Vec<FailedAttempt> {
    let FlowError::Provider(p) = e.cause() else {
        return Vec::new();
    };
    let attempt = |n: u32, err: &ProviderError, error: String| FailedAttempt {
        attempt: n,
        outcome: provider_outcome(err).to_owned(),
        status: err.status(),
        error,
    };
    match p {
        ProviderError::BudgetExceeded { .. } | ProviderError::Config(_) => Vec::new(),
        ProviderError::RetriesExhausted { last, history, .. } => {
            let n = history.len();
            history
                .iter()
                .enumerate()
                .map(|(i, a)| FailedAttempt {
                    attempt: a.attempt,
                    outcome: a.outcome.clone(),
                    status: a.status,
                    // Mode, time, fallback and backoff of every attempt; the last one's
                    // error text too.
                    error: if i + 1 == n {
                        format!("{}: {}", a.describe(), one_line(&last.to_string()))
                    } else {
                        a.describe()
                    },
                })
                .collect()
        }
        other => vec![attempt(1, other, one_line(&other.to_string()))],
    }
}

fn provider_outcome(e: &ProviderError) -> &'static str {
    e.kind()
}

/// `error` with the session it stopped: `session` plus a `run_failure` chunk (a
/// cancellation carries its own session and gets the chunk on that). An error that already
/// carries its failure (an inner component failed) passes through unchanged, and so does
/// one with no session to attach it to.
pub(crate) fn failed(error: FlowError, session: Option<Session>, at: FailedAt) -> FlowError {
    match error {
        FlowError::Failed { .. } => error,
        FlowError::Cancelled { session } => {
            if session.failure().is_some() {
                return FlowError::Cancelled { session };
            }
            let chunk = failure_chunk(
                RunFailure::CANCELLED,
                "the run was cancelled".to_owned(),
                Vec::new(),
                at,
            );
            FlowError::Cancelled {
                session: Box::new(session.push(chunk)),
            }
        }
        // Not a failure of a run: a resume that waits for a reviewer.
        e @ FlowError::AwaitingDecision { .. } => e,
        error => match session {
            None => error,
            Some(session) => {
                let attempts = attempts_of(&error);
                let chunk = failure_chunk(
                    error.failure_kind(),
                    one_line(&error.to_string()),
                    attempts,
                    at,
                );
                FlowError::Failed {
                    error: Box::new(error),
                    session: Box::new(session.push(chunk)),
                }
            }
        },
    }
}

fn failure_chunk(kind: &str, message: String, attempts: Vec<FailedAttempt>, at: FailedAt) -> Chunk {
    Chunk::new(ChunkBody::RunFailure(RunFailure {
        kind: kind.to_owned(),
        message,
        agent: at.agent,
        step: at.step.to_owned(),
        round: at.round,
        request_id: at.request_id,
        attempts,
    }))
}

/// `error` as the failure of a step that had `input` in hand: a new session derived from
/// `input` (parents `[input]`, `operator`, kind `op_annotate`) carries the `run_failure`, so
/// no stored session is rewritten (the context records it when the failure comes back
/// through [`crate::FlowContext::forward`]). Errors that already carry their session pass through.
pub(crate) fn fail_from(
    error: FlowError,
    input: &Session,
    operator: &'static str,
    at: FailedAt,
) -> FlowError {
    if error.partial_session().is_some() || matches!(error, FlowError::AwaitingDecision { .. }) {
        return failed(error, None, at);
    }
    let lineage = Lineage::new(vec![input.id().clone()], operator, LineageKind::OpAnnotate);
    let out = carry_usage(input, input.derive(lineage));
    failed(error, Some(out), at)
}

/// `text` on one line (newlines and runs of whitespace become one space).
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What [`FlowError::keep_in`] stored of a failed run. Displayed as one line:
///
/// ```text
/// run failed: <error>; <n> sessions saved in <dir> (failed session <id>; `rath show <id>` says why)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptFailure {
    /// The error's text on one line.
    pub error: String,
    /// How many sessions were saved.
    pub saved: usize,
    /// The store's directory ([`FlowError::keep_in_store`]: the store's name).
    pub dir: std::path::PathBuf,
    /// The failed session's id, if the run left one.
    pub session: Option<String>,
}

impl std::fmt::Display for KeptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.session.as_deref().unwrap_or("-");
        write!(
            f,
            "run failed: {}; {} sessions saved in {} (failed session {id}; `rath show {id}` \
             says why)",
            self.error,
            self.saved,
            self.dir.display()
        )
    }
}

/// `to` with `from`'s cumulative usage and per-agent attribution.
pub(crate) fn carry_usage(from: &Session, to: Session) -> Session {
    to.with_usage_totals(from.usage(), from.agent_usage().clone())
}
