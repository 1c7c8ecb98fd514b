//! The run model: ids, statuses, options, the run record and its events.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::RuntimeError;

/// A run's id (`run_` and 26 hex digits from the submitter's stamper).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

impl RunId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The seed of the run's stamper: the same run mints the same ids on every worker.
    pub fn seed(&self) -> u64 {
        let d = crate::sha256_hex(self.0.as_bytes());
        u64::from_str_radix(&d[..16], 16).unwrap_or(0)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Submitted (or handed back), waiting for a worker.
    Queued,
    /// A worker holds its lease.
    Running,
    /// Stopped on an approval-gated call; a decision requeues it.
    Waiting,
    /// Finished; its output session is stored.
    Succeeded,
    /// Finished with an error (retries spent).
    Failed,
    /// Cancelled by an operator.
    Cancelled,
    /// Its deadline passed before it finished.
    TimedOut,
    /// Stopped on an ambiguous non-idempotent call; a person resolves it.
    NeedsReview,
}

impl RunStatus {
    /// Every status.
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::TimedOut,
        RunStatus::NeedsReview,
    ];

    /// The stored name (`queued`, `needs_review`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
            RunStatus::NeedsReview => "needs_review",
        }
    }

    /// True for a status no worker moves the run out of.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled | RunStatus::TimedOut
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| crate::error::corrupt("run status", s))
    }
}

/// How often a failed run is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 1 }
    }
}

/// What a run is submitted with besides its workflow and input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    /// The run is `timed_out` when a worker finds it unfinished after this long from
    /// submission.
    #[serde(default, with = "opt_millis")]
    pub deadline: Option<Duration>,
    /// Retries of a failed workflow.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Free-form tags (shown by `rath runs list`).
    #[serde(default)]
    pub tags: Vec<String>,
}

impl RunOptions {
    /// Sets the deadline.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d);
        self
    }
    /// Sets the retry policy.
    pub fn retry(mut self, max_attempts: u32) -> Self {
        self.retry = RetryPolicy { max_attempts };
        self
    }
    /// Adds a tag.
    pub fn tag(mut self, t: impl Into<String>) -> Self {
        self.tags.push(t.into());
        self
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// A run as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The registered workflow's name.
    pub workflow: String,
    /// The workflow's definition hash at submission.
    pub definition_hash: String,
    /// The input session's id (in the session store).
    pub input_session: String,
    /// Submission options.
    pub options: RunOptions,
    /// Where it is.
    pub status: RunStatus,
    /// Claims so far (a crash-and-resume makes two).
    pub attempts: i64,
    /// Failed attempts (what the retry policy counts).
    pub failures: i64,
    /// The session a claim forwards: the input, or the stopped session after a decision.
    pub resume_session: Option<String>,
    /// Resumptions after a decision (the journal's segment).
    pub segment: i64,
    /// The output session's id once it finished or stopped.
    pub output_session: Option<String>,
    /// The last error, or the ambiguous call under review (JSON).
    pub detail: Option<String>,
    /// Submission time (ms since the Unix epoch).
    pub submitted_ms: i64,
}

/// One entry of a run's event stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvent {
    /// The run.
    pub run: RunId,
    /// Its position in the run's stream (1, 2, ...).
    pub seq: i64,
    /// `status`, `claimed`, `step`, `session`, `fenced`, ...
    pub kind: String,
    /// Event detail (JSON text).
    pub detail: String,
    /// The worker that wrote it (`operator` for a person's command).
    pub by: String,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
}

/// A worker's hold on a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The run.
    pub run: RunId,
    /// The worker holding it.
    pub worker: String,
    /// The fencing token every write of this worker carries.
    pub token: i64,
    /// Expiry (ms since the Unix epoch); a heartbeat moves it.
    pub expires_ms: i64,
}

/// A tool call's effect-ledger state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectState {
    /// Recorded before anything happened.
    Prepared,
    /// Handed to the tool; its answer is not recorded yet.
    Dispatched,
    /// The tool answered with a result.
    Succeeded,
    /// The tool answered with a failure.
    Failed,
    /// Dispatched by a worker that died before recording the answer (non-idempotent tool).
    Ambiguous,
}

impl EffectState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectState::Prepared => "prepared",
            EffectState::Dispatched => "dispatched",
            EffectState::Succeeded => "succeeded",
            EffectState::Failed => "failed",
            EffectState::Ambiguous => "ambiguous",
        }
    }
}

impl FromStr for EffectState {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            EffectState::Prepared,
            EffectState::Dispatched,
            EffectState::Succeeded,
            EffectState::Failed,
            EffectState::Ambiguous,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
        .ok_or_else(|| crate::error::corrupt("effect state", s))
    }
}

/// One row of the effect ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// The run.
    pub run: RunId,
    /// The step path (`segment/agent`).
    pub step: String,
    /// The tool call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// sha256 of run, step path, call id and canonical arguments (hex).
    pub idempotency_key: String,
    /// The arguments (canonical JSON).
    pub args: String,
    /// Its state.
    pub state: EffectState,
    /// The recorded answer (`{"ok": ..}` JSON) once there is one.
    pub result: Option<String>,
}
