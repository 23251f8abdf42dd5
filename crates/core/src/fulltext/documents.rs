//! Whole-document BM25 in memory: the baseline a chunk index's page ranking is measured
//! against (`quarry eval --baseline`). One tantivy document per document, its title and all
//! its text in one field, analysed as the library analyses English.

use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED, STRING,
};
use tantivy::{doc, Index, IndexReader, TantivyDocument};

use super::schema;
use crate::error::{Error, Result};

/// A searchable set of whole documents.
pub struct DocumentBm25 {
    index: Index,
    reader: IndexReader,
    id: Field,
    text: Field,
}

impl DocumentBm25 {
    /// Indexes `(id, text)` per document.
    pub fn build(documents: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let mut builder = Schema::builder();
        let id = builder.add_text_field("id", STRING | STORED);
        let indexing = TextFieldIndexing::default()
            .set_tokenizer(&schema::tokenizer_name(schema::DEFAULT_LANGUAGE))
            .set_index_option(IndexRecordOption::WithFreqsAndPositions);
        let text = builder.add_text_field(
            "text",
            TextOptions::default().set_indexing_options(indexing),
        );
        let index = Index::create_in_ram(builder.build());
        schema::register_tokenizers(&index);
        let mut writer = index.writer_with_num_threads(1, 64 << 20)?;
        for (doc_id, body) in documents {
            writer.add_document(doc!(id => doc_id, text => body))?;
        }
        writer.commit()?;
        let reader = index.reader()?;
        Ok(DocumentBm25 {
            index,
            reader,
            id,
            text,
        })
    }

    /// The ids of the `limit` best documents for free text, best first.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<String>> {
        let parser = QueryParser::for_index(&self.index, vec![self.text]);
        let (parsed, _errors) = parser.parse_query_lenient(query);
        let searcher = self.reader.searcher();
        let top = searcher.search(&parsed, &TopDocs::with_limit(limit.max(1)).order_by_score())?;
        top.into_iter()
            .map(|(_, address)| {
                let doc: TantivyDocument = searcher.doc(address)?;
                doc.get_first(self.id)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                    .ok_or_else(|| Error::Internal("whole-document index entry without id".into()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_documents_rank_by_everything_they_say() {
        let index = DocumentBm25::build([
            (
                "tides".to_string(),
                "The tide turns. The harbour fills at high tide. Tide tables.".to_string(),
            ),
            (
                "knots".to_string(),
                "A bowline is a knot; a tide knot is not.".to_string(),
            ),
            ("sails".to_string(), "Reefing a sail in wind.".to_string()),
        ])
        .unwrap();
        assert_eq!(
            index.search("tides harbour", 10).unwrap(),
            ["tides", "knots"]
        );
        assert_eq!(index.search("reefing", 1).unwrap(), ["sails"]);
        assert!(index.search("okapi", 10).unwrap().is_empty());
    }
}
