//! Retrieval: lexical (BM25) search joined with SQLite for text, location and snippets.
//!
//! SQLite has the last word: a full-text hit whose chunk is gone (deleted since tantivy's last
//! commit) is dropped, so a removed source vanishes from results at once.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fulltext::{FullText, FulltextQuery, Snippet};
use crate::store::{ChunkLocation, Store};

/// A search.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Free text. `"phrases"`, `+required`, `-excluded` work.
    pub query: String,
    /// Collection names to search (empty: all).
    pub collections: Vec<String>,
    /// Hits to return. Default 10.
    pub limit: usize,
    /// Most hits from one document (0: no limit). Default 1: one result per file.
    pub max_per_document: usize,
    /// Snippet length in characters. Default 200.
    pub snippet_chars: usize,
}

impl SearchRequest {
    /// A search of every collection with the defaults.
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            collections: Vec::new(),
            limit: 10,
            max_per_document: 1,
            snippet_chars: 200,
        }
    }
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// BM25 score.
    pub score: f32,
    /// The chunk.
    pub chunk_id: i64,
    /// Its document.
    pub document_id: i64,
    /// The file.
    #[serde(serialize_with = "crate::store::serialize_path")]
    pub path: PathBuf,
    /// Document title.
    pub title: Option<String>,
    /// Collection name.
    pub collection: String,
    /// Headings above the chunk.
    pub heading_path: String,
    /// Page, lines, bytes.
    pub location: ChunkLocation,
    /// Highlighted excerpt.
    pub snippet: Snippet,
    /// File modification time, ns since the epoch.
    pub mtime_ns: Option<i64>,
}

/// Results with timing.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<Hit>,
    /// Time spent, in microseconds.
    pub took_us: u64,
}

pub(crate) fn search(
    store: &Store,
    fulltext: &FullText,
    request: &SearchRequest,
) -> Result<SearchResults> {
    let started = std::time::Instant::now();
    let mut collection_ids = Vec::new();
    let mut languages: Vec<String> = Vec::new();
    let all = store.collections()?;
    let wanted: Vec<_> = if request.collections.is_empty() {
        all.iter().collect()
    } else {
        let mut wanted = Vec::new();
        for name in &request.collections {
            let c = all
                .iter()
                .find(|c| &c.name == name)
                .ok_or_else(|| Error::CollectionNotFound(name.clone()))?;
            collection_ids.push(c.id);
            wanted.push(c);
        }
        wanted
    };
    for c in &wanted {
        if !languages.contains(&c.language) {
            languages.push(c.language.clone());
        }
    }
    let language_of: HashMap<String, String> = all
        .iter()
        .map(|c| (c.name.clone(), c.language.clone()))
        .collect();
    let limit = request.limit.max(1);
    // Ask for more than needed: some hits fold into an earlier one of the same document.
    let fetch = if request.max_per_document == 0 {
        limit
    } else {
        limit * 5
    };
    let mut results = fulltext.search(&FulltextQuery {
        text: &request.query,
        languages: &languages,
        collection_ids: &collection_ids,
        limit: fetch,
    })?;
    let ids: Vec<i64> = results.hits.iter().map(|h| h.chunk_id).collect();
    let chunks: HashMap<i64, _> = store
        .chunks_by_id(&ids)?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    let mut per_document: HashMap<i64, usize> = HashMap::new();
    let mut hits = Vec::new();
    for raw in results.hits.clone() {
        let Some(chunk) = chunks.get(&raw.chunk_id) else {
            continue;
        };
        let seen = per_document.entry(chunk.document_id).or_default();
        if request.max_per_document > 0 && *seen >= request.max_per_document {
            continue;
        }
        *seen += 1;
        let language = language_of
            .get(&chunk.collection)
            .map(String::as_str)
            .unwrap_or("english");
        let snippet = results.snippet(language, &chunk.text, request.snippet_chars)?;
        hits.push(Hit {
            rank: hits.len() + 1,
            score: raw.score,
            chunk_id: chunk.id,
            document_id: chunk.document_id,
            path: chunk.path.clone(),
            title: chunk.title.clone(),
            collection: chunk.collection.clone(),
            heading_path: chunk.heading_path.clone(),
            location: chunk.location.clone(),
            snippet,
            mtime_ns: chunk.mtime_ns,
        });
        if hits.len() >= limit {
            break;
        }
    }
    Ok(SearchResults {
        hits,
        took_us: started.elapsed().as_micros() as u64,
    })
}
