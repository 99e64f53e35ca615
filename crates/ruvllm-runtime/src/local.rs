//! [`CandleBackend`]: a GGUF model on the CPU, decoding under the constraint engine.
//!
//! # One decoding step
//!
//! ```text
//! forced text? ──yes──► commit its canonical tokens, one forward pass for all of them
//!      │no
//! mask (engine) ─► logits ─► sampler (mask, temperature, top-k, top-p, min-p, seed)
//!      ─► commit token ─► stop sequence? ─► forward pass for the token
//! ```
//!
//! * **Jump-forward.** When the grammar leaves exactly one way to continue (a key of a
//!   fixed-schema object, `":`, a closing bracket), the engine's `forced_tokens` gives the
//!   canonical tokens of that text minus any tail a longer token could extend; they are
//!   committed without sampling and the model reads them in one batched forward pass.
//! * **Early end.** When the output is complete and the grammar allows nothing more, the
//!   generation ends without asking the model for EOS.
//! * **Stop sequences** are matched on output bytes; text that could be the start of a stop
//!   sequence is held back from the stream until it is known not to be one.
//! * Compiled constraints are cached per backend (by schema, grammar, regex or choice
//!   text), so repeated request shapes skip compilation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ruvllm_engine::{Constraint, Engine, EngineConfig, Limits, Matcher, Vocabulary};

use crate::api::{
    FinishReason, GenerateParams, Generation, LlmBackend, OutputConstraint, Prompt, ResultPath,
    Usage,
};
use crate::call_format::CallFormat;
use crate::chat::{ChatTemplate, Message, CHATML};
use crate::error::{Result, RuntimeError};
use crate::json::ValidationStatus;
use crate::model::{KvCache, LoadOptions, Model};
use crate::reasoning::ReasoningMarkers;
use crate::sampler::{Sampler, PENALTY_WINDOW};
use crate::tools::{inject_tools, Tool};
use serde_json::Value;

/// How to load a [`CandleBackend`].
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// Weight loading options.
    pub load: LoadOptions,
    /// A `tokenizer.json` to use instead of the tokenizer rebuilt from the GGUF metadata.
    pub tokenizer: Option<PathBuf>,
    /// Engine limits for the constraints this backend compiles.
    pub limits: Option<Limits>,
    /// Bytes of prompt KV caches kept for reuse by later prompts with the same prefix
    /// (`None`: 256 MiB; `Some(0)`: off).
    pub prefix_cache_bytes: Option<usize>,
    /// Bytes of compiled constraints (with their token tables) kept for reuse by later
    /// requests with the same constraint (`None`: 256 MiB). Least recently used first out.
    pub constraint_cache_bytes: Option<usize>,
    /// Bounds of the engine's caches of lexemes and token tables, shared by every
    /// constraint this backend compiles (`None`: [`EngineConfig::default`]).
    pub engine: Option<EngineConfig>,
    /// Longest prompt in tokens (`None`: the model's context less one position). A longer
    /// one is refused with [`RuntimeError::PromptTooLong`].
    pub max_prompt_tokens: Option<usize>,
    /// A Jinja chat template to use instead of the model file's (`None`: the file's,
    /// else ChatML).
    pub chat_template: Option<String>,
}

/// Compiled constraints kept for reuse, least recently used evicted first, bounded by
/// entries and by the bytes of their token tables (which grow as masks are computed, so
/// the bound is enforced at each insertion over the tables' current sizes).
#[derive(Default)]
struct ConstraintCache {
    entries: HashMap<String, (Arc<Constraint>, u64)>,
    max_bytes: usize,
    tick: u64,
}

impl ConstraintCache {
    fn get(&mut self, key: &str) -> Option<Arc<Constraint>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|e| {
            e.1 = tick;
            e.0.clone()
        })
    }

    /// Entries and bytes of their token tables now.
    fn usage(&self) -> (usize, usize) {
        let bytes = self.entries.values().map(|e| e.0.table_usage().1).sum();
        (self.entries.len(), bytes)
    }

    fn insert(&mut self, key: String, c: Arc<Constraint>) {
        self.tick += 1;
        self.entries.insert(key, (c, self.tick));
        loop {
            let (n, bytes) = self.usage();
            if n <= 1 || (n <= MAX_CACHED_CONSTRAINTS && bytes <= self.max_bytes) {
                break;
            }
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.1)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
    }
}

/// Most tokens one forward pass of a single generation reads.
const PASS_TOKENS: usize = 512;

/// Prompts shorter than this are not stored in the prefix cache.
const MIN_PREFIX: usize = 32;

/// Prompt KV caches kept for reuse: a later prompt starting with the same tokens copies
/// the cached positions instead of recomputing them (vLLM calls it automatic prefix
/// caching). Lookup is the longest common prefix over the entries; eviction is least
/// recently used, by bytes.
#[derive(Default)]
struct PrefixStore {
    entries: Vec<PrefixEntry>,
    bytes: usize,
    max_bytes: usize,
    tick: u64,
}

struct PrefixEntry {
    tokens: Vec<u32>,
    cache: Arc<KvCache>,
    last_use: u64,
}

