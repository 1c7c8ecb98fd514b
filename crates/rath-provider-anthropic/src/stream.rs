//! Streaming: server-sent events split into frames, and the Messages API's events folded
//! into the same [`Reply`] a non-streamed call returns.
//!
//! ```
//! use rath_provider_anthropic::stream::{EventFolder, SseSplitter};
//!
//! let wire = concat!(
//!     "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n",
//!     "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
//!     "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
//!     "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
//!     "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
//!     "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
//! );
//! let mut split = SseSplitter::default();
//! let mut fold = EventFolder::default();
//! for data in split.push(wire.as_bytes()) {
//!     fold.push(&serde_json::from_str(&data).unwrap(), &mut |_| {}).unwrap();
//! }
//! let reply = fold.finish().unwrap();
//! assert_eq!(reply.text.as_deref(), Some("hi"));
//! assert_eq!(reply.usage.unwrap().output_tokens, 3); // cumulative: replaced, not added
//! ```

use std::collections::BTreeMap;

use rath_provider::{ProviderError, StreamEvent};
use serde_json::{Value, json};

use crate::wire::{ApiUsage, Reply};

/// Splits an SSE byte stream into the `data` payloads of its events (bytes may arrive cut
/// anywhere, even inside a UTF-8 character).
#[derive(Debug, Default)]
pub struct SseSplitter {
    buf: Vec<u8>,
}

impl SseSplitter {
    /// Adds bytes; returns the `data` of every event completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = find_event_end(&self.buf) {
            let (frame, sep) = end;
            let event: Vec<u8> = self.buf.drain(..frame + sep).take(frame).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

/// Where the first complete event ends: its length and the separator's.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// A content block being streamed.
#[derive(Debug)]
enum Open {
    Text(String),
    Tool {
        id: String,
        name: String,
        ordinal: u32,
        json: String,
    },
    Thinking {
        kind: String,
        thinking: String,
        signature: String,
        data: Value,
    },
    Other,
}

/// Folds the Messages API's stream events into a [`Reply`], forwarding text deltas and
/// tool-call fragments to a sink as they arrive.
#[derive(Debug, Default)]
pub struct EventFolder {
    reply: Reply,
    usage: Option<ApiUsage>,
    open: BTreeMap<u64, Open>,
    closed: Vec<(u64, Value)>,
    calls: u32,
    stopped: bool,
    events: usize,
}

impl EventFolder {
    /// Adds one event (the parsed `data` of an SSE frame).
    pub fn push(
        &mut self,
        event: &Value,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        self.events += 1;
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "message_start" => self.start(event),
            "content_block_start" => self.open_block(index, event, sink),
            "content_block_delta" => self.delta(index, event, sink),
            "content_block_stop" => self.close_block(index),
            "message_delta" => self.message_delta(event, sink),
            "message_stop" => self.stopped = true,
            "error" => return Err(stream_error(event)),
            // `ping` and event types added after this version carry nothing for the reply.
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, event: &Value) {
        let message = event.get("message").unwrap_or(&Value::Null);
        self.reply.model = message
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(u) = message.get("usage") {
            self.usage.get_or_insert_with(ApiUsage::default).update(u);
        }
    }

