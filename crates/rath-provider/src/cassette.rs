//! Cassettes: record provider traffic to JSONL and replay it offline.
//!
//! ```
//! use rath_provider::{
//!     Provider, ProviderRequest, RecordingProvider, ReplayProvider, ScriptedProvider,
//!     ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("run.jsonl");
//! let live = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(3, 1)]);
//! let rec = RecordingProvider::create(live, &path).unwrap();
//! let s = Session::user_with("hello", Stamper::counter());
//! let first = rec.complete(&ProviderRequest::from_session(&s, vec![])).await.unwrap();
//!
//! let replay = ReplayProvider::load(&path).unwrap();
//! let s = Session::user_with("hello", Stamper::counter());
//! let again = replay.complete(&ProviderRequest::from_session(&s, vec![])).await.unwrap();
//! assert_eq!(first, again);
//! replay.assert_complete().unwrap();
//! # });
//! ```
//!
//! Each line holds one interaction: the normalised request (everything but the request id)
//! and the response (chunk, finish reason, usage, model, provider name). Replay hands back the
//! recorded response under the *current* request id and the *recorded* provider name, so a
//! deterministic workflow replayed reproduces its sessions byte for byte. Requests are matched
//! to the first unused recording with an equal normalised request, so parallel branches that
//! interleave differently still replay; a request with no match fails with a line diff against
//! the next unused recording.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use rath_session::{Chunk, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, StreamSink,
};

/// One recorded request and its response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// [`ProviderRequest::normalized`] of the request.
    pub request: Value,
    /// What the provider answered.
    pub response: RecordedResponse,
}

/// A [`ProviderResponse`] without its request id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    /// The assistant chunk.
    pub chunk: Chunk,
    /// Finish reason.
    pub finish_reason: Option<String>,
    /// Usage.
    pub usage: Option<Usage>,
    /// Model that answered.
    pub model: Option<String>,
    /// The recording provider's name.
    pub provider: String,
    /// The response's evidence detail (how it was fetched); omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, Value>,
}

impl RecordedResponse {
    fn of(r: &ProviderResponse) -> Self {
        Self {
            chunk: r.chunk.clone(),
            finish_reason: r.finish_reason.clone(),
            usage: r.usage,
            model: r.model.clone(),
            provider: r.provider.clone(),
            detail: r.detail.clone(),
        }
    }

    fn to_response(&self, request_id: &str) -> ProviderResponse {
        ProviderResponse {
            request_id: request_id.to_owned(),
            chunk: self.chunk.clone(),
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
            model: self.model.clone(),
            provider: self.provider.clone(),
            detail: self.detail.clone(),
        }
    }
}

/// Wraps a provider and appends every successful interaction to a JSONL cassette: the
/// recording layer (also built with [`crate::ProviderExt::record_to`]); its manifest lists
/// a `recording` layer.
#[derive(Debug)]
pub struct RecordingProvider<P> {
    inner: P,
    path: PathBuf,
    file: Mutex<File>,
}

impl<P: Provider> RecordingProvider<P> {
    /// Records to `path`, truncating any existing cassette.
    pub fn create(inner: P, path: impl AsRef<Path>) -> Result<Self, ProviderError> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path)
            .map_err(|e| ProviderError::Cassette(format!("create {}: {e}", path.display())))?;
        Ok(Self {
            inner,
            path,
            file: Mutex::new(file),
        })
    }

    /// Records to `path`, appending to an existing cassette.
    pub fn append(inner: P, path: impl AsRef<Path>) -> Result<Self, ProviderError> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| ProviderError::Cassette(format!("open {}: {e}", path.display())))?;
        Ok(Self {
            inner,
            path,
            file: Mutex::new(file),
        })
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The cassette path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn record(&self, req: &ProviderRequest, resp: &ProviderResponse) -> Result<(), ProviderError> {
        let line = serde_json::to_string(&Interaction {
            request: req.normalized(),
            response: RecordedResponse::of(resp),
        })
        .map_err(|e| ProviderError::Cassette(format!("encode: {e}")))?;
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // One write per line keeps concurrent recordings line-atomic.
        f.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| f.flush())
            .map_err(|e| ProviderError::Cassette(format!("write {}: {e}", self.path.display())))
    }
}

#[async_trait]
impl<P: Provider> Provider for RecordingProvider<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let resp = self.inner.complete(req).await?;
        self.record(req, &resp)?;
        Ok(resp)
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let resp = self.inner.stream(req, sink).await?;
        self.record(req, &resp)?;
        Ok(resp)
    }

    fn manifest(&self) -> ProviderManifest {
        self.inner
            .manifest()
            .wrapped(crate::LayerManifest::new("recording"))
    }
}

