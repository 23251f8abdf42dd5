//! The model judges its own answer against the sentences it cites, after the answer check:
//! whether they answer the question with it, and whether they state it (P("yes") read from
//! the model's logits, no text generated). The check passes a claim built from the passages'
//! words; a near miss, where the documents speak of the subject but not of the detail asked,
//! is written from such words ("The Cargo.lock file pins the Rust toolchain version"), and
//! only reading the claim against the passage shows that it does not say so. An answer that
//! both judgements doubt is refused. Only a model whose judgement was calibrated (the
//! catalogue's `judge_floor`) judges: for Qwen2.5-Coder-1.5B, 0.7 on the tuning set's 126
//! answers the check kept (`tests/data/grounded-qa`) doubted 4 of the 5 unanswerable questions
//! answered there, 2 of 14 wrong answers and 1 of 107 right ones.

use std::time::Instant;

use regex::Regex;
use serde::Serialize;
use serde_json::json;

use super::grounding::Checked;
use super::selection::Selection;
use super::setup::Turn;
use crate::llm::ChatBackend;
use crate::Result;

const ANSWERS: &str = "Judge whether the Document answers the Question with the Answer given. \
    Note that the answer can only be \"yes\" or \"no\".";
const STATES: &str =
    "Judge whether the Document states the Claim. Note that the answer can only be \"yes\" or \"no\".";

/// One sentence of the answer, as judged.
#[derive(Debug, Serialize)]
pub(super) struct Judged {
    pub sentence: String,
    pub cited: Vec<i64>,
    /// P("yes"): the cited sentences answer the question with this one.
    pub answers: f32,
    /// P("yes"): the cited sentences state it; judged only when `answers` is in doubt.
    pub states: Option<f32>,
}

impl Judged {
    /// Both judgements under `floor`.
    fn doubted(&self, floor: f32) -> bool {
        self.answers < floor && self.states.is_some_and(|p| p < floor)
    }
}

impl Turn<'_> {
    /// Why the answer is not held by what it cites, when the model judges one of its sentences
    /// so; `None` when every sentence holds, or when the backend cannot judge. Recorded as
    /// `answer.judged`.
    pub(super) fn judged_unsupported(
        &mut self,
        backend: &dyn ChatBackend,
        checked: &Checked,
        selection: &Selection,
    ) -> Result<Option<String>> {
        let Some(floor) = backend.judge_floor() else {
            return Ok(None);
        };
        let started = Instant::now();
        let mut judged = Vec::new();
        for (sentence, cited) in cited_sentences(&checked.text) {
            let shown: Vec<String> = cited
                .iter()
                .filter(|n| selection.passages.contains(n))
                .map(|n| selection.text_of(*n))
                .collect();
            if shown.is_empty() {
                continue; // a citation of nothing shown: the ledger check removes it
            }
            let document = shown.join(" ");
            let answers = backend.judge_yes(
                ANSWERS,
                &format!(
                    "<Document>: {document}\n<Question>: {}\n<Answer>: {sentence}\nDoes the Document answer the Question with the Answer given? Answer yes or no.",
                    self.question
                ),
            )?;
            let Some(answers) = answers else {
                return Ok(None);
            };
            let states = if answers < floor {
                backend.judge_yes(
                    STATES,
                    &format!("<Document>: {document}\n<Claim>: {sentence}\nDoes the Document state the Claim? Answer yes or no."),
                )?
            } else {
                None
            };
            judged.push(Judged {
                sentence,
                cited,
                answers,
                states,
            });
        }
        if judged.is_empty() {
            return Ok(None);
        }
        let doubted = judged.iter().find(|j| j.doubted(floor)).map(|j| {
            format!(
                "the model judged that the sentences it cites neither answer the question with “{}” nor state it",
                j.sentence
            )
        });
        self.record(
            "answer.judged",
            json!({
                "took_ms": started.elapsed().as_millis() as u64,
                "doubt_below": floor,
                "sentences": judged,
                "doubted": doubted.is_some(),
            }),
        )?;
        Ok(doubted)
    }
}

/// The answer's sentences without their citations, each with the passages it cites.
fn cited_sentences(answer: &str) -> Vec<(String, Vec<i64>)> {
    let sentence = Regex::new(r"(?s)(.+?)\s*((?:\[\d+\]\s*)+)").expect("a valid regex");
    let number = Regex::new(r"\d+").expect("a valid regex");
    sentence
        .captures_iter(answer)
        .map(|c| {
            let cited = number
                .find_iter(&c[2])
                .filter_map(|m| m.as_str().parse().ok())
                .collect();
            (c[1].trim().to_string(), cited)
        })
        .filter(|(s, _)| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_come_apart_with_what_each_cites() {
        assert_eq!(
            cited_sentences("Ferns reproduce by spores. [1] They grow on fronds [2][3]."),
            vec![
                ("Ferns reproduce by spores.".to_string(), vec![1]),
                ("They grow on fronds".to_string(), vec![2, 3]),
            ]
        );
        assert!(cited_sentences("No citation here.").is_empty());
    }

    #[test]
    fn a_sentence_is_doubted_only_when_both_judgements_doubt_it() {
        let judged = |answers, states| Judged {
            sentence: String::new(),
            cited: vec![1],
            answers,
            states,
        };
        assert!(!judged(0.9, None).doubted(0.7));
        assert!(!judged(0.5, Some(0.8)).doubted(0.7));
        assert!(judged(0.5, Some(0.4)).doubted(0.7));
    }
}
