//! Intersection: `allOf` and `$ref` siblings merged into one schema where the keywords
//! allow it exactly.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

/// Intersection of two combinator-free schemas; `None` when provably empty. The keywords
/// of both sides one by one ([`merge_keyword`]), then `enum` with `const`, the object
/// keywords ([`merge_objects`]) and the array keywords ([`merge_arrays`]) together.
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
        match merge_keyword(k, av, bv, ptr)? {
            Merged::Value(v) => {
                out.insert(k.clone(), v);
            }
            Merged::Kept => {}
            Merged::Empty => return Ok(None),
        }
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
    if objects {
        merge_objects(a, b, &mut out);
    }
    merge_arrays(a, b, &mut out, ptr)?;
    Ok(Some(out))
}

/// What two different values of one keyword intersect to.
enum Merged {
    /// This value.
    Value(Value),
    /// The first side's, as it is (an annotation; or a keyword merged elsewhere).
    Kept,
    /// Nothing: the schemas admit no value together.
    Empty,
}

/// The intersection of `av` and `bv`, two different values of keyword `k` (one arm per
/// keyword family); an error naming `k` where no one value says both.
fn merge_keyword(k: &str, av: &Value, bv: &Value, ptr: &str) -> Result<Merged, SchemaError> {
    let merged = match k {
        "type" => match merge_types(av, bv) {
            Some(t) => t,
            None => return Ok(Merged::Empty),
        },
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
            if exact_num(av) >= exact_num(bv) {
                av.clone()
            } else {
                bv.clone()
            }
        }
        "maxLength" | "maxItems" | "maxProperties" | "maximum" | "exclusiveMaximum"
            if av.is_number() && bv.is_number() =>
        {
            if exact_num(av) <= exact_num(bv) {
                av.clone()
            } else {
                bv.clone()
            }
        }
        // Both divide the value: their least common multiple does, when a JSON number
        // holds it exactly.
        "multipleOf" if av.is_number() && bv.is_number() => {
            match exact_num(av)
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
        // Two constants meet where they are equal as JSON values (`1` and `1.0`).
        "const" if json_eq(av, bv) => return Ok(Merged::Kept),
        "const" => return Ok(Merged::Empty),
        "enum" => {
            let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
            let y = list(bv);
            Value::Array(
                list(av)
                    .into_iter()
                    .filter(|v| y.iter().any(|w| json_eq(v, w)))
                    .collect(),
            )
        }
        // Handled together (`merge_objects`, `merge_arrays`).
        "properties" | "additionalProperties" | "items" | "prefixItems" | "additionalItems" => {
            return Ok(Merged::Kept)
        }
        _ if !ASSERTIONS.contains(&k) => return Ok(Merged::Kept), // an annotation
        _ => {
            return Err(unsupported(
                k,
                ptr,
                "cannot intersect two different values of this keyword (allOf or siblings)",
            ))
        }
    };
    Ok(Merged::Value(merged))
}

/// The `type` both `av` and `bv` allow (`number` and `integer`: `integer`); `None` when
/// none.
fn merge_types(av: &Value, bv: &Value) -> Option<Value> {
    let mut m = type_mask(av) & type_mask(bv);
    if m == 0 {
        return None;
    }
    if m & T_NUMBER != 0
        && m & T_INTEGER != 0
        && (type_mask(av) & T_NUMBER == 0 || type_mask(bv) & T_NUMBER == 0)
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
    (!names.is_empty()).then_some(Value::Array(names))
}

/// Objects: `properties` and `additionalProperties` of both sides, exactly (a key one
/// side lacks meets the other's `additionalProperties`), into `out`.
fn merge_objects(a: &Map<String, Value>, b: &Map<String, Value>, out: &mut Map<String, Value>) {
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

/// Arrays: `items` means "after prefixItems" only next to the prefixItems of its own
/// schema, so the tuple keywords must come from one side; two plain `items` meet.
fn merge_arrays(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    out: &mut Map<String, Value>,
    ptr: &str,
) -> Result<(), SchemaError> {
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
    Ok(())
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
