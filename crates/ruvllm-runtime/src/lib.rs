//! The ruvllm runtime: a language model decoding under the constraint engine, and the
//! design record's API around it.
//!
//! * [`api`]: [`LlmBackend`] (`generate`, `generate_json`, `generate_stream` via
//!   [`StreamingBackend`]), [`GenerateParams`], [`JsonModeConfig`], [`OutputConstraint`],
//!   [`Generation`].
//! * [`backends`]: [`LlamaBackend`] (llama.cpp in process, the default) and
//!   [`CandleBackend`] (our own transformer over candle), GGUF models on the CPU with
//!   constrained sampling and jump-forward.
//! * [`batch`]: [`Scheduler`], continuous batching of many generations on one model.
//! * [`model`]: the transformer itself (Llama, Qwen2, Phi-3 layouts) with a per-sequence
//!   KV cache that can be rolled back.
//! * [`http`]: [`HttpBackend`], any OpenAI-compatible server, with validation, repair and
//!   bounded retries (for backends without logit access).
//! * [`sampler`]: mask -> temperature -> top-k -> top-p -> min-p -> seeded draw.
//! * [`tools`]: tool calling: the grammar of calls, prompting, and parsing calls back.
//! * [`chat`]: chat templates from the model file, rendered with `minijinja`.
//! * [`json`]: JSON mode after the fact: [`JsonSchema`], validation with JSON pointers,
//!   [`JsonValidator`] with strict and repair modes.
//!
//! The constraint engine (`ruvllm-engine`) makes constrained output valid by construction;
//! this crate also checks output after the fact, with the `jsonschema` crate as the
//! validator, so that both paths answer to the same definition of "valid".

#![warn(missing_docs)]

pub mod api;
pub mod backend;
pub mod backends;
pub mod batch;
pub mod call_format;
pub mod chat;
mod decode;
pub mod error;
mod front;
pub mod http;
pub mod json;
pub mod kernels;
pub mod model;
mod prefix;
pub mod reasoning;
pub mod sampler;
pub mod tools;

pub use api::{
    FinishReason, GenerateParams, Generation, JsonModeConfig, LlmBackend, OutputConstraint, Prompt,
    ResultPath, StreamingBackend, TextSink, TextStream, Usage,
};
pub use backend::{BatchBackend, BatchSequence, ModelBackend};
pub use backends::candle::{BackendOptions, CandleBackend, Sequence};
pub use backends::llama::{LlamaBackend, LlamaOptions, LlamaSequence};
pub use batch::{Scheduler, SchedulerOptions, SchedulerStats, Serving, Ticket};
pub use chat::{ChatTemplate, Message};
pub use error::{Result, RuntimeError};
pub use http::HttpBackend;
pub use json::{
    repair_json, JsonError, JsonSchema, JsonSchemaError, JsonValidator, Repair, RepairError,
    SchemaViolation, ValidatedJson, ValidationStatus, Violation,
};
pub use model::{BatchWeights, KvCache, LoadOptions, Model, ModelConfig};
pub use sampler::{Sampler, SamplerConfig};
pub use tools::{Tool, ToolCall, ToolCalling, ToolChoice, ToolEvent, ToolParser};
