//! Scopes and `memory://<scope>/<path>` addresses.
//!
//! ```
//! use rath_memory::{MemoryUri, Scope};
//!
//! let uri: MemoryUri = "memory://user/preferences/editor".parse()?;
//! assert_eq!(uri.scope(), Scope::User);
//! assert_eq!(uri.path(), "preferences/editor");
//! assert_eq!(uri.to_string(), "memory://user/preferences/editor");
//! # Ok::<(), rath_memory::MemoryError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::MemoryError;

/// Who a memory item belongs to, as in Python OpenRath.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Facts about the user, kept across agents and sessions.
    User,
    /// What an agent learned, kept across sessions.
    Agent,
    /// Notes for one session's lifetime.
    Session,
    /// Reference material (documents, snippets).
    Resources,
}

impl Scope {
    /// All scopes, in a fixed order.
    pub const ALL: [Scope; 4] = [Scope::User, Scope::Agent, Scope::Session, Scope::Resources];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Agent => "agent",
            Scope::Session => "session",
            Scope::Resources => "resources",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Scope::User => 0,
            Scope::Agent => 1,
            Scope::Session => 2,
            Scope::Resources => 3,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = MemoryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "user" => Scope::User,
            "agent" => Scope::Agent,
            "session" => Scope::Session,
            "resources" => Scope::Resources,
            _ => return Err(MemoryError::UnknownScope(s.to_owned())),
        })
    }
}

/// The address of one memory item: `memory://<scope>/<path>`.
///
/// The path is one or more `/`-separated segments; segments are non-empty, not `.` or `..`,
/// and hold no control characters or backslashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryUri {
    scope: Scope,
    path: String,
}

const PREFIX: &str = "memory://";

impl MemoryUri {
    /// An address from a scope and a path (validated).
    pub fn new(scope: Scope, path: impl Into<String>) -> Result<Self, MemoryError> {
        let path = path.into();
        check_path(&path).map_err(|reason| MemoryError::InvalidUri {
            uri: format!("{PREFIX}{scope}/{path}"),
            reason,
        })?;
        Ok(Self { scope, path })
    }

    /// The scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The path inside the scope.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A stable short id for the item at this address (`m-` and 16 hex digits of its sha256).
    pub fn item_id(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.to_string().as_bytes());
        format!("m-{}", hex::encode(&digest[..8]))
    }
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the path is empty".into());
    }
    for seg in path.split('/') {
        if seg.is_empty() {
            return Err("the path has an empty segment".into());
        }
        if seg == "." || seg == ".." {
            return Err("the path has a '.' or '..' segment".into());
        }
        if seg.chars().any(|c| c.is_control() || c == '\\') {
            return Err("the path has a control character or backslash".into());
        }
    }
    Ok(())
}

impl fmt::Display for MemoryUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}/{}", self.scope, self.path)
    }
}

impl FromStr for MemoryUri {
    type Err = MemoryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| MemoryError::InvalidUri {
            uri: s.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = s
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("it does not start with memory://"))?;
        let (scope, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected memory://<scope>/<path>"))?;
        let scope = scope.parse::<Scope>().map_err(|_| bad("unknown scope"))?;
        check_path(path).map_err(|r| bad(&r))?;
        Ok(Self {
            scope,
            path: path.to_owned(),
        })
    }
}

impl Serialize for MemoryUri {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MemoryUri {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_addresses() {
        for bad in [
            "memory://user/",
            "memory://user",
            "memory://nobody/x",
            "file://user/x",
            "memory://user/a//b",
            "memory://user/../etc",
            "memory://user/a\nb",
        ] {
            assert!(bad.parse::<MemoryUri>().is_err(), "{bad}");
        }
        let ok: MemoryUri = "memory://resources/docs/a b.md".parse().unwrap();
        assert_eq!(ok.scope(), Scope::Resources);
        assert_eq!(ok.item_id().len(), 18);
    }
}
