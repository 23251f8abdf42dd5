//! The words and sentences of a question and its passages, shared by the extractive answer,
//! the sentence selection that decides what a model reads, and the answer check.

use std::sync::LazyLock;

use regex::Regex;

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "was", "what", "which", "who", "how", "why", "when", "where",
    "does", "did", "with", "from", "that", "this", "these", "those", "into", "about", "there",
    "their", "have", "has", "can", "will", "would", "should", "could", "you", "your", "not", "but",
    "any", "all", "its", "our", "out", "use", "used",
];

/// Lowercase, Markdown emphasis and code marks dropped, whitespace collapsed: how an answer
/// is compared with a fact or a passage.
pub(crate) fn flat(text: &str) -> String {
    text.replace(['*', '`'], "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether a lowercased word is too common to say what a question is about.
pub(crate) fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
}

/// The lowercased content words of a question, once each, in order.
pub(crate) fn terms(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in question
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
        .map(|w| w.trim_matches(['-', '_']).to_lowercase())
    {
        if w.chars().count() >= 3 && !is_stopword(&w) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The words of a question that name something (lowercased): with a digit or `_`, in
/// CamelCase or ALL CAPS, or capitalised after the first word (`PostgreSQL`, `Kotlin`, `E0382`,
/// `Moon`). Evidence that never mentions a name the question asks about cannot answer it.
pub(crate) fn names(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let words = question
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '\''))
        .map(|w| w.split('\'').next().unwrap_or("").trim_matches(['-', '_']))
        .filter(|w| !w.is_empty());
    for (i, word) in words.enumerate() {
        let letters: Vec<char> = word.chars().filter(|c| c.is_alphabetic()).collect();
        let camel = letters.iter().skip(1).any(|c| c.is_uppercase())
            && letters.iter().any(|c| c.is_lowercase());
        let caps = letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase());
        let capitalised = i > 0 && word.chars().next().is_some_and(char::is_uppercase);
        let name = word.chars().any(|c| c.is_ascii_digit())
            || word.contains('_')
            || camel
            || caps
            || capitalised;
        let word = word.to_lowercase();
        if name && word.chars().count() >= 3 && !out.contains(&word) {
            out.push(word);
        }
    }
    out
}

/// The question proper, lowercased and split into words: its last sentence ("Rust has no
/// null. Which enum …?").
fn asked_words(question: &str) -> Vec<String> {
    question
        .trim_end()
        .trim_end_matches('?')
        .rsplit(['.', '!', '?'])
        .next()
        .unwrap_or(question)
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a question asks for a count ("How many …?", "How much …?").
pub(crate) fn asks_how_many(question: &str) -> bool {
    let words = asked_words(question);
    words.first().is_some_and(|w| w == "how")
        && words.get(1).is_some_and(|w| w == "many" || w == "much")
}

/// Whether a question asks for a thing by its name, number or place ("Which attribute …",
/// "Whose poem …", "How many …", "What version …"), not for an explanation ("What does …",
/// "Why …"): a sentence that names something the question does not is then likely the answer.
pub(crate) fn asks_for_a_specific(question: &str) -> bool {
    let words = asked_words(question);
    let word = |i: usize| words.get(i).map_or("", String::as_str);
    if matches!(words.last().map(String::as_str), Some("called" | "named")) {
        return true;
    }
    match word(0) {
        "which" | "whose" | "where" => true,
        "how" => matches!(word(1), "many" | "much"),
        // "What is the default …?" asks for a thing; "What is a closure?" for an explanation.
        "what" => match word(1) {
            "is" | "are" | "was" | "were" => word(2) == "the",
            second => !matches!(
                second,
                "does"
                    | "do"
                    | "did"
                    | "happens"
                    | "happened"
                    | "can"
                    | "should"
                    | "would"
                    | "will"
                    | "if"
                    | "makes"
                    | "kind"
                    | "problem"
                    | "problems"
                    | "role"
                    | "advantage"
                    | "purpose"
            ),
        },
        _ => false,
    }
}

/// A word's stem for matching its other forms (`borrowed`, `borrowing` → `borrow`; `compile`,
/// `compiler` → `compil`): a few English endings cut, never below four letters. Crude, but it
/// errs towards keeping words apart, the safe side for both selection and refusal.
pub(crate) fn stem(word: &str) -> String {
    let word = word.to_lowercase();
    let long_enough = |base: &str| base.chars().count() >= 4;
    let mut base = word.clone();
    if let Some(b) = word
        .strip_suffix("ies")
        .or_else(|| word.strip_suffix("ied"))
    {
        if b.chars().count() >= 3 {
            return format!("{b}y");
        }
    }
    if !word.ends_with("ss") {
        for suffix in [
            "ations", "ation", "ings", "ing", "ers", "ed", "er", "ly", "s",
        ] {
            if let Some(b) = word.strip_suffix(suffix) {
                if long_enough(b) {
                    base = b.to_string();
                    break;
                }
            }
        }
    }
    // `compile` and `compiled` meet at `compil`.
    match base.strip_suffix('e') {
        Some(b) if long_enough(b) => b.to_string(),
        _ => base,
    }
}

/// The stems of the words of `text` (letters, digits, `_` and inner `-` make a word).
pub(crate) fn word_stems(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .map(|w| w.trim_matches(['-', '_']))
        .filter(|w| !w.is_empty())
        .map(stem)
        .collect()
}

/// Sentences of a passage: split at `.`, `!`, `?` followed by a space, and at line breaks,
/// except a break inside a sentence of hard-wrapped text (the next line goes on in lowercase).
pub(crate) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' {
            let next = chars[i + 1..].iter().find(|c| !matches!(c, ' ' | '\t'));
            let wraps = !current.trim().is_empty() && next.is_some_and(|n| n.is_lowercase());
            if wraps {
                current.push(' ');
                continue;
            }
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            current.clear();
            continue;
        }
        current.push(c);
        let next_is_space = chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        // `the ? operator`: a mark standing alone between spaces ends nothing; nor does one
        // the text goes on from in lowercase (`the println! macro`, `e.g. this`).
        let after_word = i > 0 && !chars[i - 1].is_whitespace();
        let goes_on = chars[i + 1..]
            .iter()
            .find(|n| !n.is_whitespace())
            .is_some_and(|n| n.is_lowercase());
        if matches!(c, '.' | '!' | '?') && next_is_space && after_word && !goes_on {
            out.push(current.trim().to_string());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out.retain(|s| s.chars().filter(|c| c.is_alphanumeric()).count() >= 3);
    out
}

