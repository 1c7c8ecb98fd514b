//! A thread's checkpoints, built only as far as an answer needs them.
//!
//! Every conversation message a run adds is a checkpoint whose values are the thread's
//! messages up to it. Building every checkpoint's values up front copies the conversation
//! once per message: quadratic in a thread's length, so a run of 250,000 messages made one
//! `history` call with `limit: 1` take gigabytes. [`History`] instead holds one small step
//! per checkpoint (which run, how many of its messages, which session prefix) and each run's
//! session once; a state's values are made only for the states an answer returns, from the
//! run's messages converted once and shared by its steps.

use serde_json::{Map, Value, json};

use rath_session::{Session, SessionId};

use super::LgError;
use super::convert::{self, settled};
use super::derived_uuid;
use super::rfc3339;
use super::threads::{Checkpoint, Loaded, ThreadState, interrupts, reached};
use crate::AppState;
use rath_runtime::RunStatus;

/// One checkpoint, without its values.
struct Step {
    /// Index of its run in the thread's runs.
    run: usize,
    /// How many of the run's converted messages it holds (`None`: all of them).
    upto: Option<usize>,
    source: &'static str,
    /// The session this state is, or is a prefix of, and how many chunks of it.
    session: SessionId,
    len: usize,
    created_ms: i64,
    last_of_run: bool,
}

/// Each run's session as reached, and its messages once converted.
struct RunOut {
    out: Session,
    messages: std::sync::OnceLock<Vec<Value>>,
}

/// A thread's checkpoints, oldest first, whose states are built on demand.
pub(crate) struct History<'a> {
    t: &'a Loaded,
    steps: Vec<Step>,
    outs: Vec<Option<RunOut>>,
}

impl<'a> History<'a> {
    /// The checkpoints of thread `t`: for each run that reached a session, its input session,
    /// then the prefix of the session it reached after each conversation message the run
    /// added (only the whole session when it does not extend its input).
    pub(crate) async fn of(state: &AppState, t: &'a Loaded) -> Result<History<'a>, LgError> {
        let mut steps = Vec::new();
        let mut outs = Vec::with_capacity(t.runs.len());
        for (i, (_, run)) in t.runs.iter().enumerate() {
            let Some(out) = reached(state, run).await? else {
                outs.push(None);
                continue;
            };
            let input = state
                .runtime
                .sessions()
                .load(&SessionId::new(&run.input_session))
                .await?
                .session;
            let extends = input.len() <= out.len()
                && input
                    .chunks()
                    .iter()
                    .zip(out.chunks().iter())
                    .all(|(a, b)| a == b);
            // Times from the run, not the session: a worker stamps a run's sessions with a
            // clock seeded by the run (replay makes them byte-identical), not the wall clock.
            let events = state.runtime.runs().events(&run.id, 0).await?;
            let out_ms = events.last().map_or(run.submitted_ms, |e| e.at_ms);
            if extends {
                let mut k = input.conversation().count();
                steps.push(Step {
                    run: i,
                    upto: Some(k),
                    source: "input",
                    session: input.id().clone(),
                    len: input.len(),
                    created_ms: run.submitted_ms,
                    last_of_run: false,
                });
                for (j, c) in out.chunks().iter().enumerate().skip(input.len()) {
                    if c.is_conversation() {
                        k += 1;
                        steps.push(Step {
                            run: i,
                            upto: Some(k),
                            source: "loop",
                            session: out.id().clone(),
                            len: j + 1,
                            created_ms: out_ms,
                            last_of_run: false,
                        });
                    }
                }
            } else {
                steps.push(Step {
                    run: i,
                    upto: None,
                    source: "loop",
                    session: out.id().clone(),
                    len: out.len(),
                    created_ms: out_ms,
                    last_of_run: false,
                });
            }
            if let Some(last) = steps.last_mut() {
                last.last_of_run = true;
            }
            outs.push(Some(RunOut {
                out,
                messages: std::sync::OnceLock::new(),
            }));
        }
        Ok(History { t, steps, outs })
    }

    /// How many checkpoints the thread has.
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }

    /// The index of the checkpoint with id `id`.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        (0..self.steps.len()).find(|&n| self.checkpoint(n).checkpoint_id.as_deref() == Some(id))
    }

    /// The newest state, with the interrupts of a waiting run.
    pub(crate) fn latest(&self) -> Option<ThreadState> {
        let n = self.steps.len().checked_sub(1)?;
        Some(self.state(n, self.metadata(n)))
    }

    /// At most `limit` states older than checkpoint `end`, newest first, whose metadata has
    /// every key of `filter` with its value. Only those states are built.
    pub(crate) fn newest_first(
        &self,
        end: usize,
        limit: usize,
        filter: Option<&Map<String, Value>>,
    ) -> Vec<ThreadState> {
        let mut out = Vec::new();
        for n in (0..end.min(self.steps.len())).rev() {
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

    fn checkpoint(&self, n: usize) -> Checkpoint {
        let s = &self.steps[n];
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
        let s = &self.steps[n];
        let (row, run) = &self.t.runs[s.run];
        json!({"source": s.source, "step": n as i64 - 1, "run_id": run.id.as_str(),
            "graph_id": run.workflow, "assistant_id": row.assistant_id,
            "thread_id": self.t.row.thread_id, "session_id": s.session.as_str(), "parents": {}})
    }

    /// The messages of step `n`'s run, converted once.
    fn messages(&self, n: usize) -> &[Value] {
        let s = &self.steps[n];
        match &self.outs[s.run] {
            Some(o) => o
                .messages
                .get_or_init(|| convert::messages(&self.t.row.thread_id, &o.out)),
            None => &[],
        }
    }

    fn state(&self, n: usize, metadata: Value) -> ThreadState {
        let s = &self.steps[n];
        let (_, run) = &self.t.runs[s.run];
        let msgs = self.messages(n);
        let upto = s.upto.unwrap_or(msgs.len()).min(msgs.len());
        let open = !(s.last_of_run && settled(run.status)) || run.status == RunStatus::Waiting;
        let cp = self.checkpoint(n);
        let parent = n.checked_sub(1).map(|p| self.checkpoint(p));
        // The calls a waiting run stopped on are the interrupts of the thread's newest state.
        let newest_waiting = n + 1 == self.steps.len()
            && s.run + 1 == self.t.runs.len()
            && run.status == RunStatus::Waiting;
        let interrupts = match (&self.outs[s.run], newest_waiting) {
            (Some(o), true) => interrupts(&o.out),
            _ => Vec::new(),
        };
        ThreadState {
            values: json!({"messages": &msgs[..upto]}),
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
            interrupts,
        }
    }
}
