//! A thin safe wrapper around the llama.cpp calls ruvllm's llama.cpp backend needs:
//! load a GGUF model, make a context, decode a batch of several sequences in one call,
//! read the logits, and edit each sequence's KV memory (remove a range, share a prefix).
//!
//! # Design
//!
//! llama.cpp is linked in process through `llama-cpp-sys-2` (pinned to one version; its
//! build compiles the llama.cpp sources the crate carries). This crate knows nothing of
//! grammars, tokenizers or sampling, like llguidance's vocabulary crate knows nothing of
//! grammars: it is the boundary where raw pointers end. Everything above it is safe Rust.
//!
//! * [`Model`]: the weights, shared (`Send + Sync`): llama.cpp reads a model from any
//!   number of contexts.
//! * [`Context`]: one KV memory with up to `n_seq_max` sequences, used from one thread at
//!   a time (`Send`, not `Sync`). [`Context::decode`] takes several sequences' tokens,
//!   each at its own positions, and returns one row of logits per sequence that asked.
//! * Every entry point checks what llama.cpp would otherwise assert on or read out of
//!   bounds: token ids against the vocabulary, sequence ids against `n_seq_max`,
//!   positions against the context and the sequence's memory, batch sizes; and every
//!   llama.cpp failure (a NULL model, a decode status) becomes an [`Error`] carrying
//!   llama.cpp's own last error lines.
//!
//! # Limits
//!
//! * A recurrent or hybrid model (Mamba, RWKV, Jamba...) cannot remove part of a
//!   sequence: [`Context::truncate`] fails on such models ([`Model::can_truncate`] says so
//!   beforehand), so a caller that needs rollback must refuse them.
//! * llama.cpp's log is process-global; this crate routes it through one callback that
//!   keeps the last error lines for [`Error`]s and prints everything only when
//!   `RUVLLM_LLAMA_LOG` is set.

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Once};

use llama_cpp_sys_2 as sys;

/// What went wrong in a llama.cpp call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model file could not be loaded (llama.cpp's reason attached).
    #[error("llama.cpp could not load {path}: {reason}")]
    Load {
        /// The file.
        path: String,
        /// llama.cpp's last error lines, or ours.
        reason: String,
    },
    /// The context could not be created (out of memory, bad sizes).
    #[error("llama.cpp could not create a context: {0}")]
    Context(String),
    /// An argument outside what the model or context holds (checked before llama.cpp
    /// sees it).
    #[error("invalid llama.cpp call: {0}")]
    Invalid(String),
    /// `llama_decode` failed; `code` is its status (1: no KV room, 2: aborted, <0: error).
    #[error("llama_decode failed with status {code}: {reason}")]
    Decode {
        /// llama_decode's return value.
        code: i32,
        /// What it means, with llama.cpp's last error lines.
        reason: String,
    },
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// llama.cpp's error lines, most recent last (bounded).
static LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
const LOG_LINES: usize = 8;
static INIT: Once = Once::new();

unsafe extern "C" fn on_log(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for the call.
    let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if std::env::var_os("RUVLLM_LLAMA_LOG").is_some() {
        eprint!("{line}");
    }
    if level == sys::GGML_LOG_LEVEL_ERROR {
        if let Ok(mut log) = LOG.lock() {
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line.trim_end().to_string());
        }
    }
}

/// Initializes llama.cpp's backends and log routing once per process.
fn init() {
    INIT.call_once(|| {
        // SAFETY: plain global initialization calls, made once.
        unsafe {
            sys::llama_log_set(Some(on_log), std::ptr::null_mut());
            sys::llama_backend_init();
        }
    });
}

