//! Trusted documents: the operations a first-party client was built with, loaded at start from
//! `ENGAGE_TRUSTED_DOCUMENTS` and kept in memory for the life of the process, apart from the
//! persisted-query store (`apq.rs`) whose least recently used entries anyone can push out.
//!
//! The manifest is graphql-codegen's client preset `persisted-documents.json`: a JSON object
//! mapping each document's SHA-256 (lowercase hex) to its text. A listed document may be sent
//! by text or by hash in the APQ extension (`extensions.persistedQuery.sha256Hash`); each is
//! parsed once at start, so a listed document never waits on the parse cache either. With
//! `ENGAGE_TRUSTED_DOCUMENTS_ONLY`, no other document runs: an unknown hash answers
//! `PERSISTED_QUERY_NOT_FOUND` (what APQ clients expect), an unlisted text
//! `DOCUMENT_NOT_TRUSTED`. That is the usual hardening of a service whose clients are its own
//! apps: whatever an attacker sends, only the documents the apps were built with run.
//!
//! A manifest that is not such an object, whose hash does not match its text, or whose
//! document the service would refuse, refuses to start: a typo found at deploy time rather
//! than by every client at once.

use std::{collections::HashMap, path::Path, sync::Arc};

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::document::{self, Parsed};

/// One trusted document: its text and its parse.
pub(crate) struct Trusted {
    pub(crate) text: Arc<str>,
    pub(crate) parsed: Arc<Parsed>,
}

/// The manifest as loaded (empty without `ENGAGE_TRUSTED_DOCUMENTS`).
#[derive(Default)]
pub(crate) struct TrustedDocuments {
    by_hash: HashMap<String, Trusted>,
    /// Whether only these documents run.
    pub(crate) only: bool,
}

impl TrustedDocuments {
    /// Loads the manifest a configuration names (none: an empty set that refuses nothing).
    pub(crate) fn load(path: Option<&Path>, only: bool) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self {
                by_hash: HashMap::new(),
                only,
            });
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("ENGAGE_TRUSTED_DOCUMENTS: cannot read {}", path.display()))?;
        let by_hash = Self::parse_manifest(&text).with_context(|| {
            format!(
                "ENGAGE_TRUSTED_DOCUMENTS: {} is not a manifest of trusted documents",
                path.display()
            )
        })?;
        tracing::info!(
            documents = by_hash.len(),
            only,
            "trusted documents loaded from {}",
            path.display()
        );
        Ok(Self { by_hash, only })
    }

    fn parse_manifest(text: &str) -> anyhow::Result<HashMap<String, Trusted>> {
        let manifest: serde_json::Value = serde_json::from_str(text).context("it is not JSON")?;
        let serde_json::Value::Object(entries) = manifest else {
            anyhow::bail!(
                "it must be a JSON object mapping each document's SHA-256 hex to its text \
                 (graphql-codegen's persisted-documents.json)"
            );
        };
        let mut by_hash = HashMap::with_capacity(entries.len());
        for (hash, document) in entries {
            let Some(document) = document.as_str() else {
                anyhow::bail!("the entry {hash:?} is not a document's text");
            };
            let actual = hex::encode(Sha256::digest(document.as_bytes()));
            if hash.to_ascii_lowercase() != actual {
                anyhow::bail!("the entry {hash:?} holds a document whose SHA-256 is {actual}");
            }
            let parsed = document::parse(document)
                .map_err(|error| anyhow::anyhow!("the document {actual} is refused: {error}"))?;
            by_hash.insert(
                actual,
                Trusted {
                    text: document.into(),
                    parsed: Arc::new(parsed),
                },
            );
        }
        Ok(by_hash)
    }

    /// The document listed under a hash (lowercase hex).
    pub(crate) fn by_hash(&self, hash: &str) -> Option<&Trusted> {
        self.by_hash.get(hash)
    }

    /// The listed document with this text, if any (hashes it only when a manifest is loaded).
    pub(crate) fn by_text(&self, text: &str) -> Option<&Trusted> {
        if self.by_hash.is_empty() {
            return None;
        }
        self.by_hash(&hex::encode(Sha256::digest(text.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_must_map_each_hash_to_its_own_text() {
        let query = "query Hello { __typename }";
        let hash = hex::encode(Sha256::digest(query.as_bytes()));
        let good = serde_json::json!({ hash.clone(): query }).to_string();
        let loaded = TrustedDocuments::parse_manifest(&good).unwrap();
        assert_eq!(&*loaded[&hash].text, query);

        let wrong = serde_json::json!({ "0".repeat(64): query }).to_string();
        let Err(error) = TrustedDocuments::parse_manifest(&wrong) else {
            panic!("a hash that is not the text's is refused");
        };
        assert!(error.to_string().contains(&hash), "{error}");
        for bad in ["[\"query Hello { __typename }\"]", "{\"a\": 1}", "not json"] {
            assert!(TrustedDocuments::parse_manifest(bad).is_err(), "{bad}");
        }
    }
}
