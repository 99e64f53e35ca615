//! One sub-schema of one draft written in the keywords of another, so that a bundle
//! whose documents declare different `$schema`s is compiled (and checked) under one draft.
//!
//! # Design
//!
//! The compiler and the validator read the whole bundle as the root's draft. A document
//! the registry supplies may declare another; the specification says each is processed
//! as its own draft. [`translate`] rewrites one schema object (its children already
//! rewritten) from its draft `from` into the root's draft `to`:
//!
//! * keywords `from` does not define are annotations there and are dropped where `to`
//!   would read them (`dependentRequired` in a draft-7 document, `prefixItems` in a
//!   2019-09 one, `dependencies` in a 2019-09 one...);
//! * keywords whose spelling changed move (`items` arrays and `additionalItems` to and from
//!   `prefixItems`/`items`, `dependencies` to and from `dependentRequired` and
//!   `dependentSchemas`, draft 4's boolean `exclusiveMaximum`/`exclusiveMinimum`);
//! * `$ref`'s siblings are dropped where `from` ignores them (draft 7 and earlier), and
//!   moved beside it into an `allOf` where `to` would ignore them;
//! * what `to` cannot say is refused with the keyword and pointer (draft-7 content
//!   assertions under a 2019-09 root, where they are annotations).
//!
//! Dynamic references were resolved by the bundle before this runs. Cost: one pass over
//! the object's keys.
//!
//! Part of the schema front end. Owns: nothing (pure rewrites). Uses: the parent's bundle
//! and draft detection.

use serde_json::{Map, Value};

use super::SchemaError;

/// The name of draft `d` (4, 6, 7, 2019, 2020) as `$schema` URIs spell it.
pub(super) fn draft_name(d: u32) -> String {
    match d {
        2019 => "2019-09".into(),
        2020 => "2020-12".into(),
        d => d.to_string(),
    }
}

/// The drafts in which `keyword` is an assertion or applicator: `(first, last)`.
fn defined_in(keyword: &str) -> Option<(u32, u32)> {
    Some(match keyword {
        "const" | "contains" | "propertyNames" => (6, 2020),
        "if" | "then" | "else" => (7, 2020),
        "contentEncoding" | "contentMediaType" => (4, 7),
        "dependentRequired"
        | "dependentSchemas"
        | "unevaluatedProperties"
        | "unevaluatedItems"
        | "minContains"
        | "maxContains" => (2019, 2020),
        "prefixItems" => (2020, 2020),
        "dependencies" => (4, 7),
        "additionalItems" => (4, 2019),
        _ => return None,
    })
}

/// Rewrites the schema object `m` of draft `from` into draft `to`'s keywords (see the
/// module docs). `at` names `m` in errors.
pub(super) fn translate(
    m: &mut Map<String, Value>,
    from: u32,
    to: u32,
    at: &str,
) -> Result<(), SchemaError> {
    if from == to {
        return Ok(());
    }
    // Before 2019-09 a `$ref` makes every sibling an annotation.
    if from <= 7 && m.contains_key("$ref") {
        m.retain(|k, _| k == "$ref" || k == "definitions" || k == "$defs");
    }
    // What `from` does not define is an annotation there.
    m.retain(|k, _| defined_in(k).is_none_or(|(lo, hi)| (lo..=hi).contains(&from)));
    for k in ["contentEncoding", "contentMediaType"] {
        if m.contains_key(k) && to > 7 {
            return Err(SchemaError::Unsupported {
                keyword: k.into(),
                pointer: at.to_string(),
                reason: format!(
                    "an assertion in this draft-{} document, an annotation in the draft-{} \
                     schema that refers to it",
                    draft_name(from),
                    draft_name(to)
                ),
            });
        }
    }
    items(m, from, to);
    dependencies(m, from, to);
    exclusive_bounds(m, from, to);
    // From 2019-09 on, `$ref` applies beside its siblings; before, they would be ignored.
    if to <= 7 && m.contains_key("$ref") && m.keys().any(|k| !is_annotation(k)) {
        if let Some(r) = m.remove("$ref") {
            let item = Value::Object(Map::from_iter([("$ref".to_string(), r)]));
            match m.entry("allOf").or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(a) => a.push(item),
                other => *other = Value::Array(vec![item]),
            }
        }
    }
    Ok(())
}

