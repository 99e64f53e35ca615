//! JSON Schema to grammar.
//!
//! # Design
//!
//! A schema is compiled to the same grammar IR as GBNF, so it gets the same exact masks. The
//! rule is **exactness or refusal**: every instance the grammar completes must validate, and
//! every keyword is either enforced exactly or refused with an error naming it and its JSON
//! pointer. Nothing is relaxed silently.
//!
//! * Combinators are resolved at the schema level: `allOf` (and siblings of `anyOf`, `oneOf`,
//!   `$ref`) are **intersected** keyword by keyword (types, properties with their
//!   `additionalProperties`, required, bounds, items...), and `anyOf`/`oneOf` become
//!   alternatives. `oneOf` is accepted when its branches are provably disjoint (different
//!   types, different constants, a required property with disjoint values); otherwise it is
//!   refused, since a plain alternative would accept instances matching two branches.
//! * `$ref` targets become rules, so recursive schemas need no unrolling.
//! * Strings are matched in their JSON encoding: a `pattern` or `format` is a regex over the
//!   decoded characters, translated so that each character may appear raw or in the escaped
//!   forms a serializer produces (`\"`, `\\`, `\/`, `\n`, `\u001f`...). Lengths count code
//!   points (a `\uD83D\uDE00` pair is one).
//! * Numbers: integer ranges are exact decimal-digit automata; `integer` also accepts
//!   `1.0` and `1e3` (integral values); bounded `number`s accept plain decimal notation.
//!
//! * What no grammar expresses (a general `not`, `oneOf` with overlapping branches,
//!   `if`/`then`/`else`, `uniqueItems` (except over a small `enum`, which is a grammar of
//!   used-value sets), `contains`, `patternProperties`, `propertyNames`,
//!   `dependentRequired`/`dependentSchemas`/`dependencies`, `min/maxProperties` over
//!   optional keys, `multipleOf`, `unevaluated*`, non-integer bounds, `pattern` combined
//!   with lengths or another pattern, regexes the translator cannot read) is handled by a
//!   **semantic check** (see the `check` module): the sub-schema's grammar is relaxed to a superset
//!   and the original sub-schema is validated each time its value completes, so the token
//!   that would complete an invalid value is refused.
//!
//! Whitespace between tokens follows [`Whitespace`]; properties come in schema order, or in
//! any order with [`SchemaOptions::any_order`].
//!
//! References (other documents from a registry, dynamic scopes, other drafts) are
//! resolved into one document first (see `bundle`). Refused (with the keyword and its
//! JSON pointer): a reference to nothing in the schema or the registry, content
//! encodings no validator knows, required vocabularies nobody defines,
//! and anything past the limits (nesting depth, grammar size, number of checks).

mod bundle;
mod check;
mod dec;
mod drafts;
mod format;
mod num;

use format::{format_check, format_regex};

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use regex_syntax::hir::{Class, Hir, HirKind, Look};
use serde_json::{Map, Value};
use thiserror::Error;

pub use bundle::{bundle, needs_bundle, RegistryError, SchemaRegistry, DOCS_KEY};

use crate::grammar::json_string::{json_chars, short_escapes, spelled_raw_only};
use crate::grammar::{Check, Expr, Grammar, KeyComplement, Rule, RuleId};
use crate::{GrammarError, Limits};

/// Where whitespace may appear between JSON tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Whitespace {
    /// None at all.
    Compact,
    /// At most one space or tab, or a newline plus up to 20 spaces/tabs of indentation,
    /// between any two tokens: compact and pretty-printed JSON, no runaway whitespace.
    #[default]
    Bounded,
    /// Any JSON whitespace (space, tab, CR, LF), up to this many characters at a time.
    Flexible(u32),
}

/// Options for compiling a schema.
#[derive(Debug, Clone, Default)]
pub struct SchemaOptions {
    /// Whitespace policy.
    pub whitespace: Whitespace,
    /// OpenAI-style strict mode: `additionalProperties: false` wherever it is not given.
    pub strict: bool,
    /// `additionalProperties: false` wherever it is not given in an object schema that
    /// declares `properties` (an object schema without them stays open: there is nothing
    /// to close it to). What Ollama's `format` and llama.cpp's `json_schema` do; small
    /// models otherwise invent keys. Off by default (the JSON Schema default).
    pub closed_objects: bool,
    /// Whether object properties must come in schema order (the default: fewer choices
    /// for the model, one canonical output) or may come in any order (what a validator
    /// accepts; required keys, duplicates and property counts are then enforced by a
    /// semantic check on each object, see the `check` module).
    pub any_order: bool,
    /// Write `integer` values as plain digits (`-?(0|[1-9][0-9]*)`, what JSON encoders
    /// emit) rather than also as `1.0…` or `1e0`, which a validator accepts for `integer`.
    /// Like [`Whitespace::Compact`], a subset of the valid documents: it keeps a model
    /// from looping on `1.000…` until the token limit. Off by default (the exact
    /// language); generation (`JsonModeConfig`, the server) turns it on.
    pub plain_integers: bool,
    /// Objects never repeat a key: an object that may take keys beyond the declared ones
    /// gets a semantic check that its keys are unique (declared keys are written once by
    /// the grammar already). RFC 8259 says names should be unique and no reader keeps
    /// both values, but JSON Schema says nothing of it, so it is off by default (the
    /// conformance runs keep the spec's semantics); generation (`JsonModeConfig`, the
    /// server) turns it on.
    pub unique_keys: bool,
    /// At most this many digits in the integer part and in the fraction of a number,
    /// and two in its exponent, wherever the schema leaves that open (`None`, the
    /// default: any number of digits). A subset of the valid documents, like
    /// [`Whitespace::Compact`]: what JSON encoders write (a 64-bit integer has at most 20
    /// digits, a double at most 17 significant ones and a 3-digit exponent, which 2
    /// digits keep within a double's range), so that every reader can represent the
    /// value and a model cannot run on writing digits. Generation turns it on (20).
    pub number_digits: Option<u32>,
    /// Schemas that `$ref`s may name besides the one compiled, by URI (see
    /// [`SchemaRegistry`]); nothing is ever fetched over the network. `None`: references
    /// resolve inside the document only.
    pub registry: Option<Arc<SchemaRegistry>>,
    /// Numbers only in the spellings a grammar alone says: plain decimal notation for
    /// bounded numbers, integers and number constants, without the exponent spellings that
    /// need a check of the exact value. A subset of the valid documents, for grammars
    /// that must carry no semantic check (`ruvllm schema to-gbnf`). Off by default.
    pub plain_numbers: bool,
}

impl SchemaOptions {
    /// The options of generation (`JsonModeConfig`, the server, the CLI): the subsets
    /// that keep a model from running on (compact whitespace, plain integers, numbers of
    /// at most 20 digits) and objects that never repeat a key; objects open, properties in
    /// schema order. Cost: O(1).
    pub fn generation() -> SchemaOptions {
        SchemaOptions {
            whitespace: Whitespace::Compact,
            strict: false,
            closed_objects: false,
            any_order: false,
            plain_integers: true,
            unique_keys: true,
            number_digits: Some(20),
            registry: None,
            plain_numbers: false,
        }
    }
}

/// Why a schema cannot be compiled.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SchemaError {
    /// A keyword (or a use of it) that is not enforced exactly, so the schema is refused.
    #[error("unsupported: `{keyword}` at {pointer}: {reason}")]
    Unsupported {
        /// The keyword.
        keyword: String,
        /// JSON pointer of the schema holding it.
        pointer: String,
        /// Why.
        reason: String,
    },
    /// The schema is malformed.
    #[error("invalid schema at {pointer}: {msg}")]
    Invalid {
        /// JSON pointer.
        pointer: String,
        /// What is wrong.
        msg: String,
    },
    /// No JSON value satisfies the schema (or it never terminates, like a `$ref` cycle).
    #[error("the schema at {pointer} allows no value")]
    Unsatisfiable {
        /// JSON pointer.
        pointer: String,
    },
    /// A reference that names no schema in the document or the registry.
    #[error("unresolved reference {uri:?} at {pointer}: {reason}")]
    UnresolvedRef {
        /// The reference as written.
        uri: String,
        /// JSON pointer of the schema holding it (`uri#pointer` in a registry document).
        pointer: String,
        /// What is missing.
        reason: String,
    },
    /// A budget was exceeded while compiling the schema.
    #[error(
        "schema limit exceeded at {pointer}: {what} is {value}, the limit is {limit} ({kind})"
    )]
    Limit {
        /// Which quantity.
        what: &'static str,
        /// Its value when compilation stopped.
        value: usize,
        /// The limit in force.
        limit: usize,
        /// JSON pointer of the sub-schema being compiled.
        pointer: String,
        /// Which [`Limits`] field raises it.
        kind: crate::error::LimitKind,
    },
    /// A grammar-level error or limit.
    #[error(transparent)]
    Grammar(#[from] GrammarError),
}

fn unsupported(keyword: &str, pointer: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError::Unsupported {
        keyword: keyword.into(),
        pointer: pointer_or_root(pointer),
        reason: reason.into(),
    }
}

fn invalid(pointer: &str, msg: impl Into<String>) -> SchemaError {
    SchemaError::Invalid {
        pointer: pointer_or_root(pointer),
        msg: msg.into(),
    }
}

fn pointer_or_root(p: &str) -> String {
    if p.is_empty() {
        "#".into()
    } else {
        format!("#{p}")
    }
}

/// Whether `m` has a keyword that combines or refers to other schemas (`$ref`, `allOf`,
/// `anyOf`, `oneOf`, `not`): without one, `m` is all of its own constraints.
fn has_combinator(m: &Map<String, Value>) -> bool {
    m.keys()
        .any(|k| matches!(k.as_str(), "$ref" | "allOf" | "anyOf" | "oneOf" | "not"))
}

fn join(ptr: &str, key: &str) -> String {
    let mut out = String::with_capacity(ptr.len() + 1 + key.len());
    out.push_str(ptr);
    out.push('/');
    if key.contains(['~', '/']) {
        out.push_str(&key.replace('~', "~0").replace('/', "~1"));
    } else {
        out.push_str(key);
    }
    out
}

/// Keywords with no effect on validation.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "examples",
    "default",
    "$comment",
    "$schema",
    "$id",
    "$defs",
    "definitions",
    "$anchor",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "$vocabulary",
    "$dynamicAnchor",
    "$recursiveAnchor",
];

/// Validation keywords that are refused when they constrain anything.
const REFUSED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
];

/// Keywords that constrain instances (all others are annotations or unknown, and ignored).
const ASSERTIONS: &[&str] = &[
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
    "format",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "contains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "dependencies",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "dependentSchemas",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
];

const TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// Compiles a JSON Schema to a grammar whose sentences are JSON texts valid under it.
pub fn schema_to_grammar(schema: &Value, opts: &SchemaOptions) -> Result<Grammar, SchemaError> {
    schema_to_grammar_limited(schema, opts, &Limits::default())
}

/// The length of `v` serialized compactly, counted without building the text. Cost: one
/// serialization pass, no allocation.
fn serialized_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => usize::MAX,
    }
}

/// [`schema_to_grammar`] under explicit budgets: the schema's serialized size
/// ([`Limits::max_grammar_bytes`]), its nesting ([`Limits::max_schema_depth`]), the rules
/// it expands to ([`Limits::max_rules`]) and the time spent ([`Limits::max_compile_time`]).
/// Exceeding one is a [`SchemaError::Limit`] naming the JSON pointer where it happened.
/// Cost: one serialization of the schema for the size check, then as [`schema_to_grammar`].
pub fn schema_to_grammar_limited(
    schema: &Value,
    opts: &SchemaOptions,
    limits: &Limits,
) -> Result<Grammar, SchemaError> {
    let size = serialized_len(schema);
    if size > limits.max_grammar_bytes {
        return Err(SchemaError::Limit {
            what: "schema size in bytes",
            value: size,
            limit: limits.max_grammar_bytes,
            pointer: "#".into(),
            kind: crate::error::LimitKind::GrammarBytes,
        });
    }
    // References to other documents, identifiers and dynamic references: resolved into
    // one document first (see `bundle`).
    // A custom meta-schema's vocabularies (see `drafts::apply_vocabularies`).
    let read = drafts::apply_vocabularies(schema, opts.registry.as_deref())?;
    let schema = read.as_ref().unwrap_or(schema);
    let bundled;
    let schema = if needs_bundle(schema) {
        bundled = bundle(schema, draft_of_schema(schema), opts.registry.as_deref())?;
        &bundled
    } else {
        schema
    };
    let mut c = Compiler::new(schema, opts, limits)?;
    let root = c.reserve("root");
    let body = c.compile(schema, "", 0)?;
    c.set(root, body);
    c.drain()?;
    if let Some(b) = c.check_builder.take() {
        b.finish()?;
    }
    let mut g = Grammar {
        rules: c.rules,
        root,
        checks: c.checks,
    };
    match g.prune_unproductive() {
        Err(GrammarError::EmptyLanguage { .. }) => Err(SchemaError::Unsatisfiable {
            pointer: "#".into(),
        }),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(g),
    }
}

/// The schema as one self-contained document for a JSON Schema validator: references to
/// other documents resolved into it from `registry` (see [`bundle`]; nothing is fetched),
/// and patterns rewritten so that a validator with a Unicode regex engine reads them as
/// ECMA-262 does (`\b`, `.`, `\s`). A validator given this document judges as the grammar
/// does. Cost: one walk of the schema; a copy when anything changes.
pub fn validator_document(
    schema: &Value,
    registry: Option<&SchemaRegistry>,
) -> Result<Value, SchemaError> {
    let read = drafts::apply_vocabularies(schema, registry)?;
    let schema = read.as_ref().unwrap_or(schema);
    let mut doc = if needs_bundle(schema) {
        bundle(schema, draft_of_schema(schema), registry)?
    } else {
        schema.clone()
    };
    // Pattern names kept where a `$ref` may point into them by name.
    let keys = !serde_json::to_string(&doc).is_ok_and(|t| t.contains("/patternProperties/"));
    check::ecma_patterns(&mut doc, keys, 0);
    Ok(doc)
}

