//! The tantivy full-text index: derived from SQLite, never the source of truth.
//!
//! Contract: every chunk change in SQLite writes a `fulltext_outbox` row in the same
//! transaction. [`FullText::sync`] applies outbox rows in sequence order (delete the chunk's
//! term, then add it again if it still exists, so replaying is idempotent) and commits with the
//! last applied sequence as the commit payload. On open, anything after that sequence is
//! replayed, so a crash between the SQLite commit and the tantivy commit loses nothing. Only
//! after the tantivy commit returns are outbox rows pruned; if tantivy is ever older than the
//! pruned horizon (a restored or deleted index folder) it is rebuilt from SQLite.
//!
//! The schema has `title`, `heading` and `body` fields per stemming language, so each
//! collection keeps its own stemmer while BM25 statistics stay comparable across collections.
//! Beside its chunks, each document has one page entry (`page_of` and a `page` field per
//! language: its title and all its text), refreshed whenever the outbox touches one of its
//! chunks, so a page can be ranked by everything it says ([`FullText::search_pages`]).

mod documents;
mod schema;
mod stem;

pub use documents::DocumentBm25;
pub(crate) use schema::language_by_name;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use tantivy::collector::{Count, TopDocs};
use tantivy::query::{
    BooleanQuery, ConstScoreQuery, Occur, Query, QueryParser, TermQuery, TermSetQuery,
};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::error::{Error, Result};
use crate::ids::{ChunkId, CollectionId, DocumentId};
use crate::store::Store;
use schema::Fields;

/// Memory budget of the index writer. 50 MB keeps RSS modest on small machines.
const WRITER_MEMORY: usize = 50_000_000;
/// Outbox rows read per round trip while syncing.
const SYNC_BATCH: usize = 5_000;

/// A full-text hit before it is joined with SQLite.
#[derive(Debug, Clone)]
pub struct FulltextHit {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its document.
    pub document_id: DocumentId,
    /// BM25 score (with field boosts).
    pub score: f32,
}

/// A highlighted excerpt.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Snippet {
    /// Plain text excerpt.
    pub text: String,
    /// Byte ranges of `text` that matched the query.
    pub highlights: Vec<(usize, usize)>,
}

impl Snippet {
    /// The start of `text`, cut at a word boundary, with nothing highlighted (for hits that
    /// came from the vector stream alone).
    pub fn plain(text: &str, max_chars: usize) -> Snippet {
        let mut end = text.len();
        if let Some((i, _)) = text.char_indices().nth(max_chars) {
            end = text[..i]
                .rfind(char::is_whitespace)
                .filter(|&w| w > i / 2)
                .unwrap_or(i);
        }
        let mut out: String = text[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        if end < text.len() {
            out.push_str(" …");
        }
        Snippet {
            text: out,
            highlights: Vec::new(),
        }
    }
}

/// Entries whose `field` holds one of `ids`: a filter that adds nothing to the score (a
/// scored id term would add its own idf, which differs from one document or collection to
/// the next).
fn any_of(field: tantivy::schema::Field, ids: impl Iterator<Item = u64>) -> Box<dyn Query> {
    let terms: Vec<(Occur, Box<dyn Query>)> = ids
        .map(|id| {
            let term = Term::from_field_u64(field, id);
            (
                Occur::Should,
                Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>,
            )
        })
        .collect();
    Box::new(ConstScoreQuery::new(
        Box::new(BooleanQuery::new(terms)),
        0.0,
    ))
}

/// The u64 `field` (a fast field) of the entry at `address`, if it has one.
fn fast_id(searcher: &Searcher, address: tantivy::DocAddress, field: &str) -> Result<Option<u64>> {
    let column = searcher
        .segment_reader(address.segment_ord)
        .fast_fields()
        .u64(field)?;
    Ok(column.first(address.doc_id))
}

/// `text` as separate words, for the page field, which keeps no positions: a word the
/// analyzer splits (`parse_header_v235`, `std::fs`) would otherwise become a phrase query that
/// field cannot answer, and the lenient parser would drop it. A word's `+` or `-` carries to
/// each of its parts; quotes and field prefixes go.
fn bag_of_words(text: &str) -> String {
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        let (sign, rest) = match word.chars().next() {
            Some(c @ ('+' | '-')) => (Some(c), &word[1..]),
            _ => (None, word),
        };
        for part in rest
            .split(|c: char| !c.is_alphanumeric())
            .filter(|p| !p.is_empty())
        {
            words.push(match sign {
                Some(sign) => format!("{sign}{part}"),
                None => part.to_string(),
            });
        }
    }
    words.join(" ")
}