/// Keys that constrain nothing whatever the draft.
fn is_annotation(k: &str) -> bool {
    matches!(
        k,
        "$ref"
            | "$defs"
            | "definitions"
            | "$comment"
            | "title"
            | "description"
            | "default"
            | "examples"
            | "readOnly"
            | "writeOnly"
            | "deprecated"
    )
}

/// Tuple validation: `items: [..]` + `additionalItems` (up to 2019-09) against
/// `prefixItems` + `items` (2020-12).
fn items(m: &mut Map<String, Value>, from: u32, to: u32) {
    if from <= 2019 && to == 2020 {
        if matches!(m.get("items"), Some(Value::Array(_))) {
            if let Some(tuple) = m.remove("items") {
                m.insert("prefixItems".into(), tuple);
            }
            if let Some(rest) = m.remove("additionalItems") {
                m.insert("items".into(), rest);
            }
        } else {
            // Without a tuple, `additionalItems` applies to nothing.
            m.remove("additionalItems");
        }
    } else if from == 2020 && to <= 2019 {
        if let Some(tuple) = m.remove("prefixItems") {
            if let Some(rest) = m.remove("items") {
                m.insert("additionalItems".into(), rest);
            }
            m.insert("items".into(), tuple);
        }
    }
}

/// `dependencies` (up to draft 7) against `dependentRequired` + `dependentSchemas`.
fn dependencies(m: &mut Map<String, Value>, from: u32, to: u32) {
    if from <= 7 && to >= 2019 {
        if let Some(Value::Object(deps)) = m.remove("dependencies") {
            let (mut required, mut schemas) = (Map::new(), Map::new());
            for (k, v) in deps {
                if v.is_array() {
                    required.insert(k, v);
                } else {
                    schemas.insert(k, v);
                }
            }
            if !required.is_empty() {
                m.insert("dependentRequired".into(), Value::Object(required));
            }
            if !schemas.is_empty() {
                m.insert("dependentSchemas".into(), Value::Object(schemas));
            }
        }
    } else if from >= 2019 && to <= 7 {
        let mut deps = Map::new();
        for k in ["dependentRequired", "dependentSchemas"] {
            if let Some(Value::Object(d)) = m.remove(k) {
                deps.extend(d);
            }
        }
        if !deps.is_empty() {
            m.insert("dependencies".into(), Value::Object(deps));
        }
    }
}

/// Draft 4's `exclusiveMaximum: true` beside `maximum` against draft 6's number.
fn exclusive_bounds(m: &mut Map<String, Value>, from: u32, to: u32) {
    for (ex, bound) in [
        ("exclusiveMaximum", "maximum"),
        ("exclusiveMinimum", "minimum"),
    ] {
        if from == 4 && to >= 6 {
            match m.get(ex) {
                Some(Value::Bool(true)) => {
                    if let Some(b) = m.remove(bound) {
                        m.insert(ex.into(), b);
                    } else {
                        m.remove(ex);
                    }
                }
                Some(Value::Bool(false)) => {
                    m.remove(ex);
                }
                _ => {}
            }
        } else if from >= 6 && to == 4 {
            if let Some(n @ Value::Number(_)) = m.remove(ex) {
                let item = Value::Object(Map::from_iter([
                    (bound.to_string(), n),
                    (ex.to_string(), Value::Bool(true)),
                ]));
                match m.entry("allOf").or_insert_with(|| Value::Array(Vec::new())) {
                    Value::Array(a) => a.push(item),
                    other => *other = Value::Array(vec![item]),
                }
            }
        }
    }
}

/// The keywords of each vocabulary of 2019-09 and 2020-12 that constrain instances, by
/// the vocabulary's last path segment (`.../vocab/validation`).
fn vocabulary_keywords(name: &str, draft: u32) -> Option<&'static [&'static str]> {
    Some(match name {
        "core" | "meta-data" | "content" | "format-annotation" | "format-assertion" | "format" => {
            &[]
        }
        "validation" => &[
            "type",
            "enum",
            "const",
            "multipleOf",
            "maximum",
            "exclusiveMaximum",
            "minimum",
            "exclusiveMinimum",
            "maxLength",
            "minLength",
            "pattern",
            "maxItems",
            "minItems",
            "uniqueItems",
            "maxContains",
            "minContains",
            "maxProperties",
            "minProperties",
            "required",
            "dependentRequired",
        ],
        "applicator" if draft == 2019 => &[
            "items",
            "additionalItems",
            "unevaluatedItems",
            "contains",
            "additionalProperties",
            "unevaluatedProperties",
            "properties",
            "patternProperties",
            "dependentSchemas",
            "propertyNames",
            "if",
            "then",
            "else",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
        ],
        "applicator" => &[
            "prefixItems",
            "items",
            "contains",
            "additionalProperties",
            "properties",
            "patternProperties",
            "dependentSchemas",
            "propertyNames",
            "if",
            "then",
            "else",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
        ],
        "unevaluated" if draft == 2020 => &["unevaluatedItems", "unevaluatedProperties"],
        _ => return None,
    })
}

