//! The [`Memory`] trait every store implements.
//!
//! ```
//! use rath_memory::{LocalMemory, Memory, MemoryUri, NewItem, Scope};
//!
//! let dir = tempfile::tempdir()?;
//! let mem = LocalMemory::open_at(dir.path(), "notes", Default::default())?;
//! let uri = MemoryUri::new(Scope::Agent, "kettle")?;
//! mem.commit("commit_000001", vec![NewItem::new(uri.clone(), "descale the kettle monthly")])?;
//! let hits = mem.recall("kettle", Some(Scope::Agent), 3)?;
//! assert_eq!(hits[0].uri, uri);
//! assert_eq!(hits[0].commit_id.as_deref(), Some("commit_000001"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{CommitReceipt, Hit, MemoryError, MemoryItem, MemoryUri, NewItem, Scope};

/// A memory store: recall by relevance, commit batches, and address items directly.
///
/// Methods take `&self` so one store can be shared (`Arc<dyn Memory>`) by many agents; stores
/// synchronise internally. Calls are blocking and short (local disk); from async code call
/// them directly for small stores or through `spawn_blocking` for large ones.
pub trait Memory: Send + Sync {
    /// The store's id, recorded on every memory event.
    fn store_id(&self) -> &str;

    /// The `k` most relevant items for `query`, best first, in `scope` (all scopes when
    /// `None`). Equal scores are ordered by address, so results are reproducible.
    fn recall(&self, query: &str, scope: Option<Scope>, k: usize) -> Result<Vec<Hit>, MemoryError>;

    /// Stores `items` as one commit named `commit_id`: after a crash either all of them are
    /// stored or none. An item at an existing address replaces it.
    fn commit(&self, commit_id: &str, items: Vec<NewItem>) -> Result<CommitReceipt, MemoryError>;

    /// The item at `uri`, or [`MemoryError::NotFound`].
    fn read(&self, uri: &MemoryUri) -> Result<MemoryItem, MemoryError>;

    /// Stores one item outside any commit (its `commit_id` is `None`).
    fn write(&self, item: NewItem) -> Result<MemoryItem, MemoryError>;

    /// Removes the item at `uri`; false when there was none. Recall stops returning it at once.
    fn delete(&self, uri: &MemoryUri) -> Result<bool, MemoryError>;

    /// Every address in `scope` (all scopes when `None`), sorted.
    fn list(&self, scope: Option<Scope>) -> Result<Vec<MemoryUri>, MemoryError>;
}
