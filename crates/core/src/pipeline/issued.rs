//! What a direct evidence tool may show a model: only what Quarry itself gave the tool during
//! the call. The library operations' answers (passages, titles, paths, snippets, cursors,
//! ordinals, scores) are recorded as they are handed over; a string or number the tool made up
//! — a figure, a summary from `ctx.llm`, a page fetched with `ctx.http_get` — is withheld, so
//! it can never sit beside a citation. Text beside references must be those references' own:
//! their passages, or the committed page `fetch_source_document` gave with them.

use serde_json::{Map, Value};

/// The ctx operations whose answers come from the library, not from a model or the network.
const LIBRARY_OPERATIONS: [&str; 5] = [
    "search",
    "search_documents",
    "fetch_document_chunks",
    "fetch_source_document",
    "fetch_neighbors",
];

/// Fields that hold references: they pass only as issued, whole.
const REFERENCE_FIELDS: [&str; 4] = ["evidence_ref", "evidence_refs", "sourceRef", "source_ref"];

/// The shortest part of an issued text that passes as an excerpt. Shorter parts must be whole
/// issued strings, so a tool cannot cut "runs at 99 bar" out of "it never runs at 99 bar".
const MIN_EXCERPT_CHARS: usize = 40;

/// What Quarry handed a tool during one call: strings (whitespace collapsed), numbers, and the
/// pages of committed text with the references that cover them.
#[derive(Debug, Clone, Default)]
pub struct IssuedText {
    texts: Vec<String>,
    numbers: Vec<f64>,
    pages: Vec<(String, Vec<String>)>,
}

impl IssuedText {
    /// Records an operation's answer, when the operation reads the library.
    pub fn record(&mut self, operation: &str, answer: &Value) {
        if !LIBRARY_OPERATIONS.contains(&operation) {
            return;
        }
        self.record_all(answer);
        if operation == "fetch_source_document" {
            let refs = answer["evidence_refs"]
                .as_array()
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let text = collapsed(answer["text"].as_str().unwrap_or_default());
            self.pages.push((text, refs));
        }
    }

    /// Records every string and number in `value` (the call's input, say).
    pub fn record_all(&mut self, value: &Value) {
        match value {
            Value::String(s) => {
                let s = collapsed(s);
                if !s.is_empty() {
                    self.texts.push(s);
                }
            }
            Value::Number(n) => self.numbers.extend(n.as_f64()),
            Value::Array(items) => items.iter().for_each(|v| self.record_all(v)),
            Value::Object(map) => map.values().for_each(|v| self.record_all(v)),
            _ => {}
        }
    }

    /// Whether `text` is something Quarry gave the tool: a whole string, or an excerpt of one
    /// at least [`MIN_EXCERPT_CHARS`] long (a trailing ellipsis, as a tool marks a shortened
    /// passage, does not count).
    pub fn holds(&self, text: &str) -> bool {
        excerpt_of(text, self.texts.iter().map(String::as_str))
    }

    /// Whether `text` may stand beside `refs`: their own passages (`admitted`, each or joined),
    /// or a page of committed text Quarry gave with every one of them. The input never counts.
    pub fn belongs_to(&self, text: &str, refs: &[String], admitted: &[String]) -> bool {
        let passages: Vec<String> = admitted
            .iter()
            .map(|a| collapsed(a))
            .chain([collapsed(&admitted.join(" "))])
            .collect();
        let pages = self
            .pages
            .iter()
            .filter(|(_, covers)| refs.iter().all(|r| covers.contains(r)))
            .map(|(page, _)| page.as_str());
        excerpt_of(text, passages.iter().map(String::as_str).chain(pages))
    }

    fn holds_whole(&self, text: &str) -> bool {
        let text = collapsed(text);
        self.texts.contains(&text)
    }

    fn holds_number(&self, n: &serde_json::Number) -> bool {
        n.as_f64().is_some_and(|n| self.numbers.contains(&n))
    }
}

fn excerpt_of<'a>(text: &str, sources: impl IntoIterator<Item = &'a str>) -> bool {
    let text = collapsed(text);
    let text = text
        .trim_end_matches('…')
        .trim_end_matches("...")
        .trim_end();
    let long_enough = text.chars().count() >= MIN_EXCERPT_CHARS;
    text.is_empty()
        || sources
            .into_iter()
            .any(|s| s == text || (long_enough && s.contains(text)))
}

/// The output a model may see: every string and number the tool made up removed, and the
/// dotted path of each one removed (for the trace and the model's note).
pub fn visible_output(output: &Value, issued: &IssuedText) -> (Value, Vec<String>) {
    let mut withheld = Vec::new();
    let visible = visible(output, issued, "", &mut withheld).unwrap_or(Value::Null);
    (visible, withheld)
}

/// Whether an object holds references the host admits (`admit_returned_refs` reads the same).
fn holds_refs(map: &Map<String, Value>) -> bool {
    map.get("evidence_ref").is_some_and(Value::is_string)
        || map.get("evidence_refs").is_some_and(Value::is_array)
}