impl PrefixStore {
    /// The entry sharing the longest prefix with `ids` (at least [`MIN_PREFIX`]).
    fn best(&mut self, ids: &[u32]) -> Option<(Arc<KvCache>, usize)> {
        self.tick += 1;
        let tick = self.tick;
        let (i, n) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let n = e.tokens.iter().zip(ids).take_while(|(a, b)| a == b).count();
                (i, n)
            })
            .max_by_key(|&(_, n)| n)?;
        if n < MIN_PREFIX {
            return None;
        }
        self.entries[i].last_use = tick;
        Some((self.entries[i].cache.clone(), n))
    }

    fn insert(&mut self, tokens: Vec<u32>, cache: KvCache) {
        let size = cache.memory();
        if size > self.max_bytes || self.entries.iter().any(|e| e.tokens == tokens) {
            return;
        }
        while self.bytes + size > self.max_bytes {
            let Some((i, _)) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_use)
            else {
                break;
            };
            let e = self.entries.swap_remove(i);
            self.bytes -= e.cache.memory();
        }
        self.tick += 1;
        self.bytes += size;
        self.entries.push(PrefixEntry {
            tokens,
            cache: Arc::new(cache),
            last_use: self.tick,
        });
    }
}

struct Inner {
    model: Model,
    tokenizer: tokenizers::Tokenizer,
    /// The engine of the model's vocabulary: every constraint is compiled and bound in
    /// it, so they share lexemes and token tables.
    engine: Engine,
    template: ChatTemplate,
    /// The template's reasoning section, when it has one.
    reasoning: Option<ReasoningMarkers>,
    /// The tool-call syntax of the template's family.
    call_format: CallFormat,
    bos: Option<u32>,
    add_bos: bool,
    eos: Vec<u32>,
    name: String,
    limits: Limits,
    max_prompt_tokens: usize,
    /// The longest token's byte length (a prompt of n bytes has at least n / this tokens).
    max_token_bytes: usize,
    constraints: Mutex<ConstraintCache>,
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
            .field("name", &self.inner.name)
            .field("model", &self.inner.model)
            .finish()
    }
}

const MAX_CACHED_CONSTRAINTS: usize = 64;

/// Bytes of prompt KV caches kept for reuse when [`BackendOptions::prefix_cache_bytes`]
/// is `None`.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

/// Bytes of compiled constraints kept when [`BackendOptions::constraint_cache_bytes`] is
/// `None`.
pub const DEFAULT_CONSTRAINT_CACHE_BYTES: usize = 256 << 20;

