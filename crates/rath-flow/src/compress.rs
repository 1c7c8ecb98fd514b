//! Compressors: replace a span of a session by less, and record exactly what was dropped.
//!
//! ```
//! use rath_flow::{KeepLastN, WorkflowExt};
//! use rath_session::{Chunk, ChunkBody, LineageKind, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let s = Session::user_with("one", Stamper::counter())
//!     .push(Chunk::assistant_text("two"))
//!     .push(Chunk::user("three"))
//!     .push(Chunk::assistant_text("four"));
//! let out = KeepLastN::new(2).run(s.clone()).await?;
//! assert_eq!(out.lineage().kind, LineageKind::OpSessionCompress);
//! assert_eq!(out.conversation_len(), 2);
//! let ChunkBody::CompressionRecord(rec) = out.chunks()[0].body() else { panic!() };
//! assert_eq!(rec.dropped.len(), 2);
//! assert_eq!(rec.dropped[0].sha256, s.chunks()[0].sha256());
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! Output sessions have parents `[input]`, operator `Session.compress`, kind
//! `op_session_compress`, extras `compression.lossy` and `compression.rows_out`
//! (conversation rows out), and begin with a `compression_record` chunk listing every dropped
//! chunk's index, kind and sha256. The cut never separates a tool result from the assistant
//! chunk that requested it.
//!
//! A session that holds pending work (an approval stop, an interrupted round) passes through
//! a compressor unchanged: compressing it would drop the resume markers of the team that
//! stopped (and perhaps the assistant chunk of a pending call), so forwarding it on resumes
//! the team where it stopped.

use std::sync::Arc;

use futures::future::BoxFuture;
use rath_provider::{Provider, ProviderRequest};
use rath_session::{
    ChatMessage, Chunk, ChunkBody, CompressionRecord, DroppedChunk, Lineage, LineageKind, Role,
    Session,
};

use crate::FlowError;
use crate::context::FlowContext;
use crate::error::carry_usage;
use crate::error::{FailedAt, fail_from};
use crate::resume::is_resumption;
use crate::service::ModelCall;
use crate::workflow::Workflow;

/// The index where the last `keep` conversation chunks begin, moved back so that it never
/// starts on a tool result.
fn cut_index(session: &Session, keep: usize) -> usize {
    let chunks = session.chunks();
    let conv: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].is_conversation())
        .collect();
    if conv.len() <= keep {
        return 0;
    }
    let mut k = conv.len() - keep;
    while k > 0 && chunks[conv[k]].kind() == rath_session::ChunkKind::ToolResult {
        k -= 1;
    }
    conv[k]
}

fn record(name: &str, session: &Session, cut: usize, lossy: bool, rows_out: u64) -> Chunk {
    let dropped = (0..cut)
        .map(|i| {
            let c = &session.chunks()[i];
            DroppedChunk {
                index: i as u64,
                kind: c.kind().as_str().to_owned(),
                sha256: c.sha256(),
            }
        })
        .collect();
    Chunk::new(ChunkBody::CompressionRecord(CompressionRecord {
        compressor: name.to_owned(),
        lossy,
        dropped,
        rows_out,
    }))
}

fn compressed(input: &Session, chunks: Vec<Chunk>, lossy: bool) -> Session {
    let rows_out = chunks.iter().filter(|c| c.is_conversation()).count() as u64;
    let lineage = Lineage::new(
        vec![input.id().clone()],
        "Session.compress",
        LineageKind::OpSessionCompress,
    )
    .with_extra("compression.lossy", lossy)
    .with_extra("compression.rows_out", rows_out);
    carry_usage(input, input.derive(lineage)).with_chunks(chunks.into_iter().collect())
}

/// Keeps the last `n` conversation chunks (and the evidence among them); drops the rest,
/// recording digests. Lossless by rule: `compression.lossy = false`.
#[derive(Clone, Debug)]
pub struct KeepLastN {
    name: String,
    n: usize,
}

impl KeepLastN {
    /// Keeps the last `n` conversation chunks.
    pub fn new(n: usize) -> Self {
        Self {
            name: "keep_last_n".to_owned(),
            n,
        }
    }

