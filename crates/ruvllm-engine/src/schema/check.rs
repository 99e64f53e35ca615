//! Semantic checks: the part of a schema that a grammar cannot express.
//!
//! Some keywords are not context-free as written: `uniqueItems`, an exclusive `oneOf` whose
//! branches overlap, a general `not`, `if`/`then`/`else`, `contains`, `dependentRequired`,
//! `minProperties` over optional keys, `multipleOf`, or a `pattern` the translator cannot
//! turn into a regular language. For a sub-schema that uses one, the compiler builds the
//! grammar of a **relaxed** copy (those keywords removed, `oneOf` read as `anyOf`: a
//! superset of the valid instances) and attaches a [`SchemaCheck`] of the **original**
//! sub-schema to the rule. The parser runs the check each time the rule's value completes,
//! and drops the completion when it fails: the token that would complete an invalid value
//! is never allowed.
//!
//! Trade-offs: the masks stay sound (an invalid value is never completed) and every valid
//! value is still accepted, but a prefix can become a dead end when all its completions
//! fail the check (e.g. `[1,1` under `uniqueItems` with items `{"enum":[1,2]}`, where only
//! `,2]` would do after `[1,2`). Checks therefore cover only what the grammar cannot, and
//! each check parses and validates the value's text (linear in the value; the validator is
//! compiled once per schema node).
//!
//! The validator is the `jsonschema` crate, with the whole root document registered so that
//! `$ref`s inside the checked sub-schema resolve as they do in the original.
//!
//! **One validator per schema.** The checked sub-schemas of a document are compiled
//! together, as the properties `"0"`, `"1"`, ... of one wrapper schema, and check `i`
//! validates `{"i": value}`. Built one by one, every validator compiled again the
//! definitions its `$ref`s reach and the regexes of its `pattern`s, which the checks of
//! one document mostly share: on the 172 MaskBench files that take over 10 ms to compile,
//! 2,085 separate builds took 578 ms, the same checks as 144 wrappers 207 ms. The wrapper
//! is built when the schema's compile ends ([`CheckBuilder::finish`]); if it fails, the
//! checks are built one by one to name the sub-schema at fault.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use jsonschema::{Draft, Registry, Validator};
use serde_json::{Map, Value};

use crate::grammar::{Check, InnerFix, ValueCheck};
use crate::util::{skip_blanks, value_end};

use super::SchemaError;

/// The URI under which the root document is registered for the checks' `$ref`s.
const ROOT_URI: &str = "file:///ruvllm/root.json";

/// Validates a value's text against one sub-schema: property `key` of the document's
/// wrapper validator (see the module docs).
pub(crate) struct SchemaCheck {
    validator: Arc<OnceLock<Validator>>,
    key: String,
    pointer: String,
    /// Members the sub-schema names (`super::hints`).
    hints: Vec<String>,
    /// The root document, where the sub-schema has a `not` (a value it refutes may be
    /// built through `$ref`s, [`witness`]); shared by the document's checks.
    root: Option<Arc<Value>>,
}

impl std::fmt::Debug for SchemaCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SchemaCheck(#{})", self.pointer)
    }
}

impl SchemaCheck {
    /// `f` over the validator's errors on the value `text` (under the check's wrapper
    /// key) and the value's instance path; `None` when `text` is not JSON, or not an
    /// object when `objects` (or the validator is not set). Cost: a parse of `text`, and
    /// the validation `f` drives.
    fn with_errors<R>(
        &self,
        text: &[u8],
        objects: bool,
        f: impl FnOnce(Box<dyn Iterator<Item = jsonschema::ValidationError<'_>> + '_>, &str) -> R,
    ) -> Option<R> {
        let validator = self.validator.get()?;
        let v = serde_json::from_slice::<Value>(text).ok()?;
        if objects && !v.is_object() {
            return None;
        }
        let wrapped = Value::Object(Map::from_iter([(self.key.clone(), v)]));
        let at = format!("/{}", self.key);
        let r = f(Box::new(validator.iter_errors(&wrapped)), &at);
        Some(r)
    }
}

impl ValueCheck for SchemaCheck {
    fn accepts(&self, text: &[u8]) -> bool {
        // The wrapper is set before the grammar leaves the schema compiler; were it not,
        // nothing would pass (never a relaxed check).
        let Some(validator) = self.validator.get() else {
            return false;
        };
        match serde_json::from_slice::<Value>(text) {
            Ok(v) => validator.is_valid(&Value::Object(Map::from_iter([(self.key.clone(), v)]))),
            Err(_) => false,
        }
    }

    fn member_hints(&self) -> &[String] {
        &self.hints
    }

    /// The `required` keys the validator reports missing on the object itself, and under
    /// an `anyOf`/`oneOf` that fails, those of the branch with the fewest errors (the
    /// fill writes them and the check judges the result). Cost: a validation of the value
    /// that collects every error.
    fn missing_keys(&self, text: &[u8]) -> Vec<String> {
        self.with_errors(text, true, |errors, at| {
            let mut out = Vec::new();
            for e in errors {
                required_missing(&e, at, &mut out, 0, false);
            }
            out
        })
        .unwrap_or_default()
    }

    /// [`ValueCheck::missing_keys`]'s first key, then the first missing key of every
    /// other branch of each failed `anyOf`/`oneOf` on the object (fewest errors first),
    /// at most [`KEY_CHOICES`].
    fn key_choices(&self, text: &[u8]) -> Vec<String> {
        self.with_errors(text, true, |errors, at| {
            let errors: Vec<_> = errors.collect();
            let mut first = Vec::new();
            for e in &errors {
                required_missing(e, at, &mut first, 0, false);
            }
            let mut out: Vec<String> = first.into_iter().take(1).collect();
            for e in &errors {
                required_missing(e, at, &mut out, 0, true);
            }
            // An object that more than one `oneOf` branch passes: a key some branch
            // names may tell them apart (written with the grammar's shortest value).
            let both = errors.iter().any(|e| {
                e.instance_path().as_str() == at
                    && matches!(
                        e.kind(),
                        jsonschema::error::ValidationErrorKind::OneOfMultipleValid { .. }
                    )
            });
            if both {
                let present = top_level_keys(text).unwrap_or_default();
                for h in &self.hints {
                    for k in top_level_keys(format!("{{{h}}}").as_bytes()).unwrap_or_default() {
                        if !present.contains(&k) && !out.iter().any(|o| *o == k) {
                            out.push(k.into_owned());
                        }
                    }
                }
            }
            out.truncate(KEY_CHOICES);
            out
        })
        .unwrap_or_default()
    }

    /// The change the first error asks for that says what to write (a nested `required`
    /// key, a type, a format, a `pattern`, a `const` or `enum`, a `minProperties`, a
    /// `minItems`, a `minLength` whose padding clears the string's errors, a member or
    /// element to cut), on the value or below it (or in the fewest-error branch of a
    /// failed `anyOf`/`oneOf` on it), located in `text`: one way at most.
    fn inner_fixes(&self, text: &[u8]) -> Vec<InnerFix> {
        // Whether a changed text has no error left at an instance path (a padded string
        // is offered only where its own errors are gone).
        let clears = |t: &[u8], path: &str| {
            self.with_errors(t, false, |mut errors, _| {
                !errors.any(|e| e.instance_path().as_str() == path)
            })
            .unwrap_or(false)
        };
        // The first error's change; and where several errors ask for replacements in
        // places apart (forty members of the wrong type), all of them at once first: one
        // candidate instead of forty, each a validation of the whole value.
        let root = self.root.as_deref();
        self.with_errors(text, false, |errors, at| {
            let mut fixes: Vec<InnerFix> = Vec::new();
            // The first error's other ways (the other branches of a failed `anyOf`).
            let mut others: Vec<InnerFix> = Vec::new();
            for e in errors.take(MAX_FIXES) {
                // Only the first error's other ways are kept: those of the rest would
                // cost validations (a padded string's) that no candidate uses.
                let most = if fixes.is_empty() { MAX_WAYS } else { 1 };
                let mut ways = inner_fix(&e, at, text, root, most, 0, &clears).into_iter();
                let first = ways.next();
                if first.is_some() && fixes.is_empty() {
                    others.extend(ways);
                }
                match first {
                    // A cut goes alone (the first way) or not at all.
                    Some(fix @ InnerFix::Replace { .. }) if fixes.is_empty() => fixes.push(fix),
                    Some(fix @ InnerFix::Replace { .. })
                        if !matches!(&fix, InnerFix::Replace { text, .. } if text.is_empty()) =>
                    {
                        fixes.push(fix)
                    }
                    Some(fix) if fixes.is_empty() => {
                        others.insert(0, fix);
                        return others;
                    }
                    _ => {}
                }
            }
            let first = fixes.first().cloned();
            let mut out: Vec<InnerFix> = joined(text, fixes).into_iter().collect();
            for f in first.into_iter().chain(others) {
                if !out.contains(&f) {
                    out.push(f);
                }
            }
            out
        })
        .unwrap_or_default()
    }

