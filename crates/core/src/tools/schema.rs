//! The JSON Schema subset that tool shapes use, checked with messages that name the field.
//!
//! Schemas come from two places only: the fixed shapes of query and chunk tools below, and the
//! ones the worker derives from a tool's `Settings`, `Inputs` and `Output` models (see
//! `worker.py`). Both use the same small subset (type, properties, required,
//! additionalProperties, items, anyOf, enum, numeric bounds, lengths, counts), so a focused
//! validator gives better messages than a general one.

use serde_json::{json, Map, Value};

/// What a query tool returns.
pub fn query_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "kind": {"enum": ["query_variants"]},
            "queries": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                    "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}
                },
                "required": ["query", "weight"],
                "additionalProperties": false
            }}
        },
        "required": ["kind", "queries"],
        "additionalProperties": false
    })
}

/// What a chunk tool returns: references only, so it cannot introduce content.
pub fn chunk_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "chunks": {"type": "array", "items": {
                "type": "object",
                "properties": {"evidence_ref": {"type": "string", "minLength": 1}},
                "required": ["evidence_ref"],
                "additionalProperties": false
            }}
        },
        "required": ["chunks"],
        "additionalProperties": false
    })
}

/// Checks `value` against `schema`; the error names the path (`queries[0].weight`).
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "the value".into()
    } else {
        format!("`{path}`")
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        check_any_of(value, options, path)?;
        // Pydantic puts an `Optional[...]` field's bounds beside its `anyOf` (`limit: Optional[
        // int] = Field(None, ge=1)`): they hold for whichever option matched.
    }
    check_enum(value, schema, path)?;
    check_type(value, schema, path)?;
    match value {
        Value::Number(n) => check_number(n.as_f64().unwrap_or(f64::NAN), schema, path),
        Value::String(s) => check_string(s, schema, path),
        Value::Array(items) => check_array(items, schema, path),
        Value::Object(map) => check_object(map, schema, path),
        _ => Ok(()),
    }
}

/// The first option that fits wins; otherwise the first option's error says why.
fn check_any_of(value: &Value, options: &[Value], path: &str) -> Result<(), String> {
    let mut first_error = None;
    for option in options {
        match check(value, option, path) {
            Ok(()) => return Ok(()),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| format!("{} matches no allowed shape", at(path))))
}

fn check_enum(value: &Value, schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    match schema.get("enum").and_then(Value::as_array) {
        Some(allowed) if !allowed.contains(value) => Err(format!(
            "{} must be one of {}",
            at(path),
            Value::Array(allowed.clone())
        )),
        _ => Ok(()),
    }
}

/// An integer is also a number.
fn check_type(value: &Value, schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    let Some(expected) = schema.get("type").and_then(Value::as_str) else {
        return Ok(());
    };
    let actual = type_name(value);
    let fits = actual == expected || (expected == "number" && actual == "integer");
    if !fits {
        return Err(format!("{} must be {expected}, not {actual}", at(path)));
    }
    Ok(())
}

fn check_number(x: f64, schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(min) = bound("minimum").filter(|m| x < *m) {
        return Err(format!("{} must be at least {min}", at(path)));
    }
    if let Some(max) = bound("maximum").filter(|m| x > *m) {
        return Err(format!("{} must be at most {max}", at(path)));
    }
    if let Some(min) = bound("exclusiveMinimum").filter(|m| x <= *m) {
        return Err(format!("{} must be more than {min}", at(path)));
    }
    if let Some(max) = bound("exclusiveMaximum").filter(|m| x >= *m) {
        return Err(format!("{} must be less than {max}", at(path)));
    }
    Ok(())
}

/// `minLength`/`maxLength` (or `minItems`/`maxItems`) against a length of `unit`s.
fn check_count(
    count: u64,
    schema: &Map<String, Value>,
    [min_key, max_key]: [&str; 2],
    unit: &str,
    path: &str,
) -> Result<(), String> {
    let limit = |k: &str| schema.get(k).and_then(Value::as_u64);
    if let Some(min) = limit(min_key).filter(|m| count < *m) {
        return Err(format!("{} must have at least {min} {unit}", at(path)));
    }
    if let Some(max) = limit(max_key).filter(|m| count > *m) {
        return Err(format!("{} must have at most {max} {unit}", at(path)));
    }
    Ok(())
}

fn check_string(s: &str, schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    let chars = s.chars().count() as u64;
    check_count(
        chars,
        schema,
        ["minLength", "maxLength"],
        "characters",
        path,
    )
}

