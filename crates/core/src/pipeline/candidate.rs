//! The candidates a run hands from stage to stage, and the views of them that tools, stage
//! reports and tool tests show. Fields are declared in alphabetical order so that a value
//! written straight to text has the same key order as one built through `serde_json::Value`
//! (a sorted map): the JSON tools and reports see is unchanged byte for byte.

use serde::Serialize;

use crate::evidence::EvidenceSession;
use crate::retrieve::{Hit, StageScores};
use crate::store::ChunkRecord;

/// A chunk found for a run, with the references issued for it: what chunk tools rank and
/// the evidence stage admits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Candidate {
    /// The collection's name.
    pub collection: String,
    /// The signed reference to the chunk.
    pub evidence_ref: String,
    /// Position in its document.
    pub ordinal: i64,
    /// The file, displayed.
    pub path: String,
    /// 1-based rank in the retrieval that found it (0: fetched by a tool).
    pub rank: usize,
    /// The server-issued score (0 when fetched by a tool).
    pub score: f32,
    /// The retrieval snippet (empty when fetched by a tool).
    pub snippet: String,
    /// The signed reference to its document revision, for paging.
    pub source_ref: String,
    /// The chunk's text.
    pub text: String,
    /// The document's title (empty when it has none).
    pub title: String,
}

impl Candidate {
    /// `chunk` with references issued by `session`.
    pub fn issue(
        session: &EvidenceSession,
        chunk: &ChunkRecord,
        rank: usize,
        score: f32,
        snippet: &str,
    ) -> Candidate {
        Candidate {
            collection: chunk.collection.clone(),
            evidence_ref: session.issue_chunk(chunk),
            ordinal: chunk.ordinal,
            path: chunk.path.display().to_string(),
            rank,
            score,
            snippet: snippet.to_string(),
            source_ref: session.issue_source(chunk.document_id, chunk.revision_id),
            text: chunk.text.clone(),
            title: chunk.title.clone().unwrap_or_default(),
        }
    }

    /// Its score as admission reads it; a score that is not finite was never a JSON number.
    pub fn json_score(&self) -> Option<f32> {
        self.score.is_finite().then_some(self.score)
    }

    /// What a chunk tool is shown of it (no text: it pages through `ctx` for more).
    pub fn for_chunk_tool(&self) -> ChunkToolCandidate<'_> {
        ChunkToolCandidate {
            evidence_ref: &self.evidence_ref,
            rank: self.rank,
            score: self.score,
            snippet: &self.snippet,
            source_ref: &self.source_ref,
            title: &self.title,
        }
    }

    /// What a retrieval tool test shows of it.
    pub fn for_retrieval_test(&self) -> RetrievalTestCandidate<'_> {
        RetrievalTestCandidate {
            path: &self.path,
            rank: self.rank,
            score: self.score,
            snippet: &self.snippet,
            title: &self.title,
        }
    }
}

/// A candidate as a chunk tool receives it.
#[derive(Debug, Serialize)]
pub(crate) struct ChunkToolCandidate<'a> {
    pub evidence_ref: &'a str,
    pub rank: usize,
    pub score: f32,
    pub snippet: &'a str,
    pub source_ref: &'a str,
    pub title: &'a str,
}

/// A candidate in a retrieval tool test's output.
#[derive(Debug, Serialize)]
pub(crate) struct RetrievalTestCandidate<'a> {
    pub path: &'a str,
    pub rank: usize,
    pub score: f32,
    pub snippet: &'a str,
    pub title: &'a str,
}

/// A document found by `ctx.search_documents`: a reference to page through, no chunk.
#[derive(Debug, Serialize)]
pub(crate) struct FoundDocument<'a> {
    pub path: String,
    pub score: f32,
    pub snippet: &'a str,
    pub source_ref: String,
    pub title: String,
}

impl<'a> FoundDocument<'a> {
    /// The document of `chunk`, with a reference to its revision issued by `session`.
    pub fn issue(
        session: &EvidenceSession,
        chunk: &ChunkRecord,
        score: f32,
        snippet: &'a str,
    ) -> Self {
        FoundDocument {
            path: chunk.path.display().to_string(),
            score,
            snippet,
            source_ref: session.issue_source(chunk.document_id, chunk.revision_id),
            title: chunk.title.clone().unwrap_or_default(),
        }
    }
}

