//! The design record's API: [`LlmBackend`], [`GenerateParams`], [`JsonModeConfig`], and
//! what a generation returns.
//!
//! Every backend implements one method, [`LlmBackend::complete`], which runs a
//! [`Prompt`] under [`GenerateParams`] and reports text as it is produced; the record's
//! `generate`, `generate_json` and `generate_stream` are built on it. A generation is
//! constrained by at most one thing: `json_mode` (the record's JSON mode: a schema, a GBNF
//! grammar, or any JSON) or `constraint` (a GBNF grammar, a regex, a choice list, a
//! schema). With `json_mode`, the output is also validated afterwards according to
//! `strict` and `repair`, so backends without logit access answer to the same contract.

use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::channel::mpsc;
use futures::Stream;
use ruvllm_engine::schema::{SchemaOptions, Whitespace};
use ruvllm_engine::{Expr, Grammar, Limits, Source};
use serde_json::{json, Value};

use crate::chat::Message;
use crate::error::{Result, RuntimeError};
use crate::json::{JsonSchema, JsonValidator, ValidatedJson};
use crate::reasoning::{Thinking, SEPARATOR};
use crate::sampler::SamplerConfig;
use crate::tools::ToolCalling;
use ruvllm_engine::grammar::text::text_without;

/// JSON mode, as the design record defines it.
#[derive(Debug, Clone)]
pub struct JsonModeConfig {
    /// Optional JSON Schema the output must satisfy.
    pub schema: Option<JsonSchema>,
    /// Strict mode: invalid output is an error (default `true`).
    pub strict: bool,
    /// Repair mode: malformed output is repaired when possible (default `false`).
    pub repair: bool,
    /// A GBNF grammar for custom structured formats (used instead of the schema's).
    pub grammar: Option<String>,
    /// Constrain decoding token by token (default `true`); `false` = post-validation only.
    pub constrained_decoding: bool,
    /// Whitespace the grammar allows between JSON tokens. Default [`Whitespace::Compact`]:
    /// no whitespace, so keys and punctuation are forced text (jump-forward) and output
    /// can never run away in whitespace.
    pub whitespace: Whitespace,
    /// Object properties in any order rather than schema order (default `false`).
    pub any_order: bool,
    /// Objects whose schema declares `properties` but leaves `additionalProperties`
    /// unsaid take only their declared properties, as if it said `false` (default
    /// `false`: the JSON Schema default, any other key too). Small models invent keys when
    /// they may; Ollama and llama.cpp close such objects. Either way generated objects
    /// never repeat a key.
    pub close_objects: bool,
}

impl Default for JsonModeConfig {
    fn default() -> Self {
        JsonModeConfig {
            schema: None,
            strict: true,
            repair: false,
            grammar: None,
            constrained_decoding: true,
            whitespace: Whitespace::Compact,
            any_order: false,
            close_objects: false,
        }
    }
}

impl JsonModeConfig {
    /// The validator that checks output afterwards.
    pub fn validator(&self) -> JsonValidator {
        JsonValidator::new(self.schema.clone(), self.strict, self.repair)
    }

    /// The constraint that enforces this mode while decoding (`None` when decoding is not
    /// constrained).
    pub fn constraint(&self) -> Option<OutputConstraint> {
        if !self.constrained_decoding {
            return None;
        }
        Some(match (&self.grammar, &self.schema) {
            (Some(g), _) => OutputConstraint::Gbnf(g.clone()),
            (None, Some(s)) => OutputConstraint::JsonSchema {
                schema: s.clone(),
                options: SchemaOptions {
                    whitespace: self.whitespace,
                    closed_objects: self.close_objects,
                    any_order: self.any_order,
                    ..SchemaOptions::generation()
                },
            },
            (None, None) => OutputConstraint::Json {
                whitespace: self.whitespace,
            },
        })
    }
}

