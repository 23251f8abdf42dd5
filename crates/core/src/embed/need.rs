//! Which chunks need a vector of their own.
//!
//! Generated reference pages repeat one sentence with other names ("impl Send for Vec",
//! "impl Send for VecDeque"), and many chunks carry no prose at all (signatures, search-index
//! data, SVG markup, tables of numbers): a vector of those finds nothing the full-text index
//! does not. Measured on the toolchain's whole HTML documentation (542,192 searchable chunks):
//! 371,443 carry no prose and stay lexical-only, 68,597 share the vector of a chunk of the same
//! shape, and the model reads 102,152 (16.2M model tokens), so vectors take 41 minutes on two
//! cores instead of about three hours; nDCG@10 on the long pages and on Cranfield did not move.
//!
//! - **Prose**: the characters in plain words (letters only, lower case after the first, a
//!   little punctuation around them) and in CJK scripts, against every non-space character.
//! - **Shape**: the text with every token that is not a plain lower-case word (identifiers,
//!   names, numbers) replaced by one placeholder, whitespace collapsed.

/// A chunk holding fewer prose characters than this stays lexical-only.
pub const MIN_PROSE_CHARS: usize = 12;

/// A chunk whose prose is a smaller share of its non-space characters stays lexical-only.
pub const MIN_PROSE_SHARE: f64 = 0.3;

/// Two model inputs with the same key share one vector.
pub type ShapeKey = [u8; 16];

/// What a chunk gets in the vector index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorNeed {
    /// Full text only: it carries no prose.
    LexicalOnly,
    /// A vector, shared with any chunk of the same shape.
    Vector(ShapeKey),
}

/// What `input` (the model's input: title and text) needs, judged by `body` (the chunk's own
/// text, without the title, which is prose on every page and would lend it to signatures).
pub fn vector_need(input: &str, body: &str) -> VectorNeed {
    if carries_prose(body) {
        VectorNeed::Vector(shape_key(input))
    } else {
        VectorNeed::LexicalOnly
    }
}

/// Whether `text` holds enough prose to be searched by meaning.
pub fn carries_prose(text: &str) -> bool {
    let (prose, all) = text
        .split_whitespace()
        .fold((0usize, 0usize), |(prose, all), token| {
            (prose + prose_chars(token), all + token.chars().count())
        });
    prose >= MIN_PROSE_CHARS && prose as f64 >= MIN_PROSE_SHARE * all as f64
}

/// Prose characters in one whitespace-separated token: a plain word's letters, else its CJK
/// characters (which code and data do not use, and which are not separated by spaces).
fn prose_chars(token: &str) -> usize {
    const LEAD: &[char] = &['(', '"', '\'', '[', '“', '‘', '¿', '¡'];
    const TRAIL: &[char] = &[
        '.', ',', ';', ':', '!', '?', ')', '"', '\'', ']', '”', '’', '…',
    ];
    let word = token.trim_start_matches(LEAD).trim_end_matches(TRAIL);
    let letters = word.chars().count();
    let plain = letters >= 2
        && word.chars().all(char::is_alphabetic)
        && word.chars().skip(1).all(|c| !c.is_uppercase());
    if plain {
        letters
    } else {
        token.chars().filter(|&c| is_cjk(c)).count()
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}')
}

/// The key of `text`'s shape: tokens of letters, digits and `_` that are not plain lower-case
/// words become one placeholder, whitespace runs one space.
pub fn shape_key(text: &str) -> ShapeKey {
    let mut hasher = blake3::Hasher::new();
    let mut word = String::new();
    let mut pending_space = false;
    let flush = |word: &mut String, hasher: &mut blake3::Hasher| {
        if word.is_empty() {
            return;
        }
        if word.chars().all(|c| c.is_alphabetic() && !c.is_uppercase()) {
            hasher.update(word.as_bytes());
        } else {
            hasher.update(b"\x01");
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            if pending_space {
                hasher.update(b" ");
                pending_space = false;
            }
            word.push(c);
            continue;
        }
        flush(&mut word, &mut hasher);
        if c.is_whitespace() {
            pending_space = true;
        } else {
            if pending_space {
                hasher.update(b" ");
                pending_space = false;
            }
            let mut buf = [0u8; 4];
            hasher.update(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    flush(&mut word, &mut hasher);
    let mut key = [0u8; 16];
    key.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_keeps_its_vector_and_signatures_data_and_markup_stay_lexical() {
        for prose in [
            "Returns the number of elements in the vector.",
            "Cargo downloads your dependencies, compiles your packages, and uploads them.",
            "Call mom tomorrow",
            "// `len` 方法返回当前存储在向量中的元素数量",
            "`Debug`を実装している`T`への参照を取りません。",
        ] {
            assert!(carries_prose(prose), "{prose}");
        }
        for data in [
            "impl UnsafeUnpin for vector_unsigned_char §",
            "[expr.literal.int]",
            "Ba[9331,13,14573,0,33958,23281,0,0]Ba[9331,13,14573,0,10181,23281,0,0]",
            r##"<polygon fill="none" stroke="#000000" points="8,-104 8,-124 60,-124"/>"##,
            "pub fn len(&self) -> usize",
            "",
        ] {
            assert!(!carries_prose(data), "{data}");
        }
    }

    #[test]
    fn the_title_does_not_lend_prose_to_a_signature() {
        let title = "Vec in std::vec - Rust";
        let body = "impl<T: Clone> Clone for Vec<T> §";
        assert_eq!(
            vector_need(&format!("{title}\n{body}"), body),
            VectorNeed::LexicalOnly
        );
    }

    #[test]
    fn texts_that_differ_only_in_names_and_numbers_share_a_shape() {
        let a = "Vec in Alloc\nReturns the number of elements in the Vec, also referred to as its length (1.0.0).";
        let b = "VecDeque in Std\nReturns the number of elements in the VecDeque, also referred to as its length (1.2.3).";
        assert_eq!(shape_key(a), shape_key(b));
        assert_eq!(shape_key("a  b\n c"), shape_key("a b c"), "whitespace");
        let other = "Vec in Alloc\nReturns the capacity of the Vec, also referred to as its length (1.0.0).";
        assert_ne!(shape_key(a), shape_key(other), "a prose word differs");
        assert_ne!(shape_key("a.b"), shape_key("a b"), "punctuation counts");
    }
}
