//! Generation: a capable model choosing tools round by round, a small model writing a grounded
//! answer under a citation grammar, and the extractive answer that always works.

use std::time::Instant;

use serde_json::json;

use super::citations::Citation;
use super::grounding;
use super::setup::Turn;
use super::TurnEvent;
use crate::llm::{
    ChatBackend, ChatMessage, ChatRequest, ChatResponse, Constraint, StreamEvent, CANCELLED,
};
use crate::orchestrator::config::ToolChoice;
use crate::orchestrator::{extractive, NOTHING_FOUND, NOT_IN_EVIDENCE};
use crate::{Error, Result};

/// A turn's answer, with its citations and the backend that wrote it.
pub(super) struct Answer {
    pub(super) text: String,
    pub(super) citations: Vec<Citation>,
    /// `kind model`, or `extractive`.
    pub(super) backend: String,
}

impl Turn<'_> {
    /// The answer from `backend`, or the extractive one when there is none or it fails.
    pub(super) fn answer(
        &mut self,
        backend: Option<&dyn ChatBackend>,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Answer> {
        let generated = match backend {
            Some(b) => self.generate_answer(b, history, on_event),
            None => Err(Error::LlmUnavailable("extractive mode".into())),
        };
        match generated {
            Ok(text) => {
                let (text, citations) = self.resolve_citations(&text)?;
                let info = backend.expect("only a backend generates").info();
                Ok(Answer {
                    text,
                    citations,
                    backend: format!("{} {}", info.kind, info.model),
                })
            }
            // The backend failed mid-turn (a server went away, a model did not load): the
            // extractive answer always works.
            Err(e @ (Error::LlmFailed { .. } | Error::LlmUnavailable(_))) => {
                if backend.is_some() {
                    let notice = format!("{e}; answering extractively from the evidence");
                    self.notice(&notice, on_event)?;
                }
                self.extractive_answer(on_event)
            }
            Err(e) => Err(e),
        }
    }

    fn generate_answer(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        // A server known to refuse tools cannot choose them: the orchestrator does.
        if self.mode.tool_choice == ToolChoice::Model && backend.info().supports_tools {
            return self.model_led(backend, history, on_event);
        }
        self.gather_evidence(on_event)?;
        self.grounded_answer(backend, history, on_event)
    }

    /// Quotes the best passages of the evidence (gathered now if none was yet).
    fn extractive_answer(&mut self, on_event: &mut dyn FnMut(TurnEvent<'_>)) -> Result<Answer> {
        if self.admitted.is_empty() {
            self.gather_evidence(on_event)?;
        }
        let (text, cited) = extractive::answer(&self.question, &self.admitted);
        on_event(TurnEvent::Token(&text));
        let citations = self.quoted_citations(&cited);
        Ok(Answer {
            text,
            citations,
            backend: "extractive".into(),
        })
    }

    /// A capable model chooses the tools, round by round, within the budgets.
    fn model_led(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        let mut messages = vec![ChatMessage::system(format!(
            "{}\nUse the tools to find evidence before answering. Tool results number each passage like [3]; cite those numbers (or the file path in brackets).",
            self.revision.config.system_prompt
        ))];
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(self.question.clone()));
        let budget = self.mode.budget;
        for round in 1..=budget.rounds {
            let tools = self.offered_tools()?;
            let mut request = self.request(messages.clone());
            request.tools = tools;
            let response = self.generate(backend, &request, round, on_event)?;
            if response.finish_reason == CANCELLED {
                return Ok(response.content);
            }
            if !request.tools.is_empty() && !backend.info().supports_tools {
                // The server just refused tools and answered without them: that answer has no
                // evidence behind it, so retrieve and ask again the grounded way.
                self.gather_evidence(on_event)?;
                return self.grounded_answer(backend, history, on_event);
            }
            if response.tool_calls.is_empty() {
                return Ok(response.content);
            }
            let mut assistant = ChatMessage::assistant(response.content.clone());
            assistant.tool_calls = response.tool_calls.clone();
            messages.push(assistant);
            for call in &response.tool_calls {
                let text = self.model_tool_call(call, &request.tools, on_event)?;
                messages.push(ChatMessage::tool_result(call, text));
            }
        }
        // Budget spent: one last round without tools.
        messages.push(ChatMessage::user(
            "The tool budget is spent. Answer now from the evidence above, citing it.".to_string(),
        ));
        let request = self.request(messages);
        let response = self.generate(backend, &request, budget.rounds + 1, on_event)?;
        Ok(response.content)
    }

    /// A small model writes the answer from the admitted evidence, under a grammar that makes
    /// every sentence end with a citation of a shown passage.
    fn grounded_answer(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        let (evidence, shown) = self.evidence_block();
        if shown.is_empty() {
            let text = NOTHING_FOUND.to_string();
            on_event(TurnEvent::Token(&text));
            return Ok(text);
        }
        let mut messages = vec![ChatMessage::system(
            self.revision.config.system_prompt.clone(),
        )];
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(format!(
            "Evidence:\n{evidence}\nQuestion: {}\nAnswer the question in one to three full sentences using only the evidence. End each sentence with the number of the evidence it comes from, like [{}].",
            self.question, shown[0]
        )));
        let mut request = self.request(messages);
        if backend.info().supports_grammar {
            // Sentences sized so that three of them fit the answer budget (about 4
            // characters a token): the grammar's last citation is never cut off.
            let sentence_chars = (self.mode.budget.answer_tokens * 4 / 3).saturating_sub(12);
            request.constraint = Some(Constraint::Grammar(citation_grammar(
                &shown,
                sentence_chars.clamp(40, 240),
            )));
        }
        let response = self.generate(backend, &request, 1, on_event)?;
        let answer = without_uncited_tail(response);
        self.checked_against(&answer, &shown, on_event)
    }

    /// `answer` after [`grounding::check`] against the passages it was shown; what changed is
    /// traced, and the user told when a sentence went.
    fn checked_against(
        &mut self,
        answer: &str,
        shown: &[i64],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        let passages: Vec<(i64, &str)> = self
            .admitted
            .iter()
            .filter(|item| shown.contains(&item.n))
            .map(|item| (item.n, item.text.as_str()))
            .collect();
        let checked = grounding::check(answer, &self.question, &passages);
        if checked.dropped > 0 || checked.moved > 0 {
            self.record(
                "answer.checked",
                json!({
                    "sentences": checked.sentences,
                    "dropped": checked.dropped,
                    "citations_moved": checked.moved,
                }),
            )?;
        }
        if checked.dropped > 0 {
            let notice = format!(
                "{} of {} sentence(s) left out: the passages shown do not say them",
                checked.dropped, checked.sentences
            );
            self.notice(&notice, on_event)?;
        }
        Ok(checked.text)
    }

    /// The evidence block shown to the model, within the mode's token budget.
    fn evidence_block(&self) -> (String, Vec<i64>) {
        let budget_chars = self.mode.budget.evidence_tokens * 4;
        let mut used = 0;
        let mut text = String::new();
        let mut shown = Vec::new();
        for item in &self.admitted {
            let room = budget_chars.saturating_sub(used);
            if room < 80 {
                break;
            }
            let passage: String = item.text.chars().take(room.min(1200)).collect();
            // The source's name, not its path: small models copy whatever they are shown.
            let name = item
                .title
                .clone()
                .or_else(|| {
                    item.path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                })
                .unwrap_or_default();
            let line = format!("[{}] {name}: {}\n", item.n, passage.replace('\n', " "));
            used += line.chars().count();
            text.push_str(&line);
            shown.push(item.n);
        }
        (text, shown)
    }

    /// A request of the mode's answer budget that the turn's stop button stops.
    fn request(&self, messages: Vec<ChatMessage>) -> ChatRequest {
        let mut request = ChatRequest::new(messages);
        request.max_tokens = self.mode.budget.answer_tokens;
        request.cancel = self.cancel.clone();
        request
    }

    /// One generation, streamed to the UI and recorded as `llm.generate`.
    fn generate(
        &mut self,
        backend: &dyn ChatBackend,
        request: &ChatRequest,
        round: usize,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<ChatResponse> {
        let started = Instant::now();
        let mut forward = |e: StreamEvent<'_>| {
            if let StreamEvent::Token(t) = e {
                on_event(TurnEvent::Token(t));
            }
        };
        let response = backend.chat(request, &mut forward)?;
        for n in &response.notices {
            self.notice(n, &mut |_| {})?;
        }
        if response.finish_reason == CANCELLED {
            self.notice("stopped: the answer ends where you stopped it", on_event)?;
        }
        if self.first_token_ms.is_none() {
            self.first_token_ms = response.first_token_ms;
        }
        self.completion_tokens += response.usage.completion_tokens;
        self.record(
            "llm.generate",
            json!({
                "round": round,
                "backend": backend.info(),
                "prompt_tokens": response.usage.prompt_tokens,
                "cached_prompt_tokens": response.usage.cached_prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
                "first_token_ms": response.first_token_ms,
                "took_ms": started.elapsed().as_millis() as u64,
                "finish_reason": response.finish_reason,
                "tool_calls": response.tool_calls.iter().map(|c| json!({"name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
                "constrained": request.constraint.is_some() || !request.tools.is_empty(),
            }),
        )?;
        Ok(response)
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

/// A GBNF grammar for one to three sentences, each ending with a citation of a shown passage,
/// or the refusal [`NOT_IN_EVIDENCE`] alone. A full stop inside a sentence must be followed by
/// more text (`11.2`, `.cargo/bin`), so the model ends a sentence where it means to instead of
/// being cut off mid-word at the length limit.
pub fn citation_grammar(shown: &[i64], sentence_chars: usize) -> String {
    let numbers = shown
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(" | ");
    format!(
        "root ::= answer | refusal\n\
         answer ::= sentence (\" \" sentence){{0,2}}\n\
         refusal ::= \"{NOT_IN_EVIDENCE}\"\n\
         sentence ::= [A-Z0-9] ([^\\[\\]\\n.] | \".\" [^ \\[\\]\\n.]){{20,{sentence_chars}}} \". [\" num \"]\"\n\
         num ::= {numbers}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_citation_grammar_names_only_shown_passages() {
        let g = citation_grammar(&[2, 5], 200);
        assert!(g.contains("{20,200}"), "{g}");
        assert!(g.contains("num ::= \"2\" | \"5\""), "{g}");
        assert!(g.starts_with("root ::= answer | refusal"), "{g}");
        assert!(
            g.contains(&format!("refusal ::= \"{NOT_IN_EVIDENCE}\"")),
            "{g}"
        );
    }
}
