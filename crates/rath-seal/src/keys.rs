//! Signing keys: ed25519, kept in a file outside the store (its public half goes into the
//! store's ledger when it first signs there).
//!
//! ```
//! use rath_seal::keys;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("signing.key");
//! let public = keys::generate(&path)?;
//! let key = keys::load(&path)?;
//! assert_eq!(keys::public_hex(&key), public);
//! assert!(keys::generate(&path).is_err()); // never overwrites a key
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The file holds one line, `ed25519-secret:` and the 32-byte seed in hex; it is created
//! with mode 0600 and never replaced. `<file>.pub` holds the public half in hex.

use std::io::Write as _;
use std::path::Path;

use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::SealError;

const PREFIX: &str = "ed25519-secret:";

/// The public half of `key`, hex.
pub fn public_hex(key: &SigningKey) -> String {
    hex::encode(key.verifying_key().as_bytes())
}

/// A public key from its hex form.
pub fn parse_public(hex_key: &str) -> Result<VerifyingKey, SealError> {
    let mut b = [0u8; 32];
    hex::decode_to_slice(hex_key.trim(), &mut b).map_err(|e| SealError::Key {
        what: format!("{hex_key:?} is not 64 hex digits: {e}"),
    })?;
    VerifyingKey::from_bytes(&b).map_err(|e| SealError::Key {
        what: format!("{hex_key:?} is not an ed25519 public key: {e}"),
    })
}

/// Makes a new key from the operating system's randomness, writes it to `path` (mode 0600,
/// refusing an existing file) and its public half to `<path>.pub`; returns the public half.
pub fn generate(path: &Path) -> Result<String, SealError> {
    let seed: [u8; 32] = rand::random();
    let key = SigningKey::from_bytes(&seed);
    let io = |e: std::io::Error| SealError::Io {
        path: path.display().to_string(),
        source: e,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(path).map_err(io)?;
    writeln!(f, "{PREFIX}{}", hex::encode(key.to_bytes())).map_err(io)?;
    f.sync_all().map_err(io)?;
    let public = public_hex(&key);
    let pub_path = path.with_extension(match path.extension() {
        Some(e) => format!("{}.pub", e.to_string_lossy()),
        None => "pub".to_owned(),
    });
    std::fs::write(&pub_path, format!("{public}\n")).map_err(|e| SealError::Io {
        path: pub_path.display().to_string(),
        source: e,
    })?;
    Ok(public)
}

/// Reads a key written by [`generate`].
pub fn load(path: &Path) -> Result<SigningKey, SealError> {
    let text = std::fs::read_to_string(path).map_err(|e| SealError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let bad = |what: &str| SealError::Key {
        what: format!("{}: {what}", path.display()),
    };
    let seed = text
        .trim()
        .strip_prefix(PREFIX)
        .ok_or_else(|| bad("not an openrath signing key (`ed25519-secret:` and 64 hex digits)"))?;
    let mut b = [0u8; 32];
    hex::decode_to_slice(seed, &mut b).map_err(|_| bad("the seed is not 64 hex digits"))?;
    Ok(SigningKey::from_bytes(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_key_file_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, "ed25519-secret:zz").unwrap();
        assert!(matches!(load(&p), Err(SealError::Key { .. })));
        std::fs::write(&p, "hello").unwrap();
        assert!(matches!(load(&p), Err(SealError::Key { .. })));
        assert!(matches!(
            load(&dir.path().join("missing")),
            Err(SealError::Io { .. })
        ));
        assert!(parse_public("00").is_err());
    }

    #[cfg(unix)]
    #[test]
    fn the_key_file_is_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("signing.key");
        let public = generate(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let pub_text = std::fs::read_to_string(dir.path().join("signing.key.pub")).unwrap();
        assert_eq!(pub_text.trim(), public);
        assert!(parse_public(&public).is_ok());
    }
}