/// The tokens of a sentence a passage must hold as they are: code spans, quoted strings,
/// numbers and words with digits (`11.2`, `E0597`, `i32`), and identifiers (`snake_case`,
/// `CamelCase`, `path::to`, `ALLCAPS`).
pub(crate) fn exact_tokens(text: &str) -> Vec<String> {
    // Compiled once: every sentence of every answer, and the question, come through here.
    static SPANS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"`([^`]{1,80})`|"([^"]{1,80})"|“([^”]{1,80})”"#).expect("a valid regex")
    });
    static WORDS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[A-Za-z0-9_$#]+(?:(?:::|[.,:'-])[A-Za-z0-9_$#]+)*").expect("a valid regex")
    });
    let mut out: Vec<String> = Vec::new();
    let mut rest = text.to_string();
    for caps in SPANS.captures_iter(text) {
        let inner = caps
            .get(1)
            .or(caps.get(2))
            .or(caps.get(3))
            .expect("a group");
        out.push(inner.as_str().trim().to_string());
        rest = rest.replace(caps.get(0).expect("the match").as_str(), " ");
    }
    for m in WORDS.find_iter(&rest) {
        let w = m.as_str();
        let letters: Vec<char> = w.chars().filter(|c| c.is_alphabetic()).collect();
        let inner_capital = letters.iter().skip(1).any(|c| c.is_uppercase())
            && letters.iter().any(|c| c.is_lowercase());
        let all_caps = letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase());
        if w.chars().any(|c| c.is_ascii_digit())
            || w.contains('_')
            || w.contains("::")
            || inner_capital
            || all_caps
        {
            out.push(w.to_string());
        }
    }
    out.retain(|t| !t.is_empty());
    out.dedup();
    out
}

/// Whether `haystack` holds `token` not as part of a longer word or number (`12` is not in
/// `127`, `i8` is not in `i80`).
pub(crate) fn contains_token(haystack: &str, token: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    haystack.match_indices(token).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + token.len()..].chars().next();
        let starts_word = token.chars().next().is_some_and(is_word);
        let ends_word = token.chars().next_back().is_some_and(is_word);
        (!starts_word || !before.is_some_and(is_word))
            && (!ends_word || !after.is_some_and(is_word))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_join_a_words_forms_and_keep_short_words_whole() {
        assert_eq!(stem("borrowed"), "borrow");
        assert_eq!(stem("Borrowing"), "borrow");
        assert_eq!(stem("borrows"), "borrow");
        assert_eq!(stem("bytes"), "byte");
        assert_eq!(stem("uses"), "uses");
        assert_eq!(stem("i32"), "i32");
        assert_eq!(stem("entries"), stem("entry"));
        assert_eq!(stem("compiled"), stem("compile"));
        assert_eq!(stem("compiler"), stem("compile"));
        assert_eq!(stem("class"), "class");
        assert_eq!(
            word_stems("The `Rc<T>` type counts references."),
            ["the", "rc", "t", "type", "count", "referenc"]
        );
        assert_eq!(stem("reference"), "referenc");
    }

    #[test]
    fn terms_skip_stopwords_and_keep_identifiers() {
        assert_eq!(
            terms("What does the ? operator do with an Err value in main_loop?"),
            ["operator", "err", "value", "main_loop"]
        );
    }

    #[test]
    fn names_are_the_words_that_name_something() {
        assert_eq!(
            names("Which port does a PostgreSQL server use, and is Kotlin's E0382 like main_loop or HNSW?"),
            ["postgresql", "kotlin", "e0382", "main_loop", "hnsw"]
        );
        assert!(names("What does the borrow checker reject?").is_empty());
    }

    #[test]
    fn sentences_split_at_stops_and_line_breaks() {
        assert_eq!(
            sentences("Version 1.2 is out. Use it!\nA heading\nOk. The ? operator returns."),
            [
                "Version 1.2 is out.",
                "Use it!",
                "A heading",
                "The ? operator returns."
            ]
        );
        // A macro's `!` or an abbreviation's stop goes on in lowercase: no new sentence.
        assert_eq!(
            sentences("The eprintln! macro prints to stderr. Use it, e.g. here."),
            [
                "The eprintln! macro prints to stderr.",
                "Use it, e.g. here."
            ]
        );
        // A hard-wrapped sentence stays whole.
        assert_eq!(
            sentences("A satellite in low Earth\norbit needs 7.67 km/s.\nNext line."),
            [
                "A satellite in low Earth orbit needs 7.67 km/s.",
                "Next line."
            ]
        );
    }
}