/// BM25 statistics for page entries: the index's own, except that the average page length
/// is over pages, not over every entry (chunks have no page field, and counting them would
/// shrink the average forty-fold and punish every long page).
struct PageStatistics<'a> {
    searcher: &'a Searcher,
    pages: u64,
}

impl tantivy::query::Bm25StatisticsProvider for PageStatistics<'_> {
    fn total_num_tokens(&self, field: tantivy::schema::Field) -> tantivy::Result<u64> {
        self.searcher.total_num_tokens(field)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.pages.max(1))
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        // Never more than all: a term found on chunks as well as pages (filters score
        // nothing today) would otherwise make BM25's idf panic.
        Ok(self.searcher.doc_freq(term)?.min(self.pages.max(1)))
    }
}

/// Page entries in the index (deleted ones that are not merged away yet count too, as they
/// do in tantivy's own statistics).
fn page_count(searcher: &Searcher) -> Result<u64> {
    use tantivy::columnar::ColumnIndex;
    let mut pages = 0u64;
    for segment in searcher.segment_readers() {
        let column = segment.fast_fields().u64(schema::PAGE_OF)?;
        pages += match &column.index {
            ColumnIndex::Empty { .. } => 0,
            ColumnIndex::Full | ColumnIndex::Multivalued(_) => column.num_docs() as u64,
            ColumnIndex::Optional(index) => index.num_non_nulls() as u64,
        };
    }
    Ok(pages)
}

/// The open full-text index.
pub struct FullText {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    writer: Option<IndexWriter>,
}

