//! [`LlamaBackend`]: a GGUF model run by llama.cpp, linked in process (through the
//! `ruvllm-llama` wrapper), with ruvllm's decoding on top: exact masks, jump-forward,
//! budget-aware completion, tools, reasoning, stop sequences and streaming are the
//! `decode` module's (crate-private), exactly as on [`crate::CandleBackend`]; only the forward
//! pass and the KV memory are llama.cpp's.
//!
//! # How a batch runs
//!
//! One llama.cpp context holds `sequences` running generations plus `prefix_slots`
//! cached prompts, each in its own KV stream of `context` positions (so a sequence's
//! logits do not depend on its batch: see `ruvllm_llama::ContextOptions`). Each running
//! generation takes a sequence id when it first runs and gives it back when it is
//! dropped. [`crate::BatchBackend::forward`] puts every ready sequence's new tokens (a
//! prompt chunk, or the last sampled token plus any forced tokens) into **one**
//! `llama_decode` call and asks for logits only after each sequence's last token; the
//! masks are then applied to those rows in place by the decoder, and the sampler draws.
//!
//! # Prefix cache
//!
//! After a prompt has been read, its KV stream is copied into a cache slot
//! (`llama_memory_seq_cp`). A later prompt with the same first tokens (at least 32)
//! copies them from the slot and reads only the rest. Slots are reused least recently
//! used first.
//!
//! # Rollback
//!
//! Decoding never needs to remove KV positions: forced tokens are kept only after the
//! budget check, and sampled tokens only after the mask allowed them. The prefix cache
//! keeps the first positions of a copied stream, which recurrent and hybrid models (whose
//! state is not per position) cannot do; on those the prefix cache is off.
//!
//! # Limits
//!
//! * The vocabulary, tokenizer and chat template are ruvllm's, rebuilt from the same GGUF
//!   metadata llama.cpp reads; loading checks that llama.cpp's vocabulary has the same
//!   size and token pieces.
//! * A single generation ([`LlmBackend::complete`]) masks and samples llama.cpp's own
//!   logits row in place; a batch ([`crate::BatchBackend::forward`]) copies one row per
//!   sequence per step (`n_vocab` floats), since the rows outlive the call.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use ruvllm_llama::{Context, ContextOptions, Item};

use crate::api::{GenerateParams, Generation, LlmBackend, Prompt, Usage};
use crate::backends::candle::BackendOptions;
use crate::decode::Decoder;
use crate::error::{Result, RuntimeError};
use crate::front::Front;
use crate::model::{Arch, ModelConfig};
use crate::prefix::{worth_storing, PrefixLru};

/// How to run a [`LlamaBackend`] (besides the [`BackendOptions`] every local backend
/// takes).
#[derive(Debug, Clone)]
pub struct LlamaOptions {
    /// Generations that can run at once (a [`crate::Scheduler`]'s `max_batch` must not
    /// exceed it). Default 8.
    pub sequences: usize,
    /// Prompts kept in the prefix cache (0: off). Default 2.
    pub prefix_slots: usize,
    /// Positions of KV memory each sequence (and each cached prompt) has: the longest
    /// prompt plus output a request may ask for (capped by the model's own context).
    /// Reserved up front for every sequence. Default 2048.
    pub context: usize,
    /// Threads llama.cpp computes with (0: every available core). Default 0.
    pub threads: usize,
    /// Most tokens one llama.cpp call reads (longer batches are split). Default 512.
    pub batch_tokens: usize,
}

impl Default for LlamaOptions {
    fn default() -> Self {
        LlamaOptions {
            sequences: 8,
            prefix_slots: 2,
            context: 2048,
            threads: 0,
            batch_tokens: 512,
        }
    }
}

/// Most tokens one pass of a single generation reads ([`LlmBackend::complete`]).
const PASS_TOKENS: usize = 512;

/// The context and who holds which sequence id (behind one mutex: llama.cpp contexts are
/// used from one thread at a time).
struct State {
    ctx: Context,
    /// Sequence ids free for running generations.
    free: Vec<u32>,
    /// Sequence ids of the prefix cache, filled or not.
    slots: PrefixLru<u32>,
}

impl State {
    /// The cached prompt sharing the longest prefix (at least
    /// [`MIN_PREFIX`](crate::prefix::MIN_PREFIX)) with
    /// `ids`: its sequence id and that length.
    fn best_prefix(&mut self, ids: &[u32]) -> Option<(u32, usize)> {
        self.slots.best(ids).map(|(&seq, n)| (seq, n))
    }

