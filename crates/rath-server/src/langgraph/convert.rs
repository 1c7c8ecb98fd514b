//! Between our values and LangGraph's: chunks as LangChain messages (and back, for input),
//! run statuses, the state values of a session.

use std::collections::HashMap;

use rath_runtime::{Run, RunStatus};
use rath_session::{Chunk, ChunkBody, FunctionCall, Session, ToolCall};
use serde_json::{Map, Value, json};

use super::{LgError, derived_uuid, unprocessable};

/// LangGraph's run status for ours. A run waiting for a decision on a gated call is
/// `interrupted` (LangGraph's word for a run stopped by an interrupt, which a client
/// resumes); a cancelled run is `interrupted` too (what LangGraph reports after a cancel
/// with `action=interrupt`); a run in review is an `error` (a person must settle it).
pub(crate) fn status(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Queued => "pending",
        RunStatus::Running => "running",
        RunStatus::Succeeded => "success",
        RunStatus::Failed | RunStatus::NeedsReview => "error",
        RunStatus::TimedOut => "timeout",
        RunStatus::Cancelled | RunStatus::Waiting => "interrupted",
    }
}

/// True once the run will not change without someone acting: final, waiting for a
/// decision, or in review (what `wait`, `join` and a stream wait for).
pub(crate) fn settled(s: RunStatus) -> bool {
    s.is_final() || matches!(s, RunStatus::Waiting | RunStatus::NeedsReview)
}

/// The conversation of `session` as LangChain messages, each with an id derived from the
/// thread, the chunk's digest and how many equal chunks came before it in the session: the
/// same chunk shows the same id in every state of the thread, and no two messages of one
/// state share an id.
pub fn messages(thread_id: &str, session: &Session) -> Vec<Value> {
    let mut namer = Namer::new(thread_id);
    session
        .chunks()
        .iter()
        .filter_map(|c| namer.message(c))
        .collect()
}

/// [`messages`] one chunk at a time, for an answer written a window of chunks at a time:
/// it remembers, per chunk digest, how many equal chunks it has seen (what a message's id
/// counts), and nothing else.
pub(crate) struct Namer {
    thread_id: String,
    /// Seen chunks by the first 128 bits of their digest.
    seen: HashMap<u128, u32>,
}

impl Namer {
    /// A namer for the conversation of one session of thread `thread_id`, from its start.
    pub(crate) fn new(thread_id: &str) -> Self {
        Namer {
            thread_id: thread_id.to_owned(),
            seen: HashMap::new(),
        }
    }

    /// The message of the session's next chunk `c`, `None` when it is not part of the
    /// conversation.
    pub(crate) fn message(&mut self, c: &Chunk) -> Option<Value> {
        if !c.is_conversation() {
            return None;
        }
        let digest = c.sha256();
        let key = digest
            .get(..32)
            .and_then(|h| u128::from_str_radix(h, 16).ok())
            .unwrap_or_default();
        let n = self.seen.entry(key).or_insert(0);
        let id = derived_uuid(&["message", &self.thread_id, &digest, &n.to_string()]);
        *n += 1;
        message(c, &id)
    }
}

/// The state values of a session: `{"messages": [...]}`.
pub(crate) fn values(thread_id: &str, session: &Session) -> Value {
    json!({ "messages": messages(thread_id, session) })
}

fn base(kind: &str, content: &str, id: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("content".into(), json!(content));
    m.insert("additional_kwargs".into(), json!({}));
    m.insert("response_metadata".into(), json!({}));
    m.insert("type".into(), json!(kind));
    m.insert("name".into(), Value::Null);
    m.insert("id".into(), json!(id));
    m
}

fn message(c: &Chunk, id: &str) -> Option<Value> {
    let m = match c.body() {
        ChunkBody::System(p) => base("system", &p.content, id),
        ChunkBody::User(p) => base("human", &p.content, id),
        ChunkBody::Assistant(p) => {
            let mut m = base("ai", p.content.as_deref().unwrap_or(""), id);
            let (mut calls, mut invalid) = (Vec::new(), Vec::new());
            for tc in p.tool_calls.iter().flatten() {
                match serde_json::from_str::<Value>(&tc.function.arguments) {
                    Ok(args @ Value::Object(_)) => calls.push(json!({
                        "name": tc.function.name, "args": args, "id": tc.id, "type": "tool_call",
                    })),
                    _ => invalid.push(json!({
                        "name": tc.function.name, "args": tc.function.arguments, "id": tc.id,
                        "error": "the arguments are not a JSON object",
                        "type": "invalid_tool_call",
                    })),
                }
            }
            m.insert("tool_calls".into(), Value::Array(calls));
            m.insert("invalid_tool_calls".into(), Value::Array(invalid));
            m.insert("usage_metadata".into(), Value::Null);
            m
        }
        ChunkBody::ToolResult(p) => {
            let mut m = base("tool", &p.content, id);
            m.insert("name".into(), json!(p.name));
            m.insert("tool_call_id".into(), json!(p.tool_call_id));
            m.insert("artifact".into(), Value::Null);
            m.insert("status".into(), json!("success"));
            m
        }
        _ => return None,
    };
    Some(Value::Object(m))
}

/// The chunks of a run's input: `{"messages": [...]}`, each message in OpenAI form
/// (`{"role", "content"}`), LangChain form (`{"type", "content"}`), a `[role, content]`
/// pair or a bare string (a human message). Content is a string or a list of content
/// blocks, whose text blocks are joined. Client message ids are not kept (ours are derived
/// from the chunks).
pub(crate) fn input_chunks(input: &Value) -> Result<Vec<Chunk>, LgError> {
    let obj = match input {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o,
        _ => return Err(unprocessable("input is an object: {\"messages\": [...]}")),
    };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "messages") {
        return Err(unprocessable(format!(
            "input key {k:?}: a thread's state has only \"messages\""
        )));
    }
    let list = match obj.get("messages") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a.clone(),
        Some(one @ (Value::Object(_) | Value::String(_))) => vec![one.clone()],
        Some(_) => return Err(unprocessable("input.messages is a list of messages")),
    };
    list.iter().map(input_chunk).collect()
}

