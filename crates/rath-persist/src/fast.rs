//! A direct reader and writer for the chunk rows that make up almost every session file.
//!
//! Python OpenRath and this crate's writer lay a conversation chunk out one way only:
//!
//! ```text
//! {"record_type": "chunk", "index": 7, "kind": "user", "payload": {"content": "hi"}}
//! ```
//!
//! [`conversation_chunk`] reads exactly that layout (the four conversation kinds, Python's
//! `", "` / `": "` separators, keys in writer order) straight into a [`ChunkBody`], without
//! serde's per-field dispatch. Anything else — other spacing, key order, extra keys, an
//! extension object, an evidence kind, a malformed escape — returns `None`, and the caller
//! parses the line with serde_json as before. So this path decides nothing on its own: when
//! it answers, the answer equals serde's (the tests compare the two on generated rows).
//! [`write_conversation_chunk`] is the mirror image: it writes that layout for a plain
//! conversation chunk, byte for byte what the serde path with [`crate::json::PyFormatter`]
//! writes (tested likewise), and leaves every other chunk to serde.
//! [`write_evidence_chunk`] does the same for the `model_call` and `tool_evidence` rows a
//! chunk document holds for every model and tool call (SQL stores encode chunks that way).
//!
//! ```
//! # // The module is private; its behaviour shows through `load_bytes`.
//! use rath_persist::load_bytes;
//!
//! let text = concat!(
//!     r#"{"record_type": "header", "schema_version": 1, "id": "s1", "created_at": "2026-01-01T00:00:00+00:00", "parent_session_ids": [], "lineage_operator": "implicit", "lineage_kind": "unknown", "lineage_extras": [], "sandbox_backend": null, "sandbox_spec": null, "sandbox_handle_id": null}"#, "\n",
//!     r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "caf\u00e9 \"ok\""}}"#, "\n",
//! );
//! let loaded = load_bytes("s1.jsonl".as_ref(), text.as_bytes())?;
//! assert_eq!(loaded.session.get(0).and_then(|c| c.text()), Some("café \"ok\""));
//! # Ok::<(), rath_persist::PersistError>(())
//! ```

use serde_json::ser::Formatter;

use rath_session::{
    AssistantPayload, ChunkBody, FunctionCall, TextPayload, ToolCall, ToolResultPayload,
};

/// The chunk body of a canonical conversation-chunk row, or `None` when the row is anything
/// else (the caller then uses the general parser).
pub(crate) fn conversation_chunk(line: &str) -> Option<ChunkBody> {
    let mut c = Cursor {
        b: line.as_bytes(),
        i: 0,
    };
    c.lit(b"{\"record_type\": \"chunk\", \"index\": ")?;
    c.uint()?;
    c.lit(b", \"kind\": \"")?;
    let body = if c.lit(b"user\", \"payload\": {\"content\": ").is_some() {
        ChunkBody::User(TextPayload {
            content: c.string()?,
        })
    } else if c.lit(b"assistant\", \"payload\": {\"content\": ").is_some() {
        let content = c.opt_string()?;
        c.lit(b", \"tool_calls\": ")?;
        let tool_calls = if c.lit(b"null").is_some() {
            None
        } else {
            Some(c.tool_calls()?)
        };
        ChunkBody::Assistant(AssistantPayload {
            content,
            tool_calls,
        })
    } else if c
        .lit(b"tool_result\", \"payload\": {\"tool_call_id\": ")
        .is_some()
    {
        let tool_call_id = c.string()?;
        c.lit(b", \"name\": ")?;
        let name = c.string()?;
        c.lit(b", \"content\": ")?;
        let content = c.string()?;
        ChunkBody::ToolResult(ToolResultPayload {
            tool_call_id,
            name,
            content,
        })
    } else if c.lit(b"system\", \"payload\": {\"content\": ").is_some() {
        ChunkBody::System(TextPayload {
            content: c.string()?,
        })
    } else {
        return None;
    };
    // The payload's and the record's closing braces, then nothing but JSON whitespace.
    c.lit(b"}}")?;
    c.b[c.i..]
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .then_some(body)
}

