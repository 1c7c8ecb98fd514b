//! Store URLs: the one parser every store of the workspace opens by (the session stores of
//! `rath-store-sql` and the run store of `rath-runtime`), so a URL means the same thing, and
//! is refused for the same reasons, wherever it is given.
//!
//! ```
//! use rath_persist::StoreUrl;
//!
//! let url = StoreUrl::parse("postgres://me:secret@db/app?schema=team_a&sslmode=require")?;
//! assert_eq!(
//!     url,
//!     StoreUrl::Postgres {
//!         url: "postgres://me:secret@db/app?sslmode=require".into(),
//!         schema: Some("team_a".into()),
//!     }
//! );
//! // A schema is a name, never SQL.
//! assert!(StoreUrl::parse("postgres://db/app?schema=a;drop").is_err());
//! assert_eq!(StoreUrl::parse("sqlite:runs.db")?, StoreUrl::Sqlite { path: Some("runs.db".into()) });
//! # Ok::<(), rath_persist::PersistError>(())
//! ```

use std::path::PathBuf;

use crate::PersistError;

/// A store URL, parsed (see [`StoreUrl::parse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `sqlite://PATH` or `sqlite:PATH`: the SQLite file `PATH` (`None`: `sqlite://` alone,
    /// the default file under `$OPENRATH_HOME`).
    Sqlite {
        /// The file.
        path: Option<PathBuf>,
    },
    /// `postgres://...` or `postgresql://...`.
    Postgres {
        /// The URL for the driver: the one given without its `schema=` parameter.
        url: String,
        /// The schema the tables live in (`?schema=NAME`; `None`: the connection's default).
        schema: Option<String>,
    },
    /// `jsonl://DIR`, or any string without `://`: a JSONL directory (`None`: `jsonl://`
    /// alone, the default location).
    Jsonl {
        /// The directory.
        dir: Option<PathBuf>,
    },
}

/// The longest schema name PostgreSQL keeps (longer identifiers are cut to 63 bytes).
const MAX_SCHEMA: usize = 63;

impl StoreUrl {
    /// Parses `url` (surrounding white space ignored). Refused with
    /// [`PersistError::BadStoreUrl`]: an empty URL, an unknown scheme, options on a SQLite
    /// URL (it takes none), and a `schema=` that is empty, given twice, or not a plain name
    /// (ASCII letters, digits and `_`, not starting with a digit, at most 63 characters).
    pub fn parse(url: &str) -> Result<Self, PersistError> {
        let given = url;
        let bad = |message: String| PersistError::BadStoreUrl {
            url: redact(given.trim()),
            message,
        };
        let url = url.trim();
        if url.is_empty() {
            return Err(bad("empty".into()));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.contains('?') {
                return Err(bad(
                    "a sqlite URL takes no options (sqlite://FILE or sqlite:FILE)".into(),
                ));
            }
            return Ok(StoreUrl::Sqlite {
                path: (!path.is_empty()).then(|| PathBuf::from(path)),
            });
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (url, schema) = split_schema(url).map_err(bad)?;
            return Ok(StoreUrl::Postgres { url, schema });
        }
        if let Some(dir) = url.strip_prefix("jsonl://") {
            return Ok(StoreUrl::Jsonl {
                dir: (!dir.is_empty()).then(|| PathBuf::from(dir)),
            });
        }
        if url.contains("://") {
            return Err(bad(
                "unknown scheme (use sqlite://, postgres://, jsonl:// or a directory)".into(),
            ));
        }
        Ok(StoreUrl::Jsonl {
            dir: Some(PathBuf::from(url)),
        })
    }
}

/// Checks that `schema` is a plain PostgreSQL name: ASCII letters, digits and `_`, not
/// starting with a digit, 1 to 63 characters (so it is used in SQL as it is, never quoted
/// or escaped). The error says why not.
pub fn check_schema(schema: &str) -> Result<(), String> {
    let plain = !schema.is_empty()
        && schema.len() <= MAX_SCHEMA
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        Ok(())
    } else {
        Err(format!(
            "schema {schema:?} must be 1 to {MAX_SCHEMA} letters, digits and _, not starting \
             with a digit"
        ))
    }
}

/// Splits a `schema=NAME` query parameter off a PostgreSQL URL (the driver does not know it)
/// and checks the name ([`check_schema`]).
fn split_schema(url: &str) -> Result<(String, Option<String>), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", v)) => {
                if schema.is_some() {
                    return Err("schema= is given twice".to_owned());
                }
                check_schema(v)?;
                schema = Some(v.to_owned());
            }
            _ if pair == "schema" => return Err("schema= needs a name".to_owned()),
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((base, schema))
}

/// `url` without its password (`postgres://user:secret@host/db` → `postgres://user@host/db`):
/// how a store URL is named in messages and store names.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_store_url_form_parses_and_bad_ones_are_refused() {
        let pg = |u: &str| StoreUrl::parse(u);
        assert_eq!(
            pg("postgresql://u@h/db?schema=s_1").unwrap(),
            StoreUrl::Postgres {
                url: "postgresql://u@h/db".into(),
                schema: Some("s_1".into())
            }
        );
        assert_eq!(
            pg("postgres://u@h/db").unwrap(),
            StoreUrl::Postgres {
                url: "postgres://u@h/db".into(),
                schema: None
            }
        );
        for bad in [
            "postgres://h/db?schema=a;drop",
            "postgres://h/db?schema=",
            "postgres://h/db?schema",
            "postgres://h/db?schema=a&schema=b",
            "postgres://h/db?schema=1a",
            "postgres://h/db?schema=a-b",
            "postgres://h/db?schema=\"x\"",
            "sqlite:/tmp/x.db?mode=rwc",
            "mysql://h/db",
            "  ",
        ] {
            assert!(
                matches!(StoreUrl::parse(bad), Err(PersistError::BadStoreUrl { .. })),
                "{bad}"
            );
        }
        let long = format!("postgres://h/db?schema={}", "a".repeat(64));
        assert!(StoreUrl::parse(&long).is_err());
        assert_eq!(
            StoreUrl::parse("sqlite://").unwrap(),
            StoreUrl::Sqlite { path: None }
        );
        assert_eq!(
            StoreUrl::parse("./dir").unwrap(),
            StoreUrl::Jsonl {
                dir: Some("./dir".into())
            }
        );
        assert_eq!(
            StoreUrl::parse("jsonl://").unwrap(),
            StoreUrl::Jsonl { dir: None }
        );
        // The password never reaches a message.
        let e = StoreUrl::parse("postgres://u:hunter2@h/db?schema=x;y").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
