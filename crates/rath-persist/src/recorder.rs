//! Collecting a run's sessions as they appear, to save them together at the end, or when the
//! run fails part way (a failed run's sessions are evidence worth keeping).
//!
//! ```
//! use rath_persist::{SessionRecorder, Store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let recorder = SessionRecorder::new();
//! let root = Session::user_with("hi", Stamper::counter());
//! recorder.record(&root);
//! let fork = root.fork();
//! recorder.record(&fork);
//! recorder.record(&fork.push(Chunk::assistant_text("hello"))); // a newer version of `fork`
//! assert_eq!(recorder.len(), 2);
//! assert_eq!(recorder.sessions()[1].len(), 2);
//!
//! let dir = tempfile::tempdir()?;
//! assert_eq!(recorder.save_to(&Store::at(dir.path()))?, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rath_session::{Session, SessionId};

use crate::{PersistError, Store};

/// The sessions of one run, the latest version of each id, in the order their ids first
/// appeared. Cheap to clone (clones share the collection), so an observer closure can hold
/// one while the program keeps another.
#[derive(Clone, Debug, Default)]
pub struct SessionRecorder {
    inner: Arc<Mutex<Recorded>>,
}

#[derive(Debug, Default)]
struct Recorded {
    order: Vec<Session>,
    index: HashMap<SessionId, usize>,
}

impl SessionRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Recorded> {
        // A panic elsewhere while the lock was held leaves the collection whole: keep it,
        // since a failed run must keep what it got.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `session`; a session already recorded under its id is replaced by it.
    /// Returns true when the id is new.
    pub fn record(&self, session: &Session) -> bool {
        let mut r = self.lock();
        if let Some(&i) = r.index.get(session.id()) {
            r.order[i] = session.clone();
            false
        } else {
            let i = r.order.len();
            r.index.insert(session.id().clone(), i);
            r.order.push(session.clone());
            true
        }
    }

    /// The sessions recorded so far, in first-seen order.
    pub fn sessions(&self) -> Vec<Session> {
        self.lock().order.clone()
    }

    /// Number of sessions recorded.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Saves every recorded session with [`Store::save_all`]; returns how many.
    pub fn save_to(&self, store: &Store) -> Result<usize, PersistError> {
        store.save_all(&self.sessions())
    }
}
