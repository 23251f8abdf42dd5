//! A stemming filter with a per-tokenizer cache of word → stem.
//!
//! Word frequencies are Zipfian, so most tokens were stemmed moments ago; the Snowball
//! algorithm was about a sixth of the indexing CPU time before this cache. Stems come from
//! tantivy's own [`Stemmer`], so cached and uncached analysis agree exactly (a test checks it).

use std::collections::HashMap;

use tantivy::tokenizer::{
    Language, RawTokenizer, Stemmer, TextAnalyzer, Token, TokenFilter, TokenStream, Tokenizer,
};

/// Most cached words per tokenizer before the cache starts over (bounds memory to a few MB).
const CACHE_LIMIT: usize = 100_000;

/// Stems tokens (expected lower-cased), remembering each word's stem.
#[derive(Clone)]
pub(crate) struct CachedStemmer {
    language: Language,
}

impl CachedStemmer {
    pub(crate) fn new(language: Language) -> Self {
        CachedStemmer { language }
    }
}

impl TokenFilter for CachedStemmer {
    type Tokenizer<T: Tokenizer> = CachedStemmerFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> CachedStemmerFilter<T> {
        CachedStemmerFilter {
            inner,
            stemmer: TextAnalyzer::builder(RawTokenizer::default())
                .filter(Stemmer::new(self.language))
                .build(),
            cache: HashMap::new(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct CachedStemmerFilter<T> {
    inner: T,
    stemmer: TextAnalyzer,
    cache: HashMap<String, String>,
}

impl<T: Tokenizer> Tokenizer for CachedStemmerFilter<T> {
    type TokenStream<'a> = CachedStemmerStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        if self.cache.len() > CACHE_LIMIT {
            self.cache.clear();
        }
        CachedStemmerStream {
            tail: self.inner.token_stream(text),
            stemmer: &mut self.stemmer,
            cache: &mut self.cache,
        }
    }
}

pub(crate) struct CachedStemmerStream<'a, S> {
    tail: S,
    stemmer: &'a mut TextAnalyzer,
    cache: &'a mut HashMap<String, String>,
}

impl<S: TokenStream> TokenStream for CachedStemmerStream<'_, S> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token_mut();
        match self.cache.get(&token.text) {
            Some(stem) => {
                token.text.clear();
                token.text.push_str(stem);
            }
            None => {
                let stem = {
                    let mut stream = self.stemmer.token_stream(&token.text);
                    if stream.advance() {
                        stream.token().text.clone()
                    } else {
                        token.text.clone()
                    }
                };
                self.cache
                    .insert(std::mem::replace(&mut token.text, stem.clone()), stem);
            }
        }
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::tokenizer::{LowerCaser, SimpleTokenizer};

    fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    #[test]
    fn cached_stems_equal_tantivys() {
        let text = "Running runners ran; the generalizations generalize. Running again, \
                    running twice: caches cached caching CACHES";
        for language in [Language::English, Language::French, Language::German] {
            let mut plain = TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(LowerCaser)
                .filter(Stemmer::new(language))
                .build();
            let mut cached = TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(LowerCaser)
                .filter(CachedStemmer::new(language))
                .build();
            let expected = tokens(&mut plain, text);
            // Twice: the second pass is served from the cache.
            assert_eq!(tokens(&mut cached, text), expected);
            assert_eq!(tokens(&mut cached, text), expected);
        }
    }
}
