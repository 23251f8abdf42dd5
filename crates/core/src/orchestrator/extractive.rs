//! The extractive answer: no LLM, the best sentence of each of the first passages (as the
//! sentence selection ranks them), query terms highlighted, each cited. It always works, and
//! is what the assistant falls back to when no model is available.

use super::sentences::terms;

/// How many passages an extractive answer quotes.
const PASSAGES: usize = 3;

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

/// The answer for `question` quoting `picked`: the best sentence of each of the passages that
/// answer (their numbers beside them, best first); the numbers it cites.
pub fn answer(question: &str, picked: &[(i64, String)]) -> (String, Vec<i64>) {
    if picked.is_empty() {
        return (super::NOTHING_FOUND.into(), Vec::new());
    }
    let terms = terms(question);
    // Passages whose best sentence shares no word with the question are left out when
    // others do.
    let mut picked: Vec<&(i64, String)> = picked.iter().collect();
    if picked.iter().any(|(_, s)| score(s, &terms) > 0) {
        picked.retain(|(_, s)| score(s, &terms) > 0);
    } else {
        picked.truncate(1);
    }
    let mut lines = vec!["From your library:".to_string()];
    let mut cited = Vec::new();
    for (n, best) in picked.into_iter().take(PASSAGES) {
        cited.push(*n);
        let best: String = if best.chars().count() > 300 {
            best.chars().take(300).collect::<String>() + "…"
        } else {
            best.clone()
        };
        lines.push(format!("- {} [{}]", highlight(&best, &terms), n));
    }
    (lines.join("\n"), cited)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_sentences_are_quoted_highlighted_and_cited() {
        let (a, cited) = answer(
            "What pressure does the XR-200 pump need?",
            &[
                (4, "The XR-200 pump needs a pressure of 4 bar.".into()),
                (2, "Keep it dry.".into()),
            ],
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
