//! Answers written while they are sent: ready JSON, and a session's messages read,
//! converted and written a window of chunks at a time, so a state of a long thread never
//! exists whole in the server (see [`super::history`]).
//!
//! A state's or a thread's JSON is its struct serialised with `values` null, and the
//! `"values":null` member replaced by the streamed one: the bytes are those the struct with
//! its values would serialise to.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use rath_session::SessionId;
use serde_json::Value;

use super::LgError;
use super::convert::Namer;
use super::history::{Planned, window_of};
use super::threads::Thread;
use crate::{AppState, ServerError};

/// One piece of an answer.
enum Part {
    /// Bytes of JSON as they are.
    Json(Vec<u8>),
    /// The messages of the first `len` chunks of `session`, as a comma-separated list.
    Messages { session: SessionId, len: usize },
}

/// A JSON answer of ready pieces and streamed message lists.
pub(crate) struct Answer {
    parts: Vec<Part>,
}

const NULL_VALUES: &[u8] = b"\"values\":null";

fn internal(what: &str) -> LgError {
    LgError(ServerError::Io(std::io::Error::other(format!(
        "writing an answer: {what}"
    ))))
}

impl Answer {
    fn new() -> Self {
        Answer { parts: Vec::new() }
    }

    fn json(&mut self, bytes: &[u8]) {
        match self.parts.last_mut() {
            Some(Part::Json(b)) => b.extend_from_slice(bytes),
            _ => self.parts.push(Part::Json(bytes.to_vec())),
        }
    }

    /// `{"messages":[...]}` of `messages`, or `values` when there are none to read.
    fn values(
        &mut self,
        messages: Option<(SessionId, usize)>,
        values: &Value,
    ) -> Result<(), LgError> {
        match messages {
            Some((session, len)) => {
                self.json(b"{\"messages\":[");
                self.parts.push(Part::Messages { session, len });
                self.json(b"]}");
            }
            None => {
                let v = serde_json::to_vec(values).map_err(|e| internal(&e.to_string()))?;
                self.json(&v);
            }
        }
        Ok(())
    }

    /// `value` serialised, its `"values":null` member (at byte `at`) replaced by the
    /// planned values.
    fn around(
        &mut self,
        bytes: &[u8],
        at: usize,
        messages: Option<(SessionId, usize)>,
        values: &Value,
    ) -> Result<(), LgError> {
        if bytes.get(at..at + NULL_VALUES.len()) != Some(NULL_VALUES) {
            return Err(internal("no values member where it belongs"));
        }
        self.json(&bytes[..at + NULL_VALUES.len() - 4]);
        self.values(messages, values)?;
        self.json(&bytes[at + NULL_VALUES.len()..]);
        Ok(())
    }

    fn state(&mut self, planned: Planned) -> Result<(), LgError> {
        let Planned {
            mut state,
            messages,
        } = planned;
        let values = std::mem::take(&mut state.values);
        let bytes = serde_json::to_vec(&state).map_err(|e| internal(&e.to_string()))?;
        // `values` is the struct's first member.
        self.around(&bytes, 1, messages, &values)
    }

    /// One state.
    pub(crate) fn one_state(planned: Planned) -> Result<Self, LgError> {
        let mut a = Answer::new();
        a.state(planned)?;
        Ok(a)
    }

    /// A list of states.
    pub(crate) fn states(planned: Vec<Planned>) -> Result<Self, LgError> {
        let mut a = Answer::new();
        a.json(b"[");
        for (i, p) in planned.into_iter().enumerate() {
            if i > 0 {
                a.json(b",");
            }
            a.state(p)?;
        }
        a.json(b"]");
        Ok(a)
    }

    /// A thread whose values are `latest`'s (null without a state).
    pub(crate) fn thread(mut thread: Thread, latest: Option<Planned>) -> Result<Self, LgError> {
        thread.values = Value::Null;
        let bytes = serde_json::to_vec(&thread).map_err(|e| internal(&e.to_string()))?;
        // `values` comes right before the last two members, whose bytes are known.
        let tail = format!(
            ",\"interrupts\":{},\"error\":{}}}",
            serde_json::to_string(&thread.interrupts).map_err(|e| internal(&e.to_string()))?,
            serde_json::to_string(&thread.error).map_err(|e| internal(&e.to_string()))?,
        );
        let at = bytes
            .len()
            .checked_sub(tail.len() + NULL_VALUES.len())
            .filter(|&at| bytes.ends_with(tail.as_bytes()) && at > 0 && bytes[at - 1] == b',')
            .ok_or_else(|| internal("no values member where it belongs"))?;
        let mut a = Answer::new();
        match latest {
            Some(Planned { state, messages }) => a.around(&bytes, at, messages, &state.values)?,
            None => a.json(&bytes),
        }
        Ok(a)
    }