/// A chunk in a page of a document (`ctx.fetch_document_chunks`, `ctx.fetch_neighbors`).
#[derive(Debug, Serialize)]
pub(crate) struct PageChunk<'a> {
    pub evidence_ref: String,
    pub location: PageLocation,
    pub ordinal: i64,
    pub path: String,
    pub text: &'a str,
    pub title: String,
}

/// A page of a document's chunks (`ctx.fetch_document_chunks`), with a cursor to the next.
#[derive(Debug, Serialize)]
pub(crate) struct DocumentPage<'a> {
    pub chunks: Vec<PageChunk<'a>>,
    pub cursor: Option<String>,
}

/// A chunk's neighbours in its document (`ctx.fetch_neighbors`), itself left out.
#[derive(Debug, Serialize)]
pub(crate) struct Neighbors<'a> {
    pub chunks: Vec<PageChunk<'a>>,
    pub radius: i64,
}

/// A document's text from a cursor on (`ctx.fetch_source_document`), with the references of
/// the chunks it joins.
#[derive(Debug, Serialize)]
pub(crate) struct SourceDocument {
    pub cursor: Option<String>,
    pub evidence_refs: Vec<String>,
    pub path: String,
    pub text: String,
    pub title: String,
}

/// Where a page chunk is: page and lines, no byte offsets.
#[derive(Debug, Serialize)]
pub(crate) struct PageLocation {
    pub line_end: Option<u32>,
    pub line_start: Option<u32>,
    pub page: Option<u32>,
}

impl<'a> PageChunk<'a> {
    /// `chunk` with a reference issued by `session`.
    pub fn issue(session: &EvidenceSession, chunk: &'a ChunkRecord) -> Self {
        PageChunk {
            evidence_ref: session.issue_chunk(chunk),
            location: PageLocation {
                line_end: chunk.location.line_end,
                line_start: chunk.location.line_start,
                page: chunk.location.page,
            },
            ordinal: chunk.ordinal,
            path: chunk.path.display().to_string(),
            text: &chunk.text,
            title: chunk.title.clone().unwrap_or_default(),
        }
    }
}

/// A hit in the retrieval stage's report: its scores by stage, without references. The
/// tester shows these (the type is exported to the window), and `--json` prints them.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ScoredCandidate {
    /// The collection's name.
    pub collection: String,
    /// The file, displayed.
    pub path: String,
    /// 1-based rank in the retrieval.
    pub rank: usize,
    /// The final score.
    pub score: f32,
    /// What each of the engine's stages gave it.
    pub scores: StageScores,
    /// The document's title, when it has one.
    pub title: Option<String>,
}

impl From<&Hit> for ScoredCandidate {
    fn from(hit: &Hit) -> Self {
        ScoredCandidate {
            collection: hit.collection.clone(),
            path: hit.path.display().to_string(),
            rank: hit.rank,
            score: hit.score,
            scores: hit.scores.clone(),
            title: hit.title.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;
    use crate::evidence::EvidenceKey;
    use crate::fulltext::Snippet;
    use crate::ids::{ChunkId, DocumentId, RevisionId};
    use crate::store::{ChunkLocation, Store};
    use crate::Principal;

    fn chunk(title: Option<&str>) -> ChunkRecord {
        ChunkRecord {
            id: ChunkId(7),
            document_id: DocumentId(3),
            revision_id: RevisionId(4),
            ordinal: 2,
            text: "Ferns reproduce by spores.".into(),
            heading_path: "Ferns".into(),
            location: ChunkLocation::default(),
            token_count: 5,
            path: PathBuf::from("/docs/ferns.md"),
            title: title.map(str::to_string),
            collection: "notes".into(),
            mtime_ns: None,
        }
    }

    fn text<T: Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap()
    }

    fn session() -> EvidenceSession {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("q.db")).unwrap();
        let key = EvidenceKey::load_or_create(&store).unwrap();
        EvidenceSession::new(key, Principal::administrator()).unwrap()
    }

