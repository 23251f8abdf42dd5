//! Stage `identifiers`: exact identifiers first. A query term that looks like an identifier
//! (letters with digits, `snake_case`, `camelCase`, `a::b`, `#123`) and is rare in the index
//! puts the chunks that contain it exactly ahead of every other candidate in hybrid search.
//! Without it, the vector stream scores near-identical neighbours alike and fusion lets them
//! outrank the one chunk that holds `E0502` or `XR-200`, which is what the user typed it for.
//!
//! A term is rare when few chunks contain it (at most [`rare_limit`]): a code that appears
//! everywhere (`v2` in a changelog) says nothing about which chunk is wanted, and ranking its
//! matches first would only bury better answers.

use std::collections::HashMap;
use std::time::Instant;

use super::fusion::Candidate;
use super::plan::Searched;
use super::{elapsed_us, SearchContext, StageTrace};
use crate::error::Result;
use crate::fulltext::FulltextQuery;
use crate::ids::ChunkId;

/// The identifier-like terms of a free-text query, each once, as typed (without the
/// punctuation around them). Terms the query excludes (`-E0502`) are not among them.
pub(crate) fn identifier_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split_whitespace() {
        if word.starts_with('-') {
            continue; // excluded, or a flag: never a term to put first
        }
        let term = word
            .trim_start_matches(['+', '"', '\'', '(', '[', '{', '`', '<'])
            .trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_');
        if is_identifier(term) && !terms.iter().any(|t| t.eq_ignore_ascii_case(term)) {
            terms.push(term.to_string());
        }
    }
    terms
}

/// `E0502`, `XR-200`, `m214x`, `parse_header`, `parseHeader`, `std::fs`, `#4821`; not plain
/// words, plain numbers or short tokens such as `3D`.
fn is_identifier(term: &str) -> bool {
    let body = term.strip_prefix('#').unwrap_or(term);
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/');
    let starts_well = body.starts_with(|c: char| c.is_ascii_alphanumeric());
    if !starts_well || !body.chars().all(allowed) {
        return false;
    }
    let letters = body.chars().filter(|c| c.is_ascii_alphabetic()).count();
    let digits = body.chars().filter(|c| c.is_ascii_digit()).count();
    if term.starts_with('#') {
        return digits > 0; // an issue or ticket number
    }
    let mixed = letters > 0 && digits > 0 && body.len() >= 3;
    let snake = letters > 0 && body.trim_matches('_').contains('_');
    let path = body.contains("::");
    let camel = body
        .as_bytes()
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    mixed || snake || path || camel
}

/// The most chunks an identifier may match and still count as rare: 2% of the index, and
/// never fewer than 10.
pub(crate) fn rare_limit(indexed_chunks: u64) -> usize {
    (indexed_chunks / 50).max(10) as usize
}

/// Stage `identifiers`: finds the chunks that contain each rare identifier of `query`
/// exactly (the best `pool` of them by BM25, as the lexical stage takes), adds those the
/// streams missed to `candidates`, and records on each candidate how many of them it
/// contains; the ranking then puts more matches first.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    searched: &Searched<'_>,
    query: &str,
    pool: usize,
    candidates: &mut HashMap<ChunkId, Candidate>,
) -> Result<Option<StageTrace>> {
    let terms = identifier_terms(query);
    if terms.is_empty() {
        return Ok(None);
    }
    let t = Instant::now();
    let limit = rare_limit(ctx.fulltext.indexed_entries());
    let mut notes = Vec::new();
    let mut matches: HashMap<ChunkId, u32> = HashMap::new();
    for term in &terms {
        let phrase = format!("\"{term}\"");
        let (n, found) = ctx.fulltext.matches(&FulltextQuery {
            text: &phrase,
            languages: &searched.languages,
            collection_ids: &searched.ids,
            limit: pool,
        })?;
        if n == 0 {
            notes.push(format!("{term}: no exact match"));
        } else if n > limit {
            notes.push(format!(
                "{term}: {n} matches, over {limit}: too common to put first"
            ));
        } else {
            notes.push(format!("{term}: {n} exact match(es), first"));
            for id in found {
                *matches.entry(id).or_default() += 1;
            }
        }
    }
    for (id, n) in &matches {
        candidates.entry(*id).or_default().scores.identifier_matches = Some(*n);
    }
    Ok(Some(StageTrace {
        stage: "identifiers",
        variant: None,
        candidates: candidates.len(),
        took_us: elapsed_us(t),
        detail: notes.join("; "),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_ids_and_names_are_identifiers() {
        let terms = identifier_terms(
            "why does E0502 (XR-200) fail in parse_header, parseHeader, std::fs and #4821? m214x",
        );
        assert_eq!(
            terms,
            [
                "E0502",
                "XR-200",
                "parse_header",
                "parseHeader",
                "std::fs",
                "#4821",
                "m214x"
            ]
        );
    }

    #[test]
    fn words_numbers_short_tokens_and_exclusions_are_not() {
        let terms =
            identifier_terms("the 1984 study of 3D flow at mach -E0502 don't \"boundary layer\"");
        assert!(terms.is_empty(), "{terms:?}");
    }

    #[test]
    fn each_identifier_once_whatever_its_case() {
        assert_eq!(identifier_terms("e0502 E0502 +E0502"), ["e0502"]);
    }

    #[test]
    fn rare_means_two_percent_and_at_least_ten() {
        assert_eq!(rare_limit(0), 10);
        assert_eq!(rare_limit(1_500), 30);
        assert_eq!(rare_limit(100_000), 2_000);
    }
}