/// The draft a schema's `$schema` names: 4, 6, 7, 2019 or 2020 (the default).
fn draft_of_schema(root: &Value) -> u32 {
    match root.get("$schema").and_then(|s| s.as_str()) {
        Some(s) if s.contains("draft-04") || s.contains("draft-03") => 4,
        Some(s) if s.contains("draft-06") => 6,
        Some(s) if s.contains("draft-07") => 7,
        Some(s) if s.contains("2019-09") => 2019,
        _ => 2020,
    }
}

struct Compiler<'a> {
    root: &'a Value,
    /// The draft from `$schema`: 4, 6, 7, 2019 or 2020 (the default).
    draft: u32,
    opts: &'a SchemaOptions,
    rules: Vec<Rule>,
    ref_rules: HashMap<String, RuleId>,
    queue: Vec<(String, RuleId)>,
    /// Checked sub-schemas by [`value_key`] (see `compile_checked`).
    checked_by_value: HashMap<(u64, u64), RuleId>,
    /// The keys of `checked_by_value` in insertion order (to undo a failed attempt).
    checked_log: Vec<(u64, u64)>,
    anchors: HashMap<String, String>,
    common: HashMap<&'static str, RuleId>,
    /// Semantic checks attached to rules (see [`check`]).
    checks: Vec<(RuleId, Check)>,
    check_builder: Option<check::CheckBuilder<'a>>,
    /// Checks built so far, by what they check: the same sub-schema reached again (each
    /// combination of an `allOf` of `oneOf`s copies its properties) gets the same check,
    /// so that the grammar's equal rules can be merged (see
    /// [`Grammar::merge_equal_rules`], which merges checked rules only with the same
    /// check).
    check_memo: HashMap<String, Check>,
    /// The rule of each long enum (see [`SHARED_ENUM`]), by its alternatives.
    enums: crate::util::FastMap<Expr, RuleId>,
    /// The rule of each key complement made so far, by its sorted key set: objects with
    /// the same declared keys (a definition inlined in many places) share it, so the
    /// compiler measures and lowers it once.
    key_sets: HashMap<Vec<String>, RuleId>,
    /// The grammar of each `pattern` (and `format` regex) translated so far, unanchored
    /// and anchored: a definition inlined in many places, or one `format` used by many
    /// properties, parses and translates its regex once per schema (the parse was 70% of
    /// the translation). Only successes are kept (an error names the pointer it is at).
    patterns: [HashMap<String, Expr>; 2],
    /// The grammar of each number constant compiled so far (see
    /// [`Compiler::number_literal`]): a value met again (enums repeat `0`, `1`...) reuses
    /// its rules, so that its checked rule exists once.
    number_literals: HashMap<dec::Dec, Expr>,
    limits: &'a Limits,
    started: std::time::Instant,
}

/// Enums of at least this many values become a rule shared by their copies.
const SHARED_ENUM: usize = 64;

/// Most semantic checks in one schema.
const MAX_CHECKS: usize = 512;

/// Keywords no grammar here expresses, besides the [`REFUSED`] ones that a check can
/// enforce: stripped from a sub-schema that needs a semantic check, and enforced by it.
const CHECK_ONLY_EXTRA: &[&str] = &["uniqueItems", "minProperties", "maxProperties", "oneOf"];

/// Whether an `Unsupported` error can be handled by a relaxed grammar plus a semantic check.
/// Dynamic references left unresolved and unknown content encodings cannot; known draft-7 content assertions can (see `check_content`).
fn relaxable(keyword: &str, reason: &str) -> bool {
    match keyword {
        "$ref" => reason.contains("recursive"),
        "contentEncoding" | "contentMediaType" => reason == CONTENT_CHECKED,
        "$dynamicRef" | "$recursiveRef" | "contentSchema" => false,
        _ => true,
    }
}

/// A 128-bit structural hash of `v`: two SipHash passes with different fixed keys
/// (deterministic). Equal values get equal keys; two different sub-schemas sharing one
/// has odds of 2^-128. Cheaper than serializing the value (no allocation, no number
/// formatting), which mattered: a checked sub-schema may contain most of the schema.
fn value_key(v: &Value) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut a = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0x5eed_u32.hash(&mut b);
    v.hash(&mut b);
    (a.finish(), b.finish())
}

/// The reason of the `Unsupported` error that sends draft-7 content assertions to a check.
const CONTENT_CHECKED: &str = "content assertions are checked when the string completes";

/// The keywords to strip for an `Unsupported` error on `keyword`.
fn strip_for(keyword: &str, reason: &str) -> Vec<&'static str> {
    match keyword {
        "pattern" | "format" if reason.contains("minLength") => vec!["minLength", "maxLength"],
        "pattern" if reason.contains("format") => vec!["format"],
        "pattern" => vec!["pattern"],
        "format" => vec!["format"],
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
            vec!["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
        }
        "minLength" | "maxLength" => vec!["minLength", "maxLength"],
        "contentEncoding" | "contentMediaType" => vec!["contentEncoding", "contentMediaType"],
        "minItems" | "maxItems" => vec!["minItems", "maxItems"],
        "anyOf" => vec!["anyOf"],
        "items" | "prefixItems" | "additionalItems" => {
            vec!["items", "prefixItems", "additionalItems"]
        }
        "enum" | "const" => vec!["enum", "const"],
        "additionalProperties" | "properties" | "required" => {
            vec!["additionalProperties", "properties", "required"]
        }
        _ => vec![],
    }
}

/// Alternatives to intersect with, and the pointer of a `oneOf` that must stay exclusive.
type Part = (Vec<Map<String, Value>>, Option<String>);
/// A sub-schema and its JSON pointer.
type Located<'v> = (&'v Value, String);
const MAX_BRANCHES: usize = 256;

impl<'a> Compiler<'a> {
    fn new(
        root: &'a Value,
        opts: &'a SchemaOptions,
        limits: &'a Limits,
    ) -> Result<Self, SchemaError> {
        let mut anchors = HashMap::new();
        collect_anchors(root, "", &mut anchors, 0);
        let draft = draft_of_schema(root);
        Ok(Compiler {
            root,
            draft,
            opts,
            rules: Vec::new(),
            ref_rules: HashMap::new(),
            queue: Vec::new(),
            checked_by_value: HashMap::new(),
            checked_log: Vec::new(),
            anchors,
            common: HashMap::new(),
            checks: Vec::new(),
            check_builder: None,
            check_memo: HashMap::new(),
            enums: Default::default(),
            key_sets: HashMap::new(),
            patterns: [HashMap::new(), HashMap::new()],
            number_literals: HashMap::new(),
            limits,
            started: std::time::Instant::now(),
        })
    }

    fn reserve(&mut self, name: &str) -> RuleId {
        // No budget check here (callers index the new rule at once): `compile_exact`
        // checks `Limits::max_rules` before compiling anything further.
        self.rules.push(Rule {
            name: name.to_string(),
            body: Expr::Alt(vec![]),
        });
        (self.rules.len() - 1) as RuleId
    }

    fn set(&mut self, r: RuleId, body: Expr) {
        self.rules[r as usize].body = body;
    }

    fn rule(&mut self, name: &str, body: Expr) -> Expr {
        let r = self.reserve(name);
        self.set(r, body);
        Expr::Ref(r)
    }

    fn drain(&mut self) -> Result<(), SchemaError> {
        while let Some((ptr, r)) = self.queue.pop() {
            let target = self
                .lookup(&ptr)
                .ok_or_else(|| invalid(&ptr, "unresolvable $ref"))?;
            let body = self.compile(target, &ptr, 0)?;
            self.set(r, body);
        }
        Ok(())
    }

    // ---- references -------------------------------------------------------------------

