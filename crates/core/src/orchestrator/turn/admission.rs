//! Admission and gates: a tool's passages through the `before:tool.result` gates into the
//! conversation's ledger, the text the model will see built from what was admitted, and the
//! gates over that whole text. A veto rolls the admission back, so a withheld result neither
//! enters the ledger nor qualifies the conversation.

use std::time::Instant;

use serde_json::{json, Value};

use super::dispatch::{RawResult, Shape};
use super::setup::Turn;
use crate::evidence::LedgerEntry;
use crate::orchestrator::conversation::{self, EvidenceItem};
use crate::orchestrator::fit::fit_json;
use crate::orchestrator::gates::{Gate, GateDecision, Verdict};
use crate::store::Tx;
use crate::Result;

/// A tool's result after admission and the gates.
pub(super) struct Admission {
    /// The passages admitted (none when the result was vetoed).
    pub(super) items: Vec<EvidenceItem>,
    /// What the model sees.
    pub(super) text: String,
    pub(super) is_error: bool,
    pub(super) vetoed: bool,
    /// The tool filter's verdict, then every gate verdict that was not a pass.
    pub(super) decisions: Vec<GateDecision>,
}

impl Turn<'_> {
    /// Admits a result in one transaction, undone when the gates veto the whole text.
    pub(super) fn admit(&mut self, raw: &RawResult, filter: GateDecision) -> Result<Admission> {
        let store = self.ctx.store;
        let tx = store.write()?;
        let admitted_before = self.admitted.len();
        let mut decisions = vec![filter];
        let mut items = self.admit_entries(&tx, &raw.ledger.entries, &mut decisions)?;
        let text = self.fitted_model_text(raw, &items, &mut decisions);
        let gated = self.gates.before_tool_result(&text);
        decisions.extend(gated.decisions.iter().cloned());
        if gated.vetoed {
            tx.rollback()?;
            self.admitted.truncate(admitted_before);
            items.clear();
        } else {
            if raw.qualifies && !items.is_empty() && !self.conversation.qualified {
                conversation::mark_qualified(&tx, &self.conversation.id)?;
                self.conversation.qualified = true;
            }
            tx.commit()?;
        }
        Ok(Admission {
            items,
            text: gated.text,
            is_error: raw.is_error || gated.vetoed,
            vetoed: gated.vetoed,
            decisions,
        })
    }

    /// Each passage through the gates and into the ledger (once per chunk); a vetoed passage
    /// is left out.
    fn admit_entries(
        &mut self,
        tx: &Tx<'_>,
        entries: &[LedgerEntry],
        decisions: &mut Vec<GateDecision>,
    ) -> Result<Vec<EvidenceItem>> {
        let mut items = Vec::new();
        for entry in entries {
            let gated = self.gates.before_tool_result(&entry.text);
            decisions.extend(gated.decisions.into_iter().filter(|d| !d.passed()));
            if gated.vetoed {
                continue;
            }
            let item =
                conversation::admit(tx, &self.conversation.id, self.turn, entry, &gated.text)?;
            if !self.admitted.iter().any(|a| a.n == item.n) {
                self.admitted.push(item.clone());
            }
            items.push(item);
        }
        Ok(items)
    }

    /// What the model sees of a result, within the mode's evidence budget and the output
    /// length gate's limit: whole passages of the lowest rank are left out, so the result is
    /// still the JSON the caller parses (a veto gate still sees it whole, and decides).
    fn fitted_model_text(
        &self,
        raw: &RawResult,
        items: &[EvidenceItem],
        decisions: &mut Vec<GateDecision>,
    ) -> String {
        if raw.is_error {
            return raw.error_text.clone();
        }
        let budget_chars = self.mode.budget.evidence_tokens * 4;
        let gate_chars = self.gates.truncates_at().unwrap_or(usize::MAX);
        let limit = budget_chars.min(gate_chars);
        let (value, write) = model_value(raw, items);
        let fitted = fit_json(value, limit, write);
        if fitted.was_cut() {
            let by = if gate_chars <= budget_chars {
                "the output length gate"
            } else {
                "the mode's evidence budget"
            };
            decisions.push(GateDecision::new(
                Gate::OutputLength,
                Verdict::Truncate,
                format!(
                    "{} passage(s) of the lowest rank left out{} to stay within {by} ({limit} characters)",
                    fitted.items_left_out,
                    if fitted.text_shortened { " and a text shortened" } else { "" },
                ),
            ));
        }
        fitted.text
    }

    /// The `tool.result` event.
    pub(super) fn record_result(
        &self,
        name: &str,
        by: &str,
        started: Instant,
        raw: &RawResult,
        admission: &Admission,
    ) -> Result<()> {
        self.record(
            "tool.result",
            json!({
                "tool": name,
                "by": by,
                "took_ms": started.elapsed().as_millis() as u64,
                "is_error": admission.is_error,
                "vetoed": admission.vetoed,
                "admitted": admission.items.iter().map(|i| i.n).collect::<Vec<_>>(),
                "rejected": raw.ledger.rejected.iter().map(|r| json!({"reference": r.reference, "reason": r.reason})).collect::<Vec<_>>(),
                "warnings": raw.warnings,
                "gates": admission.decisions,
                "chars": admission.text.chars().count(),
                "error": if admission.is_error { Some(admission.text.clone()) } else { None },
            }),
        )
    }
}