impl CandleBackend {
    /// Loads a GGUF model: weights, tokenizer, chat template and EOS ids from its metadata.
    /// Cost: reading the file plus re-quantization (about a second for the default model).
    pub fn load(path: &Path, opts: &BackendOptions) -> Result<CandleBackend> {
        // One read of the header feeds the vocabulary (its metadata) and the model (its
        // tensor index, then the weights from the same open file).
        let (content, mut file) = crate::model::read_gguf(path)?;
        let gv = crate::model::gguf_metadata(&content);
        let (tokenizer, mut vocab) = match &opts.tokenizer {
            Some(tp) => {
                let text = std::fs::read_to_string(tp).map_err(|e| RuntimeError::Io {
                    path: tp.display().to_string(),
                    source: e,
                })?;
                let t: tokenizers::Tokenizer = text
                    .parse()
                    .map_err(|e| RuntimeError::Tokenizer(format!("{}: {e}", tp.display())))?;
                (t, Vocabulary::from_tokenizer_json(&text, None)?)
            }
            None => (gv.to_tokenizer()?, gv.to_vocabulary()?),
        };
        let eos = gv.eos_ids(vocab.len());
        if !eos.is_empty() {
            vocab.set_eos_tokens(eos.clone())?;
        }
        let eos = vocab.eos_tokens().to_vec();
        let token_text = |id: Option<u32>| -> String {
            id.and_then(|i| tokenizer.id_to_token(i))
                .unwrap_or_default()
        };
        let int = |k: &str| gv.get(k).and_then(|v| v.as_int());
        let bos = int("tokenizer.ggml.bos_token_id").map(|x| x as u32);
        let add_bos = matches!(
            gv.get("tokenizer.ggml.add_bos_token"),
            Some(ruvllm_engine::vocab::GgufValue::Bool(true))
        );
        let template_src = match &opts.chat_template {
            Some(t) => t.clone(),
            None => gv.chat_template().unwrap_or(CHATML).to_string(),
        };
        let reasoning = ReasoningMarkers::detect(&template_src);
        let call_format = CallFormat::detect(&template_src);
        // The format's markers must be writable by the grammar, as the single tokens the
        // model was trained on where the tokenizer has them as control tokens.
        let vocab = vocab.with_text_tokens(call_format.marker_texts())?;
        let template = ChatTemplate::new(
            &template_src,
            &token_text(bos),
            &token_text(eos.first().copied()),
        )?;
        let model = Model::from_content(&content, &mut file, &opts.load)?;
        drop(content);
        let ctx = model.config().context_length;
        // Over every token, special ones included (the rendered template writes them as
        // text), so not the trie's depth, which counts ordinary tokens only.
        let max_token_bytes = (0..vocab.len() as u32)
            .map(|t| vocab.token_bytes(t).len())
            .max()
            .unwrap_or(1);
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        Ok(CandleBackend {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                engine: Engine::with_config(
                    Arc::new(vocab),
                    opts.engine.clone().unwrap_or_default(),
                ),
                template,
                reasoning,
                call_format,
                bos,
                add_bos,
                eos,
                name,
                limits: opts.limits.clone().unwrap_or_default(),
                max_prompt_tokens: opts
                    .max_prompt_tokens
                    .unwrap_or(usize::MAX)
                    .min(ctx.saturating_sub(1)),
                max_token_bytes,
                constraints: Mutex::new(ConstraintCache {
                    max_bytes: opts
                        .constraint_cache_bytes
                        .unwrap_or(DEFAULT_CONSTRAINT_CACHE_BYTES),
                    ..Default::default()
                }),
                prefixes: Mutex::new(PrefixStore {
                    max_bytes: opts
                        .prefix_cache_bytes
                        .unwrap_or(DEFAULT_PREFIX_CACHE_BYTES),
                    ..Default::default()
                }),
            }),
        })
    }

    /// The model's name (its file stem).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The vocabulary the constraints are compiled against.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        self.inner.engine.vocab()
    }

    /// The engine whose caches every constraint of this backend shares.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The chat template's Jinja source (the GGUF's, else ChatML).
    pub fn chat_template(&self) -> &str {
        self.inner.template.source()
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
        let t = &self.inner.template;
        let mut text = match prompt {
            Prompt::Raw(t) => return Ok(t.clone()),
            Prompt::User(u) => t.render_with(&[Message::user(u.clone())], None, true, think)?,
            Prompt::Chat { messages, tools } => match tools {
                Some(list) if !t.supports_tools() => {
                    let parsed = list
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(Tool::from_openai)
                        .collect::<Result<Vec<_>>>()?;
                    t.render_with(&inject_tools(messages, &parsed), None, true, think)?
                }
                _ => t.render_with(&arguments_as_objects(messages), tools.as_ref(), true, think)?,
            },
        };
        if let Some(m) = &self.inner.reasoning {
            m.finish_prompt(&mut text, think != Some(false));
        }
        Ok(text)
    }

    /// The tool-call syntax this model writes (from its chat template's family; see
    /// [`crate::call_format`]).
    pub fn call_format(&self) -> CallFormat {
        self.inner.call_format
    }

    /// The reasoning markers a generation of `prompt` under `params` uses: the template's,
    /// for chat prompts, unless `params.thinking` turns reasoning off. Its output then
    /// begins inside the reasoning section. Cost: O(1).
    pub fn reasoning_for(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
    ) -> Option<&ReasoningMarkers> {
        match prompt {
            Prompt::Raw(_) => None,
            _ if params.thinking.enabled == Some(false) => None,
            _ => self.inner.reasoning.as_ref(),
        }
    }

    /// Encodes prompt text to ids (special-token markers in the text become their ids; BOS
    /// is prepended when the model wants it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .tokenizer
            .encode(text, false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        let mut ids = enc.get_ids().to_vec();
        if let (true, Some(b)) = (self.inner.add_bos, self.inner.bos) {
            if ids.first() != Some(&b) {
                ids.insert(0, b);
            }
        }
        Ok(ids)
    }

    /// Compiles (or fetches from the cache) the engine constraint for `c`; `None` when `c`
    /// constrains nothing (tools with `tool_choice: none` and no text format).
    pub fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>> {
        let key = c.cache_key();
        if let Some(hit) = self
            .inner
            .constraints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(Some(hit));
        }
        let limits = &self.inner.limits;
        let Some(g) = c.grammar(limits)? else {
            return Ok(None);
        };
        let cons = self.inner.engine.constraint(&g, limits)?;
        let mut cache = self
            .inner
            .constraints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        cache.insert(key, cons.clone());
        Ok(Some(cons))
    }

    /// The engine limits constraints are compiled under.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Compiled constraints cached now and the bytes of their token tables. Cost: one
    /// pass over the cache.
    pub fn constraint_cache_usage(&self) -> (usize, usize) {
        self.inner
            .constraints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .usage()
    }
}

/// Output bytes and how much of them has been handed to the caller.
struct Emitter {
    out: Vec<u8>,
    sent: usize,
    stop: Vec<String>,
    max_stop: usize,
    /// Under a constraint, a stop sequence ends the output only where the text before it
    /// is complete (else it is ordinary text of the constrained output: a `\n` stop
    /// cannot cut a JSON value in half). Matches that start before `ignored` were found
    /// incomplete.
    constraint: Option<Arc<Constraint>>,
    ignored: usize,
    /// A matcher fed the output up to the last stop match it judged (matches only move
    /// forward, so each byte is read once).
    checker: Option<(Matcher, usize)>,
}

