//! The runtime's error type.

use ruvllm_engine::schema::SchemaError;
use ruvllm_engine::{GrammarError, MatchError, VocabError};

use crate::json::{JsonError, JsonSchemaError};

/// Why a generation (or loading a model) failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The model file is unusable, or the tensor library failed.
    #[error("model: {0}")]
    Model(String),
    /// The tokenizer could not be built or failed to encode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template does not compile or does not render.
    #[error("chat template: {0}")]
    Template(String),
    /// A grammar, regex or choice list is invalid or over a limit.
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    /// A JSON Schema cannot be compiled (the keyword and pointer are in the message).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A JSON Schema is not a valid schema.
    #[error(transparent)]
    JsonSchema(#[from] JsonSchemaError),
    /// The vocabulary could not be read.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// The constraint engine refused a step (a budget, or an internal inconsistency).
    #[error(transparent)]
    Match(#[from] MatchError),
    /// The output is not valid JSON or does not satisfy the schema (strict mode).
    #[error(transparent)]
    Json(#[from] JsonError),
    /// A parameter is out of range or parameters contradict each other.
    #[error("invalid parameter `{param}`: {msg}")]
    Params {
        /// The parameter's name.
        param: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// A tool's parameter schema does not compile.
    #[error("tool {name:?} (tools[{index}]) parameters: {source}")]
    ToolSchema {
        /// The tool's index in the request's list.
        index: usize,
        /// The tool's name.
        name: String,
        /// Why.
        source: SchemaError,
    },
    /// The prompt is longer than the configured budget
    /// ([`crate::BackendOptions::max_prompt_tokens`]).
    #[error("the prompt is {}{tokens} tokens, the limit is {limit} (--max-prompt-tokens)", if *.at_least { "at least " } else { "" })]
    PromptTooLong {
        /// Prompt tokens (a lower bound when `at_least`).
        tokens: usize,
        /// Whether the prompt was refused before tokenizing, from its length in bytes.
        at_least: bool,
        /// The limit.
        limit: usize,
    },
    /// The prompt plus the output would exceed the model's context.
    #[error("context full: {needed} positions needed, the model allows {limit}")]
    ContextFull {
        /// Positions needed.
        needed: usize,
        /// The limit.
        limit: usize,
    },
    /// An HTTP backend failed (connection, status, or an unusable answer).
    #[error("http backend: {0}")]
    Http(String),
    /// The scheduler is full (every running and queued place is taken); retry later.
    #[error("busy: {limit} generations are already running or queued")]
    Busy {
        /// Running plus queued places.
        limit: usize,
    },
    /// The consumer of a stream went away.
    #[error("cancelled")]
    Cancelled,
}

/// A source's error keeps its kind: a schema error or a grammar error.
impl From<ruvllm_engine::SourceError> for RuntimeError {
    fn from(e: ruvllm_engine::SourceError) -> Self {
        match e {
            ruvllm_engine::SourceError::Schema(e) => RuntimeError::Schema(e),
            ruvllm_engine::SourceError::Grammar(e) => RuntimeError::Grammar(e),
        }
    }
}

impl RuntimeError {
    /// A copy of this error with its variant kept (an I/O error keeps its kind and
    /// message), so that a generation's outcome can be read more than once and a server
    /// still tells a budget refusal from a model failure. Cost: clones the error's data.
    pub fn duplicate(&self) -> RuntimeError {
        use RuntimeError as E;
        match self {
            E::Io { path, source } => E::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            E::Model(m) => E::Model(m.clone()),
            E::Tokenizer(m) => E::Tokenizer(m.clone()),
            E::Template(m) => E::Template(m.clone()),
            E::Grammar(e) => E::Grammar(e.clone()),
            E::Schema(e) => E::Schema(e.clone()),
            E::JsonSchema(e) => E::JsonSchema(e.clone()),
            E::Vocab(e) => E::Model(e.to_string()), // load-time only; not Clone
            E::Match(e) => E::Match(e.clone()),
            E::Json(e) => E::Json(e.clone()),
            E::Params { param, msg } => E::Params {
                param,
                msg: msg.clone(),
            },
            E::ToolSchema {
                index,
                name,
                source,
            } => E::ToolSchema {
                index: *index,
                name: name.clone(),
                source: source.clone(),
            },
            E::PromptTooLong {
                tokens,
                at_least,
                limit,
            } => E::PromptTooLong {
                tokens: *tokens,
                at_least: *at_least,
                limit: *limit,
            },
            E::ContextFull { needed, limit } => E::ContextFull {
                needed: *needed,
                limit: *limit,
            },
            E::Http(m) => E::Http(m.clone()),
            E::Busy { limit } => E::Busy { limit: *limit },
            E::Cancelled => E::Cancelled,
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
