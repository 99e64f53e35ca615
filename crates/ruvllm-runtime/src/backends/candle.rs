//! [`CandleBackend`]: a GGUF model on the CPU, computed by our own transformer over
//! candle's tensors, decoding under the constraint engine (the per-step work is the
//! crate-private `decode` module's, shared with the llama.cpp backend).
//!
//! * Each generation has its own [`KvCache`] (a [`Sequence`] owns it), so clones of the
//!   backend generate concurrently and [`crate::Scheduler`] batches their passes.
//! * The prefix cache keeps the KV state of recent prompts; a later prompt with the same
//!   beginning copies it instead of recomputing it.
//! * Compiled constraints are cached per backend (by schema, grammar, regex or choice
//!   text), so repeated request shapes skip compilation.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ruvllm_engine::{Constraint, Engine, Limits, Vocabulary};

use crate::api::{GenerateParams, Generation, LlmBackend, OutputConstraint, Prompt, Usage};
use crate::call_format::CallFormat;
use crate::decode::Decoder;
use crate::error::Result;
use crate::front::Front;
pub use crate::front::{BackendOptions, DEFAULT_CONSTRAINT_CACHE_BYTES};
use crate::model::{KvCache, Model};
use crate::prefix::{worth_storing, PrefixLru};
use crate::reasoning::ReasoningMarkers;

/// Most tokens one forward pass of a single generation reads.
const PASS_TOKENS: usize = 512;

/// Prompt KV caches kept for reuse: a later prompt starting with the same tokens copies
/// the cached positions instead of recomputing them. Lookup is the longest common prefix
/// over the entries ([`PrefixLru`]); eviction is least recently used, by bytes.
#[derive(Default)]
struct PrefixStore {
    lru: PrefixLru<Arc<KvCache>>,
    bytes: usize,
    max_bytes: usize,
}

impl PrefixStore {
    fn insert(&mut self, tokens: Vec<u32>, cache: KvCache) {
        let size = cache.memory();
        if size > self.max_bytes || self.lru.holds(&tokens) {
            return;
        }
        while self.bytes + size > self.max_bytes {
            let Some(e) = self.lru.pop_least_recent() else {
                break;
            };
            self.bytes -= e.value.memory();
        }
        self.bytes += size;
        self.lru.push(tokens, Arc::new(cache));
    }
}

struct Inner {
    front: Arc<Front>,
    model: Model,
    prefixes: Mutex<PrefixStore>,
}

/// A local GGUF model with constrained decoding. Cheap to clone (shared weights); each
/// generation has its own KV cache, so clones may generate concurrently.
#[derive(Clone)]
pub struct CandleBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CandleBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleBackend")
            .field("name", &self.inner.front.name)
            .field("model", &self.inner.model)
            .finish()
    }
}

/// Bytes of prompt KV caches kept for reuse when [`BackendOptions::prefix_cache_bytes`]
/// is `None`.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

impl CandleBackend {
    /// Loads a GGUF model: weights, tokenizer, chat template and EOS ids from its metadata.
    /// Cost: reading the file plus re-quantization (about a second for the default model).
    pub fn load(path: &Path, opts: &BackendOptions) -> Result<CandleBackend> {
        // One read of the header feeds the vocabulary (its metadata) and the model (its
        // tensor index, then the weights from the same open file).
        let (content, mut file) = crate::model::read_gguf(path)?;
        let gv = crate::model::gguf_metadata(&content);
        let model = Model::from_content(&content, &mut file, &opts.load)?;
        drop(content);
        let front = Front::new(path, &gv, model.config().clone(), opts, None)?;
        Ok(CandleBackend {
            inner: Arc::new(Inner {
                front: Arc::new(front),
                model,
                prefixes: Mutex::new(PrefixStore {
                    max_bytes: opts
                        .prefix_cache_bytes
                        .unwrap_or(DEFAULT_PREFIX_CACHE_BYTES),
                    ..Default::default()
                }),
            }),
        })
    }

    fn front(&self) -> &Front {
        &self.inner.front
    }

    /// The model's name (its file stem).
    pub fn name(&self) -> &str {
        &self.front().name
    }