impl Emitter {
    /// Appends bytes; sends what is safe to send. Returns `Ok(true)` when a stop sequence
    /// was completed (the output is cut before it), `Err(Cancelled)` when the consumer
    /// went away.
    fn push(&mut self, bytes: &[u8], on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        self.out.extend_from_slice(bytes);
        loop {
            let from = self.sent.saturating_sub(self.max_stop).max(self.ignored);
            let mut cut = None;
            for s in &self.stop {
                if let Some(i) = find(&self.out[from.min(self.out.len())..], s.as_bytes()) {
                    let at = from + i;
                    cut = Some(cut.map_or(at, |c: usize| c.min(at)));
                }
            }
            let Some(at) = cut else { break };
            if let Some(c) = &self.constraint {
                let (m, fed) = match &mut self.checker {
                    Some((m, fed)) if *fed <= at => (m, fed),
                    slot => {
                        let m = slot.insert((Matcher::new(c)?, 0));
                        (&mut m.0, &mut m.1)
                    }
                };
                let verdict = m.check_bytes(&self.out[*fed..at])?;
                *fed = at;
                if let ruvllm_engine::CheckResult::Rejected { .. } = verdict {
                    // Not where the output is (it never leaves the grammar): start over.
                    self.checker = None;
                }
                if verdict != ruvllm_engine::CheckResult::Accepted {
                    self.ignored = at + 1;
                    continue;
                }
            }
            self.out.truncate(at);
            self.flush(self.out.len(), on_text)?;
            return Ok(true);
        }
        // Hold back a tail that may begin a stop sequence.
        let mut hold = 0;
        for s in &self.stop {
            let s = s.as_bytes();
            for k in (1..s.len()).rev() {
                if k > hold && self.out.ends_with(&s[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        self.flush(self.out.len() - hold, on_text)?;
        Ok(false)
    }

    /// Sends whole UTF-8 characters up to `end`.
    fn flush(&mut self, end: usize, on_text: &mut dyn FnMut(&str) -> bool) -> Result<()> {
        if end <= self.sent {
            return Ok(());
        }
        let chunk = &self.out[self.sent..end];
        let valid = match std::str::from_utf8(chunk) {
            Ok(s) => s,
            Err(e) => {
                // An incomplete character at the end waits; an invalid one is replaced.
                if e.error_len().is_none() {
                    std::str::from_utf8(&chunk[..e.valid_up_to()]).unwrap_or("")
                } else {
                    let s = String::from_utf8_lossy(chunk).into_owned();
                    self.sent = end;
                    return if on_text(&s) {
                        Ok(())
                    } else {
                        Err(RuntimeError::Cancelled)
                    };
                }
            }
        };
        if valid.is_empty() {
            return Ok(());
        }
        self.sent += valid.len();
        if on_text(valid) {
            Ok(())
        } else {
            Err(RuntimeError::Cancelled)
        }
    }

    /// Sends everything left (at the end of the generation). A character cut in half by
    /// the token limit is dropped rather than sent as U+FFFD, which the constraint may
    /// not allow.
    fn finish(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<()> {
        let keep = self.out.len() - incomplete_tail(&self.out);
        self.out.truncate(keep.max(self.sent));
        if self.sent < self.out.len() {
            let s = String::from_utf8_lossy(&self.out[self.sent..]).into_owned();
            self.sent = self.out.len();
            if !on_text(&s) {
                return Err(RuntimeError::Cancelled);
            }
        }
        Ok(())
    }
}

/// Messages for a template that renders tool calls itself: each call's `arguments`, a
/// JSON string on the wire, becomes the object templates expect (`arguments | tojson`
/// in Qwen's, Llama's and Mistral's templates; Hugging Face's convention). Arguments that
/// are not JSON stay strings. Cost: parsing each call's arguments.
fn arguments_as_objects(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(Value::Array(calls)) = &mut m.tool_calls {
                for c in calls.iter_mut() {
                    if let Some(a) = c.pointer_mut("/function/arguments") {
                        if let Some(v) = a.as_str().and_then(|s| serde_json::from_str(s).ok()) {
                            *a = v;
                        }
                    }
                }
            }
            m
        })
        .collect()
}

/// Bytes at the end of `b` that start a UTF-8 character without finishing it (0 to 3).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(4) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if back < need { back } else { 0 };
    }
    0
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One generation in progress: everything the decode loop carries between forward
/// passes. [`CandleBackend::complete`] drives one; [`crate::batch::Scheduler`] drives many
/// in lockstep, batching their forward passes.
///
/// The cycle is [`Sequence::prepare`] (jump-forward, end checks; says whether the model
/// must run), a forward pass over [`Sequence::feed`], then [`Sequence::advance`] with the
/// logits (mask, sample, commit, emit), until one of them reports the end; then
/// [`Sequence::finish`].
pub struct Sequence {
    backend: CandleBackend,
    params: GenerateParams,
    constraint: Option<Arc<Constraint>>,
    matcher: Option<Matcher>,
    sampler: Sampler,
    seed: u64,
    usage: Usage,
    cache: KvCache,
    mask: Vec<u32>,
    em: Emitter,
    finish: FinishReason,
    n_out: usize,
    max_tokens: usize,
    feed: Vec<u32>,
    /// The last tokens, for repetition penalties (empty when none is on).
    recent: std::collections::VecDeque<u32>,
    /// Prompt tokens still at the front of `feed`.
    prompt_left: usize,
    /// The prompt, to store in the prefix cache once it has been read (`None`: do not).
    store_prompt: Option<Vec<u32>>,
    /// A cached prompt prefix to copy into `cache` when the sequence first runs (so that
    /// queued sequences hold no KV memory).
    reuse: Option<(Arc<KvCache>, usize)>,
    /// Budget-aware decoding is on: the output's shortest completion fitted in
    /// `max_tokens` at the start, and every step keeps it so (see
    /// [`GenerateParams::budget_aware`]).
    budget: bool,
    /// The reasoning section the output begins in, while it lasts.
    reason: Option<Reason>,
    t0: Instant,
}

/// A reasoning section in progress (see [`crate::reasoning`]).
struct Reason {
    markers: ReasoningMarkers,
    /// Whether the end marker has not been written yet.
    open: bool,
    /// Reasoning tokens written so far.
    tokens: usize,
    /// Most reasoning tokens before the end marker is forced.
    budget: Option<usize>,
    /// The end marker (and, unconstrained, the separator) as tokens, forced at the budget.
    close: Vec<u32>,
    /// Where in the output to look for the end marker next.
    from: usize,
}

/// Sampled tokens refused in one step (see [`Sequence::advance`]) before the first token
/// of the shortest completion is taken instead.
const MAX_REFUSALS: usize = 8;

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("prompt_tokens", &self.usage.prompt_tokens)
            .field("n_out", &self.n_out)
            .finish_non_exhaustive()
    }
}

