//! Where a schema object keeps its sub-schemas: the keywords that hold one schema, a list
//! or a map of them, and the path to each. Read by the bundler (which walks and rewrites
//! every sub-schema) and by the draft translation (which rewrites children first).
//!
//! Part of the schema front end. Owns: nothing (pure functions). Uses: nothing.

use serde_json::{Map, Value};

/// The sub-schemas of `m`: (key path, value), by the keywords that hold schemas.
pub(super) fn children(m: &Map<String, Value>, draft: u32) -> Vec<(Vec<String>, &Value)> {
    const ONE: &[&str] = &[
        "additionalProperties",
        "additionalItems",
        "items",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    ];
    const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
    const NAMED: &[&str] = &[
        "properties",
        "patternProperties",
        "$defs",
        "definitions",
        "dependentSchemas",
        "dependencies",
    ];
    let _ = draft;
    let mut out = Vec::new();
    for (k, v) in m {
        let k = k.as_str();
        match v {
            Value::Object(_) | Value::Bool(_) if ONE.contains(&k) => {
                out.push((vec![k.to_string()], v));
            }
            Value::Array(a) if LIST.contains(&k) => {
                for (i, x) in a.iter().enumerate() {
                    out.push((vec![k.to_string(), i.to_string()], x));
                }
            }
            Value::Object(named) if NAMED.contains(&k) => {
                for (name, x) in named {
                    if x.is_object() || x.is_boolean() {
                        out.push((vec![k.to_string(), name.clone()], x));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The value at `path` (keys and indices) under `v`.
pub(super) fn child_mut<'v>(v: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    let Some((k, rest)) = path.split_first() else {
        return Some(v);
    };
    let next = match v {
        Value::Object(o) => o.get_mut(k)?,
        Value::Array(a) => a.get_mut(k.parse::<usize>().ok()?)?,
        _ => return None,
    };
    child_mut(next, rest)
}
