//! Between our values and LangGraph's: chunks as LangChain messages (and back, for input),
//! run statuses, the state values of a session.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;

use rath_runtime::{Run, RunStatus};
use rath_session::{Chunk, ChunkBody, FunctionCall, Session, ToolCall};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{LgError, unprocessable, uuid_bytes, uuid_part};

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
    messages_from(thread_id, session, 0)
}

/// The messages of `session`'s chunks from index `from` on, with the ids [`messages`] gives
/// them (named over the whole session, so an agent's step shows the ids its messages have
/// in the thread's state).
pub(crate) fn messages_from(thread_id: &str, session: &Session, from: usize) -> Vec<Value> {
    let mut namer = Namer::new(thread_id);
    let mut out = Vec::new();
    for (i, c) in session.chunks().iter().enumerate() {
        let Some(m) = Message::of(c) else { continue };
        let id = namer.id(c);
        if i < from {
            continue;
        }
        if let Ok(v) = serde_json::to_value(m.with_id(id.as_str())) {
            out.push(v);
        }
    }
    out
}

/// A piece of streamed reply text as LangChain's `AIMessageChunk` (`id`: the reply's
/// stream id, the same for every piece of one reply).
pub(crate) fn ai_chunk(id: &str, text: &str) -> Value {
    json!({
        "content": text, "additional_kwargs": {}, "response_metadata": {},
        "type": "AIMessageChunk", "name": null, "id": id, "example": false,
        "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": null,
        "tool_call_chunks": [],
    })
}

/// The reply streamed so far (`text`) as the AI message `messages/partial` events carry.
pub(crate) fn ai_partial(id: &str, text: &str) -> Value {
    json!({
        "content": text, "additional_kwargs": {}, "response_metadata": {},
        "type": "ai", "name": null, "id": id, "example": false,
        "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": null,
    })
}

/// [`messages`] one chunk at a time, for an answer written a window of chunks at a time:
/// it remembers, per chunk digest, how many equal chunks it has seen (what a message's id
/// counts), and nothing else.
pub(crate) struct Namer {
    /// The hash of an id's parts before the chunk's: `"message"` and the thread.
    prefix: Sha256,
    /// Seen chunks by the first 128 bits of their digest.
    seen: HashMap<u128, u32, BuildHasherDefault<DigestBits>>,
}

/// A message id: `derived_uuid(["message", thread, digest, n])`, as its 36 ASCII bytes.
pub(crate) struct MessageId([u8; 36]);

