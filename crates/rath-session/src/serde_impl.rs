//! Serde for the whole session value (chunks, lineage, usage, placement, pending work).
//!
//! ```
//! use rath_session::{Session, Stamper};
//!
//! let s = Session::user_with("hi", Stamper::counter()).to("local");
//! let json = serde_json::to_string(&s).unwrap();
//! let back: Session = serde_json::from_str(&json).unwrap();
//! assert_eq!(serde_json::to_string(&back).unwrap(), json);
//! ```
//!
//! A live sandbox handle is not serialisable; its id is written as `handle_id` and read back as
//! a recorded id on an unbound slot.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{
    Chunk, Lineage, PendingCall, Placement, SandboxSpec, Session, SessionId, SessionParts, Stamper,
    Timestamp, Usage,
};

#[derive(Serialize)]
struct PlacementOut<'a> {
    backend: Option<&'a str>,
    spec: Option<&'a SandboxSpec>,
    handle_id: Option<&'a str>,
}

#[derive(Serialize)]
struct SessionOut<'a> {
    id: &'a SessionId,
    created_at: Timestamp,
    lineage: &'a Lineage,
    chunks: &'a crate::ChunkList,
    cumulative_usage: Option<Usage>,
    agent_usage: &'a BTreeMap<String, Usage>,
    placement: PlacementOut<'a>,
    pending: &'a [PendingCall],
}

#[derive(Deserialize)]
struct PlacementIn {
    backend: Option<String>,
    spec: Option<SandboxSpec>,
    handle_id: Option<String>,
}

#[derive(Deserialize)]
struct SessionIn {
    id: SessionId,
    created_at: Timestamp,
    lineage: Lineage,
    chunks: Vec<Chunk>,
    cumulative_usage: Option<Usage>,
    #[serde(default)]
    agent_usage: BTreeMap<String, Usage>,
    placement: PlacementIn,
    #[serde(default)]
    pending: Vec<PendingCall>,
}

impl Serialize for Session {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.placement();
        SessionOut {
            id: self.id(),
            created_at: self.created_at(),
            lineage: self.lineage(),
            chunks: self.chunks(),
            cumulative_usage: self.usage(),
            agent_usage: self.agent_usage(),
            placement: PlacementOut {
                backend: p.backend(),
                spec: p.spec(),
                handle_id: p.handle_id(),
            },
            pending: self.pending(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Session {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let i = SessionIn::deserialize(d)?;
        Ok(Session::from_parts(
            SessionParts {
                id: i.id,
                created_at: i.created_at,
                lineage: i.lineage,
                chunks: i.chunks.into_iter().collect(),
                usage: i.cumulative_usage,
                agent_usage: i.agent_usage,
                placement: Placement::restored(
                    i.placement.backend,
                    i.placement.spec,
                    i.placement.handle_id,
                ),
                pending: i.pending,
            },
            Stamper::system(),
        ))
    }
}
