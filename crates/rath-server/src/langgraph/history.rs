//! A thread's checkpoints, read only as far as an answer needs them.
//!
//! Every conversation message a run adds is a checkpoint whose values are the thread's
//! messages up to it. Building every checkpoint's values up front copies the conversation
//! once per message: quadratic in a thread's length, so a run of 250,000 messages made one
//! `history` call with `limit: 1` take gigabytes. Even one state's values, built whole, cost
//! several times the answer: the run's sessions loaded, each message converted and held.
//!
//! [`History`] instead holds, per run, the ids and lengths of its input and output sessions
//! and where the output's added messages are. Whether the output extends the input the
//! store usually knows from how it keeps them (`SessionStore::known_to_extend`: a run's
//! output is saved as a fork of its input); otherwise both are compared a window of
//! [`WINDOW`] chunks at a time. A state is a [`Planned`] answer whose messages are read,
//! converted and written a window at a time while the answer is sent
//! ([`super::body::Answer`]). A call costs memory in proportion to a window, not to the
//! thread, and reads only the chunks it answers.

use serde_json::{Map, Value, json};

use rath_persist::PersistError;
use rath_session::{Chunk, SessionId};

use super::LgError;
use super::convert::settled;
use super::derived_uuid;
use super::rfc3339;
use super::threads::{Checkpoint, Loaded, ThreadState, interrupts, reached_id};
use crate::AppState;
use rath_runtime::RunStatus;

/// How many chunks a history read holds at once.
pub(crate) const WINDOW: usize = 16_384;

/// How many chunks to read at once from `state`'s session store: [`WINDOW`] from a store
/// that reads part of a session (one that shares structure: the SQL stores), else the whole
/// session in one read, since such a store loads it whole for any window (reading it a
/// window at a time would load it once per window).
pub(crate) fn window_of(state: &AppState) -> usize {
    if state.runtime.sessions().capabilities().shared_structure {
        WINDOW
    } else {
        usize::MAX
    }
}

/// A run's input session, when the session the run reached extends it.
struct Input {
    id: SessionId,
    len: usize,
}

/// One run's checkpoints, without their values.
struct RunSteps {
    /// Index of the run in the thread's runs.
    run: usize,
    /// The input the output extends (`None`: it does not, and the run has one state).
    input: Option<Input>,
    out: SessionId,
    out_len: usize,
    /// Positions in the output, past the input, of the conversation chunks the run added.
    added: Vec<usize>,
    /// When the run reached the output: its newest event.
    out_ms: i64,
}

impl RunSteps {
    fn count(&self) -> usize {
        if self.input.is_some() {
            1 + self.added.len()
        } else {
            1
        }
    }
}

/// One checkpoint, without its values.
struct Step<'h> {
    /// Index of its run in [`History::runs`].
    entry: usize,
    source: &'static str,
    /// The session this state is, or is a prefix of, and how many chunks of it (the
    /// state's messages are those chunks' conversation).
    session: &'h SessionId,
    len: usize,
    created_ms: i64,
    last_of_run: bool,
}

/// A state to answer: everything but its messages, and where to read those.
pub(crate) struct Planned {
    /// The state, its `values` left `null`.
    pub(crate) state: ThreadState,
    /// The session whose first `len` chunks hold its messages.
    pub(crate) messages: Option<(SessionId, usize)>,
}

/// A thread's checkpoints, oldest first, whose states are built on demand.
pub(crate) struct History<'a> {
    t: &'a Loaded,
    runs: Vec<RunSteps>,
    /// The index of each entry's first checkpoint.
    starts: Vec<usize>,
    total: usize,
    /// The interrupts of the newest state when its run waits for a decision.
    waiting: Vec<Value>,
}

/// Chunks `range` of `id`, read through the runtime's store.
async fn window(
    state: &AppState,
    id: &SessionId,
    range: std::ops::Range<usize>,
) -> Result<Vec<Chunk>, LgError> {
    Ok(state.runtime.sessions().read_chunks(id, range).await?)
}

/// True when `out` starts with the first `len` chunks of `input`: known from how the store
/// keeps them (a run's output is saved as a fork of its input), else read from both a window
/// at a time.
async fn extends(
    state: &AppState,
    input: &SessionId,
    out: &SessionId,
    len: usize,
) -> Result<bool, LgError> {
    if state.runtime.sessions().known_to_extend(out, input).await? {
        return Ok(true);
    }
    let step = window_of(state);
    let mut at = 0;
    while at < len {
        let end = at.saturating_add(step).min(len);
        let a = window(state, input, at..end).await?;
        let b = window(state, out, at..end).await?;
        if a.len() != end - at || a != b {
            return Ok(false);
        }
        at = end;
    }
    Ok(true)
}

/// The positions of the conversation chunks of `out` in `from..to`.
async fn conversation_at(
    state: &AppState,
    out: &SessionId,
    from: usize,
    to: usize,
) -> Result<Vec<usize>, LgError> {
    let mut found = Vec::new();
    let step = window_of(state);
    let mut at = from;
    while at < to {
        let chunks = window(state, out, at..at.saturating_add(step).min(to)).await?;
        if chunks.is_empty() {
            break;
        }
        found.extend(
            chunks
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_conversation())
                .map(|(i, _)| at + i),
        );
        at += chunks.len();
    }
    Ok(found)
}

