//! Member hints: properties a checked object may lack, for the completion search.
//!
//! A semantic check (`super::check`) can make the shortest syntactic completion fail:
//! under an exclusive `oneOf` whose branches overlap, `{}` matches every branch, and only
//! an object with a member that tells them apart (`"type":"callback"`) passes. A search
//! over bytes finds such a member only by luck (a key is any string), so the compiler
//! gives each check the members its sub-schema names: every `properties` entry reached
//! through `$ref`, `allOf`, `anyOf`, `oneOf`, `if`/`then`/`else` and
//! `dependentSchemas`, each with a few example values (its `const`, its `enum`'s first
//! values, a shortest match of its `pattern`, or the simplest value of its type). `crate::matching::complete` inserts them, one at a
//! time, before the closing brace of an object that failed the check and keeps the first
//! that passes; the check and the grammar still judge every candidate, so a hint is only
//! ever a suggestion.
//!
//! A `required` set of several keys is one hint of its own (with keys in any order,
//! `required` is a check, and inserting one member at a time never satisfies it), and an
//! object-valued example holds its own required members.
//!
//! Limits: at most [`MAX_HINTS`] hints per check, references followed [`MAX_DEPTH`]
//! deep; only local references (`#/...`) are followed.

use serde_json::Value;

/// Hints kept per check.
pub(crate) const MAX_HINTS: usize = 64;

/// Schema levels (references and combinators) walked.
const MAX_DEPTH: usize = 6;

/// Example values per property.
const PER_PROPERTY: usize = 3;

/// The longest string example (a `minLength` above it makes a hint the check refuses).
const MAX_EXAMPLE_CHARS: u64 = 256;

/// Example values built per [`members`] call (objects filled with their required members
/// nest, so this bounds the work whatever the schema): past it an object's example is `{}`.
const EXAMPLE_BUDGET: usize = 512;

/// The member hints of `schema` (references resolved in `root`), each a compact
/// `"key":value` text: first the whole `required` set of each (sub-)schema that names two
/// keys or more, as one hint (`"a":0,"b":null`: no single member satisfies it, and with
/// keys in any order `required` is a check), then every member alone, shortest first.
/// Cost: one walk of the sub-schema and the definitions it reaches, bounded by
/// [`MAX_DEPTH`] and [`MAX_HINTS`].
pub(crate) fn members(schema: &Value, root: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut sets = Vec::new();
    let mut budget = EXAMPLE_BUDGET;
    walk(schema, root, 0, &mut out, &mut sets, &mut budget);
    ordered(sets, out)
}

/// The member hints of an object whose keys come in any order (`required` a check): its
/// `required` set as one hint when it names two keys or more, then each property alone,
/// shortest first, as [`members`] orders them. Cost: the examples of each property, bounded
/// as in [`members`].
pub(crate) fn object_members<'v>(
    props: impl Iterator<Item = (&'v str, &'v Value)> + Clone,
    required: &[String],
    root: &Value,
) -> Vec<String> {
    let mut budget = EXAMPLE_BUDGET;
    let mut out = Vec::new();
    for (k, ps) in props.clone() {
        property_examples(k, ps, root, 0, &mut budget, &mut out);
        if out.len() >= MAX_HINTS * 4 {
            break;
        }
    }
    let mut sets = Vec::new();
    if required.len() >= 2 {
        let lookup = |r: &str| props.clone().find(|(k, _)| *k == r).map(|(_, ps)| ps);
        let set = required_set(
            required.iter().map(String::as_str),
            lookup,
            root,
            1,
            &mut budget,
        );
        sets.push(set.join(","));
    }
    ordered(sets, out)
}

/// Appends `"key":value` for each example of the property `key` (schema `ps`).
fn property_examples(
    key: &str,
    ps: &Value,
    root: &Value,
    depth: usize,
    budget: &mut usize,
    out: &mut Vec<String>,
) {
    let key = Value::String(key.to_string()).to_string();
    for v in examples(ps, root, depth, budget) {
        out.push(format!("{key}:{v}"));
    }
}

