//! Typed errors. Every error that comes from user input says what is wrong and where
//! (line and column for grammar text, byte offset for regexes, byte position for parsing).
//!
//! Owns: the error types and `LimitKind`. Uses: nothing of the crate.

use thiserror::Error;

/// An error in a grammar, a regex or a choice list, or a budget that compiling it exceeded.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum GrammarError {
    /// The text is not valid GBNF at `line:col` (1-based).
    #[error("GBNF syntax error at {line}:{col}: {msg}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column in characters.
        col: usize,
        /// What was expected or found.
        msg: String,
    },
    /// A rule is referenced but never defined.
    #[error("undefined rule `{name}` referenced at {line}:{col}")]
    UndefinedRule {
        /// The rule name.
        name: String,
        /// 1-based line of the first reference.
        line: usize,
        /// 1-based column of the first reference.
        col: usize,
    },
    /// A rule is defined twice.
    #[error("rule `{name}` is defined twice (second definition at {line}:{col})")]
    DuplicateRule {
        /// The rule name.
        name: String,
        /// 1-based line of the second definition.
        line: usize,
        /// 1-based column of the second definition.
        col: usize,
    },
    /// The grammar has no rule named `root`.
    #[error("the grammar has no `root` rule")]
    NoRoot,
    /// No finite string satisfies the grammar (for example `root ::= "a" root`).
    #[error("the grammar's language is empty: rule `{rule}` can never complete")]
    EmptyLanguage {
        /// The start rule.
        rule: String,
    },
    /// A regex could not be parsed or uses an unsupported feature.
    #[error("regex error at byte {offset}: {msg}")]
    Regex {
        /// Byte offset into the pattern.
        offset: usize,
        /// What is wrong.
        msg: String,
    },
    /// A feature that is valid input but not supported by this engine.
    #[error("unsupported at {line}:{col}: {msg}")]
    Unsupported {
        /// 1-based line (0 when not applicable).
        line: usize,
        /// 1-based column (0 when not applicable).
        col: usize,
        /// What is unsupported.
        msg: String,
    },
    /// A configured limit was exceeded while reading or compiling the grammar.
    #[error("grammar limit exceeded: {what} is {value}, the limit is {limit} ({kind})")]
    Limit {
        /// Which quantity.
        what: &'static str,
        /// Its value (or the value when it was stopped).
        value: usize,
        /// The limit in force.
        limit: usize,
        /// Which option raises it.
        kind: LimitKind,
    },
    /// An invalid argument (empty choice list, bad built-in name...).
    #[error("{0}")]
    Invalid(String),
}

/// Which [`crate::Limits`] field a limit error is about, so that a program can map it to
/// its own setting (the server and the CLI name their flags). Displays as
/// `Limits::field`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// [`crate::Limits::max_grammar_bytes`].
    GrammarBytes,
    /// [`crate::Limits::max_rules`].
    Rules,
    /// [`crate::Limits::max_grammar_nodes`].
    GrammarNodes,
    /// [`crate::Limits::max_nesting`].
    Nesting,
    /// [`crate::Limits::max_repeat`].
    Repeat,
    /// [`crate::Limits::max_schema_depth`].
    SchemaDepth,
    /// [`crate::Limits::max_compile_time`].
    CompileTime,
    /// [`crate::Limits::max_compiled_symbols`].
    CompiledSymbols,
    /// [`crate::Limits::max_lexeme_states`].
    LexemeStates,
    /// [`crate::Limits::max_total_dfa_states`].
    TotalDfaStates,
    /// [`crate::Limits::max_lexemes`].
    Lexemes,
}

impl LimitKind {
    /// Every kind.
    pub const ALL: &'static [LimitKind] = &[
        LimitKind::GrammarBytes,
        LimitKind::Rules,
        LimitKind::GrammarNodes,
        LimitKind::Nesting,
        LimitKind::Repeat,
        LimitKind::SchemaDepth,
        LimitKind::CompileTime,
        LimitKind::CompiledSymbols,
        LimitKind::LexemeStates,
        LimitKind::TotalDfaStates,
        LimitKind::Lexemes,
    ];

    /// The [`crate::Limits`] field's name (`max_rules`).
    pub fn field(self) -> &'static str {
        match self {
            LimitKind::GrammarBytes => "max_grammar_bytes",
            LimitKind::Rules => "max_rules",
            LimitKind::GrammarNodes => "max_grammar_nodes",
            LimitKind::Nesting => "max_nesting",
            LimitKind::Repeat => "max_repeat",
            LimitKind::SchemaDepth => "max_schema_depth",
            LimitKind::CompileTime => "max_compile_time",
            LimitKind::CompiledSymbols => "max_compiled_symbols",
            LimitKind::LexemeStates => "max_lexeme_states",
            LimitKind::TotalDfaStates => "max_total_dfa_states",
            LimitKind::Lexemes => "max_lexemes",
        }
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Limits::{}", self.field())
    }
}

/// An error while loading a vocabulary.
#[derive(Debug, Error)]
pub enum VocabError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tokenizer.json could not be parsed.
    #[error("invalid tokenizer.json: {0}")]
    TokenizerJson(String),
    /// The GGUF file is malformed or lacks tokenizer metadata.
    #[error("invalid GGUF at byte {offset}: {msg}")]
    Gguf {
        /// Byte offset in the file.
        offset: u64,
        /// What is wrong.
        msg: String,
    },
    /// A tiktoken rank file line is malformed.
    #[error("invalid tiktoken file at line {line}: {msg}")]
    Tiktoken {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// The vocabulary is unusable (no tokens, duplicate ids...).
    #[error("invalid vocabulary: {0}")]
    Invalid(String),
}

/// An error while matching tokens against a constraint.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum MatchError {
    /// The token is not allowed here; the matcher state is unchanged.
    #[error("token {token} ({text:?}) is not allowed at byte {position}")]
    TokenRejected {
        /// The token id.
        token: u32,
        /// Its text (lossy).
        text: String,
        /// Output byte offset where it was refused.
        position: usize,
    },
    /// The token id is outside the vocabulary.
    #[error("token id {0} is outside the vocabulary")]
    UnknownToken(u32),
    /// The mask buffer is too small for the vocabulary.
    #[error("mask buffer has {got} words, {need} are needed")]
    MaskTooSmall {
        /// Words provided.
        got: usize,
        /// Words needed.
        need: usize,
    },
    /// Rolling back more tokens than were committed.
    #[error("cannot roll back {requested} tokens, only {available} committed")]
    Rollback {
        /// Tokens asked for.
        requested: usize,
        /// Tokens committed.
        available: usize,
    },
    /// The generation already ended with EOS.
    #[error("the output is already finished")]
    Finished,
    /// A parser budget (items per step) was exceeded; no mask is produced rather than a wrong one.
    #[error("parser budget exceeded: {what} reached {value} (limit {limit})")]
    Budget {
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The limit.
        limit: usize,
    },
    /// One mask took longer than [`crate::Limits::max_mask_time`]; no mask is produced
    /// rather than an approximate one. The matcher is left as it was before the call.
    #[error("mask time budget exceeded: one mask took over {limit_ms} ms")]
    MaskTime {
        /// The budget in milliseconds.
        limit_ms: u64,
    },
    /// An internal consistency check failed (a bug: please report it with the grammar).
    #[error("internal error: {what}")]
    Internal {
        /// What disagreed.
        what: &'static str,
    },
    /// Forced-token computation needs a tokenizer that can encode text.
    #[error("this vocabulary has no encoder; forced tokens need one")]
    NoEncoder,
}
