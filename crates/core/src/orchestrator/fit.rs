//! Cutting a JSON tool result to a length without breaking it. A client (an MCP agent, the
//! model) parses what a tool returns, so a result over a limit loses whole items from the end
//! of its largest list (the lowest ranked go first), and only when no list is left to shorten
//! is its longest text cut; cutting the characters would leave half a string.

use serde_json::Value;

/// Where a cut result says what it lost.
pub const LEFT_OUT_FIELD: &str = "left_out";

/// A result cut to fit.
#[derive(Debug)]
pub struct Fitted {
    /// The JSON text, at most the limit where it could be kept whole.
    pub text: String,
    /// Items left out of lists.
    pub items_left_out: usize,
    /// Whether a text inside had to be shortened too.
    pub text_shortened: bool,
    /// The value `text` writes; `None` when even the skeleton was over the limit and the text
    /// was cut by characters (no longer JSON).
    pub value: Option<Value>,
}

impl Fitted {
    /// Whether anything was cut.
    pub fn was_cut(&self) -> bool {
        self.items_left_out > 0 || self.text_shortened
    }
}

/// Cuts `value` until `write(value)` is at most `max_chars` characters. An object at the top
/// says in [`LEFT_OUT_FIELD`] how many items it lost (a `write` that keeps only known fields
/// drops the note and keeps its own shape).
pub fn fit_json(mut value: Value, max_chars: usize, write: impl Fn(&Value) -> String) -> Fitted {
    let mut items_left_out = 0;
    let mut text_shortened = false;
    loop {
        if items_left_out > 0 {
            if let Some(map) = value.as_object_mut() {
                map.insert(
                    LEFT_OUT_FIELD.into(),
                    Value::String(format!(
                        "{items_left_out} item(s) of the lowest rank, to stay within {max_chars} characters"
                    )),
                );
            }
        }
        let text = write(&value);
        let chars = text.chars().count();
        if chars <= max_chars {
            return Fitted {
                text,
                items_left_out,
                text_shortened,
                value: Some(value),
            };
        }
        let excess = chars - max_chars;
        if let Some(dropped) = drop_from_largest_list(&mut value, excess) {
            items_left_out += dropped;
        } else if shorten_longest_text(&mut value, excess) {
            text_shortened = true;
        } else {
            // Nothing left that can be cut and still be JSON (a limit below the skeleton).
            return Fitted {
                text: text.chars().take(max_chars).collect(),
                items_left_out,
                text_shortened: true,
                value: None,
            };
        }
    }
}

/// Drops items from the end of the list that weighs most, enough of them to cover `excess`
/// characters, but never its first (a single page keeps its first chunks; the best passage
/// stays, shortened if need be). Returns how many went, or `None` when no list has two items.
fn drop_from_largest_list(value: &mut Value, excess: usize) -> Option<usize> {
    let mut lists = Vec::new();
    collect_lists(value, String::new(), &mut lists);
    let (pointer, _, _) = lists
        .iter()
        .filter(|(_, len, _)| *len > 1)
        .max_by_key(|(_, _, weight)| *weight)?;
    let list = value.pointer_mut(pointer)?.as_array_mut()?;
    let mut freed = 0;
    let mut dropped = 0;
    while freed < excess && list.len() > 1 {
        let Some(last) = list.pop() else { break };
        // The item and the comma before it.
        freed += written_chars(&last) + 1;
        dropped += 1;
    }
    Some(dropped)
}

/// Every non-empty list under `value`: its JSON pointer, length and written size.
fn collect_lists(value: &Value, pointer: String, lists: &mut Vec<(String, usize, usize)>) {
    match value {
        Value::Array(items) => {
            if !items.is_empty() {
                lists.push((pointer.clone(), items.len(), written_chars(value)));
            }
            for (i, item) in items.iter().enumerate() {
                collect_lists(item, format!("{pointer}/{i}"), lists);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                collect_lists(item, format!("{pointer}/{key}"), lists);
            }
        }
        _ => {}
    }
}

