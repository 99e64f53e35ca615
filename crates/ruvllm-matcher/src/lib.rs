//! The sequence matcher that every binding of the engine shares: the Python package
//! (`crates/ruvllm-py`) and the C ABI (`crates/ruvllm-capi`) are thin layers over this crate,
//! so a row filled from Python, from C or from a llama.cpp sampler is the same row.
//!
//! What it adds to the engine's [`ruvllm_engine::Matcher`] is what an inference engine's
//! batch needs and the engine does not know about:
//!
//! * **The logits width.** A model's logits often have more entries than its tokenizer has
//!   tokens (padding up to a multiple of 64 or 128). A row here has `ceil(n_vocab / 32)`
//!   words, bit `t % 32` of word `t / 32` for token `t`, and the padding ids are never set.
//! * **An error state instead of an exception mid-batch.** A refused token, a padding id or
//!   a failed mask stops the matcher with a message ([`SeqMatcher::error`]); from then on its
//!   row allows EOS only, so a batch keeps going and the sequence ends. Never an empty row:
//!   an all-zero row would make the sampler's choice undefined.
//! * **Compiling by kind** ([`Source`], [`compile`]): the five kinds of constraint the
//!   bindings offer, with the JSON Schema options spelled once.
//! * **Filling many rows on several threads** ([`fill_rows_par`]).
//!
//! Costs are the engine's: a fill is one mask computation plus a copy of the row; consume
//! is one parser step per byte; rollback is O(1); a clone copies the parser history.

use std::sync::Arc;

use ruvllm_engine as eng;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, Whitespace};

/// Words in one bitmask row for a logits width of `n_vocab`: `ceil(n_vocab / 32)`.
pub fn words_of(n_vocab: usize) -> usize {
    n_vocab.div_ceil(32)
}

/// Why a constraint did not compile. Each message says where: a line and column, or the
/// schema keyword and its JSON pointer.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// A JSON Schema that is not JSON, or that cannot be enforced exactly.
    #[error("{0}")]
    Schema(String),
    /// A GBNF grammar, regex, choice list or built-in name that does not compile.
    #[error("{0}")]
    Grammar(String),
    /// An option the caller passed is not one this crate knows.
    #[error("{0}")]
    Options(String),
}

/// How a JSON Schema is compiled (see the engine's `SchemaOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonSchemaOptions {
    /// Whitespace between tokens: bounded (compact or pretty-printed), compact or flexible.
    pub whitespace: WhitespaceMode,
    /// Properties in any order instead of the schema's.
    pub any_order: bool,
    /// OpenAI's strict mode: objects are closed where `additionalProperties` is unsaid.
    pub strict: bool,
    /// Numbers as encoders write them (plain integers, at most 20 significant digits) and
    /// unique keys, so that a model cannot run on inside a number until its token limit.
    /// `false`: every document a validator accepts (for checking text).
    pub generation: bool,
}

impl Default for JsonSchemaOptions {
    fn default() -> Self {
        JsonSchemaOptions {
            whitespace: WhitespaceMode::Bounded,
            any_order: false,
            strict: false,
            generation: true,
        }
    }
}

/// Whitespace policy of a JSON Schema constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhitespaceMode {
    /// Compact or pretty-printed, no runaway whitespace (the default).
    Bounded,
    /// No whitespace at all.
    Compact,
    /// Any whitespace, up to 20 characters at a time.
    Flexible,
}

impl WhitespaceMode {
    /// From its name: `bounded`, `compact` or `flexible`.
    pub fn from_name(name: &str) -> Result<Self, CompileError> {
        match name {
            "bounded" => Ok(WhitespaceMode::Bounded),
            "compact" => Ok(WhitespaceMode::Compact),
            "flexible" => Ok(WhitespaceMode::Flexible),
            w => Err(CompileError::Options(format!(
                "whitespace {w:?}: expected bounded, compact or flexible"
            ))),
        }
    }
}