    /// Shares the first `len` positions of `seq` (holding `tokens`) into the least
    /// recently used cache slot.
    fn store_prefix(&mut self, seq: u32, tokens: Vec<u32>) {
        if self.slots.holds(&tokens) {
            return;
        }
        let (ctx, len) = (&mut self.ctx, tokens.len() as u32);
        self.slots
            .refill_least_recent(tokens, |&slot| ctx.share_prefix(seq, slot, len).is_ok());
    }
}

struct Inner {
    front: Arc<Front>,
    state: Mutex<State>,
    n_vocab: usize,
    /// Whether there are prefix cache slots.
    prefix_cache: bool,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A GGUF model run by llama.cpp in this process, decoding under the constraint engine.
/// Cheap to clone; all clones share one llama.cpp context, so their forward passes are
/// serialized (a [`crate::Scheduler`] batches them instead).
#[derive(Clone)]
pub struct LlamaBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LlamaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaBackend")
            .field("name", &self.inner.front.name)
            .field("family", &self.inner.front.config.family)
            .finish_non_exhaustive()
    }
}

fn llama_err(e: ruvllm_llama::Error) -> RuntimeError {
    RuntimeError::Model(e.to_string())
}

impl LlamaBackend {
    /// The CPU kernels the linked llama.cpp was compiled with, as ggml lists them
    /// ("CPU : SSE3 = 1 | AVX = 1 | ...", only the features compiled in). Cost: a string.
    pub fn cpu_info() -> String {
        ruvllm_llama::system_info()
    }

    /// Loads a GGUF model into llama.cpp and builds its tokenizer, vocabulary and chat
    /// template from the same file's metadata. Cost: llama.cpp's load (mapping, and
    /// repacking some 4-bit layouts) plus the KV memory (`kv_tokens` positions).
    pub fn load(path: &Path, opts: &BackendOptions, llama: &LlamaOptions) -> Result<LlamaBackend> {
        if llama.sequences == 0 {
            return Err(RuntimeError::Params {
                param: "sequences",
                msg: "the llama.cpp backend needs at least one sequence".into(),
            });
        }
        // Our own GGUF reader first: a malformed file is refused here with our error,
        // before llama.cpp parses it.
        let (content, _file) = crate::model::read_gguf(path)?;
        let gv = crate::model::gguf_metadata(&content);
        drop(content);
        let model = Arc::new(ruvllm_llama::Model::load(path).map_err(llama_err)?);
        let config = model_config(&gv, &model, llama.context);
        let front = Front::new(path, &gv, config, opts, Some(&model))?;
        let vocab = front.engine.vocab().clone();
        if vocab.len() > model.n_vocab() {
            return Err(RuntimeError::Model(format!(
                "the tokenizer has {} tokens but llama.cpp's vocabulary {}",
                vocab.len(),
                model.n_vocab()
            )));
        }
        check_pieces(&model, &vocab)?;
        let prefix_slots = if model.can_truncate() {
            llama.prefix_slots
        } else {
            0
        };
        let n_seq = llama.sequences + prefix_slots;
        let ctx = Context::new(
            model.clone(),
            &ContextOptions {
                n_ctx_seq: config_ctx(&model, llama.context),
                n_batch: llama.batch_tokens.clamp(1, 1 << 16) as u32,
                n_seq_max: n_seq.min(256) as u32,
                n_threads: llama.threads.min(1024) as u32,
            },
        )
        .map_err(llama_err)?;
        let seqs = ctx.n_seq_max();
        if (seqs as usize) < n_seq {
            return Err(RuntimeError::Model(format!(
                "llama.cpp gave {seqs} sequences, {n_seq} were asked for"
            )));
        }
        let free = (0..llama.sequences as u32).rev().collect();
        let slots = PrefixLru::with_slots(llama.sequences as u32..seqs);
        Ok(LlamaBackend {
            inner: Arc::new(Inner {
                prefix_cache: prefix_slots > 0,
                n_vocab: model.n_vocab(),
                front: Arc::new(front),
                state: Mutex::new(State { ctx, free, slots }),
            }),
        })
    }

    fn front(&self) -> &Front {
        &self.inner.front
    }

    /// Starts a generation without running the model (see [`crate::BatchBackend::start`]).
    /// Cost: prompt tokenization plus constraint compilation on a cache miss.
    pub fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<LlamaSequence> {
        let ctx = self.front().config.context_length;
        let mut dec = Decoder::begin(&self.inner.front, prompt, params, ctx)?;
        // Without a prefix cache no prompt is ever resumed, so its last token need not
        // be read alone (which keeps resumed and whole prompts bit-identical).
        dec.set_split_last(self.inner.prefix_cache);
        Ok(LlamaSequence {
            dec,
            slot: Slot {
                backend: self.clone(),
                seq: None,
            },
            store_prompt: None,
        })
    }

