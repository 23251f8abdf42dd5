//! Field layout and analyzers.

use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer,
};
use tantivy::TantivyDocument;

use crate::error::{Error, Result};
use crate::store::{FulltextRow, PageRow};

pub(crate) const CHUNK_ID: &str = "chunk_id";
pub(crate) const DOCUMENT_ID: &str = "document_id";
pub(crate) const PAGE_OF: &str = "page_of";
pub(crate) const DEFAULT_LANGUAGE: &str = "english";

/// Stemming languages a collection can use.
pub const LANGUAGE_NAMES: &[&str] = &[
    "arabic",
    "danish",
    "dutch",
    "english",
    "finnish",
    "french",
    "german",
    "greek",
    "hungarian",
    "italian",
    "norwegian",
    "portuguese",
    "romanian",
    "russian",
    "spanish",
    "swedish",
    "tamil",
    "turkish",
];

/// The error for a language without a stemmer, listing the ones there are.
fn unknown_language(name: &str) -> Error {
    Error::UnknownLanguage {
        language: name.to_string(),
        known: LANGUAGE_NAMES.join(", "),
    }
}

const LANGUAGES: &[Language] = &[
    Language::Arabic,
    Language::Danish,
    Language::Dutch,
    Language::English,
    Language::Finnish,
    Language::French,
    Language::German,
    Language::Greek,
    Language::Hungarian,
    Language::Italian,
    Language::Norwegian,
    Language::Portuguese,
    Language::Romanian,
    Language::Russian,
    Language::Spanish,
    Language::Swedish,
    Language::Tamil,
    Language::Turkish,
];

/// Validates a language name.
pub(crate) fn language_by_name(name: &str) -> Result<&'static str> {
    LANGUAGE_NAMES
        .iter()
        .find(|n| **n == name)
        .copied()
        .ok_or_else(|| unknown_language(name))
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct LanguageFields {
    pub title: Field,
    pub heading: Field,
    pub body: Field,
    /// A whole document (title and every chunk), on its page entry only.
    pub page: Field,
}

#[derive(Debug, Clone)]
pub(crate) struct Fields {
    pub chunk_id: Field,
    pub document_id: Field,
    /// Set on a document's page entry (and nothing else), so pages and chunks never mix.
    pub page_of: Field,
    pub collection_id: Field,
    by_language: Vec<LanguageFields>,
}

impl Fields {
    pub fn language(&self, name: &str) -> Result<LanguageFields> {
        let index = LANGUAGE_NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| unknown_language(name))?;
        Ok(self.by_language[index])
    }

    /// A collection's language's fields (an unknown name: the default language's).
    fn language_or_default(&self, name: &str) -> LanguageFields {
        self.language(name)
            .or_else(|_| self.language(DEFAULT_LANGUAGE))
            .expect("the default language is always in the schema")
    }

    pub fn document(&self, row: &FulltextRow) -> TantivyDocument {
        let lang = self.language_or_default(&row.language);
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.chunk_id, row.chunk_id.0 as u64);
        doc.add_u64(self.document_id, row.document_id.0 as u64);
        doc.add_u64(self.collection_id, row.collection_id.0 as u64);
        doc.add_text(lang.title, &row.title);
        doc.add_text(lang.heading, &row.heading_path);
        doc.add_text(lang.body, &row.text);
        doc
    }

    /// A document's page entry: its id, collection and whole text in its language's field.
    pub fn page(&self, row: &PageRow) -> TantivyDocument {
        let lang = self.language_or_default(&row.language);
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.page_of, row.document_id.0 as u64);
        doc.add_u64(self.collection_id, row.collection_id.0 as u64);
        doc.add_text(lang.page, &row.text);
        doc
    }
}

pub(crate) fn tokenizer_name(language: &str) -> String {
    format!("quarry_{language}")
}

pub(crate) fn build() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let id_options = NumericOptions::default()
        .set_indexed()
        .set_fast()
        .set_stored();
    let chunk_id = builder.add_u64_field(CHUNK_ID, id_options.clone());
    let document_id = builder.add_u64_field(DOCUMENT_ID, id_options.clone());
    let collection_id = builder.add_u64_field("collection_id", id_options.clone());
    let page_of = builder.add_u64_field(PAGE_OF, id_options);
    let mut by_language = Vec::new();
    for name in LANGUAGE_NAMES {
        let indexing = TextFieldIndexing::default()
            .set_tokenizer(&tokenizer_name(name))
            .set_index_option(IndexRecordOption::WithFreqsAndPositions);
        // Text is not stored: SQLite has it, and snippets are cut from SQLite's copy.
        let options = TextOptions::default().set_indexing_options(indexing);
        // Whole pages rank by term frequencies; phrases are the chunks' business, so the page
        // field keeps no positions (half its size).
        let page_options = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(&tokenizer_name(name))
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        by_language.push(LanguageFields {
            title: builder.add_text_field(&format!("title_{name}"), options.clone()),
            heading: builder.add_text_field(&format!("heading_{name}"), options.clone()),
            body: builder.add_text_field(&format!("body_{name}"), options.clone()),
            page: builder.add_text_field(&format!("page_{name}"), page_options),
        });
    }
    (
        builder.build(),
        Fields {
            chunk_id,
            document_id,
            page_of,
            collection_id,
            by_language,
        },
    )
}

/// Analyzers are not persisted by tantivy: register them on every open. No stop words: they
/// hurt technical text whose keywords (`if`, `for`, `where`) are content.
pub(crate) fn register_tokenizers(index: &tantivy::Index) {
    for (name, language) in LANGUAGE_NAMES.iter().zip(LANGUAGES) {
        let analyzer = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .filter(super::stem::CachedStemmer::new(*language))
            .build();
        index.tokenizers().register(&tokenizer_name(name), analyzer);
    }
}
