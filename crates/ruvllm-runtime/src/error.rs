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

/// The runtime's result type.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