impl FullText {
    /// Opens the index in `dir`, creating it if absent or unreadable (it is derived data).
    pub fn open(dir: &Path) -> Result<FullText> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let (schema, fields) = schema::build();
        let index = match Index::open_in_dir(dir) {
            Ok(index) if index.schema() == schema => index,
            Ok(_) => {
                tracing::warn!(dir = %dir.display(), "full-text schema changed; rebuilding");
                recreate(dir, schema)?
            }
            Err(tantivy::TantivyError::OpenDirectoryError(_))
            | Err(tantivy::TantivyError::OpenReadError(_)) => {
                Index::create_in_dir(dir, schema).or_else(|_| recreate(dir, schema::build().0))?
            }
            Err(err) => {
                tracing::warn!(dir = %dir.display(), %err, "full-text index unreadable; rebuilding");
                recreate(dir, schema)?
            }
        };
        schema::register_tokenizers(&index);
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::OnCommitWithDelay)
            .try_into()?;
        Ok(FullText {
            index,
            reader,
            fields,
            writer: None,
        })
    }

    /// Takes tantivy's writer (the caller already holds the library's write lock).
    pub(crate) fn start_writing(&mut self) -> Result<()> {
        if self.writer.is_none() {
            let writer = self.index.writer_with_num_threads(2, WRITER_MEMORY)?;
            self.writer = Some(writer);
        }
        Ok(())
    }

    /// The outbox sequence the last commit applied (0 for a new index).
    pub fn applied_seq(&self) -> Result<i64> {
        let metas = self.index.load_metas()?;
        Ok(metas
            .payload
            .as_deref()
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
            .and_then(|v| v.get("outbox_seq").and_then(|s| s.as_i64()))
            .unwrap_or(0))
    }

    /// Applies every pending outbox row and commits. Returns the sequence now applied.
    /// Requires [`start_writing`](Self::start_writing).
    pub(crate) fn sync(&mut self, store: &Store) -> Result<i64> {
        let mut applied = self.applied_seq()?;
        if applied < store.outbox_pruned_through()? {
            return self.rebuild(store);
        }
        let target = store.outbox_max_seq()?;
        if applied >= target {
            return Ok(applied);
        }
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::Internal("full-text sync without a writer".into()))?;
        let mut pages = BTreeSet::new();
        loop {
            let entries = store.outbox_after(applied, SYNC_BATCH)?;
            let Some(last) = entries.last() else { break };
            let last_seq = last.seq;
            // Every touched chunk leaves the index, then the ones that still exist in SQLite
            // come back as they are now: the order of upserts and deletes within the batch
            // does not matter, and replaying a batch is idempotent.
            let mut upserts = BTreeSet::new();
            for entry in &entries {
                if entry.upsert {
                    upserts.insert(entry.chunk_id);
                }
                pages.extend(entry.document_id);
            }
            delete_ids(
                writer,
                self.fields.chunk_id,
                entries.iter().map(|e| e.chunk_id.0),
            )?;
            let fields = &self.fields;
            store.fulltext_rows(upserts, |row| {
                pages.insert(row.document_id);
                writer.add_document(fields.document(&row))?;
                Ok(())
            })?;
            applied = last_seq;
        }
        // The same for the touched documents' pages, once per sync: out, then back as they
        // are now (each replaced page lingers in tantivy's statistics until a merge).
        delete_ids(writer, self.fields.page_of, pages.iter().map(|d| d.0))?;
        let fields = &self.fields;
        store.page_rows(pages, |row| {
            writer.add_document(fields.page(&row))?;
            Ok(())
        })?;
        #[cfg(debug_assertions)]
        fail::fail_point!("fulltext_before_commit", |_| {
            Err(Error::Internal("fail point fulltext_before_commit".into()))
        });
        commit_with_seq(writer, applied)?;
        store.outbox_prune(applied)?;
        self.reader.reload()?;
        tracing::info!(seq = applied, "tantivy committed");
        Ok(applied)
    }

    /// Drops everything and re-adds every chunk from SQLite.
    pub(crate) fn rebuild(&mut self, store: &Store) -> Result<i64> {
        tracing::warn!("rebuilding the full-text index from SQLite");
        let target = store.outbox_max_seq()?;
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::Internal("full-text rebuild without a writer".into()))?;
        writer.delete_all_documents()?;
        let fields = &self.fields;
        store.fulltext_rows(store.searchable_chunk_ids()?, |row| {
            writer.add_document(fields.document(&row))?;
            Ok(())
        })?;
        store.page_rows(store.documents_with_chunks()?, |row| {
            writer.add_document(fields.page(&row))?;
            Ok(())
        })?;
        commit_with_seq(writer, target)?;
        store.outbox_prune(target)?;
        self.reader.reload()?;
        Ok(target)
    }

    /// Makes the latest commit visible to this process's searches now.
    pub fn refresh(&self) -> Result<()> {
        Ok(self.reader.reload()?)
    }

    /// How many entries the committed index holds: its chunks and, one per document, its
    /// pages (a size to scale by, read without a scan).
    pub(crate) fn indexed_entries(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Every chunk id in the committed index, for consistency checks.
    pub fn chunk_ids(&self) -> Result<BTreeSet<ChunkId>> {
        let searcher = self.reader.searcher();
        let mut ids = BTreeSet::new();
        for segment in searcher.segment_readers() {
            let column = segment.fast_fields().u64(schema::CHUNK_ID)?;
            let alive = segment.alive_bitset();
            for doc in 0..segment.max_doc() {
                if alive.is_some_and(|a| !a.is_alive(doc)) {
                    continue;
                }
                if let Some(id) = column.first(doc) {
                    ids.insert(ChunkId(id as i64));
                }
            }
        }
        Ok(ids)
    }

    /// BM25 search over the given languages' fields, optionally within some collections.
    pub fn search(&self, query: &FulltextQuery<'_>) -> Result<FulltextResults> {
        let full_query = self.parse(query)?;
        let searcher = self.reader.searcher();
        let top = searcher.search(
            &*full_query,
            &TopDocs::with_limit(query.limit.max(1)).order_by_score(),
        )?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let id = |field| {
                doc.get_first(field)
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| Error::Internal("full-text chunk without its ids".into()))
            };
            hits.push(FulltextHit {
                chunk_id: ChunkId(id(self.fields.chunk_id)? as i64),
                document_id: DocumentId(id(self.fields.document_id)? as i64),
                score,
            });
        }
        Ok(FulltextResults {
            hits,
            searcher,
            query: full_query,
            fields: self.fields.clone(),
            generators: HashMap::new(),
        })
    }

    /// The `query.limit` documents whose whole text matches `query` best (BM25 over each
    /// document's page entry, the query's words as a bag: see [`bag_of_words`]), best first.
    pub fn search_pages(&self, query: &FulltextQuery<'_>) -> Result<Vec<(DocumentId, f32)>> {
        let words = bag_of_words(query.text);
        let bag = FulltextQuery {
            text: &words,
            ..*query
        };
        let page_query = self.parse_fields(&bag, |f| vec![(f.page, 1.0)])?;
        let searcher = self.reader.searcher();
        let statistics = PageStatistics {
            searcher: &searcher,
            pages: page_count(&searcher)?,
        };
        let top = searcher.search_with_statistics_provider(
            &*page_query,
            &TopDocs::with_limit(query.limit.max(1)).order_by_score(),
            &statistics,
        )?;
        let mut pages = Vec::with_capacity(top.len());
        for (score, address) in top {
            if let Some(id) = fast_id(&searcher, address, schema::PAGE_OF)? {
                pages.push((DocumentId(id as i64), score));
            }
        }
        Ok(pages)
    }

    /// The best chunk of each of `documents` for `query`, with its score; a document none of
    /// whose chunks matches is left out.
    pub fn best_chunks_of(
        &self,
        query: &FulltextQuery<'_>,
        documents: &[DocumentId],
    ) -> Result<Vec<FulltextHit>> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let ids = documents.iter().map(|d| d.0 as u64);
        let scoped = BooleanQuery::new(vec![
            (Occur::Must, self.parse(query)?),
            (Occur::Must, any_of(self.fields.document_id, ids)),
        ]);
        let searcher = self.reader.searcher();
        // Enough for each document's best to be among them, most of the time; a document
        // whose best is missed keeps its next best.
        let limit = documents.len() * 8;
        let top = searcher.search(&scoped, &TopDocs::with_limit(limit).order_by_score())?;
        let mut best: HashMap<DocumentId, FulltextHit> = HashMap::new();
        for (score, address) in top {
            let chunk = fast_id(&searcher, address, schema::CHUNK_ID)?;
            let document = fast_id(&searcher, address, schema::DOCUMENT_ID)?;
            if let (Some(chunk), Some(document)) = (chunk, document) {
                let document_id = DocumentId(document as i64);
                best.entry(document_id).or_insert(FulltextHit {
                    chunk_id: ChunkId(chunk as i64),
                    document_id,
                    score,
                });
            }
        }
        Ok(best.into_values().collect())
    }

    /// How many chunks match `query`, and the best `query.limit` of them: a count that reads
    /// no documents, and ids from the fast field, so a common term costs no stored-document
    /// reads.
    pub(crate) fn matches(&self, query: &FulltextQuery<'_>) -> Result<(usize, Vec<ChunkId>)> {
        let full_query = self.parse(query)?;
        let searcher = self.reader.searcher();
        let (count, top) = searcher.search(
            &*full_query,
            &(
                Count,
                TopDocs::with_limit(query.limit.max(1)).order_by_score(),
            ),
        )?;
        let mut ids = Vec::with_capacity(top.len());
        for (_, address) in top {
            let id = fast_id(&searcher, address, schema::CHUNK_ID)?
                .ok_or_else(|| Error::Internal("full-text document without chunk_id".into()))?;
            ids.push(ChunkId(id as i64));
        }
        Ok((count, ids))
    }

    /// The query over the given languages' fields (title, heading and body, boosted in that
    /// order), within the given collections. Checked first: see [`check_query`].
    fn parse(&self, query: &FulltextQuery<'_>) -> Result<Box<dyn Query>> {
        self.parse_fields(query, |f| {
            vec![(f.title, 3.0), (f.heading, 2.0), (f.body, 1.0)]
        })
    }

    /// The query over the fields `pick` chooses (with their boosts) in each of the query's
    /// languages, within its collections.
    fn parse_fields(
        &self,
        query: &FulltextQuery<'_>,
        pick: impl Fn(&schema::LanguageFields) -> Vec<(tantivy::schema::Field, f32)>,
    ) -> Result<Box<dyn Query>> {
        check_query(query.text)?;
        let languages = if query.languages.is_empty() {
            vec![schema::DEFAULT_LANGUAGE.to_string()]
        } else {
            query.languages.to_vec()
        };
        let mut fields = Vec::new();
        let mut parser_boosts = Vec::new();
        for lang in &languages {
            for (field, boost) in pick(&self.fields.language(lang)?) {
                fields.push(field);
                parser_boosts.push((field, boost));
            }
        }
        let mut parser = QueryParser::for_index(&self.index, fields);
        for (field, boost) in parser_boosts {
            parser.set_field_boost(field, boost);
        }
        // User input is free text: a stray quote or colon must not fail the search.
        let (text_query, _errors) = parser.parse_query_lenient(query.text);
        let full_query: Box<dyn Query> = if query.collection_ids.is_empty() {
            text_query
        } else {
            let ids = query.collection_ids.iter().map(|id| id.0 as u64);
            Box::new(BooleanQuery::new(vec![
                (Occur::Must, text_query),
                (Occur::Must, any_of(self.fields.collection_id, ids)),
            ]))
        };
        Ok(full_query)
    }

    /// Releases the writer (and tantivy's lock file).
    pub(crate) fn stop_writing(&mut self) {
        self.writer = None;
    }
}

