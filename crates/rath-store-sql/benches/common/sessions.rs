//! The sessions the store benches persist: `n` chunks in the 4-shape rows of
//! `rath-persist`'s `persist` bench (a user message, a tool call, its result, a reply).

use rath_session::{Chunk, Lineage, Session, Stamper, ToolCall};

/// `n` chunks cycling through the four shapes.
pub fn rows(n: usize) -> Vec<Chunk> {
    (0..n)
        .map(|i| match i % 4 {
            0 => Chunk::user(format!("user message number {i}: please do the thing")),
            1 => Chunk::assistant(
                None,
                Some(vec![ToolCall::function(
                    format!("call_{i}"),
                    "echo",
                    format!("{{\"text\": \"payload {i}\"}}"),
                )]),
            ),
            2 => Chunk::tool_result(
                format!("call_{}", i - 1),
                "echo",
                format!("{{\"echo\": \"payload {i}\"}}"),
            ),
            _ => Chunk::assistant_text(format!("assistant reply {i}, all done")),
        })
        .collect()
}

/// A session of [`rows`]`(n)` with no parents and counter ids.
pub fn of(n: usize) -> Session {
    Session::from_chunks(rows(n), Lineage::implicit(), Stamper::counter())
}
