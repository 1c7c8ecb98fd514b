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

/// How often a failed run is tried again, and how long it waits in between.
///
/// A run whose workflow failed (a provider that gave up, a tool the workflow could not do
/// without, ...) is queued again until `max_attempts` attempts failed; attempt `n` (1, 2,
/// ...) after a failure waits `backoff * multiplier^(n-1)`, at most `max_backoff`, before a
/// worker may claim it. Failures that another attempt cannot mend (an unknown workflow, a
/// changed definition, a replay mismatch) fail the run at once. The retried attempt
/// replays what the journal recorded, so only the failed part is done again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    pub max_attempts: u32,
    /// The wait before the first retry (ms).
    #[serde(default)]
    pub backoff_ms: u64,
    /// Each further retry waits this many times longer (1: a constant wait).
    #[serde(default = "one")]
    pub multiplier: u32,
    /// The longest wait (ms).
    #[serde(default = "max_backoff")]
    pub max_backoff_ms: u64,
}

fn one() -> u32 {
    1
}

fn max_backoff() -> u64 {
    60_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff_ms: 0,
            multiplier: 1,
            max_backoff_ms: max_backoff(),
        }
    }
}

impl RetryPolicy {
    /// `max_attempts` attempts in all, no wait in between.
    pub fn attempts(max_attempts: u32) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            ..Self::default()
        }
    }

    /// Waits `first` before the first retry, `multiplier` times longer before each further
    /// one, at most `max`.
    pub fn backoff(mut self, first: Duration, multiplier: u32, max: Duration) -> Self {
        self.backoff_ms = u64::try_from(first.as_millis()).unwrap_or(u64::MAX);
        self.multiplier = multiplier.max(1);
        self.max_backoff_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// True when a run that has failed `failures` times (this failure included) is tried
    /// again.
    pub fn retries_after(&self, failures: i64) -> bool {
        failures < i64::from(self.max_attempts)
    }

    /// The wait before the attempt that follows failure number `failures` (1, 2, ...).
    pub fn delay_after(&self, failures: i64) -> Duration {
        let exp = u32::try_from(failures.saturating_sub(1)).unwrap_or(u32::MAX);
        let factor = u64::from(self.multiplier).saturating_pow(exp);
        Duration::from_millis(
            self.backoff_ms
                .saturating_mul(factor)
                .min(self.max_backoff_ms),
        )
    }
}

/// What a run is submitted with besides its workflow and input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    /// The run is `timed_out` once this long from submission passed and it has not
    /// finished: a queued or waiting run when a worker sweeps for overdue runs, a running
    /// one when its worker's deadline timer stops it.
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
    /// Sets the retry policy to `max_attempts` attempts in all, no wait in between.
    pub fn retry(mut self, max_attempts: u32) -> Self {
        self.retry = RetryPolicy::attempts(max_attempts);
        self
    }
    /// Sets the retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
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
    /// No worker claims the run before this time (a retry's backoff; 0: at once).
    pub not_before_ms: i64,
    /// When it times out (submission plus [`RunOptions::deadline`]), if it has a deadline.
    pub deadline_ms: Option<i64>,
}

impl Run {
    /// True when the run has a deadline and `now_ms` is past it.
    pub fn overdue(&self, now_ms: i64) -> bool {
        self.deadline_ms.is_some_and(|d| now_ms > d)
    }
}

/// One entry of a run's event stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvent {
    /// The run.
    pub run: RunId,
    /// Its id: its position in the run's stream (1, 2, ...), increasing by one with every
    /// event (what an SSE stream sends as `id:` and resumes from as `Last-Event-ID`).
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

impl RunEvent {
    /// The status a `status` event moved the run to (`None` for other kinds).
    pub fn status(&self) -> Option<RunStatus> {
        if self.kind != "status" {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&self.detail).ok()?;
        v.get("status")?.as_str()?.parse().ok()
    }
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
