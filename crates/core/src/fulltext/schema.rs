//! Field layout and analyzers.

use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer,
};
use tantivy::TantivyDocument;

use crate::error::{Error, Result};
use crate::store::FulltextRow;

pub(crate) const CHUNK_ID: &str = "chunk_id";
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
}

#[derive(Debug, Clone)]
pub(crate) struct Fields {
    pub chunk_id: Field,
    pub document_id: Field,
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

    pub fn document(&self, row: &FulltextRow) -> TantivyDocument {
        let lang = self
            .language(&row.language)
            .or_else(|_| self.language(DEFAULT_LANGUAGE))
            .expect("the default language is always in the schema");
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.chunk_id, row.chunk_id.0 as u64);
        doc.add_u64(self.document_id, row.document_id.0 as u64);
        doc.add_u64(self.collection_id, row.collection_id.0 as u64);
        doc.add_text(lang.title, &row.title);
        doc.add_text(lang.heading, &row.heading_path);
        doc.add_text(lang.body, &row.text);
        doc
    }
}

fn tokenizer_name(language: &str) -> String {
    format!("quarry_{language}")
}

pub(crate) fn build() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let id_options = NumericOptions::default()
        .set_indexed()
        .set_fast()
        .set_stored();
    let chunk_id = builder.add_u64_field(CHUNK_ID, id_options.clone());
    let document_id = builder.add_u64_field("document_id", id_options.clone());
    let collection_id = builder.add_u64_field("collection_id", id_options);
    let mut by_language = Vec::new();
    for name in LANGUAGE_NAMES {
        let indexing = TextFieldIndexing::default()
            .set_tokenizer(&tokenizer_name(name))
            .set_index_option(IndexRecordOption::WithFreqsAndPositions);
        // Text is not stored: SQLite has it, and snippets are cut from SQLite's copy.
        let options = TextOptions::default().set_indexing_options(indexing);
        by_language.push(LanguageFields {
            title: builder.add_text_field(&format!("title_{name}"), options.clone()),
            heading: builder.add_text_field(&format!("heading_{name}"), options.clone()),
            body: builder.add_text_field(&format!("body_{name}"), options),
        });
    }
    (
        builder.build(),
        Fields {
            chunk_id,
            document_id,
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