impl Sequence {
    /// Tokens the model must read next (the prompt at first, then the last sampled token
    /// plus any forced ones).
    pub fn feed(&self) -> &[u32] {
        &self.feed
    }

    /// The KV cache and the tokens to feed, for a batched forward pass.
    pub fn feed_and_cache(&mut self) -> (&[u32], &mut KvCache) {
        (&self.feed, &mut self.cache)
    }

    /// How many feed tokens the next forward pass should read, at most `cap`. The prompt
    /// is read in passes of at most `cap` tokens, and its **last** token always goes in a
    /// pass of its own (with any forced tokens after it): a prompt read whole and the same
    /// prompt resumed from the prefix cache then compute its final logits identically,
    /// so a seed reproduces its output whatever the cache held. When this is less than
    /// [`Sequence::feed`]'s length, call [`Sequence::consumed`] after the pass (its
    /// logits are not needed); otherwise [`Sequence::advance`].
    pub fn pass_len(&self, cap: usize) -> usize {
        let cap = cap.max(1);
        if self.prompt_left > 1 {
            (self.prompt_left - 1).min(cap)
        } else {
            self.feed.len().min(cap)
        }
    }

    /// Marks the first `n` feed tokens as read (a prompt fed in passes); the logits of a
    /// partial feed are not used.
    pub fn consumed(&mut self, n: usize) {
        let n = n.min(self.feed.len());
        self.feed.drain(..n);
        self.prompt_left = self.prompt_left.saturating_sub(n);
    }