    /// Runs one batch: each sequence's first `n` feed tokens, logits after the last of
    /// a full feed (an empty row for a partial one, which the caller does not read).
    fn decode(&self, batch: &mut [(&mut LlamaSequence, usize)]) -> Result<Vec<Vec<f32>>> {
        let mut st = self.inner.state();
        let mut items = Vec::with_capacity(batch.len());
        for (s, n) in batch.iter() {
            let seq = s.slot.seq.ok_or_else(|| {
                RuntimeError::Model("a sequence ran before it was prepared".into())
            })?;
            let feed = s.dec.feed();
            let n = (*n).min(feed.len());
            items.push(Item {
                seq,
                pos: st.ctx.seq_len(seq),
                tokens: &feed[..n],
                logits: n == feed.len(),
            });
        }
        let rows = st.ctx.decode(&items).map_err(llama_err)?;
        let mut rows = rows.into_iter();
        let mut out = Vec::with_capacity(batch.len());
        for it in &items {
            out.push(if it.logits {
                rows.next().unwrap_or_default()
            } else {
                Vec::new()
            });
        }
        Ok(out)
    }
}

/// Positions per sequence: `context`, within the model's own context.
fn config_ctx(model: &ruvllm_llama::Model, context: usize) -> u32 {
    model.n_ctx_train().clamp(2, context.clamp(2, 1 << 20)) as u32
}

/// The model's shape from the GGUF metadata, as llama.cpp reports it where it can.
fn model_config(
    gv: &ruvllm_engine::vocab::GgufVocab,
    model: &ruvllm_llama::Model,
    context: usize,
) -> ModelConfig {
    let family = gv
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("unknown")
        .to_string();
    let int = |k: &str| {
        gv.get(&format!("{family}.{k}"))
            .and_then(|v| v.as_int())
            .map_or(0, |x| x.clamp(0, usize::MAX as i128) as usize)
    };
    let float = |k: &str| match gv.get(&format!("{family}.{k}")) {
        Some(ruvllm_engine::vocab::GgufValue::Float(f)) => Some(*f),
        _ => None,
    };
    let n_embd = int("embedding_length");
    let n_head = int("attention.head_count");
    let head_dim = match int("attention.key_length") {
        0 => n_embd.checked_div(n_head).unwrap_or(0),
        k => k,
    };
    let (n_layer, n_kv_head) = (int("block_count"), int("attention.head_count_kv"));
    let rope_base = float("rope.freq_base").unwrap_or(10_000.0) as f32;
    let rms_eps = float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6);
    ModelConfig {
        arch: match family.as_str() {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "phi3" => Arch::Phi3,
            _ => Arch::Other,
        },
        family,
        n_layer,
        n_embd,
        n_head,
        n_kv_head,
        head_dim,
        rope_base,
        rms_eps,
        context_length: config_ctx(model, context) as usize,
        vocab_size: model.n_vocab(),
    }
}

/// Checks that llama.cpp reads the same token pieces as our vocabulary (they come from
/// the same metadata, so a difference is a bug on one side): every ordinary token's bytes
/// on a sample spread over the vocabulary. Cost: about a thousand piece lookups.
fn check_pieces(model: &ruvllm_llama::Model, vocab: &ruvllm_engine::Vocabulary) -> Result<()> {
    let n = vocab.len();
    let step = (n / 997).max(1);
    for t in (0..n as u32).step_by(step) {
        if vocab.is_special(t) {
            continue;
        }
        let ours = vocab.token_bytes(t);
        let theirs = model.piece(t, false).map_err(llama_err)?;
        if ours != &theirs[..] {
            return Err(RuntimeError::Model(format!(
                "token {t}: llama.cpp reads {:?}, the tokenizer {:?}",
                String::from_utf8_lossy(&theirs),
                String::from_utf8_lossy(ours)
            )));
        }
    }
    Ok(())
}

/// One generation in progress on a [`LlamaBackend`]: its decoding state and the
/// llama.cpp sequence id it holds while it runs (given back when it is dropped).
pub struct LlamaSequence {
    dec: Decoder,
    slot: Slot,
    /// The prompt, to share into the prefix cache once it has been read.
    store_prompt: Option<Vec<u32>>,
}

/// The sequence id a generation holds, given back (its KV positions removed) on drop.
struct Slot {
    backend: LlamaBackend,
    seq: Option<u32>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(seq) = self.seq.take() {
            let mut st = self.backend.inner.state();
            let _ = st.ctx.clear_seq(seq);
            st.free.push(seq);
        }
    }
}

impl std::fmt::Debug for LlamaSequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.dec.fmt(f)
    }
}