fn content_text(v: &Value) -> Result<String, LgError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = String::new();
            for b in blocks {
                match b {
                    Value::String(s) => text.push_str(s),
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                        text.push_str(o.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    _ => return Err(unprocessable("only text content blocks are supported")),
                }
            }
            Ok(text)
        }
        Value::Null => Ok(String::new()),
        _ => Err(unprocessable(
            "a message's content is a string or a list of blocks",
        )),
    }
}

fn input_chunk(m: &Value) -> Result<Chunk, LgError> {
    let (role, content, obj) = match m {
        Value::String(s) => return Ok(Chunk::user(s.clone())),
        Value::Array(pair) if pair.len() == 2 => (
            pair[0].as_str().unwrap_or_default().to_owned(),
            content_text(&pair[1])?,
            None,
        ),
        Value::Object(o) => {
            let role = o
                .get("role")
                .or_else(|| o.get("type"))
                .and_then(Value::as_str)
                .ok_or_else(|| unprocessable("a message needs a role or a type"))?;
            (
                role.to_owned(),
                content_text(o.get("content").unwrap_or(&Value::Null))?,
                Some(o),
            )
        }
        _ => return Err(unprocessable("a message is an object, a pair or a string")),
    };
    let field = |k: &str| {
        obj.and_then(|o| o.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match role.as_str() {
        "user" | "human" => Ok(Chunk::user(content)),
        "system" | "developer" => Ok(Chunk::system(content)),
        "assistant" | "ai" => {
            let calls = obj
                .and_then(|o| o.get("tool_calls"))
                .and_then(Value::as_array)
                .map(|calls| calls.iter().map(tool_call).collect::<Result<Vec<_>, _>>())
                .transpose()?
                .filter(|c| !c.is_empty());
            let text = (!content.is_empty() || calls.is_none()).then_some(content);
            Ok(Chunk::assistant(text, calls))
        }
        "tool" => {
            let call_id = field("tool_call_id");
            if call_id.is_empty() {
                return Err(unprocessable("a tool message needs its tool_call_id"));
            }
            Ok(Chunk::tool_result(call_id, field("name"), content))
        }
        other => Err(unprocessable(format!("unknown message role {other:?}"))),
    }
}

/// A tool call in LangChain form (`{name, args, id}`) or OpenAI form
/// (`{id, function: {name, arguments}}`).
fn tool_call(v: &Value) -> Result<ToolCall, LgError> {
    let id = v.get("id").and_then(Value::as_str).unwrap_or_default();
    let (name, arguments) = match v.get("function") {
        Some(f) => (
            f.get("name").and_then(Value::as_str).unwrap_or_default(),
            f.get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_owned(),
        ),
        None => (
            v.get("name").and_then(Value::as_str).unwrap_or_default(),
            v.get("args").map_or("{}".into(), Value::to_string),
        ),
    };
    if id.is_empty() || name.is_empty() {
        return Err(unprocessable("a tool call needs an id and a name"));
    }
    Ok(ToolCall {
        id: id.to_owned(),
        call_type: "function".into(),
        function: FunctionCall {
            name: name.to_owned(),
            arguments,
        },
    })
}

/// What a failed, timed-out or in-review run answers as `{"error", "message"}`.
pub(crate) fn run_error(run: &Run) -> Value {
    let error = match run.status {
        RunStatus::TimedOut => "TimeoutError",
        RunStatus::NeedsReview => "NeedsReview",
        _ => "RunFailed",
    };
    let message = run
        .detail
        .clone()
        .unwrap_or_else(|| format!("the run is {}", run.status));
    json!({"error": error, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::Stamper;

    #[test]
    fn input_in_every_accepted_form_becomes_chunks() {
        let input = json!({"messages": [
            {"role": "user", "content": "a"},
            {"type": "human", "content": [{"type": "text", "text": "b"}], "id": "x"},
            ["system", "c"],
            "d",
            {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "name": "f", "args": {"k": 1}}]},
            {"role": "tool", "content": "r", "tool_call_id": "t1", "name": "f"},
        ]});
        let chunks = input_chunks(&input).unwrap();
        assert_eq!(chunks.len(), 6);
        assert_eq!(chunks[1].text(), Some("b"));
        assert_eq!(chunks[4].tool_calls()[0].function.arguments, "{\"k\":1}");
        for bad in [
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            json!({"messages": [{"content": "x"}]}),
            json!({"other": 1}),
            json!("text"),
            json!({"messages": [{"role": "tool", "content": "x"}]}),
        ] {
            assert!(input_chunks(&bad).is_err(), "{bad}");
        }
        assert!(input_chunks(&Value::Null).unwrap().is_empty());
    }

    #[test]
    fn equal_chunks_get_distinct_ids_and_every_state_the_same_ones() {
        let s = Session::user_with("hi", Stamper::seeded(1))
            .push(Chunk::assistant_text("ok"))
            .push(Chunk::user("hi"));
        let m = messages("t", &s);
        let ids: Vec<&str> = m.iter().map(|x| x["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 3);
        assert_ne!(ids[0], ids[2]);
        let longer = s.push(Chunk::assistant_text("again"));
        let m2 = messages("t", &longer);
        assert_eq!(m2[..3], m[..]);
        assert_eq!(m[1]["tool_calls"], json!([]));
        assert_ne!(messages("u", &s)[0]["id"], m[0]["id"]);
    }
}