/// A constraint's source, by kind.
#[derive(Debug, Clone)]
pub enum Source<'a> {
    /// A JSON Schema's text.
    JsonSchema(&'a str, JsonSchemaOptions),
    /// A GBNF grammar (llama.cpp's format).
    Gbnf(&'a str),
    /// A regular expression the whole output must match.
    Regex(&'a str),
    /// The output is exactly one of these strings.
    Choices(Vec<String>),
    /// A built-in grammar by name: json, json_object, jsonl, csv, xml, xml:NAME,NAME.
    Builtin(&'a str),
    /// A structural tag (SGLang's and vLLM's `structures`/`triggers` form, see
    /// [`structural_tag`]), its schemas compiled with these options.
    StructuralTag(&'a str, JsonSchemaOptions),
}

fn schema_options(o: &JsonSchemaOptions) -> SchemaOptions {
    let base = if o.generation {
        SchemaOptions::generation()
    } else {
        SchemaOptions::default()
    };
    SchemaOptions {
        whitespace: match o.whitespace {
            WhitespaceMode::Bounded => Whitespace::Bounded,
            WhitespaceMode::Compact => Whitespace::Compact,
            WhitespaceMode::Flexible => Whitespace::Flexible(20),
        },
        any_order: o.any_order,
        strict: o.strict,
        ..base
    }
}

/// The grammar of a structural tag, the JSON text
///
/// ```json
/// {"structures": [{"begin": "<function=get_weather>", "schema": {...}, "end": "</function>"}],
///  "triggers": ["<function="]}
/// ```
///
/// that SGLang and vLLM pass for tool calls in free text: text that contains no trigger,
/// then any number of tags, each a structure's `begin`, a JSON value of its `schema`, its
/// `end`, and again text without a trigger. A trigger in the text therefore always starts
/// a tag, and every `begin` must start with one of the triggers. The free text is the
/// engine's exact "text without these words" expression, which needs all triggers to
/// begin with the same character (true of tool-call markup: `<`, `{`, `[`).
///
/// Errors name the field: `structures[1].schema: ...`, `triggers: ...`. The newer
/// `{"format": ...}` form is refused with an error that says so.
pub fn structural_tag(
    text: &str,
    options: &JsonSchemaOptions,
) -> Result<eng::Grammar, CompileError> {
    use eng::grammar::text::text_without;
    use eng::Expr;
    let bad = |m: String| CompileError::Schema(format!("structural tag: {m}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "not JSON: line {}, column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    if v.get("format").is_some() && v.get("structures").is_none() {
        return Err(bad(
            "the {\"format\": ...} form is not supported; use {\"structures\": [...], \"triggers\": [...]}".into(),
        ));
    }
    let triggers: Vec<String> = match v.get("triggers") {
        Some(serde_json::Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|t| t.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("triggers: expected non-empty strings".into()))?,
        _ => return Err(bad("triggers: expected a non-empty array of strings".into())),
    };
    let first = triggers[0].chars().next();
    if triggers.iter().any(|t| t.chars().next() != first) {
        return Err(bad(format!(
            "triggers: all must begin with the same character ({triggers:?})"
        )));
    }
    let structures = match v.get("structures") {
        Some(serde_json::Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(bad("structures: expected a non-empty array".into())),
    };
    let opts = schema_options(options);
    let mut g = eng::Grammar::single("root", Expr::Seq(vec![]));
    let words: Vec<&str> = triggers.iter().map(String::as_str).collect();
    let free = g.add_rule("text", text_without(&words));
    let mut tags = Vec::new();
    for (i, s) in structures.iter().enumerate() {
        let field = |k: &str| {
            s.get(k)
                .and_then(|x| x.as_str())
                .ok_or_else(|| bad(format!("structures[{i}].{k}: expected a string")))
        };
        let (begin, end) = (field("begin")?, field("end")?);
        if !triggers.iter().any(|t| begin.starts_with(t.as_str())) {
            return Err(bad(format!(
                "structures[{i}].begin {begin:?} starts with none of the triggers"
            )));
        }
        let schema = s
            .get("schema")
            .ok_or_else(|| bad(format!("structures[{i}].schema is missing")))?;
        let sg = schema_to_grammar(schema, &opts)
            .map_err(|e| bad(format!("structures[{i}].schema: {e}")))?;
        let r = g.embed(sg, &format!("tag{i}-"));
        tags.push(Expr::Seq(vec![
            Expr::Literal(begin.as_bytes().to_vec()),
            Expr::Ref(r),
            Expr::Literal(end.as_bytes().to_vec()),
        ]));
    }
    let tag = g.add_rule("tag", Expr::Alt(tags));
    g.rules[0].body = Expr::Seq(vec![
        Expr::Ref(free),
        Expr::repeat(Expr::Seq(vec![Expr::Ref(tag), Expr::Ref(free)]), 0, None),
    ]);
    Ok(g)
}

/// Compiles `source` and binds it to `engine`'s vocabulary. Cost: the engine's compile
/// (cached lexemes and token tables are reused across calls on one engine).
pub fn compile(
    engine: &eng::Engine,
    source: &Source<'_>,
) -> Result<Arc<eng::Constraint>, CompileError> {
    let limits = eng::Limits::default();
    let g = |e: eng::GrammarError| CompileError::Grammar(e.to_string());
    let source = match source {
        Source::JsonSchema(text, o) => {
            let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                CompileError::Schema(format!(
                    "the schema is not JSON: line {}, column {}: {e}",
                    e.line(),
                    e.column()
                ))
            })?;
            eng::Source::JsonSchema(value, schema_options(o))
        }
        Source::Gbnf(text) => eng::Source::Gbnf(text.to_string()),
        Source::Regex(p) => eng::Source::Regex(p.to_string()),
        Source::Choices(c) => eng::Source::Choices(c.clone()),
        Source::Builtin(name) => eng::Source::Builtin(eng::Builtin::from_name(name).map_err(g)?),
        Source::StructuralTag(text, o) => {
            let grammar = structural_tag(text, o)?;
            return engine.constraint(&grammar, &limits).map_err(g);
        }
    };
    let grammar = source.to_grammar(&limits).map_err(|e| match e {
        eng::SourceError::Schema(e) => CompileError::Schema(e.to_string()),
        eng::SourceError::Grammar(e) => CompileError::Grammar(e.to_string()),
    })?;
    engine.constraint(&grammar, &limits).map_err(g)
}

/// One sequence under a constraint, with the model's logits width and an error state.
#[derive(Clone)]
pub struct SeqMatcher {
    constraint: Arc<eng::Constraint>,
    m: eng::Matcher,
    n_vocab: usize,
    /// Why the matcher stopped on an error: it then allows EOS only until `rollback` or
    /// `reset`.
    error: Option<String>,
    /// The last row filled: the engine's mask, then zeros for the padding ids.
    row: Vec<u32>,
}

impl SeqMatcher {
    /// A matcher at the start of `constraint`, for logits of width `n_vocab` (at least the
    /// vocabulary's size). Cost: one parser start.
    pub fn new(constraint: Arc<eng::Constraint>, n_vocab: usize) -> Result<Self, eng::MatchError> {
        let vocab_len = constraint.vocab().len();
        let n_vocab = n_vocab.max(vocab_len);
        let m = eng::Matcher::new(&constraint)?;
        Ok(SeqMatcher {
            row: vec![0; words_of(n_vocab).max(constraint.vocab().mask_words())],
            constraint,
            m,
            n_vocab,
            error: None,
        })
    }

    /// The constraint this matcher follows.
    pub fn constraint(&self) -> &Arc<eng::Constraint> {
        &self.constraint
    }

    /// The logits width.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Words in a row: `ceil(n_vocab / 32)`.
    pub fn words(&self) -> usize {
        words_of(self.n_vocab)
    }

    /// Whether the matcher takes no more tokens: EOS was consumed, or an error stopped it.
    pub fn is_stopped(&self) -> bool {
        self.error.is_some() || self.m.is_finished()
    }

    /// Whether the output so far is complete (EOS would be accepted now).
    pub fn is_accepting(&mut self) -> bool {
        !self.is_stopped() && self.m.is_accepting()
    }

    /// Why the matcher stopped on an error, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Tokens committed so far.
    pub fn num_tokens(&self) -> usize {
        self.m.num_tokens()
    }

    /// Computes the next token's row and returns it (`words()` words): the engine's mask,
    /// or EOS only when stopped or when the mask fails (which then stops the matcher).
    /// Padding ids are always 0. `tokens_left`: the budget-aware mask, whose every token
    /// leaves a completion within that many tokens.
    pub fn fill(&mut self, tokens_left: Option<usize>) -> &[u32] {
        let mw = self.constraint.vocab().mask_words();
        let words = self.words();
        if !self.is_stopped() {
            let mask = &mut self.row[..mw];
            let r = match tokens_left {
                None => self.m.compute_mask(mask),
                Some(n) => self.m.compute_budget_mask(mask, n).map(|_| ()),
            };
            match r {
                Ok(()) => return &self.row[..words],
                Err(e) => self.error = Some(e.to_string()),
            }
        }
        self.row.fill(0);
        for &e in self.constraint.vocab().eos_tokens() {
            self.row[e as usize / 32] |= 1 << (e % 32);
        }
        &self.row[..words]
    }

    /// The row the last [`SeqMatcher::fill`] computed.
    pub fn row(&self) -> &[u32] {
        &self.row[..self.words()]
    }

    /// Commits `token`; `false`, and the matcher stops with an error, when the constraint
    /// refuses it (or it is padding, or the matcher is already in error).
    pub fn consume(&mut self, token: u32) -> bool {
        if self.error.is_some() {
            return false;
        }
        match self.m.commit_token(token) {
            Ok(()) => true,
            Err(e) => {
                let len = self.constraint.vocab().len();
                let t = token as usize;
                self.error = Some(if t < self.n_vocab && t >= len {
                    format!("token {token} is padding (the tokenizer has {len} tokens)")
                } else {
                    e.to_string()
                });
                false
            }
        }
    }

    /// How many of `tokens`, from the first, the constraint accepts from here, without
    /// advancing (a speculative draft's accepted prefix). Cost: a copy of the parser state.
    pub fn validate(&self, tokens: &[u32]) -> usize {
        if self.is_stopped() {
            return 0;
        }
        let mut m = self.m.clone();
        tokens
            .iter()
            .take_while(|&&t| m.commit_token(t).is_ok())
            .count()
    }

    /// Takes back the last `n` committed tokens, and clears an error a refused token left.
    pub fn rollback(&mut self, n: usize) -> Result<(), eng::MatchError> {
        self.m.rollback(n)?;
        self.error = None;
        Ok(())
    }

    /// Back to the start of the constraint, with no error.
    pub fn reset(&mut self) -> Result<(), eng::MatchError> {
        self.m = eng::Matcher::new(&self.constraint)?;
        self.error = None;
        Ok(())
    }

    /// The tokens the constraint forces next (jump-forward), possibly none; none when
    /// stopped.
    pub fn forced_tokens(&mut self) -> Result<Vec<u32>, eng::MatchError> {
        if self.is_stopped() {
            return Ok(vec![]);
        }
        self.m.forced_tokens()
    }

    /// The shortest completion from here: the fewest tokens found after which the output
    /// is complete (what a budget-aware mask needs at least; see
    /// [`eng::Matcher::shortest_completion`] for how exact the count is), empty when
    /// complete or stopped; `None` when none is found. Cost: microseconds, more past a
    /// semantic check (a bounded search); kept until the state changes.
    pub fn shortest_completion(&mut self) -> Result<Option<Vec<u32>>, eng::MatchError> {
        if self.is_stopped() {
            return Ok(Some(vec![]));
        }
        Ok(self.m.shortest_completion()?.map(|w| w.tokens().to_vec()))
    }

    /// The bytes the constraint forces next, possibly none; none when stopped.
    pub fn forced_bytes(&mut self) -> Result<Vec<u8>, eng::MatchError> {
        if self.is_stopped() {
            return Ok(vec![]);
        }
        self.m.forced_bytes()
    }
}

/// Fills every matcher's row ([`SeqMatcher::fill`] without a budget) on up to `threads`
/// threads; the rows are then read with [`SeqMatcher::row`]. The same rows as filling them
/// one by one: each matcher is touched by one thread only.
pub fn fill_rows_par(matchers: &mut [&mut SeqMatcher], threads: usize) {
    if matchers.is_empty() {
        return;
    }
    let threads = threads.clamp(1, matchers.len());
    if threads == 1 {
        matchers.iter_mut().for_each(|m| {
            m.fill(None);
        });
        return;
    }
    let per = matchers.len().div_ceil(threads);
    std::thread::scope(|sc| {
        for chunk in matchers.chunks_mut(per) {
            sc.spawn(move || {
                chunk.iter_mut().for_each(|m| {
                    m.fill(None);
                })
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> eng::Engine {
        let tokens: Vec<Vec<u8>> = ["a", "b", "ab", "\"", "{", "}", ":", "1", ""]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let mut special = vec![false; tokens.len()];
        special[8] = true;
        let v = eng::Vocabulary::new("t", tokens, special, vec![8]).unwrap();
        eng::Engine::new(Arc::new(v))
    }

    fn allowed(row: &[u32]) -> Vec<u32> {
        (0..row.len() as u32 * 32)
            .filter(|t| row[*t as usize / 32] >> (t % 32) & 1 == 1)
            .collect()
    }

    #[test]
    fn padding_is_never_allowed_and_errors_leave_eos_only() {
        let e = engine();
        let c = compile(&e, &Source::Regex("(ab)+")).unwrap();
        let mut m = SeqMatcher::new(c, 70).unwrap();
        assert_eq!(m.words(), 3);
        assert_eq!(allowed(m.fill(None)), vec![0, 2]);
        assert!(m.consume(2));
        assert_eq!(allowed(m.fill(None)), vec![0, 2, 8]);
        assert!(!m.consume(40), "a padding id is refused");
        assert!(m.error().unwrap().contains("padding"), "{:?}", m.error());
        assert!(m.is_stopped());
        assert_eq!(allowed(m.fill(None)), vec![8]);
        m.rollback(0).unwrap();
        assert!(!m.is_stopped());
        assert_eq!(m.validate(&[0, 1, 3]), 2);
        assert_eq!(m.num_tokens(), 1);
        m.reset().unwrap();
        assert_eq!(m.num_tokens(), 0);
    }

    #[test]
    fn compile_errors_say_where() {
        let e = engine();
        let err = compile(&e, &Source::Gbnf("root ::= \"a")).err().unwrap();
        assert!(matches!(err, CompileError::Grammar(_)));
        let err = compile(
            &e,
            &Source::JsonSchema("{\"type\": 1", JsonSchemaOptions::default()),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = compile(
            &e,
            &Source::JsonSchema(
                r#"{"properties":{"a":{"type":"strin"}}}"#,
                JsonSchemaOptions::default(),
            ),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("/properties/a"), "{err}");
        assert!(WhitespaceMode::from_name("wide").is_err());
    }

    #[test]
    fn structural_tags_are_text_then_tagged_json() {
        let tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).chain([Vec::new()]).collect();
        let mut special = vec![false; 257];
        special[256] = true;
        let v = eng::Vocabulary::new("bytes", tokens, special, vec![256]).unwrap();
        let e = eng::Engine::new(Arc::new(v));
        let tag = r#"{"triggers": ["<f="], "structures": [
            {"begin": "<f=a>", "schema": {"type": "object", "properties": {"x": {"type": "integer"}},
             "required": ["x"], "additionalProperties": false}, "end": "</f>"},
            {"begin": "<f=b>", "schema": {"type": "boolean"}, "end": "</f>"}]}"#;
        let c = compile(
            &e,
            &Source::StructuralTag(tag, JsonSchemaOptions::default()),
        )
        .unwrap();
        let accepts = |text: &str| {
            let mut m = eng::Matcher::new(&c).unwrap();
            matches!(
                m.check_bytes(text.as_bytes()).unwrap(),
                eng::CheckResult::Accepted
            )
        };
        assert!(accepts(""));
        assert!(accepts("plain text <b> and <f no"));
        assert!(accepts("call <f=a>{\"x\":1}</f> then <f=b>true</f>"));
        assert!(!accepts("call <f=a>{\"x\":\"no\"}</f>"), "the schema holds");
        assert!(!accepts("call <f=c>1</f>"), "a trigger always starts a tag");
        assert!(!accepts("call <f=a>{\"x\":1}"), "a tag must end");
        for (bad, want) in [
            (r#"{"format": {"type": "x"}}"#, "format"),
            (r#"{"triggers": [], "structures": []}"#, "triggers"),
            (
                r#"{"triggers": ["<a", "{b"], "structures": [{"begin": "<a", "schema": {}, "end": ""}]}"#,
                "same character",
            ),
            (
                r#"{"triggers": ["<a"], "structures": [{"begin": "<b", "schema": {}, "end": ""}]}"#,
                "structures[0].begin",
            ),
            (
                r#"{"triggers": ["<a"], "structures": [{"begin": "<a", "schema": {"type": "nope"}, "end": ""}]}"#,
                "structures[0].schema",
            ),
        ] {
            let err = structural_tag(bad, &JsonSchemaOptions::default())
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn parallel_rows_equal_sequential_rows() {
        let e = engine();
        let c = compile(&e, &Source::Regex("(ab|a)+b?")).unwrap();
        let mut ms: Vec<SeqMatcher> = (0..9)
            .map(|_| SeqMatcher::new(c.clone(), 64).unwrap())
            .collect();
        for (i, m) in ms.iter_mut().enumerate() {
            for _ in 0..i % 3 {
                m.consume(2);
            }
        }
        let seq: Vec<Vec<u32>> = ms
            .clone()
            .iter_mut()
            .map(|m| m.fill(None).to_vec())
            .collect();
        let mut refs: Vec<&mut SeqMatcher> = ms.iter_mut().collect();
        fill_rows_par(&mut refs, 2);
        let par: Vec<Vec<u32>> = ms.iter().map(|m| m.row().to_vec()).collect();
        assert_eq!(seq, par);
    }
}
