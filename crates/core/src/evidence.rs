//! Evidence references: opaque, host-issued, unforgeable handles on chunks and documents.
//!
//! A reference is `qe1.<claims>.<mac>`: base64url JSON claims (kind, principal, run, document,
//! revision, chunk or ordinal, expiry) and an HMAC-SHA256 over them with the library's own
//! secret key (stored in `meta`, never exported). Tools only ever see references; when one
//! comes back the host checks, in order: the MAC (forged or altered → rejected), the kind, the
//! principal it was issued to, the run or conversation it belongs to, the expiry, that the chunk
//! and its document revision are still current (a changed file supersedes every reference to
//! its old revision), and that the caller may still read the collection. Only then is the chunk
//! admitted to the run's [`EvidenceLedger`], with its text read from SQLite: whatever a tool
//! says about content is ignored, so a tool cannot introduce content.

use std::collections::HashSet;
use std::path::PathBuf;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::auth::{random_hex, Principal};
use crate::error::{Error, Result};
use crate::ids::{ChunkId, DocumentId, RevisionId};
use crate::names::{Name, NameKind};
use crate::store::{now_unix, ChunkLocation, ChunkRecord, Store};

/// How long a reference stays valid by default: long enough for a conversation, short
/// enough that a leaked one soon dies.
pub const DEFAULT_TTL_SECS: i64 = 3600;
const PREFIX: &str = "qe1";

/// The library's evidence key.
#[derive(Clone)]
pub struct EvidenceKey([u8; 32]);

impl EvidenceKey {
    /// Loads the library's key, creating it on first use.
    pub(crate) fn load_or_create(store: &Store) -> Result<EvidenceKey> {
        let hex = match store.meta("evidence_key")? {
            Some(hex) => hex,
            None => {
                // Another process may have created it meanwhile: keep theirs (one atomic
                // insert-or-ignore).
                store.insert_meta_if_absent("evidence_key", &random_hex(32)?)?;
                store
                    .meta("evidence_key")?
                    .ok_or_else(|| Error::Internal("evidence key vanished".into()))?
            }
        };
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2).unwrap_or("zz"), 16)
                .map_err(|_| Error::Internal("the stored evidence key is corrupt".into()))?;
        }
        Ok(EvidenceKey(key))
    }

    fn mac(&self, data: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(data);
        mac.finalize().into_bytes()[..20].to_vec()
    }
}

/// What a reference points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefKind {
    /// A chunk (an `evidence_ref`).
    #[serde(rename = "c")]
    Chunk,
    /// A document revision (a `source_ref`).
    #[serde(rename = "s")]
    Source,
    /// A position in a document revision (a paging cursor).
    #[serde(rename = "p")]
    Cursor,
    /// A byte position in a document revision's reader text (a reading cursor).
    #[serde(rename = "t")]
    TextCursor,
}

impl RefKind {
    fn noun(self) -> &'static str {
        match self {
            RefKind::Chunk => "evidence reference",
            RefKind::Source => "source reference",
            RefKind::Cursor => "cursor",
            RefKind::TextCursor => "reading cursor",
        }
    }
}

/// The signed content of a reference.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Kind.
    #[serde(rename = "k")]
    pub kind: RefKind,
    /// The principal it was issued to.
    #[serde(rename = "p")]
    pub principal: String,
    /// The run or conversation it belongs to.
    #[serde(rename = "r")]
    pub run: String,
    /// Document id.
    #[serde(rename = "d")]
    pub document_id: DocumentId,
    /// The document revision it was read from.
    #[serde(rename = "v")]
    pub revision_id: RevisionId,
    /// Chunk id (chunk references) or the next ordinal (cursors).
    #[serde(rename = "n", default)]
    pub item: i64,
    /// Unix seconds after which it is refused.
    #[serde(rename = "e")]
    pub expires_at: i64,
}

/// A chunk admitted to a run's evidence.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct LedgerEntry {
    /// The reference it was admitted under.
    pub evidence_ref: String,
    /// A reference to its document, for paging (`sourceRef`, the manual's spelling).
    #[serde(rename = "sourceRef")]
    pub source_ref: String,
    /// Chunk id.
    pub chunk_id: ChunkId,
    /// Document id.
    pub document_id: DocumentId,
    /// Document revision.
    pub revision_id: RevisionId,
    /// Position in the document.
    pub ordinal: i64,
    /// The file.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub path: PathBuf,
    /// Document title.
    pub title: Option<String>,
    /// Collection.
    pub collection: String,
    /// Headings above the chunk.
    pub heading_path: String,
    /// Page and lines.
    pub location: ChunkLocation,
    /// The chunk's text, read from the library.
    pub text: String,
    /// The server-issued score, when it came from retrieval.
    pub score: Option<f32>,
    /// The stage or tool that admitted it.
    pub admitted_by: String,
}

/// A reference that failed revalidation, and why.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct RejectedRef {
    /// The reference as given (cut to 48 characters).
    pub reference: String,
    /// The stage or tool that returned it.
    pub returned_by: String,
    /// Why it was refused.
    pub reason: String,
}