/// Serves a recorded cassette without network; see the module docs for matching rules.
#[derive(Debug)]
pub struct ReplayProvider {
    interactions: Vec<Interaction>,
    used: Mutex<Vec<bool>>,
    source: String,
}

/// The name a replay provider reports (responses keep the recorded provider's name).
pub const REPLAY_PROVIDER_NAME: &str = "replay";

impl ReplayProvider {
    /// Loads a JSONL cassette.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProviderError> {
        let path = path.as_ref();
        let file = File::open(path)
            .map_err(|e| ProviderError::Cassette(format!("open {}: {e}", path.display())))?;
        let mut interactions = Vec::new();
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let line =
                line.map_err(|e| ProviderError::Cassette(format!("read {}: {e}", path.display())))?;
            if line.trim().is_empty() {
                continue;
            }
            let it: Interaction = serde_json::from_str(&line).map_err(|e| {
                ProviderError::Cassette(format!("{} line {}: {e}", path.display(), n + 1))
            })?;
            interactions.push(it);
        }
        let mut p = Self::from_interactions(interactions);
        p.source = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(p)
    }

    /// A replay over interactions already in memory.
    pub fn from_interactions(interactions: Vec<Interaction>) -> Self {
        let used = Mutex::new(vec![false; interactions.len()]);
        Self {
            interactions,
            used,
            source: String::new(),
        }
    }

    /// Interactions not yet replayed.
    pub fn remaining(&self) -> usize {
        self.used_lock().iter().filter(|u| !**u).count()
    }

    /// Fails when some recorded interactions were never replayed.
    pub fn assert_complete(&self) -> Result<(), ProviderError> {
        let used = self.used_lock();
        match used.iter().position(|u| !*u) {
            None => Ok(()),
            Some(index) => Err(ProviderError::ReplayMismatch {
                index,
                diff: format!(
                    "{} of {} recorded interactions were never requested",
                    used.iter().filter(|u| !**u).count(),
                    used.len()
                ),
            }),
        }
    }

    fn used_lock(&self) -> std::sync::MutexGuard<'_, Vec<bool>> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Provider for ReplayProvider {
    fn name(&self) -> &str {
        REPLAY_PROVIDER_NAME
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let wanted = req.normalized();
        let mut used = self.used_lock();
        let hit = (0..self.interactions.len())
            .find(|&i| !used[i] && self.interactions[i].request == wanted);
        match hit {
            Some(i) => {
                used[i] = true;
                Ok(self.interactions[i].response.to_response(&req.request_id))
            }
            None => match used.iter().position(|u| !*u) {
                Some(index) => Err(ProviderError::ReplayMismatch {
                    index,
                    diff: json_diff(&self.interactions[index].request, &wanted),
                }),
                None => Err(ProviderError::ReplayExhausted {
                    recorded: self.interactions.len(),
                    index: self.interactions.len(),
                }),
            },
        }
    }

    fn manifest(&self) -> ProviderManifest {
        let mut m = ProviderManifest::new(REPLAY_PROVIDER_NAME);
        m.parameters
            .insert("cassette".into(), json!(self.source.clone()));
        m.parameters
            .insert("interactions".into(), json!(self.interactions.len()));
        if let Some(first) = self.interactions.first() {
            m.model = first.response.model.clone();
        }
        m
    }
}

/// A line diff of two JSON values, pretty-printed: `-` lines are only in `recorded`, `+` lines
/// only in `actual`, with two lines of context.
pub fn json_diff(recorded: &Value, actual: &Value) -> String {
    let a = serde_json::to_string_pretty(recorded).unwrap_or_default();
    let b = serde_json::to_string_pretty(actual).unwrap_or_default();
    line_diff(&a, &b)
}

fn line_diff(a: &str, b: &str) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    // Longest common subsequence table; cassette requests are small enough for O(n·m).
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    let near_change = |k: usize| {
        let lo = k.saturating_sub(2);
        let hi = (k + 2).min(ops.len() - 1);
        (lo..=hi).any(|m| ops[m].0 != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("  ...\n");
                skipped = false;
            }
            out.push(*op);
            out.push(' ');
            out.push_str(line);
            out.push('\n');
        } else {
            skipped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_show_only_changed_lines_with_context() {
        let d = json_diff(
            &json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}),
            &json!({"a": 1, "b": 2, "c": 30, "d": 4, "e": 5, "f": 6}),
        );
        assert!(d.contains("-   \"c\": 3,"), "{d}");
        assert!(d.contains("+   \"c\": 30,"), "{d}");
        assert!(!d.contains("\"f\""), "{d}");
    }
}