/// What can constrain a generation.
#[derive(Debug, Clone)]
pub enum OutputConstraint {
    /// Any JSON value (an object when used for chat JSON mode is the caller's choice).
    Json {
        /// Whitespace policy.
        whitespace: Whitespace,
    },
    /// A JSON object (OpenAI's `json_object`).
    JsonObject {
        /// Whitespace policy.
        whitespace: Whitespace,
    },
    /// JSON satisfying a schema.
    JsonSchema {
        /// The schema.
        schema: JsonSchema,
        /// Compilation options.
        options: SchemaOptions,
    },
    /// A GBNF grammar (llama.cpp's format).
    Gbnf(String),
    /// A regular expression the whole output must match.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// `prefix`, then text under `inner`, then `suffix` (e.g. JSON inside a Markdown
    /// code fence).
    Wrapped {
        /// Fixed text before.
        prefix: String,
        /// The constraint in between.
        inner: Box<OutputConstraint>,
        /// Fixed text after.
        suffix: String,
    },
    /// Free reasoning up to the first `end` marker, then [`crate::reasoning::SEPARATOR`],
    /// then `inner` (see [`crate::reasoning`]).
    Reasoned {
        /// The end marker (`</think>`).
        end: String,
        /// The answer's constraint.
        inner: Box<OutputConstraint>,
    },
    /// Tool calls (see [`crate::tools`]); with `tool_choice: auto`, a text answer under
    /// `text` (free text when `None`).
    Tools {
        /// The tools and the choice.
        calling: ToolCalling,
        /// The format of a text answer.
        text: Option<Box<OutputConstraint>>,
        /// How the tools' parameter schemas are compiled.
        options: SchemaOptions,
    },
}

/// What identifies a constraint for the compiled-constraint cache: every field that
/// changes its grammar (a schema by its value and its options' fields, tools by their
/// names, descriptions, schemas, choice and call syntax), hashed where it lies, with no
/// text written. The cache keys by two such hashes under random keys (128 bits).
impl Hash for OutputConstraint {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            OutputConstraint::Json { whitespace } | OutputConstraint::JsonObject { whitespace } => {
                whitespace.hash(h)
            }
            OutputConstraint::JsonSchema { schema, options } => {
                schema.as_value().hash(h);
                options.hash(h);
            }
            OutputConstraint::Gbnf(t) | OutputConstraint::Regex(t) => t.hash(h),
            OutputConstraint::Choice(c) => c.hash(h),
            OutputConstraint::Wrapped {
                prefix,
                inner,
                suffix,
            } => {
                prefix.hash(h);
                suffix.hash(h);
                inner.hash(h);
            }
            OutputConstraint::Reasoned { end, inner } => {
                end.hash(h);
                inner.hash(h);
            }
            OutputConstraint::Tools {
                calling,
                text,
                options,
            } => {
                calling.hash(h);
                text.hash(h);
                options.hash(h);
            }
        }
    }
}

impl OutputConstraint {
    /// The engine source of a constraint that is one (JSON modes, a schema, a grammar,
    /// a regex, choices); `None` for what the runtime adds around one (wrapping,
    /// reasoning, tool calls). Cost: a copy of the schema for a schema.
    pub fn source(&self) -> Option<Source> {
        let json = |schema: Value, whitespace: Whitespace| {
            Source::JsonSchema(
                schema,
                SchemaOptions {
                    whitespace,
                    ..SchemaOptions::generation()
                },
            )
        };
        Some(match self {
            OutputConstraint::Json { whitespace } => json(json!({}), *whitespace),
            OutputConstraint::JsonObject { whitespace } => {
                json(json!({"type": "object"}), *whitespace)
            }
            OutputConstraint::JsonSchema { schema, options } => {
                Source::JsonSchema(schema.as_value().clone(), options.clone())
            }
            OutputConstraint::Gbnf(text) => Source::Gbnf(text.clone()),
            OutputConstraint::Regex(re) => Source::Regex(re.clone()),
            OutputConstraint::Choice(list) => Source::Choices(list.clone()),
            OutputConstraint::Wrapped { .. }
            | OutputConstraint::Reasoned { .. }
            | OutputConstraint::Tools { .. } => return None,
        })
    }

