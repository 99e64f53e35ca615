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
//!   forms a serializer produces (`\"`, `\\`, `\/`, `\n`, `\u001f`...). String constants,
//!   enum values and keys also take the `\uXXXX` spellings encoders write for non-ASCII
//!   characters and HTML-sensitive punctuation (`ensure_ascii`, HTML-safe encoders; see
//!   `grammar::json_string::u_escaped`); ASCII letters and digits are matched raw only, and
//!   a `pattern`'s characters take `\uXXXX` for controls only (a known gap, measured in
//!   docs/LLGUIDANCE_MASKS.md). Free strings take every spelling. Lengths count code
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
//!
//! Owns: `schema_to_grammar`, `SchemaOptions`, `SchemaError` and one compile's `Compiler`
//! state. Uses: the IR (`grammar`) and its JSON string encodings, `error`, `util`; its
//! children each add one concern to `Compiler`.

mod arrays;
mod bundle;
mod check;
mod checked;
mod combine;
mod dec;
mod drafts;
mod format;
mod hints;
mod intersect;
mod keywords;
mod num;
mod numbers;
mod objects;
mod strings;
mod tree;
mod types;
use types::*;
mod values;
use intersect::merge;
use keywords::{ANNOTATIONS, ASSERTIONS, REFUSED, TYPES};
use values::{array_frame, exact_num, json_eq, small_value_set, value_passes};

use format::{format_check, format_regex};

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use regex_syntax::hir::{Class, Hir, HirKind, Look};
use serde_json::{Map, Value};
use thiserror::Error;

pub use bundle::{bundle, needs_bundle, RegistryError, SchemaRegistry, DOCS_KEY};
pub use format::{hostname_format, uri_template_format};

use crate::error::GrammarError;
use crate::grammar::json_string::{
    json_chars, json_chars_with, short_escapes, spelled_raw_only, PATTERN_U_ESCAPED,
};
use crate::grammar::{Check, Expr, Grammar, GrammarWarning, KeyComplement, Rule, RuleId};
use crate::Limits;

/// Where whitespace may appear between JSON tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
    /// Only what a grammar alone says, for grammars that must carry no semantic check
    /// (`ruvllm schema to-gbnf`): numbers in plain decimal notation where bounded, integers
    /// and number constants (without the exponent spellings that need a check of the
    /// exact value), and `time`/`date-time` without leap seconds (`:60` is valid only at
    /// 23:59 UTC, which the check decides). A subset of the valid documents. Off by
    /// default.
    pub grammar_only: bool,
    /// Format values that every common reader takes (Python's `datetime`, Pydantic's
    /// types, python-jsonschema's format checker, Rust's chrono), a subset of what the
    /// RFCs allow: years of `date`/`date-time` from 0001 (RFC 3339 allows 0000); at most
    /// 9 digits of fractional seconds in `time`/`date-time` (nanoseconds; without it a
    /// model can run on writing digits, as [`SchemaOptions::number_digits`] keeps it from
    /// doing in numbers), `T` and `Z` in upper case and no leap second; at most 6 digits
    /// in each number of a `duration` (within `timedelta`); `email` as Pydantic's
    /// `EmailStr` takes it (a dot-atom local part, a domain of two labels or more whose
    /// last is letters and no special-use name); `relative-json-pointer` without a digit
    /// after a 0 (python-jsonschema reads one as a leading zero).
    /// Off by default (the exact language); generation turns it on.
    pub portable_values: bool,
    /// Refuse a `format` that is neither one JSON Schema defines nor one of OpenAPI's
    /// (`int32`, `int64`, `float`, `double`, `byte`), rather than read it as an annotation
    /// (the spec's default, which compiles with a [`GrammarWarning`] naming it and its
    /// pointer). Off by default.
    pub refuse_unknown_formats: bool,
    /// Read OpenAPI's formats (`int32`, `int64`, `float`, `double`, `byte`) as JSON Schema
    /// validators do, as annotations (with a warning, or refused under
    /// [`SchemaOptions::refuse_unknown_formats`]), instead of enforcing them. Off by
    /// default: they are enforced (ranges, padded base64). The benches' validator view
    /// turns it on: python-jsonschema, which labels MaskBench's instances, knows none of
    /// them, and some valid instances there carry non-base64 `byte` strings.
    pub annotate_openapi_formats: bool,
}

/// Every field, the registry by identity (the same shared registry), so that options that
/// compile a schema alike hash alike: what a cache of compiled schemas keys by. Cost: O(1).
impl std::hash::Hash for SchemaOptions {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let SchemaOptions {
            whitespace,
            strict,
            closed_objects,
            any_order,
            plain_integers,
            unique_keys,
            number_digits,
            registry,
            grammar_only,
            portable_values,
            refuse_unknown_formats,
            annotate_openapi_formats,
        } = self;
        whitespace.hash(h);
        (
            strict,
            closed_objects,
            any_order,
            plain_integers,
            unique_keys,
        )
            .hash(h);
        number_digits.hash(h);
        registry.as_ref().map(Arc::as_ptr).hash(h);
        (
            grammar_only,
            portable_values,
            refuse_unknown_formats,
            annotate_openapi_formats,
        )
            .hash(h);
    }
}

