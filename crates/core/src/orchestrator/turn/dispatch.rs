//! Tool dispatch: the tools a round offers, a model's call checked against them, and each call
//! itself (the pipeline, `knowledge_search`, or a direct evidence tool), run as the caller.

use std::time::Instant;

use serde_json::{json, Value};

use super::setup::Turn;
use super::{TurnEvent, RUN_PIPELINE};
use crate::evidence::EvidenceLedger;
use crate::llm::{ToolCall, ToolSpec};
use crate::orchestrator::knowledge_search::KnowledgeSearch;
use crate::pipeline::{ResolvedPipeline, RunOptions};
use crate::tools::ToolDefinition;
use crate::Result;

/// Who calls a tool when the orchestrator gathers the evidence itself: its sentence selection,
/// not the fitted text, is what the model reads.
const ORCHESTRATOR: &str = "orchestrator";

/// What a tool returned, after admission and the gates.
pub(super) struct ToolOutcome {
    /// What the model sees.
    pub(super) text: String,
    pub(super) is_error: bool,
}

/// How a tool's result is shown to the model.
#[derive(Default)]
pub(super) enum Shape {
    /// Numbered passages (`run_pipeline`).
    #[default]
    Evidence,
    /// An action tool's output, rewritten around its references, and where strings or numbers
    /// the tool made up were withheld.
    Output {
        output: Value,
        withheld: Vec<String>,
    },
    /// The `knowledge_search` manual's JSON.
    KnowledgeSearch(Value),
}

/// A tool call's result before admission.
#[derive(Default)]
pub(super) struct RawResult {
    /// Passages revalidated by the host, and refused references.
    pub(super) ledger: EvidenceLedger,
    pub(super) shape: Shape,
    pub(super) is_error: bool,
    /// The model-visible text of an error.
    pub(super) error_text: String,
    pub(super) warnings: Vec<String>,
    /// A completed pipeline run: unlocks the direct tools when it admits evidence.
    pub(super) qualifies: bool,
}

impl RawResult {
    pub(super) fn error(text: String) -> RawResult {
        RawResult {
            is_error: true,
            error_text: text,
            ..RawResult::default()
        }
    }
}