/// What the model sees of a result, built from the admitted passages (after the gates), never
/// from the tool's own words; and how it is written.
fn model_value(raw: &RawResult, items: &[EvidenceItem]) -> (Value, fn(&Value) -> String) {
    match &raw.shape {
        Shape::Evidence => (
            json!({ "evidence": items.iter().map(evidence_json).collect::<Vec<_>>() }),
            Value::to_string,
        ),
        Shape::Output { output, withheld } => {
            let mut output = output.clone();
            rewrite_around_refs(&mut output, &raw.ledger.entries, items);
            if let (Some(map), false) = (output.as_object_mut(), withheld.is_empty()) {
                map.insert(
                    "withheld".into(),
                    json!(format!(
                        "{} field(s) the tool wrote itself, not text from the library: {}",
                        withheld.len(),
                        withheld.join(", ")
                    )),
                );
            }
            (output, Value::to_string)
        }
        Shape::KnowledgeSearch(output) => (
            knowledge_search_value(output.clone(), &raw.ledger.entries, items),
            // Written in the manual's field order (a `Value` sorts its keys).
            crate::orchestrator::knowledge_search::manual_text,
        ),
    }
}

/// The manual's JSON, each content as admitted (after the gates); results whose passage was
/// withheld are dropped and the rest ranked again.
fn knowledge_search_value(
    mut output: Value,
    entries: &[LedgerEntry],
    items: &[EvidenceItem],
) -> Value {
    if let Some(results) = output["results"].as_array_mut() {
        let kept: Vec<Value> = results
            .iter()
            .zip(entries)
            .filter_map(|(r, entry)| {
                let item = items.iter().find(|i| i.chunk_id == entry.chunk_id)?;
                let mut r = r.clone();
                r["content"] = json!(item.text);
                Some(r)
            })
            .collect();
        *results = kept;
        for (rank, r) in results.iter_mut().enumerate() {
            r["rank"] = json!(rank + 1);
        }
    }
    output
}

/// A passage as a tool result shows it to the model.
fn evidence_json(item: &EvidenceItem) -> Value {
    json!({
        "cite": format!("[{}]", item.n),
        "source": item.locator(),
        "content": item.text,
        "evidence_ref": item.evidence_ref,
        "sourceRef": item.source_ref,
    })
}

/// Rewrites an action tool's output around its references: beside every `evidence_ref` (or
/// `evidence_refs`), `cite` becomes the admitted passages' numbers, and `text` stays only when
/// every reference there was admitted and no gate changed its passage (the host already kept
/// it only if it is theirs: their passages, or the committed page they cover); otherwise it
/// becomes the admitted passages' text (after the gates), and a reference that was refused or
/// withheld gets no text. The tool's own words never stand in for evidence.
fn rewrite_around_refs(value: &mut Value, entries: &[LedgerEntry], items: &[EvidenceItem]) {
    let admitted_as = |reference: &str| {
        let entry = entries.iter().find(|e| e.evidence_ref == reference)?;
        let item = items.iter().find(|i| i.chunk_id == entry.chunk_id)?;
        Some((entry, item))
    };
    match value {
        Value::Object(map) => {
            let mut refs: Vec<String> = Vec::new();
            if let Some(r) = map.get("evidence_ref").and_then(Value::as_str) {
                refs.push(r.to_string());
            }
            if let Some(list) = map.get("evidence_refs").and_then(Value::as_array) {
                refs.extend(list.iter().filter_map(|r| r.as_str().map(str::to_string)));
            }
            if !refs.is_empty() {
                let admitted: Vec<(&LedgerEntry, &EvidenceItem)> =
                    refs.iter().filter_map(|r| admitted_as(r)).collect();
                let cites: Vec<String> =
                    admitted.iter().map(|(_, i)| format!("[{}]", i.n)).collect();
                // A gate that changed a passage (a redaction) must change what is shown too.
                let ungated = admitted.iter().all(|(e, i)| e.text == i.text);
                let keeps_text = admitted.len() == refs.len()
                    && ungated
                    && map
                        .get("text")
                        .and_then(Value::as_str)
                        .is_some_and(|t| !t.trim().is_empty());
                if !keeps_text {
                    let texts: Vec<&str> = admitted.iter().map(|(_, i)| i.text.as_str()).collect();
                    map.insert("text".into(), json!(texts.join("\n")));
                }
                map.insert("cite".into(), json!(cites.join("")));
            }
            for (key, v) in map.iter_mut() {
                if key != "text" {
                    rewrite_around_refs(v, entries, items);
                }
            }
        }
        Value::Array(list) => list
            .iter_mut()
            .for_each(|v| rewrite_around_refs(v, entries, items)),
        _ => {}
    }
}