impl SchemaOptions {
    /// The options of generation (`JsonModeConfig`, the server, the CLI): the subsets
    /// that keep a model from running on (compact whitespace, plain integers, numbers of
    /// at most 20 digits, portable format values) and objects that never repeat a key; objects open, properties in
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
            grammar_only: false,
            portable_values: true,
            refuse_unknown_formats: false,
            annotate_openapi_formats: false,
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
        warnings: c.warnings,
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
/// other documents resolved into it from `registry` (see [`bundle()`]; nothing is fetched),
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
    /// Rules made once per distinct sub-schema value (see [`Compiler::rule_per_value`]):
    /// checked sub-schemas (`compile_checked`) and deep sub-schemas with combinators
    /// ([`MEMO_DEPTH`]), by kind and [`value_key`].
    by_value: HashMap<(PerValue, (u64, u64)), RuleId>,
    /// The keys of `by_value` in insertion order (to undo a failed attempt).
    by_value_log: Vec<(PerValue, (u64, u64))>,
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
    /// Unknown formats met (each once): the grammar's warnings.
    warnings: Vec<GrammarWarning>,
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
        // Refused on request: the validator's check would read it as an annotation.
        "format" => !reason.starts_with("unknown format"),
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

/// The nesting from which sub-schemas with combinators are compiled once per distinct
/// value (a recursion through them repeats within a few levels; above it no value is
/// hashed, so schemas with many `allOf`s near the root compile as before).
const MEMO_DEPTH: usize = 8;

/// What a rule of [`Compiler::rule_per_value`] holds: a checked sub-schema, or a
/// sub-schema with combinators compiled exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PerValue {
    Checked,
    Combined,
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
        // maxContains alone: the grammar still counts the minimum.
        "maxContains" => vec!["maxContains"],
        "contains" | "minContains" => vec!["contains", "minContains", "maxContains"],
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

impl Compiler<'_> {
    /// A `format` neither JSON Schema nor OpenAPI defines, at `ptr` (the schema's pointer):
    /// refused under [`SchemaOptions::refuse_unknown_formats`], otherwise an annotation,
    /// recorded once as a warning. Cost: a scan of the warnings so far.
    fn unknown_format(&mut self, f: &str, ptr: &str) -> Result<(), SchemaError> {
        if self.opts.refuse_unknown_formats {
            return Err(unsupported(
                "format",
                &join(ptr, "format"),
                format!("unknown format {f:?} (unknown formats are refused)"),
            ));
        }
        let w = GrammarWarning {
            at: pointer_or_root(&join(ptr, "format")),
            message: format!("unknown format {f:?}: an annotation, not enforced"),
        };
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
        Ok(())
    }
}

impl Compiler<'_> {
    /// Whether `format: f` is one of OpenAPI's read as an annotation under
    /// [`SchemaOptions::annotate_openapi_formats`]. Cost: a scan of five names.
    fn openapi_annotation(&self, f: &str) -> bool {
        self.opts.annotate_openapi_formats && OPENAPI_FORMATS.contains(&f)
    }
}

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
            by_value: HashMap::new(),
            by_value_log: Vec::new(),
            anchors,
            common: HashMap::new(),
            checks: Vec::new(),
            check_builder: None,
            check_memo: HashMap::new(),
            enums: Default::default(),
            key_sets: HashMap::new(),
            patterns: [HashMap::new(), HashMap::new()],
            number_literals: HashMap::new(),
            warnings: Vec::new(),
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
        if depth < MEMO_DEPTH {
            return self.combined(m, ptr, depth);
        }
        // Deep: one rule per distinct value, which ends the unrolling of a recursive
        // intersection.
        let name = format!("allof{}", ptr.replace('/', "-"));
        self.rule_per_value(PerValue::Combined, s, &name, |c| c.combined(m, ptr, depth))
    }

    /// The rule of sub-schema `s` of kind `kind`, one per distinct value: references are
    /// pointers into the root, so equal values mean the same wherever they are, and a
    /// value met again inside its own compilation (a recursion) refers to its rule. On an
    /// error every rule made since this one began is forgotten, of either kind (a caller
    /// may retry with a looser schema, and no rule of the failed attempt, empty or
    /// referring to one that is, may be found again). Cost: a hash of `s`.
    fn rule_per_value(
        &mut self,
        kind: PerValue,
        s: &Value,
        name: &str,
        body: impl FnOnce(&mut Self) -> Result<Expr, SchemaError>,
    ) -> Result<Expr, SchemaError> {
        let key = (kind, value_key(s));
        if let Some(&r) = self.by_value.get(&key) {
            return Ok(Expr::Ref(r));
        }
        let r = self.reserve(name);
        let mark = self.by_value_log.len();
        self.by_value.insert(key, r);
        self.by_value_log.push(key);
        match body(self) {
            Ok(b) => {
                self.set(r, b);
                Ok(Expr::Ref(r))
            }
            Err(e) => {
                for k in self.by_value_log.drain(mark..) {
                    self.by_value.remove(&k);
                }
                Err(e)
            }
        }
    }

    /// A schema with combinators: the union of its flattened branches, each compiled as
    /// a combinator-free schema.
    fn combined(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
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

    // ---- combinator-free schemas --------------------------------------------------------

    // ---- shared pieces --------------------------------------------------------------------
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

/// Refuses keywords we do not enforce when they constrain anything.
fn check_keywords(m: &Map<String, Value>, ptr: &str) -> Result<(), SchemaError> {
    for (k, v) in m {
        let k = k.as_str();
        if k == "not" && not_types(v).is_some() {
            continue;
        }
        if REFUSED.contains(&k) {
            // `maxContains` without `contains` is ignored by every draft.
            let trivial = k == "maxContains" && !m.contains_key("contains")
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

/// OpenAPI's formats: enforced unless [`SchemaOptions::annotate_openapi_formats`].
const OPENAPI_FORMATS: &[&str] = &["int32", "int64", "float", "double", "byte"];

/// OpenAPI's formats of numbers, each a range (see `numbers`).
const NUMBER_FORMATS: &[&str] = &["int32", "int64", "float", "double"];

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
    // OpenAPI's: ranges of numbers (`numbers`), base64 strings.
    "int32",
    "int64",
    "float",
    "double",
    "byte",
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
