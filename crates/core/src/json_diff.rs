//! What changed between two JSON values, field by field, for people to read: the desktop's
//! Orchestrator view and `quarry orchestrator show` print it for configurations, the pipeline
//! editor for a draft against its saved version. Lists of objects that each have a `name` (the
//! modes) are matched by name, so reordering them is not a change and `modes[chat].budget.rounds`
//! says which one.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ConfigChange {
    /// Where: `system_prompt`, `modes[chat].budget.rounds`, `gates`.
    pub path: String,
    /// The value before, as JSON; `None`: added.
    pub before: Option<String>,
    /// The value after, as JSON; `None`: removed.
    pub after: Option<String>,
}

/// Every field that differs from `before` to `after`, for any JSON (a pipeline's draft
/// against its saved version, say).
pub fn diff_json(before: &Value, after: &Value) -> Vec<ConfigChange> {
    let mut changes = Vec::new();
    walk("", before, after, &mut changes);
    changes
}

fn walk(path: &str, before: &Value, after: &Value, out: &mut Vec<ConfigChange>) {
    if before == after {
        return;
    }
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                either(&at, a.get(key), b.get(key), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if named(a) && named(b) => {
            let name = |v: &Value| v["name"].as_str().unwrap_or_default().to_string();
            let mut names: Vec<String> = a.iter().map(name).collect();
            names.extend(
                b.iter()
                    .map(name)
                    .filter(|n| !a.iter().any(|v| name(v) == *n)),
            );
            for n in names {
                let find = |list: &[Value]| list.iter().find(|v| name(v) == n).cloned();
                either(
                    &format!("{path}[{n}]"),
                    find(a).as_ref(),
                    find(b).as_ref(),
                    out,
                );
            }
        }
        _ => out.push(change(path, Some(before), Some(after))),
    }
}

fn either(path: &str, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<ConfigChange>) {
    match (before, after) {
        (Some(a), Some(b)) => walk(path, a, b, out),
        (a, b) => out.push(change(path, a, b)),
    }
}

/// A list of objects each with a `name` (the modes).
fn named(list: &[Value]) -> bool {
    !list.is_empty() && list.iter().all(|v| v["name"].is_string())
}

fn change(path: &str, before: Option<&Value>, after: Option<&Value>) -> ConfigChange {
    ConfigChange {
        path: path.to_string(),
        before: before.map(Value::to_string),
        after: after.map(Value::to_string),
    }
}
