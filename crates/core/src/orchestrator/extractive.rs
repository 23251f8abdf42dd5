//! The extractive answer: no LLM, the best sentence of each of the first passages, query
//! terms highlighted, each cited. It always works, and is what the assistant falls back to
//! when no model is available.

use super::conversation::EvidenceItem;

/// How many passages an extractive answer quotes.
const PASSAGES: usize = 3;
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "was", "what", "which", "who", "how", "why", "when", "where",
    "does", "did", "with", "from", "that", "this", "these", "those", "into", "about", "there",
    "their", "have", "has", "can", "will", "would", "should", "could", "you", "your", "not", "but",
    "any", "all", "its", "our", "out", "use", "used",
];

/// Whether a lowercased word is too common to say what a question is about.
pub(crate) fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
}

/// The lowercased content words of a question.
fn terms(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in question
        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .map(|w| w.trim_matches('-').to_lowercase())
    {
        if w.chars().count() >= 3 && !is_stopword(&w) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Sentences of a passage (split at `.`, `!`, `?` followed by a space, and at line breaks).
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' {
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            current.clear();
            continue;
        }
        current.push(c);
        let next_is_space = chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if matches!(c, '.' | '!' | '?') && next_is_space {
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

fn score(sentence: &str, terms: &[String]) -> usize {
    let lower = sentence.to_lowercase();
    terms.iter().filter(|t| lower.contains(t.as_str())).count()
}

/// Wraps every whole-word occurrence of a term in `**`.
fn highlight(sentence: &str, terms: &[String]) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !word.is_empty() {
            if terms.iter().any(|t| *t == word.to_lowercase()) {
                out.push_str(&format!("**{word}**"));
            } else {
                out.push_str(word);
            }
            word.clear();
        }
    };
    for c in sentence.chars() {
        if c.is_alphanumeric() || c == '-' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The answer for `question` from `evidence` (in the order it was admitted, best first), and
/// the numbers it cites.
pub fn answer(question: &str, evidence: &[EvidenceItem]) -> (String, Vec<i64>) {
    if evidence.is_empty() {
        return (super::NOTHING_FOUND.into(), Vec::new());
    }
    let terms = terms(question);
    let mut picked: Vec<(usize, String, i64)> = Vec::new();
    for item in evidence.iter() {
        // A heading alone says little: prefer sentences with the question's words, then
        // sentences of some length, then the earliest.
        let best = sentences(&item.text)
            .into_iter()
            .enumerate()
            .max_by_key(|(i, s)| {
                (
                    score(s, &terms),
                    s.split_whitespace().count() >= 4,
                    std::cmp::Reverse(*i),
                )
            })
            .map(|(_, s)| (score(&s, &terms), s))
            .unwrap_or_else(|| (0, item.text.chars().take(200).collect()));
        picked.push((best.0, best.1, item.n));
    }
    // Passages that share no word with the question are left out when others do.
    if picked.iter().any(|p| p.0 > 0) {
        picked.retain(|p| p.0 > 0);
    } else {
        picked.truncate(1);
    }
    let mut lines = vec!["From your library:".to_string()];
    let mut cited = Vec::new();
    for (_, best, n) in picked.into_iter().take(PASSAGES) {
        cited.push(n);
        let best: String = if best.chars().count() > 300 {
            best.chars().take(300).collect::<String>() + "…"
        } else {
            best
        };
        lines.push(format!("- {} [{}]", highlight(&best, &terms), n));
    }
    (lines.join("\n"), cited)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ChunkId, DocumentId, RevisionId};

    fn item(n: i64, text: &str) -> EvidenceItem {
        EvidenceItem {
            n,
            chunk_id: ChunkId(n),
            document_id: DocumentId(1),
            revision_id: RevisionId(1),
            path: "/docs/pump.md".into(),
            title: None,
            collection: "demo".into(),
            heading_path: String::new(),
            location: Default::default(),
            text: text.into(),
            admitted_by: "pipeline".into(),
            turn: 1,
            evidence_ref: String::new(),
            source_ref: String::new(),
        }
    }

    #[test]
    fn the_best_sentence_is_quoted_highlighted_and_cited() {
        let (a, cited) = answer(
            "What pressure does the XR-200 pump need?",
            &[item(
                4,
                "Pumps are serviced yearly. The XR-200 pump needs a pressure of 4 bar. Keep it dry.",
            )],
        );
        assert_eq!(
            a,
            "From your library:\n- The **XR-200** **pump** needs a **pressure** of 4 bar. [4]"
        );
        assert_eq!(cited, vec![4]);
    }

    #[test]
    fn no_evidence_says_so() {
        assert!(answer("anything", &[]).0.contains("nothing"));
    }
}