    /// An error whose instance path is inside member `key`, on the object itself or in
    /// the branch with the fewest errors of a failed `anyOf`/`oneOf` there.
    fn blames_member(&self, text: &[u8], key: &str) -> bool {
        self.with_errors(text, true, |mut errors, at| {
            let member = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
            errors.any(|e| blames(&e, at, &member, 0))
        })
        .unwrap_or(false)
    }

    fn describe(&self) -> String {
        format!("the sub-schema at #{} (validator)", self.pointer)
    }
}

/// Whether error `e` lies inside the member at instance path `member` of the object at
/// `at`, or, for a failed `anyOf`/`oneOf` on that object, its branch with the fewest
/// errors has one that does.
fn blames(e: &jsonschema::ValidationError<'_>, at: &str, member: &str, depth: usize) -> bool {
    use jsonschema::error::ValidationErrorKind as Kind;
    let path = e.instance_path().as_str();
    if path == member || path.starts_with(&format!("{member}/")) {
        return true;
    }
    match e.kind() {
        Kind::AnyOf { context } | Kind::OneOfNotValid { context } if path == at && depth < 8 => {
            context
                .iter()
                .min_by_key(|b| b.len())
                .is_some_and(|b| b.iter().any(|e| blames(e, at, member, depth + 1)))
        }
        _ => false,
    }
}

/// The changes error `e` asks for below the members of the object `text` at instance
/// path `at` (see [`SchemaCheck::inner_fixes`]): located by its instance path, then a
/// change of shape ([`shape_fix`]) or a replacement ([`value_fix`]); for a failed
/// `anyOf`/`oneOf`, those of its branches, fewest errors first (`most` at most).
fn inner_fix(
    e: &jsonschema::ValidationError<'_>,
    at: &str,
    text: &[u8],
    root: Option<&Value>,
    most: usize,
    depth: usize,
    clears: &dyn Fn(&[u8], &str) -> bool,
) -> Vec<InnerFix> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let path = e.instance_path().as_str();
    let mut span = (0, text.len());
    // A failed `anyOf`/`oneOf`, here or nested: each branch's first change, the branch
    // with the fewest errors first.
    if let Kind::AnyOf { context } | Kind::OneOfNotValid { context } = e.kind() {
        if depth >= 8 {
            return Vec::new();
        }
        let mut branches: Vec<_> = context.iter().collect();
        branches.sort_by_key(|b| b.len());
        let mut out: Vec<InnerFix> = Vec::new();
        for b in branches {
            if out.len() >= most {
                break;
            }
            let ways = b
                .iter()
                .map(|e| inner_fix(e, at, text, root, most - out.len(), depth + 1, clears))
                .find(|w| !w.is_empty())
                .unwrap_or_default();
            for w in ways {
                if out.len() < most && !out.contains(&w) {
                    out.push(w);
                }
            }
        }
        return out;
    }
    let own = path == at;
    if !own {
        let Some(rest) = path.strip_prefix(at).and_then(|r| r.strip_prefix('/')) else {
            return Vec::new();
        };
        for seg in rest.split('/') {
            match child_span(text, span, &seg.replace("~1", "/").replace("~0", "~")) {
                Some(s) => span = s,
                None => return Vec::new(),
            }
        }
    }
    if let Some(fix) = shape_fix(e, own, text, span, root) {
        return vec![fix];
    }
    // An `enum`: each member is a way (where the value starts in text already written,
    // only a member that begins the same way can replace it; the fill tries them in turn).
    if let jsonschema::error::ValidationErrorKind::Enum { options } = e.kind() {
        return options
            .as_array()
            .into_iter()
            .flatten()
            .take(MAX_ENUM_WAYS)
            .map(|o| InnerFix::Replace {
                start: span.0,
                end: span.1,
                text: o.to_string(),
            })
            .collect();
    }
    value_fix(e, text, span, clears).into_iter().collect()
}

/// The change of an object's or array's shape that error `e` asks for on the value at
/// `span` of `text` (`own`: the checked value itself): a nested key it requires (its
/// own are the fill's key choices), one more member or element, a key that refutes a
/// `not`, a member or element cut out (with its comma).
fn shape_fix(
    e: &jsonschema::ValidationError<'_>,
    own: bool,
    text: &[u8],
    span: (usize, usize),
    root: Option<&Value>,
) -> Option<InnerFix> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let inner = &text[span.0..span.1];
    let object = inner.first() == Some(&b'{') && inner.last() == Some(&b'}');
    let array = inner.first() == Some(&b'[') && inner.last() == Some(&b']');
    if !object && !array {
        return None;
    }
    let members = inner[1..inner.len() - 1]
        .iter()
        .any(|b| !b" \t\r\n".contains(b));
    let close = span.1 - 1;
    // Cut out item `j` of the container (with its comma).
    let drop = |j: usize| {
        let (a, b) = item_cut(&container_items(inner)?, j)?;
        Some(InnerFix::Replace {
            start: span.0 + a,
            end: span.0 + b,
            text: String::new(),
        })
    };
    let last = || container_items(inner)?.len().checked_sub(1);
    match e.kind() {
        Kind::MinItems { .. } if array => Some(InnerFix::Element {
            close,
            elements: members,
        }),
        // A `oneOf` that a short array passes twice (branches that differ further on):
        // longer, up to a bound (where every length passes twice, the chain would spend
        // the fill's clock).
        Kind::OneOfMultipleValid { .. } if array && container_items(inner)?.len() < MAX_GROW => {
            Some(InnerFix::Element {
                close,
                elements: members,
            })
        }
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected }
            if object =>
        {
            let key = unexpected.first()?;
            drop(
                top_level_members(inner)?
                    .iter()
                    .rposition(|(k, _)| k == key)?,
            )
        }
        Kind::MaxProperties { .. } if object && members => drop(last()?),
        Kind::AdditionalItems { .. } | Kind::UnevaluatedItems { .. } | Kind::MaxItems { .. }
            if array && members =>
        {
            drop(last()?)
        }
        Kind::Required { property } if !own && object => Some(InnerFix::Key {
            close,
            members,
            key: property.as_str()?.to_string(),
        }),
        Kind::MinProperties { .. } if object => Some(more_members(inner, close)),
        Kind::Not { schema } if object => not_refuted(schema, text, span, root, 0),
        _ => None,
    }
}

/// The replacement error `e` asks for of the value at `span` of `text`: a `format`'s
/// example, a `pattern`'s shortest match, a string padded to its `minLength` (the first
/// padding that `clears` its errors), the `const`, the simplest value of the type
/// wanted (an `enum`'s members are ways of their own, see [`inner_fix`]).
fn value_fix(
    e: &jsonschema::ValidationError<'_>,
    text: &[u8],
    span: (usize, usize),
    clears: &dyn Fn(&[u8], &str) -> bool,
) -> Option<InnerFix> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    use jsonschema::JsonType;
    let inner = &text[span.0..span.1];
    let string = inner.first() == Some(&b'"');
    let with = |t: String| {
        Some(InnerFix::Replace {
            start: span.0,
            end: span.1,
            text: t,
        })
    };
    match e.kind() {
        Kind::Format { format } => {
            with(Value::String(super::hints::format_example(format)?.to_string()).to_string())
        }
        Kind::Pattern { pattern } if string => {
            with(Value::String(super::hints::pattern_example(pattern)?).to_string())
        }
        Kind::MinLength { limit } if string => {
            let path = e.instance_path().as_str();
            padded(inner, usize::try_from(*limit).ok()?)
                .into_iter()
                .find(|t| {
                    let mut whole = text[..span.0].to_vec();
                    whole.extend_from_slice(t.as_bytes());
                    whole.extend_from_slice(&text[span.1..]);
                    clears(&whole, path)
                })
                .and_then(with)
        }
        Kind::Constant { expected_value } => with(expected_value.to_string()),
        Kind::Type { kind } => {
            let t = match kind {
                TypeKind::Single(t) => *t,
                TypeKind::Multiple(ts) => ts.iter().next()?,
            };
            let example = match t {
                JsonType::Object => "{}",
                JsonType::Array => "[]",
                JsonType::String => "\"\"",
                JsonType::Integer | JsonType::Number => "0",
                JsonType::Boolean => "true",
                JsonType::Null => "null",
            };
            with(example.to_string())
        }
        _ => None,
    }
}

