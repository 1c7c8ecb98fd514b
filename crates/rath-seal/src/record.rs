//! The seal ledger's entries: what is recorded when a session is sealed, a key is added or a
//! chunk is erased, how an entry is digested, chained and signed.
//!
//! ```
//! use rath_seal::record::{Entry, Seal};
//!
//! let seal = Seal {
//!     session: "s".into(),
//!     len: 1,
//!     root: "00".repeat(32),
//!     parents: vec![],
//!     from: 0,
//!     base: None,
//!     leaves: "11".repeat(32),
//! };
//! let first = Entry::seal(seal.clone(), [0; 32]);
//! let second = Entry::seal(seal, first.digest());
//! assert_ne!(first.digest(), second.digest());
//! assert_eq!(Entry::parse(&first.to_text()).unwrap(), first);
//! ```
//!
//! An entry's digest is the SHA-256 of a domain tag and its compact JSON without its
//! signature (fields in the order below, absent fields left out); each entry names the
//! digest of the one before it (`prev`, 32 zero bytes for the first), so the ledger is a hash
//! chain: an entry removed from the middle or edited breaks the next one's `prev`.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use rath_session::merkle::Digest;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// What an entry's digest starts with.
const ENTRY_TAG: &[u8] = b"openrath-seal-entry-v1\n";

/// One parent of a sealed session, with the session root it had when the child was sealed
/// (`None`: it was not in the store then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealParent {
    /// The parent's id.
    pub id: String,
    /// Its session root, hex.
    pub root: Option<String>,
}

impl SealParent {
    /// The roots of `parents` as digests, in order, as a session root binds them (a parent
    /// sealed without a root, or whose root does not parse, counts as all zeros): what
    /// sealing computes and verification recomputes, from one place.
    pub fn root_digests(parents: &[SealParent]) -> Vec<Digest> {
        parents
            .iter()
            .map(|p| {
                p.root
                    .as_deref()
                    .and_then(rath_session::merkle::from_hex)
                    .unwrap_or([0; 32])
            })
            .collect()
    }
}

/// A session sealed at a length: its root and the digests of the chunks this seal adds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// The session's id.
    pub session: String,
    /// Chunks sealed (the session's length then).
    pub len: u64,
    /// The session root at that length, hex (see `rath_session::merkle`).
    pub root: String,
    /// The parents and their roots, in lineage order.
    pub parents: Vec<SealParent>,
    /// The first chunk whose digest this seal records: the length of the session's previous
    /// seal, or for its first seal the length of its `base` (0 without one).
    pub from: u64,
    /// For a session's first seal: the sealed session whose first `len` chunks are this
    /// session's first chunks (a fork's or a loop round's parent), so their digests are not
    /// recorded again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<SealBase>,
    /// The digests of chunks `from..len`, hex, concatenated.
    pub leaves: String,
}

/// The sealed session a first seal shares its first chunks with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealBase {
    /// The sealed session.
    pub id: String,
    /// How many of its first chunks are shared.
    pub len: u64,
}

/// A chunk's payload replaced by a tombstone: which, what its digest was, who, when, why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    /// The session.
    pub session: String,
    /// The chunk's index.
    pub index: u64,
    /// The erased chunk's digest, hex (the leaf its seals recorded).
    pub digest: String,
    /// Who erased it.
    pub by: String,
    /// When (RFC 3339, from the eraser's clock).
    pub at: String,
    /// Why.
    pub reason: String,
}

/// One ledger entry: exactly one of `seal`, `key_added`, `erasure`, the digest of the entry
/// before it, and the signer's public key and signature when signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// A session sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<Seal>,
    /// A signing key's public half, hex, recorded when it first signs in this store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_added: Option<String>,
    /// A chunk erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erasure: Option<Erasure>,
    /// The digest of the entry before, hex.
    pub prev: String,
    /// The signer's public key, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The ed25519 signature of [`Entry::digest`], hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

impl Entry {
    fn bare(prev: Digest) -> Self {
        Self {
            seal: None,
            key_added: None,
            erasure: None,
            prev: hex::encode(prev),
            key: None,
            sig: None,
        }
    }

    /// An unsigned seal entry after the entry whose digest is `prev`.
    pub fn seal(seal: Seal, prev: Digest) -> Self {
        Self {
            seal: Some(seal),
            ..Self::bare(prev)
        }
    }

    /// An unsigned entry recording public key `key`.
    pub fn key_added(key: &VerifyingKey, prev: Digest) -> Self {
        Self {
            key_added: Some(hex::encode(key.as_bytes())),
            ..Self::bare(prev)
        }
    }