impl Turn<'_> {
    /// The orchestrator finds evidence itself: the mode's pipeline, else `knowledge_search`.
    pub(super) fn gather_evidence(
        &mut self,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<()> {
        let args = json!({ "query": self.question });
        let name = match (&self.mode.pipeline, &self.mode.knowledge_search) {
            (Some(_), _) => RUN_PIPELINE.to_string(),
            (None, Some(ks)) => ks.tool_name.clone(),
            (None, None) => return Ok(()),
        };
        let outcome = self.call_tool(&name, &args, ORCHESTRATOR, on_event)?;
        // A failed search must not read as "nothing found".
        if outcome.is_error {
            self.notice(
                &format!(
                    "{name} failed, so the answer has no evidence: {}",
                    outcome.text
                ),
                on_event,
            )?;
        }
        Ok(())
    }

    /// Calls one tool by name: the pipeline, `knowledge_search`, or a direct evidence tool.
    ///
    /// Three phases: the call itself (as the caller, references revalidated by the host); then
    /// admission through the gates (see `admission`); then the `tool.result` event.
    pub(super) fn call_tool(
        &mut self,
        name: &str,
        arguments: &Value,
        by: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<ToolOutcome> {
        let started = Instant::now();
        self.tool_calls += 1;
        self.record(
            "tool.invoke",
            json!({"tool": name, "arguments": arguments, "by": by}),
        )?;
        on_event(TurnEvent::ToolInvoke(name));
        let filter = self.gates.allows_tool(&self.mode.profile, name);
        let raw = if filter.vetoed() {
            RawResult::error(format!("Error: {}", filter.reason))
        } else {
            self.invoke(name, arguments)?
        };
        let admission = self.admit(&raw, filter, by != ORCHESTRATOR)?;
        self.record_result(name, by, started, &raw, &admission)?;
        on_event(TurnEvent::ToolResult {
            tool: name,
            admitted: admission.items.len(),
        });
        Ok(ToolOutcome {
            text: admission.text,
            is_error: admission.is_error,
        })
    }

    /// The tools offered this round. A `knowledge_search` that cannot boot fails the turn: the
    /// model must not silently lose its search tool.
    pub(super) fn offered_tools(&self) -> Result<Vec<ToolSpec>> {
        self.tools_on_offer(self.conversation.qualified)
    }

    /// The mode's tools after the gates' tool filter; the direct evidence tools only when
    /// `with_direct_tools` (a model sees them once the conversation qualifies; an outside agent
    /// sees them from the start, and a call before a qualifying pipeline is refused by name).
    pub(super) fn tools_on_offer(&self, with_direct_tools: bool) -> Result<Vec<ToolSpec>> {
        let mut tools = Vec::new();
        if self.mode.pipeline.is_some() {
            tools.push(ToolSpec {
                name: RUN_PIPELINE.into(),
                description: "Search the user's documents with the configured retrieval pipeline. Returns numbered evidence passages with their source and references for paging.".into(),
                parameters: json!({"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}}, "required": ["query"], "additionalProperties": false}),
            });
        }
        if let Some(ks) = &self.mode.knowledge_search {
            tools.push(self.knowledge_search_spec(KnowledgeSearch::boot(ks.clone())?)?);
        }
        if with_direct_tools {
            for slug in &self.mode.direct_tools {
                if let Some(tool) = self.revision.tools.get(slug) {
                    tools.push(direct_tool_spec(slug, tool));
                }
            }
        }
        tools.retain(|t| self.gates.allows_tool(&self.mode.profile, &t.name).passed());
        Ok(tools)
    }

    /// `knowledge_search` as the model sees it: told only the collections this caller may read.
    fn knowledge_search_spec(&self, ks: KnowledgeSearch) -> Result<ToolSpec> {
        let mut spec = ks.tool_spec();
        let readable: Vec<String> = self
            .ctx
            .store
            .collections()?
            .into_iter()
            .filter(|c| self.principal.scope.allows(c))
            .map(|c| c.name)
            .collect();
        // `pointer_mut`, not indexing: indexing a missing key inserts `null`, and `"enum": null`
        // is not JSON Schema (strict MCP clients refused the tool list, issue 38).
        if let Some(names) = spec
            .parameters
            .pointer_mut("/properties/namespaces/items/enum")
            .and_then(serde_json::Value::as_array_mut)
        {
            names.retain(|n| n.as_str().is_some_and(|n| readable.iter().any(|r| r == n)));
            if names.is_empty() {
                if let Some(p) = spec.parameters["properties"].as_object_mut() {
                    p.remove("namespaces");
                }
            }
        }
        Ok(spec)
    }

    /// A call the model made (see [`Turn::checked_tool_call`]); the model reads only the text.
    pub(super) fn model_tool_call(
        &mut self,
        call: &ToolCall,
        offered: &[ToolSpec],
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<String> {
        Ok(self
            .checked_tool_call(call, offered, "model", on_event)?
            .text)
    }

    /// A call chosen by `by` (the model, or an outside agent): refused (and recorded as such)
    /// when the budget is spent or its arguments are not what the offered tool takes, else
    /// called.
    pub(super) fn checked_tool_call(
        &mut self,
        call: &ToolCall,
        offered: &[ToolSpec],
        by: &str,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<ToolOutcome> {
        if self.tool_calls >= self.mode.budget.tool_calls {
            return self.refuse_call(
                call,
                by,
                "Error: the tool-call budget of this turn is spent".into(),
            );
        }
        let mut arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => {
                return self.refuse_call(
                    call,
                    by,
                    format!("Error: the arguments are not JSON: {e}"),
                );
            }
        };
        // Calls to tools not offered this round (e.g. a direct tool before a qualifying
        // pipeline) still go through call_tool, which refuses them with the reason.
        // knowledge_search checks its own arguments: its manual fixes the error strings the
        // model reads (`Error: "query argument required"`, `no valid namespaces selected`).
        let checks_itself = self
            .mode
            .knowledge_search
            .as_ref()
            .is_some_and(|ks| ks.tool_name == call.name);
        if let Some(spec) = offered
            .iter()
            .find(|t| t.name == call.name && !checks_itself)
        {
            arguments = crate::tools::schema::with_reference_spelling(&arguments, &spec.parameters);
            if let Err(e) = crate::tools::schema::validate(&arguments, &spec.parameters) {
                return self.refuse_call(call, by, format!("Error: invalid arguments: {e}"));
            }
        }
        self.call_tool(&call.name, &arguments, by, on_event)
    }

    /// Refused before the call: recorded as an invocation and its result all the same.
    fn refuse_call(&self, call: &ToolCall, by: &str, text: String) -> Result<ToolOutcome> {
        self.record(
            "tool.invoke",
            json!({"tool": call.name, "arguments": call.arguments, "by": by}),
        )?;
        self.record(
            "tool.result",
            json!({"tool": call.name, "by": by, "took_ms": 0, "is_error": true,
                   "vetoed": false, "error": text, "admitted": [], "rejected": [],
                   "warnings": [], "gates": []}),
        )?;
        Ok(ToolOutcome {
            text,
            is_error: true,
        })
    }

    /// The call itself, as the caller: nothing is admitted here.
    fn invoke(&self, name: &str, arguments: &Value) -> Result<RawResult> {
        // Booted before anything else, so a broken configuration fails every call alike.
        let ks = self
            .mode
            .knowledge_search
            .clone()
            .map(KnowledgeSearch::boot)
            .transpose()?;
        if name == RUN_PIPELINE {
            if let Some(pipeline) = self.mode.pipeline.as_deref() {
                return Ok(self.invoke_pipeline(pipeline, arguments));
            }
        }
        if let Some(ks) = ks.filter(|k| k.name() == name) {
            return self.invoke_knowledge_search(&ks, arguments);
        }
        Ok(self.invoke_direct_tool(name, arguments))
    }

    /// The mode's pipeline, as it was when the revision was applied.
    fn invoke_pipeline(&self, pipeline: &str, arguments: &Value) -> RawResult {
        let query = arguments["query"].as_str().unwrap_or_default().trim();
        if query.is_empty() {
            return RawResult::error("Error: \"query argument required\"".into());
        }
        let Some(resolved) = self.revision.pipelines.get(pipeline) else {
            return RawResult::error(format!(
                "Error: pipeline `{pipeline}` is not part of revision {} (apply the configuration again)",
                self.revision.revision
            ));
        };
        let history = match self.query_history() {
            Ok(history) => history,
            Err(e) => return RawResult::error(format!("Error: {e}")),
        };
        let options = RunOptions {
            conversation: Some(self.conversation.id.clone()),
            max_query_variants: Some(self.mode.budget.query_variants),
            history,
            ..Default::default()
        };
        match self
            .pipelines
            .run_pipeline(resolved, query, &self.principal, &options)
        {
            Ok(run) => RawResult {
                ledger: run.evidence,
                shape: Shape::Evidence,
                qualifies: true,
                ..RawResult::default()
            },
            Err(e) => RawResult::error(format!("Error: {e}")),
        }
    }

    fn invoke_knowledge_search(
        &self,
        ks: &KnowledgeSearch,
        arguments: &Value,
    ) -> Result<RawResult> {
        let outcome = ks.call(self.ctx, &self.session()?, arguments);
        if outcome.is_error {
            let mut raw = RawResult::error(outcome.text);
            raw.warnings = outcome.warnings;
            return Ok(raw);
        }
        // The tool revalidated each entry as it issued it; the ledger admits each chunk once.
        let mut ledger = EvidenceLedger::default();
        for entry in outcome.entries {
            ledger.admit(entry);
        }
        Ok(RawResult {
            ledger,
            shape: Shape::KnowledgeSearch(outcome.output),
            warnings: outcome.warnings,
            ..RawResult::default()
        })
    }

    /// A direct evidence tool of the mode, only after a qualifying pipeline has completed, with
    /// the mode's pipeline as its context.
    fn invoke_direct_tool(&self, name: &str, arguments: &Value) -> RawResult {
        let tool = self
            .mode
            .direct_tools
            .iter()
            .any(|t| t == name)
            .then(|| self.revision.tools.get(name))
            .flatten();
        let Some(tool) = tool else {
            return RawResult::error(format!("Error: there is no tool `{name}`"));
        };
        if !self.conversation.qualified {
            return RawResult::error(format!(
                "Error: `{name}` is available only after a qualifying pipeline has completed in this conversation"
            ));
        }
        let pipeline: Option<&ResolvedPipeline> = self
            .mode
            .pipeline
            .as_deref()
            .and_then(|p| self.revision.pipelines.get(p));
        match self.pipelines.call_action(
            tool,
            arguments,
            &self.principal,
            pipeline,
            &self.conversation.id,
        ) {
            Ok(call) => RawResult {
                warnings: crate::pipeline::withheld_note(&call.withheld)
                    .into_iter()
                    .collect(),
                ledger: call.evidence,
                shape: Shape::Output {
                    output: call.output,
                    withheld: call.withheld,
                },
                ..RawResult::default()
            },
            Err(e) => RawResult::error(format!("Error: {e}")),
        }
    }
}

/// A direct evidence tool as the model sees it: its derived input schema, else any object.
fn direct_tool_spec(slug: &str, tool: &ToolDefinition) -> ToolSpec {
    let parameters = tool
        .derived
        .as_ref()
        .and_then(|d| d.input_schema.clone())
        .unwrap_or(json!({"type": "object"}));
    ToolSpec {
        name: slug.to_string(),
        description: tool.description.clone(),
        parameters,
    }
}
