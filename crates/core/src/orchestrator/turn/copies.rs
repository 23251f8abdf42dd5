//! A sentence copied from a passage with one of its names changed. A small model copies the
//! sentence that answers ("The quote crate turns syn data structures back into Rust code.")
//! and puts another name from what it was shown in the answer's place ("The proc_macro crate
//! turns …"): every word is in the passages, so the word and token checks pass it. Aligned
//! word by word with the sentence it copies, the swap shows: a name of the answer's where the
//! source has another word, the rest the same.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use super::grounding::{number_word, word_number};
use crate::orchestrator::sentences::{exact_tokens, is_stopword};

/// Share of the answer sentence's words, in order, a passage sentence must hold for the answer
/// to count as copied from it …
const OF_ANSWER: f64 = 0.6;
/// … or share of the passage sentence's own words the answer must hold in order.
const OF_SOURCE: f64 = 0.8;
/// Fewer words in common than this is no copy, whatever the shares.
const MIN_COMMON: usize = 5;
/// The longest run of words a swap spans, in the answer and in its source: more is a
/// rewording, not a swap.
const MAX_SWAPPED: usize = 2;

/// The sentence an answer copied with a name changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Copied {
    /// The passage it is in.
    pub n: i64,
    /// The sentence as the passage has it.
    pub sentence: String,
    /// The answer's name, which the sentence does not hold.
    pub ours: String,
    /// What the sentence has in its place.
    pub theirs: String,
}

/// A sentence's words in order, as written (case kept: whether a word is a name depends on
/// it) and lowercased to compare.
fn words(text: &str) -> Vec<(String, String)> {
    static WORD: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[A-Za-z0-9_$#&*<>]+(?:(?:::|[.,:'’/-])[A-Za-z0-9_$#<>]+)*")
            .expect("a valid regex")
    });
    // Emphasis (`**JoinHandle<T>**`) is no part of a word.
    WORD.find_iter(text)
        .map(|m| m.as_str().trim_matches('*'))
        .filter(|w| !w.is_empty())
        .map(|w| (w.to_string(), w.to_lowercase()))
        .collect()
}

/// Whether `word` names something: an exact token (digits, `_`, `::`, inner capitals, all
/// capitals) or a hyphenated term (`opt-level`).
fn is_name(word: &str) -> bool {
    !exact_tokens(word).is_empty() || word.contains('-')
}