    /// An unsigned erasure entry.
    pub fn erasure(erasure: Erasure, prev: Digest) -> Self {
        Self {
            erasure: Some(erasure),
            ..Self::bare(prev)
        }
    }

    /// Sets `key` to `signer`'s public half and signs the entry with it.
    pub fn signed(mut self, signer: &SigningKey) -> Self {
        self.key = Some(hex::encode(signer.verifying_key().as_bytes()));
        self.sig = None;
        let sig = signer.sign(&self.digest());
        self.sig = Some(hex::encode(sig.to_bytes()));
        self
    }

    /// The entry's digest: what `prev` of the next entry names and what is signed. Covers
    /// every field but `sig`.
    pub fn digest(&self) -> Digest {
        let unsigned = Entry {
            sig: None,
            ..self.clone()
        };
        let mut h = Sha256::new();
        h.update(ENTRY_TAG);
        // A struct of strings and integers always serialises.
        h.update(serde_json::to_vec(&unsigned).unwrap_or_default());
        h.finalize().into()
    }

    /// Checks the signature: `Ok(None)` unsigned, `Ok(Some(key))` signed by `key`, `Err`
    /// with why the signature does not hold.
    pub fn check_signature(&self) -> Result<Option<[u8; 32]>, String> {
        let (key, sig) = match (&self.key, &self.sig) {
            (None, None) => return Ok(None),
            (Some(k), Some(s)) => (k, s),
            _ => return Err("a key without a signature, or a signature without a key".into()),
        };
        let mut kb = [0u8; 32];
        hex::decode_to_slice(key, &mut kb).map_err(|e| format!("the key is not hex: {e}"))?;
        let mut sb = [0u8; 64];
        hex::decode_to_slice(sig, &mut sb).map_err(|e| format!("the signature is not hex: {e}"))?;
        let vk = VerifyingKey::from_bytes(&kb).map_err(|e| format!("not an ed25519 key: {e}"))?;
        vk.verify_strict(&self.digest(), &Signature::from_bytes(&sb))
            .map_err(|_| "the signature does not match the entry".to_owned())?;
        Ok(Some(kb))
    }

    /// The entry as the text of its ledger chunk.
    pub fn to_text(&self) -> String {
        // A struct of strings and integers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an entry from its ledger chunk's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let e: Entry = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let kinds = [e.seal.is_some(), e.key_added.is_some(), e.erasure.is_some()];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err("an entry must be exactly one of seal, key_added, erasure".into());
        }
        Ok(e)
    }
}

/// Hex digests concatenated, split back into digests (`None` when malformed).
pub fn split_leaves(leaves: &str) -> Option<Vec<Digest>> {
    if !leaves.len().is_multiple_of(64) {
        return None;
    }
    (0..leaves.len() / 64)
        .map(|i| rath_session::merkle::from_hex(leaves.get(i * 64..(i + 1) * 64)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> Seal {
        Seal {
            session: "s".into(),
            len: 2,
            root: "ab".repeat(32),
            parents: vec![SealParent {
                id: "p".into(),
                root: None,
            }],
            from: 0,
            base: None,
            leaves: "01".repeat(64),
        }
    }

    #[test]
    fn signatures_hold_only_for_the_signed_entry_and_key() {
        let k1 = SigningKey::from_bytes(&[7; 32]);
        let k2 = SigningKey::from_bytes(&[8; 32]);
        let e = Entry::seal(seal(), [0; 32]).signed(&k1);
        assert_eq!(
            e.check_signature(),
            Ok(Some(*k1.verifying_key().as_bytes()))
        );
        // Another key's signature over the same entry names the other key.
        let e2 = e.clone().signed(&k2);
        assert_eq!(
            e2.check_signature(),
            Ok(Some(*k2.verifying_key().as_bytes()))
        );
        // A changed root keeps the old signature: it no longer holds.
        let mut forged = e.clone();
        forged.seal.as_mut().unwrap().root = "cd".repeat(32);
        assert!(forged.check_signature().is_err());
        // Claiming key 1 with key 2's signature fails too.
        let mut claimed = e2.clone();
        claimed.key = e.key.clone();
        assert!(claimed.check_signature().is_err());
    }

    #[test]
    fn parse_refuses_ambiguous_entries() {
        let mut e = Entry::seal(seal(), [0; 32]);
        e.key_added = Some("00".repeat(32));
        assert!(Entry::parse(&e.to_text()).is_err());
        assert!(Entry::parse("{").is_err());
        assert_eq!(split_leaves(&"01".repeat(64)).map(|l| l.len()), Some(2));
        assert_eq!(split_leaves("0"), None);
        assert_eq!(split_leaves(&"zz".repeat(32)), None);
    }
}