    fn lookup(&self, ptr: &str) -> Option<&'a Value> {
        self.root.pointer(ptr)
    }

    /// Resolves a `$ref` value to a pointer into the root document.
    fn resolve(&self, r: &str, at: &str) -> Result<String, SchemaError> {
        let frag = if let Some(f) = r.strip_prefix('#') {
            f
        } else {
            return Err(unsupported(
                "$ref",
                at,
                format!("only references within the document are supported, not {r:?}"),
            ));
        };
        let frag = percent_decode(frag);
        let ptr = if frag.is_empty() || frag.starts_with('/') {
            frag
        } else {
            self.anchors
                .get(&frag)
                .cloned()
                .ok_or_else(|| invalid(at, format!("unknown anchor {r:?}")))?
        };
        if self.lookup(&ptr).is_none() {
            return Err(invalid(at, format!("$ref {r:?} points nowhere")));
        }
        Ok(ptr)
    }

    fn ref_rule(&mut self, ptr: String) -> Expr {
        if let Some(&r) = self.ref_rules.get(&ptr) {
            return Expr::Ref(r);
        }
        let r = self.reserve(&format!("ref{}", ptr.replace('/', "-")));
        self.ref_rules.insert(ptr.clone(), r);
        self.queue.push((ptr, r));
        Expr::Ref(r)
    }

    // ---- schemas ------------------------------------------------------------------------

    /// Compiles a sub-schema: exactly when the grammar can express it, else as a relaxed
    /// grammar plus a semantic check of the original (see [`check`]).
    fn compile(&mut self, s: &Value, ptr: &str, depth: usize) -> Result<Expr, SchemaError> {
        match self.compile_exact(s, ptr, depth) {
            Err(SchemaError::Unsupported {
                keyword, reason, ..
            }) if relaxable(&keyword, &reason) => {
                self.compile_checked(s, ptr, depth, &keyword, &reason)
            }
            r => r,
        }
    }

    /// A checked sub-schema, one rule per distinct value: references are pointers into
    /// the root, so equal values mean the same wherever they are. This also ends the
    /// recursion of a relaxed schema whose inlined references lead back to itself (a
    /// recursive `$ref` beside `unevaluatedProperties`).
    fn compile_checked(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
        keyword: &str,
        reason: &str,
    ) -> Result<Expr, SchemaError> {
        // At depth 0 (the root, or a `$ref` target, which `ref_rule` already compiles once
        // per pointer) a value does not recur: no key to compute.
        if depth == 0 {
            return self.compile_checked_once(s, ptr, depth, keyword, reason);
        }
        let key = value_key(s);
        if let Some(&r) = self.checked_by_value.get(&key) {
            return Ok(Expr::Ref(r));
        }
        let r = self.reserve(&format!("checkedv{}", ptr.replace('/', "-")));
        let mark = self.checked_log.len();
        self.checked_by_value.insert(key, r);
        self.checked_log.push(key);
        match self.compile_checked_once(s, ptr, depth, keyword, reason) {
            Ok(body) => {
                self.set(r, body);
                Ok(Expr::Ref(r))
            }
            Err(e) => {
                // A caller may retry with a looser schema: no rule of this failed attempt
                // (empty, or referring to one that is) may be found again.
                for k in self.checked_log.drain(mark..) {
                    self.checked_by_value.remove(&k);
                }
                Err(e)
            }
        }
    }

    fn compile_checked_once(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
        keyword: &str,
        reason: &str,
    ) -> Result<Expr, SchemaError> {
        if self.checks.len() >= MAX_CHECKS {
            let why = if reason.contains("semantic checks") {
                reason.to_string()
            } else {
                format!("{reason} (and the schema needs more than {MAX_CHECKS} semantic checks)")
            };
            return Err(unsupported(keyword, ptr, why));
        }
        let mut strip: Vec<&str> = REFUSED
            .iter()
            .chain(CHECK_ONLY_EXTRA)
            .copied()
            .filter(|k| relaxable(k, ""))
            .collect();
        strip.extend(strip_for(keyword, reason));
        let mut body = None;
        for _ in 0..4 {
            let relaxed = self.with_encoding(s, self.relax(s, &strip, 0));
            match self.compile_exact(&relaxed, ptr, depth) {
                Ok(b) => {
                    body = Some(b);
                    break;
                }
                Err(SchemaError::Unsupported {
                    keyword, reason, ..
                }) if relaxable(&keyword, &reason) => {
                    let more = strip_for(&keyword, &reason);
                    if more.iter().all(|k| strip.contains(k)) {
                        break;
                    }
                    strip.extend(more);
                }
                Err(e) => return Err(e),
            }
        }
        let relaxed_ok = body.is_some();
        let body = match body {
            Some(b) => b,
            // Last resort: any value of the declared types, everything else checked.
            None => {
                let loose = match s.get("type") {
                    Some(t) => serde_json::json!({ "type": t }),
                    None => Value::Bool(true),
                };
                self.compile_exact(&loose, ptr, depth)?
            }
        };
        // What the relaxation left out, when this module checks it without a validator.
        if let Some(m) = s.as_object().filter(|m| relaxed_ok && !has_combinator(m)) {
            let removed: Vec<&str> = m
                .keys()
                .map(|k| k.as_str())
                .filter(|k| strip.contains(k))
                .collect();
            // Only the encoding left out, and `with_encoding` put it in the grammar as a
            // pattern: the grammar is exact, nothing to check.
            let encoded = removed == ["contentEncoding"]
                && !["pattern", "format", "minLength", "maxLength"]
                    .iter()
                    .any(|k| m.contains_key(*k));
            if encoded {
                return Ok(body);
            }
            if let Some(c) = check::native(m, &removed, self.draft) {
                return Ok(self.checked_rule(
                    &format!("checked{}", ptr.replace('/', "-")),
                    body,
                    c,
                ));
            }
        }
        if self.check_builder.is_none() {
            self.check_builder = Some(
                check::CheckBuilder::new(self.root, self.draft)
                    .map_err(|e| invalid("", format!("cannot register the schema: {e}")))?,
            );
        }
        // One check per value: `compile_checked` already memoizes by value.
        let c = self.check_builder.as_mut().unwrap().build(s, ptr);
        Ok(self.checked_rule(&format!("checked{}", ptr.replace('/', "-")), body, c))
    }

    /// A copy of `s` without the keywords in `strip` (and `oneOf` read as `anyOf`), with
    /// references inlined (up to a depth, then any value): a superset of `s` for the
    /// grammar. Sub-schemas of properties and items are kept: they are compiled (and
    /// checked if need be) on their own.
    fn relax(&self, s: &Value, strip: &[&str], depth: usize) -> Value {
        let m = match s {
            Value::Object(m) => m,
            other => return other.clone(),
        };
        if depth > 6 {
            return Value::Bool(true);
        }
        let mut out = Map::new();
        let mut all_of: Vec<Value> = Vec::new();
        if let Some(Value::String(r)) = m.get("$ref") {
            if let Some(t) = self.resolve(r, "").ok().and_then(|p| self.lookup(&p)) {
                let t = self.relax(t, strip, depth + 1);
                if self.draft <= 7 {
                    return t; // siblings of $ref are ignored before 2019-09
                }
                all_of.push(t);
            } else {
                out.insert("$ref".into(), Value::String(r.clone()));
            }
        }
        for (k, v) in m {
            let k = k.as_str();
            if k == "$ref" {
                continue;
            }
            if k == "oneOf" && strip.contains(&"oneOf") {
                let branches: Vec<Value> = v
                    .as_array()
                    .map(|a| a.iter().map(|b| self.relax(b, strip, depth + 1)).collect())
                    .unwrap_or_default();
                all_of.push(serde_json::json!({ "anyOf": branches }));
                continue;
            }
            if strip.contains(&k) {
                continue;
            }
            match k {
                "allOf" | "anyOf" => {
                    let branches: Vec<Value> = v
                        .as_array()
                        .map(|a| a.iter().map(|b| self.relax(b, strip, depth + 1)).collect())
                        .unwrap_or_default();
                    if k == "allOf" {
                        all_of.extend(branches);
                    } else {
                        out.insert(k.into(), Value::Array(branches));
                    }
                }
                // Keys a stripped patternProperties would have allowed.
                "additionalProperties"
                    if strip.contains(&"patternProperties")
                        && m.contains_key("patternProperties") => {}
                _ => {
                    out.insert(k.into(), v.clone());
                }
            }
        }
        if !all_of.is_empty() {
            out.insert("allOf".into(), Value::Array(all_of));
        }
        Value::Object(out)
    }

    fn compile_exact(&mut self, s: &Value, ptr: &str, depth: usize) -> Result<Expr, SchemaError> {
        let limit = |what, value, limit, kind| SchemaError::Limit {
            what,
            value,
            limit,
            pointer: pointer_or_root(ptr),
            kind,
        };
        if depth > self.limits.max_schema_depth {
            return Err(limit(
                "schema nesting depth",
                depth,
                self.limits.max_schema_depth,
                crate::error::LimitKind::SchemaDepth,
            ));
        }
        if self.rules.len() > self.limits.max_rules {
            return Err(limit(
                "number of rules",
                self.rules.len(),
                self.limits.max_rules,
                crate::error::LimitKind::Rules,
            ));
        }
        let spent = self.started.elapsed();
        if spent > self.limits.max_compile_time {
            return Err(limit(
                "schema compile time in ms",
                spent.as_millis() as usize,
                self.limits.max_compile_time.as_millis() as usize,
                crate::error::LimitKind::CompileTime,
            ));
        }
        let m = match s {
            Value::Bool(true) => return Ok(self.any_value()),
            Value::Bool(false) => return Ok(Expr::Alt(vec![])),
            Value::Object(m) => m,
            _ => return Err(invalid(ptr, "a schema must be an object or a boolean")),
        };
        check_keywords(m, ptr)?;
        self.check_content(m, ptr)?;
        // A pure reference becomes a rule (recursion-friendly). Before 2019-09, `$ref`
        // overrides its siblings.
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            if self.draft <= 7
                || m.keys()
                    .all(|k| k == "$ref" || ANNOTATIONS.contains(&k.as_str()))
            {
                let target = self.resolve(r, ptr)?;
                return Ok(self.ref_rule(target));
            }
        }
        // anyOf/oneOf without sibling constraints: compile branches independently.
        let siblings_free = |m: &Map<String, Value>, k: &str| {
            m.keys()
                .all(|x| x == k || ANNOTATIONS.contains(&x.as_str()))
        };
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = m.get(key) {
                if siblings_free(m, key) {
                    let list = list
                        .as_array()
                        .filter(|l| !l.is_empty())
                        .ok_or_else(|| invalid(ptr, format!("{key} must be a non-empty array")))?;
                    if key == "oneOf" {
                        self.check_disjoint(list.iter().collect(), &join(ptr, key))?;
                    }
                    let mut alts = Vec::new();
                    for (i, b) in list.iter().enumerate() {
                        alts.push(self.compile(
                            b,
                            &join(&join(ptr, key), &i.to_string()),
                            depth + 1,
                        )?);
                    }
                    return Ok(Expr::Alt(alts));
                }
            }
        }
        // Nothing to resolve: `flatten` would only copy `m` less its annotations, which no
        // lowering reads. The copy is deep (a `properties` subtree at every level of the
        // schema), so it is skipped.
        if !has_combinator(m) {
            return self.simple(m, ptr, depth);
        }
        let branches = self.flatten(m, ptr, 0)?;
        let mut alts = Vec::new();
        for b in &branches {
            alts.push(self.simple(b, ptr, depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }

    /// Resolves combinators into a list of combinator-free schemas (their union).
    fn flatten(
        &self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Vec<Map<String, Value>>, SchemaError> {
        if depth > 16 {
            return Err(unsupported(
                "$ref",
                ptr,
                "recursive reference inside allOf/anyOf/oneOf with sibling keywords",
            ));
        }
        check_keywords(m, ptr)?;
        self.check_content(m, ptr)?;
        let mut base = Map::new();
        for (k, v) in m {
            if !matches!(k.as_str(), "allOf" | "anyOf" | "oneOf" | "$ref")
                && !ANNOTATIONS.contains(&k.as_str())
            {
                base.insert(k.clone(), v.clone());
            }
        }
        if let Some(n) = base.remove("not") {
            match not_types(&n) {
                Some(None) => {}
                Some(Some(mask)) => {
                    let names: Vec<Value> =
                        ["null", "boolean", "object", "array", "string", "integer"]
                            .iter()
                            .filter(|t| mask & type_bit(t) == type_bit(t))
                            .map(|t| {
                                Value::String(if *t == "integer" && mask & T_NUMBER != 0 {
                                    "number".into()
                                } else {
                                    t.to_string()
                                })
                            })
                            .collect();
                    if names.is_empty() {
                        return Ok(vec![]);
                    }
                    let restricted = Map::from_iter([("type".to_string(), Value::Array(names))]);
                    base = match merge(&base, &restricted, ptr)? {
                        Some(b) => b,
                        None => return Ok(vec![]),
                    };
                }
                None => {
                    return Err(unsupported(
                        "not",
                        ptr,
                        "only `not` of a boolean, {} or a type-only schema is supported yet",
                    ))
                }
            }
        }
        let mut cur = vec![base];
        let mut parts: Vec<Part> = Vec::new();
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            let t = self.resolve(r, ptr)?;
            parts.push((
                self.flatten_value(self.lookup(&t).unwrap(), &t, depth + 1)?,
                None,
            ));
        }
        if let Some(list) = m.get("allOf") {
            let list = list
                .as_array()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| invalid(ptr, "allOf must be a non-empty array"))?;
            for (i, x) in list.iter().enumerate() {
                parts.push((
                    self.flatten_value(x, &join(&join(ptr, "allOf"), &i.to_string()), depth + 1)?,
                    None,
                ));
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = m.get(key) {
                let list = list
                    .as_array()
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| invalid(ptr, format!("{key} must be a non-empty array")))?;
                let mut alts = Vec::new();
                for (i, x) in list.iter().enumerate() {
                    alts.extend(self.flatten_value(
                        x,
                        &join(&join(ptr, key), &i.to_string()),
                        depth + 1,
                    )?);
                }
                parts.push((alts, (key == "oneOf").then(|| join(ptr, key))));
            }
        }
        for (alts, one_of) in parts {
            let mut next = Vec::new();
            for a in &cur {
                for b in &alts {
                    if let Some(x) = merge(a, b, ptr)? {
                        next.push(x);
                    }
                }
            }
            if let Some(p) = one_of {
                // Exclusivity holds for the merged branches if they are pairwise disjoint.
                let vals: Vec<Value> = next.iter().map(|m| Value::Object(m.clone())).collect();
                self.check_disjoint(vals.iter().collect(), &p)?;
            }
            if next.len() > MAX_BRANCHES {
                return Err(unsupported(
                    "anyOf",
                    ptr,
                    format!("the combination expands to more than {MAX_BRANCHES} alternatives"),
                ));
            }
            cur = next;
        }
        Ok(cur)
    }

    fn flatten_value(
        &self,
        v: &Value,
        ptr: &str,
        depth: usize,
    ) -> Result<Vec<Map<String, Value>>, SchemaError> {
        match v {
            Value::Bool(true) => Ok(vec![Map::new()]),
            Value::Bool(false) => Ok(vec![]),
            Value::Object(m) => self.flatten(m, ptr, depth),
            _ => Err(invalid(ptr, "a schema must be an object or a boolean")),
        }
    }

    /// Draft 7 and earlier treat `contentMediaType`/`contentEncoding` as assertions (later
    /// drafts as annotations). The RFC 4648 encodings are enforced as grammar, the
    /// `application/json` media type by a check of the decoded text when the string
    /// completes (an `Unsupported` error [`relaxable`] reads as "check it"); another
    /// encoding is refused. Another media type is an annotation, as it is to the validator
    /// (no validator decides what a valid `image/png` is).
    fn check_content(&self, m: &Map<String, Value>, ptr: &str) -> Result<(), SchemaError> {
        if self.draft > 7 {
            return Ok(());
        }
        let mut found = None;
        if let Some(e) = m.get("contentEncoding") {
            let e = e
                .as_str()
                .ok_or_else(|| invalid(&join(ptr, "contentEncoding"), "must be a string"))?;
            if format::encoding_regex(e).is_none() {
                return Err(unsupported(
                    "contentEncoding",
                    ptr,
                    format!("no validator knows the encoding {e:?} (known: base64, base64url, base32, base32hex, base16)"),
                ));
            }
            found = Some("contentEncoding");
        }
        if let Some(t) = m.get("contentMediaType") {
            let t = t
                .as_str()
                .ok_or_else(|| invalid(&join(ptr, "contentMediaType"), "must be a string"))?;
            // Any other media type is an annotation to every validator (none can say what
            // a valid `application/x-pem-file` is): the check judges as they do.
            if t == "application/json" {
                found = Some("contentMediaType");
            }
        }
        match found {
            Some(k) => Err(unsupported(k, ptr, CONTENT_CHECKED)),
            None => Ok(()),
        }
    }

    /// `relaxed` (the grammar's schema for `s`) with `s`'s draft-7 `contentEncoding` as a
    /// `pattern`, where nothing else constrains the string's text: the encoding is a
    /// regular language, so the grammar says it exactly.
    fn with_encoding(&self, s: &Value, relaxed: Value) -> Value {
        let enc = s
            .get("contentEncoding")
            .and_then(Value::as_str)
            .filter(|_| self.draft <= 7)
            .and_then(format::encoding_regex);
        match (enc, relaxed) {
            (Some(re), Value::Object(mut m))
                if !["pattern", "format", "minLength", "maxLength"]
                    .iter()
                    .any(|k| m.contains_key(*k)) =>
            {
                m.insert("pattern".into(), Value::String(re));
                Value::Object(m)
            }
            (_, relaxed) => relaxed,
        }
    }

    /// Refuses a `oneOf` whose branches may overlap.
    fn check_disjoint(&self, list: Vec<&Value>, ptr: &str) -> Result<(), SchemaError> {
        let shapes: Vec<Shape> = list.iter().map(|v| self.shape(v, 0)).collect();
        for i in 0..shapes.len() {
            for j in i + 1..shapes.len() {
                if !shapes[i].disjoint(&shapes[j]) {
                    return Err(unsupported(
                        "oneOf",
                        ptr,
                        format!("branches {i} and {j} may both match one instance; exclusive oneOf is only supported for provably disjoint branches"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn shape(&self, v: &Value, depth: usize) -> Shape {
        let mut sh = Shape {
            types: ALL_TYPES,
            values: None,
            props: Vec::new(),
        };
        let Value::Object(m) = v else {
            if v == &Value::Bool(false) {
                sh.types = 0;
            }
            return sh;
        };
        if depth > 8 {
            return sh;
        }
        if let Some(Value::String(r)) = m.get("$ref") {
            if let Ok(t) = self.resolve(r, "") {
                if let Some(tv) = self.lookup(&t) {
                    let inner = self.shape(tv, depth + 1);
                    sh = sh.and(inner);
                }
            }
        }
        if let Some(t) = m.get("type") {
            sh.types &= type_mask(t);
        }
        if let Some(c) = m.get("const") {
            sh.values = Some(vec![c.clone()]);
        }
        if let Some(Value::Array(e)) = m.get("enum") {
            sh.values = Some(e.clone());
        }
        if let Some(Value::Array(all)) = m.get("allOf") {
            for x in all {
                let inner = self.shape(x, depth + 1);
                sh = sh.and(inner);
            }
        }
        if let (Some(Value::Object(props)), Some(Value::Array(req))) =
            (m.get("properties"), m.get("required"))
        {
            for r in req {
                if let (Some(name), Some(p)) = (r.as_str(), r.as_str().and_then(|n| props.get(n))) {
                    sh.props.push((name.to_string(), self.shape(p, depth + 1)));
                }
            }
        }
        sh
    }

    // ---- combinator-free schemas --------------------------------------------------------

    fn simple(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let mut types = m.get("type").map(type_mask).unwrap_or(ALL_TYPES);
        if let Some(t) = m.get("type") {
            validate_type_keyword(t, ptr)?;
        }
        if types & T_NUMBER != 0 {
            types |= T_INTEGER;
        }
        // enum / const: the listed values that also pass the other keywords.
        let values: Option<Vec<Value>> = match (m.get("enum"), m.get("const")) {
            (Some(Value::Array(e)), None) => Some(e.clone()),
            (None, Some(c)) => Some(vec![c.clone()]),
            (Some(Value::Array(e)), Some(c)) => {
                Some(e.iter().filter(|x| json_eq(x, c)).cloned().collect())
            }
            (Some(_), _) => return Err(invalid(ptr, "enum must be an array")),
            (None, None) => None,
        };
        if let Some(values) = values {
            let mut alts = Vec::new();
            for v in values {
                if value_passes(&v, m, ptr, self.draft)? {
                    alts.push(self.literal_value(&v));
                }
            }
            if alts.len() < SHARED_ENUM {
                return Ok(Expr::Alt(alts));
            }
            // A long enum is one rule, the same for every copy of it: a schema lists its
            // country or region codes in many places, and each inline copy was lowered
            // (its regex built, printed and hashed) again.
            let body = Expr::Alt(alts);
            if let Some(&r) = self.enums.get(&body) {
                return Ok(Expr::Ref(r));
            }
            let r = self.reserve("enum");
            self.set(r, body.clone());
            self.enums.insert(body, r);
            return Ok(Expr::Ref(r));
        }
        let mut alts = Vec::new();
        if types & T_NULL != 0 {
            alts.push(Expr::Literal(b"null".to_vec()));
        }
        if types & T_BOOLEAN != 0 {
            alts.push(Expr::Alt(vec![
                Expr::Literal(b"true".to_vec()),
                Expr::Literal(b"false".to_vec()),
            ]));
        }
        if types & T_STRING != 0 {
            alts.push(self.string(m, ptr)?);
        }
        if types & (T_NUMBER | T_INTEGER) != 0 {
            alts.push(self.number(m, ptr, types & T_NUMBER == 0)?);
        }
        if types & T_ARRAY != 0 {
            alts.push(self.array(m, ptr, depth)?);
        }
        if types & T_OBJECT != 0 {
            alts.push(self.object(m, ptr, depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }

    fn string(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Expr, SchemaError> {
        let min = get_uint(m, "minLength", ptr)?.unwrap_or(0);
        let max = get_uint(m, "maxLength", ptr)?;
        let pattern = m.get("pattern");
        let format = m.get("format").and_then(|f| f.as_str());
        let quote = || Expr::Literal(b"\"".to_vec());
        // Formats we have no rule for: refused if the standard defines them (a validator may
        // assert them), ignored otherwise (unknown formats are annotations).
        let fmt_re = match format {
            None => None,
            Some(f) => match format_regex(f) {
                Some(r) => Some(r),
                None if KNOWN_FORMATS.contains(&f) => {
                    return Err(unsupported(
                        "format",
                        ptr,
                        format!("format {f:?} is not supported yet"),
                    ))
                }
                None => None,
            },
        };
        let body = match (pattern, fmt_re) {
            (None, None) => {
                if max.is_some_and(|x| x < min) {
                    return Ok(Expr::Alt(vec![]));
                }
                if min > 10_000 {
                    return Err(unsupported("minLength", ptr, "minLength above 10000"));
                }
                if min == 0 && max.is_none() {
                    // Any string: one rule per schema, which every use refers to.
                    return Ok(self.common("any-string", |s| {
                        let ch = s.json_char();
                        Expr::Seq(vec![
                            quote(),
                            Expr::Repeat {
                                e: Box::new(ch),
                                min: 0,
                                max: None,
                            },
                            quote(),
                        ])
                    }));
                }
                let ch = self.json_char();
                let max = match max {
                    Some(x) if x > 1_000_000 => {
                        return Err(unsupported("maxLength", ptr, "maxLength above 1000000"))
                    }
                    other => other,
                };
                Expr::Repeat {
                    e: Box::new(ch),
                    min: min as u32,
                    max: max.map(|x| x as u32),
                }
            }
            (Some(_), Some(_)) => {
                return Err(unsupported("pattern", ptr, "pattern together with format"))
            }
            (Some(p), None) => {
                if min > 0 || max.is_some() {
                    return Err(unsupported(
                        "pattern",
                        ptr,
                        "pattern together with minLength/maxLength",
                    ));
                }
                let p = p
                    .as_str()
                    .ok_or_else(|| invalid(ptr, "pattern must be a string"))?;
                self.pattern(p, &join(ptr, "pattern"), false)?
            }
            (None, Some(re)) => {
                if min > 0 || max.is_some() {
                    return Err(unsupported(
                        "format",
                        ptr,
                        "format together with minLength/maxLength",
                    ));
                }
                let body = self.pattern(&re, &join(ptr, "format"), true)?;
                let value = Expr::Seq(vec![quote(), body, quote()]);
                // What the format's regex cannot say, checked on the decoded string.
                if let Some(c) = format.and_then(format_check) {
                    return Ok(self.checked_rule(
                        &format!("format{}", ptr.replace('/', "-")),
                        value,
                        c,
                    ));
                }
                return Ok(value);
            }
        };
        Ok(Expr::Seq(vec![quote(), body, quote()]))
    }

    /// A regex over decoded characters, as an expression over their JSON encoding.
    /// ECMAScript semantics: unanchored unless `^`/`$`; `\d`, `\w` ASCII.
    fn pattern(&mut self, p: &str, ptr: &str, anchored: bool) -> Result<Expr, SchemaError> {
        if let Some(e) = self.patterns[anchored as usize].get(p) {
            return Ok(e.clone());
        }
        let e = self.pattern_uncached(p, ptr, anchored)?;
        self.patterns[anchored as usize].insert(p.to_string(), e.clone());
        Ok(e)
    }

    /// [`Compiler::pattern`] without its memo.
    fn pattern_uncached(
        &mut self,
        p: &str,
        ptr: &str,
        anchored: bool,
    ) -> Result<Expr, SchemaError> {
        let translated = ecma_to_rust(p).map_err(|e| unsupported("pattern", ptr, e))?;
        let hir = regex_syntax::ParserBuilder::new()
            .nest_limit(100)
            .build()
            .parse(&translated)
            .map_err(|e| {
                unsupported(
                    "pattern",
                    ptr,
                    format!("cannot parse {p:?}: {}", first_line(&e.to_string())),
                )
            })?;
        let branches: Vec<Hir> = match hir.kind() {
            HirKind::Alternation(a) if !anchored => a.clone(),
            _ => vec![hir],
        };
        // Branches grouped by their anchors, each group one alternation between its
        // shared free ends: `X*A X* | X*B X*` is the language `X*(A|B)X*`, and written
        // that way the subset construction tracks one search instead of one per branch
        // (with seven unanchored keywords, the sets of branches already found made some
        // 2^7 copies of the search: 61 ms to build, against 0.5 ms).
        let mut groups: Vec<((bool, bool), Vec<Expr>)> = Vec::new();
        for b in branches {
            let b = strip_capture(&b);
            let mut parts: Vec<Hir> = match b.kind() {
                HirKind::Concat(v) => v.clone(),
                _ => vec![b.clone()],
            };
            let start = anchored
                || parts
                    .first()
                    .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::Start)));
            let end = anchored
                || parts
                    .last()
                    .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::End)));
            if parts
                .first()
                .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::Start)))
            {
                parts.remove(0);
            }
            if parts
                .last()
                .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::End)))
            {
                parts.pop();
            }
            let mut seq = Vec::new();
            for h in &parts {
                seq.push(self.hir_json(h, ptr)?);
            }
            let body = Expr::Seq(seq);
            match groups.iter_mut().find(|(k, _)| *k == (start, end)) {
                Some((_, v)) => v.push(body),
                None => groups.push(((start, end), vec![body])),
            }
        }
        let mut alts = Vec::new();
        for ((start, end), mut bodies) in groups {
            let body = if bodies.len() == 1 {
                bodies.pop().unwrap()
            } else {
                Expr::Alt(bodies)
            };
            let mut any = || Expr::Repeat {
                e: Box::new(self.json_char()),
                min: 0,
                max: None,
            };
            let mut seq = Vec::new();
            if !start {
                seq.push(any());
            }
            seq.push(body);
            if !end {
                seq.push(any());
            }
            alts.push(Expr::Seq(seq));
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }

    fn hir_json(&mut self, h: &Hir, ptr: &str) -> Result<Expr, SchemaError> {
        Ok(match h.kind() {
            HirKind::Empty => Expr::Empty,
            HirKind::Literal(l) => {
                let s = std::str::from_utf8(&l.0)
                    .map_err(|_| unsupported("pattern", ptr, "byte-level pattern"))?;
                Expr::Seq(s.chars().map(|c| json_chars(&[(c, c)])).collect())
            }
            HirKind::Class(Class::Unicode(c)) => json_chars(
                &c.ranges()
                    .iter()
                    .map(|r| (r.start(), r.end()))
                    .collect::<Vec<_>>(),
            ),
            HirKind::Class(Class::Bytes(_)) => {
                return Err(unsupported("pattern", ptr, "byte-level class"))
            }
            HirKind::Look(_) => {
                return Err(unsupported(
                    "pattern",
                    ptr,
                    "assertions other than a leading ^ and a trailing $",
                ))
            }
            HirKind::Repetition(r) => {
                if r.max.unwrap_or(r.min) > 10_000 {
                    return Err(unsupported("pattern", ptr, "repetition bound above 10000"));
                }
                Expr::Repeat {
                    e: Box::new(self.hir_json(&r.sub, ptr)?),
                    min: r.min,
                    max: r.max,
                }
            }
            HirKind::Capture(c) => self.hir_json(&c.sub, ptr)?,
            HirKind::Concat(v) => Expr::Seq(
                v.iter()
                    .map(|x| self.hir_json(x, ptr))
                    .collect::<Result<_, _>>()?,
            ),
            HirKind::Alternation(v) => Expr::Alt(
                v.iter()
                    .map(|x| self.hir_json(x, ptr))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    fn number(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        integer_only: bool,
    ) -> Result<Expr, SchemaError> {
        // Every numeric keyword is read as an exact decimal (see `dec`): the grammar says
        // what it can, and a check on the exact value says the rest.
        let mut check = dec::NumberCheck {
            integer: integer_only,
            ..Default::default()
        };
        if let Some(mo) = m.get("multipleOf") {
            let x = mo
                .as_number()
                .and_then(dec::Dec::from_number)
                .filter(|x| !x.is_zero() && !x.is_negative())
                .ok_or_else(|| invalid(ptr, "multipleOf must be a positive number"))?;
            // Every integer is a multiple of 1, 0.5, 0.25...: nothing to check.
            let one = dec::Dec::parse(b"1").unwrap_or_else(dec::Dec::zero);
            if !(integer_only && one.is_multiple_of(&x)) {
                check.multiples.push(x);
            }
        }
        let num = |k: &str| -> Result<Option<dec::Dec>, SchemaError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => dec::Dec::from_number(n)
                    .map(Some)
                    .ok_or_else(|| invalid(ptr, format!("{k} must be a finite number"))),
                Some(Value::Bool(_)) if k.starts_with("exclusive") => Ok(None), // draft-4 style handled below
                Some(_) => Err(invalid(ptr, format!("{k} must be a number"))),
            }
        };
        let tighten_lo = |lo: &mut Option<dec::Bound>, v: dec::Dec, ex: bool| {
            if lo
                .as_ref()
                .is_none_or(|(l, lex)| v > *l || (v == *l && ex && !lex))
            {
                *lo = Some((v, ex));
            }
        };
        let tighten_hi = |hi: &mut Option<dec::Bound>, v: dec::Dec, ex: bool| {
            if hi
                .as_ref()
                .is_none_or(|(h, hex)| v < *h || (v == *h && ex && !hex))
            {
                *hi = Some((v, ex));
            }
        };
        let (mut lo, mut hi) = (None, None);
        if let Some(v) = num("minimum")? {
            let ex = m.get("exclusiveMinimum") == Some(&Value::Bool(true));
            tighten_lo(&mut lo, v, ex);
        }
        if let Some(v) = num("maximum")? {
            let ex = m.get("exclusiveMaximum") == Some(&Value::Bool(true));
            tighten_hi(&mut hi, v, ex);
        }
        if let Some(v) = num("exclusiveMinimum")? {
            tighten_lo(&mut lo, v, true);
        }
        if let Some(v) = num("exclusiveMaximum")? {
            tighten_hi(&mut hi, v, true);
        }
        check.lo = lo.clone();
        check.hi = hi.clone();
        // The bounds as integers a digit automaton can take: for `integer`, the least and
        // greatest integers allowed; for `number`, integral bounds only (a fraction's
        // digits at a non-integral bound are left to the check).
        let as_int = |b: &Option<dec::Bound>, upper: bool| -> Option<Option<i128>> {
            let Some((v, ex)) = b else {
                return Some(None);
            };
            if integer_only {
                let r = v.round_to_i128(!upper)?;
                let on_bound = v.is_integer() && *ex;
                Some(Some(match (on_bound, upper) {
                    (true, false) => r + 1,
                    (true, true) => r - 1,
                    _ => r,
                }))
            } else {
                v.to_i128().map(Some)
            }
        };
        let exact_bounds = as_int(&lo, false).zip(as_int(&hi, true));
        let exact_language = self.opts.number_digits.is_none() && !self.opts.plain_numbers;
        let plain_int = integer_only && (self.draft == 4 || self.opts.plain_integers);
        let bounded = lo.is_some() || hi.is_some();
        let body = match exact_bounds {
            Some((lo_i, hi_i)) if bounded => {
                let lo_ex = lo.as_ref().is_some_and(|(_, e)| *e);
                let hi_ex = hi.as_ref().is_some_and(|(_, e)| *e);
                let plain = self.bounded_number(lo_i, hi_i, lo_ex, hi_ex, integer_only);
                if exact_language && !plain_int {
                    // Exponent spellings (`1e+30`, `1e-09`) of values within the bounds:
                    // which exponents do is not a regular language, so a check decides.
                    let exp_form = self.exponent_number();
                    let c = dec::NumberCheck {
                        multiples: Vec::new(),
                        ..check.clone()
                    };
                    let exp = self.checked_rule("number-exp", exp_form, c.into_check());
                    Expr::Alt(vec![plain, exp])
                } else {
                    plain
                }
            }
            Some(_) => self.open_number(integer_only),
            // Bounds no digit automaton here takes (beyond ±10^36, or a non-integral one
            // for a `number`): any number, the bounds checked on its exact value.
            None => {
                let open = self.open_number(integer_only);
                return Ok(self.wrap_number_check(open, ptr, check));
            }
        };
        if check.multiples.is_empty() {
            return Ok(body);
        }
        Ok(self.wrap_number_check(body, ptr, check))
    }

    /// `body` under a [`dec::NumberCheck`] of the exact value.
    fn wrap_number_check(&mut self, body: Expr, ptr: &str, check: dec::NumberCheck) -> Expr {
        self.checked_rule(
            &format!("number{}", ptr.replace('/', "-")),
            body,
            check.into_check(),
        )
    }

    /// A number written with an exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?[eE][+-]?[0-9]+`.
    fn exponent_number(&mut self) -> Expr {
        self.common("number-exp", |_| {
            let d = || Expr::Chars(vec![('0', '9')]);
            Expr::Seq(vec![
                rep(lit("-"), 0, Some(1)),
                Expr::Alt(vec![
                    lit("0"),
                    Expr::Seq(vec![Expr::Chars(vec![('1', '9')]), rep(d(), 0, None)]),
                ]),
                rep(Expr::Seq(vec![lit("."), rep(d(), 1, None)]), 0, Some(1)),
                Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                rep(Expr::Chars(vec![('+', '+'), ('-', '-')]), 0, Some(1)),
                rep(d(), 1, None),
            ])
        })
    }

    /// Any number (`integer_only`: any integral one, as the options spell integers).
    fn open_number(&mut self, integer_only: bool) -> Expr {
        let frac0 = zero_fraction;
        let cap = self.opts.number_digits;
        let digits = move |min: u32| Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min,
            max: cap.map(|c| c.max(min)),
        };
        // Exponent digits: two at most when digits are capped (see
        // `SchemaOptions::number_digits`).
        let exp_digits = move || Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min: 1,
            max: cap.map(|_| 2),
        };
        let uint = move || {
            let rest = Expr::Repeat {
                e: Box::new(Expr::Chars(vec![('0', '9')])),
                min: 0,
                max: cap.map(|c| c.saturating_sub(1)),
            };
            Expr::Alt(vec![
                Expr::Literal(b"0".to_vec()),
                Expr::Seq(vec![Expr::Chars(vec![('1', '9')]), rest]),
            ])
        };
        {
            // One rule per schema for each unbounded kind (a big schema has thousands of
            // numbers; the lowering reads a rule's structure once and copies it).
            let minus = Expr::Repeat {
                e: Box::new(Expr::Literal(b"-".to_vec())),
                min: 0,
                max: Some(1),
            };
            if integer_only && (self.draft == 4 || self.opts.plain_integers) {
                // Draft 4 (or plain integers asked for): no fraction, no exponent.
                return self.common("int-plain", move |_| Expr::Seq(vec![minus, uint()]));
            }
            if integer_only {
                // Integral values: an integer, optionally `.0…`, optionally a non-negative exponent.
                let exp = Expr::Repeat {
                    e: Box::new(Expr::Seq(vec![
                        Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                        Expr::Repeat {
                            e: Box::new(Expr::Literal(b"+".to_vec())),
                            min: 0,
                            max: Some(1),
                        },
                        exp_digits(),
                    ])),
                    min: 0,
                    max: Some(1),
                };
                let exact_language = self.opts.number_digits.is_none() && !self.opts.plain_numbers;
                return self.common("integer", move |c| {
                    let plain = Expr::Seq(vec![minus, uint(), frac0(), exp]);
                    if !exact_language {
                        return plain;
                    }
                    // Integral values in other spellings (`150e-1`, `1.5e1`): which is
                    // integral is not a regular language, so a check decides.
                    let exp_form = c.exponent_number();
                    let check = dec::NumberCheck {
                        integer: true,
                        ..Default::default()
                    };
                    let other = c.checked_rule("integer-exp", exp_form, check.into_check());
                    Expr::Alt(vec![plain, other])
                });
            }
            let frac = Expr::Repeat {
                e: Box::new(Expr::Seq(vec![Expr::Literal(b".".to_vec()), digits(1)])),
                min: 0,
                max: Some(1),
            };
            let exp = Expr::Repeat {
                e: Box::new(Expr::Seq(vec![
                    Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                    Expr::Repeat {
                        e: Box::new(Expr::Chars(vec![('+', '+'), ('-', '-')])),
                        min: 0,
                        max: Some(1),
                    },
                    exp_digits(),
                ])),
                min: 0,
                max: Some(1),
            };
            self.common("number", move |_| Expr::Seq(vec![minus, uint(), frac, exp]))
        }
    }

    /// Numbers within integral bounds, in plain decimal notation (`integer_only`: integers,
    /// with a `.0…` fraction unless the options want plain digits): exact digit automata.
    fn bounded_number(
        &mut self,
        lo_i: Option<i128>,
        hi_i: Option<i128>,
        lo_ex: bool,
        hi_ex: bool,
        integer_only: bool,
    ) -> Expr {
        let frac0 = zero_fraction;
        let cap = self.opts.number_digits;
        let digits = move |min: u32| Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min,
            max: cap.map(|c| c.max(min)),
        };
        if integer_only {
            if self.draft == 4 || self.opts.plain_integers {
                return self.capped(num::int_range(lo_i, hi_i));
            }
            return Expr::Seq(vec![self.capped(num::int_range(lo_i, hi_i)), frac0()]);
        }
        // number in a range with integer bounds: integer part ranges, with care at the
        // bounds for the fraction.
        let frac_any = Expr::Repeat {
            e: Box::new(Expr::Seq(vec![Expr::Literal(b".".to_vec()), digits(1)])),
            min: 0,
            max: Some(1),
        };
        // A fraction with a non-zero digit: zeros, the first non-zero digit, any digits
        // (each run capped alone: a DFA of `[0-9]{0,n}[1-9][0-9]{0,n}` would be
        // quadratic in `n`).
        let frac_nonzero = Expr::Seq(vec![
            Expr::Literal(b".".to_vec()),
            Expr::Repeat {
                e: Box::new(Expr::Literal(b"0".to_vec())),
                min: 0,
                max: cap,
            },
            Expr::Chars(vec![('1', '9')]),
            digits(0),
        ]);
        // Values x = ±(n + f). Build: for non-negative x, n in [a, b] with any fraction
        // where safe, plus exact handling at bound integers.
        let mut alts = Vec::new();
        let (l, h) = (lo_i, hi_i);
        // Positive side (x >= 0): n + f, f in [0,1).
        if h.is_none_or(|h| h >= 0) && !(h == Some(0) && hi_ex) {
            // x >= lo: if lo <= 0 any n >= 0; else n >= lo, and n == lo needs f > 0 when exclusive.
            let n_min: i128 = match l {
                Some(l) if l > 0 => l,
                _ => 0,
            };
            // x <= hi: n < hi any fraction; n == hi only f == 0 (and not if exclusive).
            match h {
                None => {
                    if l.is_some_and(|l| l > 0) && lo_ex {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(n_min as u128 + 1, None)),
                            frac_any.clone(),
                        ]));
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(n_min.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    } else if l.is_some_and(|l| l == 0) && lo_ex {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(1, None)),
                            frac_any.clone(),
                        ]));
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(b"0".to_vec()),
                            frac_nonzero.clone(),
                        ]));
                    } else {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(n_min as u128, None)),
                            frac_any.clone(),
                        ]));
                    }
                }
                Some(h) => {
                    let low_int = if l.is_some_and(|l| l >= 0) && lo_ex {
                        n_min + 1
                    } else {
                        n_min
                    };
                    if low_int < h {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(low_int as u128, Some((h - 1) as u128))),
                            frac_any.clone(),
                        ]));
                    }
                    if l.is_some_and(|l| l >= 0) && lo_ex && n_min < h {
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(n_min.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    }
                    if !hi_ex && h >= n_min && !(l == Some(h) && lo_ex) {
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(h.to_string().into_bytes()),
                            frac0(),
                        ]));
                    }
                }
            }
        }
        // Negative side (x < 0): x = -(n + f) with n + f > 0.
        if l.is_none_or(|l| l < 0) {
            // -(n+f) <= hi  <=>  n + f >= -hi ; -(n+f) >= lo <=> n + f <= -lo.
            let neg_hi_excl = hi_ex; // x < hi  <=> n + f > -hi
            let m_lo = h.map(|h| -h); // lower bound on n+f (could be <= 0)
            let m_hi = l.map(|l| -l); // upper bound on n+f
            let m_lo_ex = neg_hi_excl;
            let m_hi_ex = lo_ex;
            // n + f in (0 or m_lo, m_hi]
            let nlo: i128 = m_lo.map(|v| v.max(0)).unwrap_or(0);
            let strict_low = m_lo.is_none_or(|v| v <= 0) || m_lo_ex; // need n+f > nlo when true and nlo is the bound
            let mut neg = Vec::new();
            match m_hi {
                None => {
                    if strict_low {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(nlo as u128 + 1, None)),
                            frac_any.clone(),
                        ]));
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(nlo.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    } else {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(nlo as u128, None)),
                            frac_any.clone(),
                        ]));
                    }
                }
                Some(mh) => {
                    let first_full = if strict_low { nlo + 1 } else { nlo };
                    if first_full < mh {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(
                                first_full as u128,
                                Some((mh - 1) as u128),
                            )),
                            frac_any.clone(),
                        ]));
                    }
                    if strict_low && nlo < mh {
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(nlo.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    }
                    if !m_hi_ex && mh > 0 && (mh > nlo || (mh == nlo && !strict_low)) {
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(mh.to_string().into_bytes()),
                            frac0(),
                        ]));
                    }
                }
            }
            if !neg.is_empty() {
                alts.push(Expr::Seq(vec![
                    Expr::Literal(b"-".to_vec()),
                    Expr::Alt(neg),
                ]));
            }
        }
        // -0 and -0.0 equal 0.
        let zero_ok = l.is_none_or(|l| l < 0 || (l == 0 && !lo_ex))
            && h.is_none_or(|h| h > 0 || (h == 0 && !hi_ex));
        if zero_ok {
            alts.push(Expr::Seq(vec![Expr::Literal(b"-0".to_vec()), frac0()]));
        }
        Expr::Alt(alts)
    }

    fn array(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let min = get_uint(m, "minItems", ptr)?.unwrap_or(0);
        let max = get_uint(m, "maxItems", ptr)?;
        if m.get("uniqueItems") == Some(&Value::Bool(true)) {
            if let Some(values) = small_value_set(m) {
                return self.unique_array(&values, min, max, ptr, depth);
            }
            return Err(unsupported(
                "uniqueItems",
                ptr,
                "uniqueItems is not supported yet",
            ));
        }
        if max.is_some_and(|x| x < min) {
            return Ok(Expr::Alt(vec![]));
        }
        if min > 10_000 {
            return Err(unsupported("minItems", ptr, "minItems above 10000"));
        }
        // prefixItems (2020-12) or items-as-array (draft-07) + additionalItems.
        let (prefix, rest): (Vec<Located>, Option<Located>) =
            match (m.get("prefixItems"), m.get("items")) {
                (Some(Value::Array(p)), items) => (
                    p.iter()
                        .enumerate()
                        .map(|(i, x)| (x, join(&join(ptr, "prefixItems"), &i.to_string())))
                        .collect(),
                    items.map(|x| (x, join(ptr, "items"))),
                ),
                (Some(_), _) => return Err(invalid(ptr, "prefixItems must be an array")),
                (None, Some(Value::Array(p))) => (
                    p.iter()
                        .enumerate()
                        .map(|(i, x)| (x, join(&join(ptr, "items"), &i.to_string())))
                        .collect(),
                    m.get("additionalItems")
                        .map(|x| (x, join(ptr, "additionalItems"))),
                ),
                (None, Some(x)) => (vec![], Some((x, join(ptr, "items")))),
                (None, None) => (vec![], None),
            };
        let mut prefix_e = Vec::new();
        for (x, p) in &prefix {
            prefix_e.push(self.compile(x, p, depth + 1)?);
        }
        let rest_empty = matches!(rest, Some((Value::Bool(false), _)));
        let rest_e = match rest {
            Some((x, p)) => self.compile(x, &p, depth + 1)?,
            None => self.any_value(),
        };
        let ws = self.ws();
        let sep = self.comma();
        // elems(i): the items from index i on (item i preceded by a comma when i > 0).
        let k = prefix_e.len();
        let max_total = if rest_empty {
            Some(max.map_or(k, |x| x.min(k)))
        } else {
            max
        };
        if min > max_total.unwrap_or(usize::MAX) {
            return Ok(Expr::Alt(vec![]));
        }
        let item_at = |i: usize| {
            if i < k {
                prefix_e[i].clone()
            } else {
                rest_e.clone()
            }
        };
        // Tail after the prefix: rest items, count in [min-k, max-k].
        let mut tail: Option<Expr> = None; // expression for "items k.. preceded by commas"
        if max_total.is_none_or(|x| x > k) {
            let rmin = min.saturating_sub(k) as u32;
            let rmax = max_total.map(|x| (x - k) as u32);
            tail = Some(Expr::Repeat {
                e: Box::new(Expr::Seq(vec![sep.clone(), rest_e.clone()])),
                min: rmin,
                max: rmax,
            });
        }
        // Build from the end: after(i) = what may follow item i-1.
        let mut after: Expr = match &tail {
            Some(t) => t.clone(),
            None => Expr::Empty,
        };
        for i in (1..k).rev() {
            let this = Expr::Seq(vec![sep.clone(), item_at(i), after.clone()]);
            after = if i >= min {
                Expr::Alt(vec![Expr::Empty, this])
            } else {
                this
            };
            after = self.rule("items", after);
        }
        let first = if k > 0 {
            Some(Expr::Seq(vec![item_at(0), after]))
        } else if tail.is_some() && max_total.is_none_or(|x| x > 0) {
            let rmin = min.saturating_sub(1) as u32;
            let rmax = max_total.map(|x| (x - 1) as u32);
            Some(Expr::Seq(vec![
                rest_e.clone(),
                Expr::Repeat {
                    e: Box::new(Expr::Seq(vec![sep.clone(), rest_e])),
                    min: rmin,
                    max: rmax,
                },
            ]))
        } else {
            None
        };
        Ok(array_frame(&ws, min == 0, first))
    }

    /// `uniqueItems` over a small set of values, exactly in the grammar: one rule per set
    /// of values already used, offering only the unused ones. Unlike a semantic check,
    /// this never lets the output reach a point where every continuation repeats a value
    /// (`["en","fr","en"` under `maxItems: 3` had no valid next token). Cost: at most
    /// 2^[`MAX_UNIQUE_VALUES`] rules.
    fn unique_array(
        &mut self,
        values: &[Value],
        min: usize,
        max: Option<usize>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let k = values.len();
        let max = max.map_or(k, |x| x.min(k));
        if min > max {
            return Ok(Expr::Alt(vec![]));
        }
        let items = join(ptr, "items");
        let mut vals = Vec::with_capacity(k);
        for v in values {
            vals.push(self.compile(&serde_json::json!({ "const": v }), &items, depth + 1)?);
        }
        let ws = self.ws();
        let sep = self.comma();
        // after[used]: what may follow once the values in `used` (a bit set) are written;
        // built from the largest sets down, so every successor exists.
        let mut after: Vec<Option<Expr>> = vec![None; 1 << k];
        let mut masks: Vec<usize> = (1..1usize << k)
            .filter(|u| u.count_ones() as usize <= max)
            .collect();
        masks.sort_by_key(|u| std::cmp::Reverse(u.count_ones()));
        for used in masks {
            let n = used.count_ones() as usize;
            let mut alts = Vec::new();
            if n >= min {
                alts.push(Expr::Empty);
            }
            if n < max {
                for (i, v) in vals.iter().enumerate() {
                    if used & (1 << i) == 0 {
                        let next = after[used | (1 << i)].clone().unwrap_or(Expr::Alt(vec![]));
                        alts.push(Expr::Seq(vec![sep.clone(), v.clone(), next]));
                    }
                }
            }
            after[used] = Some(self.rule("unique-items", Expr::Alt(alts)));
        }
        let first = (max > 0).then(|| {
            Expr::Alt(
                vals.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let next = after[1 << i].clone().unwrap_or(Expr::Alt(vec![]));
                        Expr::Seq(vec![v.clone(), next])
                    })
                    .collect(),
            )
        });
        Ok(array_frame(&ws, min == 0, first))
    }

    fn object(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let props: Vec<(String, Cow<Value>)> = match m.get("properties") {
            Some(Value::Object(p)) => p
                .iter()
                .map(|(k, v)| (k.clone(), Cow::Borrowed(v)))
                .collect(),
            Some(_) => return Err(invalid(ptr, "properties must be an object")),
            None => vec![],
        };
        let required: Vec<String> = match m.get("required") {
            Some(Value::Array(r)) => r
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(String::from)
                        .ok_or_else(|| invalid(ptr, "required must list strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid(ptr, "required must be an array")),
            None => vec![],
        };
        let additional: Value = match m.get("additionalProperties") {
            Some(v) => v.clone(),
            None if self.opts.strict => Value::Bool(false),
            None if self.opts.closed_objects && m.contains_key("properties") => Value::Bool(false),
            None => Value::Bool(true),
        };
        // Required keys not in properties: they must come from additionalProperties.
        let mut props = props;
        for r in &required {
            if !props.iter().any(|(k, _)| k == r) {
                props.push((r.clone(), Cow::Owned(additional.clone())));
            }
        }
        let min_p = get_uint(m, "minProperties", ptr)?;
        let max_p = get_uint(m, "maxProperties", ptr)?;
        let n_req = props.iter().filter(|(k, _)| required.contains(k)).count();
        let addl_allowed = additional != Value::Bool(false);
        if self.opts.any_order {
            return self.object_any_order(
                &props,
                &required,
                &additional,
                (min_p, max_p),
                ptr,
                depth,
            );
        }
        if min_p.is_some_and(|x| x > n_req) {
            return Err(unsupported(
                "minProperties",
                ptr,
                "minProperties above the number of required properties",
            ));
        }
        if max_p.is_some_and(|x| addl_allowed || x < props.len()) {
            return Err(unsupported(
                "maxProperties",
                ptr,
                "maxProperties below the number of possible properties",
            ));
        }
        let ws = self.ws();
        let colon = self.colon();
        let sep = self.comma();
        let mut kvs = Vec::new();
        for (k, v) in &props {
            let vp = join(&join(ptr, "properties"), k);
            let val = self.compile(v, &vp, depth + 1)?;
            kvs.push(Expr::Seq(vec![
                self.literal_value(&Value::String(k.clone())),
                colon.clone(),
                val,
            ]));
        }
        let is_req: Vec<bool> = props.iter().map(|(k, _)| required.contains(k)).collect();
        // Additional properties: keys other than the declared ones.
        let addl_kv = if addl_allowed {
            let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
            let key = self.key_not_in(&keys, ptr)?;
            let val = self.compile(&additional, &join(ptr, "additionalProperties"), depth + 1)?;
            Some(self.rule("additional-kv", Expr::Seq(vec![key, colon.clone(), val])))
        } else {
            None
        };
        let addl_tail = addl_kv.as_ref().map(|kv| Expr::Repeat {
            e: Box::new(Expr::Seq(vec![sep.clone(), kv.clone()])),
            min: 0,
            max: None,
        });
        // after(i): properties i.. each preceded by a comma, then additional ones.
        let n = kvs.len();
        let mut after: Vec<Expr> = vec![Expr::Empty; n + 1];
        after[n] = addl_tail.clone().unwrap_or(Expr::Empty);
        for i in (0..n).rev() {
            let this = Expr::Seq(vec![sep.clone(), kvs[i].clone(), after[i + 1].clone()]);
            let e = if is_req[i] {
                this
            } else {
                Expr::Alt(vec![this, after[i + 1].clone()])
            };
            after[i] = self.rule("props", e);
        }
        // The first property written: j, with every property before j optional.
        let mut firsts = Vec::new();
        for j in 0..n {
            firsts.push(Expr::Seq(vec![kvs[j].clone(), after[j + 1].clone()]));
            if is_req[j] {
                break;
            }
        }
        let all_optional = !is_req.iter().any(|&r| r);
        if all_optional {
            if let Some(kv) = &addl_kv {
                firsts.push(Expr::Seq(vec![kv.clone(), addl_tail.clone().unwrap()]));
            }
        }
        let mut alts = Vec::new();
        if all_optional {
            alts.push(Expr::Seq(vec![
                Expr::Literal(b"{".to_vec()),
                ws.clone(),
                Expr::Literal(b"}".to_vec()),
            ]));
        }
        if !firsts.is_empty() {
            alts.push(Expr::Seq(vec![
                Expr::Literal(b"{".to_vec()),
                ws.clone(),
                Expr::Alt(firsts),
                ws.clone(),
                Expr::Literal(b"}".to_vec()),
            ]));
        }
        if addl_allowed && self.opts.unique_keys {
            // Additional keys may repeat each other: a check keeps them unique.
            let c = self.unique_keys_check();
            let name = format!("object{}", ptr.replace('/', "-"));
            return Ok(self.checked_rule(&name, Expr::Alt(alts), c));
        }
        Ok(Expr::Alt(alts))
    }

    /// The check that an object's keys are unique ([`SchemaOptions::unique_keys`]), one
    /// per schema.
    fn unique_keys_check(&mut self) -> Check {
        let key = "object keys unique".to_string();
        if let Some(c) = self.check_memo.get(&key) {
            return c.clone();
        }
        let c = check::object_keys(Vec::new(), 0, usize::MAX);
        self.check_memo.insert(key, c.clone());
        c
    }

    /// Properties in any order: a repetition of "one of the declared key/value pairs, or an
    /// additional one", with a check that keys are unique, required ones present and the
    /// count within bounds.
    fn object_any_order(
        &mut self,
        props: &[(String, Cow<Value>)],
        required: &[String],
        additional: &Value,
        (min_p, max_p): (Option<usize>, Option<usize>),
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let ws = self.ws();
        let colon = Expr::Seq(vec![ws.clone(), lit(":"), ws.clone()]);
        let sep = Expr::Seq(vec![ws.clone(), lit(","), ws.clone()]);
        let mut kvs = Vec::new();
        for (k, v) in props {
            let vp = join(&join(ptr, "properties"), k);
            let val = self.compile(v, &vp, depth + 1)?;
            kvs.push(Expr::Seq(vec![
                self.literal_value(&Value::String(k.clone())),
                colon.clone(),
                val,
            ]));
        }
        if additional != &Value::Bool(false) {
            let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
            let key = self.key_not_in(&keys, ptr)?;
            let val = self.compile(additional, &join(ptr, "additionalProperties"), depth + 1)?;
            kvs.push(Expr::Seq(vec![key, colon.clone(), val]));
        }
        let required: Vec<String> = required
            .iter()
            .filter(|r| props.iter().any(|(k, _)| k == *r))
            .cloned()
            .collect();
        let min = min_p.unwrap_or(0).max(required.len());
        let max = max_p.unwrap_or(usize::MAX);
        if min > max || (kvs.is_empty() && min > 0) {
            return Ok(Expr::Alt(vec![]));
        }
        let body = if kvs.is_empty() {
            Expr::Seq(vec![lit("{"), ws.clone(), lit("}")])
        } else {
            let kv = self.rule("kv", Expr::Alt(kvs));
            let list = Expr::Seq(vec![kv.clone(), rep(Expr::Seq(vec![sep, kv]), 0, None)]);
            let inner = if min > 0 {
                list
            } else {
                rep(Expr::Seq(vec![list, ws.clone()]), 0, Some(1))
            };
            Expr::Seq(vec![lit("{"), ws.clone(), inner, ws.clone(), lit("}")])
        };
        let key = format!("object keys\n{min}\n{max}\n{required:?}");
        let c = match self.check_memo.get(&key) {
            Some(c) => c.clone(),
            None => {
                let c = check::object_keys(required, min, max);
                self.check_memo.insert(key, c.clone());
                c
            }
        };
        Ok(self.checked_rule(&format!("object{}", ptr.replace('/', "-")), body, c))
    }

    /// `e`, an integer part (a leading digit then a run), with every open run of digits
    /// capped so that it has at most [`SchemaOptions::number_digits`] digits (as is, when
    /// digits are not capped). Cost: a copy of `e`.
    fn capped(&self, e: Expr) -> Expr {
        let Some(cap) = self.opts.number_digits else {
            return e;
        };
        let cap = cap.saturating_sub(1);
        fn cap_runs(e: Expr, cap: u32) -> Expr {
            match e {
                Expr::Repeat { e, min, max: None } if matches!(&*e, Expr::Chars(c) if c.as_slice() == [('0', '9')]) => {
                    Expr::Repeat {
                        e,
                        min,
                        max: Some(cap.max(min)),
                    }
                }
                Expr::Repeat { e, min, max } => Expr::Repeat {
                    e: Box::new(cap_runs(*e, cap)),
                    min,
                    max,
                },
                Expr::Seq(v) => Expr::Seq(v.into_iter().map(|x| cap_runs(x, cap)).collect()),
                Expr::Alt(v) => Expr::Alt(v.into_iter().map(|x| cap_runs(x, cap)).collect()),
                other => other,
            }
        }
        cap_runs(e, cap)
    }

    fn checked_rule(&mut self, name: &str, body: Expr, c: Check) -> Expr {
        let r = self.reserve(name);
        self.set(r, body);
        self.checks.push((r, c));
        Expr::Ref(r)
    }

    // ---- shared pieces --------------------------------------------------------------------

    fn common(&mut self, name: &'static str, make: impl FnOnce(&mut Self) -> Expr) -> Expr {
        if let Some(&r) = self.common.get(name) {
            return Expr::Ref(r);
        }
        let r = self.reserve(name);
        self.common.insert(name, r);
        let body = make(self);
        self.set(r, body);
        Expr::Ref(r)
    }

    fn ws(&mut self) -> Expr {
        match self.opts.whitespace {
            Whitespace::Compact => Expr::Empty,
            Whitespace::Bounded => self.common("ws", |_| Expr::Repeat {
                e: Box::new(Expr::Alt(vec![
                    Expr::Chars(vec![('\t', '\t'), (' ', ' ')]),
                    Expr::Seq(vec![
                        Expr::Literal(b"\n".to_vec()),
                        Expr::Repeat {
                            e: Box::new(Expr::Chars(vec![('\t', '\t'), (' ', ' ')])),
                            min: 0,
                            max: Some(20),
                        },
                    ]),
                ])),
                min: 0,
                max: Some(1),
            }),
            Whitespace::Flexible(n) => self.common("ws", |_| Expr::Repeat {
                e: Box::new(Expr::Chars(vec![('\t', '\n'), ('\r', '\r'), (' ', ' ')])),
                min: 0,
                max: Some(n),
            }),
        }
    }

    /// `ws , ws` between items or members: one rule per schema, which every use refers to
    /// (a big schema has thousands). Cost: O(1).
    fn comma(&mut self) -> Expr {
        self.common("comma", |s| {
            let ws = s.ws();
            Expr::Seq(vec![ws.clone(), Expr::Literal(b",".to_vec()), ws])
        })
    }

    /// `ws : ws` after a key: one rule per schema, as [`Compiler::comma`]. Cost: O(1).
    fn colon(&mut self) -> Expr {
        self.common("colon", |s| {
            let ws = s.ws();
            Expr::Seq(vec![ws.clone(), Expr::Literal(b":".to_vec()), ws])
        })
    }

    /// One JSON string character (a code point, raw or escaped).
    fn json_char(&mut self) -> Expr {
        self.common("char", |_| {
            let hex = Expr::Chars(vec![('0', '9'), ('A', 'F'), ('a', 'f')]);
            let hex3 = Expr::Repeat {
                e: Box::new(hex.clone()),
                min: 3,
                max: Some(3),
            };
            let hex2 = Expr::Repeat {
                e: Box::new(hex.clone()),
                min: 2,
                max: Some(2),
            };
            // \uXXXX not a surrogate; or a high surrogate followed by \u low surrogate.
            let non_sur = Expr::Alt(vec![
                Expr::Seq(vec![
                    Expr::Chars(vec![
                        ('0', '9'),
                        ('A', 'C'),
                        ('E', 'F'),
                        ('a', 'c'),
                        ('e', 'f'),
                    ]),
                    hex3,
                ]),
                Expr::Seq(vec![
                    Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                    Expr::Chars(vec![('0', '7')]),
                    hex2.clone(),
                ]),
            ]);
            let pair = Expr::Seq(vec![
                Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                Expr::Chars(vec![('8', '9'), ('A', 'B'), ('a', 'b')]),
                hex2.clone(),
                Expr::Literal(b"\\u".to_vec()),
                Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                Expr::Chars(vec![('C', 'F'), ('c', 'f')]),
                hex2,
            ]);
            Expr::Alt(vec![
                Expr::Chars(vec![(' ', '!'), ('#', '['), (']', char::MAX)]),
                Expr::Seq(vec![Expr::Literal(b"\\".to_vec()), short_escapes()]),
                Expr::Seq(vec![
                    Expr::Literal(b"\\u".to_vec()),
                    Expr::Alt(vec![non_sur, pair]),
                ]),
            ])
        })
    }

    /// Any JSON value.
    fn any_value(&mut self) -> Expr {
        if let Some(&r) = self.common.get("value") {
            return Expr::Ref(r);
        }
        let r = self.reserve("value");
        self.common.insert("value", r);
        let ws = self.ws();
        let ch = self.json_char();
        let string = Expr::Seq(vec![
            Expr::Literal(b"\"".to_vec()),
            Expr::Repeat {
                e: Box::new(ch),
                min: 0,
                max: None,
            },
            Expr::Literal(b"\"".to_vec()),
        ]);
        let string = self.rule("string", string);
        let number = self.number(&Map::new(), "", false).unwrap_or(Expr::Empty);
        let v = Expr::Ref(r);
        let sep = self.comma();
        let member = Expr::Seq(vec![
            string.clone(),
            ws.clone(),
            Expr::Literal(b":".to_vec()),
            ws.clone(),
            v.clone(),
        ]);
        let mut object = delimited(b'{', member, b'}', &ws, &sep);
        if self.opts.unique_keys {
            let c = self.unique_keys_check();
            object = self.checked_rule("any-object", object, c);
        }
        let array = delimited(b'[', v, b']', &ws, &sep);
        let body = Expr::Alt(vec![
            object,
            array,
            string,
            number,
            Expr::Literal(b"true".to_vec()),
            Expr::Literal(b"false".to_vec()),
            Expr::Literal(b"null".to_vec()),
        ]);
        self.set(r, body);
        Expr::Ref(r)
    }

    /// A JSON string other than the given keys (llama.cpp-style trie complement).
    fn key_not_in(&mut self, keys: &[&str], ptr: &str) -> Result<Expr, SchemaError> {
        if let Some(k) = keys.iter().find(|k| k.chars().count() > MAX_KEY_CHARS) {
            return Err(unsupported(
                "additionalProperties",
                ptr,
                format!(
                    "a declared property name is longer than {MAX_KEY_CHARS} characters ({} bytes)",
                    k.len()
                ),
            ));
        }
        let ch = self.json_char();
        let q = || Expr::Literal(b"\"".to_vec());
        if keys.is_empty() {
            return Ok(Expr::Seq(vec![q(), rep(ch, 0, None), q()]));
        }
        // One rule per key set, which the compiler lowers to one lexeme built from the
        // keys (see `compile::keys`). (`ch` is the same rule for the whole schema.)
        let mut set: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        set.sort_unstable();
        set.dedup();
        if let Some(&r) = self.key_sets.get(&set) {
            return Ok(Expr::Ref(r));
        }
        let r = self.reserve("other-key");
        self.key_sets.insert(set, r);
        self.set(
            r,
            Expr::KeyComplement(Arc::new(KeyComplement::new(keys, ch))),
        );
        Ok(Expr::Ref(r))
    }

    /// The JSON text of a value, in the accepted serialization (whitespace per policy;
    /// integral numbers also as `n.0`).
    /// Every JSON spelling of the number `d` (a `const`/`enum` value compared by value):
    /// its plain decimal notation with any trailing zeros (`100`, `100.0`, `-0.0` for 0) as
    /// grammar, and exponent spellings (`1e2`, `10E+1`) through a check of the exact value.
    fn number_literal(&mut self, d: dec::Dec) -> Expr {
        if let Some(e) = self.number_literals.get(&d) {
            return e.clone();
        }
        let (neg, int, frac) = d.plain_parts();
        let zeros = || rep(lit("0"), 1, None);
        let mut plain = Vec::new();
        if neg {
            plain.push(lit("-"));
        } else if d.is_zero() {
            plain.push(rep(lit("-"), 0, Some(1)));
        }
        if frac.is_empty() {
            plain.push(lit(&int));
            plain.push(rep(Expr::Seq(vec![lit("."), zeros()]), 0, Some(1)));
        } else {
            plain.push(lit(&format!("{int}.{frac}")));
            plain.push(rep(lit("0"), 0, None));
        }
        let exp_form = self.exponent_number();
        let c = dec::NumberCheck {
            one_of: Some(vec![d.clone()]),
            ..Default::default()
        };
        let exp = self.checked_rule("number-value", exp_form, c.into_check());
        let e = Expr::Alt(vec![Expr::Seq(plain), exp]);
        self.number_literals.insert(d, e.clone());
        e
    }

    fn literal_value(&mut self, v: &Value) -> Expr {
        match v {
            Value::Null => Expr::Literal(b"null".to_vec()),
            Value::Bool(b) => Expr::Literal(if *b {
                b"true".to_vec()
            } else {
                b"false".to_vec()
            }),
            Value::Number(n) => {
                let text = n.to_string();
                let exact = dec::Dec::from_number(n).filter(|d| {
                    // The value's plain spelling stays short: `1e300` is not written out.
                    let (_, i, f) = d.plain_parts();
                    i.len() + f.len() <= 400
                });
                if let Some(d) =
                    exact.filter(|_| self.opts.number_digits.is_none() && !self.opts.plain_numbers)
                {
                    if !(self.opts.plain_integers && d.is_integer()) {
                        return self.number_literal(d);
                    }
                }
                if self.opts.plain_integers && (n.is_i64() || n.is_u64()) {
                    // Plain integers asked for: an integral constant as its digits only
                    // (`1`, not `1.0`, which draft 4 does not count as an integer).
                    return Expr::Literal(text.into_bytes());
                }
                if let Some(i) = n
                    .as_i64()
                    .map(|x| x as i128)
                    .or(n.as_u64().map(|x| x as i128))
                {
                    let mut alts = vec![Expr::Seq(vec![lit(&i.to_string()), zero_fraction()])];
                    if i == 0 {
                        alts.push(Expr::Literal(b"-0".to_vec()));
                    }
                    Expr::Alt(alts)
                } else if n
                    .as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15)
                {
                    let i = n.as_f64().unwrap() as i128;
                    Expr::Alt(vec![
                        Expr::Literal(i.to_string().into_bytes()),
                        Expr::Literal(format!("{i}.0").into_bytes()),
                    ])
                } else {
                    Expr::Literal(text.into_bytes())
                }
            }
            Value::String(s) => {
                // One literal per run of characters written raw (a key is usually one
                // literal, quotes included); the others (`/`, `"`, `\`, controls) with
                // their escapes. Per character, keys were over half of a big schema's
                // grammar nodes, each a heap allocation built, hashed, copied and dropped.
                let mut seq = Vec::new();
                let mut run = b"\"".to_vec();
                let mut buf = [0u8; 4];
                for c in s.chars() {
                    if spelled_raw_only(c) {
                        run.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        continue;
                    }
                    match json_chars(&[(c, c)]) {
                        Expr::Literal(l) => run.extend_from_slice(&l),
                        e => {
                            if !run.is_empty() {
                                seq.push(Expr::Literal(std::mem::take(&mut run)));
                            }
                            seq.push(e);
                        }
                    }
                }
                run.push(b'"');
                seq.push(Expr::Literal(run));
                if seq.len() == 1 {
                    seq.pop().unwrap_or(Expr::Empty)
                } else {
                    Expr::Seq(seq)
                }
            }
            Value::Array(a) => {
                let ws = self.ws();
                let mut seq = vec![Expr::Literal(b"[".to_vec()), ws.clone()];
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        seq.extend([ws.clone(), Expr::Literal(b",".to_vec()), ws.clone()]);
                    }
                    seq.push(self.literal_value(x));
                }
                seq.extend([ws, Expr::Literal(b"]".to_vec())]);
                Expr::Seq(seq)
            }
            // Properties in any order: the members in any order, each exactly once (a
            // check of the keys: the same as an object's in any order).
            Value::Object(o) if self.opts.any_order && o.len() > 1 => {
                let ws = self.ws();
                let mut members = Vec::new();
                for (k, x) in o {
                    let key = self.literal_value(&Value::String(k.clone()));
                    let colon = self.colon();
                    let value = self.literal_value(x);
                    members.push(Expr::Seq(vec![key, colon, value]));
                }
                let member = Expr::Alt(members);
                let comma = self.comma();
                let body = Expr::Seq(vec![
                    Expr::Literal(b"{".to_vec()),
                    ws.clone(),
                    member.clone(),
                    rep(Expr::Seq(vec![comma, member]), 0, Some(o.len() as u32 - 1)),
                    ws,
                    Expr::Literal(b"}".to_vec()),
                ]);
                let keys: Vec<String> = o.keys().cloned().collect();
                let c = check::object_keys(keys, o.len(), o.len());
                self.checked_rule("const-object", body, c)
            }
            Value::Object(o) => {
                let ws = self.ws();
                let mut seq = vec![Expr::Literal(b"{".to_vec()), ws.clone()];
                for (i, (k, x)) in o.iter().enumerate() {
                    if i > 0 {
                        seq.extend([ws.clone(), Expr::Literal(b",".to_vec()), ws.clone()]);
                    }
                    seq.push(self.literal_value(&Value::String(k.clone())));
                    seq.extend([ws.clone(), Expr::Literal(b":".to_vec()), ws.clone()]);
                    seq.push(self.literal_value(x));
                }
                seq.extend([ws, Expr::Literal(b"}".to_vec())]);
                Expr::Seq(seq)
            }
        }
    }
}