/// Appends the row of a conversation chunk with no extension object (no branch tag, no
/// evidence riding on it) and returns `true`; returns `false`, appending nothing, for any
/// other chunk.
pub(crate) fn write_conversation_chunk(out: &mut Vec<u8>, index: u64, body: &ChunkBody) -> bool {
    let start = out.len();
    out.extend_from_slice(b"{\"record_type\": \"chunk\", \"index\": ");
    // Writing a number into a Vec cannot fail.
    let _ = crate::json::PyFormatter.write_u64(out, index);
    match body {
        ChunkBody::User(p) => {
            out.extend_from_slice(b", \"kind\": \"user\", \"payload\": {\"content\": ");
            put_str(out, &p.content);
        }
        ChunkBody::System(p) => {
            out.extend_from_slice(b", \"kind\": \"system\", \"payload\": {\"content\": ");
            put_str(out, &p.content);
        }
        ChunkBody::Assistant(p) => {
            out.extend_from_slice(b", \"kind\": \"assistant\", \"payload\": {\"content\": ");
            put_opt_str(out, p.content.as_deref());
            out.extend_from_slice(b", \"tool_calls\": ");
            match &p.tool_calls {
                None => out.extend_from_slice(b"null"),
                Some(calls) => {
                    out.push(b'[');
                    for (i, call) in calls.iter().enumerate() {
                        if i > 0 {
                            out.extend_from_slice(b", ");
                        }
                        out.extend_from_slice(b"{\"id\": ");
                        put_str(out, &call.id);
                        out.extend_from_slice(b", \"type\": ");
                        put_str(out, &call.call_type);
                        out.extend_from_slice(b", \"function\": {\"name\": ");
                        put_str(out, &call.function.name);
                        out.extend_from_slice(b", \"arguments\": ");
                        put_str(out, &call.function.arguments);
                        out.extend_from_slice(b"}}");
                    }
                    out.push(b']');
                }
            }
        }
        ChunkBody::ToolResult(p) => {
            out.extend_from_slice(b", \"kind\": \"tool_result\", \"payload\": {\"tool_call_id\": ");
            put_str(out, &p.tool_call_id);
            out.extend_from_slice(b", \"name\": ");
            put_str(out, &p.name);
            out.extend_from_slice(b", \"content\": ");
            put_str(out, &p.content);
        }
        _ => {
            out.truncate(start);
            return false;
        }
    }
    out.extend_from_slice(b"}}\n");
    true
}