    /// The vocabulary the constraints are compiled against.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        self.front().engine.vocab()
    }

    /// The engine whose caches every constraint of this backend shares.
    pub fn engine(&self) -> &Engine {
        &self.front().engine
    }

    /// The chat template's Jinja source (the GGUF's, else ChatML).
    pub fn chat_template(&self) -> &str {
        self.front().template.source()
    }

    /// The weights.
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    /// The prompt as text: the chat template applied (except for [`Prompt::Raw`]), with
    /// reasoning left at the template's default.
    pub fn render(&self, prompt: &Prompt) -> Result<String> {
        self.render_with(prompt, None)
    }

    /// The prompt as text, with reasoning on or off (`think`; `None`: the template's
    /// default) where the template has a reasoning section: on, the prompt ends inside it;
    /// off, after an empty one (see [`crate::reasoning`]). Cost: rendering the template.
    pub fn render_with(&self, prompt: &Prompt, think: Option<bool>) -> Result<String> {
        self.front().render_with(prompt, think)
    }

    /// The tool-call syntax this model writes (from its chat template's family; see
    /// [`crate::call_format`]).
    pub fn call_format(&self) -> CallFormat {
        self.front().call_format
    }

    /// The reasoning markers a generation of `prompt` under `params` uses: the template's,
    /// for chat prompts, unless `params.thinking` turns reasoning off. Its output then
    /// begins inside the reasoning section. Cost: O(1).
    pub fn reasoning_for(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
    ) -> Option<&ReasoningMarkers> {
        self.front().reasoning_for(prompt, params)
    }

    /// Encodes prompt text to ids (special-token markers in the text become their ids; BOS
    /// is prepended when the model wants it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.front().encode(text)
    }

    /// Compiles (or fetches from the cache) the engine constraint for `c`; `None` when `c`
    /// constrains nothing (tools with `tool_choice: none` and no text format).
    pub fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>> {
        self.front().constraint(c)
    }

    /// The engine limits constraints are compiled under.
    pub fn limits(&self) -> &Limits {
        &self.front().limits
    }

    /// Compiled constraints cached now and the bytes of their token tables. Cost: one
    /// pass over the cache.
    pub fn constraint_cache_usage(&self) -> (usize, usize) {
        self.front().constraint_cache_usage()
    }

    /// Starts a generation without running the model: validates the parameters, renders
    /// and encodes the prompt, compiles (or fetches) the constraint, and looks up the
    /// prefix cache. Errors here are the caller's (bad parameters, a bad schema, a prompt
    /// over the context). Cost: prompt tokenization plus constraint compilation on a
    /// cache miss.
    pub fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Sequence> {
        let ctx = self.inner.model.config().context_length;
        let mut dec = Decoder::begin(&self.inner.front, prompt, params, ctx)?;
        let ids = dec.prompt_ids().unwrap_or_default().to_vec();
        let reuse = self.reuse_prefix(&ids);
        let cached = reuse.as_ref().map_or(0, |r| r.1);
        let store_prompt = worth_storing(ids.len(), cached).then_some(ids);
        dec.skip_cached(cached);
        Ok(Sequence {
            dec,
            backend: self.clone(),
            cache: self.inner.model.new_cache(),
            reuse,
            store_prompt,
        })
    }

    /// The stored cache sharing the longest prefix with `ids` and that prefix's length
    /// (always leaving at least one token to feed, whose logits start the generation).
    fn reuse_prefix(&self, ids: &[u32]) -> Option<(Arc<KvCache>, usize)> {
        if ids.is_empty() {
            return None;
        }
        self.inner
            .prefixes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lru
            .best(&ids[..ids.len() - 1])
            .map(|(c, n)| (c.clone(), n))
    }

    /// Stores the keys and values of a prompt that has just been read (`cache` holds it
    /// and maybe forced tokens after it).
    fn store_prefix(&self, ids: Vec<u32>, cache: &KvCache) {
        if self
            .inner
            .prefixes
            .lock()
            .map(|p| p.max_bytes == 0)
            .unwrap_or(true)
        {
            return;
        }
        if let Ok(copy) = self.inner.model.copy_prefix(cache, ids.len()) {
            self.inner
                .prefixes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(ids, copy);
        }
    }
}

/// One generation in progress on a [`CandleBackend`]: its decoding state and its own KV
/// cache. [`CandleBackend::complete`] drives one; [`crate::Scheduler`] drives many in
/// lockstep, batching their forward passes.
///
/// The cycle is [`Sequence::prepare`] (jump-forward, end checks; says whether the model
/// must run), a forward pass over [`Sequence::feed`], then [`Sequence::advance`] with the
/// logits (mask, sample, commit, emit), until one of them reports the end; then
/// [`Sequence::finish`].
pub struct Sequence {
    dec: Decoder,
    backend: CandleBackend,
    cache: KvCache,
    /// The prompt, to store in the prefix cache once it has been read (`None`: do not).
    store_prompt: Option<Vec<u32>>,
    /// A cached prompt prefix to copy into `cache` when the sequence first runs (so that
    /// queued sequences hold no KV memory).
    reuse: Option<(Arc<KvCache>, usize)>,
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.dec.fmt(f)
    }
}

