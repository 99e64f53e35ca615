//! # ruvllm-engine: exact grammar-constrained decoding
//!
//! At each decoding step a language model scores every token of its vocabulary. To make its
//! output follow a grammar, the runtime asks this engine for the **mask** of tokens that keep
//! the output a prefix of some sentence of the grammar, samples among those, and commits the
//! chosen token. The contract is exactness: a token is in the mask if and only if committing
//! it keeps the output a viable prefix, and EOS is in the mask exactly when the output is a
//! complete sentence.
//!
//! ```text
//! GBNF / regex / choices / built-ins ──► Grammar (IR) ──► CompiledGrammar ─┐  (any vocabulary)
//!                                                                          ├─► Constraint ─► Matcher
//! tokenizer.json / GGUF / tiktoken  ──► Vocabulary ──► Engine (caches) ────┘    (shared)     (per generation)
//! ```
//!
//! * [`Grammar`]: the IR every front end produces ([`Grammar::from_gbnf`],
//!   [`Grammar::from_regex`], [`Grammar::from_choices`], [`Grammar::builtin`],
//!   [`schema::schema_to_grammar`]); [`Source`] names each kind of input and is the one
//!   place that turns any of them into a grammar ([`Source::to_grammar`]).
//! * [`Engine`]: the caller-owned caches of one vocabulary (lexeme DFAs, token tables),
//!   bounded by [`EngineConfig`]; create one per vocabulary and share it (see the `engine`
//!   module docs: what is shared between threads, what is per matcher).
//! * [`CompiledGrammar`]: lexeme DFAs plus an Earley grammar; depends on no vocabulary
//!   ([`Engine::compile`], or [`CompiledGrammar::new`] without shared caches).
//! * [`Vocabulary`]: token bytes, specials, EOS and the token trie (see [`vocab`]).
//! * [`Constraint`]: a compiled grammar bound to an engine's vocabulary ([`Engine::bind`]),
//!   whose token tables are built lazily and shared by all matchers and threads.
//! * [`Matcher`]: one generation: [`Matcher::compute_mask`], [`Matcher::commit_token`],
//!   [`Matcher::rollback`], [`Matcher::forced_bytes`], [`Matcher::forced_tokens`], clone to
//!   fork.
//!
//! Every cost that input controls is bounded by [`Limits`]; exceeding a limit is an error
//! naming the limit, never a hang and never an approximate mask.
//!
//! ```
//! use std::sync::Arc;
//! use ruvllm_engine::{Engine, Grammar, Limits, Matcher, Vocabulary};
//!
//! // A toy vocabulary: token i is the i-th string; token 4 is EOS.
//! let toks: Vec<Vec<u8>> = ["a", "b", "ab", "c", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
//! let vocab = Vocabulary::new("toy", toks, vec![false, false, false, false, true], vec![4]).unwrap();
//! let engine = Engine::new(Arc::new(vocab)); // one per vocabulary, shared
//! let limits = Limits::default();
//! let g = Grammar::from_gbnf("root ::= \"a\"+ \"b\"", &limits).unwrap();
//! let compiled = engine.compile(&g, &limits).unwrap(); // no vocabulary in here
//! let c = engine.bind(compiled, &limits);
//! let mut m = Matcher::new(&c).unwrap();
//! let mut mask = vec![0u32; 1];
//! m.compute_mask(&mut mask).unwrap();
//! assert_eq!(mask[0], 0b00101); // "a" and "ab"
//! m.commit_token(2).unwrap();   // "ab"
//! assert!(m.is_accepting());
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub(crate) mod byteset;
pub(crate) mod compile;
pub mod cpu;
mod deadline;
mod error;
pub mod grammar;
mod handle;
mod matching;
mod parse;
pub mod schema;
mod source;
mod tables;
mod util;
pub mod vocab;

pub use byteset::ByteSet;
pub use compile::{CompiledGrammar, GrammarStats};
pub use error::{GrammarError, LimitKind, MatchError, VocabError};
pub use grammar::{Builtin, Expr, Grammar, GrammarWarning, KeyComplement};
pub use handle::constraint::Constraint;
pub use handle::engine::{CacheUsage, Engine, EngineConfig};
pub use matching::budget::BudgetMask;
pub use matching::matcher::{CheckResult, Matcher};
pub use parse::facts::Completion;
pub use source::{Source, SourceError};
pub use vocab::{TokenEncoder, Vocabulary};

/// Limits on every input-driven cost. The defaults accept any reasonable grammar and stop
/// hostile ones within a fraction of a second and a few hundred MB.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Grammar or regex source size in bytes (default 1 MiB).
    pub max_grammar_bytes: usize,
    /// Nesting of groups and postfix operators (default 200).
    pub max_nesting: usize,
    /// Nesting of JSON Schema sub-schemas (default 64).
    pub max_schema_depth: usize,
    /// Rules, in the source and after compiling (default 100,000).
    pub max_rules: usize,
    /// Expression nodes in the source (default 1,000,000).
    pub max_grammar_nodes: usize,
    /// Largest repetition bound `{m,n}` (default 10,000).
    pub max_repeat: usize,
    /// Symbols after expanding repetitions (default 4,000,000).
    pub max_compiled_symbols: usize,
    /// Size (roughly, regex nodes) up to which a non-recursive rule is inlined into a
    /// lexeme (default 16,384); larger regular parts are split into several lexemes.
    pub max_inline_weight: usize,
    /// Nesting depth up to which rules are inlined into one lexeme (default 64); deeper
    /// chains of rules become several lexemes.
    pub max_inline_depth: usize,
    /// States of one lexeme DFA before it is split structurally (default 20,000).
    pub max_lexeme_states: usize,
    /// Bytes of NFA/DFA construction memory for one lexeme (default 4 MiB).
    pub max_dfa_bytes: usize,
    /// DFA states built over the whole grammar; an attempt that hits a per-lexeme limit
    /// counts as `max_lexeme_states` (default 100,000).
    pub max_total_dfa_states: usize,
    /// Wall-clock time for compiling one grammar or schema (default 1 s; the slowest
    /// MaskBench schema compiles in about 0.4 s). Checked before each DFA construction
    /// and every 64 states inside one.
    pub max_compile_time: std::time::Duration,
    /// Distinct lexemes (default 200,000).
    pub max_lexemes: usize,
    /// Parser items in one step; exceeded = [`MatchError::Budget`] (default 200,000).
    pub max_parser_items: usize,
    /// Longest forced text computed at once (default 4,096 bytes).
    pub max_forced_bytes: usize,
    /// Wall-clock time for one mask; exceeded = [`MatchError::MaskTime`] (default 500 ms;
    /// the slowest MaskBench mask, a first visit, takes about 50 ms). Bounds first-use
    /// token tables, which [`Limits::max_parser_items`] does not: a grammar with thousands
    /// of distinct lexemes alive at once needs one trie walk per lexeme state.
    pub max_mask_time: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_grammar_bytes: 1 << 20,
            max_nesting: 200,
            max_schema_depth: 64,
            max_rules: 100_000,
            max_grammar_nodes: 1_000_000,
            max_repeat: 10_000,
            max_compiled_symbols: 4_000_000,
            max_inline_weight: 16_384,
            max_inline_depth: 64,
            max_lexeme_states: 20_000,
            max_dfa_bytes: 4 << 20,
            max_total_dfa_states: 100_000,
            max_compile_time: std::time::Duration::from_secs(1),
            max_lexemes: 200_000,
            max_parser_items: 200_000,
            max_forced_bytes: 4096,
            max_mask_time: std::time::Duration::from_millis(500),
        }
    }
}
