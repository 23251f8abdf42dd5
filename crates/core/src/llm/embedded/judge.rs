//! Relevance judged by the chat model: for each passage, the probability that the model
//! answers "yes" to "does this passage answer the query?", read from its next-token logits
//! after one prompt evaluation (no text is generated). The prompt's head (instructions and
//! query) is evaluated once; each passage then costs only its own tokens.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaChatMessage;
use llama_cpp_2::token::LlamaToken;

use super::{llama_backend, thread_use, EmbeddedBackend, BATCH_TOKENS};
use crate::llm::ThreadUse;
use crate::Result;

const INSTRUCTIONS: &str = "Judge whether the Document answers the Query. \
    Note that the answer can only be \"yes\" or \"no\".";
/// Stands for the passage while the prompt is rendered, then split out.
const PASSAGE_SLOT: &str = "\u{1}PASSAGE\u{1}";

/// What [`EmbeddedBackend::judge_relevance`] found.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// Per passage, in order: P(yes) between 0 and 1; `None` for the passages the time budget
    /// or a newer judging left unjudged (always a tail: passages are judged in order).
    pub scores: Vec<Option<f32>>,
    /// Whether a newer request to judge (the user searched again) cut this one short.
    pub superseded: bool,
    /// Prompt tokens evaluated, the shared head once.
    pub tokens: usize,
    /// The threads the evaluation ran on.
    pub threads: ThreadUse,
}

impl EmbeddedBackend {
    /// Judges each passage's relevance to `query`, best candidates first, each cut to
    /// `passage_tokens`; stops starting new passages once `budget` has passed, or once a newer
    /// request to judge waits for the model: the newest question is the one the user still
    /// wants answered.
    pub fn judge_relevance(
        &self,
        query: &str,
        passages: &[String],
        passage_tokens: usize,
        budget: Duration,
    ) -> Result<Judgement> {
        let started = Instant::now();
        let ticket = self.judging.fetch_add(1, Ordering::SeqCst) + 1;
        let superseded = || self.judging.load(Ordering::SeqCst) != ticket;
        let _busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let threads = thread_use(self.config.threads, self.threads);
        if superseded() {
            return Ok(Judgement {
                scores: vec![None; passages.len()],
                superseded: true,
                tokens: 0,
                threads,
            });
        }
        let backend = llama_backend()?;
        let (head, tail) = self.judging_prompt(query)?;
        let (yes, no) = (
            self.answer_tokens(&["yes", "Yes"]),
            self.answer_tokens(&["no", "No"]),
        );
        if yes.is_empty() || no.is_empty() {
            return Err(self.failed("its vocabulary has no single token for yes and no"));
        }
        let n_ctx = (head.len() + passage_tokens + tail.len() + 8) as u32;
        let mut ctx = self.new_context(backend, n_ctx.max(256), threads)?;
        let mut batch = LlamaBatch::new(BATCH_TOKENS, 1);
        self.evaluate_prompt(&mut ctx, &mut batch, &head, 0)?;
        let mut judgement = Judgement {
            scores: Vec::with_capacity(passages.len()),
            superseded: false,
            tokens: head.len(),
            threads,
        };
        for passage in passages {
            judgement.superseded |= superseded();
            if judgement.superseded || started.elapsed() >= budget {
                judgement.scores.push(None);
                continue;
            }
            let mut tokens = head.clone();
            let body = self.tokenize_plain(passage);
            tokens.extend_from_slice(&body[..body.len().min(passage_tokens)]);
            tokens.extend_from_slice(&tail);
            self.evaluate_prompt(&mut ctx, &mut batch, &tokens, head.len())?;
            judgement.tokens += tokens.len() - head.len();
            let logits = ctx.get_logits_ith(batch.n_tokens() - 1);
            judgement
                .scores
                .push(Some(yes_probability(logits, &yes, &no)));
            // Back to the head alone for the next passage.
            ctx.clear_kv_cache_seq(Some(0), Some(head.len() as u32), None)
                .map_err(|e| self.failed(e.to_string()))?;
        }
        Ok(judgement)
    }

    /// The judging prompt in the model's template, as the tokens before the passage and the
    /// tokens after it (which open the model's answer).
    fn judging_prompt(&self, query: &str) -> Result<(Vec<LlamaToken>, Vec<LlamaToken>)> {
        let user = format!(
            "<Query>: {query}\n<Document>: {PASSAGE_SLOT}\nDoes the Document answer the Query? \
             Answer yes or no."
        );
        let chat = [("system", INSTRUCTIONS.to_string()), ("user", user)]
            .into_iter()
            .map(|(role, content)| {
                LlamaChatMessage::new(role.into(), content)
                    .map_err(|e| self.failed(format!("a message cannot be passed on: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let rendered = self.render(&chat, true)?;
        let (head, tail) = rendered
            .split_once(PASSAGE_SLOT)
            .ok_or_else(|| self.failed("the chat template dropped the passage"))?;
        // The query is the user's text: special tokens written in it stay plain text.
        let head = match head.split_once(query) {
            Some((before, after)) if !query.is_empty() => {
                let mut tokens = self.tokenize(before);
                tokens.extend(self.tokenize_plain(query));
                tokens.extend(self.tokenize(after));
                tokens
            }
            _ => self.tokenize(head),
        };
        Ok((head, self.tokenize(tail)))
    }

    /// Text as plain tokens: `<|im_end|>` written in a document is not the template's marker.
    fn tokenize_plain(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), false, false)
    }

    /// The tokens that spell each word on their own (words that take several are left out).
    fn answer_tokens(&self, words: &[&str]) -> Vec<LlamaToken> {
        words
            .iter()
            .filter_map(|w| match self.tokenize_plain(w)[..] {
                [one] => Some(one),
                _ => None,
            })
            .collect()
    }
}

/// P(yes) against no, from the logits of the answer's first token.
fn yes_probability(logits: &[f32], yes: &[LlamaToken], no: &[LlamaToken]) -> f32 {
    let logit = |t: &LlamaToken| logits.get(t.0 as usize).copied().unwrap_or(f32::MIN);
    let max = yes.iter().chain(no).map(logit).fold(f32::MIN, f32::max);
    let mass = |tokens: &[LlamaToken]| tokens.iter().map(|t| (logit(t) - max).exp()).sum::<f32>();
    let (y, n) = (mass(yes), mass(no));
    y / (y + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_probability_weighs_yes_against_no_only() {
        let mut logits = vec![0.0f32; 8];
        logits[1] = 2.0; // yes
        logits[2] = 2.0; // no
        logits[5] = 50.0; // some other token: ignored
        let p = yes_probability(&logits, &[LlamaToken(1)], &[LlamaToken(2)]);
        assert!((p - 0.5).abs() < 1e-6);
        logits[1] = 4.0;
        let p = yes_probability(&logits, &[LlamaToken(1), LlamaToken(3)], &[LlamaToken(2)]);
        assert!(p > 0.85 && p < 1.0, "{p}");
    }
}