/// The CPU features llama.cpp was compiled with, as ggml lists them ("CPU : SSE3 = 1 |
/// AVX = 1 | ...", only the features compiled in): which kernels this build runs. Cost: a string.
pub fn system_info() -> String {
    init();
    // SAFETY: returns a pointer to a static, NUL-terminated buffer owned by llama.cpp.
    let p = unsafe { sys::llama_print_system_info() };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, valid for the process' lifetime.
    unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// Takes llama.cpp's recent error lines (empty: `fallback`).
fn last_errors(fallback: &str) -> String {
    let lines: Vec<String> = LOG
        .lock()
        .map(|mut l| l.drain(..).collect())
        .unwrap_or_default();
    if lines.is_empty() {
        fallback.to_string()
    } else {
        lines.join("; ")
    }
}

/// A loaded GGUF model (weights and vocabulary), shared by contexts.
#[derive(Debug)]
pub struct Model {
    ptr: NonNull<sys::llama_model>,
    vocab: NonNull<sys::llama_vocab>,
    n_vocab: usize,
    n_ctx_train: usize,
    recurrent: bool,
    desc: String,
    bytes: u64,
}

// SAFETY: a llama_model is immutable after loading and llama.cpp documents it as shared
// between contexts on several threads; the pointers are freed only in Drop.
unsafe impl Send for Model {}
// SAFETY: as above, every method reads only.
unsafe impl Sync for Model {}

impl Model {
    /// Loads a GGUF file (mapped, llama.cpp's default load mode, no GPU layers). Cost:
    /// mapping the file and preparing the weights (llama.cpp repacks some 4-bit layouts
    /// for the CPU at load).
    pub fn load(path: &Path) -> Result<Model> {
        init();
        let load_err = |reason: String| Error::Load {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| load_err(e.to_string()))?;
        if !meta.is_file() {
            return Err(load_err("not a file".into()));
        }
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| load_err("the path contains a NUL byte".into()))?;
        let _ = last_errors("");
        // SAFETY: default parameters by value; the path is NUL-terminated and outlives
        // the call.
        let raw = unsafe {
            let mut p = sys::llama_model_default_params();
            p.n_gpu_layers = 0;
            sys::llama_model_load_from_file(cpath.as_ptr(), p)
        };
        let ptr = NonNull::new(raw).ok_or_else(|| load_err(last_errors("unknown error")))?;
        // SAFETY: `ptr` is a live model; these read its fields.
        let (vocab, n_vocab, n_ctx_train, recurrent, desc, bytes) = unsafe {
            let vocab = sys::llama_model_get_vocab(ptr.as_ptr());
            let n_vocab = if vocab.is_null() {
                0
            } else {
                sys::llama_vocab_n_tokens(vocab)
            };
            let mut buf = [0u8; 256];
            let n = sys::llama_model_desc(ptr.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
            let n = (n.max(0) as usize).min(buf.len() - 1);
            (
                vocab,
                n_vocab,
                sys::llama_model_n_ctx_train(ptr.as_ptr()),
                sys::llama_model_is_recurrent(ptr.as_ptr())
                    || sys::llama_model_is_hybrid(ptr.as_ptr()),
                String::from_utf8_lossy(&buf[..n]).into_owned(),
                sys::llama_model_size(ptr.as_ptr()),
            )
        };
        let model = Model {
            ptr,
            vocab: NonNull::new(vocab.cast_mut()).unwrap_or(NonNull::dangling()),
            n_vocab: n_vocab.max(0) as usize,
            n_ctx_train: n_ctx_train.max(0) as usize,
            recurrent,
            desc,
            bytes,
        };
        if vocab.is_null() || model.n_vocab == 0 {
            return Err(load_err("the model has no vocabulary".into()));
        }
        Ok(model)
    }

    /// Tokens in the vocabulary: the width of a row of logits.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The context length the model was trained with.
    pub fn n_ctx_train(&self) -> usize {
        self.n_ctx_train
    }

    /// Whether a sequence's memory can lose its last positions (false for recurrent and
    /// hybrid models, whose state is not per position).
    pub fn can_truncate(&self) -> bool {
        !self.recurrent
    }

    /// llama.cpp's one-line description (architecture, size, quantization).
    pub fn description(&self) -> &str {
        &self.desc
    }

    /// Bytes of the weights.
    pub fn size_bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether llama.cpp counts `token` as an end of generation (EOS, EOT, ...).
    pub fn is_eog(&self, token: u32) -> bool {
        if token as usize >= self.n_vocab {
            return false;
        }
        // SAFETY: a live vocabulary and an id inside it.
        unsafe { sys::llama_vocab_is_eog(self.vocab.as_ptr(), token as i32) }
    }

    /// Token ids of `text` by llama.cpp's own tokenizer (whatever the model's kind:
    /// BPE, SentencePiece, WordPiece, Unigram): with BOS/EOS where the model adds them
    /// when `add_special`, and control-token texts read as those tokens when
    /// `parse_special`. Thread-safe. Cost: one tokenizer pass (two when the first guess of
    /// the length is short).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let len = i32::try_from(text.len()).map_err(|_| {
            Error::Invalid(format!(
                "a text of {} bytes is too long to tokenize",
                text.len()
            ))
        })?;
        let mut out: Vec<i32> = vec![0; text.len() + 8];
        for _ in 0..2 {
            // SAFETY: `text` is valid for `len` bytes (no NUL needed); `out` holds
            // `out.len()` ids and llama.cpp writes at most that many.
            let n = unsafe {
                sys::llama_tokenize(
                    self.vocab.as_ptr(),
                    text.as_ptr().cast(),
                    len,
                    out.as_mut_ptr(),
                    out.len().min(i32::MAX as usize) as i32,
                    add_special,
                    parse_special,
                )
            };
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out.into_iter().map(|t| t.max(0) as u32).collect());
            }
            if n == i32::MIN {
                break;
            }
            out.resize(n.unsigned_abs() as usize, 0);
        }
        Err(Error::Invalid(
            "llama.cpp could not tokenize the text".into(),
        ))
    }

    /// The bytes llama.cpp renders for `token` (special tokens as their text when
    /// `special`). Cost: one call, no allocation beyond the result.
    pub fn piece(&self, token: u32, special: bool) -> Result<Vec<u8>> {
        if token as usize >= self.n_vocab {
            return Err(Error::Invalid(format!(
                "token {token} is outside the vocabulary of {}",
                self.n_vocab
            )));
        }
        let mut buf = vec![0u8; 64];
        loop {
            // SAFETY: the buffer's length is passed; llama.cpp writes at most that many
            // bytes and returns the needed length, negated, when it is too short.
            let n = unsafe {
                sys::llama_token_to_piece(
                    self.vocab.as_ptr(),
                    token as i32,
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                    0,
                    special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            let need = n.unsigned_abs() as usize;
            if need <= buf.len() || need > 1 << 20 {
                return Err(Error::Invalid(format!("token {token} has no piece")));
            }
            buf.resize(need, 0);
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: the model was loaded by llama_model_load_from_file and every context
        // holds an Arc to it, so none outlives it.
        unsafe { sys::llama_model_free(self.ptr.as_ptr()) }
    }
}

#[derive(Debug, Clone)]
/// How to make a [`Context`].
///
/// Every sequence gets its own KV stream of `n_ctx_seq` positions (llama.cpp's
/// non-unified memory): a sequence's attention then reads only its own cells, in its own
/// order, so its logits do not depend on which other sequences share the batch (a
/// unified memory interleaves their cells and changes the rounding of the softmax sums).
/// The cost is memory reserved per sequence rather than shared.
pub struct ContextOptions {
    /// Positions of KV memory per sequence (`0`: the model's training length).
    pub n_ctx_seq: u32,
    /// Most tokens one llama.cpp decode call takes; [`Context::decode`] splits larger
    /// batches.
    pub n_batch: u32,
    /// Most sequences the memory holds at once.
    pub n_seq_max: u32,
    /// Threads for decoding and for prompts (`0`: the available cores).
    pub n_threads: u32,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            n_ctx_seq: 0,
            n_batch: 512,
            n_seq_max: 1,
            n_threads: 0,
        }
    }
}