/// Appends the chunk row of a `model_call` or `tool_evidence` chunk (what a chunk document
/// holds for every model and tool call: the row of its kind, no extension object) and
/// returns `true`, byte for byte what the serde path with [`crate::json::PyFormatter`]
/// writes (tested likewise); returns `false`, appending nothing, for any other chunk, one
/// with a `detail` map, or one whose elapsed time is not a finite number (those go to
/// serde).
pub(crate) fn write_evidence_chunk(out: &mut Vec<u8>, index: u64, body: &ChunkBody) -> bool {
    let mut f = crate::json::PyFormatter;
    let start = out.len();
    out.extend_from_slice(b"{\"record_type\": \"chunk\", \"index\": ");
    // Writing a number into a Vec cannot fail.
    let _ = f.write_u64(out, index);
    match body {
        ChunkBody::ModelCall(m) if m.detail.is_empty() && m.elapsed_ms.is_finite() => {
            out.extend_from_slice(b", \"kind\": \"model_call\", \"payload\": {\"request_id\": ");
            put_str(out, &m.request_id);
            out.extend_from_slice(b", \"agent\": ");
            put_opt_str(out, m.agent.as_deref());
            out.extend_from_slice(b", \"provider\": ");
            put_str(out, &m.provider);
            out.extend_from_slice(b", \"model\": ");
            put_opt_str(out, m.model.as_deref());
            out.extend_from_slice(b", \"finish_reason\": ");
            put_opt_str(out, m.finish_reason.as_deref());
            out.extend_from_slice(b", \"usage\": ");
            match &m.usage {
                None => out.extend_from_slice(b"null"),
                Some(u) => {
                    out.extend_from_slice(b"{\"prompt_tokens\": ");
                    let _ = f.write_u64(out, u.prompt_tokens);
                    out.extend_from_slice(b", \"completion_tokens\": ");
                    let _ = f.write_u64(out, u.completion_tokens);
                    out.extend_from_slice(b", \"total_tokens\": ");
                    let _ = f.write_u64(out, u.total_tokens);
                    out.push(b'}');
                }
            }
            out.extend_from_slice(b", \"messages_sent\": ");
            let _ = f.write_u64(out, m.messages_sent);
            out.extend_from_slice(b", \"elapsed_ms\": ");
            let _ = f.write_f64(out, m.elapsed_ms);
        }
        ChunkBody::ToolEvidence(e) if e.detail.is_empty() && e.elapsed_ms.is_finite() => {
            out.extend_from_slice(
                b", \"kind\": \"tool_evidence\", \"payload\": {\"tool_call_id\": ",
            );
            put_str(out, &e.tool_call_id);
            out.extend_from_slice(b", \"tool\": ");
            put_str(out, &e.tool);
            out.extend_from_slice(b", \"backend\": ");
            put_opt_str(out, e.backend.as_deref());
            out.extend_from_slice(b", \"sandbox_handle\": ");
            put_opt_str(out, e.sandbox_handle.as_deref());
            out.extend_from_slice(b", \"payload_kind\": ");
            put_opt_str(out, e.payload_kind.as_deref());
            out.extend_from_slice(b", \"summary\": ");
            put_opt_str(out, e.summary.as_deref());
            out.extend_from_slice(b", \"exit_code\": ");
            match e.exit_code {
                None => out.extend_from_slice(b"null"),
                Some(code) => {
                    let _ = f.write_i64(out, code);
                }
            }
            out.extend_from_slice(b", \"outcome\": ");
            put_str(out, &e.outcome);
            out.extend_from_slice(b", \"elapsed_ms\": ");
            let _ = f.write_f64(out, e.elapsed_ms);
            out.extend_from_slice(b", \"bytes_in\": ");
            let _ = f.write_u64(out, e.bytes_in);
            out.extend_from_slice(b", \"bytes_out\": ");
            let _ = f.write_u64(out, e.bytes_out);
        }
        _ => {
            out.truncate(start);
            return false;
        }
    }
    out.extend_from_slice(b"}}\n");
    true
}