// ---- helpers ---------------------------------------------------------------------------

fn lit(s: &str) -> Expr {
    Expr::Literal(s.as_bytes().to_vec())
}

fn rep(e: Expr, min: u32, max: Option<u32>) -> Expr {
    Expr::Repeat {
        e: Box::new(e),
        min,
        max,
    }
}

/// `(\.0+)?`: the zero fraction an integral number may be written with (`1.0`).
fn zero_fraction() -> Expr {
    rep(
        Expr::Seq(vec![lit("."), rep(lit("0"), 1, None)]),
        0,
        Some(1),
    )
}

/// Longest declared property name for which "any other key" is built (the construction
/// recurses once per character).
const MAX_KEY_CHARS: usize = 1024;

/// `open ws close | open ws item (sep item)* ws close`: a JSON object or array of `item`s.
fn delimited(open: u8, item: Expr, close: u8, ws: &Expr, sep: &Expr) -> Expr {
    Expr::Alt(vec![
        Expr::Seq(vec![
            Expr::Literal(vec![open]),
            ws.clone(),
            Expr::Literal(vec![close]),
        ]),
        Expr::Seq(vec![
            Expr::Literal(vec![open]),
            ws.clone(),
            item.clone(),
            Expr::Repeat {
                e: Box::new(Expr::Seq(vec![sep.clone(), item])),
                min: 0,
                max: None,
            },
            ws.clone(),
            Expr::Literal(vec![close]),
        ]),
    ])
}