/// One `"key":value` per key of a `required` list (at most [`MAX_HINTS`]): the value is
/// the first example of the key's property schema (`lookup`), `null` for a key without one.
fn required_set<'v>(
    keys: impl Iterator<Item = &'v str>,
    lookup: impl Fn(&str) -> Option<&'v Value>,
    root: &Value,
    depth: usize,
    budget: &mut usize,
) -> Vec<String> {
    keys.take(MAX_HINTS)
        .map(|k| {
            let v = lookup(k)
                .and_then(|ps| examples(ps, root, depth, budget).into_iter().next())
                .unwrap_or_else(|| "null".to_string());
            format!("{}:{v}", Value::String(k.to_string()))
        })
        .collect()
}

/// The required sets first (shortest first), then the single members (shortest first),
/// without repeats, at most [`MAX_HINTS`].
fn ordered(mut sets: Vec<String>, mut out: Vec<String>) -> Vec<String> {
    out.sort_by_key(String::len);
    sets.sort_by_key(String::len);
    sets.extend(out);
    let mut seen = std::collections::HashSet::new();
    sets.retain(|h| seen.insert(h.clone()));
    sets.truncate(MAX_HINTS);
    sets
}

fn resolve<'a>(s: &'a Value, root: &'a Value) -> &'a Value {
    let mut s = s;
    for _ in 0..MAX_DEPTH {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) if r.starts_with('#') => match root.pointer(&decode_pointer(&r[1..])) {
                Some(t) => s = t,
                None => return s,
            },
            _ => return s,
        }
    }
    s
}

/// A URI fragment's JSON pointer with its `%xx` escapes decoded.
fn decode_pointer(p: &str) -> String {
    if !p.contains('%') {
        return p.to_string();
    }
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Collects the members of `schema` into `out` and its `required` sets of two keys or
/// more into `sets` (one hint each), through its branches.
fn walk(
    schema: &Value,
    root: &Value,
    depth: usize,
    out: &mut Vec<String>,
    sets: &mut Vec<String>,
    budget: &mut usize,
) {
    if depth > MAX_DEPTH || out.len() >= MAX_HINTS * 4 {
        return;
    }
    let s = resolve(schema, root);
    let Some(m) = s.as_object() else {
        return;
    };
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, ps) in props {
            property_examples(k, ps, root, depth, budget, out);
        }
    }
    // A key each `patternProperties` pattern matches (its shortest match).
    if let Some(pats) = m.get("patternProperties").and_then(Value::as_object) {
        for (p, ps) in pats {
            if let Some(k) = pattern_example(p) {
                property_examples(&k, ps, root, depth, budget, out);
            }
        }
    }
    if let Some(set) = required_members(s, root, depth, budget) {
        if set.len() >= 2 {
            sets.push(set.join(","));
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for b in m.get(key).and_then(Value::as_array).into_iter().flatten() {
            walk(b, root, depth + 1, out, sets, budget);
        }
    }
    for key in ["if", "then", "else"] {
        if let Some(b) = m.get(key) {
            walk(b, root, depth + 1, out, sets, budget);
        }
    }
    if let Some(d) = m.get("dependentSchemas").and_then(Value::as_object) {
        for b in d.values() {
            walk(b, root, depth + 1, out, sets, budget);
        }
    }
}

/// One `"key":value` per key of `s`'s `required` (the value its property's first
/// example, `null` for a key without one), or `None` when it has no `required` list.
fn required_members(
    s: &Value,
    root: &Value,
    depth: usize,
    budget: &mut usize,
) -> Option<Vec<String>> {
    let req = s.get("required")?.as_array()?;
    let props = s.get("properties").and_then(Value::as_object);
    let lookup = |k: &str| props.and_then(|p| p.get(k));
    let keys = req.iter().filter_map(Value::as_str);
    Some(required_set(keys, lookup, root, depth + 1, budget))
}