    /// The grammar this constraint stands for; `None` for a [`OutputConstraint::Tools`]
    /// that allows no call and has no text format (nothing to constrain). Cost: one
    /// front-end pass ([`Source::to_grammar`]; schema compilation for schemas).
    pub fn grammar(&self, limits: &Limits) -> Result<Option<Grammar>> {
        Ok(Some(match self {
            OutputConstraint::Wrapped {
                prefix,
                inner,
                suffix,
            } => {
                let mut g = Grammar::single("root", Expr::Empty);
                let body = match inner.grammar(limits)? {
                    Some(ig) => Expr::Ref(g.embed(ig, "inner-")),
                    None => Expr::Repeat {
                        e: Box::new(Expr::Chars(vec![('\0', char::MAX)])),
                        min: 0,
                        max: None,
                    },
                };
                g.rules[0].body = Expr::Seq(vec![
                    Expr::Literal(prefix.as_bytes().to_vec()),
                    body,
                    Expr::Literal(suffix.as_bytes().to_vec()),
                ]);
                g
            }
            OutputConstraint::Reasoned { end, inner } => {
                let mut g = Grammar::single("root", Expr::Empty);
                let answer = match inner.grammar(limits)? {
                    Some(ig) => Expr::Ref(g.embed(ig, "answer-")),
                    None => Expr::repeat(Expr::Chars(vec![('\0', char::MAX)]), 0, None),
                };
                let reasoning = g.add_rule("reasoning", text_without(&[end.as_str()]));
                g.rules[0].body = Expr::Seq(vec![
                    Expr::Ref(reasoning),
                    Expr::Literal(end.as_bytes().to_vec()),
                    Expr::Literal(SEPARATOR.as_bytes().to_vec()),
                    answer,
                ]);
                g
            }
            OutputConstraint::Tools {
                calling,
                text,
                options,
            } => {
                let text = match text {
                    Some(t) => t.grammar(limits)?,
                    None => None,
                };
                return calling.grammar(text, options, limits);
            }
            // Every other kind is an engine source.
            _ => match self.source() {
                Some(source) => source.to_grammar(limits)?,
                None => return Ok(None),
            },
        }))
    }
}

/// Generation parameters: the record's fields plus the usual sampling controls.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    /// Most tokens to generate (default 256).
    pub max_tokens: usize,
    /// Sampling temperature; 0 = greedy (default 0.7).
    pub temperature: f32,
    /// Nucleus sampling mass (default 1.0 = off).
    pub top_p: f32,
    /// Top-k (default 0 = off).
    pub top_k: usize,
    /// Min-p (default 0.0 = off).
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens, llama.cpp style (default 1.0 = off).
    pub repeat_penalty: f32,
    /// Presence penalty, OpenAI style (default 0.0 = off).
    pub presence_penalty: f32,
    /// Frequency penalty, OpenAI style (default 0.0 = off).
    pub frequency_penalty: f32,
    /// Seed of the draw; `None` picks one (reported in [`Generation::seed`]).
    pub seed: Option<u64>,
    /// Generation stops before any of these strings (not part of the output).
    pub stop: Vec<String>,
    /// JSON mode.
    pub json_mode: Option<JsonModeConfig>,
    /// A grammar, regex, choice list or schema constraint (not with `json_mode`).
    pub constraint: Option<OutputConstraint>,
    /// Append forced text without sampling it (default `true`).
    pub jump_forward: bool,
    /// Never end at EOS: generate exactly `max_tokens` (benchmarks; unconstrained only).
    pub ignore_eos: bool,
    /// Budget-aware decoding (default `true`): a constrained generation whose
    /// `max_tokens` is at least its shortest completion always ends complete within it.
    /// Near the end of the budget, only tokens after which the output can still be
    /// completed in the tokens left are allowed (the engine's budget mask), and forced
    /// text counts against the budget. An output the budget closed says so in
    /// [`Generation::budget_closed`]. `false`: the exact mask only, and an output cut by
    /// `max_tokens` ends [`FinishReason::Length`], incomplete. No effect unconstrained.
    pub budget_aware: bool,
    /// Reasoning (for chat templates with a reasoning section; see [`crate::reasoning`]):
    /// on by default there, off with `enabled: Some(false)`, bounded by `budget`.
    pub thinking: Thinking,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            temperature: 0.7,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            stop: Vec::new(),
            json_mode: None,
            constraint: None,
            jump_forward: true,
            ignore_eos: false,
            budget_aware: true,
            thinking: Thinking::default(),
        }
    }
}

