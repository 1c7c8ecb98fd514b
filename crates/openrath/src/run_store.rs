//! The session store a program writes its run to, chosen the way every example and the `rath`
//! CLI choose it: `--store URL` (or `--store=URL`) on the command line, else
//! `$OPENRATH_STORE`, else the JSONL directory `$OPENRATH_HOME/sessions` (the OPENRATH_HOME
//! rules: `$OPENRATH_HOME`, else `./.openrath`, else `~/.openrath`). A URL is what
//! [`rath_store_sql::open_store`] reads: `sqlite://FILE`, `postgres://USER@HOST/DB`,
//! `jsonl://DIR` or a directory.
//!
//! ```
//! use openrath::prelude::*;
//! use openrath::run_store::{RunStore, program_args_from};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("runs.sqlite").display());
//! let store = RunStore::open(Some(url.as_str())).await?;
//! let root = Session::user_with("hi", Stamper::counter());
//! let answer = root.fork().push(Chunk::assistant_text("hello"));
//! assert_eq!(store.save_all([&root, &answer]).await?, 2);
//! assert_eq!(store.store().list().await?.len(), 2);
//! assert!(store.to_string().starts_with("sqlite:"));
//!
//! // An example parses its own flags from what is left once `--store URL` is taken out.
//! let args = ["--store", "sqlite://x.db", "--deterministic"].map(String::from);
//! assert_eq!(program_args_from(args), ["--deterministic"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The default store stays a plain [`Store`] (the JSONL directory, with its synchronous API
//! and byte-for-byte Python OpenRath files), so a program run without `--store` writes what
//! it always wrote.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rath_flow::{FlowError, KeptFailure, SessionSink, StoreSink};
use rath_inspect::{InspectError, StoreView};
use rath_persist::{LoadedSession, PersistError, SessionStore, Store};
use rath_session::{Session, SessionId};

/// The flag every example accepts.
pub const STORE_FLAG: &str = "--store";

/// Where a run's sessions go: a JSONL directory or any other [`SessionStore`].
pub struct RunStore {
    inner: Inner,
    /// The URL the store was opened from (`None`: the default directory).
    url: Option<String>,
}

enum Inner {
    Jsonl(Store),
    Other {
        url: String,
        store: Arc<dyn SessionStore>,
    },
}

impl fmt::Debug for RunStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStore")
            .field("store", &self.store().name())
            .finish_non_exhaustive()
    }
}

impl RunStore {
    /// The store this process's arguments and environment choose (see the
    /// [module docs](self)).
    pub async fn from_args() -> Result<Self, PersistError> {
        Self::open(rath_store_sql::requested_store().as_deref()).await
    }

