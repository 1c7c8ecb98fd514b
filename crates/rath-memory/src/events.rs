//! Memory operations recorded on the session: every recall and commit leaves a
//! [`MemoryEvent`] chunk, so what was remembered, by whom and from which store is visible.
//!
//! ```
//! use rath_memory::{LocalMemory, MemoryUri, NewItem, Scope, commit_from, recall_into};
//! use rath_session::{ChunkBody, Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let mem = LocalMemory::open_at(dir.path(), "notes", Default::default())?;
//! let s = Session::user_with("remember the kettle", Stamper::counter());
//! let item = NewItem::new(MemoryUri::new(Scope::Agent, "kettle")?, "descale the kettle monthly");
//! let (s, receipt) = commit_from(&s, &mem, vec![item], Some("helper"))?;
//! let (s, hits) = recall_into(&s, &mem, "kettle", Some(Scope::Agent), 3, Some("helper"))?;
//! assert_eq!(hits[0].commit_id.as_deref(), Some(receipt.commit_id.as_str()));
//! let ChunkBody::MemoryEvent(ev) = s.last().unwrap().body() else { panic!() };
//! assert_eq!(ev.operation, "recall");
//! assert_eq!(ev.hits[0].commit_id, Some(receipt.commit_id));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use rath_session::{Chunk, ChunkBody, MemoryEvent, Session};
use sha2::{Digest, Sha256};

use crate::{CommitReceipt, Hit, Memory, MemoryError, MemoryItem, MemoryUri, NewItem, Scope};

/// A fresh commit id, UUID-shaped. With a live stamper it is the stamper's next id (a UUIDv7
/// from [`rath_session::Stamper::system`]: unique across runs and processes, time-ordered).
/// With a deterministic stamper it is a UUIDv8 from a digest of a stamper token
/// (`commit_000001`), the session id and the items, so two deterministic runs that commit
/// different things never share an id (and the same run repeated gives the same id, which a
/// store treats as the same commit).
///
/// ```
/// use rath_memory::{MemoryUri, NewItem, Scope, commit_id_for};
/// use rath_session::{Session, Stamper, is_uuid};
///
/// let item = NewItem::new(MemoryUri::new(Scope::Agent, "k")?, "text");
/// let live = Session::user("q");
/// let (a, b) = (commit_id_for(&live, &[item.clone()]), commit_id_for(&live, &[item.clone()]));
/// assert!(is_uuid(&a) && a != b);
/// let det = commit_id_for(&Session::user_with("q", Stamper::counter()), &[item.clone()]);
/// assert!(is_uuid(&det));
/// assert_eq!(det, commit_id_for(&Session::user_with("q", Stamper::counter()), &[item]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn commit_id_for(session: &Session, items: &[NewItem]) -> String {
    let stamper = session.stamper();
    let token = if stamper.is_deterministic() {
        stamper.next_token("commit")
    } else {
        let id = stamper.next_id();
        if rath_session::is_uuid(id.as_str()) {
            return id.to_string();
        }
        id.to_string()
    };
    let mut h = Sha256::new();
    h.update(token.as_bytes());
    h.update([0]);
    h.update(session.id().as_str().as_bytes());
    for item in items {
        h.update([0]);
        h.update(item.uri.to_string().as_bytes());
        h.update([0]);
        h.update(item.text.as_bytes());
    }
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// The event chunk for a recall. Its `commit_id` is the commit of the best hit, if any; each
/// hit carries its own.
pub fn recall_event(
    store_id: &str,
    query: &str,
    scope: Option<Scope>,
    hits: &[Hit],
    agent: Option<&str>,
) -> Chunk {
    Chunk::new(ChunkBody::MemoryEvent(MemoryEvent {
        operation: "recall".to_owned(),
        store_id: store_id.to_owned(),
        agent: agent.map(str::to_owned),
        query: Some(query.to_owned()),
        scope: scope.map(|s| s.as_str().to_owned()),
        uris: hits.iter().map(|h| h.uri.to_string()).collect(),
        hits: hits.iter().map(Hit::to_session_hit).collect(),
        commit_id: hits.first().and_then(|h| h.commit_id.clone()),
    }))
}

