//! Structured data: CSV/TSV rows and JSON values as `key: value` text.

use super::{Block, BlockKind, Extracted, NotIndexed};

/// Each record becomes `header: value; header: value`, with its line.
pub(crate) fn extract_csv(text: &str, delimiter: u8) -> Result<Extracted, NotIndexed> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| NotIndexed::failed("parse_error", format!("malformed CSV header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut blocks = Vec::new();
    if !headers.iter().all(|h| h.is_empty()) {
        let mut header = Block::new(BlockKind::Text, headers.join(" | "));
        header.lines = Some((1, 1));
        blocks.push(header);
    }
    for record in reader.records() {
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
    })
}

/// JSON flattened to `path.to.key: value` lines, one block per top-level entry. With
/// `lines`, each line is its own value (JSON Lines).
pub(crate) fn extract_json(text: &str, lines: bool) -> Result<Extracted, NotIndexed> {
    let mut blocks = Vec::new();
    if lines {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                NotIndexed::failed(
                    "parse_error",
                    format!("malformed JSON on line {}: {e}", i + 1),
                )
            })?;
            let mut out = Vec::new();
            flatten("", &value, &mut out);
            let mut block = Block::new(BlockKind::Text, out.join("\n"));
            block.lines = Some((i as u32 + 1, i as u32 + 1));
            blocks.push(block);
        }
    } else {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| NotIndexed::failed("parse_error", format!("malformed JSON: {e}")))?;
        let entries: Vec<(String, &serde_json::Value)> = match &value {
            serde_json::Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            serde_json::Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v))
                .collect(),
            other => vec![(String::new(), other)],
        };
        for (key, v) in entries {
            let mut out = Vec::new();
            flatten(&key, v, &mut out);
            if !out.is_empty() {
                blocks.push(Block::new(BlockKind::Text, out.join("\n")));
            }
        }
    }
    Ok(Extracted {
        title: None,
        format: "json",
        blocks,
        warning: None,
        reader_text: String::new(),
    })
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        Value::Null => {}
        Value::String(s) if prefix.is_empty() => out.push(s.clone()),
        Value::String(s) => out.push(format!("{prefix}: {s}")),
        other if prefix.is_empty() => out.push(other.to_string()),
        other => out.push(format!("{prefix}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_are_labelled() {
        let e = extract_csv("name,city\nAda,London\nAlan,\n", b',').unwrap();
        let texts: Vec<_> = e.blocks.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(
            texts,
            vec!["name | city", "name: Ada; city: London", "name: Alan"]
        );
        assert_eq!(e.blocks[1].lines, Some((2, 2)));
    }

    #[test]
    fn json_is_flattened() {
        let e = extract_json(r#"{"a": {"b": [1, "x"]}, "c": null}"#, false).unwrap();
        assert_eq!(e.blocks[0].text, "a.b[0]: 1\na.b[1]: x");
        let err = extract_json("{\"a\": ", false).unwrap_err();
        assert!(matches!(
            err,
            NotIndexed::Failed {
                reason: "parse_error",
                ..
            }
        ));
    }
}
