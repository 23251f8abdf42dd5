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
    /// Admits a result in one transaction, undone when the gates veto the whole text. When
    /// `reader_sees_text` (a model or an outside agent reads the result itself), a passage the
    /// fitted text leaves out is not admitted: nobody saw it, so nothing may cite it. The
    /// orchestrator's own search keeps every passage, as its sentence selection reads them all.
    pub(super) fn admit(
        &mut self,
        raw: &RawResult,
        filter: GateDecision,
        reader_sees_text: bool,
    ) -> Result<Admission> {
        let store = self.ctx.store;
        let tx = store.write()?;
        let admitted_before = self.admitted.len();
        let mut decisions = vec![filter];
        let mut items = self.admit_entries(&tx, &raw.ledger.entries, &mut decisions)?;
        let (text, fitted) = self.fitted_model_text(raw, &items, &mut decisions);
        if reader_sees_text {
            let shown = still_shown(raw, fitted.as_ref(), &text, &items);
            self.withdraw_unshown(&tx, &mut items, &shown, admitted_before)?;
        }
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

    /// Takes the passages `shown` marks false out of `items`, and out of the ledger where this
    /// result admitted them (one shown before stays: the reader saw it then).
    fn withdraw_unshown(
        &mut self,
        tx: &Tx<'_>,
        items: &mut Vec<EvidenceItem>,
        shown: &[bool],
        admitted_before: usize,
    ) -> Result<()> {
        let (kept, left_out): (Vec<_>, Vec<_>) = std::mem::take(items)
            .into_iter()
            .zip(shown)
            .partition(|(_, shown)| **shown);
        *items = kept.into_iter().map(|(item, _)| item).collect();
        for (item, _) in left_out {
            if items.iter().any(|i| i.n == item.n) {
                continue;
            }
            let new = self.admitted[admitted_before..]
                .iter()
                .position(|a| a.n == item.n);
            if let Some(at) = new {
                conversation::withdraw(tx, &self.conversation.id, item.n)?;
                self.admitted.remove(admitted_before + at);
            }
        }
        Ok(())
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
    /// Returns the text and the value it writes (`None` when it is not JSON).
    fn fitted_model_text(
        &self,
        raw: &RawResult,
        items: &[EvidenceItem],
        decisions: &mut Vec<GateDecision>,
    ) -> (String, Option<Value>) {
        if raw.is_error {
            return (raw.error_text.clone(), None);
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
        (fitted.text, fitted.value)
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

/// Which of `items` the fitted result still shows. A list result keeps its first passages (the
/// fit drops from the end); an action tool's output shows those whose reference is still in it;
/// text that is no longer JSON shows a passage only if it holds it whole.
fn still_shown(
    raw: &RawResult,
    fitted: Option<&Value>,
    text: &str,
    items: &[EvidenceItem],
) -> Vec<bool> {
    let Some(value) = fitted else {
        return items
            .iter()
            .map(|i| {
                // The passage as the JSON text writes it, without its quotes.
                let written = Value::String(i.text.clone()).to_string();
                text.contains(&written[1..written.len() - 1])
            })
            .collect();
    };
    let first = |list: &str| {
        let kept = value[list].as_array().map_or(0, Vec::len);
        (0..items.len()).map(|i| i < kept).collect()
    };
    match &raw.shape {
        Shape::Evidence => first("evidence"),
        Shape::KnowledgeSearch(_) => first("results"),
        Shape::Output { .. } => {
            let mut refs = Vec::new();
            references_in(value, &mut refs);
            items
                .iter()
                .map(|item| {
                    raw.ledger.entries.iter().any(|e| {
                        e.chunk_id == item.chunk_id && refs.contains(&e.evidence_ref.as_str())
                    })
                })
                .collect()
        }
    }
}

/// Every `evidence_ref` and `evidence_refs` entry under `value`.
fn references_in<'v>(value: &'v Value, refs: &mut Vec<&'v str>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("evidence_ref", Value::String(r)) => refs.push(r),
                    ("evidence_refs", Value::Array(list)) => {
                        refs.extend(list.iter().filter_map(Value::as_str))
                    }
                    _ => references_in(v, refs),
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| references_in(v, refs)),
        _ => {}
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::ids::{ChunkId, DocumentId, RevisionId};
    use crate::store::ChunkLocation;

    fn entry(chunk: i64, reference: &str) -> LedgerEntry {
        LedgerEntry {
            evidence_ref: reference.into(),
            source_ref: format!("s{chunk}"),
            chunk_id: ChunkId(chunk),
            document_id: DocumentId(1),
            revision_id: RevisionId(1),
            ordinal: chunk,
            path: PathBuf::from("/docs/a.md"),
            title: None,
            collection: "notes".into(),
            heading_path: String::new(),
            location: ChunkLocation::default(),
            text: format!("passage {chunk}"),
            score: None,
            admitted_by: "fetch_document_chunks".into(),
        }
    }

    fn item(n: i64, entry: &LedgerEntry) -> EvidenceItem {
        EvidenceItem {
            n,
            chunk_id: entry.chunk_id,
            document_id: entry.document_id,
            revision_id: entry.revision_id,
            path: entry.path.clone(),
            title: None,
            collection: entry.collection.clone(),
            heading_path: String::new(),
            location: ChunkLocation::default(),
            text: entry.text.clone(),
            admitted_by: entry.admitted_by.clone(),
            turn: 1,
            evidence_ref: entry.evidence_ref.clone(),
            source_ref: entry.source_ref.clone(),
        }
    }

    #[test]
    fn an_action_output_shows_the_passages_whose_references_it_still_holds() {
        let entries = vec![entry(1, "r1"), entry(2, "r2"), entry(3, "r3")];
        let items: Vec<EvidenceItem> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| item(i as i64 + 1, e))
            .collect();
        let mut raw = RawResult {
            shape: Shape::Output {
                output: Value::Null,
                withheld: Vec::new(),
            },
            ..RawResult::default()
        };
        raw.ledger.entries = entries;
        // The fit dropped the page's last chunk; the second is named in a list of references.
        let fitted = json!({"chunks": [{"evidence_ref": "r1", "text": "passage 1"}], "see": {"evidence_refs": ["r2"]}});
        assert_eq!(
            still_shown(&raw, Some(&fitted), "", &items),
            vec![true, true, false]
        );
    }

    #[test]
    fn a_list_result_shows_its_first_passages_and_text_cut_short_only_what_it_holds_whole() {
        let entries = [entry(1, "r1"), entry(2, "r2")];
        let items: Vec<EvidenceItem> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| item(i as i64 + 1, e))
            .collect();
        let raw = RawResult::default();
        let fitted = json!({"evidence": [{"cite": "[1]"}], "left_out": "1 item(s)"});
        assert_eq!(
            still_shown(&raw, Some(&fitted), "", &items),
            vec![true, false]
        );
        let cut = r#"{"evidence":[{"content":"passage 1"},{"content":"pass"#;
        assert_eq!(still_shown(&raw, None, cut, &items), vec![true, false]);
    }
}