impl GenerateParams {
    /// The sampler settings.
    pub fn sampler(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
        }
    }

    /// The constraint to decode under: `constraint`, or the one `json_mode` implies.
    /// Errors when both are given.
    pub fn effective_constraint(&self) -> Result<Option<OutputConstraint>> {
        match (&self.json_mode, &self.constraint) {
            (Some(_), Some(_)) => Err(RuntimeError::Params {
                param: "constraint",
                msg: "give either json_mode or constraint, not both".into(),
            }),
            (Some(j), None) => Ok(j.constraint()),
            (None, c) => Ok(c.clone()),
        }
    }

    /// Checks every range. Cost: O(1).
    pub fn validate(&self) -> Result<()> {
        self.sampler().validate()?;
        if self.max_tokens == 0 {
            return Err(RuntimeError::Params {
                param: "max_tokens",
                msg: "must be at least 1".into(),
            });
        }
        if self.stop.iter().any(|s| s.is_empty()) {
            return Err(RuntimeError::Params {
                param: "stop",
                msg: "stop sequences must not be empty".into(),
            });
        }
        if self.ignore_eos && self.effective_constraint()?.is_some() {
            return Err(RuntimeError::Params {
                param: "ignore_eos",
                msg: "a constrained generation ends where its grammar ends".into(),
            });
        }
        Ok(())
    }
}

/// What to generate from.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// A user message, rendered with the model's chat template.
    User(String),
    /// A conversation (and optional OpenAI tool definitions) for the chat template.
    Chat {
        /// The messages.
        messages: Vec<Message>,
        /// OpenAI tool definitions: passed to the template as `tools`, or written into
        /// the system message when the template does not render them (see
        /// [`crate::tools::inject_tools`]). Constrain the answer with
        /// [`OutputConstraint::Tools`].
        tools: Option<Value>,
    },
    /// Text given to the model as is (no template).
    Raw(String),
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The output is complete: the model (or the grammar) ended it, a stop sequence was
    /// met, or, under a constraint, `max_tokens` was reached with the output complete
    /// (budget-aware decoding closes it in time; see [`Generation::budget_closed`]).
    Stop,
    /// `max_tokens` was reached first and, under a constraint, the output is not complete
    /// (the budget was below the shortest completion, or budget-aware decoding was off).
    Length,
}

impl FinishReason {
    /// `stop` or `length`, as the OpenAI API spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Counters and timings of one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from the prefix cache (not recomputed).
    pub cached_prompt_tokens: usize,
    /// Output tokens (sampled plus forced).
    pub completion_tokens: usize,
    /// Output tokens appended by jump-forward, not sampled.
    pub forced_tokens: usize,
    /// Output tokens of the reasoning section (end marker included; 0 without one).
    pub reasoning_tokens: usize,
    /// Model forward passes after the prompt.
    pub forward_passes: usize,
    /// Seconds spent on the prompt (prefill).
    pub prompt_secs: f64,
    /// Seconds from the start to the first output token.
    pub first_token_secs: f64,
    /// Seconds in total.
    pub total_secs: f64,
    /// Seconds spent computing grammar masks.
    pub mask_secs: f64,
    /// Decoding steps at which budget-aware decoding narrowed the mask (or held back
    /// forced text) so that the output could still be completed within `max_tokens`.
    pub budget_steps: usize,
    /// Sampled tokens refused after the fact because no completion was found within the
    /// budget after them (only under semantic checks; each was sampled again).
    pub budget_refusals: usize,
    /// The shortest completion from the start, in tokens, as budget-aware decoding
    /// found it before the first token (`None`: no constraint, budget-aware decoding not
    /// asked for, or no completion found: the search for a way past a semantic check
    /// gave up). Budget-aware decoding is on exactly when it is at most `max_tokens`.
    pub start_completion: Option<usize>,
    /// Per sampled step of a budget-aware generation: the seconds its mask took, and
    /// whether the end of the budget was near (the budget mask then narrowed the exact
    /// one token by token and computed the shortest completion). For benchmarks.
    pub mask_steps: Vec<(f32, bool)>,
}

impl Usage {
    /// Seconds after the prompt was read (sampling, masks and decode passes).
    pub fn decode_secs(&self) -> f64 {
        (self.total_secs - self.prompt_secs).max(0.0)
    }

    /// Output tokens per second after the prompt was read (forced tokens included: they
    /// are output the client receives).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        let t = self.decode_secs();
        if self.completion_tokens > 0 && t > 0.0 {
            self.completion_tokens as f64 / t
        } else {
            0.0
        }
    }

    /// Forward passes per second after the prompt (the raw speed of the model).
    pub fn passes_per_sec(&self) -> f64 {
        let t = self.decode_secs();
        if t > 0.0 {
            self.forward_passes as f64 / t
        } else {
            0.0
        }
    }
}

