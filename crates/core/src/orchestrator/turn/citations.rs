//! Citations: what an answer's `[n]` markers resolve to in the conversation's ledger.

use std::collections::BTreeSet;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::setup::Turn;
use crate::ids::ChunkId;
use crate::orchestrator::conversation::{self, EvidenceItem};
use crate::Result;

/// A citation: a ledger entry of the conversation, openable.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Citation {
    /// Its number (`[n]` in the answer).
    pub n: i64,
    /// The file.
    #[serde(serialize_with = "crate::serde_paths::path")]
    #[cfg_attr(feature = "specta", specta(type = String))]
    pub path: std::path::PathBuf,
    /// `path p. N lines a-b`.
    pub locator: String,
    /// Document title.
    pub title: Option<String>,
    /// The headings above the passage (`Guide › Setup`; empty at the top of a document).
    #[serde(default)]
    pub heading: String,
    /// Collection.
    pub collection: String,
    /// Page.
    pub page: Option<u32>,
    /// First line.
    pub line_start: Option<u32>,
    /// Last line.
    pub line_end: Option<u32>,
    /// Read from the page's pixels by OCR, with Tesseract's confidence (0 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocr_confidence: Option<u8>,
    /// The passage (first 300 characters).
    pub snippet: String,
    /// The chunk.
    pub chunk_id: ChunkId,
}

impl Citation {
    pub(super) fn of(item: &EvidenceItem) -> Citation {
        Citation {
            n: item.n,
            path: item.path.clone(),
            locator: item.locator(),
            title: item.title.clone(),
            heading: item.heading_path.clone(),
            collection: item.collection.clone(),
            page: item.location.page,
            line_start: item.location.line_start,
            line_end: item.location.line_end,
            ocr_confidence: item.location.ocr_confidence,
            snippet: item.text.chars().take(300).collect(),
            chunk_id: item.chunk_id,
        }
    }
}

impl Turn<'_> {
    /// The citations of an extractive answer, whose cited numbers are known, not parsed: it
    /// quotes documents, whose own brackets must not be read as citations.
    pub(super) fn quoted_citations(&self, cited: &[i64]) -> Vec<Citation> {
        self.admitted
            .iter()
            .filter(|i| cited.contains(&i.n))
            .map(Citation::of)
            .collect()
    }

    /// Keeps the citations that resolve to this conversation's ledger (by number or by file
    /// path), removes the others from the text, and records them.
    pub(super) fn resolve_citations(&mut self, answer: &str) -> Result<(String, Vec<Citation>)> {
        let ledger = conversation::evidence_of(self.ctx.store, &self.conversation.id)?;
        let marker = Regex::new(r"\[([^\[\]\n]{1,200})\]").expect("a valid regex");
        let mut cited: Vec<i64> = Vec::new();
        let mut refused: BTreeSet<String> = BTreeSet::new();
        let cleaned = marker.replace_all(answer, |caps: &regex::Captures<'_>| {
            let inner = caps[1].trim();
            match ledger_item(&ledger, inner) {
                Some(item) => {
                    if !cited.contains(&item.n) {
                        cited.push(item.n);
                    }
                    format!("[{}]", item.n)
                }
                None if looks_like_citation(inner) => {
                    refused.insert(inner.to_string());
                    String::new()
                }
                None => caps[0].to_string(),
            }
        });
        if !refused.is_empty() {
            self.record(
                "citation.rejected",
                json!({"citations": refused, "reason": "not an entry of this conversation's evidence ledger"}),
            )?;
        }
        let citations = cited
            .iter()
            .filter_map(|n| ledger.iter().find(|i| i.n == *n))
            .map(Citation::of)
            .collect();
        Ok((cleaned.trim().to_string(), citations))
    }
}

/// The ledger entry a marker names, by number or by (the end of) its file path.
fn ledger_item<'l>(ledger: &'l [EvidenceItem], inner: &str) -> Option<&'l EvidenceItem> {
    match inner.parse::<i64>() {
        Ok(n) => ledger.iter().find(|i| i.n == n),
        Err(_) => ledger.iter().find(|i| {
            let path = i.path.display().to_string();
            !inner.is_empty() && (path == inner || path.ends_with(&format!("/{inner}")))
        }),
    }
}

/// A bracket that meant to cite (a number or a file name), as opposed to prose in brackets.
fn looks_like_citation(inner: &str) -> bool {
    inner.parse::<i64>().is_ok() || inner.contains('/') || inner.contains('.')
}