/// A few values a property's schema may accept, simplest first (a guess the check
/// judges); an object holds its `required` members, [`MAX_DEPTH`] levels down.
fn examples(schema: &Value, root: &Value, depth: usize, budget: &mut usize) -> Vec<String> {
    *budget = budget.saturating_sub(1);
    let s = resolve(schema, root);
    if let Some(c) = s.get("const") {
        return vec![c.to_string()];
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return e.iter().take(PER_PROPERTY).map(Value::to_string).collect();
    }
    // An intersection (`allOf`, as the compiler writes a property that two schemas
    // constrain): a member's `const` or `enum` names the values, else a member's type.
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        if depth < MAX_DEPTH {
            let members: Vec<&Value> = all.iter().map(|b| resolve(b, root)).collect();
            let pick = members
                .iter()
                .find(|b| b.get("const").is_some() || b.get("enum").is_some())
                .or_else(|| members.iter().find(|b| b.get("type").is_some()));
            if let Some(b) = pick {
                return examples(b, root, depth + 1, budget);
            }
        }
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ if s.get("properties").is_some() => vec!["object"],
        _ if s.get("items").is_some() => vec!["array"],
        _ => vec!["null", "string", "integer"],
    };
    let mut out = Vec::new();
    for t in types {
        let v = match t {
            "null" => "null".to_string(),
            "boolean" => "false".to_string(),
            "integer" | "number" => match s.get("minimum").and_then(Value::as_f64) {
                Some(m) if m.is_finite() && m > 0.0 && m.fract() == 0.0 && m < 1e15 => {
                    format!("{}", m as i64)
                }
                _ => "0".to_string(),
            },
            "string" => {
                let n = s
                    .get("minLength")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .min(MAX_EXAMPLE_CHARS);
                let format = s.get("format").and_then(Value::as_str);
                let text = match (s.get("pattern").and_then(Value::as_str), format) {
                    (Some(p), _) => pattern_example(p).unwrap_or_else(|| "a".repeat(n as usize)),
                    (None, Some(f)) => {
                        format_example(f).map_or_else(|| "a".repeat(n as usize), |x| x.to_string())
                    }
                    (None, None) => "a".repeat(n as usize),
                };
                Value::String(text).to_string()
            }
            "object" if depth < MAX_DEPTH && *budget > 0 => {
                match required_members(s, root, depth + 1, budget) {
                    Some(set) if !set.is_empty() => format!("{{{}}}", set.join(",")),
                    // No key required but some member is (`minProperties`): one whose
                    // key a `patternProperties` pattern matches.
                    _ if s.get("minProperties").and_then(Value::as_u64) > Some(0) => {
                        pattern_member(s, root, depth + 1, budget)
                            .map_or_else(|| "{}".to_string(), |m| format!("{{{m}}}"))
                    }
                    _ => "{}".to_string(),
                }
            }
            "object" => "{}".to_string(),
            "array" => "[]".to_string(),
            _ => continue,
        };
        out.push(v);
        if out.len() >= PER_PROPERTY {
            break;
        }
    }
    out
}

/// A short value of string format `format` that Python's and Rust's validators accept
/// (a guess the check judges), for the formats JSON Schema names; `None` for others.
pub(crate) fn format_example(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2000-01-01T00:00:00Z",
        "date" => "2000-01-01",
        "time" => "00:00:00Z",
        "duration" => "P1D",
        "email" | "idn-email" => "a@example.com",
        "hostname" | "idn-hostname" => "example.com",
        "ipv4" => "127.0.0.1",
        "ipv6" => "::1",
        "uri" | "iri" => "http://example.com",
        "uri-reference" | "iri-reference" => "a",
        "uri-template" => "a",
        "uuid" => "00000000-0000-0000-0000-000000000000",
        "json-pointer" => "",
        "relative-json-pointer" => "0",
        "regex" => "a",
        _ => return None,
    })
}

/// The first member of `s` whose key its first translatable `patternProperties` pattern
/// matches (the shortest match), with that pattern's schema's first example.
fn pattern_member(s: &Value, root: &Value, depth: usize, budget: &mut usize) -> Option<String> {
    let pats = s.get("patternProperties")?.as_object()?;
    pats.iter().find_map(|(p, ps)| {
        let k = pattern_example(p)?;
        let v = examples(ps, root, depth, budget).into_iter().next()?;
        Some(format!("{}:{v}", Value::String(k)))
    })
}