const T_NULL: u8 = 1;
const T_BOOLEAN: u8 = 2;
const T_OBJECT: u8 = 4;
const T_ARRAY: u8 = 8;
const T_NUMBER: u8 = 16;
const T_STRING: u8 = 32;
const T_INTEGER: u8 = 64;
const ALL_TYPES: u8 = 127;

fn type_bit(t: &str) -> u8 {
    match t {
        "null" => T_NULL,
        "boolean" => T_BOOLEAN,
        "object" => T_OBJECT,
        "array" => T_ARRAY,
        "number" => T_NUMBER | T_INTEGER,
        "string" => T_STRING,
        "integer" => T_INTEGER,
        _ => 0,
    }
}

fn type_mask(t: &Value) -> u8 {
    match t {
        Value::String(s) => type_bit(s),
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str())
            .map(type_bit)
            .fold(0, |x, y| x | y),
        _ => ALL_TYPES,
    }
}

fn validate_type_keyword(t: &Value, ptr: &str) -> Result<(), SchemaError> {
    let ok = |s: &str| TYPES.contains(&s);
    match t {
        Value::String(s) if ok(s) => Ok(()),
        Value::Array(a) if a.iter().all(|x| x.as_str().is_some_and(ok)) => Ok(()),
        _ => Err(invalid(ptr, format!("invalid type {t}"))),
    }
}

