//! The grounded answer, as a short driver over its stages: select the sentences that answer
//! (`selection`), refuse when the evidence does not support an answer, let the model write from
//! the selected sentences under a citation grammar, check what it wrote (`grounding`), and
//! quote the best sentence when the evidence answers but nothing the model wrote survives.
//! Every stage leaves a trace event, so a wrong answer shows whether the retrieval, the
//! selection, the model or the check was wrong.

use std::time::Instant;

use serde_json::json;

use super::grounding::{self, Checked};
use super::selection::{self, ScoredSentence, Selection};
use super::setup::Turn;
use super::TurnEvent;
use crate::llm::{ChatBackend, ChatMessage, ChatResponse, Constraint};
use crate::orchestrator::{extractive, NOTHING_FOUND, NOT_IN_EVIDENCE};
use crate::Result;

/// What a turn wrote: the model's answer (its citations still to resolve against the ledger),
/// or words the turn chose itself, a refusal or a quote, whose citations are known.
pub(super) enum Written {
    /// The model's words, and the best sentence quoted beneath them when they leave out what
    /// it names (its passage's number known).
    Model {
        text: String,
        quote: Option<(String, i64)>,
    },
    Chosen {
        text: String,
        cited: Vec<i64>,
    },
}

impl Written {
    /// The model's words alone.
    pub(super) fn model(text: String) -> Written {
        Written::Model { text, quote: None }
    }
}

/// Passages named as "see also" beside a refusal.
const SEE_ALSO: usize = 3;

