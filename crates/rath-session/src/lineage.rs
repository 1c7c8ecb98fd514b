//! Lineage: where a session came from.
//!
//! ```
//! use rath_session::{LineageKind, Session, Stamper};
//!
//! let root = Session::user_with("question", Stamper::counter());
//! let fork = root.fork();
//! assert_eq!(fork.lineage().kind, LineageKind::OpFork);
//! assert_eq!(fork.lineage().operator, "Session.fork");
//! assert_eq!(fork.lineage().parents, vec![root.id().clone()]);
//! ```

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A session id. Any string is accepted (OpenRath writes UUIDs, we mint ULIDs by default).
///
/// Ids up to 38 bytes (ULIDs, UUIDs) are stored inline, so minting and cloning one never
/// allocates; longer ids are shared behind an `Arc`.
#[derive(Clone)]
pub struct SessionId(Repr);

const INLINE: usize = 38;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<str>),
}

impl SessionId {
    /// Wraps a string.
    pub fn new(id: impl AsRef<str>) -> Self {
        let id = id.as_ref();
        if id.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..id.len()].copy_from_slice(id.as_bytes());
            Self(Repr::Inline {
                len: id.len() as u8,
                bytes,
            })
        } else {
            Self(Repr::Shared(Arc::from(id)))
        }
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were copied from a `str`, so they are valid UTF-8.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Shared(s) => s,
        }
    }
}

impl PartialEq for SessionId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SessionId {}

impl PartialOrd for SessionId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SessionId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for SessionId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for SessionId {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for SessionId {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Self::new(&*s))
    }
}

/// The lineage kind, with OpenRath's names where OpenRath has one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LineageKind {
    /// A user leaf (`Session.create("user", ...)`).
    LeafUser,
    /// A system leaf (`create_system_session`).
    LeafSystem,
    /// An empty or explicitly built session.
    OpCreate,
    /// The output of a session loop.
    OpSessionLoop,
    /// A fork.
    OpFork,
    /// A detach (new root).
    OpDetach,
    /// A merge.
    OpMerge,
    /// A compression.
    OpSessionCompress,
    /// Not stamped by any operation.
    Unknown,
    /// Ours: a session resumed after an interruption (approval, crash).
    OpResume,
    /// Ours: a session annotated by a component (route decision, memory event) without a loop.
    OpAnnotate,
    /// Any other name read from a file.
    Other(String),
}

impl LineageKind {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            LineageKind::LeafUser => "leaf_user",
            LineageKind::LeafSystem => "leaf_system",
            LineageKind::OpCreate => "op_create",
            LineageKind::OpSessionLoop => "op_session_loop",
            LineageKind::OpFork => "op_fork",
            LineageKind::OpDetach => "op_detach",
            LineageKind::OpMerge => "op_merge",
            LineageKind::OpSessionCompress => "op_session_compress",
            LineageKind::Unknown => "unknown",
            LineageKind::OpResume => "op_resume",
            LineageKind::OpAnnotate => "op_annotate",
            LineageKind::Other(s) => s,
        }
    }

    /// Parses a wire name; unknown names are kept as [`LineageKind::Other`].
    pub fn parse(name: &str) -> Self {
        match name {
            "leaf_user" => LineageKind::LeafUser,
            "leaf_system" => LineageKind::LeafSystem,
            "op_create" => LineageKind::OpCreate,
            "op_session_loop" => LineageKind::OpSessionLoop,
            "op_fork" => LineageKind::OpFork,
            "op_detach" => LineageKind::OpDetach,
            "op_merge" => LineageKind::OpMerge,
            "op_session_compress" => LineageKind::OpSessionCompress,
            "unknown" => LineageKind::Unknown,
            "op_resume" => LineageKind::OpResume,
            "op_annotate" => LineageKind::OpAnnotate,
            other => LineageKind::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for LineageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for LineageKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LineageKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

/// Parents, operator, kind and extras of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// Parent session ids, in operator order (`[self, other]` for a merge).
    pub parents: Vec<SessionId>,
    /// The operation that made the session (`Session.fork`, `run_session_loop`, ...).
    pub operator: String,
    /// The lineage kind.
    pub kind: LineageKind,
    /// Ordered key/value extras, serialised as `[[k, v], ...]`.
    pub extras: Vec<(String, Value)>,
}

impl Lineage {
    /// A lineage record.
    pub fn new(parents: Vec<SessionId>, operator: impl Into<String>, kind: LineageKind) -> Self {
        Self {
            parents,
            operator: operator.into(),
            kind,
            extras: Vec::new(),
        }
    }

    /// The lineage of a session that no operation stamped (`implicit` / `unknown`).
    pub fn implicit() -> Self {
        Self::new(Vec::new(), "implicit", LineageKind::Unknown)
    }

    /// Adds an extra.
    pub fn with_extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extras.push((key.into(), value.into()));
        self
    }

    /// The first extra named `key`.
    pub fn extra(&self, key: &str) -> Option<&Value> {
        self.extras.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}