/// [`put_str`] of a string, or `null`.
fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `s` as a JSON string the way [`crate::json::PyFormatter`] writes it. Text with
/// nothing to escape (no control character, quote or backslash, and no byte that could start
/// U+0085, U+2028 or U+2029) is copied; anything else goes through the formatter.
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    // A branch-free fold vectorises; an early-exit search does not.
    let plain = !s.bytes().fold(false, |acc, b| {
        acc | (b < 0x20) | (b == b'"') | (b == b'\\') | (b == 0xC2) | (b == 0xE2)
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let mut ser = serde_json::Serializer::with_formatter(&mut *out, crate::json::PyFormatter);
        // Writing a string into a Vec cannot fail.
        let _ = serde::Serialize::serialize(s, &mut ser);
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    /// Consumes `s` if the input continues with it.
    fn lit(&mut self, s: &[u8]) -> Option<()> {
        if self.b.get(self.i..)?.starts_with(s) {
            self.i += s.len();
            Some(())
        } else {
            None
        }
    }

    /// A non-negative integer without sign, fraction or exponent (what writers emit for
    /// `index`; the loader ignores the value).
    fn uint(&mut self) -> Option<()> {
        let digits = self.b[self.i..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 || digits > 19 || (digits > 1 && self.b[self.i] == b'0') {
            return None;
        }
        self.i += digits;
        Some(())
    }

    fn opt_string(&mut self) -> Option<Option<String>> {
        if self.lit(b"null").is_some() {
            Some(None)
        } else {
            self.string().map(Some)
        }
    }

    /// `[{"id": s, "type": s, "function": {"name": s, "arguments": s}}, ...]` (non-empty).
    fn tool_calls(&mut self) -> Option<Vec<ToolCall>> {
        self.lit(b"[")?;
        let mut calls = Vec::with_capacity(1);
        loop {
            self.lit(b"{\"id\": ")?;
            let id = self.string()?;
            self.lit(b", \"type\": ")?;
            let call_type = self.string()?;
            self.lit(b", \"function\": {\"name\": ")?;
            let name = self.string()?;
            self.lit(b", \"arguments\": ")?;
            let arguments = self.string()?;
            self.lit(b"}}")?;
            calls.push(ToolCall {
                id,
                call_type,
                function: FunctionCall { name, arguments },
            });
            if self.lit(b", ").is_none() {
                break;
            }
        }
        self.lit(b"]")?;
        Some(calls)
    }

    /// A JSON string, unescaped. `None` for anything serde_json would reject (a raw control
    /// character, an unknown escape, a lone surrogate) and for an unterminated string.
    fn string(&mut self) -> Option<String> {
        self.lit(b"\"")?;
        let rest = &self.b[self.i..];
        // The common case: no escape before the closing quote.
        let end = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[end] == b'"' {
            let s = std::str::from_utf8(&rest[..end]).ok()?.to_owned();
            self.i += end + 1;
            return Some(s);
        }
        let mut out = Vec::with_capacity(rest.len().min(end + 64));
        let mut j = 0;
        loop {
            let run = rest[j..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
            out.extend_from_slice(&rest[j..j + run]);
            j += run;
            match rest[j] {
                b'"' => {
                    self.i += j + 1;
                    return String::from_utf8(out).ok();
                }
                b'\\' => {
                    let esc = *rest.get(j + 1)?;
                    j += 2;
                    let byte = match esc {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let ch = unicode_escape(rest, &mut j)?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            continue;
                        }
                        _ => return None,
                    };
                    out.push(byte);
                }
                _ => return None, // a raw control character
            }
        }
    }
}

/// Decodes the `XXXX` after `\u` at `rest[*j..]` (and a following low-surrogate escape when
/// the first is a high surrogate), advancing `*j`.
fn unicode_escape(rest: &[u8], j: &mut usize) -> Option<char> {
    let first = hex4(rest.get(*j..*j + 4)?)?;
    *j += 4;
    match first {
        0xD800..=0xDBFF => {
            if rest.get(*j..*j + 2)? != b"\\u" {
                return None;
            }
            let second = hex4(rest.get(*j + 2..*j + 6)?)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return None;
            }
            *j += 6;
            char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        }
        0xDC00..=0xDFFF => None,
        _ => char::from_u32(first),
    }
}

fn hex4(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, &d| {
        let v = char::from(d).to_digit(16)?;
        Some(acc * 16 + v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ChunkOut, PayloadRef};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// What the general (serde) path makes of a line.
    fn general(line: &str) -> Option<ChunkBody> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let kind = v.get("kind")?.as_str()?.to_owned();
        crate::record::body_from_raw(&kind, v.get("payload")?.clone()).ok()
    }

    /// The row the serde path writes for `body` at `index`.
    fn serde_row(body: &ChunkBody, index: u64) -> Vec<u8> {
        let mut out = Vec::new();
        crate::json::write_line(
            &mut out,
            &ChunkOut {
                record_type: "chunk",
                index,
                kind: body.kind().as_str(),
                payload: PayloadRef(body),
                rath_ext: None,
            },
        )
        .expect("serialise");
        out
    }

    fn row(body: &ChunkBody) -> String {
        String::from_utf8(serde_row(body, 3)).expect("utf-8")
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}\u{e9}\u{1f600} ]{0,24}",
        ]
    }

    fn body() -> impl Strategy<Value = ChunkBody> {
        let call = (text(), text(), text(), text()).prop_map(|(id, t, name, arguments)| ToolCall {
            id,
            call_type: t,
            function: FunctionCall { name, arguments },
        });
        prop_oneof![
            text().prop_map(|content| ChunkBody::User(TextPayload { content })),
            text().prop_map(|content| ChunkBody::System(TextPayload { content })),
            (
                proptest::option::of(text()),
                proptest::option::of(proptest::collection::vec(call, 1..4))
            )
                .prop_map(|(content, tool_calls)| ChunkBody::Assistant(
                    AssistantPayload {
                        content,
                        tool_calls
                    }
                )),
            (text(), text(), text()).prop_map(|(tool_call_id, name, content)| {
                ChunkBody::ToolResult(ToolResultPayload {
                    tool_call_id,
                    name,
                    content,
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn written_rows_read_back_the_same_as_serde(b in body()) {
            let line = row(&b);
            let line = line.trim_end_matches('\n');
            let fast = conversation_chunk(line);
            prop_assert_eq!(fast.as_ref(), Some(&b), "row {}", line);
            prop_assert_eq!(fast, general(line));
        }

        #[test]
        fn any_answer_equals_serde(b in body(), cut in 0usize..400, junk in "[ -~]{0,3}") {
            // Damaged rows: whenever the direct reader answers, serde agrees.
            let line = row(&b);
            let mut s: String = line.trim_end_matches('\n').to_owned();
            let at = (0..=cut.min(s.len())).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            s.insert_str(at, &junk);
            if let Some(fast) = conversation_chunk(&s) {
                prop_assert_eq!(Some(fast), general(&s), "row {}", s);
            }
        }
    }

    proptest! {
        #[test]
        fn direct_rows_are_the_serde_rows(b in body(), index in 0u64..u64::MAX) {
            let serde_row = serde_row(&b, index);
            let mut direct = b"prefix".to_vec();
            prop_assert!(write_conversation_chunk(&mut direct, index, &b));
            prop_assert_eq!(
                String::from_utf8_lossy(&direct[6..]),
                String::from_utf8_lossy(&serde_row)
            );
        }
    }

    /// Any evidence body: a model call or a tool's evidence.
    fn evidence() -> impl Strategy<Value = ChunkBody> {
        prop_oneof![model_call(), tool_evidence()]
    }

    /// Elapsed times a writer must get right: zero, any float, not a number, one too large
    /// for plain digits, one that needs an exponent, negative zero.
    fn elapsed() -> impl Strategy<Value = f64> + Clone {
        prop_oneof![
            Just(0.0),
            any::<f64>(),
            Just(f64::NAN),
            Just(1e16),
            Just(1e-5),
            Just(-0.0)
        ]
    }

    /// An evidence chunk's detail: mostly empty, sometimes one entry.
    fn detail() -> impl Strategy<Value = BTreeMap<String, serde_json::Value>> + Clone {
        prop_oneof![
            3 => Just(BTreeMap::new()),
            1 => Just([("stream".to_owned(), serde_json::json!(true))].into_iter().collect()),
        ]
    }

    /// Any `model_call` body.
    fn model_call() -> impl Strategy<Value = ChunkBody> {
        let opt = || proptest::option::of(text());
        let usage = proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(prompt_tokens, completion_tokens, total_tokens)| rath_session::Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens,
            },
        ));
        (
            text(),
            opt(),
            text(),
            opt(),
            opt(),
            usage,
            any::<u64>(),
            elapsed(),
            detail(),
        )
            .prop_map(
                |(
                    request_id,
                    agent,
                    provider,
                    model,
                    finish_reason,
                    usage,
                    messages_sent,
                    elapsed_ms,
                    detail,
                )| {
                    ChunkBody::ModelCall(rath_session::ModelCall {
                        request_id,
                        agent,
                        provider,
                        model,
                        finish_reason,
                        usage,
                        messages_sent,
                        elapsed_ms,
                        detail,
                    })
                },
            )
    }

    /// Any `tool_evidence` body.
    fn tool_evidence() -> impl Strategy<Value = ChunkBody> {
        let opt = || proptest::option::of(text());
        (
            (text(), text(), opt(), opt(), opt(), opt()),
            (
                proptest::option::of(any::<i64>()),
                text(),
                elapsed(),
                any::<u64>(),
                any::<u64>(),
                detail(),
            ),
        )
            .prop_map(
                |(
                    (tool_call_id, tool, backend, sandbox_handle, payload_kind, summary),
                    (exit_code, outcome, elapsed_ms, bytes_in, bytes_out, detail),
                )| {
                    ChunkBody::ToolEvidence(rath_session::ToolEvidence {
                        tool_call_id,
                        tool,
                        backend,
                        sandbox_handle,
                        payload_kind,
                        summary,
                        exit_code,
                        outcome,
                        elapsed_ms,
                        bytes_in,
                        bytes_out,
                        detail,
                    })
                },
            )
    }

    proptest! {
        #[test]
        fn direct_evidence_rows_are_the_serde_rows(b in evidence(), index in 0u64..u64::MAX) {
            let mut direct = b"prefix".to_vec();
            let written = write_evidence_chunk(&mut direct, index, &b);
            let (detail, elapsed) = match &b {
                ChunkBody::ModelCall(m) => (m.detail.is_empty(), m.elapsed_ms),
                ChunkBody::ToolEvidence(e) => (e.detail.is_empty(), e.elapsed_ms),
                _ => unreachable!(),
            };
            // Written exactly when there is no detail and the time is a finite number.
            prop_assert_eq!(written, detail && elapsed.is_finite());
            if !written {
                prop_assert_eq!(&direct, b"prefix");
                return Ok(());
            }
            let serde_row = serde_row(&b, index);
            prop_assert_eq!(
                String::from_utf8_lossy(&direct[6..]),
                String::from_utf8_lossy(&serde_row)
            );
        }
    }

    #[test]
    fn conversation_chunks_are_not_evidence() {
        let mut out = b"keep".to_vec();
        let user = ChunkBody::User(TextPayload {
            content: "hi".into(),
        });
        assert!(!write_evidence_chunk(&mut out, 0, &user));
        assert_eq!(out, b"keep");
    }

    #[test]
    fn other_chunks_are_left_to_serde() {
        let mut out = b"keep".to_vec();
        let note = ChunkBody::Note(rath_session::Note::default());
        assert!(!write_conversation_chunk(&mut out, 0, &note));
        assert_eq!(out, b"keep");
    }

    #[test]
    fn escapes_decode_like_serde() {
        let lines = [
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "\u00e9\ud83d\ude00\/\b\f\n\r\t\"\\"}}"#,
            r#"{"record_type": "chunk", "index": 10, "kind": "assistant", "payload": {"content": null, "tool_calls": null}}"#,
            r#"{"record_type": "chunk", "index": 1, "kind": "assistant", "payload": {"content": "x", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "n", "arguments": "{\"k\": 1}"}}, {"id": "b", "type": "function", "function": {"name": "m", "arguments": "{}"}}]}}"#,
            "{\"record_type\": \"chunk\", \"index\": 2, \"kind\": \"system\", \"payload\": {\"content\": \"s\"}}\r",
        ];
        for line in lines {
            let fast = conversation_chunk(line);
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, general(line), "{line}");
        }
    }

    #[test]
    fn other_layouts_go_to_the_general_parser() {
        let lines = [
            // lone surrogates, bad escapes, raw control characters
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "\ud83d"}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "\ude00"}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "\x"}}"#,
            "{\"record_type\": \"chunk\", \"index\": 0, \"kind\": \"user\", \"payload\": {\"content\": \"a\u{1}\"}}",
            // other spacing, order, extra keys, extensions, leading zeros, trailing text
            r#"{"record_type":"chunk","index":0,"kind":"user","payload":{"content":"hi"}}"#,
            r#"{"record_type": "chunk", "kind": "user", "index": 0, "payload": {"content": "hi"}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi", "extra": 1}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi"}, "rath_ext": {"branch": "b"}}"#,
            r#"{"record_type": "chunk", "index": 01, "kind": "user", "payload": {"content": "hi"}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi"}} x"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "note", "payload": {"text": "hi"}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "assistant", "payload": {"content": null, "tool_calls": []}}"#,
            r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi"#,
        ];
        for line in lines {
            assert_eq!(conversation_chunk(line), None, "{line}");
        }
    }
}
