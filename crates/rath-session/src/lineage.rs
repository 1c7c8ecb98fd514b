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

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A session id. Any string is accepted; stampers mint UUIDs (UUIDv7 by default), the shape
/// Python OpenRath requires.
///
/// Ids up to 38 bytes (UUIDs, ULIDs) are stored inline, so minting and cloning one never
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

    /// The empty id (a placeholder; never minted by a stamper).
    pub const fn empty() -> Self {
        Self(Repr::Inline {
            len: 0,
            bytes: [0u8; INLINE],
        })
    }

    /// An id from ASCII bytes that fit inline; `None` when they do not.
    pub(crate) fn from_ascii_inline(text: &[u8]) -> Option<Self> {
        if text.len() > INLINE || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; INLINE];
        bytes[..text.len()].copy_from_slice(text);
        Some(Self(Repr::Inline {
            len: text.len() as u8,
            bytes,
        }))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                let bytes = &bytes[..usize::from(*len)];
                // SAFETY: `Repr::Inline` is private to this module and built only by `new`
                // (which copies the bytes of a `&str`, and `len` is that string's length),
                // `empty` (no bytes) and `from_ascii_inline` (ASCII-checked bytes); so
                // `bytes[..len]` is always valid UTF-8. Ids are read on every hash,
                // comparison and write, where a re-check showed in profiles.
                unsafe { std::str::from_utf8_unchecked(bytes) }
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

/// The parent ids of a session, in operator order.
///
/// Up to two parents (every fork, detach and merge) are stored inline, so stamping a lineage
/// does not allocate; longer lists (workflow joins) live on the heap. Reads as a slice.
///
/// ```
/// use rath_session::{Parents, SessionId};
///
/// let p = Parents::from(vec![SessionId::new("a"), SessionId::new("b")]);
/// assert_eq!(p.len(), 2);
/// assert_eq!(p, vec![SessionId::new("a"), SessionId::new("b")]);
/// assert_eq!(p[1].as_str(), "b");
///
/// // A join of three branches keeps its parents on the heap; the wire form is a list.
/// let many: Parents = ["x", "y", "z"].into_iter().map(SessionId::new).collect();
/// let text = serde_json::to_string(&many).unwrap();
/// assert_eq!(text, r#"["x","y","z"]"#);
/// assert_eq!(serde_json::from_str::<Parents>(&text).unwrap(), many);
/// ```
#[derive(Clone)]
pub struct Parents(ParentsRepr);

#[derive(Clone)]
enum ParentsRepr {
    Inline { len: u8, ids: [SessionId; 2] },
    Heap(Vec<SessionId>),
}

impl Parents {
    /// No parents (a root).
    pub fn none() -> Self {
        Self(ParentsRepr::Inline {
            len: 0,
            ids: [SessionId::empty(), SessionId::empty()],
        })
    }

    /// One parent.
    pub fn one(id: SessionId) -> Self {
        Self(ParentsRepr::Inline {
            len: 1,
            ids: [id, SessionId::empty()],
        })
    }

    /// Two parents, in order.
    pub fn two(first: SessionId, second: SessionId) -> Self {
        Self(ParentsRepr::Inline {
            len: 2,
            ids: [first, second],
        })
    }

    /// The ids as a slice.
    pub fn as_slice(&self) -> &[SessionId] {
        match &self.0 {
            ParentsRepr::Inline { len, ids } => &ids[..usize::from(*len)],
            ParentsRepr::Heap(v) => v,
        }
    }

    /// The ids as an owned vector.
    pub fn to_vec(&self) -> Vec<SessionId> {
        self.as_slice().to_vec()
    }
}

impl Default for Parents {
    fn default() -> Self {
        Self::none()
    }
}

impl std::ops::Deref for Parents {
    type Target = [SessionId];
    fn deref(&self) -> &[SessionId] {
        self.as_slice()
    }
}

impl From<Vec<SessionId>> for Parents {
    fn from(v: Vec<SessionId>) -> Self {
        if v.len() > 2 {
            return Self(ParentsRepr::Heap(v));
        }
        let mut it = v.into_iter();
        match (it.next(), it.next()) {
            (Some(a), Some(b)) => Self::two(a, b),
            (Some(a), None) => Self::one(a),
            _ => Self::none(),
        }
    }
}

impl From<&[SessionId]> for Parents {
    fn from(v: &[SessionId]) -> Self {
        match v {
            [] => Self::none(),
            [a] => Self::one(a.clone()),
            [a, b] => Self::two(a.clone(), b.clone()),
            _ => Self(ParentsRepr::Heap(v.to_vec())),
        }
    }
}

impl<const N: usize> From<[SessionId; N]> for Parents {
    fn from(v: [SessionId; N]) -> Self {
        Self::from(Vec::from(v))
    }
}

impl From<Parents> for Vec<SessionId> {
    fn from(p: Parents) -> Self {
        match p.0 {
            ParentsRepr::Inline { len, ids } => ids.into_iter().take(usize::from(len)).collect(),
            ParentsRepr::Heap(v) => v,
        }
    }
}

impl FromIterator<SessionId> for Parents {
    fn from_iter<I: IntoIterator<Item = SessionId>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<'a> IntoIterator for &'a Parents {
    type Item = &'a SessionId;
    type IntoIter = std::slice::Iter<'a, SessionId>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl PartialEq for Parents {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Parents {}

impl PartialEq<Vec<SessionId>> for Parents {
    fn eq(&self, other: &Vec<SessionId>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[SessionId]> for Parents {
    fn eq(&self, other: &[SessionId]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for Parents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl Serialize for Parents {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Parents {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<SessionId>::deserialize(d).map(Self::from)
    }
}

/// Parents, operator, kind and extras of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// Parent session ids, in operator order (`[self, other]` for a merge).
    pub parents: Parents,
    /// The operation that made the session (`Session.fork`, `run_session_loop`, ...). Names
    /// known at compile time are borrowed, so stamping a lineage does not allocate.
    pub operator: Cow<'static, str>,
    /// The lineage kind.
    pub kind: LineageKind,
    /// Ordered key/value extras, serialised as `[[k, v], ...]`.
    pub extras: Vec<(String, Value)>,
}

impl Lineage {
    /// A lineage record.
    pub fn new(
        parents: impl Into<Parents>,
        operator: impl Into<Cow<'static, str>>,
        kind: LineageKind,
    ) -> Self {
        Self {
            parents: parents.into(),
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