fn check_array(items: &[Value], schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    check_count(
        items.len() as u64,
        schema,
        ["minItems", "maxItems"],
        "items",
        path,
    )?;
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item, item_schema, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

fn check_object(
    map: &Map<String, Value>,
    schema: &Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(required) {
            return Err(format!("`{}` is required", join(required)));
        }
    }
    for (key, item) in map {
        match properties.and_then(|p| p.get(key)) {
            Some(property) => check(item, property, &join(key))?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let known: Vec<&String> =
                        properties.map(|p| p.keys().collect()).unwrap_or_default();
                    return Err(format!(
                        "`{}` is not allowed here (allowed: {})",
                        join(key),
                        known
                            .iter()
                            .map(|k| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Some(extra @ Value::Object(_)) => check(item, extra, &join(key))?,
                _ => {}
            },
        }
    }
    Ok(())
}

/// `values` with every missing top-level property filled from the schema's defaults.
pub fn with_defaults(values: &Value, schema: &Value) -> Value {
    let mut out = values.as_object().cloned().unwrap_or_default();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, property) in properties {
            if let (false, Some(default)) = (out.contains_key(key), property.get("default")) {
                out.insert(key.clone(), default.clone());
            }
        }
    }
    Value::Object(out)
}

/// The two spellings of a source reference: the manual's, and the one Quarry used first.
pub const SOURCE_REF_NAMES: [&str; 2] = ["sourceRef", "source_ref"];

/// `values` with every source reference spelled as `schema` spells it, at any depth, so a
/// caller may write either `sourceRef` (the manual's) or `source_ref`.
pub fn with_reference_spelling(values: &Value, schema: &Value) -> Value {
    let mut out = values.clone();
    respell(&mut out, schema);
    out
}

fn respell(value: &mut Value, schema: &Value) {
    for branch in ["anyOf", "oneOf"] {
        for sub in schema
            .get(branch)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            respell(value, sub);
        }
    }
    match value {
        Value::Object(map) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            for (wanted, other) in [
                (SOURCE_REF_NAMES[0], SOURCE_REF_NAMES[1]),
                (SOURCE_REF_NAMES[1], SOURCE_REF_NAMES[0]),
            ] {
                if properties.contains_key(wanted)
                    && !properties.contains_key(other)
                    && !map.contains_key(wanted)
                {
                    if let Some(given) = map.remove(other) {
                        map.insert(wanted.to_string(), given);
                    }
                }
            }
            for (key, item) in map.iter_mut() {
                if let Some(sub) = properties.get(key) {
                    respell(item, sub);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for item in items {
                    respell(item, sub);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_reference_is_accepted_in_either_spelling() {
        let schema = json!({"type": "object", "properties": {"sources": {"type": "array", "items": {
            "type": "object", "properties": {"sourceRef": {"type": "string"}, "cursor": {}}}}}});
        let given = json!({"sources": [{"source_ref": "a"}, {"sourceRef": "b", "cursor": null}]});
        assert_eq!(
            with_reference_spelling(&given, &schema),
            json!({"sources": [{"sourceRef": "a"}, {"sourceRef": "b", "cursor": null}]})
        );
        // A tool that declared the older spelling gets that one.
        let older = json!({"type": "object", "properties": {"source_ref": {"type": "string"}}});
        assert_eq!(
            with_reference_spelling(&json!({"sourceRef": "c"}), &older),
            json!({"source_ref": "c"})
        );
    }

    #[test]
    fn errors_name_the_path() {
        let out = json!({"kind": "query_variants", "queries": [{"query": "a", "weight": 0}]});
        let err = validate(&out, &query_output_schema()).unwrap_err();
        assert!(
            err.contains("`queries[0].weight` must be more than 0"),
            "{err}"
        );
        let out = json!({"chunks": [{"evidence_ref": "x", "text": "made up"}]});
        let err = validate(&out, &chunk_output_schema()).unwrap_err();
        assert!(err.contains("`chunks[0].text` is not allowed"), "{err}");
        let err = validate(&json!({}), &chunk_output_schema()).unwrap_err();
        assert_eq!(err, "`chunks` is required");
    }

    #[test]
    fn any_of_and_defaults() {
        let schema = json!({"type": "object", "properties": {
            "cursor": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "n": {"type": "integer", "minimum": 1, "default": 8}
        }, "additionalProperties": false});
        assert!(validate(&json!({"cursor": null}), &schema).is_ok());
        assert!(validate(&json!({"cursor": 3}), &schema).is_err());
        assert!(validate(&json!({"n": 1.5}), &schema).is_err());
        assert_eq!(
            with_defaults(&json!({"n": 2}), &schema),
            json!({"cursor": null, "n": 2})
        );
    }
}