/// The change to the object at `span` of `text` that would make the `not` sub-schema
/// `schema` fail where it holds now:
/// - under `propertyNames: {not: S}`, a key `S` allows (its `const`, first `enum`
///   string, or a pattern's shortest match) when no key present is one;
/// - under `patternProperties` (or `properties`), a member whose value fails its
///   sub-schema: where a key present matches, its value replaced by one that fails (see
///   [`refuting`]); else a key the pattern matches, whose value a later step fixes;
/// - under an `anyOf`/`oneOf` (each branch must fail) or an `allOf` (one must), the
///   first branch's that gives one.
///
/// `None` for any other shape. These are guesses the check then judges. Cost: a walk of
/// `schema` (depth 8 at most), a regex compile per pattern.
fn not_refuted(
    schema: &Value,
    text: &[u8],
    span: (usize, usize),
    root: Option<&Value>,
    depth: usize,
) -> Option<InnerFix> {
    let m = schema.as_object()?;
    let inner = text.get(span.0..span.1)?;
    if depth > 8 {
        return None;
    }
    let keys = top_level_keys(inner)?;
    let members = !keys.is_empty();
    let key = |key: String| InnerFix::Key {
        close: span.1 - 1,
        members,
        key,
    };
    if let Some(names) = m.get("propertyNames") {
        return key_not_refutes(names, &keys).map(key);
    }
    // A member whose key `matches` and whose value fails `sub`.
    let member = |matches: &dyn Fn(&str) -> bool, sub: &Value, example: Option<String>| match keys
        .iter()
        .find(|k| matches(k))
    {
        Some(k) => {
            let (start, end) = child_span(text, span, k)?;
            Some(InnerFix::Replace {
                start,
                end,
                text: refuting(sub, root, depth)?.to_string(),
            })
        }
        None => example.filter(|e| matches(e)).map(key),
    };
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        if let Some(fix) = props
            .iter()
            .find_map(|(k, sub)| member(&|x| x == k, sub, Some(k.clone())))
        {
            return Some(fix);
        }
    }
    if let Some(props) = m.get("patternProperties").and_then(Value::as_object) {
        if let Some(fix) = props.iter().find_map(|(p, sub)| {
            let re = super::strings::ecma_to_rust(p)
                .ok()
                .and_then(|r| regex_automata::meta::Regex::new(&r).ok())?;
            member(&|x| re.is_match(x), sub, super::hints::pattern_example(p))
        }) {
            return Some(fix);
        }
    }
    ["anyOf", "oneOf", "allOf"].iter().find_map(|k| {
        m.get(*k)?
            .as_array()?
            .iter()
            .find_map(|b| not_refuted(b, text, span, root, depth + 1))
    })
}