/// `None` when the value itself is withheld.
fn visible(
    value: &Value,
    issued: &IssuedText,
    path: &str,
    withheld: &mut Vec<String>,
) -> Option<Value> {
    let mut withhold = || {
        withheld.push(if path.is_empty() {
            "output".into()
        } else {
            path.into()
        });
        None
    };
    match value {
        Value::String(s) if !issued.holds(s) => withhold(),
        Value::Number(n) if !issued.holds_number(n) => withhold(),
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| visible(v, issued, &format!("{path}[{i}]"), withheld))
                .collect(),
        )),
        Value::Object(map) => {
            // Beside references, `text` is the host's by now (`admit_returned_refs`).
            let beside_refs = holds_refs(map);
            let mut kept = Map::new();
            for (key, v) in map {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let shown = if beside_refs && key == "text" {
                    Some(v.clone())
                } else if REFERENCE_FIELDS.contains(&key.as_str()) {
                    reference(v, issued, &at, withheld)
                } else {
                    visible(v, issued, &at, withheld)
                };
                if let Some(v) = shown {
                    kept.insert(key.clone(), v);
                }
            }
            Some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

/// A reference field: each reference passes only as Quarry issued it, whole.
fn reference(
    value: &Value,
    issued: &IssuedText,
    path: &str,
    withheld: &mut Vec<String>,
) -> Option<Value> {
    match value {
        Value::String(s) if issued.holds_whole(s) => Some(value.clone()),
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| reference(v, issued, &format!("{path}[{i}]"), withheld))
                .collect(),
        )),
        Value::Null => Some(Value::Null),
        _ => {
            withheld.push(path.into());
            None
        }
    }
}

/// The trace's and the tester's line for what a model was not shown, if anything was withheld.
pub fn withheld_note(paths: &[String]) -> Option<String> {
    (!paths.is_empty()).then(|| {
        format!(
            "withheld from the model, as what Quarry did not give the tool: {}",
            paths.join(", ")
        )
    })
}

fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PASSAGE: &str = "The pump runs at  6 bar\nat most, and never at 99 bar in service.";

    fn issued() -> IssuedText {
        let mut issued = IssuedText::default();
        issued.record(
            "search_documents",
            &json!([{"sourceRef": "qr1.src", "title": "Pump manual", "snippet": PASSAGE,
                     "score": 0.5, "ordinal": 3}]),
        );
        issued.record(
            "fetch_source_document",
            &json!({"text": "# Pump\n\nThe pump runs at 6 bar.", "evidence_refs": ["qr1.a", "qr1.b"]}),
        );
        issued.record("llm", &json!("The pump runs at 99 bar."));
        issued.record("http_get", &json!({"body": "99 bar", "status": 200}));
        issued
    }

    #[test]
    fn library_text_and_long_excerpts_pass_and_a_tools_own_words_do_not() {
        let issued = issued();
        assert!(issued.holds("Pump manual"));
        assert!(
            issued.holds("The pump runs at 6 bar at most, and never at"),
            "whitespace is not text"
        );
        assert!(
            issued.holds("The pump runs at 6 bar at most, and never…"),
            "a shortened passage"
        );
        assert!(issued.holds(""));
        assert!(
            !issued.holds("never at 99 bar"),
            "too short a part to keep its sense"
        );
        assert!(!issued.holds("Pump"), "a part of a title");
        assert!(
            !issued.holds("The pump runs at 99 bar."),
            "ctx.llm wrote it"
        );
        assert!(!issued.holds("99 bar"), "ctx.http_get fetched it");
        assert!(!issued.holds_number(&serde_json::Number::from(200)));
        assert!(issued.holds_number(&serde_json::Number::from(3)));
    }

    #[test]
    fn text_beside_references_must_be_theirs() {
        let issued = issued();
        let refs = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let page = "# Pump\n\nThe pump runs at 6 bar.";
        assert!(
            issued.belongs_to(page, &refs(&["qr1.a"]), &[]),
            "the page they cover"
        );
        assert!(
            !issued.belongs_to(page, &refs(&["qr1.c"]), &[]),
            "a page that does not carry the reference"
        );
        assert!(
            !issued.belongs_to(PASSAGE, &refs(&["qr1.a"]), &["Another passage.".into()]),
            "another passage's text"
        );
        assert!(issued.belongs_to(
            "The first passage. The second one.",
            &refs(&["qr1.x", "qr1.y"]),
            &["The first passage.".into(), "The second one.".into()]
        ));
    }

    #[test]
    fn the_visible_output_keeps_issued_references_numbers_and_library_text_only() {
        let output = json!({
            "matches": [{"sourceRef": "qr1.src", "title": "Pump manual", "score": 0.5,
                         "note": "99 bar, made up", "tags": ["Pump manual", "invented"]}],
            "evidence_refs": ["qr1.a", "The pump runs at 99 bar"],
            "text": "A passage admitted from an earlier call.",
            "summary": "The pump runs at 99 bar.",
            "pressure_bar": 99,
            "more": true
        });
        let (visible, withheld) = visible_output(&output, &issued());
        assert_eq!(
            visible,
            json!({
                "matches": [{"sourceRef": "qr1.src", "title": "Pump manual", "score": 0.5,
                             "tags": ["Pump manual"]}],
                "evidence_refs": ["qr1.a"],
                "text": "A passage admitted from an earlier call.",
                "more": true
            })
        );
        assert_eq!(
            withheld,
            [
                "evidence_refs[1]",
                "matches[0].note",
                "matches[0].tags[1]",
                "pressure_bar",
                "summary"
            ]
        );
    }
}