fn type_of(v: &Value) -> u8 {
    match v {
        Value::Null => T_NULL,
        Value::Bool(_) => T_BOOLEAN,
        Value::Object(_) => T_OBJECT,
        Value::Array(_) => T_ARRAY,
        Value::String(_) => T_STRING,
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                T_NUMBER | T_INTEGER
            } else {
                T_NUMBER
            }
        }
    }
}

/// Summary of a schema for disjointness checks.
struct Shape {
    types: u8,
    values: Option<Vec<Value>>,
    props: Vec<(String, Shape)>,
}

impl Shape {
    fn and(mut self, o: Shape) -> Shape {
        self.types &= o.types;
        if o.values.is_some() {
            self.values = o.values;
        }
        self.props.extend(o.props);
        self
    }

    fn effective_types(&self) -> u8 {
        let mut t = self.types;
        if t & T_NUMBER != 0 {
            t |= T_INTEGER;
        }
        match &self.values {
            Some(v) => t & v.iter().map(type_of).fold(0, |a, b| a | b),
            None => t,
        }
    }

    fn disjoint(&self, o: &Shape) -> bool {
        let (a, b) = (self.effective_types(), o.effective_types());
        // integer is a subset of number: compare with that in mind.
        let overlap = a & b;
        if overlap == 0 {
            return true;
        }
        if let (Some(x), Some(y)) = (&self.values, &o.values) {
            if !x.iter().any(|v| y.iter().any(|w| json_eq(v, w))) {
                return true;
            }
        }
        if overlap == T_OBJECT {
            for (k, s) in &self.props {
                for (k2, s2) in &o.props {
                    if k == k2 && s.disjoint(s2) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// JSON equality as JSON Schema defines it (numbers by value).
/// A number's exact decimal value (`None` for anything else).
fn exact_num(v: &Value) -> Option<dec::Dec> {
    v.as_number().and_then(dec::Dec::from_number)
}

/// JSON Schema equality: numbers by exact value, objects in any member order.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            dec::Dec::from_number(x).is_some()
                && dec::Dec::from_number(x) == dec::Dec::from_number(y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Whether an enum/const value passes the other keywords of its schema: `type`, lengths,
/// numeric bounds and item/property counts are checked; unknown keywords are annotations;
/// other validation keywords next to `enum`/`const` are refused.
fn value_passes(
    v: &Value,
    m: &Map<String, Value>,
    ptr: &str,
    draft: u32,
) -> Result<bool, SchemaError> {
    const CHECKED: &[&str] = &[
        "multipleOf",
        "enum",
        "const",
        "type",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
    ];
    const OTHER_VALIDATION: &[&str] = &[
        "pattern",
        "format",
        "multipleOf",
        "items",
        "prefixItems",
        "additionalItems",
        "properties",
        "additionalProperties",
        "uniqueItems",
    ];
    for k in m.keys() {
        if OTHER_VALIDATION.contains(&k.as_str()) && !CHECKED.contains(&k.as_str()) {
            // Only refuse when the keyword applies to one of the listed values' types.
            let applies = match k.as_str() {
                "pattern" | "format" => v.is_string(),
                "multipleOf" => v.is_number(),
                "items" | "prefixItems" | "additionalItems" | "uniqueItems" => v.is_array(),
                _ => v.is_object(),
            };
            if applies {
                return Err(unsupported(k, ptr, "enum/const combined with this keyword"));
            }
        }
    }
    if let Some(t) = m.get("type") {
        let mut mask = type_mask(t);
        if mask & T_NUMBER != 0 {
            mask |= T_INTEGER;
        }
        let mut vt = type_of(v);
        if draft == 4 && v.as_i64().is_none() && v.as_u64().is_none() {
            vt &= !T_INTEGER;
        }
        if vt & mask == 0 {
            return Ok(false);
        }
    }
    let num = |k: &str| m.get(k).and_then(exact_num);
    let count = |k: &str| m.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
    match v {
        Value::String(s) => {
            let n = s.chars().count();
            if count("minLength").is_some_and(|x| n < x)
                || count("maxLength").is_some_and(|x| n > x)
            {
                return Ok(false);
            }
        }
        Value::Number(x) => {
            let Some(x) = dec::Dec::from_number(x) else {
                return Ok(false);
            };
            let ex_min_bool = m.get("exclusiveMinimum") == Some(&Value::Bool(true));
            let ex_max_bool = m.get("exclusiveMaximum") == Some(&Value::Bool(true));
            if num("minimum").is_some_and(|l| x < l || (ex_min_bool && x == l))
                || num("maximum").is_some_and(|h| x > h || (ex_max_bool && x == h))
                || num("exclusiveMinimum").is_some_and(|l| x <= l)
                || num("exclusiveMaximum").is_some_and(|h| x >= h)
                || num("multipleOf").is_some_and(|d| d.is_zero() || !x.is_multiple_of(&d))
            {
                return Ok(false);
            }
        }
        Value::Array(a)
            if count("minItems").is_some_and(|x| a.len() < x)
                || count("maxItems").is_some_and(|x| a.len() > x) =>
        {
            return Ok(false);
        }
        Value::Object(o) => {
            if count("minProperties").is_some_and(|x| o.len() < x)
                || count("maxProperties").is_some_and(|x| o.len() > x)
            {
                return Ok(false);
            }
            if let Some(Value::Array(req)) = m.get("required") {
                if req
                    .iter()
                    .any(|r| r.as_str().is_some_and(|r| !o.contains_key(r)))
                {
                    return Ok(false);
                }
            }
        }
        _ => {}
    }
    Ok(true)
}

/// An array's brackets: `[ ]` when `empty` is allowed, and `[ items ]` when there are
/// items, with optional whitespace `ws` inside the brackets. Cost: O(1).
fn array_frame(ws: &Expr, empty: bool, items: Option<Expr>) -> Expr {
    let mut alts = Vec::new();
    if empty {
        alts.push(Expr::Seq(vec![
            Expr::Literal(b"[".to_vec()),
            ws.clone(),
            Expr::Literal(b"]".to_vec()),
        ]));
    }
    if let Some(items) = items {
        alts.push(Expr::Seq(vec![
            Expr::Literal(b"[".to_vec()),
            ws.clone(),
            items,
            ws.clone(),
            Expr::Literal(b"]".to_vec()),
        ]));
    }
    Expr::Alt(alts)
}

/// Most distinct values for which `uniqueItems` is compiled into the grammar.
const MAX_UNIQUE_VALUES: usize = 8;

/// The items of an array schema when they are a small set of scalar values with pairwise
/// disjoint spellings (strings, integers, booleans, null; deduplicated): `items` is just an
/// `enum` or a `const` (annotations aside), with no `prefixItems`, `contains` or
/// `additionalItems`. `None` otherwise.
fn small_value_set(m: &Map<String, Value>) -> Option<Vec<Value>> {
    let allowed_here = [
        "type",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "title",
        "description",
        "$comment",
        "default",
        "examples",
    ];
    if m.keys()
        .any(|k| !allowed_here.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()))
    {
        return None;
    }
    let Some(Value::Object(items)) = m.get("items") else {
        return None;
    };
    let annotation = |k: &str| matches!(k, "title" | "description" | "$comment");
    if items
        .keys()
        .any(|k| !(k == "enum" || k == "const" || annotation(k)))
    {
        return None;
    }
    let raw: Vec<Value> = match (items.get("enum"), items.get("const")) {
        (Some(Value::Array(e)), None) => e.clone(),
        (None, Some(c)) => vec![c.clone()],
        _ => return None,
    };
    let mut out: Vec<Value> = Vec::new();
    for v in raw {
        let scalar = match &v {
            Value::String(_) | Value::Bool(_) | Value::Null => true,
            Value::Number(n) => n.is_i64() || n.is_u64(),
            _ => false,
        };
        if !scalar {
            return None;
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    (out.len() <= MAX_UNIQUE_VALUES).then_some(out)
}

fn get_uint(m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<usize>, SchemaError> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }) {
            Some(x) => Ok(Some(x.min(usize::MAX as u64) as usize)),
            None => Err(invalid(ptr, format!("{k} must be a non-negative integer"))),
        },
        Some(_) => Err(invalid(ptr, format!("{k} must be a non-negative integer"))),
    }
}

/// The types a `not` leaves: `Some(None)` when it constrains nothing (`not: false`),
/// `Some(Some(mask))` for `not` of `true`, `{}` or a type-only schema, `None` otherwise (and
/// when the rest would be "numbers but not integers", which a type cannot say).
fn not_types(v: &Value) -> Option<Option<u8>> {
    match v {
        Value::Bool(false) => Some(None),
        Value::Bool(true) => Some(Some(0)),
        Value::Object(o) => {
            if o.keys()
                .any(|k| k != "type" && !ANNOTATIONS.contains(&k.as_str()))
            {
                return None;
            }
            let excluded = o.get("type").map(type_mask).unwrap_or(ALL_TYPES);
            if o.get("type").is_some() && validate_type_keyword(&o["type"], "").is_err() {
                return None;
            }
            let left = ALL_TYPES & !excluded;
            if left & T_NUMBER != 0 && left & T_INTEGER == 0 {
                return None;
            }
            Some(Some(left))
        }
        _ => None,
    }
}

/// Refuses keywords we do not enforce when they constrain anything.
fn check_keywords(m: &Map<String, Value>, ptr: &str) -> Result<(), SchemaError> {
    for (k, v) in m {
        let k = k.as_str();
        if k == "not" && not_types(v).is_some() {
            continue;
        }
        if REFUSED.contains(&k) {
            let trivial = matches!(k, "minContains") && v == &Value::from(1)
                || matches!(k, "if" | "then" | "else") && v == &Value::Bool(true)
                || matches!(
                    k,
                    "patternProperties" | "dependentSchemas" | "dependentRequired" | "dependencies"
                ) && v.as_object().is_some_and(|o| o.is_empty())
                || matches!(
                    k,
                    "propertyNames" | "unevaluatedProperties" | "unevaluatedItems"
                ) && v == &Value::Bool(true);
            if !trivial {
                return Err(unsupported(k, ptr, "this keyword is not supported yet"));
            }
        }
    }
    Ok(())
}

fn collect_anchors(v: &Value, ptr: &str, out: &mut HashMap<String, String>, depth: usize) {
    if depth > 64 {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(Value::String(a)) = m.get("$anchor") {
                out.insert(a.clone(), ptr.to_string());
            }
            if let Some(Value::String(id)) = m.get("$id") {
                if let Some(a) = id.strip_prefix('#') {
                    out.insert(a.to_string(), ptr.to_string());
                }
            }
            for (k, x) in m {
                if k != "enum" && k != "const" {
                    collect_anchors(x, &join(ptr, k), out, depth + 1);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_anchors(x, &join(ptr, &i.to_string()), out, depth + 1);
            }
        }
        _ => {}
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Intersection of two combinator-free schemas; `None` when provably empty.
fn merge(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    ptr: &str,
) -> Result<Option<Map<String, Value>>, SchemaError> {
    // An object's `properties` and `additionalProperties` are rebuilt below from both
    // sides whenever either side has one: they are not copied first (deep copies of every
    // property's schema, thrown away).
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
fn and_schema(x: Value, y: Value) -> Value {
    match (&x, &y) {
        (Value::Bool(true), _) => y,
        (_, Value::Bool(true)) => x,
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        _ if x == y => x,
        _ => serde_json::json!({ "allOf": [x, y] }),
    }
}

fn strip_capture(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Capture(c) => strip_capture(&c.sub),
        _ => h.clone(),
    }
}

fn first_line(s: &str) -> String {
    s.lines().last().unwrap_or(s).trim().to_string()
}

/// Rewrites ECMAScript regex syntax into the Rust (`regex-syntax`) dialect with the same
/// meaning: `\d`, `\w` (and negations, and `\b`-free) are ASCII in ECMAScript; `\s` is
/// Unicode whitespace in both; `\/` is `/`.
fn ecma_to_rust(p: &str) -> Result<String, String> {
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut it = p.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                let Some(n) = it.next() else {
                    return Err("trailing backslash".into());
                };
                const ECMA_SPACE: &str = "\\t\\n\\x0B\\x0C\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";
                let space_out = format!("[{ECMA_SPACE}]");
                let nspace_out = format!("[^{ECMA_SPACE}]");
                let rep: Option<(&str, &str)> = match n {
                    's' => Some((space_out.as_str(), ECMA_SPACE)),
                    'S' => Some((nspace_out.as_str(), "")),
                    'd' => Some(("[0-9]", "0-9")),
                    'D' => Some(("[^0-9]", "")),
                    'w' => Some(("[A-Za-z0-9_]", "A-Za-z0-9_")),
                    'W' => Some(("[^A-Za-z0-9_]", "")),
                    _ => None,
                };
                match rep {
                    Some((outside, inside)) => {
                        if in_class {
                            if inside.is_empty() {
                                return Err(format!("\\{n} inside a character class"));
                            }
                            out.push_str(inside);
                        } else {
                            out.push_str(outside);
                        }
                    }
                    None => match n {
                        '/' => out.push('/'),
                        'b' | 'B' if !in_class => {
                            return Err("word boundaries are not supported".into())
                        }
                        'c' | 'k' => return Err(format!("\\{n} is not supported")),
                        'u' if it.peek() == Some(&'{') => {
                            out.push_str("\\x");
                        }
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| it.next()).collect();
                            if hex.len() != 4 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                                return Err("\\u needs 4 hex digits".into());
                            }
                            out.push_str(&format!("\\x{{{hex}}}"));
                        }
                        _ => {
                            out.push('\\');
                            out.push(n);
                        }
                    },
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if it.peek() == Some(&'^') {
                    out.push(it.next().unwrap());
                }
                if it.peek() == Some(&']') {
                    // ECMAScript: `[]` matches nothing, `[^]` anything.
                    it.next();
                    in_class = false;
                    if out.ends_with('^') {
                        out.truncate(out.len() - 2);
                        out.push_str("(?s:.)");
                    } else {
                        out.truncate(out.len() - 1);
                        out.push_str("[^\\x{0}-\\x{10FFFF}]");
                    }
                }
            }
            '[' if in_class => out.push_str("\\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '(' if !in_class && it.peek() == Some(&'?') => {
                // Lookarounds and named groups: (?=, (?!, (?<=, (?<!, (?<name>
                let rest: String = it.clone().take(3).collect();
                if rest.starts_with("?=")
                    || rest.starts_with("?!")
                    || rest.starts_with("?<=")
                    || rest.starts_with("?<!")
                {
                    return Err("lookaround assertions are not supported".into());
                }
                out.push('(');
                if rest.starts_with("?<") {
                    it.next();
                    it.next();
                    out.push_str("?P<");
                }
            }
            '.' if !in_class => out.push_str("[^\\n\\r\\x{2028}\\x{2029}]"),
            _ => out.push(c),
        }
    }
    Ok(out)
}

const KNOWN_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut of string constants agrees with [`json_chars`]: a character is spelled
    /// raw only exactly when its encodings are its own UTF-8 alone.
    #[test]
    fn raw_only_characters_agree_with_json_chars() {
        let chars = (0u32..0x3000)
            .chain([
                0xd7ff, 0xe000, 0xfeff, 0xfffd, 0x1_0000, 0x1_f600, 0x10_ffff,
            ])
            .filter_map(char::from_u32);
        for c in chars {
            let own = Expr::Literal(c.to_string().into_bytes());
            assert_eq!(
                spelled_raw_only(c),
                json_chars(&[(c, c)]) == own,
                "{:#x}",
                c as u32
            );
        }
    }
}