/// A run's admitted evidence, in admission order, each chunk once.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EvidenceLedger {
    /// Admitted chunks.
    pub entries: Vec<LedgerEntry>,
    /// Refused references.
    pub rejected: Vec<RejectedRef>,
    #[serde(skip)]
    admitted: HashSet<ChunkId>,
}

impl EvidenceLedger {
    /// Adds an entry unless its chunk is already there.
    pub fn admit(&mut self, entry: LedgerEntry) -> bool {
        if self.admitted.insert(entry.chunk_id) {
            self.entries.push(entry);
            true
        } else {
            false
        }
    }

    /// Records a refusal.
    pub fn reject(&mut self, reference: &str, returned_by: &str, reason: String) {
        self.rejected.push(RejectedRef {
            reference: reference.chars().take(48).collect(),
            returned_by: returned_by.into(),
            reason,
        });
    }
}

/// Issues and checks references for one principal in one run (or conversation).
#[derive(Clone)]
pub struct EvidenceSession {
    key: EvidenceKey,
    /// The caller.
    pub principal: Principal,
    /// The run or conversation id.
    pub run: String,
    ttl_secs: i64,
}

impl EvidenceSession {
    /// A session for a new run.
    pub fn new(key: EvidenceKey, principal: Principal) -> Result<EvidenceSession> {
        Ok(EvidenceSession {
            key,
            principal,
            run: random_hex(8)?,
            ttl_secs: DEFAULT_TTL_SECS,
        })
    }

    /// A session bound to a conversation that spans several runs (its references stay valid
    /// from one run to the next, as the manual's paging flow needs). The id is the caller's:
    /// 1 to 64 letters, digits, `-` or `_`.
    pub fn in_conversation(
        key: EvidenceKey,
        principal: Principal,
        conversation: &str,
    ) -> Result<EvidenceSession> {
        Name::parse(NameKind::Conversation, conversation).map_err(|bad| Error::InvalidSetting {
            field: "conversation".into(),
            reason: bad.to_string(),
        })?;
        Ok(EvidenceSession {
            key,
            principal,
            run: format!("c:{conversation}"),
            ttl_secs: DEFAULT_TTL_SECS,
        })
    }

    /// The same session with another lifetime for newly issued references.
    pub fn with_ttl_secs(mut self, ttl_secs: i64) -> Self {
        self.ttl_secs = ttl_secs;
        self
    }