    /// The JSON `value` as an answer.
    pub(crate) fn value(value: &Value) -> Self {
        Answer {
            parts: vec![Part::Json(value.to_string().into_bytes())],
        }
    }

    /// `{"messages": [...]}` of the whole of `session`, `len` chunks long.
    pub(crate) fn values_of(session: SessionId, len: usize) -> Self {
        let mut a = Answer::new();
        a.json(b"{\"messages\":[");
        a.parts.push(Part::Messages { session, len });
        a.json(b"]}");
        a
    }

    /// The answer as a response (see [`Answer::into_stream`]).
    pub(crate) fn into_response(self, state: Arc<AppState>, thread_id: &str) -> Response {
        let body = Body::from_stream(self.into_stream(state, thread_id));
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }

    /// The answer's bytes: the JSON pieces, and each message list read a window of chunks
    /// at a time as the client takes the body. A read that fails on the way ends the body
    /// short (the status was sent): the client sees a cut answer, never a wrong one.
    pub(crate) fn into_stream(
        self,
        state: Arc<AppState>,
        thread_id: &str,
    ) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        let writer = Writer {
            state,
            thread_id: thread_id.to_owned(),
            parts: self.parts.into(),
            cursor: None,
        };
        futures::stream::unfold(writer, Writer::next)
    }
}

/// Where a message list being written is.
struct Cursor {
    session: SessionId,
    /// The next chunk to read, and the end.
    next: usize,
    len: usize,
    namer: Namer,
    first: bool,
}

/// Bytes a message with an empty content takes in an answer, about: what a window's
/// buffer starts with per chunk.
const MESSAGE_BYTES: usize = 140;

struct Writer {
    state: Arc<AppState>,
    thread_id: String,
    parts: VecDeque<Part>,
    cursor: Option<Cursor>,
}

impl Writer {
    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, Writer)> {
        loop {
            if let Some(c) = &mut self.cursor {
                if c.next >= c.len {
                    self.cursor = None;
                    continue;
                }
                let end = c.next.saturating_add(window_of(&self.state)).min(c.len);
                let read = self
                    .state
                    .runtime
                    .sessions()
                    .read_chunks(&c.session, c.next..end)
                    .await;
                let chunks = match read {
                    Ok(chunks) if !chunks.is_empty() => chunks,
                    Ok(_) => {
                        let why = format!("session {} ended at chunk {}", c.session, c.next);
                        return self.fail(why);
                    }
                    Err(e) => return self.fail(e.to_string()),
                };
                c.next += chunks.len();
                let mut buf = Vec::with_capacity(chunks.len() * MESSAGE_BYTES);
                for chunk in &chunks {
                    let before = buf.len();
                    if !c.first {
                        buf.push(b',');
                    }
                    match c.namer.write(chunk, &mut buf) {
                        Ok(true) => c.first = false,
                        // Not part of the conversation: no message, and no comma for it.
                        Ok(false) => buf.truncate(before),
                        Err(e) => return self.fail(e.to_string()),
                    }
                }
                return Some((Ok(Bytes::from(buf)), self));
            }
            match self.parts.pop_front()? {
                Part::Json(bytes) => return Some((Ok(Bytes::from(bytes)), self)),
                Part::Messages { session, len } => {
                    self.cursor = Some(Cursor {
                        session,
                        next: 0,
                        len,
                        namer: Namer::new(&self.thread_id),
                        first: true,
                    });
                }
            }
        }
    }

    /// Ends the body with an error (the connection is cut) and logs why.
    fn fail(mut self, why: String) -> Option<(Result<Bytes, std::io::Error>, Writer)> {
        tracing::error!(error = %why, "an answer was cut short");
        self.parts.clear();
        self.cursor = None;
        Some((Err(std::io::Error::other(why)), self))
    }
}