    /// The shapes the `json!` literals this module replaced produced, compared as text.
    #[test]
    fn candidates_serialize_exactly_as_the_json_they_replace() {
        let session = session();
        for title in [Some("Ferns"), None] {
            let chunk = chunk(title);
            let c = Candidate::issue(&session, &chunk, 3, 0.5, "by spores");
            let old = json!({
                "evidence_ref": session.issue_chunk(&chunk),
                "source_ref": session.issue_source(chunk.document_id, chunk.revision_id),
                "rank": 3,
                "score": 0.5f32,
                "title": chunk.title.clone().unwrap_or_default(),
                "path": chunk.path.display().to_string(),
                "collection": chunk.collection,
                "snippet": "by spores",
                "text": chunk.text,
                "ordinal": chunk.ordinal,
            });
            assert_eq!(text(&c), old.to_string());
            assert_eq!(serde_json::to_value(&c).unwrap(), old);

            let tool_view = json!({
                "evidence_ref": old["evidence_ref"],
                "source_ref": old["source_ref"],
                "score": old["score"],
                "rank": old["rank"],
                "title": old["title"],
                "snippet": old["snippet"],
            });
            assert_eq!(text(&c.for_chunk_tool()), tool_view.to_string());

            let test_view = json!({
                "rank": old["rank"], "score": old["score"], "title": old["title"],
                "path": old["path"], "snippet": old["snippet"],
            });
            assert_eq!(text(&c.for_retrieval_test()), test_view.to_string());
        }
    }

    #[test]
    fn ctx_answers_serialize_exactly_as_the_json_they_replace() {
        let session = session();
        for title in [Some("Ferns"), None] {
            let mut chunk = chunk(title);
            chunk.location = ChunkLocation {
                page: Some(2),
                line_start: Some(10),
                line_end: None,
                byte_start: Some(5),
                byte_end: Some(9),
                ocr_confidence: None,
            };
            let document = json!({
                "source_ref": session.issue_source(chunk.document_id, chunk.revision_id),
                "title": chunk.title.clone().unwrap_or_default(),
                "path": chunk.path.display().to_string(),
                "snippet": "by spores",
                "score": 0.75f32,
            });
            let found = FoundDocument::issue(&session, &chunk, 0.75, "by spores");
            assert_eq!(text(&found), document.to_string());

            let page = json!({
                "evidence_ref": session.issue_chunk(&chunk),
                "ordinal": chunk.ordinal,
                "text": chunk.text,
                "title": chunk.title.clone().unwrap_or_default(),
                "path": chunk.path.display().to_string(),
                "location": {
                    "page": chunk.location.page,
                    "line_start": chunk.location.line_start,
                    "line_end": chunk.location.line_end,
                },
            });
            assert_eq!(text(&PageChunk::issue(&session, &chunk)), page.to_string());

            let paged = DocumentPage {
                chunks: vec![PageChunk::issue(&session, &chunk)],
                cursor: None,
            };
            assert_eq!(
                text(&paged),
                json!({"chunks": [page.clone()], "cursor": null}).to_string()
            );
            let neighbors = Neighbors {
                chunks: vec![PageChunk::issue(&session, &chunk)],
                radius: 2,
            };
            assert_eq!(
                text(&neighbors),
                json!({"chunks": [page], "radius": 2}).to_string()
            );
            let whole = SourceDocument {
                cursor: Some("c".into()),
                evidence_refs: vec!["r".into()],
                path: "/docs/ferns.md".into(),
                text: chunk.text.clone(),
                title: chunk.title.clone().unwrap_or_default(),
            };
            let old = json!({
                "title": chunk.title.clone().unwrap_or_default(),
                "path": "/docs/ferns.md",
                "text": chunk.text,
                "evidence_refs": ["r"],
                "cursor": "c",
            });
            assert_eq!(text(&whole), old.to_string());
        }
    }

    #[test]
    fn scored_hits_serialize_exactly_as_the_json_they_replace() {
        for title in [Some("Ferns".to_string()), None] {
            let hit = Hit {
                rank: 1,
                score: 0.25,
                scores: StageScores::default(),
                chunk_id: ChunkId(7),
                document_id: DocumentId(3),
                path: PathBuf::from("/docs/ferns.md"),
                title,
                collection: "notes".into(),
                heading_path: String::new(),
                location: ChunkLocation::default(),
                snippet: Snippet::plain("Ferns", 10),
                mtime_ns: None,
                also_at: Vec::new(),
            };
            let old = json!({
                "rank": hit.rank,
                "score": hit.score,
                "scores": hit.scores,
                "title": hit.title,
                "path": hit.path.display().to_string(),
                "collection": hit.collection,
            });
            // As JSON, the same object (keys compared sorted, `scores` included).
            let value = serde_json::to_value(ScoredCandidate::from(&hit)).unwrap();
            assert_eq!(value.to_string(), old.to_string());
        }
    }
}