impl Turn<'_> {
    /// A small model writes the answer from the selected sentences, under a grammar that makes
    /// every sentence end with a citation of a shown passage.
    pub(super) fn grounded_answer(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Written> {
        let selection = self.select_sentences()?;
        if let Some(refusal) = self.refusal(&selection, on_event)? {
            return Ok(refusal);
        }
        let response = self.draft(backend, history, &selection, on_event)?;
        // A draft the length limit cut before it cited anything rambled (a small model can
        // run on in digits or a list): it is not an answer.
        let rambled = response.finish_reason == "length" && !response.content.contains(']');
        let draft = without_uncited_tail(response);
        let checked = self.checked_against(&draft, &selection, on_event)?;
        if !rambled && !crate::orchestrator::is_refusal(&checked.text) {
            let quote = self.supporting_quote(&checked, &selection)?;
            return Ok(Written::Model {
                text: checked.text,
                quote,
            });
        }
        // The model refused, or the check left nothing: the evidence decides between quoting
        // what the documents say and saying they do not.
        let why = if rambled {
            "the model's answer ran to the length limit without citing a passage"
        } else if checked.sentences == 0 {
            "the model found no answer in the sentences shown"
        } else {
            "nothing the model wrote is in the passages shown"
        };
        // Which sentence to quote: when the model only restated a question that asks for a
        // name (it wrote around the answer), the sentence that names one; else the sentence
        // the model drew on, when it named what one holds and added a detail from memory
        // (`rustup doc --open`); else the best sentence when it is close to the question; else
        // the closest in meaning (a refusal where the documents do say it in other words was
        // 5 of 7 answerable questions refused on the tuning set). A model that made up a name
        // or a number is not offered the naming sentence: on the tuning set that was an
        // unanswerable question. The draft never decides whether a quote is given, only which.
        let wrote_around = checked.sentences > 0 && checked.restated == checked.sentences;
        let fallback = selection
            .quotable()
            .map(|s| (s, "the best sentence"))
            .or_else(|| {
                selection
                    .closest_quotable()
                    .map(|s| (s, "the sentence closest in meaning"))
            });
        let quotable = wrote_around
            .then(|| selection.naming(&self.question))
            .flatten()
            .map(|s| (s, "the sentence naming what the question asks for"))
            .or_else(|| {
                fallback.map(|fallback| {
                    selection
                        .drawn_on(&draft, &self.question)
                        .map(|s| (s, "the sentence the model's words came from"))
                        .unwrap_or(fallback)
                })
            })
            .map(|(s, chosen)| (s.clone(), chosen));
        if let Some((sentence, chosen)) = quotable {
            self.quote(&sentence, why, chosen, on_event)
        } else {
            let why = format!("{why}, and no sentence is close enough to the question to quote");
            self.refuse(&selection, &why, on_event)
        }
    }

    /// The extractive answer from the selected sentences: the best of each of the first
    /// passages, quoted; or the refusal.
    pub(super) fn extractive_from_selection(
        &mut self,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Written> {
        let selection = self.select_sentences()?;
        if let Some(refusal) = self.refusal(&selection, on_event)? {
            return Ok(refusal);
        }
        let mut picked: Vec<(i64, String)> = Vec::new();
        for n in &selection.passages {
            let best = selection
                .shown
                .iter()
                .filter(|s| s.n == *n)
                .max_by(|a, b| a.score.total_cmp(&b.score));
            if let Some(s) = best {
                picked.push((s.n, s.text.clone()));
            }
        }
        let (text, cited) = extractive::answer(&self.question, &picked);
        on_event(TurnEvent::Token(&text));
        Ok(Written::Chosen { text, cited })
    }

    /// The admitted passages' sentences that answer, recorded as `evidence.selected`.
    fn select_sentences(&mut self) -> Result<Selection> {
        let started = Instant::now();
        let budget_chars = self.mode.budget.evidence_tokens * 4 / 2;
        let similarity = self.sentence_similarity();
        let selection = selection::select(
            &self.question,
            &self.admitted,
            similarity.as_deref(),
            budget_chars,
        );
        self.record(
            "evidence.selected",
            json!({
                "took_ms": started.elapsed().as_millis() as u64,
                "considered": selection.considered,
                "semantic": selection.semantic,
                "admitted_chars": selection.admitted_chars,
                "shown_chars": selection.shown_chars,
                "passages": selection.passages,
                "shown": selection.shown,
                "support": {
                    "terms": selection.support.terms,
                    "missing": selection.support.missing,
                    "missing_names": selection.support.missing_names,
                    "coverage": selection.support.coverage(),
                    "best_similarity": selection.support.best_similarity,
                    "passages_with_terms": selection.support.passages_with_terms,
                    "answers": selection.support.answers(),
                    "quotable": selection.quotable().is_some(),
                },
            }),
        )?;
        Ok(selection)
    }

    /// Cosine similarity of sentences to the question, by the embedder of the first admitted
    /// passage's collection; `None` when that collection has none (the lexical score decides).
    #[allow(clippy::type_complexity)]
    fn sentence_similarity(&self) -> Option<Box<dyn Fn(&[&str]) -> Result<Vec<f32>> + '_>> {
        let collection = &self.admitted.first()?.collection;
        let model = self
            .ctx
            .store
            .collection_by_name(collection)
            .ok()??
            .embedding_model?;
        let retrieval = self.ctx.retrieval;
        let question = self.question.clone();
        Some(Box::new(move |texts: &[&str]| {
            let query = retrieval.embed_query(&model, &question)?;
            let vectors = retrieval.embedder(&model)?.embed(texts)?;
            Ok(vectors
                .iter()
                .map(|v| v.iter().zip(query.iter()).map(|(a, b)| a * b).sum())
                .collect())
        }))
    }

    /// The refusal when nothing was admitted or the evidence does not support an answer;
    /// `None` when the evidence answers.
    fn refusal(
        &mut self,
        selection: &Selection,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Option<Written>> {
        if selection.passages.is_empty() {
            on_event(TurnEvent::Token(NOTHING_FOUND));
            return Ok(Some(Written::Chosen {
                text: NOTHING_FOUND.into(),
                cited: Vec::new(),
            }));
        }
        if selection.support.answers() {
            return Ok(None);
        }
        let why = "the evidence lacks the question's names or most of its words, and no sentence is close in meaning";
        self.refuse(selection, why, on_event).map(Some)
    }

    /// Says the documents do not answer, naming the question's words no passage holds, with
    /// the closest passages as "see also"; recorded as `answer.refused`.
    fn refuse(
        &mut self,
        selection: &Selection,
        why: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Written> {
        let support = &selection.support;
        let see_also: Vec<i64> = selection.passages.iter().take(SEE_ALSO).copied().collect();
        let mut text = NOT_IN_EVIDENCE.to_string();
        let unheld = if support.missing_names.is_empty() {
            &support.missing
        } else {
            &support.missing_names
        };
        if !unheld.is_empty() {
            let words: Vec<String> = unheld.iter().map(|m| format!("“{m}”")).collect();
            text.push_str(&format!(" None of them mentions {}.", words.join(", ")));
        }
        let marks: Vec<String> = see_also.iter().map(|n| format!("[{n}]")).collect();
        text.push_str(&format!(" Closest: {}", marks.join(" ")));
        self.record(
            "answer.refused",
            json!({
                "reason": why,
                "missing": support.missing,
                "missing_names": support.missing_names,
                "coverage": support.coverage(),
                "best_similarity": support.best_similarity,
                "see_also": see_also,
            }),
        )?;
        on_event(TurnEvent::Token(&text));
        Ok(Written::Chosen {
            text,
            cited: see_also,
        })
    }

    /// The model's draft from the selected sentences.
    fn draft(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        selection: &Selection,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<ChatResponse> {
        let mut messages = vec![ChatMessage::system(
            self.revision.config.system_prompt.clone(),
        )];
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(format!(
            "Evidence:\n{}\nQuestion: {}\nAnswer the question in one or two full sentences using only the evidence, with its exact names, numbers and code. End each sentence with the number of the evidence it comes from, like [{}].",
            self.evidence_block(selection),
            self.question,
            selection.passages[0]
        )));
        let mut request = self.request(messages);
        if backend.info().supports_grammar {
            // Sentences sized so that two of them fit the answer budget (about 4 characters
            // a token): the grammar's last citation is never cut off.
            let sentence_chars = (self.mode.budget.answer_tokens * 4 / 2).saturating_sub(12);
            request.constraint = Some(Constraint::Grammar(citation_grammar(
                &selection.passages,
                sentence_chars.clamp(40, 240),
                has_cjk(&self.question),
            )));
        }
        self.generate(backend, &request, 1, on_event)
    }

    /// The selected sentences, a line per passage with its number. Without titles, headings
    /// or paths: a small model copies whatever it is shown into its answer.
    fn evidence_block(&self, selection: &Selection) -> String {
        selection
            .passages
            .iter()
            .map(|n| format!("[{n}] {}\n", selection.text_of(*n)))
            .collect()
    }

    /// `draft` after [`grounding::check`] against the sentences it was shown, recorded as
    /// `answer.checked` with each sentence dropped or re-pointed and why; the user is told
    /// when a sentence went.
    fn checked_against(
        &mut self,
        draft: &str,
        selection: &Selection,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Checked> {
        let texts: Vec<(i64, String)> = selection
            .passages
            .iter()
            .map(|n| (*n, selection.text_of(*n)))
            .collect();
        let passages: Vec<(i64, &str)> = texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let checked = grounding::check(draft, &self.question, &passages);
        self.record(
            "answer.checked",
            json!({
                "draft": draft,
                "sentences": checked.sentences,
                "dropped": checked.dropped,
                "citations_moved": checked.moved,
                "changes": checked.changes,
                "swapped": checked.swapped,
            }),
        )?;
        if checked.dropped > 0 {
            let reasons: Vec<String> = checked
                .changes
                .iter()
                .filter(|c| c.to.is_none())
                .map(|c| format!("“{}” ({})", c.sentence, c.reason))
                .collect();
            let notice = format!(
                "{} of {} sentence(s) left out, the passages shown do not say them: {}",
                checked.dropped,
                checked.sentences,
                reasons.join("; ")
            );
            self.notice(&notice, on_event)?;
        }
        Ok(checked)
    }

    /// The sentence to quote beneath the answer, recorded as `answer.quoted`: the shown
    /// sentence the answer copied with another name in place of one of its own (the user sees
    /// both names and where each stands), else, for a how-many question whose answer states no
    /// count, the best sentence that states one, else the best sentence when the answer leaves
    /// out every name, number and piece of code it holds (the model wrote around the fact).
    fn supporting_quote(
        &mut self,
        checked: &Checked,
        selection: &Selection,
    ) -> Result<Option<(String, i64)>> {
        let answer = checked.text.as_str();
        // The shown sentence holding the source's own word, not a shorter one beside it.
        let copied = checked.swapped.iter().find_map(|c| {
            selection
                .sentence_holding(c.n, &c.sentence)
                .filter(|s| s.text.contains(&c.theirs))
        });
        let (sentence, reason) = if let Some(copied) = copied {
            (
                copied,
                "the answer copies this sentence with another name in place of one of its own",
            )
        } else if let Some(counting) = selection
            .counting(&self.question)
            .filter(|_| !grounding::states_a_count(answer, &self.question))
        {
            (
                counting,
                "the question asks how many, and the answer states no count",
            )
        } else if let Some(best) = selection
            .quotable()
            .filter(|best| grounding::misses_specifics(answer, &best.text, &self.question))
        {
            (best, "the answer leaves out what the best sentence names")
        } else {
            return Ok(None);
        };
        self.record(
            "answer.quoted",
            json!({"reason": reason, "n": sentence.n, "sentence": sentence.text, "beside": true}),
        )?;
        Ok(Some((sentence.text.clone(), sentence.n)))
    }

    /// `best`, quoted and cited, when the evidence answers but the model's words did not
    /// hold: the user reads what the documents say instead of a refusal.
    fn quote(
        &mut self,
        best: &ScoredSentence,
        reason: &str,
        chosen: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Written> {
        let text = format!("Your documents say: “{}” [{}]", best.text, best.n);
        self.record(
            "answer.quoted",
            json!({"reason": reason, "chosen": chosen, "n": best.n, "sentence": best.text}),
        )?;
        on_event(TurnEvent::Token(&text));
        Ok(Written::Chosen {
            text,
            cited: vec![best.n],
        })
    }
}

/// An answer cut off by the token budget loses its trailing fragment that has no citation,
/// unless nothing worth keeping comes before it.
fn without_uncited_tail(response: ChatResponse) -> String {
    let mut answer = response.content;
    if response.finish_reason == "length" {
        if let Some(end) = answer.rfind(']') {
            let words = answer[..end].chars().filter(|c| c.is_alphabetic()).count();
            if words >= 20 {
                answer.truncate(end + 1);
            }
        }
    }
    answer
}

/// A GBNF grammar for one or two sentences (a short answer holds its fact and cites one
/// passage; a third sentence was padding that cited another), each ending with a citation of a shown passage,
/// or the refusal [`NOT_IN_EVIDENCE`] alone. A sentence starts with a capital letter (not a
/// list number: small models number their answers after the numbered evidence), and a full
/// stop inside it must be followed by more text that is not a capital (`11.2`, `.cargo/bin`,
/// but not `null.The`, two sentences run together), so the model ends a sentence where it
/// means to instead of being cut off mid-word at the length limit. Three stops are written
/// as three (`let...else`, as the documents spell it), never as the one character `…`, which
/// no passage holds where the model puts it. Brackets, which outside a code span would read
/// as a citation, may stand in one (`#[ignore]`, `&[i32]`), unless they hold digits alone:
/// without them a model wrote `#ignore`, which no passage holds. Unless
/// `cjk` (the question is written in Chinese, Japanese or Korean), those scripts are left out:
/// a small multilingual model drifts into them mid-sentence.
pub fn citation_grammar(shown: &[i64], sentence_chars: usize, cjk: bool) -> String {
    let numbers = shown
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(" | ");
    let outside = if cjk {
        ""
    } else {
        "\\u3000-\\u9fff\\uac00-\\ud7af"
    };
    format!(
        "root ::= answer | refusal\n\
         answer ::= sentence (\" \" sentence)?\n\
         refusal ::= \"{NOT_IN_EVIDENCE}\"\n\
         sentence ::= [A-Z] (char | \".\" [^ A-Z\\[\\]\\n.`\\u2026{outside}] | \"...\" char | code){{20,{sentence_chars}}} \". [\" num \"]\"\n\
         char ::= [^\\[\\]\\n.`\\u2026{outside}]\n\
         code ::= \"`\" ([^`\\[\\]\\n{outside}] | \"[\" [^0-9`\\[\\]\\n] | \"]\"){{1,60}} \"`\"\n\
         num ::= {numbers}\n"
    )
}

/// Whether `text` is written in Chinese, Japanese or Korean script.
fn has_cjk(text: &str) -> bool {
    text.chars()
        .any(|c| matches!(c, '\u{3000}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_citation_grammar_names_only_shown_passages() {
        let g = citation_grammar(&[2, 5], 200, false);
        assert!(g.contains("{20,200}"), "{g}");
        assert!(g.contains("num ::= \"2\" | \"5\""), "{g}");
        assert!(g.starts_with("root ::= answer | refusal"), "{g}");
        assert!(
            g.contains("char ::= [^\\[\\]\\n.`\\u2026\\u3000-\\u9fff"),
            "{g}"
        );
        assert!(g.contains("\".\" [^ A-Z"), "{g}");
        assert!(g.contains("| \"...\" char | code)"), "{g}");
        assert!(g.contains("code ::= \"`\" ([^`\\[\\]\\n\\u3000"), "{g}");
        assert!(
            g.contains(&format!("refusal ::= \"{NOT_IN_EVIDENCE}\"")),
            "{g}"
        );
        assert!(!citation_grammar(&[1], 200, true).contains("u3000"));
        assert!(has_cjk("什么是借用检查器？") && !has_cjk("What is the borrow checker?"));
    }
}