/// Which path produced a result (meaningful for backends that validate after the fact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultPath {
    /// Constrained decoding: valid by construction.
    Constrained,
    /// Unconstrained output that validated as it was.
    Valid,
    /// Output repaired into a valid value.
    Repaired,
    /// Valid (or repaired) only after this many retries.
    Retried(usize),
    /// Not checked (no JSON mode).
    Unchecked,
}

/// A finished generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The output text (after JSON repair, when repair changed it).
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Counters and timings.
    pub usage: Usage,
    /// The seed of the draw.
    pub seed: u64,
    /// The JSON mode validation result, when JSON mode was on.
    pub json: Option<ValidatedJson>,
    /// Which path produced it.
    pub path: ResultPath,
    /// Budget-aware decoding shaped the end of the output: at some step the budget left
    /// the model fewer tokens than the grammar allowed, so that the output ends complete
    /// within `max_tokens` ([`Usage::budget_steps`] says how many steps). The output is
    /// complete and valid; the model might have written more with a larger budget.
    pub budget_closed: bool,
    /// The reasoning section, apart from the answer in `text` (`None` when the generation
    /// had none).
    pub reasoning: Option<String>,
    /// What the constraint's compiler accepted with a warning, each `POINTER: message`
    /// (an unknown JSON Schema `format`, not enforced); empty for most requests.
    pub warnings: Vec<String>,
}

/// A language model backend (the design record's trait).
///
/// Implement [`LlmBackend::complete`]; everything else has a default built on it.
pub trait LlmBackend {
    /// Runs one generation. `on_text` receives output text as it is produced (whole UTF-8
    /// characters, stop sequences withheld); returning `false` cancels the generation
    /// ([`RuntimeError::Cancelled`]).
    fn complete(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation>;

    /// Text generation: `prompt` is a user message rendered with the chat template.
    fn generate(&self, prompt: &str, params: GenerateParams) -> Result<String> {
        Ok(self
            .complete(&Prompt::User(prompt.to_string()), &params, &mut |_| true)?
            .text)
    }

    /// JSON generation: decodes under `schema` (or any JSON), and returns the value, which
    /// validates against the schema.
    fn generate_json(
        &self,
        prompt: &str,
        schema: Option<JsonSchema>,
        params: GenerateParams,
    ) -> Result<Value> {
        let mut p = params;
        let base = p.json_mode.take().unwrap_or_default();
        p.constraint = None;
        p.json_mode = Some(JsonModeConfig { schema, ..base });
        let g = self.complete(&Prompt::User(prompt.to_string()), &p, &mut |_| true)?;
        match g.json.and_then(|j| j.value) {
            Some(v) => Ok(v),
            None => Ok(serde_json::from_str(&g.text).map_err(|e| {
                RuntimeError::Json(crate::json::JsonError::Syntax {
                    line: e.line(),
                    column: e.column(),
                    msg: crate::json::serde_message(&e),
                })
            })?),
        }
    }
}

/// Streaming generation (the record's `generate_stream`) for any backend that can be
/// cloned onto a thread: the returned [`TextStream`] yields text chunks, constrained
/// exactly as [`LlmBackend::generate`] would be.
pub trait StreamingBackend: LlmBackend + Clone + Send + 'static {
    /// Starts generating `prompt` (a user message) on a new thread.
    fn generate_stream(&self, prompt: &str, params: GenerateParams) -> TextStream {
        self.stream(Prompt::User(prompt.to_string()), params)
    }

    /// Starts generating any [`Prompt`] on a new thread.
    fn stream(&self, prompt: Prompt, params: GenerateParams) -> TextStream {
        let me = self.clone();
        TextStream::spawn(move |cb| me.complete(&prompt, &params, cb))
    }
}

impl<T: LlmBackend + Clone + Send + 'static> StreamingBackend for T {}

/// The shared end of a [`TextStream`]: the final [`Generation`] once it is known.
type Outcome = Arc<Mutex<Option<Result<Generation>>>>;