/// A key that an object with `keys` lacks and that `propertyNames: names` refuses where
/// `names` is `{not: S}`: `S`'s `const`, first `enum` string, or its pattern's shortest
/// match; `None` where a key present already is one, or for another shape.
fn key_not_refutes(names: &Value, keys: &[Cow<'_, str>]) -> Option<String> {
    let s = names.get("not")?;
    let allowed: Vec<String> = match (s.get("const"), s.get("enum"), s.get("pattern")) {
        (Some(Value::String(c)), _, _) => vec![c.clone()],
        (_, Some(Value::Array(e)), _) => e
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        (_, _, Some(Value::String(p))) => {
            return super::hints::pattern_example(p).filter(|k| !keys.iter().any(|x| x == k));
        }
        _ => return None,
    };
    if keys.iter().any(|k| allowed.iter().any(|a| a == k)) {
        return None;
    }
    allowed.into_iter().next()
}

/// A value that fails the sub-schema `sub` (a guess the check judges): for `false`,
/// `null`; for `{not: S}`, a value `S` accepts ([`witness`]); for a `type`, a value of a
/// type it does not list. `None` for another shape. `root` resolves `$ref`s.
fn refuting(sub: &Value, root: Option<&Value>, depth: usize) -> Option<Value> {
    if sub == &Value::Bool(false) {
        return Some(Value::Null);
    }
    if let Some(s) = sub.get("not") {
        return witness(s, root, depth + 1);
    }
    let types: Vec<&str> = match sub.get("type")? {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    [
        ("null", Value::Null),
        ("boolean", Value::Bool(true)),
        ("string", Value::String(String::new())),
        ("object", Value::Object(Map::new())),
        ("array", Value::Array(Vec::new())),
    ]
    .into_iter()
    .find(|(t, _)| !types.contains(t))
    .map(|(_, v)| v)
}

/// A value that the sub-schema `s` accepts, built from the keywords that constrain a
/// value alone (a guess the check judges): its `const`, first `enum` member, a
/// `pattern`'s or `format`'s example string, the simplest value of its `type` (the
/// `minimum` for a number), an object with the member a `not` of its members asks for
/// ([`refuted_into`]), `0` for `true` or `{}`; a `$ref` is followed into `root`. `None`
/// for another shape (a combinator, a bound it cannot meet) or past depth 8.
fn witness(s: &Value, root: Option<&Value>, depth: usize) -> Option<Value> {
    if depth > 8 {
        return None;
    }
    if s == &Value::Bool(true) {
        return Some(Value::from(0));
    }
    let m = s.as_object()?;
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        let (_, fragment) = r.split_once('#')?;
        return witness(root?.pointer(fragment)?, root, depth + 1);
    }
    if let Some(c) = m.get("const") {
        return Some(c.clone());
    }
    if let Some(e) = m.get("enum") {
        return e.as_array()?.first().cloned();
    }
    if let Some(p) = m.get("pattern").and_then(Value::as_str) {
        return Some(Value::String(super::hints::pattern_example(p)?));
    }
    if let Some(f) = m.get("format").and_then(Value::as_str) {
        return Some(Value::String(super::hints::format_example(f)?.to_string()));
    }
    let simple = ["type", "minimum", "not", "title", "description", "$comment"];
    if m.keys().any(|k| !simple.contains(&k.as_str())) {
        return None;
    }
    let t = match m.get("type") {
        None => "null",
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.first()?.as_str()?,
        _ => return None,
    };
    if m.contains_key("not") && t != "object" {
        return None;
    }
    Some(match t {
        "object" => {
            let mut members = Map::new();
            if let Some(n) = m.get("not") {
                refuted_into(n, &mut members, root, depth + 1)?;
            }
            Value::Object(members)
        }
        "array" => Value::Array(Vec::new()),
        "string" => Value::String(String::new()),
        "integer" | "number" => {
            let lo = m.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            Value::from(lo.ceil() as i64)
        }
        "boolean" => Value::Bool(true),
        "null" => Value::Null,
        _ => return None,
    })
}

/// Adds to `members` the member that makes the `not` sub-schema `n` fail: under
/// `patternProperties` or `properties`, a key its first entry names (a pattern's
/// shortest match) with a value that fails the entry ([`refuting`]); under
/// `propertyNames: {not: S}`, a key `S` allows. `None` for another shape.
fn refuted_into(
    n: &Value,
    members: &mut Map<String, Value>,
    root: Option<&Value>,
    depth: usize,
) -> Option<()> {
    if let Some(names) = n.get("propertyNames") {
        let keys: Vec<Cow<'_, str>> = members.keys().map(|k| Cow::Borrowed(k.as_str())).collect();
        let key = key_not_refutes(names, &keys)?;
        members.insert(key, Value::Null);
        return Some(());
    }
    let (key, sub) = if let Some((k, sub)) = n
        .get("properties")
        .and_then(|p| p.as_object()?.iter().next())
    {
        (k.clone(), sub)
    } else {
        let (p, sub) = n.get("patternProperties")?.as_object()?.iter().next()?;
        (super::hints::pattern_example(p)?, sub)
    };
    members.insert(key, refuting(sub, root, depth + 1)?);
    Some(())
}

/// The replacements `fixes` (into `text`) that do not overlap an earlier one (the
/// first always kept), as one replacement of the text from the first's start to the
/// last's end. `None` without any. Cost: O(fixes²) overlap tests.
fn joined(text: &[u8], mut fixes: Vec<InnerFix>) -> Option<InnerFix> {
    let mut spans: Vec<(usize, usize, String)> = Vec::new();
    for f in fixes.drain(..) {
        if let InnerFix::Replace { start, end, text } = f {
            if spans.iter().all(|s| end <= s.0 || start >= s.1) {
                spans.push((start, end, text));
            }
        }
    }
    spans.sort_by_key(|s| s.0);
    let (start, mut at) = (spans.first()?.0, spans.first()?.0);
    let mut out = Vec::new();
    for (a, b, t) in spans {
        if a < at || a > b || b > text.len() {
            continue;
        }
        out.extend_from_slice(&text[at..a]);
        out.extend_from_slice(t.as_bytes());
        at = b;
    }
    Some(InnerFix::Replace {
        start,
        end: at,
        text: String::from_utf8(out).ok()?,
    })
}

/// One more member for the object `value` (closing brace at `close` in the text the fix
/// is for): any key the grammar allows when it has none, else a key it lacks (`"0"`,
/// `"1"`, ...: the grammar's shortest key, written again, would repeat one).
fn more_members(value: &[u8], close: usize) -> InnerFix {
    let keys = top_level_keys(value).unwrap_or_default();
    if keys.is_empty() {
        return InnerFix::Member {
            close,
            members: false,
        };
    }
    let key = (0..=keys.len())
        .map(|i| i.to_string())
        .find(|k| !keys.iter().any(|x| x == k))
        .unwrap_or_default();
    InnerFix::Key {
        close,
        members: true,
        key,
    }
}

/// The JSON string `text` made `min` characters long by repeating one of its characters
/// (its first, middle or last one, in that order: where a pattern lets one repeat), as
/// JSON texts; `"000…"` for the empty string. Empty when it is long enough already, not
/// a string, or more than [`MAX_PAD`] characters short. Cost: O(min) per text.
pub(crate) fn padded(text: &[u8], min: usize) -> Vec<String> {
    let Ok(s) = serde_json::from_slice::<String>(text) else {
        return Vec::new();
    };
    let chars: Vec<char> = s.chars().collect();
    let need = min.saturating_sub(chars.len());
    if need == 0 || need > MAX_PAD {
        return Vec::new();
    }
    let mut places = vec![0, chars.len() / 2, chars.len().saturating_sub(1)];
    places.dedup();
    places
        .into_iter()
        .map(|i| {
            let c = chars.get(i).copied().unwrap_or('0');
            let mut v = chars.clone();
            v.splice(i..i, std::iter::repeat_n(c, need));
            Value::String(v.into_iter().collect()).to_string()
        })
        .collect()
}

/// The span in `text` of the member `seg` of the object (or the element `seg` of the
/// array) at `span`.
fn child_span(text: &[u8], span: (usize, usize), seg: &str) -> Option<(usize, usize)> {
    let value = text.get(span.0..span.1)?;
    let start = match value.first()? {
        b'{' => {
            let members = top_level_members(value)?;
            span.0 + members.iter().rev().find(|(k, _)| k == seg)?.1
        }
        b'[' => {
            let index: usize = seg.parse().ok()?;
            let mut i = 1;
            for _ in 0..index {
                i = value_end(value, skip_blanks(value, i))?;
                i = skip_blanks(value, i);
                if value.get(i) != Some(&b',') {
                    return None;
                }
                i += 1;
            }
            span.0 + skip_blanks(value, i)
        }
        _ => return None,
    };
    Some((start, value_end(text, start)?))
}

/// The spans of the items of the object or array `value` (a member from its key's
/// opening quote to its value's end; an element, its value), in order; `None` when it is
/// not one. Cost: one pass.
fn container_items(value: &[u8]) -> Option<Vec<(usize, usize)>> {
    let object = match value.first()? {
        b'{' => true,
        b'[' => false,
        _ => return None,
    };
    let mut items = Vec::new();
    let mut i = skip_blanks(value, 1);
    while !matches!(value.get(i)?, b'}' | b']') {
        let start = i;
        if object {
            i = skip_blanks(value, value_end(value, i)?);
            if value.get(i) != Some(&b':') {
                return None;
            }
            i = skip_blanks(value, i + 1);
        }
        // An item that is no value (`[:]`): not a container this reads (and no step
        // that does not move on).
        let end = value_end(value, i).filter(|&e| e > i)?;
        items.push((start, end));
        i = skip_blanks(value, end);
        match value.get(i)? {
            b',' => i = skip_blanks(value, i + 1),
            b'}' | b']' => {}
            _ => return None,
        }
    }
    Some(items)
}

/// What to cut to remove item `j` of `items` ([`container_items`]) with the comma that
/// joins it: from the end of the item before it, or for the first, up to the next.
fn item_cut(items: &[(usize, usize)], j: usize) -> Option<(usize, usize)> {
    let (a, b) = *items.get(j)?;
    Some(match j.checked_sub(1) {
        Some(i) => (items[i].1, b),
        None => (a, items.get(1).map_or(b, |next| next.0)),
    })
}

/// Appends to `out` (once each) the keys that error `e` says the object at instance path
/// `at` lacks: a `required` error's key, and under a failed `anyOf`/`oneOf` there, the
/// keys of its branch with the fewest errors; or, with `each_branch`, only the first new
/// key of every branch of a failed `anyOf`/`oneOf`, fewest errors first (the fill's other
/// choices).
fn required_missing(
    e: &jsonschema::ValidationError<'_>,
    at: &str,
    out: &mut Vec<String>,
    depth: usize,
    each_branch: bool,
) {
    use jsonschema::error::ValidationErrorKind as Kind;
    if e.instance_path().as_str() != at || depth > 8 {
        return;
    }
    match e.kind() {
        // Keys every way needs are not choices (writing them in another order is no
        // other way).
        Kind::Required { .. } if each_branch => {}
        Kind::Required { property } => {
            if let Some(p) = property.as_str().filter(|p| !out.iter().any(|k| k == p)) {
                out.push(p.to_string());
            }
        }
        Kind::AnyOf { context } | Kind::OneOfNotValid { context } => {
            let mut branches: Vec<_> = context.iter().collect();
            branches.sort_by_key(|b| b.len());
            if !each_branch {
                branches.truncate(1);
            }
            for branch in branches {
                let mut keys = Vec::new();
                for e in branch {
                    required_missing(e, at, &mut keys, depth + 1, false);
                }
                keys.retain(|k| !out.contains(k));
                if each_branch {
                    keys.truncate(1);
                }
                out.extend(keys);
            }
        }
        _ => {}
    }
}

/// The most validator errors [`SchemaCheck::inner_fixes`] reads for changes to make at
/// once.
const MAX_FIXES: usize = 256;

/// Whether `schema` has a `not` keyword within depth 16 (outside `const`, `enum`,
/// `default` and `examples`). Cost: a walk of the schema.
fn has_not(schema: &Value, depth: usize) -> bool {
    match schema {
        Value::Object(m) if depth < 16 => m.iter().any(|(k, v)| {
            k == "not"
                || (!matches!(k.as_str(), "const" | "enum" | "default" | "examples")
                    && has_not(v, depth + 1))
        }),
        Value::Array(a) if depth < 16 => a.iter().any(|v| has_not(v, depth + 1)),
        _ => false,
    }
}

/// The most ways a failed `anyOf`/`oneOf` offers (one per branch, fewest errors first).
const MAX_WAYS: usize = 8;

/// The most members of a failed `enum` offered as ways.
const MAX_ENUM_WAYS: usize = 64;

/// The longest array a `oneOf` that more than one branch passes makes longer.
const MAX_GROW: usize = 16;

/// The most characters a `minLength` fix adds to a string (a longer one is left to the
/// search).
const MAX_PAD: usize = 4096;

/// The most ways [`SchemaCheck::key_choices`] offers (the fill tries each in turn).
const KEY_CHOICES: usize = 4;

/// Builds checks for sub-schemas of one root document (the registry is prepared once, the
/// validator of all the checks built once, by [`CheckBuilder::finish`]).
pub(crate) struct CheckBuilder<'a> {
    /// The root document, borrowed (a copy of a large document was 1.4% of compile time
    /// on the MaskBench files that take 15-32 ms).
    registry: Registry<'a>,
    /// The root document, for the checks' member hints.
    root: &'a Value,
    draft: Draft,
    /// The checked sub-schemas (references rebased) with their pointers, by check index.
    schemas: Vec<(Value, String)>,
    validator: Arc<OnceLock<Validator>>,
    /// A copy of the root, made for the first check with a `not` (see [`SchemaCheck`]).
    shared_root: Option<Arc<Value>>,
}