    fn open_block(
        &mut self,
        index: u64,
        event: &Value,
        sink: &mut (dyn FnMut(StreamEvent) + Send),
    ) {
        let block = event.get("content_block").unwrap_or(&Value::Null);
        let field = |k: &str| {
            block
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let open = match field("type").as_str() {
            "text" => Open::Text(field("text")),
            "tool_use" => {
                let ordinal = self.calls;
                self.calls += 1;
                let (id, name) = (field("id"), field("name"));
                sink(StreamEvent::ToolCallDelta {
                    index: ordinal,
                    id: Some(id.clone()),
                    name: Some(name.clone()),
                    arguments: String::new(),
                });
                Open::Tool {
                    id,
                    name,
                    ordinal,
                    json: String::new(),
                }
            }
            kind @ ("thinking" | "redacted_thinking") => Open::Thinking {
                kind: kind.to_owned(),
                thinking: field("thinking"),
                signature: field("signature"),
                data: block.get("data").cloned().unwrap_or(Value::Null),
            },
            _ => Open::Other,
        };
        self.open.insert(index, open);
    }

    fn delta(&mut self, index: u64, event: &Value, sink: &mut (dyn FnMut(StreamEvent) + Send)) {
        let delta = event.get("delta").unwrap_or(&Value::Null);
        let piece = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
        match (self.open.get_mut(&index), piece("type")) {
            (Some(Open::Text(t)), "text_delta") => {
                t.push_str(piece("text"));
                sink(StreamEvent::TextDelta {
                    text: piece("text").to_owned(),
                });
            }
            (Some(Open::Tool { ordinal, json, .. }), "input_json_delta") => {
                json.push_str(piece("partial_json"));
                sink(StreamEvent::ToolCallDelta {
                    index: *ordinal,
                    id: None,
                    name: None,
                    arguments: piece("partial_json").to_owned(),
                });
            }
            (Some(Open::Thinking { thinking, .. }), "thinking_delta") => {
                thinking.push_str(piece("thinking"));
            }
            (Some(Open::Thinking { signature, .. }), "signature_delta") => {
                signature.push_str(piece("signature"));
            }
            _ => {}
        }
    }

    fn close_block(&mut self, index: u64) {
        let Some(open) = self.open.remove(&index) else {
            return;
        };
        let block = match open {
            Open::Text(text) => json!({"type": "text", "text": text}),
            Open::Tool { id, name, json, .. } => {
                // The same compact text a non-streamed reply's `input` gives.
                let input = if json.trim().is_empty() {
                    Ok(json!({}))
                } else {
                    serde_json::from_str::<Value>(&json)
                };
                match input {
                    Ok(input) => {
                        json!({"type": "tool_use", "id": id, "name": name, "input": input})
                    }
                    Err(_) => {
                        json!({"type": "tool_use", "id": id, "name": name, "raw_input": json})
                    }
                }
            }
            Open::Thinking {
                kind,
                thinking,
                signature,
                ..
            } if kind == "thinking" => {
                json!({"type": kind, "thinking": thinking, "signature": signature})
            }
            Open::Thinking { kind, data, .. } => json!({"type": kind, "data": data}),
            Open::Other => return,
        };
        self.closed.push((index, block));
    }

    fn message_delta(&mut self, event: &Value, sink: &mut (dyn FnMut(StreamEvent) + Send)) {
        if let Some(r) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
            self.reply.stop_reason = Some(r.to_owned());
            sink(StreamEvent::Finish {
                reason: crate::wire::finish_reason(r),
            });
        }
        if let Some(u) = event.get("usage") {
            let usage = self.usage.get_or_insert_with(ApiUsage::default);
            usage.update(u);
            sink(StreamEvent::Usage {
                usage: usage.to_usage(),
            });
        }
    }

    /// Events seen so far.
    pub fn events(&self) -> usize {
        self.events
    }

    /// The reply, once `message_stop` arrived; an incomplete stream is an error.
    pub fn finish(mut self) -> Result<Reply, ProviderError> {
        if !self.stopped {
            return Err(if self.events == 0 {
                ProviderError::StreamIncomplete { events: 0 }
            } else {
                ProviderError::Connection(format!(
                    "the stream ended after {} events without message_stop",
                    self.events
                ))
            });
        }
        self.closed.sort_by_key(|(i, _)| *i);
        for (_, block) in &self.closed {
            if block.get("raw_input").is_some() {
                return Err(ProviderError::InvalidResponse(
                    "a streamed tool_use input is not JSON".to_owned(),
                ));
            }
            let _ = self.reply.add_block(block);
        }
        self.reply.usage = self.usage;
        Ok(self.reply)
    }
}

/// An `error` event as a provider error: `overloaded_error` is 529, `rate_limit_error`
/// 429, `api_error` 500 (all retryable); others are invalid responses.
pub fn stream_error(event: &Value) -> ProviderError {
    let kind = event
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = event
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = match kind {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "request_too_large" => 413,
        "invalid_request_error" => 400,
        _ => return ProviderError::InvalidResponse(format!("stream error {kind}: {message}")),
    };
    ProviderError::Http {
        status,
        message: format!("{kind}: {message}"),
        retry_after: None,
    }
}
