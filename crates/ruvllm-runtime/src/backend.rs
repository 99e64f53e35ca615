//! The backend traits: what the [`crate::Scheduler`] and a server need of a model, so that
//! both are written once for every backend (candle today; llama.cpp next).
//!
//! * [`ModelBackend`]: what a model is and how it reads a request: its name and shape,
//!   vocabulary and engine, chat template and tool-call format, tokenizer, limits.
//!   Object safe: a server holds a `&dyn ModelBackend`.
//! * [`BatchBackend`]: a [`ModelBackend`] that runs many generations in one forward
//!   pass: it starts a [`BatchSequence`] per request and computes the next-token logits
//!   of a batch of them.
//! * [`BatchSequence`]: one generation between forward passes: what it feeds the model
//!   next, and what it does with the logits (mask, sample, commit, emit).
//!
//! The single-generation API of the design record, [`crate::LlmBackend`], sits beside
//! these: a [`crate::Scheduler`] implements it over any [`BatchBackend`].

use std::sync::Arc;

use ruvllm_engine::{Constraint, Engine, Limits, Vocabulary};

use crate::api::{GenerateParams, Generation, OutputConstraint, Prompt, Usage};
use crate::call_format::CallFormat;
use crate::error::Result;
use crate::model::ModelConfig;
use crate::reasoning::ReasoningMarkers;

/// What a model is and how it reads a request (object safe).
pub trait ModelBackend: Send + Sync {
    /// The model's name (for the APIs' `model` field).
    fn name(&self) -> &str;
    /// The model's shape: architecture, sizes, context length.
    fn model_config(&self) -> &ModelConfig;
    /// The vocabulary constraints are compiled against.
    fn vocab(&self) -> &Arc<Vocabulary>;
    /// The engine whose caches every constraint of this backend shares.
    fn engine(&self) -> &Engine;
    /// The chat template's Jinja source.
    fn chat_template(&self) -> &str;
    /// The prompt text of `prompt`, with the reasoning section on, off, or as the
    /// template's default (`None`).
    fn render_with(&self, prompt: &Prompt, think: Option<bool>) -> Result<String>;
    /// The tool-call syntax of the template's family.
    fn call_format(&self) -> CallFormat;
    /// The reasoning markers a generation of `params` on `prompt` opens with, if any.
    fn reasoning_for(&self, prompt: &Prompt, params: &GenerateParams) -> Option<&ReasoningMarkers>;
    /// Token ids of `text` (no special tokens added).
    fn encode(&self, text: &str) -> Result<Vec<u32>>;
    /// The compiled constraint of `c` (cached), `None` for unconstrained output.
    fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>>;
    /// The engine limits constraints are compiled under.
    fn limits(&self) -> &Limits;
    /// Compiled constraints cached and the bytes of their token tables.
    fn constraint_cache_usage(&self) -> (usize, usize);
}

/// A backend that decodes many generations in one forward pass.
pub trait BatchBackend: ModelBackend + 'static {
    /// One generation in progress.
    type Sequence: BatchSequence;

    /// Starts a generation: renders and tokenizes the prompt, compiles the constraint.
    /// Cost: the constraint's compile when not cached; no forward pass.
    fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Self::Sequence>;

    /// One forward pass over a batch: for each sequence, its next `n` feed tokens
    /// (`n` = the `usize` beside it, at most [`BatchSequence::feed_len`]); returns the
    /// logits after the last of them, one row per sequence, in order.
    fn forward(&self, batch: &mut [(&mut Self::Sequence, usize)]) -> Result<Vec<Vec<f32>>>;
}

/// One generation between forward passes (see [`crate::Scheduler`]).
pub trait BatchSequence: Send + 'static {
    /// Before a pass: applies forced text and end checks; `Ok(false)` when the
    /// generation is over.
    fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool>;
    /// Tokens waiting to be fed.
    fn feed_len(&self) -> usize;
    /// Tokens to feed in the next pass, at most `cap` of a prompt.
    fn pass_len(&self, cap: usize) -> usize;
    /// Marks the first `n` feed tokens as fed (a chunk of a long prompt).
    fn consumed(&mut self, n: usize);
    /// After a pass: masks, samples, commits and emits the next token from `logits`;
    /// `Ok(false)` at the end.
    fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool>;
    /// Ends the generation: the result, with the rest of the text sent to `on_text`.
    fn finish(self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation>;
    /// Token counts and timings so far.
    fn usage(&self) -> &Usage;
}