    /// The store `url` names; `None` is the JSONL directory `$OPENRATH_HOME/sessions`. A URL
    /// without a scheme is a JSONL directory too (an OpenRath home, a directory holding
    /// `sessions/`, meaning that directory).
    pub async fn open(url: Option<&str>) -> Result<Self, PersistError> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let inner = match url {
            None => Inner::Jsonl(Store::at(rath_persist::openrath_home().join("sessions"))),
            // A home (a directory holding `sessions/`) is its sessions directory, as in
            // every command.
            Some(dir) if !dir.contains("://") => {
                Inner::Jsonl(Store::at(rath_store_sql::sessions_dir(Path::new(dir))))
            }
            Some(url) => Inner::Other {
                url: url.to_owned(),
                store: Arc::from(rath_store_sql::open_store(url).await?),
            },
        };
        Ok(Self {
            inner,
            url: url.map(str::to_owned),
        })
    }

    /// The store, through the contract every store implements.
    pub fn store(&self) -> &dyn SessionStore {
        match &self.inner {
            Inner::Jsonl(store) => store,
            Inner::Other { store, .. } => store.as_ref(),
        }
    }

    /// The JSONL directory, when the store is one.
    pub fn jsonl(&self) -> Option<&Store> {
        match &self.inner {
            Inner::Jsonl(store) => Some(store),
            Inner::Other { .. } => None,
        }
    }

    /// The URL given (`--store` or `$OPENRATH_STORE`); `None` for the default directory.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Saves `sessions`, one transaction each; returns how many. As with
    /// [`Store::save_all`], a session already stored with the same content is left as it is
    /// and an id stored with other content is an error (never replaced).
    pub async fn save_all<'a>(
        &self,
        sessions: impl IntoIterator<Item = &'a Session>,
    ) -> Result<usize, PersistError> {
        match &self.inner {
            Inner::Jsonl(store) => store.save_all(sessions),
            Inner::Other { store, .. } => {
                let mut saved = 0;
                for s in sessions {
                    store.save(s).await?;
                    saved += 1;
                }
                Ok(saved)
            }
        }
    }

    /// Keeps what a failed run made: `kept` and the run's partial session
    /// ([`FlowError::keep_in`], or [`FlowError::keep_in_store`] for other stores).
    pub async fn keep_failed<'a>(
        &self,
        error: &'a FlowError,
        kept: impl IntoIterator<Item = &'a Session>,
    ) -> Result<KeptFailure, PersistError> {
        match &self.inner {
            Inner::Jsonl(store) => error.keep_in(store, kept),
            Inner::Other { store, .. } => error.keep_in_store(store.as_ref(), kept).await,
        }
    }

    /// A [`SessionSink`] that streams a loop's output into the store as it grows: for a
    /// JSONL directory a [`StoreSink`] (a partial file, renamed when the loop stops); for any
    /// other store a save when the loop starts and an append of the new chunks after each
    /// step, one transaction each, so a killed run leaves its session whole up to its last
    /// step. The other stores' sink needs a multi-threaded tokio runtime (`#[tokio::main]`):
    /// it waits for each write in place.
    pub fn sink(&self) -> Arc<dyn SessionSink> {
        match &self.inner {
            Inner::Jsonl(store) => Arc::new(StoreSink::new(store.clone())),
            Inner::Other { store, .. } => Arc::new(TraitSink {
                store: store.clone(),
                stored: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A [`StoreView`] of the store (listings, transcripts, the HTML viewer); for the default
    /// directory, of `home` (its parent, where `lineage/` and `reports/` live too).
    pub fn view(&self, home: &Path) -> Result<StoreView, InspectError> {
        match (&self.inner, &self.url) {
            (Inner::Jsonl(_), None) => StoreView::open(home),
            (Inner::Jsonl(store), Some(_)) => StoreView::open(store.dir()),
            (Inner::Other { url, .. }, _) => StoreView::open_url(url),
        }
    }
}

/// The directory for a JSONL store (as programs always printed it), else the store's name
/// (a PostgreSQL URL without its password).
impl fmt::Display for RunStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Jsonl(store) => write!(f, "{}", store.dir().display()),
            Inner::Other { store, .. } => f.write_str(&store.name()),
        }
    }
}

/// The process's arguments (without the program name) less `--store URL` and
/// `--store=URL`, which [`RunStore::from_args`] reads: what an example parses its own flags
/// from, so every example takes `--store` the same way.
pub fn program_args() -> Vec<String> {
    program_args_from(std::env::args().skip(1))
}

/// [`program_args`] over given arguments.
pub fn program_args_from(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == STORE_FLAG {
            args.next();
        } else if !a.starts_with("--store=") {
            out.push(a);
        }
    }
    out
}

/// [`RunStore::sink`] for a store behind the contract: the stored length of each session it
/// writes, so each step appends only what is new.
struct TraitSink {
    store: Arc<dyn SessionStore>,
    stored: Mutex<HashMap<SessionId, usize>>,
}

impl TraitSink {
    /// Runs `write` to completion on the current (multi-threaded) runtime.
    fn wait<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, PersistError>>,
    ) -> Result<T, FlowError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|e| {
            FlowError::Config(format!("a store sink writes from a tokio runtime: {e}"))
        })?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Err(FlowError::Config(
                "a store sink needs a multi-threaded tokio runtime".to_owned(),
            ));
        }
        Ok(tokio::task::block_in_place(|| handle.block_on(write))?)
    }

    fn stored(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, usize>> {
        self.stored.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends what `session` has beyond what this sink stored of it.
    fn grow(&self, session: &Session) -> Result<(), FlowError> {
        let known = self.stored().get(session.id()).copied();
        let stored = match known {
            Some(n) => n,
            None => self.wait(self.store.stored_len(session.id()))?.unwrap_or(0),
        };
        self.wait(self.store.append(session, stored))?;
        self.stored().insert(session.id().clone(), session.len());
        Ok(())
    }
}

impl SessionSink for TraitSink {
    fn begin(&self, session: &Session) -> Result<(), FlowError> {
        self.wait(self.store.save(session))?;
        self.stored().insert(session.id().clone(), session.len());
        Ok(())
    }

    fn append(&self, session: &Session) -> Result<(), FlowError> {
        self.grow(session)
    }

    fn finish(&self, session: &Session) -> Result<(), FlowError> {
        self.grow(session)?;
        self.stored().remove(session.id());
        Ok(())
    }

    fn stored(&self, extra: &str) -> Result<Vec<LoadedSession>, FlowError> {
        let mut out = Vec::new();
        for s in self.wait(self.store.list())? {
            if s.extras.iter().any(|(k, _)| k == extra) {
                out.push(self.wait(self.store.load(&s.id))?);
            }
        }
        Ok(out)
    }
}
