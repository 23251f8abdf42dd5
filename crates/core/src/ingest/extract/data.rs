//! Structured data: CSV/TSV rows and JSON values as `key: value` text.
//!
//! The label (a column's header, a value's key path) is repeated beside every value, so a
//! label a stranger wrote decides how much text each cell becomes: labels are cut to
//! [`MAX_LABEL`] bytes, and output is counted against the file's [`Budget`] as it is made.

use super::{Block, BlockKind, Budget, Extracted, NotIndexed};

/// Longest label repeated beside a value. A 200 KB header repeated into every cell of a
/// 210 KB CSV peaked at 3.5 GB before labels were cut.
const MAX_LABEL: usize = 120;
/// How many records pass between two looks at the clock.
const CHECK_EVERY: usize = 256;

/// Each record becomes `header: value; header: value`, with its line.
pub(crate) fn extract_csv(
    text: &str,
    delimiter: u8,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| NotIndexed::failed("parse_error", format!("malformed CSV header: {e}")))?
        .iter()
        .map(|h| bounded_label(h.trim()))
        .collect();
    let mut blocks = Vec::new();
    if !headers.iter().all(|h| h.is_empty()) {
        let mut header = Block::new(BlockKind::Text, headers.join(" | "));
        header.lines = Some((1, 1));
        if budget.admit(header.text.len()) {
            blocks.push(header);
        }
    }
    for (i, record) in reader.records().enumerate() {
        if i.is_multiple_of(CHECK_EVERY) {
            budget.check()?;
        }
        let record =
            record.map_err(|e| NotIndexed::failed("parse_error", format!("malformed CSV: {e}")))?;
        let fields: Vec<String> = record
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(i, v)| match headers.get(i).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h}: {}", v.trim()),
                None => v.trim().to_string(),
            })
            .collect();
        if fields.is_empty() {
            continue;
        }
        let mut block = Block::new(BlockKind::Text, fields.join("; "));
        if !budget.admit(block.text.len()) {
            break;
        }
        if let Some(pos) = record.position() {
            let line = pos.line() as u32;
            block.lines = Some((line, line));
            block.bytes = Some((pos.byte(), pos.byte() + record.as_slice().len() as u64));
        }
        blocks.push(block);
    }
    Ok(Extracted {
        title: None,
        format: if delimiter == b'\t' { "tsv" } else { "csv" },
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

/// JSON flattened to `path.to.key: value` lines, one block per top-level entry. With
/// `lines`, each line is its own value (JSON Lines).
pub(crate) fn extract_json(
    text: &str,
    lines: bool,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let mut blocks = Vec::new();
    if lines {
        for (i, line) in text.lines().enumerate() {
            if i.is_multiple_of(CHECK_EVERY) {
                budget.check()?;
            }
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                NotIndexed::failed(
                    "parse_error",
                    format!("malformed JSON on line {}: {e}", i + 1),
                )
            })?;
            let mut out = Flattened::new(budget);
            out.value("", &value);
            let full = out.full;
            if !out.text.is_empty() {
                let mut block = Block::new(BlockKind::Text, out.text);
                block.lines = Some((i as u32 + 1, i as u32 + 1));
                blocks.push(block);
            }
            if full {
                break;
            }
        }
    } else {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| NotIndexed::failed("parse_error", format!("malformed JSON: {e}")))?;
        let entries: Vec<(String, &serde_json::Value)> = match &value {
            serde_json::Value::Object(map) => {
                map.iter().map(|(k, v)| (bounded_label(k), v)).collect()
            }
            serde_json::Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v))
                .collect(),
            other => vec![(String::new(), other)],
        };
        for (i, (key, v)) in entries.into_iter().enumerate() {
            if i.is_multiple_of(CHECK_EVERY) {
                budget.check()?;
            }
            let mut out = Flattened::new(budget);
            out.value(&key, v);
            let full = out.full;
            if !out.text.is_empty() {
                blocks.push(Block::new(BlockKind::Text, out.text));
            }
            if full {
                break;
            }
        }
    }
    Ok(Extracted {
        title: None,
        format: "json",
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

/// One entry's `path: value` lines, counted against the budget as they are written.
struct Flattened<'b> {
    text: String,
    budget: &'b Budget,
    /// The budget is spent: nothing more is written, and the caller stops.
    full: bool,
}

impl<'b> Flattened<'b> {
    fn new(budget: &'b Budget) -> Self {
        Flattened {
            text: String::new(),
            budget,
            full: false,
        }
    }

    /// Walks `value` with a stack of its own (serde_json already refuses nesting past 128).
    fn value(&mut self, prefix: &str, value: &serde_json::Value) {
        use serde_json::Value;
        let mut stack = vec![(prefix.to_string(), value)];
        while let Some((path, value)) = stack.pop() {
            if self.full {
                return;
            }
            match value {
                Value::Object(map) => stack.extend(map.iter().rev().map(|(k, v)| {
                    let key = bounded_label(k);
                    let path = if path.is_empty() {
                        key
                    } else {
                        bounded_path(format!("{path}.{key}"))
                    };
                    (path, v)
                })),
                Value::Array(items) => stack.extend(
                    items
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(i, v)| (bounded_path(format!("{path}[{i}]")), v)),
                ),
                Value::Null => {}
                Value::String(s) => self.line(&path, s),
                other => self.line(&path, &other.to_string()),
            }
        }
    }

    fn line(&mut self, path: &str, value: &str) {
        let len = path.len() + value.len() + 3;
        if !self.budget.admit(len) {
            self.full = true;
            return;
        }
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        if !path.is_empty() {
            self.text.push_str(path);
            self.text.push_str(": ");
        }
        self.text.push_str(value);
    }
}