/// The event chunk for a commit, a write (`commit_id` `None`), a read or a delete.
pub fn store_event(
    operation: &str,
    store_id: &str,
    uris: &[MemoryUri],
    commit_id: Option<&str>,
    agent: Option<&str>,
) -> Chunk {
    let scope = uris.first().map(|u| u.scope());
    let one_scope = scope.filter(|s| uris.iter().all(|u| u.scope() == *s));
    Chunk::new(ChunkBody::MemoryEvent(MemoryEvent {
        operation: operation.to_owned(),
        store_id: store_id.to_owned(),
        agent: agent.map(str::to_owned),
        query: None,
        scope: one_scope.map(|s| s.as_str().to_owned()),
        uris: uris.iter().map(ToString::to_string).collect(),
        hits: Vec::new(),
        commit_id: commit_id.map(str::to_owned),
    }))
}

/// Recalls from `memory` and returns the session with the recall event appended, and the hits.
pub fn recall_into(
    session: &Session,
    memory: &dyn Memory,
    query: &str,
    scope: Option<Scope>,
    k: usize,
    agent: Option<&str>,
) -> Result<(Session, Vec<Hit>), MemoryError> {
    let hits = memory.recall(query, scope, k)?;
    let event = recall_event(memory.store_id(), query, scope, &hits, agent);
    Ok((session.push(event), hits))
}

/// Commits `items` under a fresh [`commit_id_for`] id and returns the session with the commit
/// event appended, and the receipt. Items without provenance get `agent` and the session id.
pub fn commit_from(
    session: &Session,
    memory: &dyn Memory,
    items: Vec<NewItem>,
    agent: Option<&str>,
) -> Result<(Session, CommitReceipt), MemoryError> {
    let items: Vec<NewItem> = items
        .into_iter()
        .map(|mut it| {
            if it.agent.is_none() {
                it.agent = agent.map(str::to_owned);
            }
            if it.session_id.is_none() {
                it.session_id = Some(session.id().to_string());
            }
            it
        })
        .collect();
    let commit_id = commit_id_for(session, &items);
    let receipt = memory.commit(&commit_id, items)?;
    let event = store_event(
        "commit",
        memory.store_id(),
        &receipt.uris,
        Some(&receipt.commit_id),
        agent,
    );
    Ok((session.push(event), receipt))
}

/// Writes one item outside a commit and records a `write` event.
pub fn write_into(
    session: &Session,
    memory: &dyn Memory,
    item: NewItem,
    agent: Option<&str>,
) -> Result<(Session, MemoryItem), MemoryError> {
    let stored = memory.write(item)?;
    let event = store_event(
        "write",
        memory.store_id(),
        std::slice::from_ref(&stored.uri),
        None,
        agent,
    );
    Ok((session.push(event), stored))
}

/// Reads one item and records a `read` event naming the commit that stored it.
pub fn read_into(
    session: &Session,
    memory: &dyn Memory,
    uri: &MemoryUri,
    agent: Option<&str>,
) -> Result<(Session, MemoryItem), MemoryError> {
    let item = memory.read(uri)?;
    let event = store_event(
        "read",
        memory.store_id(),
        std::slice::from_ref(uri),
        item.commit_id.as_deref(),
        agent,
    );
    Ok((session.push(event), item))
}

/// Deletes one item and records a `delete` event (also when there was nothing to delete).
pub fn delete_into(
    session: &Session,
    memory: &dyn Memory,
    uri: &MemoryUri,
    agent: Option<&str>,
) -> Result<(Session, bool), MemoryError> {
    let existed = memory.delete(uri)?;
    let event = store_event(
        "delete",
        memory.store_id(),
        std::slice::from_ref(uri),
        None,
        agent,
    );
    Ok((session.push(event), existed))
}

/// The memory events of a session, in order.
pub fn memory_events(session: &Session) -> Vec<&MemoryEvent> {
    session
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::MemoryEvent(e) => Some(e),
            _ => None,
        })
        .collect()
}