/// Cuts the longest string by `excess` characters (and the mark that says so). False when
/// there is no text left to cut.
fn shorten_longest_text(value: &mut Value, excess: usize) -> bool {
    const MARK: &str = " …[truncated]";
    let Some(longest) = longest_string(value) else {
        return false;
    };
    let chars = longest.chars().count();
    if chars == 0 {
        return false;
    }
    let keep = chars.saturating_sub(excess + MARK.chars().count());
    *longest = longest.chars().take(keep).collect::<String>() + if keep > 0 { MARK } else { "" };
    true
}

fn longest_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(s) => Some(s),
        Value::Array(items) => items
            .iter_mut()
            .filter_map(longest_string)
            .max_by_key(|s| s.len()),
        Value::Object(map) => map
            .values_mut()
            .filter_map(longest_string)
            .max_by_key(|s| s.len()),
        _ => None,
    }
}

fn written_chars(value: &Value) -> usize {
    value.to_string().chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn passages(n: usize, chars: usize) -> Value {
        json!({
            "evidence": (1..=n).map(|i| json!({"cite": format!("[{i}]"), "content": "w".repeat(chars)})).collect::<Vec<_>>()
        })
    }

    #[test]
    fn a_result_within_the_limit_is_untouched() {
        let value = passages(3, 50);
        let fitted = fit_json(value.clone(), 10_000, Value::to_string);
        assert_eq!(fitted.text, value.to_string());
        assert!(!fitted.was_cut());
    }

    #[test]
    fn a_long_result_loses_its_lowest_ranked_items_and_stays_json() {
        let fitted = fit_json(passages(40, 400), 12_000, Value::to_string);
        assert!(
            fitted.text.chars().count() <= 12_000,
            "{}",
            fitted.text.len()
        );
        let back: Value = serde_json::from_str(&fitted.text).expect("still JSON");
        let kept = back["evidence"].as_array().unwrap();
        assert_eq!(kept.len() + fitted.items_left_out, 40);
        assert_eq!(kept[0]["cite"], "[1]", "the best ranked stay");
        assert!(
            kept.len() >= 25,
            "no more is cut than needed: {}",
            kept.len()
        );
        assert!(back[LEFT_OUT_FIELD]
            .as_str()
            .unwrap()
            .starts_with(&format!("{} item(s)", fitted.items_left_out)));
    }

    #[test]
    fn one_page_keeps_its_first_chunks_and_one_huge_text_is_shortened() {
        let page = json!({"pages": [{"title": "A", "chunks": (0..30).map(|i| json!({"text": format!("{i} {}", "c".repeat(300))})).collect::<Vec<_>>()}]});
        let fitted = fit_json(page, 3_000, Value::to_string);
        let back: Value = serde_json::from_str(&fitted.text).unwrap();
        let chunks = back["pages"][0]["chunks"].as_array().unwrap();
        assert!(!chunks.is_empty() && chunks[0]["text"].as_str().unwrap().starts_with("0 "));

        let two = passages(2, 2_000);
        let fitted = fit_json(two, 1_000, Value::to_string);
        let back: Value = serde_json::from_str(&fitted.text).unwrap();
        assert_eq!(
            back["evidence"].as_array().unwrap().len(),
            1,
            "the best passage stays"
        );
        assert!(fitted.text_shortened && fitted.text.chars().count() <= 1_000);

        let document = json!({"title": "Huge", "text": "t".repeat(50_000)});
        let fitted = fit_json(document, 1_000, Value::to_string);
        assert!(fitted.text_shortened && fitted.text.chars().count() <= 1_000);
        let back: Value = serde_json::from_str(&fitted.text).unwrap();
        assert_eq!(back["title"], "Huge");
        assert!(back["text"].as_str().unwrap().ends_with("[truncated]"));
    }

    #[test]
    fn a_writer_in_a_fixed_shape_keeps_its_shape() {
        // knowledge_search writes only the manual's fields: the note is not one of them.
        let write = |v: &Value| json!({"query": v["query"], "results": v["results"]}).to_string();
        let value = json!({"query": "q", "results": (0..20).map(|i| json!({"rank": i + 1, "content": "r".repeat(200)})).collect::<Vec<_>>()});
        let fitted = fit_json(value, 1_500, write);
        let back: Value = serde_json::from_str(&fitted.text).unwrap();
        assert!(back.get(LEFT_OUT_FIELD).is_none() && fitted.items_left_out > 0);
        assert_eq!(back["results"][0]["rank"], 1);
    }
}