/// A label cut to [`MAX_LABEL`] bytes (at a character boundary), marked with an ellipsis.
fn bounded_label(label: &str) -> String {
    if label.len() <= MAX_LABEL {
        return label.to_string();
    }
    let mut end = MAX_LABEL;
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &label[..end])
}

/// A key path kept to its last [`MAX_LABEL`] bytes: the keys nearest the value say most.
fn bounded_path(path: String) -> String {
    if path.len() <= 2 * MAX_LABEL {
        return path;
    }
    let mut start = path.len() - MAX_LABEL;
    while !path.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &path[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_are_labelled() {
        let e = extract_csv("name,city\nAda,London\nAlan,\n", b',', &Budget::unbounded()).unwrap();
        let texts: Vec<_> = e.blocks.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(
            texts,
            vec!["name | city", "name: Ada; city: London", "name: Alan"]
        );
        assert_eq!(e.blocks[1].lines, Some((2, 2)));
    }

    #[test]
    fn json_is_flattened() {
        let e = extract_json(
            r#"{"a": {"b": [1, "x"]}, "c": null}"#,
            false,
            &Budget::unbounded(),
        )
        .unwrap();
        assert_eq!(e.blocks[0].text, "a.b[0]: 1\na.b[1]: x");
        let err = extract_json("{\"a\": ", false, &Budget::unbounded()).unwrap_err();
        assert!(matches!(
            err,
            NotIndexed::Failed {
                reason: "parse_error",
                ..
            }
        ));
    }

    #[test]
    fn a_long_header_is_cut_before_it_is_repeated_into_every_cell() {
        let header = "h".repeat(200_000);
        let csv = format!("{header}\n{}", "x\n".repeat(5_000));
        let budget = Budget::new(csv.len() as u64, std::time::Duration::from_secs(60));
        let e = extract_csv(&csv, b',', &budget).unwrap();
        let total: usize = e.blocks.iter().map(|b| b.text.len()).sum();
        assert!(total < 4 * csv.len(), "{total} bytes from {}", csv.len());
        assert_eq!(e.blocks.len(), 5_001);
        assert_eq!(e.blocks[1].text, format!("{}…: x", "h".repeat(MAX_LABEL)));
    }

    #[test]
    fn long_key_paths_are_cut_and_output_stops_at_the_budget() {
        let key = "k".repeat(2_000);
        let leaves: Vec<String> = (0..500).map(|i| format!("\"{key}{i}\": {i}")).collect();
        let json = format!("{{\"{key}\": {{\"{key}\": {{{}}}}}}}", leaves.join(","));
        let budget = Budget::new(json.len() as u64, std::time::Duration::from_secs(60));
        let e = extract_json(&json, false, &budget).unwrap();
        let total: usize = e.blocks.iter().map(|b| b.text.len()).sum();
        // Unbounded, each of the 500 values repeated its 6 KB path: three times the file.
        assert!(total < json.len() / 4, "{total} bytes from {}", json.len());
        let first = e.blocks[0].text.lines().next().unwrap();
        assert!(
            first.starts_with('…') && first.len() < 3 * MAX_LABEL,
            "{first}"
        );

        // Lines that expand past the allowance stop the file there, and it says so.
        let line = format!(
            "{{\"{}\": [{}]}}",
            "a".repeat(100),
            "1,".repeat(20_000) + "1"
        );
        let jsonl = format!("{line}\n").repeat(10);
        let budget = Budget::new(jsonl.len() as u64 / 40, std::time::Duration::from_secs(60));
        let e = extract_json(&jsonl, true, &budget).unwrap();
        assert!(e.blocks.len() < 10);
        assert!(budget.cap_note(jsonl.len() as u64).is_some());
    }
}