/// The pairs of positions where `a` and `b` hold the same word, in order: their longest
/// common subsequence.
fn aligned(a: &[(String, String)], b: &[(String, String)]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut longest = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            longest[i][j] = if a[i].1 == b[j].1 {
                longest[i + 1][j + 1] + 1
            } else {
                longest[i + 1][j].max(longest[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i].1 == b[j].1 {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if longest[i + 1][j] >= longest[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// The passage sentence `answer` copies with one of its names swapped, if any: among
/// `sentences` (`(n, sentence)`), one that holds most of the answer's words in order, where
/// the answer has, between two words in common, a name of at most two words that neither the
/// source nor the question holds, and the source a word of its own that the answer lacks (the
/// gaps before the first word in common and after the last are not looked at: a sentence may
/// open and close in its own words). The question's words never count as the answer's own: a
/// name the question gave may stand anywhere. No swap is found when a sentence that holds the
/// answer's name aligns with it at least as well: the answer then copies that sentence.
pub(super) fn swapped_name(
    answer: &str,
    question: &str,
    sentences: &[(i64, &str)],
) -> Option<Copied> {
    let ours = words(answer);
    let asked: HashSet<String> = words(question).into_iter().map(|(_, w)| w).collect();
    let alignments: Vec<Alignment<'_>> = sentences
        .iter()
        .map(|(n, sentence)| {
            let words = words(sentence);
            let pairs = aligned(&ours, &words);
            Alignment {
                n: *n,
                sentence,
                words,
                pairs,
            }
        })
        .collect();
    let source = alignments
        .iter()
        .filter(|a| copies(a.pairs.len(), ours.len(), a.words.len()))
        .max_by_key(|a| a.pairs.len())?;
    let (name, instead) = swap_in(&ours, &source.words, &source.pairs, &asked)?;
    let lower = name.to_lowercase();
    let held_elsewhere = alignments.iter().any(|other| {
        other.pairs.len() >= source.pairs.len() && other.words.iter().any(|(_, w)| *w == lower)
    });
    (!held_elsewhere).then(|| Copied {
        n: source.n,
        sentence: source.sentence.trim().to_string(),
        ours: name,
        theirs: instead,
    })
}

/// A shown sentence's words and where the answer's words stand among them.
struct Alignment<'a> {
    n: i64,
    sentence: &'a str,
    words: Vec<(String, String)>,
    /// `(answer's word, sentence's word)` positions in common, in order.
    pairs: Vec<(usize, usize)>,
}

/// Whether `common` words in order make a copy of an answer of `answer` words from a
/// sentence of `source` words.
fn copies(common: usize, answer: usize, source: usize) -> bool {
    common >= MIN_COMMON
        && (common as f64 >= OF_ANSWER * answer as f64
            || common as f64 >= OF_SOURCE * source as f64)
}

/// The answer's name and the source's word in its place, in the first gap between two words
/// in common (`pairs`) that holds a swap.
fn swap_in(
    ours: &[(String, String)],
    theirs: &[(String, String)],
    pairs: &[(usize, usize)],
    asked: &HashSet<String>,
) -> Option<(String, String)> {
    let held: HashSet<&str> = theirs.iter().map(|(_, w)| w.as_str()).collect();
    let given: HashSet<&str> = ours.iter().map(|(_, w)| w.as_str()).collect();
    pairs.windows(2).find_map(|pair| {
        let ((i0, j0), (i1, j1)) = (pair[0], pair[1]);
        let (our_gap, their_gap) = (&ours[i0 + 1..i1], &theirs[j0 + 1..j1]);
        // The longest gap in either sentence: more is a rewording, not a swap.
        if our_gap.is_empty()
            || their_gap.is_empty()
            || our_gap.len() > MAX_SWAPPED
            || their_gap.len() > MAX_SWAPPED
        {
            return None;
        }
        let name = our_gap.iter().find(|(raw, lower)| {
            is_name(raw) && !held.contains(lower.as_str()) && !asked.contains(lower)
        })?;
        // The same thing in other words: a number and its word (`4`, "four"), or a name and
        // the same name qualified (`io::Result`, `Result`).
        let same = |lower: &str| {
            number_word(&name.1) == Some(lower)
                || word_number(&name.1) == Some(lower)
                || name.1.contains(lower)
                || lower.contains(name.1.as_str())
        };
        let instead = their_gap.iter().find(|(_, lower)| {
            lower.chars().count() > 2
                && !is_stopword(lower)
                && !given.contains(lower.as_str())
                && !asked.contains(lower)
                && !same(lower)
        })?;
        Some((name.0.clone(), instead.0.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUESTION: &str =
        "Which crate turns syn data structures back into Rust code in the procedural macro example?";

    #[test]
    fn a_copied_sentence_with_another_name_in_the_answers_place_is_found() {
        let shown = [
            (1, "The proc_macro crate is the compiler’s API that allows us to read and manipulate Rust code from our code."),
            (1, "The quote crate turns syn data structures back into Rust code."),
        ];
        let copied = swapped_name(
            "The proc_macro crate turns syn data structures back into Rust code in the procedural macro example.",
            QUESTION,
            &shown,
        )
        .expect("a swap");
        assert_eq!(
            (copied.n, copied.ours.as_str(), copied.theirs.as_str()),
            (1, "proc_macro", "quote")
        );
        assert_eq!(copied.sentence, shown[1].1);
    }

    #[test]
    fn the_right_name_a_rewording_or_a_name_the_question_gave_is_no_swap() {
        let shown = [(
            1,
            "The quote crate turns syn data structures back into Rust code.",
        )];
        for answer in [
            // The source's own name.
            "The quote crate turns syn data structures back into Rust code in the procedural macro example.",
            // Other words, no name.
            "The quote crate converts syn data structures back into Rust code.",
            // In the answer's words altogether.
            "It is quote, which generates tokens from parsed syntax trees.",
        ] {
            assert_eq!(swapped_name(answer, QUESTION, &shown), None, "{answer}");
        }
        // The answer copies a like sentence that holds its name: no swap with the first.
        let like = [
            (
                3,
                "The gen keyword was added as a reserved keyword in the 2024 edition.",
            ),
            (
                3,
                "The try keyword was added as a reserved keyword in the 2018 edition.",
            ),
        ];
        assert_eq!(
            swapped_name(
                "The try keyword was added as a reserved keyword in the 2018 edition.",
                "In which edition was try reserved?",
                &like
            ),
            None
        );
        // Emphasis, a qualified name, a small word: no swap either.
        let shown = [(
            2,
            "The spawn function returns a Result in a collection of handles.",
        )];
        for answer in [
            "The spawn function returns a **Result** in a collection of handles.",
            "The spawn function returns a io::Result in a collection of handles.",
            "The spawn function returns a Result in the Vec<i32> collection of handles.",
        ] {
            assert_eq!(
                swapped_name(answer, "What does spawn return?", &shown),
                None,
                "{answer}"
            );
        }
        // A name the question gave stands where the source says "this".
        let shown = [(
            2,
            "This function returns a JoinHandle<T>, where T is the type that the closure returns.",
        )];
        assert_eq!(
            swapped_name(
                "The thread::spawn function returns a JoinHandle<T>, where T is the type that the closure returns.",
                "What type does thread::spawn return?",
                &shown
            ),
            None
        );
    }
}
