//! The conversation view: a session as OpenAI chat messages.
//!
//! ```
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let s = Session::user_with("hi", Stamper::counter())
//!     .push(Chunk::note("qa", "evidence never reaches a model"))
//!     .push(Chunk::assistant_text("hello"));
//! let msgs = s.messages();
//! assert_eq!(msgs.len(), 2);
//! assert_eq!(serde_json::to_string(&msgs[1]).unwrap(), r#"{"role":"assistant","content":"hello"}"#);
//! ```

use serde::{Deserialize, Serialize};

use crate::chunk::{Chunk, ChunkBody, ToolCall};
use crate::session::Session;

/// A chat message role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `system`
    System,
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `tool` (a `tool_result` chunk)
    Tool,
}

/// One OpenAI-style chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// Text; `None` for an assistant message that only calls tools.
    pub content: Option<String>,
    /// For `tool` messages: the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `assistant` messages: the calls requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

impl ChatMessage {
    /// The message for a conversation chunk; `None` for evidence.
    pub fn from_chunk(chunk: &Chunk) -> Option<Self> {
        let (role, content, tool_call_id, tool_calls) = match chunk.body() {
            ChunkBody::System(p) => (Role::System, Some(p.content.clone()), None, None),
            ChunkBody::User(p) => (Role::User, Some(p.content.clone()), None, None),
            ChunkBody::Assistant(p) => (
                Role::Assistant,
                p.content.clone(),
                None,
                p.tool_calls.clone().filter(|c| !c.is_empty()),
            ),
            ChunkBody::ToolResult(p) => (
                Role::Tool,
                Some(p.content.clone()),
                Some(p.tool_call_id.clone()),
                None,
            ),
            _ => return None,
        };
        Some(Self {
            role,
            content,
            tool_call_id,
            tool_calls,
        })
    }
}

impl Session {
    /// The conversation chunks as chat messages, evidence excluded.
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.chunks()
            .iter()
            .filter_map(ChatMessage::from_chunk)
            .collect()
    }
}