    /// Renames the compressor.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The compressed session.
    pub fn compress(&self, input: &Session) -> Session {
        let cut = cut_index(input, self.n);
        let kept: Vec<Chunk> = input.chunks().iter().skip(cut).cloned().collect();
        let rows = kept.iter().filter(|c| c.is_conversation()).count() as u64;
        let mut chunks = vec![record(&self.name, input, cut, false, rows)];
        chunks.extend(kept);
        compressed(input, chunks, false)
    }
}

impl Workflow for KeepLastN {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "Keeps only the most recent conversation chunks."
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        _cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            if is_resumption(&session) {
                return Ok(session); // pending work passes through (see the module docs)
            }
            Ok(self.compress(&session))
        })
    }
}

/// Replaces everything but the last `keep_last` conversation chunks by a model-written
/// summary (a `user` chunk starting `[Summary of earlier conversation]`). Lossy:
/// `compression.lossy = true`. The summary call's `model_call` evidence and usage (attributed
/// to the compressor's name) are kept.
#[derive(Clone)]
pub struct SummaryCompressor {
    name: String,
    provider: Arc<dyn Provider>,
    model: Option<String>,
    keep_last: usize,
    instructions: String,
}

impl std::fmt::Debug for SummaryCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryCompressor")
            .field("name", &self.name)
            .field("keep_last", &self.keep_last)
            .finish_non_exhaustive()
    }
}

/// The first line of a summary chunk.
pub const SUMMARY_HEADER: &str = "[Summary of earlier conversation]";

impl SummaryCompressor {
    /// Summarises all but the last `keep_last` conversation chunks with `provider`.
    pub fn new(provider: impl Provider + 'static, keep_last: usize) -> Self {
        Self {
            name: "summary".to_owned(),
            provider: crate::service::shared_provider(provider),
            model: None,
            keep_last,
            instructions: "Summarize the conversation so far in a few sentences. Keep every fact, number, file name and decision a later reader needs.".to_owned(),
        }
    }

    /// Renames the compressor (also the usage attribution key).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Replaces the summarising instructions.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = text.into();
        self
    }

    /// The compressed session (unchanged content plus an empty record when nothing needs
    /// summarising).
    pub async fn compress(&self, input: &Session, cx: &FlowContext) -> Result<Session, FlowError> {
        let cut = cut_index(input, self.keep_last);
        if cut == 0 {
            let kept: Vec<Chunk> = input.chunks().iter().cloned().collect();
            let rows = kept.iter().filter(|c| c.is_conversation()).count() as u64;
            let mut chunks = vec![record(&self.name, input, 0, false, rows)];
            chunks.extend(kept);
            return Ok(compressed(input, chunks, false));
        }
        cx.admit(Some(&self.name))?;
        let mut messages: Vec<ChatMessage> = (0..cut)
            .filter_map(|i| ChatMessage::from_chunk(&input.chunks()[i]))
            .collect();
        messages.push(ChatMessage {
            role: Role::User,
            content: Some(self.instructions.clone()),
            tool_call_id: None,
            tool_calls: None,
        });
        let mut req = ProviderRequest::new(input.stamper().next_token("req"), messages)
            .with_agent(self.name.clone());
        req.model = self.model.clone();
        let timer = input.stamper().start_timer();
        let resp = cx
            .call_model(ModelCall::new(self.provider.as_ref(), &req))
            .await?;
        let summary = resp.text().unwrap_or("").trim().to_owned();
        let kept: Vec<Chunk> = input.chunks().iter().skip(cut).cloned().collect();
        let summary_chunk = Chunk::user(format!("{SUMMARY_HEADER}\n{summary}"));
        let rows = 1 + kept.iter().filter(|c| c.is_conversation()).count() as u64;
        let mut chunks = vec![
            record(&self.name, input, cut, true, rows),
            resp.model_call_chunk(&req, timer.elapsed_ms()),
            summary_chunk,
        ];
        chunks.extend(kept);
        let mut out = compressed(input, chunks, true);
        if let Some(u) = resp.usage {
            out = out.with_usage(Some(&self.name), u);
        }
        Ok(out)
    }
}

impl Workflow for SummaryCompressor {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "Summarizes older conversation to save context."
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            if is_resumption(&session) {
                return Ok(session); // pending work passes through (see the module docs)
            }
            self.compress(&session, cx).await.map_err(|e| {
                let at = FailedAt::new(Some(&self.name), "compress");
                fail_from(e, &session, "SummaryCompressor.compress", at)
            })
        })
    }
}