/// One sequence's part of a [`Context::decode`] call.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The sequence (below `n_seq_max`).
    pub seq: u32,
    /// The position of the first token: the sequence's current length.
    pub pos: u32,
    /// The tokens to read.
    pub tokens: &'a [u32],
    /// Whether to return the logits after the last token.
    pub logits: bool,
}

/// A KV memory of several sequences over one model, used from one thread at a time.
pub struct Context {
    ptr: NonNull<sys::llama_context>,
    model: Arc<Model>,
    /// Positions per sequence.
    n_ctx: u32,
    n_batch: u32,
    n_seq_max: u32,
    /// Each sequence's length (positions held), mirrored from llama.cpp's memory.
    lens: Vec<u32>,
    batch: Batch,
    /// The batch index of the row [`Context::read`] kept, until the next decode.
    last: Option<i32>,
}

// SAFETY: a llama_context may move between threads; `&mut self` on every call that uses
// it keeps it to one thread at a time (it is not Sync).
unsafe impl Send for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("n_ctx", &self.n_ctx)
            .field("n_batch", &self.n_batch)
            .field("n_seq_max", &self.n_seq_max)
            .finish_non_exhaustive()
    }
}

/// The batch arrays llama_decode reads, owned here (one allocation per context).
#[derive(Default)]
struct Batch {
    token: Vec<i32>,
    pos: Vec<i32>,
    n_seq_id: Vec<i32>,
    seq_id: Vec<i32>,
    seq_ptr: Vec<*mut i32>,
    logits: Vec<i8>,
}