impl MessageId {
    pub(crate) fn as_str(&self) -> &str {
        // Hex digits and dashes are ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The hasher of [`Namer::seen`]: its keys are bits of a sha256 digest, already uniform,
/// so their low 64 bits are the hash.
#[derive(Default)]
pub(crate) struct DigestBits(u64);

impl Hasher for DigestBits {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            self.0 ^= u64::from(*b) << ((i % 8) * 8);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

impl Namer {
    /// A namer for the conversation of one session of thread `thread_id`, from its start.
    pub(crate) fn new(thread_id: &str) -> Self {
        let mut prefix = Sha256::new();
        uuid_part(&mut prefix, b"message");
        uuid_part(&mut prefix, thread_id.as_bytes());
        Namer {
            prefix,
            seen: HashMap::default(),
        }
    }

    /// The id of the session's next conversation chunk `c`: its digest in hex and the
    /// count `n` of equal chunks before it make it.
    pub(crate) fn id(&mut self, c: &Chunk) -> MessageId {
        let digest = c.digest();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        let n = self.seen.entry(u128::from_be_bytes(key)).or_insert(0);
        let mut hex = [0u8; 64];
        // 32 bytes always fit 64 hex digits.
        let _ = hex::encode_to_slice(digest, &mut hex);
        let mut h = self.prefix.clone();
        uuid_part(&mut h, &hex);
        let mut count = [0u8; 10];
        let mut rest = &mut count[..];
        // A u32 has at most 10 digits.
        let _ = write!(rest, "{n}");
        let digits = 10 - rest.len();
        uuid_part(&mut h, &count[..digits]);
        *n += 1;
        MessageId(uuid_bytes(h))
    }

    /// Writes the message of the session's next chunk `c` to `out` (the JSON of
    /// [`messages`]' value for it) and answers true, or answers false and writes nothing
    /// when `c` is not part of the conversation.
    pub(crate) fn write(
        &mut self,
        c: &Chunk,
        out: &mut Vec<u8>,
    ) -> Result<bool, serde_json::Error> {
        let Some(m) = Message::of(c) else {
            return Ok(false);
        };
        let id = self.id(c);
        m.with_id(id.as_str()).write(out)?;
        Ok(true)
    }
}

/// The state values of a session: `{"messages": [...]}`.
pub(crate) fn values(thread_id: &str, session: &Session) -> Value {
    json!({ "messages": messages(thread_id, session) })
}

/// `{}`.
#[derive(Serialize)]
pub(crate) struct Empty {}

/// A chunk of the conversation as a LangChain message. Members are in name order, the
/// order a JSON object of them has; [`Message::write`] writes the same bytes faster.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Message<'c> {
    /// A system or human message.
    Plain {
        additional_kwargs: Empty,
        content: &'c str,
        id: &'c str,
        name: Option<&'c str>,
        response_metadata: Empty,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    /// An AI message, with its tool calls.
    Ai {
        additional_kwargs: Empty,
        content: &'c str,
        id: &'c str,
        invalid_tool_calls: Vec<Value>,
        name: Option<&'c str>,
        response_metadata: Empty,
        tool_calls: Vec<Value>,
        #[serde(rename = "type")]
        kind: &'static str,
        usage_metadata: Option<Empty>,
    },
    /// The result of a tool call.
    Tool {
        additional_kwargs: Empty,
        artifact: Option<Empty>,
        content: &'c str,
        id: &'c str,
        name: &'c str,
        response_metadata: Empty,
        status: &'static str,
        tool_call_id: &'c str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

impl<'c> Message<'c> {
    /// The message of chunk `c` (its id empty), `None` when it is not part of the
    /// conversation.
    fn of(c: &'c Chunk) -> Option<Message<'c>> {
        let plain = |kind, content| Message::Plain {
            additional_kwargs: Empty {},
            content,
            id: "",
            name: None,
            response_metadata: Empty {},
            kind,
        };
        Some(match c.body() {
            ChunkBody::System(p) => plain("system", &p.content),
            ChunkBody::User(p) => plain("human", &p.content),
            ChunkBody::Assistant(p) => {
                let (mut calls, mut invalid) = (Vec::new(), Vec::new());
                for tc in p.tool_calls.iter().flatten() {
                    match serde_json::from_str::<Value>(&tc.function.arguments) {
                        Ok(args @ Value::Object(_)) => calls.push(json!({
                            "name": tc.function.name, "args": args, "id": tc.id,
                            "type": "tool_call",
                        })),
                        _ => invalid.push(json!({
                            "name": tc.function.name, "args": tc.function.arguments,
                            "id": tc.id, "error": "the arguments are not a JSON object",
                            "type": "invalid_tool_call",
                        })),
                    }
                }
                Message::Ai {
                    additional_kwargs: Empty {},
                    content: p.content.as_deref().unwrap_or(""),
                    id: "",
                    invalid_tool_calls: invalid,
                    name: None,
                    response_metadata: Empty {},
                    tool_calls: calls,
                    kind: "ai",
                    usage_metadata: None,
                }
            }
            ChunkBody::ToolResult(p) => Message::Tool {
                additional_kwargs: Empty {},
                artifact: None,
                content: &p.content,
                id: "",
                name: &p.name,
                response_metadata: Empty {},
                status: "success",
                tool_call_id: &p.tool_call_id,
                kind: "tool",
            },
            _ => return None,
        })
    }

    /// The message with id `new`.
    fn with_id<'a>(self, new: &'a str) -> Message<'a>
    where
        'c: 'a,
    {
        let mut m: Message<'a> = self;
        match &mut m {
            Message::Plain { id, .. } | Message::Ai { id, .. } | Message::Tool { id, .. } => {
                *id = new;
            }
        }
        m
    }

    /// Writes the message's JSON to `out`: the bytes of its derived serialisation, the
    /// constant members copied rather than serialised one by one (a long thread's history
    /// writes hundreds of thousands of messages).
    fn write(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let text = |out: &mut Vec<u8>, s: &str| serde_json::to_writer(&mut *out, s);
        match self {
            Message::Plain {
                content, id, kind, ..
            } => {
                out.extend_from_slice(b"{\"additional_kwargs\":{},\"content\":");
                text(out, content)?;
                out.extend_from_slice(b",\"id\":");
                text(out, id)?;
                out.extend_from_slice(b",\"name\":null,\"response_metadata\":{},\"type\":\"");
                // A kind is one of a few plain words.
                out.extend_from_slice(kind.as_bytes());
                out.push(b'"');
            }
            Message::Ai {
                content,
                id,
                invalid_tool_calls,
                tool_calls,
                ..
            } => {
                out.extend_from_slice(b"{\"additional_kwargs\":{},\"content\":");
                text(out, content)?;
                out.extend_from_slice(b",\"id\":");
                text(out, id)?;
                out.extend_from_slice(b",\"invalid_tool_calls\":");
                serde_json::to_writer(&mut *out, invalid_tool_calls)?;
                out.extend_from_slice(b",\"name\":null,\"response_metadata\":{},\"tool_calls\":");
                serde_json::to_writer(&mut *out, tool_calls)?;
                out.extend_from_slice(b",\"type\":\"ai\",\"usage_metadata\":null");
            }
            Message::Tool {
                content,
                id,
                name,
                tool_call_id,
                ..
            } => {
                out.extend_from_slice(b"{\"additional_kwargs\":{},\"artifact\":null,\"content\":");
                text(out, content)?;
                out.extend_from_slice(b",\"id\":");
                text(out, id)?;
                out.extend_from_slice(b",\"name\":");
                text(out, name)?;
                out.extend_from_slice(
                    b",\"response_metadata\":{},\"status\":\"success\",\"tool_call_id\":",
                );
                text(out, tool_call_id)?;
                out.extend_from_slice(b",\"type\":\"tool\"");
            }
        }
        out.push(b'}');
        Ok(())
    }
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

    /// The message written as it is has the bytes of its JSON value (members in name
    /// order), and its id is the derived id of its chunk's digest and count.
    #[test]
    fn a_message_written_as_it_is_is_its_json_value() {
        use rath_session::{FunctionCall, ToolCall};
        let call = |id: &str, args: &str| ToolCall {
            id: id.into(),
            call_type: "function".into(),
            function: FunctionCall {
                name: "f\"x".into(),
                arguments: args.into(),
            },
        };
        let chunks = [
            Chunk::system("be \"brief\"\n"),
            Chunk::user("héllo \u{1}"),
            Chunk::assistant(
                Some("calling".into()),
                Some(vec![call("a", "{\"k\":[1,2]}"), call("b", "[1]")]),
            ),
            Chunk::assistant(None, None),
            Chunk::tool_result("a", "f", "done"),
            Chunk::user("héllo \u{1}"),
        ];
        let session = chunks
            .iter()
            .fold(Session::empty_with(Stamper::seeded(1)), |s, c| {
                s.push(c.clone())
            });
        let values = messages("t-1", &session);
        assert_eq!(values.len(), chunks.len());
        let mut namer = Namer::new("t-1");
        let mut seen = HashMap::new();
        for (c, value) in chunks.iter().zip(&values) {
            let mut written = Vec::new();
            assert!(namer.write(c, &mut written).unwrap());
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(value).unwrap()
            );
            let n: &mut u32 = seen.entry(c.sha256()).or_default();
            let id =
                crate::langgraph::derived_uuid(&["message", "t-1", &c.sha256(), &n.to_string()]);
            *n += 1;
            assert_eq!(value["id"], json!(id));
        }
        assert_eq!(namer.seen.len(), 5);
        let evidence = Chunk::note("t", "not said");
        assert!(!namer.write(&evidence, &mut Vec::new()).unwrap());
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