fn draft_of(d: u32) -> Draft {
    match d {
        4 => Draft::Draft4,
        6 => Draft::Draft6,
        7 => Draft::Draft7,
        2019 => Draft::Draft201909,
        _ => Draft::Draft202012,
    }
}

impl<'a> CheckBuilder<'a> {
    /// Registers `root` (cost: one pass over the document, which is borrowed).
    pub(crate) fn new(root: &'a Value, draft: u32) -> Result<CheckBuilder<'a>, String> {
        let draft = draft_of(draft);
        // The validator reads patterns with its engine's Unicode semantics: a copy of the
        // root with ECMA-262's, when any pattern reads differently.
        let registry = if reads_differently(root, 0) {
            // Pattern names kept: the checks' `$ref`s may point into them.
            let mut ecma = root.clone();
            ecma_patterns(&mut ecma, false, 0);
            Registry::new().add(ROOT_URI, draft.create_resource(ecma))
        } else {
            Registry::new().add(ROOT_URI, draft.create_resource_ref(root))
        };
        let registry = registry
            .map_err(|e| e.to_string())?
            .prepare()
            .map_err(|e| e.to_string())?;
        Ok(CheckBuilder {
            registry,
            root,
            draft,
            schemas: Vec::new(),
            validator: Arc::new(OnceLock::new()),
            shared_root: None,
        })
    }

    /// A check that `schema` (located at `pointer`, its `$ref`s relative to the root)
    /// accepts the value. It works once [`CheckBuilder::finish`] has run. Cost: a copy of
    /// `schema`.
    pub(crate) fn build(&mut self, schema: &Value, pointer: &str) -> Check {
        let hints = super::hints::members(schema, self.root);
        let mut s = schema.clone();
        rebase_refs(&mut s, 0);
        ecma_patterns(&mut s, true, 0);
        let key = self.schemas.len().to_string();
        self.schemas.push((s, pointer.to_string()));
        let root = has_not(schema, 0).then(|| {
            self.shared_root
                .get_or_insert_with(|| Arc::new(self.root.clone()))
                .clone()
        });
        Check(Arc::new(SchemaCheck {
            validator: self.validator.clone(),
            key,
            pointer: pointer.to_string(),
            hints,
            root,
        }))
    }

    /// Compiles the validator of every check built. Cost: one `jsonschema` build of the
    /// checked sub-schemas; when it fails, one build per sub-schema up to the failing one,
    /// whose pointer the error names.
    pub(crate) fn finish(mut self) -> Result<(), SchemaError> {
        // The sub-schemas move into the wrapper (no copy); the error path reads them back.
        let schemas = std::mem::take(&mut self.schemas);
        let mut pointers = Vec::with_capacity(schemas.len());
        let props: Map<String, Value> = schemas
            .into_iter()
            .enumerate()
            .map(|(i, (s, pointer))| {
                pointers.push(pointer);
                (i.to_string(), s)
            })
            .collect();
        let wrapper = Value::Object(Map::from_iter([(
            "properties".to_string(),
            Value::Object(props),
        )]));
        match self.compile(&wrapper) {
            Ok(v) => {
                // Only this builder sets it.
                let _ = self.validator.set(v);
                Ok(())
            }
            Err(e) => {
                let props = wrapper["properties"].as_object().into_iter().flatten();
                for ((_, s), pointer) in props.zip(&pointers) {
                    if let Err(e) = self.compile(s) {
                        return Err(super::invalid(
                            pointer,
                            format!("cannot build its validator: {e}"),
                        ));
                    }
                }
                Err(super::invalid(
                    "",
                    format!("cannot build the validator: {e}"),
                ))
            }
        }
    }

    fn compile(&self, schema: &Value) -> Result<Validator, String> {
        jsonschema::options()
            .with_draft(self.draft)
            .should_validate_formats(true)
            .with_format("hostname", super::hostname_format())
            .with_format("uri-template", super::uri_template_format())
            .with_registry(&self.registry)
            .build(schema)
            .map_err(|e| e.to_string())
    }
}

/// ECMA-262's `\s`: what JSON Schema's patterns mean by white space (the validator's regex
/// engine reads Unicode's, which differs at U+0085 and U+FEFF).
/// Written with ECMA-262's escapes: the draft-7 meta-schema checks `patternProperties`'s
/// keys as ECMA regexes.
const ECMA_SPACE: &str =
    r"\t\n\u000B\u000C\r \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\uFEFF";
/// ECMA-262's word characters (ASCII only, whatever the flags).
const ECMA_WORD: &str = "A-Za-z0-9_";

/// A pattern rewritten so that the validator's regex engine (Unicode-aware) reads it as
/// ECMA-262 does: `\b` and `\B` on ASCII word characters, `.` excluding every line
/// terminator, `\s` and `\S` as ECMA's white space (outside character classes: ECMA
/// syntax nests no class, so inside one they are left as written). `None` when nothing
/// changes. Cost: one pass over the pattern.
pub(crate) fn ecma_pattern(p: &str) -> Option<String> {
    if !p.contains(['\\', '.', '{', '}', ']']) {
        return None;
    }
    // An unanchored pattern is a search: a `.*` at its start or end matches the empty
    // text there whatever `.` means, so it goes (`.*` alone matches every string).
    let trimmed = p.strip_prefix(".*").unwrap_or(p);
    let trimmed = match trimmed.strip_suffix(".*") {
        Some(t) if !t.ends_with('\\') => t,
        _ => trimmed,
    };
    if trimmed.len() != p.len() {
        return Some(ecma_pattern(trimmed).unwrap_or_else(|| trimmed.to_string()));
    }
    let w = ECMA_WORD;
    let boundary = format!("(?:(?<=[{w}])(?![{w}])|(?<![{w}])(?=[{w}]))");
    let not_boundary = format!("(?:(?<=[{w}])(?=[{w}])|(?<![{w}])(?![{w}]))");
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut it = p.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some('b') if !in_class => out.push_str(&boundary),
                Some('B') if !in_class => out.push_str(&not_boundary),
                Some('s') if !in_class => out.push_str(&format!("[{ECMA_SPACE}]")),
                Some('S') if !in_class => out.push_str(&format!("[^{ECMA_SPACE}]")),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                    // `\p{Letter}`, `\u{1F600}`: the braces belong to the escape.
                    if matches!(n, 'p' | 'P' | 'u' | 'x') && it.clone().next() == Some('{') {
                        for x in it.by_ref() {
                            out.push(x);
                            if x == '}' {
                                break;
                            }
                        }
                    }
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '.' if !in_class => out.push_str(r"[^\n\r\u2028\u2029]"),
            // Annex B reads a brace that does not make a quantifier as itself; the
            // validator's `regex` format does not: escape it.
            '{' if !in_class => {
                let rest: String = it.clone().collect();
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                let tail = &rest[digits..];
                let more = tail
                    .strip_prefix(',')
                    .map(|t| t.bytes().take_while(u8::is_ascii_digit).count() + 1)
                    .unwrap_or(0);
                if digits > 0 && rest[digits + more..].starts_with('}') {
                    out.push('{');
                    for _ in 0..digits + more + 1 {
                        if let Some(x) = it.next() {
                            out.push(x);
                        }
                    }
                } else {
                    out.push_str("\\{");
                }
            }
            '}' if !in_class => out.push_str("\\}"),
            // So does a `]` that closes no class.
            ']' => out.push_str("\\]"),
            c => out.push(c),
        }
    }
    (out != p).then_some(out)
}