    fn issue(
        &self,
        kind: RefKind,
        document_id: DocumentId,
        revision_id: RevisionId,
        item: i64,
    ) -> String {
        let claims = Claims {
            kind,
            principal: self.principal.id.clone(),
            run: self.run.clone(),
            document_id,
            revision_id,
            item,
            expires_at: now_unix() + self.ttl_secs,
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let mac = URL_SAFE_NO_PAD.encode(self.key.mac(format!("{PREFIX}.{body}").as_bytes()));
        format!("{PREFIX}.{body}.{mac}")
    }

    /// A reference to a chunk.
    pub fn issue_chunk(&self, chunk: &ChunkRecord) -> String {
        self.issue(
            RefKind::Chunk,
            chunk.document_id,
            chunk.revision_id,
            chunk.id.0,
        )
    }

    /// A reference to a document revision.
    pub fn issue_source(&self, document_id: DocumentId, revision_id: RevisionId) -> String {
        self.issue(RefKind::Source, document_id, revision_id, 0)
    }

    /// A cursor at `next_ordinal` in a document revision.
    pub fn issue_cursor(
        &self,
        document_id: DocumentId,
        revision_id: RevisionId,
        next_ordinal: i64,
    ) -> String {
        self.issue(RefKind::Cursor, document_id, revision_id, next_ordinal)
    }

    /// A cursor at byte `next_byte` of a document revision's reader text.
    pub fn issue_text_cursor(
        &self,
        document_id: DocumentId,
        revision_id: RevisionId,
        next_byte: u64,
    ) -> String {
        self.issue(
            RefKind::TextCursor,
            document_id,
            revision_id,
            next_byte as i64,
        )
    }

    /// Checks the signature, kind, holder, run and expiry of a reference (not the library).
    pub fn open(&self, reference: &str, kind: RefKind) -> Result<Claims> {
        let reject = |why: String| Error::EvidenceRejected(why);
        let mut parts = reference.split('.');
        let (Some(PREFIX), Some(body), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(reject(format!(
                "malformed {} (not issued by Quarry)",
                kind.noun()
            )));
        };
        let expected = self.key.mac(format!("{PREFIX}.{body}").as_bytes());
        let given = URL_SAFE_NO_PAD.decode(mac).unwrap_or_default();
        if given.len() != expected.len()
            || given
                .iter()
                .zip(&expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                != 0
        {
            return Err(reject(format!(
                "{} has an invalid signature (forged or altered)",
                kind.noun()
            )));
        }
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| reject(format!("malformed {}", kind.noun())))?;
        if claims.kind != kind {
            return Err(reject(format!(
                "a {} was given where a {} was expected",
                claims.kind.noun(),
                kind.noun()
            )));
        }
        if claims.principal != self.principal.id {
            return Err(reject(format!(
                "{} was not issued to this caller",
                kind.noun()
            )));
        }
        if claims.run != self.run {
            return Err(reject(format!(
                "{} belongs to another run or conversation",
                kind.noun()
            )));
        }
        if now_unix() >= claims.expires_at {
            return Err(reject(format!("{} has expired", kind.noun())));
        }
        Ok(claims)
    }

    /// Opens a document reference and checks it is still the current revision and readable.
    pub(crate) fn open_source(&self, store: &Store, reference: &str) -> Result<Claims> {
        let claims = self.open(reference, RefKind::Source)?;
        self.check_document(store, &claims)?;
        Ok(claims)
    }

    /// Opens a cursor of `kind` for the document revision `source` names.
    pub fn open_cursor(&self, reference: &str, kind: RefKind, source: &Claims) -> Result<i64> {
        let claims = self.open(reference, kind)?;
        if claims.document_id != source.document_id || claims.revision_id != source.revision_id {
            return Err(Error::EvidenceRejected(
                "cursor belongs to another document or revision".into(),
            ));
        }
        Ok(claims.item)
    }

    fn check_document(&self, store: &Store, claims: &Claims) -> Result<()> {
        let Some(access) = store.document_access(claims.document_id)? else {
            return Err(Error::EvidenceRejected(
                "the document is no longer in the library".into(),
            ));
        };
        if access.current_revision_id != Some(claims.revision_id) {
            return Err(Error::EvidenceRejected(
                "the document has changed since (the reference points at a superseded revision)"
                    .into(),
            ));
        }
        if !self
            .principal
            .scope
            .allows_named(&access.collection, &access.sensitivity)
        {
            return Err(Error::EvidenceRejected(
                "the caller may not read that collection".into(),
            ));
        }
        Ok(())
    }

    /// Revalidates a chunk reference against the library and returns the ledger entry it
    /// earns. The text comes from SQLite, never from the caller.
    pub(crate) fn revalidate_chunk(
        &self,
        store: &Store,
        reference: &str,
        score: Option<f32>,
        admitted_by: &str,
    ) -> Result<LedgerEntry> {
        let claims = self.open(reference, RefKind::Chunk)?;
        self.check_document(store, &claims)?;
        let chunk = store
            .chunks_by_id(&[ChunkId(claims.item)])?
            .into_iter()
            .next()
            .ok_or_else(|| Error::EvidenceRejected("the chunk is no longer indexed".into()))?;
        if chunk.revision_id != claims.revision_id || chunk.document_id != claims.document_id {
            return Err(Error::EvidenceRejected(
                "the chunk belongs to a superseded revision".into(),
            ));
        }
        Ok(self.entry(reference.to_string(), chunk, score, admitted_by))
    }

    /// Revalidates a chunk reference; a refusal is recorded in `ledger` with its reason, so a
    /// refused reference never silently vanishes. The entry is returned, not admitted (a chunk
    /// tool's output is a selection, admitted later).
    pub(crate) fn revalidate_or_refuse(
        &self,
        store: &Store,
        reference: &str,
        score: Option<f32>,
        by: &str,
        ledger: &mut EvidenceLedger,
    ) -> Option<LedgerEntry> {
        match self.revalidate_chunk(store, reference, score, by) {
            Ok(entry) => Some(entry),
            Err(e) => {
                ledger.reject(reference, by, e.to_string());
                None
            }
        }
    }

    /// The one way a reference enters a ledger: revalidated, then admitted (each chunk once) or
    /// refused with its reason. Returns the ledger's entry for the chunk when admitted (the
    /// earlier one if the chunk was already there).
    pub(crate) fn admit_chunk<'l>(
        &self,
        store: &Store,
        reference: &str,
        score: Option<f32>,
        by: &str,
        ledger: &'l mut EvidenceLedger,
    ) -> Option<&'l LedgerEntry> {
        let entry = self.revalidate_or_refuse(store, reference, score, by, ledger)?;
        let chunk_id = entry.chunk_id;
        ledger.admit(entry);
        ledger.entries.iter().rev().find(|e| e.chunk_id == chunk_id)
    }

    /// The ledger entry for a chunk this session is issuing now.
    pub fn entry(
        &self,
        evidence_ref: String,
        chunk: ChunkRecord,
        score: Option<f32>,
        admitted_by: &str,
    ) -> LedgerEntry {
        LedgerEntry {
            source_ref: self.issue_source(chunk.document_id, chunk.revision_id),
            evidence_ref,
            chunk_id: chunk.id,
            document_id: chunk.document_id,
            revision_id: chunk.revision_id,
            ordinal: chunk.ordinal,
            path: chunk.path,
            title: chunk.title,
            collection: chunk.collection,
            heading_path: chunk.heading_path,
            location: chunk.location,
            text: chunk.text,
            score,
            admitted_by: admitted_by.into(),
        }
    }
}