impl Sequence {
    /// Tokens the model must read next (the prompt at first, then the last sampled token
    /// plus any forced ones).
    pub fn feed(&self) -> &[u32] {
        self.dec.feed()
    }

    /// The KV cache and the tokens to feed, for a batched forward pass.
    pub fn feed_and_cache(&mut self) -> (&[u32], &mut KvCache) {
        (self.dec.feed(), &mut self.cache)
    }

    /// How many feed tokens the next forward pass should read, at most `cap` (see
    /// [`crate::BatchSequence::pass_len`]).
    pub fn pass_len(&self, cap: usize) -> usize {
        self.dec.pass_len(cap)
    }

    /// Marks the first `n` feed tokens as read (a prompt fed in passes); the logits of a
    /// partial feed are not used.
    pub fn consumed(&mut self, n: usize) {
        self.dec.consumed(n)
    }

    /// Counters so far.
    pub fn usage(&self) -> &Usage {
        self.dec.usage()
    }

    /// Applies forced text (jump-forward) and the end checks. Returns `Ok(true)` when the
    /// model must run on [`Sequence::feed`], `Ok(false)` when the generation is over.
    /// Cost: the engine's forced-token and end checks (microseconds), and copying a
    /// cached prompt prefix on the first call.
    pub fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        if let Some((src, n)) = self.reuse.take() {
            self.cache = self.backend.inner.model.copy_prefix(&src, n)?;
        }
        self.dec.prepare(on_text)
    }

    /// Takes the logits of the last fed token: masks, samples, commits and emits the next
    /// token. Returns `Ok(true)` to go on, `Ok(false)` at the end. Cost: one mask and one
    /// sampling pass over the vocabulary (and storing the prompt's KV state after the
    /// prompt's pass).
    pub fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        if !self.dec.prompt_read() {
            if let Some(ids) = self.store_prompt.take() {
                self.backend.store_prefix(ids, &self.cache);
            }
        }
        self.dec.advance(logits, on_text)
    }

    /// Ends the generation: sends what was held back, validates JSON mode output, and
    /// returns the result.
    pub fn finish(self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation> {
        self.dec.finish(on_text)
    }
}

impl LlmBackend for CandleBackend {
    fn complete(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let mut seq = self.start(prompt, params)?;
        let mut ready = seq.prepare(on_text)?;
        while ready {
            let n = seq.pass_len(PASS_TOKENS);
            let (feed, cache) = seq.feed_and_cache();
            let full = n == feed.len();
            let mut logits = self.inner.model.forward(&feed[..n], cache)?;
            if !full {
                seq.consumed(n);
                continue;
            }
            ready = seq.advance(&mut logits, on_text)? && seq.prepare(on_text)?;
        }
        seq.finish(on_text)
    }
}

crate::front::model_backend_via_front!(CandleBackend);

impl crate::backend::BatchBackend for CandleBackend {
    type Sequence = Sequence;

    fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Sequence> {
        CandleBackend::start(self, prompt, params)
    }

    fn forward(&self, batch: &mut [(&mut Sequence, usize)]) -> Result<Vec<Vec<f32>>> {
        let mut feeds: Vec<(&[u32], &mut KvCache)> = batch
            .iter_mut()
            .map(|(s, n)| {
                let (feed, cache) = s.feed_and_cache();
                (&feed[..*n], cache)
            })
            .collect();
        self.inner.model.forward_batch(&mut feeds)
    }
}

impl crate::backend::BatchSequence for Sequence {
    fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        Sequence::prepare(self, on_text)
    }
    fn feed_len(&self) -> usize {
        self.feed().len()
    }
    fn pass_len(&self, cap: usize) -> usize {
        Sequence::pass_len(self, cap)
    }
    fn consumed(&mut self, n: usize) {
        Sequence::consumed(self, n)
    }
    fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        Sequence::advance(self, logits, on_text)
    }
    fn finish(self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation> {
        Sequence::finish(self, on_text)
    }
    fn usage(&self) -> &Usage {
        Sequence::usage(self)
    }
}