/// A stream of text chunks from a generation running on its own thread
/// ([`futures::Stream`] for async code, [`Iterator`] for blocking code). Dropping it
/// cancels the generation at its next token. After the last chunk,
/// [`TextStream::outcome`] gives the finish reason and usage.
pub struct TextStream {
    rx: mpsc::UnboundedReceiver<Result<String>>,
    outcome: Outcome,
}

/// The producing end of a [`TextStream`] (see [`TextStream::channel`]).
#[derive(Debug)]
pub struct TextSink {
    tx: mpsc::UnboundedSender<Result<String>>,
    outcome: Outcome,
}

impl TextSink {
    /// Sends a chunk; `false` when the consumer is gone (cancel the generation).
    pub fn send(&self, s: &str) -> bool {
        self.tx.unbounded_send(Ok(s.to_string())).is_ok()
    }

    /// Whether the consumer has dropped its [`TextStream`].
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Records the result and ends the stream (an error other than cancellation is also
    /// sent as the last item).
    pub fn finish(self, r: Result<Generation>) {
        let err = match &r {
            Err(e) if !matches!(e, RuntimeError::Cancelled) => Some(e.duplicate()),
            _ => None,
        };
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        if let Some(e) = err {
            let _ = self.tx.unbounded_send(Err(e));
        }
    }
}

impl TextStream {
    /// A connected sink and stream, for producers other than a thread per generation
    /// (the batch scheduler).
    pub fn channel() -> (TextSink, TextStream) {
        let (tx, rx) = mpsc::unbounded();
        let outcome: Outcome = Arc::new(Mutex::new(None));
        (
            TextSink {
                tx,
                outcome: outcome.clone(),
            },
            TextStream { rx, outcome },
        )
    }

    /// Runs `f` (a generation that reports chunks through its callback) on a new thread.
    pub fn spawn<F>(f: F) -> TextStream
    where
        F: FnOnce(&mut dyn FnMut(&str) -> bool) -> Result<Generation> + Send + 'static,
    {
        let (sink, stream) = TextStream::channel();
        std::thread::spawn(move || {
            let r = f(&mut |s: &str| sink.send(s));
            sink.finish(r);
        });
        stream
    }

    /// The finished generation (after the stream has ended; `None` before).
    pub fn outcome(&self) -> Option<Result<Generation>> {
        let g = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|r| match r {
            Ok(g) => Ok(g.clone()),
            Err(e) => Err(e.duplicate()),
        })
    }
}

impl std::fmt::Debug for TextStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextStream").finish_non_exhaustive()
    }
}

impl Stream for TextStream {
    type Item = Result<String>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

impl Iterator for TextStream {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Self::Item> {
        futures::executor::block_on(futures::StreamExt::next(&mut self.rx))
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, RandomState};

    use super::*;

    /// The compiled-constraint cache's key: the same constraint written apart hashes
    /// alike (a schema by its value, not its text); every option, the schema and the
    /// wrapping tell constraints apart.
    #[test]
    fn constraints_hash_by_what_they_compile_to() {
        let s = RandomState::new();
        let schema = |t: &str| JsonSchema::from_str(t).unwrap();
        let c = |t: &str, options: SchemaOptions| OutputConstraint::JsonSchema {
            schema: schema(t),
            options,
        };
        let gen = SchemaOptions::generation();
        let a = c(r#"{"type":"object","required":["a"]}"#, gen.clone());
        let spaced = c(r#"{ "required" : ["a"], "type" : "object" }"#, gen.clone());
        assert_eq!(s.hash_one(&a), s.hash_one(&spaced));
        let strict = c(
            r#"{"type":"object","required":["a"]}"#,
            SchemaOptions {
                strict: true,
                ..gen.clone()
            },
        );
        assert_ne!(s.hash_one(&a), s.hash_one(&strict));
        let other = c(r#"{"type":"object","required":["b"]}"#, gen);
        assert_ne!(s.hash_one(&a), s.hash_one(&other));
        let fenced = OutputConstraint::Wrapped {
            prefix: "```json\n".into(),
            inner: Box::new(a.clone()),
            suffix: "\n```".into(),
        };
        assert_ne!(s.hash_one(&a), s.hash_one(&fenced));
        assert_ne!(
            s.hash_one(OutputConstraint::Gbnf("root ::= \"a\"".into())),
            s.hash_one(OutputConstraint::Regex("root ::= \"a\"".into()))
        );
    }
}