/// Rewrites the `pattern`s of `v` (schema positions) with [`ecma_pattern`], and the
/// `patternProperties` names too when `keys` (not in a document whose `$ref`s may point
/// into them by name); whether anything changed.
pub(crate) fn ecma_patterns(v: &mut Value, keys: bool, depth: usize) -> bool {
    if depth > 256 {
        return false;
    }
    let mut changed = false;
    match v {
        Value::Object(m) => {
            if let Some(Value::String(p)) = m.get_mut("pattern") {
                if let Some(q) = ecma_pattern(p) {
                    *p = q;
                    changed = true;
                }
            }
            if let Some(Value::Object(pp)) = m.get_mut("patternProperties").filter(|_| keys) {
                if pp.keys().any(|k| ecma_pattern(k).is_some()) {
                    let old = std::mem::take(pp);
                    for (k, x) in old {
                        pp.insert(ecma_pattern(&k).unwrap_or(k), x);
                    }
                    changed = true;
                }
            }
            for (k, x) in m.iter_mut() {
                if !matches!(
                    k.as_str(),
                    "enum" | "const" | "default" | "examples" | "pattern"
                ) {
                    changed |= ecma_patterns(x, keys, depth + 1);
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                changed |= ecma_patterns(x, keys, depth + 1);
            }
        }
        _ => {}
    }
    changed
}

/// Whether a `pattern` or `patternProperties` key of `v` reads differently under
/// ECMA-262 (see [`ecma_pattern`]). Cost: one walk, no copy.
fn reads_differently(v: &Value, depth: usize) -> bool {
    if depth > 256 {
        return false;
    }
    match v {
        Value::Object(m) => {
            m.get("pattern")
                .and_then(Value::as_str)
                .is_some_and(|p| ecma_pattern(p).is_some())
                || m.get("patternProperties")
                    .and_then(Value::as_object)
                    .is_some_and(|pp| pp.keys().any(|k| ecma_pattern(k).is_some()))
                || m.iter().any(|(k, x)| {
                    !matches!(
                        k.as_str(),
                        "enum" | "const" | "default" | "examples" | "pattern"
                    ) && reads_differently(x, depth + 1)
                })
        }
        Value::Array(a) => a.iter().any(|x| reads_differently(x, depth + 1)),
        _ => false,
    }
}

/// Points in-document references (`#...`) at the registered root.
fn rebase_refs(v: &mut Value, depth: usize) {
    if depth > 256 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "$ref" => {
                        if let Value::String(r) = x {
                            if r.starts_with('#') {
                                *r = format!("{ROOT_URI}{r}");
                            }
                        }
                    }
                    // Instance data, not schemas.
                    "enum" | "const" | "default" | "examples" => {}
                    // Maps from names to schemas: the names are not keywords.
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas" | "dependencies" => {
                        if let Value::Object(named) = x {
                            named.values_mut().for_each(|s| rebase_refs(s, depth + 1));
                        }
                    }
                    _ => rebase_refs(x, depth + 1),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rebase_refs(x, depth + 1)),
        _ => {}
    }
}

/// The keywords a relaxed grammar left out, when this module checks them itself (see
/// [`native`]).
#[derive(Debug, Default)]
pub(crate) struct Native {
    /// `uniqueItems: true`: an array's items are pairwise different (JSON equality).
    unique: bool,
    /// `minLength` / `maxLength` of a string, in characters (left out next to a `pattern`
    /// the grammar cannot cut to a length).
    length: Option<(usize, usize)>,
    /// `dependencies` (all drafts, as the validator reads them) or `dependentRequired`
    /// (2019-09 on) listing names: when an object has the key, it has all the names.
    deps: Vec<(String, Vec<String>)>,
}

/// A check of what the relaxed copy of `m` lost, when that is only `uniqueItems`, string
/// lengths and name-list dependencies (`draft` says which of those are keywords):
/// `removed` are the keywords of `m` the relaxation stripped (`m`
/// has no `$ref` or combinator, so nothing else was). `None` when any other keyword went,
/// and the sub-schema's validator then checks the value. Cost: O(removed).
///
/// These checks need no `jsonschema` validator: a schema whose only checks are these
/// compiles without one (its build was most of such a compile), and a check costs a parse
/// of the value rather than a validation of all of it.
pub(crate) fn native(m: &Map<String, Value>, removed: &[&str], draft: u32) -> Option<Check> {
    let mut n = Native::default();
    // A malformed bound (not a non-negative integer) goes to the validator, which names it.
    let uint = |k: &str| super::get_uint(m, k, "").ok();
    for &k in removed {
        match k {
            "uniqueItems" => match m.get(k) {
                Some(Value::Bool(true)) => n.unique = true,
                Some(Value::Bool(false)) => {}
                _ => return None,
            },
            "minLength" | "maxLength" => {
                let lo = uint("minLength")?.unwrap_or(0);
                let hi = uint("maxLength")?.unwrap_or(usize::MAX);
                n.length = Some((lo, hi));
            }
            // Before 2019-09 `dependentRequired` is not a keyword (the validator ignores
            // it too).
            "dependentRequired" if draft < 2019 => {}
            "dependencies" | "dependentRequired" => {
                let Some(Value::Object(d)) = m.get(k) else {
                    return None;
                };
                for (key, names) in d {
                    let names = names
                        .as_array()?
                        .iter()
                        .map(|x| x.as_str().map(String::from))
                        .collect::<Option<Vec<String>>>()?;
                    n.deps.push((key.clone(), names));
                }
            }
            _ => return None,
        }
    }
    Some(Check(Arc::new(n)))
}

impl ValueCheck for Native {
    fn accepts(&self, text: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<Value>(text) else {
            return false;
        };
        match &v {
            Value::Array(items) if self.unique => {
                let mut seen = std::collections::HashSet::with_capacity(items.len());
                items.iter().all(|x| {
                    let mut key = String::new();
                    canonical(x, &mut key);
                    seen.insert(key)
                })
            }
            Value::String(s) => self
                .length
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&s.chars().count())),
            Value::Object(o) => self
                .deps
                .iter()
                .all(|(k, names)| !o.contains_key(k) || names.iter().all(|x| o.contains_key(x))),
            _ => true,
        }
    }

    /// A string shorter than `minLength`: the string padded by repeating one of its
    /// characters ([`padded`]), each place a way (the grammar judges which its pattern
    /// allows).
    fn inner_fixes(&self, text: &[u8]) -> Vec<InnerFix> {
        let Some((lo, _)) = self.length else {
            return Vec::new();
        };
        padded(text, lo)
            .into_iter()
            .map(|t| InnerFix::Replace {
                start: 0,
                end: text.len(),
                text: t,
            })
            .collect()
    }

    /// The keys that `dependencies`/`dependentRequired` ask for, of the keys present.
    fn missing_keys(&self, text: &[u8]) -> Vec<String> {
        let Some(keys) = top_level_keys(text) else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        for (k, names) in &self.deps {
            if keys.iter().any(|x| x.as_ref() == k.as_str()) {
                for n in names {
                    if !keys.iter().any(|x| x.as_ref() == n.as_str()) && !out.contains(n) {
                        out.push(n.clone());
                    }
                }
            }
        }
        out
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.unique {
            parts.push("unique array items".to_string());
        }
        if let Some((lo, hi)) = self.length {
            let hi = if hi == usize::MAX {
                "any".to_string()
            } else {
                hi.to_string()
            };
            parts.push(format!("string length {lo}..{hi} characters"));
        }
        for (k, names) in &self.deps {
            parts.push(format!("{names:?} present with {k:?}"));
        }
        parts.join(", ")
    }
}