impl LlamaSequence {
    /// On the first call, takes a sequence id and the longest cached prompt prefix; then
    /// the decoder's forced text and end checks.
    fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        if self.slot.seq.is_none() {
            let backend = self.slot.backend.clone();
            let mut st = backend.inner.state();
            // The lowest free id: llama.cpp batches only sequences with consecutive ids
            // in one forward pass (see `ruvllm_llama::Context::decode`), so running ids
            // are kept together.
            let lowest = st
                .free
                .iter()
                .enumerate()
                .min_by_key(|(_, &s)| s)
                .map(|(i, _)| i);
            let seq = lowest.map(|i| st.free.swap_remove(i)).ok_or_else(|| {
                RuntimeError::Model(
                    "every llama.cpp sequence is in use (raise LlamaOptions::sequences to the \
                     scheduler's batch)"
                        .into(),
                )
            })?;
            self.slot.seq = Some(seq);
            if let Some(ids) = self.dec.prompt_ids().map(<[u32]>::to_vec) {
                let last = ids.len().saturating_sub(1);
                if let Some((src, n)) = st.best_prefix(&ids[..last]) {
                    if st.ctx.share_prefix(src, seq, n as u32).is_ok() {
                        self.dec.skip_cached(n);
                    }
                }
                let cached = self.dec.usage().cached_prompt_tokens;
                if !st.slots.is_empty() && worth_storing(ids.len(), cached) {
                    self.store_prompt = Some(ids);
                }
            }
        }
        self.dec.prepare(on_text)
    }

    fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        if let Some((seq, ids)) = self.prompt_to_store() {
            self.slot.backend.inner.state().store_prefix(seq, ids);
        }
        let n = self.slot.backend.inner.n_vocab.min(logits.len());
        self.dec.advance(&mut logits[..n], on_text)
    }

    /// The prompt to share into the prefix cache, once, when the logits after it came.
    fn prompt_to_store(&mut self) -> Option<(u32, Vec<u32>)> {
        if self.dec.prompt_read() {
            return None;
        }
        Some((self.slot.seq?, self.store_prompt.take()?))
    }
}

crate::front::model_backend_via_front!(LlamaBackend);

impl crate::backend::BatchBackend for LlamaBackend {
    type Sequence = LlamaSequence;

    fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<LlamaSequence> {
        LlamaBackend::start(self, prompt, params)
    }

    fn forward(&self, batch: &mut [(&mut LlamaSequence, usize)]) -> Result<Vec<Vec<f32>>> {
        self.decode(batch)
    }
}

impl crate::backend::BatchSequence for LlamaSequence {
    fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        LlamaSequence::prepare(self, on_text)
    }
    fn feed_len(&self) -> usize {
        self.dec.feed().len()
    }
    fn pass_len(&self, cap: usize) -> usize {
        self.dec.pass_len(cap)
    }
    fn consumed(&mut self, n: usize) {
        self.dec.consumed(n)
    }
    fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        LlamaSequence::advance(self, logits, on_text)
    }
    fn finish(self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation> {
        self.dec.finish(on_text)
    }
    fn usage(&self) -> &Usage {
        self.dec.usage()
    }
}

impl LlmBackend for LlamaBackend {
    fn complete(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        use crate::backend::BatchSequence;
        let mut seq = self.start(prompt, params)?;
        let mut ready = seq.prepare(on_text)?;
        while ready {
            let n = seq.pass_len(PASS_TOKENS);
            let full = n == seq.feed_len();
            let id = seq.slot.seq.ok_or_else(|| {
                RuntimeError::Model("a sequence ran before it was prepared".into())
            })?;
            // One sequence: its logits are masked and sampled in llama.cpp's own buffer,
            // under the lock (no copy of the row).
            let mut st = self.inner.state();
            let pos = st.ctx.seq_len(id);
            st.ctx
                .read(&Item {
                    seq: id,
                    pos,
                    tokens: &seq.dec.feed()[..n],
                    logits: full,
                })
                .map_err(llama_err)?;
            if !full {
                drop(st);
                seq.consumed(n);
                continue;
            }
            if let Some((id, ids)) = seq.prompt_to_store() {
                st.store_prefix(id, ids);
            }
            let n_vocab = self.inner.n_vocab;
            let logits = st.ctx.last_logits().ok_or_else(|| {
                RuntimeError::Model("llama.cpp kept no logits for the sequence".into())
            })?;
            let k = n_vocab.min(logits.len());
            ready = seq.dec.advance(&mut logits[..k], on_text)?;
            drop(st);
            ready = ready && seq.prepare(on_text)?;
        }
        seq.finish(on_text)
    }
}