impl Context {
    /// Makes a context over `model`. Cost: allocating the KV memory
    /// (`n_ctx_seq` x `n_seq_max` positions x layers x KV width).
    pub fn new(model: Arc<Model>, opts: &ContextOptions) -> Result<Context> {
        init();
        if opts.n_seq_max == 0 || opts.n_batch == 0 {
            return Err(Error::Invalid(
                "n_seq_max and n_batch must be at least 1".into(),
            ));
        }
        let threads = match opts.n_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()) as i32,
            n => n.min(1024) as i32,
        };
        let n_ctx_seq = if opts.n_ctx_seq == 0 {
            model.n_ctx_train.min(1 << 20) as u32
        } else {
            opts.n_ctx_seq.min(1 << 20)
        };
        let n_ctx = n_ctx_seq
            .checked_mul(opts.n_seq_max)
            .ok_or_else(|| Error::Invalid("n_ctx_seq x n_seq_max overflows".into()))?;
        let _ = last_errors("");
        // SAFETY: default parameters by value, then a live model.
        let raw = unsafe {
            let mut p = sys::llama_context_default_params();
            p.n_ctx = n_ctx;
            p.n_batch = opts.n_batch;
            p.n_ubatch = opts.n_batch;
            p.n_seq_max = opts.n_seq_max;
            p.n_threads = threads;
            p.n_threads_batch = threads;
            p.kv_unified = false;
            // A sliding-window cache as large as the context: positions are removed and
            // copied exactly, whatever the window.
            p.swa_full = true;
            p.no_perf = true;
            sys::llama_init_from_model(model.ptr.as_ptr(), p)
        };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| Error::Context(last_errors("llama_init_from_model returned NULL")))?;
        // SAFETY: a live context.
        let (n_ctx, n_batch, n_seq_max) = unsafe {
            (
                sys::llama_n_ctx_seq(ptr.as_ptr()),
                sys::llama_n_batch(ptr.as_ptr()),
                sys::llama_n_seq_max(ptr.as_ptr()),
            )
        };
        Ok(Context {
            ptr,
            model,
            n_ctx,
            n_batch,
            n_seq_max,
            lens: vec![0; n_seq_max as usize],
            last: None,
            batch: Batch::default(),
        })
    }

    /// The model this context reads.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Positions of KV memory each sequence has.
    pub fn n_ctx_seq(&self) -> u32 {
        self.n_ctx
    }

    /// Most sequences held at once.
    pub fn n_seq_max(&self) -> u32 {
        self.n_seq_max
    }

    /// Positions `seq` holds.
    pub fn seq_len(&self, seq: u32) -> u32 {
        self.lens.get(seq as usize).copied().unwrap_or(0)
    }

    fn check_seq(&self, seq: u32) -> Result<()> {
        if seq >= self.n_seq_max {
            return Err(Error::Invalid(format!(
                "sequence {seq} is outside the context's {} sequences",
                self.n_seq_max
            )));
        }
        Ok(())
    }

    /// Reads each item's tokens into its sequence, in as few llama.cpp calls as the
    /// context's batch size allows, and returns the logits after the last token of every
    /// item that asked (`Item::logits`), in order, each `n_vocab` wide. Cost: one forward
    /// pass of the model per `n_batch` tokens.
    ///
    /// Each item must start at its sequence's length, name a sequence at most once, and
    /// hold token ids inside the vocabulary; a failed call leaves the sequences' lengths
    /// as llama.cpp's memory reports them.
    pub fn decode(&mut self, items: &[Item<'_>]) -> Result<Vec<Vec<f32>>> {
        self.last = None;
        let mut rows = Vec::with_capacity(items.iter().filter(|i| i.logits).count());
        self.run(items, Some(&mut rows))?;
        Ok(rows)
    }

    /// Reads one item's tokens into its sequence, like [`Context::decode`], and keeps
    /// the logits after its last token (when the item asks for them) in llama.cpp's own
    /// buffer for [`Context::last_logits`]. Cost: as [`Context::decode`], without the
    /// copy of the row (a megabyte per token for a 262k vocabulary).
    pub fn read(&mut self, item: &Item<'_>) -> Result<()> {
        self.last = None;
        let last = self.run(std::slice::from_ref(item), None)?;
        self.last = last.filter(|_| item.logits);
        Ok(())
    }

    /// The logits the last [`Context::read`] asked for, in place: `n_vocab` floats the
    /// caller may rewrite (masks, penalties), valid until the next call that decodes.
    /// `None` when that call asked for none or failed, or another call ran since.
    pub fn last_logits(&mut self) -> Option<&mut [f32]> {
        let i = self.last?;
        // SAFETY: `i` is an index of the last batch whose logits were requested, and no
        // decode ran since (every decoding call resets `last`): the row holds n_vocab
        // floats, not aliased while `self` is borrowed mutably.
        let row = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i) };
        if row.is_null() {
            return None;
        }
        // SAFETY: as above.
        Some(unsafe { std::slice::from_raw_parts_mut(row, self.model.n_vocab) })
    }

    /// Checks a batch before llama.cpp sees it: each sequence in range and named once,
    /// starting at its length, with tokens inside the vocabulary and the context, and
    /// tokens wherever it asks for logits.
    fn check_items(&self, items: &[Item<'_>]) -> Result<()> {
        let n_vocab = self.model.n_vocab;
        let mut seen = vec![false; self.n_seq_max as usize];
        for it in items {
            self.check_seq(it.seq)?;
            if std::mem::replace(&mut seen[it.seq as usize], true) {
                return Err(Error::Invalid(format!(
                    "sequence {} appears twice in one batch",
                    it.seq
                )));
            }
            if it.pos != self.lens[it.seq as usize] {
                return Err(Error::Invalid(format!(
                    "sequence {} holds {} positions; its tokens must start there, not at {}",
                    it.seq, self.lens[it.seq as usize], it.pos
                )));
            }
            if let Some(&t) = it.tokens.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(Error::Invalid(format!(
                    "token {t} is outside the vocabulary of {n_vocab}"
                )));
            }
            if it.pos as u64 + it.tokens.len() as u64 > self.n_ctx as u64 {
                return Err(Error::Invalid(format!(
                    "sequence {} would hold {} positions; the context has {}",
                    it.seq,
                    it.pos as u64 + it.tokens.len() as u64,
                    self.n_ctx
                )));
            }
            if it.logits && it.tokens.is_empty() {
                return Err(Error::Invalid(format!(
                    "sequence {} asks for logits after no tokens",
                    it.seq
                )));
            }
        }
        Ok(())
    }

    /// Checks and runs `items` in chunks of `n_batch` tokens; copies each requested row
    /// into `rows` when given, and returns the batch index of the last chunk's last
    /// requested row.
    fn run(&mut self, items: &[Item<'_>], rows: Option<&mut Vec<Vec<f32>>>) -> Result<Option<i32>> {
        self.check_items(items)?;
        let n_vocab = self.model.n_vocab;
        let mut last_out = None;
        // (item, token index) pairs, flattened, in chunks of at most n_batch, the items in
        // order of sequence id: with one stream per sequence llama.cpp splits a batch into
        // micro-batches of sequences with consecutive ids (`split_equal`, sequential), so
        // sequences 0, 1, 2 given as 2, 0, 1 would run as three forward passes, not one.
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&k| items[k].seq);
        let flat: Vec<(usize, usize)> = order
            .iter()
            .flat_map(|&k| (0..items[k].tokens.len()).map(move |j| (k, j)))
            .collect();
        let mut by_item: Vec<Option<Vec<f32>>> = vec![None; items.len()];
        for chunk in flat.chunks(self.n_batch as usize) {
            let b = &mut self.batch;
            b.token.clear();
            b.pos.clear();
            b.seq_id.clear();
            b.logits.clear();
            let mut outs = Vec::new();
            for (i, &(k, j)) in chunk.iter().enumerate() {
                let it = &items[k];
                b.token.push(it.tokens[j] as i32);
                b.pos.push((it.pos as usize + j) as i32);
                b.seq_id.push(it.seq as i32);
                let last = it.logits && j + 1 == it.tokens.len();
                b.logits.push(last as i8);
                if last {
                    outs.push((i as i32, k));
                }
            }
            b.n_seq_id.clear();
            b.n_seq_id.resize(chunk.len(), 1);
            b.seq_ptr.clear();
            let base = b.seq_id.as_mut_ptr();
            // SAFETY: pointers into `seq_id`, which is not touched again until the call
            // returns.
            b.seq_ptr
                .extend((0..chunk.len()).map(|i| unsafe { base.add(i) }));
            let raw = sys::llama_batch {
                n_tokens: chunk.len() as i32,
                token: b.token.as_mut_ptr(),
                embd: std::ptr::null_mut(),
                pos: b.pos.as_mut_ptr(),
                n_seq_id: b.n_seq_id.as_mut_ptr(),
                seq_id: b.seq_ptr.as_mut_ptr(),
                logits: b.logits.as_mut_ptr(),
            };
            let _ = last_errors("");
            // SAFETY: every array holds `n_tokens` entries, checked above to be valid ids,
            // positions and sequences; they outlive the call.
            let code = unsafe { sys::llama_decode(self.ptr.as_ptr(), raw) };
            if code != 0 {
                self.resync();
                let what = match code {
                    1 => "no room in the KV memory for the batch",
                    2 => "aborted",
                    -1 => "invalid batch",
                    _ => "fatal error",
                };
                return Err(Error::Decode {
                    code,
                    reason: last_errors(what),
                });
            }
            let mut per_seq: Vec<(u32, u32)> = Vec::new();
            for &(k, j) in chunk {
                let it = &items[k];
                let end = it.pos + j as u32 + 1;
                match per_seq.last_mut() {
                    Some((s, e)) if *s == it.seq => *e = end,
                    _ => per_seq.push((it.seq, end)),
                }
            }
            for (s, e) in per_seq {
                self.lens[s as usize] = e;
            }
            last_out = outs.last().map(|o| o.0);
            if rows.is_none() {
                continue;
            }
            for (i, k) in outs {
                // SAFETY: `i` is an index of this batch whose logits were requested; the
                // row holds n_vocab floats until the next decode.
                let row = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i) };
                if row.is_null() {
                    return Err(Error::Decode {
                        code: 0,
                        reason: last_errors("no logits for a requested row"),
                    });
                }
                // SAFETY: as above.
                by_item[k] = Some(unsafe { std::slice::from_raw_parts(row, n_vocab) }.to_vec());
            }
        }
        if let Some(rows) = rows {
            rows.extend(by_item.into_iter().flatten());
        }
        Ok(last_out)
    }

    /// Re-reads every sequence's length from llama.cpp's memory (after a failed decode).
    fn resync(&mut self) {
        // SAFETY: a live context and sequence ids below n_seq_max.
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            for (s, len) in self.lens.iter_mut().enumerate() {
                let max = sys::llama_memory_seq_pos_max(mem, s as i32);
                *len = (max + 1).max(0) as u32;
            }
        }
    }

    /// Keeps the first `len` positions of `seq` and forgets the rest (rollback). Fails on
    /// a model that cannot truncate ([`Model::can_truncate`]) unless `len` is 0. Cost:
    /// bookkeeping only.
    pub fn truncate(&mut self, seq: u32, len: u32) -> Result<()> {
        self.check_seq(seq)?;
        if len >= self.lens[seq as usize] {
            return Ok(());
        }
        // SAFETY: a live context, a sequence below n_seq_max.
        let ok = unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            sys::llama_memory_seq_rm(mem, seq as i32, len as i32, -1)
        };
        if !ok {
            return Err(Error::Invalid(format!(
                "this model cannot remove part of sequence {seq} (recurrent or hybrid layers)"
            )));
        }
        self.lens[seq as usize] = len;
        Ok(())
    }

    /// Forgets all of `seq`. Never fails for a valid sequence.
    pub fn clear_seq(&mut self, seq: u32) -> Result<()> {
        self.check_seq(seq)?;
        // SAFETY: as in truncate; removing a whole sequence always succeeds.
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            sys::llama_memory_seq_rm(mem, seq as i32, -1, -1);
        }
        self.lens[seq as usize] = 0;
        Ok(())
    }

    /// Makes `dst` hold the first `len` positions of `src`; `dst` is cleared first. Cost:
    /// copying `src`'s KV stream (done before the next decode), then dropping the
    /// positions past `len`.
    pub fn share_prefix(&mut self, src: u32, dst: u32, len: u32) -> Result<()> {
        self.check_seq(src)?;
        self.check_seq(dst)?;
        if src == dst {
            return Err(Error::Invalid("a sequence cannot share with itself".into()));
        }
        if len > self.lens[src as usize] {
            return Err(Error::Invalid(format!(
                "sequence {src} holds {} positions, not {len}",
                self.lens[src as usize]
            )));
        }
        self.clear_seq(dst)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: live context, valid sequences. Between streams llama.cpp copies whole
        // streams only (a partial range is an assertion failure), hence -1, -1 and the
        // truncation after.
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            sys::llama_memory_seq_cp(mem, src as i32, dst as i32, -1, -1);
        }
        self.lens[dst as usize] = self.lens[src as usize];
        if let Err(e) = self.truncate(dst, len) {
            let _ = self.clear_seq(dst);
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by llama_init_from_model; freed once, before the model (it
        // holds an Arc to it).
        unsafe { sys::llama_free(self.ptr.as_ptr()) }
    }
}
