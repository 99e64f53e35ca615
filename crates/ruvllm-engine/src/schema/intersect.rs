//! Intersection: `allOf` and `$ref` siblings merged into one schema where the keywords
//! allow it exactly.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

/// Intersection of two combinator-free schemas; `None` when provably empty.
// Long (229 lines): one arm per JSON Schema keyword family, each short; the keyword list
// is the function's outline.
pub(super) fn merge(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    ptr: &str,
) -> Result<Option<Map<String, Value>>, SchemaError> {
    // An object's `properties` and `additionalProperties` are rebuilt below from both
    // sides whenever either side has one: they are not copied first (deep copies of every
    // property's schema, thrown away).
    // `minContains` and `maxContains` count the matches of their own side's `contains`:
    // two sides that both say something about it cannot be merged key by key.
    const CONTAINS: [&str; 3] = ["contains", "minContains", "maxContains"];
    let counts = |x: &Map<String, Value>| CONTAINS.iter().any(|k| x.contains_key(*k));
    if counts(a) && counts(b) && CONTAINS.iter().any(|k| a.get(*k) != b.get(*k)) {
        return Err(unsupported(
            "contains",
            ptr,
            "cannot intersect two different contains (allOf or siblings)",
        ));
    }
    let objects = a.contains_key("properties")
        || b.contains_key("properties")
        || a.contains_key("additionalProperties")
        || b.contains_key("additionalProperties");
    let rebuilt = |k: &str| objects && matches!(k, "properties" | "additionalProperties");
    let mut out: Map<String, Value> = a
        .iter()
        .filter(|(k, _)| !rebuilt(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, bv) in b {
        if rebuilt(k) {
            continue;
        }
        let Some(av) = out.get(k) else {
            out.insert(k.clone(), bv.clone());
            continue;
        };
        if av == bv || matches!(k.as_str(), "items" | "prefixItems" | "additionalItems") {
            // Equal, or handled together below.
            continue;
        }
        let av = av.clone();
        let merged = match k.as_str() {
            "type" => {
                let mut m = type_mask(&av) & type_mask(bv);
                if m == 0 {
                    // number & integer: integer
                    return Ok(None);
                }
                if m & T_NUMBER != 0
                    && m & T_INTEGER != 0
                    && (type_mask(&av) & T_NUMBER == 0 || type_mask(bv) & T_NUMBER == 0)
                {
                    m &= !T_NUMBER;
                }
                let names: Vec<Value> = [
                    "null", "boolean", "object", "array", "number", "string", "integer",
                ]
                .iter()
                .filter(|t| {
                    let bit = type_bit(t);
                    if **t == "number" {
                        m & T_NUMBER != 0
                    } else {
                        m & bit == bit && !(**t == "integer" && m & T_NUMBER != 0)
                    }
                })
                .map(|t| Value::String(t.to_string()))
                .collect();
                if names.is_empty() {
                    return Ok(None);
                }
                Value::Array(names)
            }
            "required" => {
                let mut r: Vec<Value> = av.as_array().cloned().unwrap_or_default();
                for x in bv.as_array().cloned().unwrap_or_default() {
                    if !r.contains(&x) {
                        r.push(x);
                    }
                }
                Value::Array(r)
            }
            "minLength" | "minItems" | "minProperties" | "minimum" | "exclusiveMinimum"
                if av.is_number() && bv.is_number() =>
            {
                if exact_num(&av) >= exact_num(bv) {
                    av
                } else {
                    bv.clone()
                }
            }
            "maxLength" | "maxItems" | "maxProperties" | "maximum" | "exclusiveMaximum"
                if av.is_number() && bv.is_number() =>
            {
                if exact_num(&av) <= exact_num(bv) {
                    av
                } else {
                    bv.clone()
                }
            }
            // Both divide the value: their least common multiple does, when a JSON number
            // holds it exactly.
            "multipleOf" if av.is_number() && bv.is_number() => {
                match exact_num(&av)
                    .zip(exact_num(bv))
                    .filter(|(x, y)| !x.is_zero() && !y.is_zero())
                    .and_then(|(x, y)| x.lcm(&y, 40))
                    .and_then(|l| l.to_number())
                {
                    Some(n) => Value::Number(n),
                    None => {
                        return Err(unsupported(
                            k,
                            ptr,
                            "two multipleOf values whose least common multiple no JSON number holds exactly",
                        ))
                    }
                }
            }
            "enum" | "const" => {
                let as_list = |v: &Value, key: &str| {
                    if key == "const" {
                        vec![v.clone()]
                    } else {
                        v.as_array().cloned().unwrap_or_default()
                    }
                };
                let x = as_list(&av, k);
                let y = as_list(bv, k);
                Value::Array(
                    x.into_iter()
                        .filter(|v| y.iter().any(|w| json_eq(v, w)))
                        .collect(),
                )
            }
            "properties" | "additionalProperties" | "items" | "prefixItems" | "additionalItems" => {
                // Handled together below.
                continue;
            }
            _ if !ASSERTIONS.contains(&k.as_str()) => continue, // an annotation
            _ => {
                return Err(unsupported(
                    k,
                    ptr,
                    "cannot intersect two different values of this keyword (allOf or siblings)",
                ))
            }
        };
        out.insert(k.clone(), merged);
    }
    // enum + const in one map: keep as enum.
    if let (Some(_), Some(c)) = (out.get("enum").cloned(), out.get("const").cloned()) {
        let e = out.remove("enum").unwrap();
        let list: Vec<Value> = e
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| json_eq(v, &c))
            .collect();
        out.remove("const");
        out.insert("enum".into(), Value::Array(list));
    }
    // Objects: properties/additionalProperties, exactly.
    if objects {
        let none = Map::new();
        let pa = a
            .get("properties")
            .and_then(|p| p.as_object())
            .unwrap_or(&none);
        let pb = b
            .get("properties")
            .and_then(|p| p.as_object())
            .unwrap_or(&none);
        let xa = a
            .get("additionalProperties")
            .cloned()
            .unwrap_or(Value::Bool(true));
        let xb = b
            .get("additionalProperties")
            .cloned()
            .unwrap_or(Value::Bool(true));
        let mut props = Map::new();
        // `a`'s keys, then those of `b` that `a` lacks (a lookup each, not a scan).
        let keys = pa.keys().chain(pb.keys().filter(|k| !pa.contains_key(*k)));
        for k in keys {
            let sa = pa.get(k).cloned().unwrap_or_else(|| xa.clone());
            let sb = pb.get(k).cloned().unwrap_or_else(|| xb.clone());
            props.insert(k.clone(), and_schema(sa, sb));
        }
        out.insert("properties".into(), Value::Object(props));
        out.insert("additionalProperties".into(), and_schema(xa, xb));
    }
    // Arrays: `items` means "after prefixItems" only next to the prefixItems of its own
    // schema, so the tuple keywords must come from one side.
    let tuple = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(k, _)| {
                matches!(k.as_str(), "prefixItems" | "additionalItems")
                    || (k.as_str() == "items" && m.contains_key("prefixItems"))
                    || (k.as_str() == "items" && m.get("items").is_some_and(|v| v.is_array()))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (ta, tb) = (tuple(a), tuple(b));
    let has_array_kw = |m: &Map<String, Value>| {
        ["items", "prefixItems", "additionalItems"]
            .iter()
            .any(|k| m.contains_key(*k))
    };
    if ta != tb && ((!ta.is_empty() && has_array_kw(b)) || (!tb.is_empty() && has_array_kw(a))) {
        return Err(unsupported(
            "prefixItems",
            ptr,
            "cannot intersect a tuple schema with another array schema",
        ));
    }
    for key in ["items", "prefixItems", "additionalItems"] {
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) if x != y => {
                if key == "items" && !x.is_array() && !y.is_array() {
                    out.insert(key.into(), and_schema(x.clone(), y.clone()));
                } else {
                    return Err(unsupported(
                        key,
                        ptr,
                        "cannot intersect two different tuple schemas",
                    ));
                }
            }
            (Some(x), _) | (None, Some(x)) => {
                out.insert(key.into(), x.clone());
            }
            _ => {}
        }
    }
    Ok(Some(out))
}

/// `x ∧ y` as a schema.
pub(super) fn and_schema(x: Value, y: Value) -> Value {
    match (&x, &y) {
        (Value::Bool(true), _) => y,
        (_, Value::Bool(true)) => x,
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        _ if x == y => x,
        _ => serde_json::json!({ "allOf": [x, y] }),
    }
}