/// Writes a text of `v` that two values share exactly when they are equal as JSON Schema
/// compares them: numbers by value (`1`, `1.0` and `1e0` alike), object members in any
/// order. Cost: O(size of `v`), plus a sort of each object's keys.
fn canonical(v: &Value, out: &mut String) {
    use std::fmt::Write;
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64().filter(|&u| (u as f64) as u64 != u) {
                // Not a float's value: no float equals it.
                let _ = write!(out, "{u}");
            } else {
                // A float, or a large integer that is one (written as the float is).
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    let _ = write!(out, "{}", f as i64);
                } else {
                    let _ = write!(out, "{f:?}");
                }
            }
        }
        Value::Array(a) => {
            out.push('[');
            for x in a {
                canonical(x, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for k in keys {
                canonical(&Value::String(k.clone()), out);
                out.push(':');
                canonical(&o[k], out);
                out.push(',');
            }
            out.push('}');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// Object key rules for properties in any order: unique keys, required ones present, count
/// within `[min, max]`.
#[derive(Debug)]
struct ObjectKeys {
    required: Vec<String>,
    min: usize,
    max: usize,
    /// Members the completion search may add (`super::hints::object_members`).
    hints: Vec<String>,
}

/// A check of an object's keys (see [`super::SchemaOptions::any_order`]), with the member
/// hints that let the completion search write its required keys.
pub(crate) fn object_keys(
    required: Vec<String>,
    min: usize,
    max: usize,
    hints: Vec<String>,
) -> Check {
    Check(Arc::new(ObjectKeys {
        required,
        min,
        max,
        hints,
    }))
}

impl ValueCheck for ObjectKeys {
    fn accepts(&self, text: &[u8]) -> bool {
        let Some(keys) = top_level_keys(text) else {
            return false;
        };
        if keys.len() < self.min || keys.len() > self.max {
            return false;
        }
        let mut sorted: Vec<&str> = keys.iter().map(|k| k.as_ref()).collect();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return false;
        }
        self.required
            .iter()
            .all(|r| sorted.binary_search(&r.as_str()).is_ok())
    }

    fn member_hints(&self) -> &[String] {
        &self.hints
    }

    /// Fewer keys than `minProperties` and none required missing: one more member, the
    /// first key of the member hints that the object lacks (else any key the grammar
    /// allows).
    fn inner_fixes(&self, text: &[u8]) -> Vec<InnerFix> {
        self.inner_fix(text).into_iter().collect()
    }

    fn missing_keys(&self, text: &[u8]) -> Vec<String> {
        let Some(keys) = top_level_keys(text) else {
            return Vec::new();
        };
        if keys.len() >= self.max {
            return Vec::new();
        }
        self.required
            .iter()
            .filter(|r| !keys.iter().any(|k| k.as_ref() == r.as_str()))
            .take(self.max - keys.len())
            .cloned()
            .collect()
    }

    fn describe(&self) -> String {
        let max = if self.max == usize::MAX {
            "any".to_string()
        } else {
            self.max.to_string()
        };
        format!(
            "object keys in any order: unique, required {:?}, {}..{max} properties",
            self.required, self.min
        )
    }
}

impl ObjectKeys {
    /// The change behind [`ValueCheck::inner_fixes`] for these keys.
    fn inner_fix(&self, text: &[u8]) -> Option<InnerFix> {
        let keys = top_level_keys(text)?;
        let missing = self.required.iter().any(|r| !keys.iter().any(|k| k == r));
        let close = text.iter().rposition(|&b| b == b'}')?;
        if keys.len() >= self.min || missing {
            return None;
        }
        let members = !keys.is_empty();
        let hinted = self.hints.iter().find_map(|h| {
            let key = top_level_keys(format!("{{{h}}}").as_bytes())?
                .into_iter()
                .find(|k| !keys.contains(k))?
                .into_owned();
            Some(key)
        });
        Some(match hinted {
            Some(key) => InnerFix::Key {
                close,
                members,
                key,
            },
            None => more_members(text, close),
        })
    }
}

/// The decoded keys of a JSON object text, in order (duplicates kept). A key without an
/// escape is borrowed from the text; only one with an escape is decoded (by `serde_json`)
/// into a new string. Cost: one pass, no allocation per plain key.
fn top_level_keys(text: &[u8]) -> Option<Vec<Cow<'_, str>>> {
    Some(
        top_level_members(text)?
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
    )
}

/// The decoded keys of a JSON object text, in order (duplicates kept), each with the
/// offset of its value in the text (after the colon and any blanks). Cost: as
/// [`top_level_keys`].
fn top_level_members(text: &[u8]) -> Option<Vec<(Cow<'_, str>, usize)>> {
    let mut keys = Vec::new();
    let mut depth = 0usize;
    // Whether the next string at depth 1 is a key.
    let mut expect_key = false;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if depth == 1 => expect_key = true,
            b'"' => {
                let start = i;
                let mut escaped = false;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\' {
                        escaped = true;
                        i += 1;
                    }
                    i += 1;
                }
                if i >= text.len() {
                    return None;
                }
                if depth == 1 && expect_key {
                    let raw = &text[start + 1..i];
                    let k = if escaped || raw.iter().any(|&b| b < 0x20) {
                        // Escapes to decode, or a raw control character for the parser to
                        // refuse as it always did.
                        Cow::Owned(serde_json::from_slice::<String>(&text[start..=i]).ok()?)
                    } else {
                        Cow::Borrowed(std::str::from_utf8(raw).ok()?)
                    };
                    let mut v = i + 1;
                    while v < text.len() && b" \t\r\n:".contains(&text[v]) {
                        v += 1;
                    }
                    keys.push((k, v));
                    expect_key = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_decode_escaped_keys_and_borrow_plain_ones() {
        let keys =
            top_level_keys(br#"{"a": {"x": 1, "y": [{"z": 2}]}, "b\u0063": "\"k\"", "d": 3}"#)
                .unwrap();
        assert_eq!(keys, ["a", "bc", "d"]);
        assert!(matches!(keys[0], Cow::Borrowed(_)));
        assert!(matches!(keys[1], Cow::Owned(_)));
        // A raw control character in a key is not JSON.
        assert!(top_level_keys(b"{\"a\x01\": 1}").is_none());
        assert!(top_level_keys(b"{\"a\": 1").is_some());
        assert!(top_level_keys(b"{\"a}").is_none());
    }

    #[test]
    fn values_are_located_by_pointer_segments() {
        let t = br#"{"a": {"x": 1, "y": [{"z": "q\"}"}, true]}, "b~/": [], "c":"s"}"#;
        let whole = (0, t.len());
        let a = child_span(t, whole, "a").unwrap();
        assert_eq!(&t[a.0..a.1], br#"{"x": 1, "y": [{"z": "q\"}"}, true]}"#);
        let y = child_span(t, a, "y").unwrap();
        let y1 = child_span(t, y, "1").unwrap();
        assert_eq!(&t[y1.0..y1.1], b"true");
        let z = child_span(t, child_span(t, y, "0").unwrap(), "z").unwrap();
        assert_eq!(&t[z.0..z.1], br#""q\"}""#);
        let x = child_span(t, a, "x").unwrap();
        assert_eq!(&t[x.0..x.1], b"1");
        let b = child_span(t, whole, "b~/").unwrap();
        assert_eq!(&t[b.0..b.1], b"[]");
        assert!(child_span(t, y, "2").is_none());
        assert!(child_span(t, whole, "d").is_none());
        assert!(child_span(t, x, "0").is_none());
    }

    /// What a validator check asks for below an object's own members: a nested object's
    /// missing key (where its closing brace is), or a value of the wrong type replaced.
    /// The first change a check asks for.
    fn first_fix(c: &Check, text: impl AsRef<[u8]>) -> Option<InnerFix> {
        c.0.inner_fixes(text.as_ref()).into_iter().next()
    }

    #[test]
    fn inner_fixes_name_the_nested_change() {
        let root = serde_json::json!({
            "type": "object",
            "patternProperties": {"^/": {"type": "object", "required": ["device"]}},
            "properties": {"n": {"type": "array", "items": {"type": "string"}}}});
        let mut b = CheckBuilder::new(&root, 2020).unwrap();
        let c = b.build(&root, "#");
        b.finish().unwrap();
        let fix = |t: &str| first_fix(&c, t.as_bytes());
        assert_eq!(
            fix(r#"{"/x": {"a": 1}}"#),
            Some(InnerFix::Key {
                close: 14,
                members: true,
                key: "device".into()
            })
        );
        assert_eq!(
            fix(r#"{"/x": {}}"#),
            Some(InnerFix::Key {
                close: 8,
                members: false,
                key: "device".into()
            })
        );
        assert_eq!(
            fix(r#"{"n": ["a", 0], "/": {"device": 1}}"#),
            Some(InnerFix::Replace {
                start: 12,
                end: 13,
                text: "\"\"".into()
            })
        );
        assert_eq!(
            fix(r#"{"/x": 0}"#),
            Some(InnerFix::Replace {
                start: 7,
                end: 8,
                text: "{}".into()
            })
        );
        assert_eq!(fix(r#"{"/x": {"device": 0}}"#), None);
        // On the value itself: a `const`, an `enum`, a `pattern` (its shortest match).
        for (schema, text, want) in [
            (serde_json::json!({"const": "then"}), "0", r#""then""#),
            (serde_json::json!({"enum": [[1], 2]}), "0", "[1]"),
            (
                serde_json::json!({"type": "string", "pattern": "^a+b$"}),
                r#""""#,
                r#""ab""#,
            ),
        ] {
            let mut b = CheckBuilder::new(&schema, 2020).unwrap();
            let c = b.build(&schema, "#");
            b.finish().unwrap();
            assert_eq!(
                first_fix(&c, text.as_bytes()),
                Some(InnerFix::Replace {
                    start: 0,
                    end: text.len(),
                    text: want.into()
                }),
                "{schema}"
            );
        }
        let root = serde_json::json!({"type": "object",
            "properties": {"at": {"type": "string", "format": "date"}}});
        let mut b = CheckBuilder::new(&root, 2020).unwrap();
        let c = b.build(&root, "#");
        b.finish().unwrap();
        assert_eq!(
            first_fix(&c, br#"{"at": "x"}"#),
            Some(InnerFix::Replace {
                start: 7,
                end: 10,
                text: "\"2000-01-01\"".into()
            })
        );
        let root = serde_json::json!({"type": "object", "minProperties": 1,
            "patternProperties": {"^B": {}}, "additionalProperties": false});
        let mut b = CheckBuilder::new(&root, 2020).unwrap();
        let c = b.build(&root, "#");
        b.finish().unwrap();
        assert_eq!(
            first_fix(&c, b"{}"),
            Some(InnerFix::Member {
                close: 1,
                members: false
            })
        );
    }

    #[test]
    fn inner_fixes_grow_and_cut_containers() {
        // Arrays gain elements; members and elements the value may not have are cut out
        // with the comma that joins them.
        let root = serde_json::json!({
            "properties": {"a": {"minItems": 2}, "o": {"additionalProperties": false,
                "properties": {"k": {}}}, "m": {"maxItems": 1}},
            "oneOf": [{"prefixItems": [true, {"const": 1}]}, {"prefixItems": [true, {"const": 2}]}],
            "unevaluatedProperties": false});
        let mut b = CheckBuilder::new(&root, 2020).unwrap();
        let c = b.build(&root, "#");
        b.finish().unwrap();
        let fix = |t: &str| first_fix(&c, t.as_bytes());
        assert_eq!(
            fix(r#"{"a": [ 1 ]}"#),
            Some(InnerFix::Element {
                close: 10,
                elements: true
            })
        );
        assert_eq!(
            fix("[]"),
            Some(InnerFix::Element {
                close: 1,
                elements: false
            })
        );
        let cut = |t: &str| match fix(t) {
            Some(InnerFix::Replace { start, end, text }) if text.is_empty() => {
                format!("{}{}", &t[..start], &t[end..])
            }
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(cut(r#"{"o": {"x": 1, "k": 2}}"#), r#"{"o": {"k": 2}}"#);
        assert_eq!(cut(r#"{"o": {"k": 2 , "x": [1]}}"#), r#"{"o": {"k": 2}}"#);
        assert_eq!(cut(r#"{"o": {"x": {}}}"#), r#"{"o": {}}"#);
        assert_eq!(cut(r#"{"m": [1, 2, 3]}"#), r#"{"m": [1, 2]}"#);
        assert_eq!(cut(r#"{"q": 1}"#), r#"{}"#);
    }

    #[test]
    fn malformed_containers_are_not_read() {
        for t in ["[:]", "[1 2]", "{1}", "{\"a\" 1}", "[", "{\"a\":}"] {
            assert_eq!(container_items(t.as_bytes()), None, "{t}");
        }
        assert_eq!(
            container_items(br#"{"a": [1, {"b": 2}], "c": "}"}"#),
            Some(vec![(1, 19), (21, 29)])
        );
    }

    #[test]
    fn strings_pad_objects_grow_and_replacements_join() {
        // A string too short: one of its characters repeated, at its start, middle, end.
        assert_eq!(
            padded(br#""0.php""#, 8),
            [r#""0000.php""#, r#""0.pppphp""#, r#""0.phpppp""#]
        );
        assert_eq!(padded(br#""""#, 2), [r#""00""#]);
        assert!(padded(br#""abc""#, 3).is_empty());
        assert!(padded(b"0", 3).is_empty());
        // One more member: any key when none, else a key the object lacks.
        assert_eq!(
            more_members(b"{}", 1),
            InnerFix::Member {
                close: 1,
                members: false
            }
        );
        assert_eq!(
            more_members(br#"{"":0,"0":1}"#, 11),
            InnerFix::Key {
                close: 11,
                members: true,
                key: "1".into()
            }
        );
        // Replacements apart become one; one inside an earlier one is left out.
        let text = br#"[0, 1, 2]"#;
        let r = |start, end, text: &str| InnerFix::Replace {
            start,
            end,
            text: text.into(),
        };
        assert_eq!(
            joined(text, vec![r(7, 8, "{}"), r(1, 2, "[]"), r(1, 3, "x")]),
            Some(r(1, 8, "[], 1, {}"))
        );
        assert_eq!(joined(text, Vec::new()), None);
    }

    #[test]
    fn a_not_asks_for_the_member_it_refutes() {
        let fix = |schema: Value, text: &str| {
            not_refuted(&schema, text.as_bytes(), (0, text.len()), None, 0)
        };
        let key = |k: &str, members: bool, close: usize| {
            Some(InnerFix::Key {
                close,
                members,
                key: k.into(),
            })
        };
        let schema = serde_json::json!({"anyOf": [
            {"propertyNames": {"not": {"enum": ["1", "3"]}}},
            {"propertyNames": {"not": {"enum": ["2", "3"]}}}]});
        assert_eq!(fix(schema.clone(), "{}"), key("1", false, 1));
        assert_eq!(fix(schema.clone(), r#"{"1":0}"#), key("2", true, 6));
        assert_eq!(fix(schema, r#"{"3":0}"#), None);
        let schema = serde_json::json!({"propertyNames": {"not": {"const": "k"}}});
        assert_eq!(fix(schema, r#"{"a":0}"#), key("k", true, 6));
        assert_eq!(fix(serde_json::json!({"type": "object"}), "{}"), None);
        // A `not` of `patternProperties`: a key the pattern matches, then its value
        // replaced by one the inner `not` refuses.
        let schema = serde_json::json!({"patternProperties": {"c": {"not":
            {"type": "string", "pattern": "99"}}}});
        assert_eq!(fix(schema.clone(), "{}"), key("c", false, 1));
        let text = r#"{"x":1,"abc": 0}"#;
        assert_eq!(
            fix(schema, text),
            Some(InnerFix::Replace {
                start: 14,
                end: 15,
                text: r#""99""#.into()
            })
        );
        let schema = serde_json::json!({"properties": {"n": {"type": "integer"}}});
        assert_eq!(fix(schema.clone(), "{}"), key("n", false, 1));
        assert_eq!(
            fix(schema, r#"{"n":1}"#),
            Some(InnerFix::Replace {
                start: 5,
                end: 6,
                text: "null".into()
            })
        );
    }

    #[test]
    fn object_keys_check_counts_requires_and_refuses_duplicates_through_escapes() {
        let c = object_keys(vec!["a".into(), "é".into()], 2, 3, Vec::new());
        assert!(c.0.accepts(r#"{"a": 1, "é": 2}"#.as_bytes()));
        assert!(c.0.accepts(br#"{"\u00e9": 2, "a": {"b": 1}}"#));
        // "\u0061" is "a": a duplicate key.
        assert!(!c.0.accepts(br#"{"a": 1, "\u0061": 1, "\u00e9": 2}"#));
        assert!(!c.0.accepts(br#"{"a": 1}"#));
        assert!(!c.0.accepts(br#"{"a": 1, "b": 2}"#));
        assert!(!c.0.accepts(br#"{"a": 1, "b": 2, "c": 3, "\u00e9": 4}"#));
    }
}