impl<'a> History<'a> {
    /// The checkpoints of thread `t`: for each run that reached a session, its input session,
    /// then the prefix of the session it reached after each conversation message the run
    /// added (only the whole session when it does not extend its input).
    pub(crate) async fn of(state: &AppState, t: &'a Loaded) -> Result<History<'a>, LgError> {
        let store = state.runtime.sessions();
        let mut runs = Vec::new();
        for (i, (_, run)) in t.runs.iter().enumerate() {
            let Some(out) = reached_id(state, run).await? else {
                continue;
            };
            let Some(out_len) = store.stored_len(&out).await? else {
                continue;
            };
            let input_id = SessionId::new(&run.input_session);
            let Some(input_len) = store.stored_len(&input_id).await? else {
                return Err(PersistError::NotFound {
                    id: input_id.to_string(),
                    dir: store.name().into(),
                }
                .into());
            };
            // Times from the run, not the session: a worker stamps a run's sessions with a
            // clock seeded by the run (replay makes them byte-identical), not the wall clock.
            let events = state.runtime.runs().events(&run.id, 0).await?;
            let out_ms = events.last().map_or(run.submitted_ms, |e| e.at_ms);
            let input =
                if input_len <= out_len && extends(state, &input_id, &out, input_len).await? {
                    Some(Input {
                        id: input_id,
                        len: input_len,
                    })
                } else {
                    None
                };
            let added = match &input {
                Some(input) => conversation_at(state, &out, input.len, out_len).await?,
                None => Vec::new(),
            };
            runs.push(RunSteps {
                run: i,
                input,
                out,
                out_len,
                added,
                out_ms,
            });
        }
        let mut starts = Vec::with_capacity(runs.len());
        let mut total = 0;
        for r in &runs {
            starts.push(total);
            total += r.count();
        }
        // The calls a waiting run stopped on are the interrupts of the thread's newest state
        // (read from its whole session: a run waits on a short one).
        let mut waiting = Vec::new();
        if let Some(last) = runs.last()
            && last.run + 1 == t.runs.len()
            && t.runs[last.run].1.status == RunStatus::Waiting
        {
            match store.load(&last.out).await {
                Ok(l) => waiting = interrupts(&l.session),
                Err(PersistError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(History {
            t,
            runs,
            starts,
            total,
            waiting,
        })
    }

    /// How many checkpoints the thread has.
    pub(crate) fn len(&self) -> usize {
        self.total
    }

    /// The index of the checkpoint with id `id`.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        (0..self.total).find(|&n| self.checkpoint(n).checkpoint_id.as_deref() == Some(id))
    }

    /// The newest state, with the interrupts of a waiting run.
    pub(crate) fn latest(&self) -> Option<Planned> {
        let n = self.total.checked_sub(1)?;
        Some(self.state(n, self.metadata(n)))
    }

    /// At most `limit` states older than checkpoint `end`, newest first, whose metadata has
    /// every key of `filter` with its value. Only those states are planned.
    pub(crate) fn newest_first(
        &self,
        end: usize,
        limit: usize,
        filter: Option<&Map<String, Value>>,
    ) -> Vec<Planned> {
        let mut out = Vec::new();
        for n in (0..end.min(self.total)).rev() {
            if out.len() >= limit {
                break;
            }
            let metadata = self.metadata(n);
            if filter.is_some_and(|f| f.iter().any(|(k, v)| metadata.get(k) != Some(v))) {
                continue;
            }
            out.push(self.state(n, metadata));
        }
        out
    }

    fn step(&self, n: usize) -> Step<'_> {
        let entry = self.starts.partition_point(|&s| s <= n) - 1;
        let r = &self.runs[entry];
        let k = n - self.starts[entry];
        let last_of_run = k + 1 == r.count();
        let (source, session, len, created_ms) = match &r.input {
            Some(input) if k == 0 => (
                "input",
                &input.id,
                input.len,
                self.t.runs[r.run].1.submitted_ms,
            ),
            Some(_) => ("loop", &r.out, r.added[k - 1] + 1, r.out_ms),
            None => ("loop", &r.out, r.out_len, r.out_ms),
        };
        Step {
            entry,
            source,
            session,
            len,
            created_ms,
            last_of_run,
        }
    }

    fn checkpoint(&self, n: usize) -> Checkpoint {
        let s = self.step(n);
        let tid = &self.t.row.thread_id;
        Checkpoint {
            thread_id: tid.clone(),
            checkpoint_ns: String::new(),
            checkpoint_id: Some(derived_uuid(&[
                "checkpoint",
                tid,
                s.session.as_str(),
                &s.len.to_string(),
            ])),
        }
    }

    fn metadata(&self, n: usize) -> Value {
        let s = self.step(n);
        let (row, run) = &self.t.runs[self.runs[s.entry].run];
        json!({"source": s.source, "step": n as i64 - 1, "run_id": run.id.as_str(),
            "graph_id": run.workflow, "assistant_id": row.assistant_id,
            "thread_id": self.t.row.thread_id, "session_id": s.session.as_str(), "parents": {}})
    }

    fn state(&self, n: usize, metadata: Value) -> Planned {
        let s = self.step(n);
        let run_at = self.runs[s.entry].run;
        let (_, run) = &self.t.runs[run_at];
        let open = !(s.last_of_run && settled(run.status)) || run.status == RunStatus::Waiting;
        let cp = self.checkpoint(n);
        let parent = n.checked_sub(1).map(|p| self.checkpoint(p));
        let newest = n + 1 == self.total;
        Planned {
            messages: Some((s.session.clone(), s.len)),
            state: ThreadState {
                values: Value::Null,
                next: if open {
                    vec![run.workflow.clone()]
                } else {
                    Vec::new()
                },
                tasks: Vec::new(),
                metadata,
                created_at: Some(rfc3339(s.created_ms)),
                checkpoint_id: cp.checkpoint_id.clone(),
                parent_checkpoint_id: parent.as_ref().and_then(|p| p.checkpoint_id.clone()),
                parent_checkpoint: parent,
                checkpoint: cp,
                interrupts: if newest {
                    self.waiting.clone()
                } else {
                    Vec::new()
                },
            },
        }
    }
}