/// The official meta-schema URI of draft `d`.
fn official_uri(d: u32) -> &'static str {
    match d {
        4 => "http://json-schema.org/draft-04/schema#",
        6 => "http://json-schema.org/draft-06/schema#",
        7 => "http://json-schema.org/draft-07/schema#",
        2019 => "https://json-schema.org/draft/2019-09/schema",
        _ => "https://json-schema.org/draft/2020-12/schema",
    }
}

/// `schema` as its meta-schema's vocabularies read it, when its `$schema` names a custom
/// meta-schema in `registry` that declares `$vocabulary` (2019-09 and later): the
/// keywords of the standard vocabularies it leaves out are annotations there, so they
/// are removed from every sub-schema of the document, and `$schema` becomes the official
/// URI of the meta-schema's draft. A required vocabulary nobody defines is refused, as
/// the specification asks. `None` when nothing changes. Cost: one walk of the schema.
pub(super) fn apply_vocabularies(
    schema: &Value,
    registry: Option<&super::SchemaRegistry>,
) -> Result<Option<Value>, SchemaError> {
    let Some(uri) = schema.get("$schema").and_then(Value::as_str) else {
        return Ok(None);
    };
    // The official meta-schemas declare every standard vocabulary.
    if uri.contains("://json-schema.org/") {
        return Ok(None);
    }
    let Some(meta) = registry.and_then(|r| r.lookup(uri)) else {
        return Ok(None);
    };
    let Some(Value::Object(vocabs)) = meta.get("$vocabulary") else {
        return Ok(None);
    };
    let draft = super::draft_of_schema(meta);
    if draft < 2019 {
        return Ok(None);
    }
    let prefix = format!("https://json-schema.org/draft/{}/vocab/", draft_name(draft));
    let mut on: Vec<&str> = Vec::new();
    for (v, required) in vocabs {
        match v
            .strip_prefix(&prefix)
            .filter(|n| vocabulary_keywords(n, draft).is_some())
        {
            Some(name) => on.push(name),
            None if required == &Value::Bool(true) => {
                return Err(SchemaError::Unsupported {
                    keyword: "$vocabulary".into(),
                    pointer: "#".into(),
                    reason: format!(
                    "the meta-schema {uri} requires the vocabulary {v}, which ruvllm does not know"
                ),
                })
            }
            None => {}
        }
    }
    let all = [
        "validation",
        "applicator",
        "unevaluated",
        "format",
        "format-annotation",
        "format-assertion",
    ];
    let mut off: Vec<&str> = all
        .iter()
        .filter(|n| !on.contains(n))
        .filter_map(|n| vocabulary_keywords(n, draft))
        .flatten()
        .copied()
        .collect();
    // No format vocabulary at all: `format` is an unknown keyword.
    if !on.iter().any(|n| n.starts_with("format")) {
        off.push("format");
    }
    let mut out = schema.clone();
    strip(&mut out, &off, draft, 0);
    if let Value::Object(m) = &mut out {
        m.insert("$schema".into(), Value::String(official_uri(draft).into()));
    }
    Ok(Some(out))
}

/// Removes `off` from `v` and every sub-schema under it (subschemas under removed
/// keywords go with them).
fn strip(v: &mut Value, off: &[&str], draft: u32, depth: usize) {
    if depth > 256 {
        return;
    }
    let Value::Object(m) = v else {
        return;
    };
    m.retain(|k, _| !off.contains(&k.as_str()));
    let paths: Vec<Vec<String>> = super::tree::children(m, draft)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for p in paths {
        if let Some(child) = super::tree::child_mut(v, &p) {
            strip(child, off, draft, depth + 1);
        }
    }
}
