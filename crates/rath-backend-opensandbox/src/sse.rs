//! Reading execd's server-sent event stream (`ServerStreamEvent` objects).

use serde::Deserialize;

/// One `ServerStreamEvent`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamEvent {
    /// `init`, `stdout`, `stderr`, `error`, `execution_complete`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Text of `init` (the command id), `stdout`, `stderr` and `status` events.
    #[serde(default)]
    pub text: Option<String>,
    /// Error details of an `error` event.
    #[serde(default)]
    pub error: Option<StreamError>,
}

/// The `error` object of an event.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamError {
    /// Error name.
    #[serde(default)]
    pub ename: String,
    /// Error value.
    #[serde(default)]
    pub evalue: String,
}

/// Splits SSE text into events: `data:` lines of one event are joined; bare JSON lines (some
/// servers send newline-delimited JSON on the same route) are events of their own.
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    data: String,
}

impl SseParser {
    /// Feeds bytes; returns the events completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            self.line(line.trim_end_matches(['\r', '\n']), &mut out);
        }
        out
    }

    /// Ends the stream; returns a last event left without a blank line.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            self.line(rest.trim_end_matches('\r'), &mut out);
        }
        self.flush(&mut out);
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<StreamEvent>) {
        if line.is_empty() {
            self.flush(out);
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        } else if line.starts_with('{') {
            self.flush(out);
            if let Ok(ev) = serde_json::from_str(line) {
                out.push(ev);
            }
        }
        // `event:`, `id:`, `retry:` and comments carry nothing this client needs.
    }

    fn flush(&mut self, out: &mut Vec<StreamEvent>) {
        if self.data.is_empty() {
            return;
        }
        if let Ok(ev) = serde_json::from_str(&std::mem::take(&mut self.data)) {
            out.push(ev);
        }
        self.data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_events_and_ndjson() {
        let mut p = SseParser::default();
        let mut evs = p.feed(b"data: {\"type\":\"init\",\"text\":\"c1\"}\n\ndata: {\"type\":\"std");
        evs.extend(p.feed(b"out\",\"text\":\"hi\\n\"}\n\n{\"type\":\"stderr\",\"text\":\"e\"}\n"));
        evs.extend(
            p.feed(b"data: {\"type\":\"error\",\"error\":{\"ename\":\"X\",\"evalue\":\"3\"}}"),
        );
        evs.extend(p.finish());
        let kinds: Vec<&str> = evs.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["init", "stdout", "stderr", "error"]);
        assert_eq!(evs[1].text.as_deref(), Some("hi\n"));
        assert_eq!(evs[3].error.as_ref().map(|e| e.evalue.as_str()), Some("3"));
    }
}
