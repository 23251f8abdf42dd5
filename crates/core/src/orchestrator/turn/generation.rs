//! Generation: a capable model choosing tools round by round, a small model writing a grounded
//! answer (`grounded`), and the extractive answer that always works.

use std::time::Instant;

use serde_json::json;

use super::citations::Citation;
use super::grounded::Written;
use super::setup::Turn;
use super::TurnEvent;
use crate::llm::{ChatBackend, ChatMessage, ChatRequest, ChatResponse, StreamEvent, CANCELLED};
use crate::orchestrator::config::ToolChoice;
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
        let label = |b: &dyn ChatBackend| format!("{} {}", b.info().kind, b.info().model);
        match generated {
            Ok(Written::Model { text, quote }) => {
                let (mut text, mut citations) = self.resolve_citations(&text)?;
                // The quote's citation is known, not parsed: its own brackets stay as they are.
                if let Some((sentence, n)) = quote {
                    let line = format!("\n\nYour documents say: “{sentence}” [{n}]");
                    on_event(TurnEvent::Token(&line));
                    text.push_str(&line);
                    if !citations.iter().any(|c| c.n == n) {
                        citations.extend(self.quoted_citations(&[n]));
                    }
                }
                Ok(Answer {
                    text,
                    citations,
                    backend: label(backend.expect("only a backend generates")),
                })
            }
            // A refusal or a quote the turn chose: its citations are known, not parsed, as
            // the documents' own brackets must not be read as citations.
            Ok(Written::Chosen { text, cited }) => Ok(Answer {
                citations: self.quoted_citations(&cited),
                text,
                backend: label(backend.expect("only a backend generates")),
            }),
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
    ) -> Result<Written> {
        // A server known to refuse tools cannot choose them: the orchestrator does.
        if self.mode.tool_choice == ToolChoice::Model && backend.info().supports_tools {
            return self.model_led(backend, history, on_event);
        }
        self.gather_evidence(on_event)?;
        self.grounded_answer(backend, history, on_event)
    }

    /// Quotes the best sentences of the evidence (gathered now if none was yet).
    fn extractive_answer(&mut self, on_event: &mut dyn FnMut(TurnEvent<'_>)) -> Result<Answer> {
        if self.admitted.is_empty() {
            self.gather_evidence(on_event)?;
        }
        let Written::Chosen { text, cited } = self.extractive_from_selection(on_event)? else {
            unreachable!("the extractive answer is chosen, not generated");
        };
        Ok(Answer {
            citations: self.quoted_citations(&cited),
            text,
            backend: "extractive".into(),
        })
    }

    /// A capable model chooses the tools, round by round, within the budgets.
    fn model_led(
        &mut self,
        backend: &dyn ChatBackend,
        history: &[ChatMessage],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Written> {
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
                return Ok(Written::model(response.content));
            }
            if !request.tools.is_empty() && !backend.info().supports_tools {
                // The server just refused tools and answered without them: that answer has no
                // evidence behind it, so retrieve and ask again the grounded way.
                self.gather_evidence(on_event)?;
                return self.grounded_answer(backend, history, on_event);
            }
            if response.tool_calls.is_empty() {
                return Ok(Written::model(response.content));
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
        Ok(Written::model(response.content))
    }

    /// A request of the mode's answer budget that the turn's stop button stops.
    pub(super) fn request(&self, messages: Vec<ChatMessage>) -> ChatRequest {
        let mut request = ChatRequest::new(messages);
        request.max_tokens = self.mode.budget.answer_tokens;
        request.cancel = self.cancel.clone();
        request
    }

    /// One generation, streamed to the UI and recorded as `llm.generate`.
    pub(super) fn generate(
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
                "threads": response.threads,
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