    /// Counters so far.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    fn remember(&mut self, toks: &[u32]) {
        if self.recent.is_empty() {
            return;
        }
        for &t in toks {
            if self.recent.len() == PENALTY_WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back(t);
        }
    }

    fn first(&mut self) {
        if self.usage.first_token_secs == 0.0 {
            self.usage.first_token_secs = self.t0.elapsed().as_secs_f64();
        }
    }

    /// Applies forced text (jump-forward) and the end checks. Returns `Ok(true)` when the
    /// model must run on [`Sequence::feed`], `Ok(false)` when the generation is over.
    /// Cost: the engine's forced-token and end checks (microseconds).
    pub fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        if self.close_reasoning(on_text)? {
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        if let Some((src, n)) = self.reuse.take() {
            self.cache = self.backend.inner.model.copy_prefix(&src, n)?;
        }
        let vocab = self.backend.inner.engine.vocab().clone();
        if let (Some(m), true) = (self.matcher.as_mut(), self.params.jump_forward) {
            let tm = Instant::now();
            let forced = m.forced_tokens()?;
            let mut take = forced.len().min(self.max_tokens - self.n_out);
            for &t in &forced[..take] {
                m.commit_token(t)?;
            }
            if self.budget && take > 0 {
                // Forced tokens count against the budget: keep as many as leave room for
                // a completion (the canonical split of forced text may take more tokens
                // than the shortest completion's).
                let mut held = false;
                loop {
                    let left = self.max_tokens - self.n_out - take;
                    if m.shortest_completion()?.is_some_and(|w| w.len() <= left) || take == 0 {
                        break;
                    }
                    m.rollback(1)?;
                    take -= 1;
                    held = true;
                }
                self.usage.budget_steps += held as usize;
            }
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if take > 0 {
                let bytes: Vec<u8> = forced[..take]
                    .iter()
                    .flat_map(|&t| vocab.token_bytes(t).iter().copied())
                    .collect();
                // Forced text rides along with the tokens the model reads next: the
                // prompt at the start, the last sampled token afterwards. So jump-forward
                // costs no extra pass.
                self.feed.extend_from_slice(&forced[..take]);
                self.remember(&forced[..take]);
                self.n_out += take;
                self.usage.forced_tokens += take;
                self.first();
                if self.em.push(&bytes, on_text)? {
                    self.finish = FinishReason::Stop;
                    return Ok(false);
                }
            }
        }
        if let Some(m) = self.matcher.as_mut() {
            let tm = Instant::now();
            let done = m.is_accepting() && m.next_bytes()?.is_empty();
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if done {
                self.finish = FinishReason::Stop;
                return Ok(false);
            }
        }
        Ok(self.n_out < self.max_tokens)
    }

    /// At the reasoning budget, forces the end marker (its tokens ride along with the next
    /// pass). Returns `Ok(true)` when a stop sequence ended the output. A character cut
    /// in half by the last token is finished first (the marker must follow whole text).
    fn close_reasoning(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        let Some(r) = self.reason.as_mut() else {
            return Ok(false);
        };
        let due = r.open
            && r.budget.is_some_and(|b| r.tokens >= b)
            && incomplete_tail(&self.em.out) == 0
            && self.n_out + r.close.len() <= self.max_tokens;
        if !due {
            return Ok(false);
        }
        r.open = false;
        r.tokens += r.close.len();
        let close = r.close.clone();
        if let Some(m) = self.matcher.as_mut() {
            for &t in &close {
                m.commit_token(t)?;
            }
        }
        let vocab = self.backend.inner.engine.vocab().clone();
        let bytes: Vec<u8> = close
            .iter()
            .flat_map(|&t| vocab.token_bytes(t).iter().copied())
            .collect();
        self.feed.extend_from_slice(&close);
        self.remember(&close);
        self.n_out += close.len();
        self.usage.forced_tokens += close.len();
        self.first();
        self.em.push(&bytes, on_text)
    }

    /// Counts a reasoning token and notices the end marker in the output.
    fn track_reasoning(&mut self) {
        let Some(r) = self.reason.as_mut() else {
            return;
        };
        if !r.open {
            return;
        }
        r.tokens += 1;
        let end = r.markers.end.as_bytes();
        let out = &self.em.out;
        if find(&out[r.from.min(out.len())..], end).is_some() {
            r.open = false;
        } else {
            r.from = out.len().saturating_sub(end.len() - 1);
        }
    }

    /// Takes the logits of the last fed token: masks, samples, commits and emits the next
    /// token. Returns `Ok(true)` to go on, `Ok(false)` at the end. Cost: one mask and one
    /// sampling pass over the vocabulary.
    pub fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        let inner = self.backend.inner.clone();
        let vocab = inner.engine.vocab();
        if self.usage.prompt_secs == 0.0 {
            self.usage.prompt_secs = self.t0.elapsed().as_secs_f64();
            if let Some(ids) = self.store_prompt.take() {
                self.backend.store_prefix(ids, &self.cache);
            }
        } else {
            self.usage.forward_passes += 1;
        }
        self.feed.clear();
        self.prompt_left = 0;
        let n_vocab = vocab.len().min(logits.len());
        let remaining = self.max_tokens - self.n_out;
        let mut tentative = false;
        if let Some(m) = self.matcher.as_mut() {
            let tm = Instant::now();
            if self.budget {
                let info = m.compute_budget_mask(&mut self.mask, remaining)?;
                self.usage.budget_steps += info.narrowed as usize;
                tentative = info.tentative;
                let secs = tm.elapsed().as_secs_f32();
                self.usage.mask_steps.push((secs, info.shortest.is_some()));
            } else {
                m.compute_mask(&mut self.mask)?;
            }
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
        }
        if self.params.ignore_eos && self.matcher.is_none() {
            for (i, l) in logits[..n_vocab].iter_mut().enumerate() {
                if vocab.is_special(i as u32) || inner.eos.contains(&(i as u32)) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        if !self.recent.is_empty() {
            let cfg = self.params.sampler();
            cfg.penalize(&mut logits[..n_vocab], self.recent.make_contiguous());
        }
        let mut refusals = 0;
        let t = loop {
            let allowed = self.matcher.is_some().then_some(&self.mask[..]);
            let t = match self.sampler.sample(&logits[..n_vocab], allowed) {
                Some(t) => t,
                None if self.matcher.is_some() => {
                    return Err(RuntimeError::Model(
                        "the grammar allows no token here (a semantic check closed every \
                         continuation); the output so far cannot be completed"
                            .into(),
                    ))
                }
                None => {
                    return Err(RuntimeError::Model(
                        "the model produced no finite logit".into(),
                    ))
                }
            };
            let Some(m) = self.matcher.as_mut() else {
                break t;
            };
            if inner.eos.contains(&t) {
                break t;
            }
            m.commit_token(t)?;
            if !tentative {
                break t;
            }
            // A token allowed on the syntax alone under a semantic check: keep it only
            // when a completion still fits after it.
            let tm = Instant::now();
            let fits = m
                .shortest_completion()?
                .is_some_and(|w| w.len() < remaining);
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if fits {
                break t;
            }
            m.rollback(1)?;
            self.usage.budget_refusals += 1;
            refusals += 1;
            self.mask[(t >> 5) as usize] &= !(1 << (t & 31));
            if refusals >= MAX_REFUSALS {
                // The first token of the shortest completion always fits.
                let w = m.shortest_completion()?.ok_or_else(|| {
                    RuntimeError::Model("no completion fits in the tokens left".into())
                })?;
                let Some(&first) = w.tokens().first() else {
                    return Err(RuntimeError::Model(
                        "no completion fits in the tokens left".into(),
                    ));
                };
                m.commit_token(first)?;
                break first;
            }
        };
        if inner.eos.contains(&t) || (self.matcher.is_none() && vocab.is_special(t)) {
            if let Some(m) = self.matcher.as_mut() {
                m.commit_token(t)?;
            }
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        self.n_out += 1;
        self.first();
        let stopped = self.em.push(vocab.token_bytes(t), on_text)?;
        self.track_reasoning();
        if stopped {
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        self.feed.push(t);
        self.remember(&[t]);
        Ok(true)
    }

    /// Ends the generation: sends what was held back, validates JSON mode output, and
    /// returns the result.
    pub fn finish(mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation> {
        self.em.finish(on_text)?;
        // Out of tokens with the output complete (budget-aware decoding closed it in
        // time): not a cut-off.
        if self.finish == FinishReason::Length {
            if let Some(m) = self.matcher.as_mut() {
                if m.is_accepting() {
                    self.finish = FinishReason::Stop;
                }
            }
        }
        let mut usage = self.usage;
        usage.completion_tokens = self.n_out;
        if let Some(r) = &self.reason {
            usage.reasoning_tokens = r.tokens;
        }
        usage.total_secs = self.t0.elapsed().as_secs_f64();
        if usage.first_token_secs == 0.0 {
            usage.first_token_secs = usage.total_secs;
        }
        let mut text = String::from_utf8_lossy(&self.em.out).into_owned();
        let reasoning = self.reason.as_ref().map(|r| {
            let (think, answer) = r.markers.split(&text);
            let think = think.to_string();
            text = answer.to_string();
            think
        });
        let mut json = None;
        let mut path = if self.constraint.is_some() {
            ResultPath::Constrained
        } else {
            ResultPath::Unchecked
        };
        // Output cut by max_tokens is reported as such, not validated (it cannot be
        // complete); callers see `finish == Length`.
        let cut = self.finish == FinishReason::Length && self.constraint.is_some();
        if let (Some(j), false) = (&self.params.json_mode, cut) {
            let v = j.validator().validate(&text)?;
            if self.constraint.is_none() {
                path = match v.status {
                    ValidationStatus::Valid => ResultPath::Valid,
                    ValidationStatus::Repaired => ResultPath::Repaired,
                    ValidationStatus::Unchecked => ResultPath::Unchecked,
                };
            }
            if v.status == ValidationStatus::Repaired {
                text = v.text.clone();
            }
            json = Some(v);
        }
        Ok(Generation {
            text,
            finish: self.finish,
            budget_closed: usage.budget_steps > 0,
            usage,
            seed: self.seed,
            json,
            path,
            reasoning,
        })
    }
}

impl CandleBackend {
    /// Starts a generation without running the model: validates the parameters, renders
    /// and encodes the prompt, compiles (or fetches) the constraint. Errors here are the
    /// caller's (bad parameters, a bad schema, a prompt over the context). Cost: prompt
    /// tokenization plus constraint compilation on a cache miss.
    pub fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Sequence> {
        params.validate()?;
        let t0 = Instant::now();
        let inner = &self.inner;
        let ctx = inner.model.config().context_length;
        let markers = self.reasoning_for(prompt, params).cloned();
        let think = match prompt {
            Prompt::Raw(_) => None,
            _ => params.thinking.enabled,
        };
        let text = self.render_with(prompt, think)?;
        // No token is longer than `max_token_bytes`: a text that long cannot fit in the
        // budget, and is refused before the tokenizer spends time on it.
        let lower_bound = text.len() / inner.max_token_bytes.max(1);
        if lower_bound > inner.max_prompt_tokens {
            return Err(RuntimeError::PromptTooLong {
                tokens: lower_bound,
                at_least: true,
                limit: inner.max_prompt_tokens,
            });
        }
        let ids = self.encode(&text)?;
        if ids.is_empty() {
            return Err(RuntimeError::Params {
                param: "prompt",
                msg: "the prompt encodes to no tokens".into(),
            });
        }
        if ids.len() > inner.max_prompt_tokens {
            return Err(RuntimeError::PromptTooLong {
                tokens: ids.len(),
                at_least: false,
                limit: inner.max_prompt_tokens,
            });
        }
        if ids.len() >= ctx {
            return Err(RuntimeError::ContextFull {
                needed: ids.len() + 1,
                limit: ctx,
            });
        }
        let mut answer = params.effective_constraint()?;
        if let Some(OutputConstraint::Tools { calling, .. }) = &mut answer {
            calling.format = inner.call_format;
        }
        let constrained = answer.is_some();
        let constraint = match (&markers, answer) {
            (Some(m), Some(c)) => Some(OutputConstraint::Reasoned {
                end: m.end.clone(),
                inner: Box::new(c),
            }),
            (_, c) => c,
        }
        .map(|c| self.constraint(&c))
        .transpose()?
        .flatten();
        let reason = match markers {
            Some(m) => {
                // Under a constraint the grammar forces the separator after the marker.
                let close_text = if constrained {
                    m.end.clone()
                } else {
                    format!("{}{}", m.end, crate::reasoning::SEPARATOR)
                };
                let close = inner
                    .tokenizer
                    .encode(close_text.as_str(), false)
                    .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?
                    .get_ids()
                    .to_vec();
                Some(Reason {
                    markers: m,
                    open: true,
                    tokens: 0,
                    budget: params.thinking.budget,
                    close,
                    from: 0,
                })
            }
            None => None,
        };
        let mut matcher = match &constraint {
            Some(c) => Some(Matcher::new(c)?),
            None => None,
        };
        let max_tokens = params.max_tokens.min(ctx - ids.len());
        // Budget-aware decoding keeps a promise only a budget at least the shortest
        // completion can keep; below it, the output ends `length`, as without it.
        let budget = match (&mut matcher, params.budget_aware) {
            (Some(m), true) => m
                .shortest_completion()?
                .is_some_and(|w| w.len() <= max_tokens),
            _ => false,
        };
        let seed = params.seed.unwrap_or_else(rand::random);
        let reuse = self.reuse_prefix(&ids);
        let cached = reuse.as_ref().map_or(0, |r| r.1);
        let store_prompt =
            (ids.len() >= MIN_PREFIX && cached + MIN_PREFIX <= ids.len()).then(|| ids.clone());
        let mut ids = ids;
        let prompt_tokens = ids.len();
        ids.drain(..cached);
        let prompt_left = ids.len();
        Ok(Sequence {
            backend: self.clone(),
            sampler: Sampler::new(params.sampler(), seed),
            seed,
            usage: Usage {
                prompt_tokens,
                cached_prompt_tokens: cached,
                ..Default::default()
            },
            cache: inner.model.new_cache(),
            reuse,
            store_prompt,
            mask: vec![0u32; inner.engine.vocab().mask_words()],
            em: Emitter {
                out: Vec::new(),
                sent: 0,
                stop: params.stop.clone(),
                max_stop: params.stop.iter().map(|s| s.len()).max().unwrap_or(0),
                constraint: constraint.clone(),
                ignored: 0,
                checker: None,
            },
            finish: FinishReason::Length,
            n_out: 0,
            max_tokens,
            budget,
            reason,
            recent: if params.sampler().penalizes() {
                ids[ids.len().saturating_sub(PENALTY_WINDOW)..]
                    .iter()
                    .copied()
                    .collect()
            } else {
                Default::default()
            },
            feed: ids,
            prompt_left,
            constraint,
            matcher,
            params: params.clone(),
            t0,
        })
    }
}

impl CandleBackend {
    /// The stored cache sharing the longest prefix with `ids` and that prefix's length
    /// (always leaving at least one token to feed, whose logits start the generation).
    fn reuse_prefix(&self, ids: &[u32]) -> Option<(Arc<KvCache>, usize)> {
        self.inner
            .prefixes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .best(&ids[..ids.len() - 1])
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

impl crate::backend::ModelBackend for CandleBackend {
    fn name(&self) -> &str {
        CandleBackend::name(self)
    }
    fn model_config(&self) -> &crate::model::ModelConfig {
        self.inner.model.config()
    }
    fn vocab(&self) -> &Arc<Vocabulary> {
        CandleBackend::vocab(self)
    }
    fn engine(&self) -> &Engine {
        CandleBackend::engine(self)
    }
    fn chat_template(&self) -> &str {
        CandleBackend::chat_template(self)
    }
    fn render_with(&self, prompt: &Prompt, think: Option<bool>) -> Result<String> {
        CandleBackend::render_with(self, prompt, think)
    }
    fn call_format(&self) -> CallFormat {
        CandleBackend::call_format(self)
    }
    fn reasoning_for(&self, prompt: &Prompt, params: &GenerateParams) -> Option<&ReasoningMarkers> {
        CandleBackend::reasoning_for(self, prompt, params)
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        CandleBackend::encode(self, text)
    }
    fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>> {
        CandleBackend::constraint(self, c)
    }
    fn limits(&self) -> &Limits {
        CandleBackend::limits(self)
    }
    fn constraint_cache_usage(&self) -> (usize, usize) {
        CandleBackend::constraint_cache_usage(self)
    }
}

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

#[cfg(test)]
mod tests {
    use super::incomplete_tail;

    #[test]
    fn incomplete_tail_finds_cut_characters() {
        let e = "é".as_bytes(); // C3 A9
        let euro = "€".as_bytes(); // E2 82 AC
        let emoji = "😀".as_bytes(); // F0 9F 98 80
        assert_eq!(incomplete_tail(b""), 0);
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(e), 0);
        assert_eq!(incomplete_tail(&e[..1]), 1);
        assert_eq!(incomplete_tail(&euro[..2]), 2);
        assert_eq!(incomplete_tail(&[b"x", &emoji[..3]].concat()), 3);
        assert_eq!(incomplete_tail(emoji), 0);
        assert_eq!(incomplete_tail(&[0x80, 0x80]), 0); // stray continuation bytes: not a cut
    }
}