/// What to search for.
#[derive(Debug, Clone)]
pub struct FulltextQuery<'a> {
    /// Free text; `"quoted phrases"`, `+must`, `-not` and `field:` syntax work.
    pub text: &'a str,
    /// Stemming languages of the collections searched.
    pub languages: &'a [String],
    /// Restrict to these collections (empty: all).
    pub collection_ids: &'a [CollectionId],
    /// How many hits.
    pub limit: usize,
}

/// The longest query text accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 10_000;
/// The deepest nesting of parentheses accepted.
pub const MAX_QUERY_NESTING: usize = 32;
/// The most `AND`, `OR` and `NOT` operators accepted.
pub const MAX_QUERY_OPERATORS: usize = 64;

/// Refuses query text the parser could not take safely. Tantivy's query parser descends
/// recursively: about 2,900 `(` (or 7,000 `NOT `) overflowed the main thread's stack and
/// aborted the process, and the desktop's worker threads have smaller stacks. Every search,
/// pipeline run, tool test and `ctx.search` parses through `FullText::parse`, which calls
/// this first.
pub(crate) fn check_query(text: &str) -> Result<()> {
    let refuse = |reason: String| Err(Error::InvalidQuery { reason });
    let chars = text.chars().count();
    if chars > MAX_QUERY_CHARS {
        return refuse(format!("{chars} characters; the most is {MAX_QUERY_CHARS}"));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_QUERY_NESTING {
        return refuse(format!(
            "parentheses nested {deepest} deep; the most is {MAX_QUERY_NESTING}"
        ));
    }
    let operators = text
        .split_whitespace()
        .filter(|w| matches!(*w, "AND" | "OR" | "NOT" | "&&" | "||"))
        .count();
    if operators > MAX_QUERY_OPERATORS {
        return refuse(format!(
            "{operators} AND/OR/NOT operators; the most is {MAX_QUERY_OPERATORS}"
        ));
    }
    Ok(())
}

/// Hits plus what is needed to highlight them.
pub struct FulltextResults {
    /// Best first.
    pub hits: Vec<FulltextHit>,
    searcher: Searcher,
    query: Box<dyn Query>,
    fields: Fields,
    generators: HashMap<String, SnippetGenerator>,
}

impl FulltextResults {
    /// A highlighted excerpt of `text` (a chunk of a collection in `language`).
    pub fn snippet(&mut self, language: &str, text: &str, max_chars: usize) -> Result<Snippet> {
        if !self.generators.contains_key(language) {
            let field = self.fields.language(language)?.body;
            let mut generator = SnippetGenerator::create(&self.searcher, &*self.query, field)?;
            generator.set_max_num_chars(max_chars);
            self.generators.insert(language.to_string(), generator);
        }
        let generator = &self.generators[language];
        let snippet = generator.snippet(text);
        if snippet.is_empty() {
            // No body term matched (a title-only hit): show the chunk's opening instead.
            let end = text
                .char_indices()
                .nth(max_chars)
                .map(|(i, _)| i)
                .unwrap_or(text.len());
            return Ok(Snippet {
                text: text[..end].to_string(),
                highlights: Vec::new(),
            });
        }
        Ok(Snippet {
            text: snippet.fragment().to_string(),
            highlights: snippet
                .highlighted()
                .iter()
                .map(|r| (r.start, r.end))
                .collect(),
        })
    }
}

/// Deletes the documents whose `field` holds one of `ids`, as one operation. A delete per id
/// (`delete_term`) keeps a scorer's weight of about 1 KB in tantivy's queue until the commit:
/// the sync that marks a whole tree's 131,000 repeated chunks held 150 MB that way.
fn delete_ids(
    writer: &IndexWriter,
    field: tantivy::schema::Field,
    ids: impl Iterator<Item = i64>,
) -> Result<()> {
    let terms: Vec<Term> = ids
        .map(|id| Term::from_field_u64(field, id as u64))
        .collect();
    if !terms.is_empty() {
        writer.delete_query(Box::new(TermSetQuery::new(terms)))?;
    }
    Ok(())
}

fn commit_with_seq(writer: &mut IndexWriter, seq: i64) -> Result<()> {
    let mut prepared = writer.prepare_commit()?;
    prepared.set_payload(&serde_json::json!({ "outbox_seq": seq }).to_string());
    prepared.commit()?;
    Ok(())
}

fn recreate(dir: &Path, schema: tantivy::schema::Schema) -> Result<Index> {
    std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    Ok(Index::create_in_dir(dir, schema)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> crate::store::NewChunk {
        crate::store::NewChunk {
            text: text.into(),
            heading_path: String::new(),
            location: Default::default(),
            token_count: 4,
            reader_span: None,
        }
    }

    /// "tide" over every chunk of `collections`.
    fn tide_in(collections: &[CollectionId]) -> FulltextQuery<'_> {
        FulltextQuery {
            text: "tide",
            languages: &[],
            collection_ids: collections,
            limit: 100,
        }
    }

    fn reason(text: &str) -> String {
        match check_query(text) {
            Err(Error::InvalidQuery { reason }) => reason,
            other => panic!("{text:.40}: {other:?}"),
        }
    }

    #[test]
    fn a_page_s_best_chunk_keeps_its_own_score_whatever_the_filters() {
        use crate::store::test_support::{collection_with_source, temp_store, write_document};
        use crate::store::NewChunk;
        let (dir, mut store) = temp_store();
        let source = collection_with_source(&mut store, "docs", "internal", "m", dir.path());
        // A short page and a long one: their id terms have very different idf.
        let short = write_document(
            &store,
            &source,
            &dir.path().join("a.md"),
            "A",
            10,
            &[chunk("tide tables")],
        );
        let many: Vec<NewChunk> = (0..20).map(|i| chunk(&format!("tide note {i}"))).collect();
        let long = write_document(&store, &source, &dir.path().join("b.md"), "B", 99, &many);
        let mut fulltext = FullText::open(&dir.path().join("fulltext")).unwrap();
        fulltext.start_writing().unwrap();
        fulltext.sync(&store).unwrap();
        let collections = [store.collections().unwrap()[0].id];
        let query = tide_in(&collections);
        let plain: HashMap<ChunkId, f32> = fulltext
            .search(&query)
            .unwrap()
            .hits
            .iter()
            .map(|h| (h.chunk_id, h.score))
            .collect();
        let documents = [short[0].document_id, long[0].document_id];
        let best = fulltext.best_chunks_of(&query, &documents).unwrap();
        assert_eq!(best.len(), 2);
        for hit in best {
            // The document filter adds nothing: the score is the chunk's BM25, as searched.
            assert_eq!(hit.score, plain[&hit.chunk_id], "{hit:?}");
        }
    }

    #[test]
    fn a_rewritten_document_is_searched_once_as_it_is_now() {
        use crate::store::test_support::{collection_with_source, temp_store, write_document};
        let (dir, mut store) = temp_store();
        let source = collection_with_source(&mut store, "docs", "internal", "m", dir.path());
        let chunks = |words: &[&str]| -> Vec<_> {
            words.iter().map(|w| chunk(&format!("tide {w}"))).collect()
        };
        let (a, b) = (dir.path().join("a.md"), dir.path().join("b.md"));
        let mut fulltext = FullText::open(&dir.path().join("fulltext")).unwrap();
        fulltext.start_writing().unwrap();
        write_document(&store, &source, &a, "A1", 10, &chunks(&["one", "two"]));
        fulltext.sync(&store).unwrap();
        // Rewritten after a commit, and written twice between two commits: the chunks
        // deleted in one batch are the ones added before it, in this sync or an earlier one.
        let now_a = write_document(&store, &source, &a, "A2", 11, &chunks(&["three"]));
        write_document(&store, &source, &b, "B1", 10, &chunks(&["four", "five"]));
        let now_b = write_document(&store, &source, &b, "B2", 12, &chunks(&["six"]));
        fulltext.sync(&store).unwrap();
        let collections = [store.collections().unwrap()[0].id];
        let query = tide_in(&collections);
        let mut found: Vec<ChunkId> = fulltext
            .search(&query)
            .unwrap()
            .hits
            .iter()
            .map(|h| h.chunk_id)
            .collect();
        found.sort();
        let mut expected: Vec<ChunkId> = now_a.iter().chain(&now_b).map(|c| c.id).collect();
        expected.sort();
        assert_eq!(found, expected);
        let pages = fulltext.search_pages(&query).unwrap();
        assert_eq!(pages.len(), 2, "one page per document: {pages:?}");
    }

    #[test]
    fn pages_are_searched_by_the_query_s_words_each_on_its_own() {
        assert_eq!(
            bag_of_words("where is parse_header_v235 defined"),
            "where is parse header v235 defined"
        );
        assert_eq!(
            bag_of_words("\"exact phrase\" +std::fs -title:draft"),
            "exact phrase +std +fs -title -draft"
        );
        assert_eq!(bag_of_words("  ::  "), "");
    }

    #[test]
    fn queries_within_the_limits_pass() {
        for ok in [
            "lighthouse keeper",
            "\"exact phrase\" +must -not",
            "(a OR (b AND c)) NOT d",
            &"(".repeat(MAX_QUERY_NESTING),
            &"x ".repeat(MAX_QUERY_CHARS / 2),
        ] {
            check_query(ok).unwrap();
        }
    }

    #[test]
    fn each_limit_is_named_with_the_query_s_figure() {
        assert_eq!(
            reason(&"(".repeat(33)),
            "parentheses nested 33 deep; the most is 32"
        );
        assert_eq!(
            reason(&"NOT ".repeat(65)),
            "65 AND/OR/NOT operators; the most is 64"
        );
        assert_eq!(
            reason(&"é".repeat(10_001)),
            "10001 characters; the most is 10000"
        );
    }
}
