//! What a store holds and what a recall returns.
//!
//! ```
//! use rath_memory::{MemoryUri, NewItem, Scope};
//!
//! let item = NewItem::new(MemoryUri::new(Scope::User, "prefs/editor")?, "prefers helix")
//!     .agent("planner");
//! assert_eq!(item.agent.as_deref(), Some("planner"));
//! # Ok::<(), rath_memory::MemoryError>(())
//! ```

use rath_session::MemoryHit;
use serde::{Deserialize, Serialize};

use crate::MemoryUri;

/// An item to write or commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewItem {
    /// Where it goes; writing to an existing address replaces the item.
    pub uri: MemoryUri,
    /// The text recall searches and returns.
    pub text: String,
    /// The agent that produced it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session it came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl NewItem {
    /// An item with no provenance beyond its address.
    pub fn new(uri: MemoryUri, text: impl Into<String>) -> Self {
        Self {
            uri,
            text: text.into(),
            agent: None,
            session_id: None,
        }
    }

    /// The same item attributed to `agent`.
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// The same item attributed to session `id`.
    pub fn session(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
}

/// An item as stored: the written item plus the commit that stored it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryItem {
    /// Stable id derived from the address ([`MemoryUri::item_id`]).
    pub id: String,
    /// Address.
    pub uri: MemoryUri,
    /// Text.
    pub text: String,
    /// The agent that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The commit that stored it (`None` for a plain [`crate::Memory::write`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_id: Option<String>,
}

impl MemoryItem {
    pub(crate) fn from_new(item: NewItem, commit_id: Option<String>) -> Self {
        Self {
            id: item.uri.item_id(),
            uri: item.uri,
            text: item.text,
            agent: item.agent,
            session_id: item.session_id,
            commit_id,
        }
    }
}

/// One recalled item, best first in a recall's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// Item id.
    pub id: String,
    /// Address.
    pub uri: MemoryUri,
    /// Relevance: BM25, or the fused rank score in hybrid mode. Higher is better.
    pub score: f64,
    /// A short excerpt around the first query term found (whole text when short).
    pub snippet: String,
    /// The full text of the item.
    pub text: String,
    /// The commit that stored the item.
    pub commit_id: Option<String>,
}

impl Hit {
    /// The session-side record of this hit.
    pub fn to_session_hit(&self) -> MemoryHit {
        MemoryHit {
            id: self.id.clone(),
            uri: self.uri.to_string(),
            score: self.score,
            snippet: self.snippet.clone(),
            commit_id: self.commit_id.clone(),
        }
    }
}

/// What a commit stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommitReceipt {
    /// The commit id every stored item now carries.
    pub commit_id: String,
    /// Addresses stored, in the order given.
    pub uris: Vec<MemoryUri>,
}