/// A shortest string `pattern` matches (ECMA-262, read as the compiler reads it): with
/// the search semantics of `pattern` any match is a value, so this is a string example
/// that passes where no other keyword constrains it (`^/(...)?$` gives `/`, where `""`
/// fails). `None` when the pattern does not translate (a look-around), or the string would
/// pass [`MAX_EXAMPLE_CHARS`]. Anchors and word boundaries are read as empty (the check
/// judges the guess).
/// Cost: a parse of the pattern and one pass over it.
pub(crate) fn pattern_example(pattern: &str) -> Option<String> {
    let translated = super::strings::ecma_to_rust(pattern).ok()?;
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(100)
        .build()
        .parse(&translated)
        .ok()?;
    let mut out = String::new();
    shortest_match(&hir, &mut out)?;
    Some(out)
}

/// Appends a shortest string of `h`'s language to `out` (a printable character from each
/// class where it has one); `None` past [`MAX_EXAMPLE_CHARS`] or for a class without one.
fn shortest_match(h: &regex_syntax::hir::Hir, out: &mut String) -> Option<()> {
    use regex_syntax::hir::{Class, HirKind};
    if out.chars().count() > MAX_EXAMPLE_CHARS as usize {
        return None;
    }
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(l) => out.push_str(std::str::from_utf8(&l.0).ok()?),
        HirKind::Class(Class::Unicode(c)) => {
            let ch = c
                .ranges()
                .iter()
                .flat_map(|r| {
                    let lo = r.start().max(' ');
                    (lo <= r.end()).then_some(lo)
                })
                .find(|ch| !ch.is_control())?;
            out.push(ch);
        }
        HirKind::Class(Class::Bytes(c)) => {
            let b = c
                .ranges()
                .iter()
                .flat_map(|r| r.start().max(b' ')..=r.end().min(b'~'))
                .next()?;
            out.push(b as char);
        }
        HirKind::Repetition(r) => {
            // The sub-match once, then copies until the limit: a nest of counted empty
            // groups (`((a{0}){1000}){1000}`) costs nothing.
            let mut one = String::new();
            shortest_match(&r.sub, &mut one)?;
            if !one.is_empty() {
                for _ in 0..r.min {
                    if out.chars().count() > MAX_EXAMPLE_CHARS as usize {
                        return None;
                    }
                    out.push_str(&one);
                }
            }
        }
        HirKind::Capture(c) => shortest_match(&c.sub, out)?,
        HirKind::Concat(v) => {
            for x in v {
                shortest_match(x, out)?;
            }
        }
        HirKind::Alternation(v) => {
            let best = v
                .iter()
                .filter_map(|x| {
                    let mut s = String::new();
                    shortest_match(x, &mut s).map(|()| s)
                })
                .min_by_key(|s| s.chars().count())?;
            out.push_str(&best);
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_come_from_every_branch_through_references() {
        let root = json!({
            "definitions": {"field": {"type": "object", "oneOf": [
                {"properties": {"type": {"enum": ["callback"]}, "value": {"type": "string"}}},
                {"properties": {"type": {"enum": ["field", "value"]},
                                "value": {"type": ["string", "null"]}}}
            ]}},
            "properties": {"a~b": {"$ref": "#/definitions/field"}}
        });
        let m = members(&json!({"$ref": "#/definitions/field"}), &root);
        for want in [
            r#""type":"callback""#,
            r#""type":"field""#,
            r#""type":"value""#,
            r#""value":"""#,
            r#""value":null"#,
        ] {
            assert!(m.iter().any(|h| h == want), "{want} missing from {m:?}");
        }
        assert!(m.windows(2).all(|w| w[0].len() <= w[1].len()));
        // Escaped keys and pointers.
        let m = members(&json!({"$ref": "#/properties/a~0b"}), &root);
        assert!(m.iter().any(|h| h == r#""type":"callback""#), "{m:?}");
        assert!(members(&json!({"$ref": "#/nowhere"}), &root).is_empty());
        assert!(members(&json!(true), &root).is_empty());
    }

    #[test]
    fn required_sets_are_one_hint_and_objects_hold_their_required_members() {
        let root = json!({"type": "object", "required": ["call"], "properties": {
            "call": {"type": "object", "required": ["controller", "parent"],
                     "properties": {"controller": {}, "parent": {"type": "integer", "minimum": 3}}}
        }});
        let m = members(&root, &root);
        assert_eq!(m[0], r#""call":{"controller":null,"parent":3}"#, "{m:?}");
        let inner = members(&root["properties"]["call"], &root);
        assert_eq!(inner[0], r#""controller":null,"parent":3"#, "{inner:?}");
        assert!(inner.contains(&r#""parent":3"#.to_string()), "{inner:?}");
        // A schema that requires itself: bounded.
        let root = json!({"$defs": {"n": {"type": "object", "required": ["next", "x"],
            "properties": {"next": {"$ref": "#/$defs/n"}, "x": {"const": 1}}}}});
        let m = members(&json!({"$ref": "#/$defs/n"}), &root);
        assert!(
            m[0].starts_with(r#""next":{"next":{"#) && m.len() <= MAX_HINTS,
            "{m:?}"
        );
    }

    #[test]
    fn intersections_and_long_strings_give_values_that_pass() {
        let root = json!({"type": "object", "required": ["g", "s"], "properties": {
            "g": {"allOf": [{"type": "string"}, {"enum": ["client_credentials", "x"]}]},
            "s": {"type": "string", "minLength": 30}
        }});
        let m = members(&root, &root);
        let want = format!(r#""g":"client_credentials","s":"{}""#, "a".repeat(30));
        assert_eq!(m[0], want, "{m:?}");
    }

    #[test]
    fn patterned_strings_give_a_shortest_match() {
        for (p, want) in [
            ("^/(([a-z]|%[0-9a-f]{2})+(/[a-z]*)*)?$", Some("/")),
            ("^[A-Z]{2}-\\d{3}$", Some("AA-000")),
            ("abc|de", Some("de")),
            ("^(?!x)y$", None),
            ("^a{300}$", None),
            ("^((((a{0}){1000}){1000}){1000})b$", Some("b")),
            ("^(ab){3}$", Some("ababab")),
        ] {
            assert_eq!(super::pattern_example(p).as_deref(), want, "{p}");
        }
        let root = json!({"type": "object", "required": ["p", "q"], "properties": {
            "p": {"type": "string", "pattern": "^/x*$"}, "q": {"type": "string"}}});
        assert_eq!(members(&root, &root)[0], r#""p":"/","q":"""#);
    }

    /// A `patternProperties` key is its pattern's shortest match, an object that needs a
    /// member but names no key holds one, and a formatted string is a value of the format.
    #[test]
    fn pattern_keys_and_formats_give_values_that_pass() {
        let blocks = json!({"type": "object", "minProperties": 1, "additionalProperties": false,
            "patternProperties": {"^B[0-9]+$": {"type": "object"}}});
        assert!(members(&blocks, &blocks).contains(&r#""B0":{}"#.to_string()));
        let root = json!({"type": "object", "properties": {"blocks": blocks,
            "at": {"type": "string", "format": "date-time"}}});
        let hints = members(&root, &root);
        assert!(
            hints.contains(&r#""blocks":{"B0":{}}"#.to_string()),
            "{hints:?}"
        );
        assert!(
            hints.contains(&r#""at":"2000-01-01T00:00:00Z""#.to_string()),
            "{hints:?}"
        );
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&root)
            .unwrap();
        for h in hints {
            let v: Value = serde_json::from_str(&format!("{{{h}}}")).unwrap();
            assert!(validator.is_valid(&v), "{h}");
        }
        for f in [
            "date-time",
            "date",
            "time",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "uri",
            "uri-reference",
            "uuid",
            "json-pointer",
            "relative-json-pointer",
            "regex",
            "iri",
            "iri-reference",
            "idn-email",
            "idn-hostname",
            "uri-template",
        ] {
            let s = json!({"type": "string", "format": f});
            let validator = jsonschema::options()
                .should_validate_formats(true)
                .build(&s)
                .unwrap();
            let x = format_example(f).unwrap();
            assert!(validator.is_valid(&json!(x)), "{f}: {x}");
        }
    }

    #[test]
    fn self_references_stop() {
        let root = json!({"$defs": {"a": {"$ref": "#/$defs/a"}}});
        assert!(members(&json!({"$ref": "#/$defs/a"}), &root).is_empty());
        let root = json!({"$defs": {"n": {"properties": {"x": {"const": 1}},
                                         "anyOf": [{"$ref": "#/$defs/n"}]}}});
        assert_eq!(
            members(&json!({"$ref": "#/$defs/n"}), &root),
            vec![r#""x":1"#]
        );
    }
}
