//! Quantized decoder-only transformers on the CPU, written on candle's tensor and
//! quantized-matmul primitives.
//!
//! # Why our own model code
//!
//! candle-transformers ships quantized Llama, Qwen2 and Phi-3, but its models keep one KV
//! cache inside the weights, grow it by concatenation (quadratic in length), and cannot
//! truncate it. Constrained decoding needs more: jump-forward appends several forced tokens
//! in one pass and may have to roll back, and a server runs many sequences over one set of
//! weights. So the weights ([`Model`]) are immutable and shared behind an `Arc`, and each
//! sequence owns a [`KvCache`]: preallocated per layer, written in place with `slice_set`,
//! grown by doubling, and truncated in O(1) ([`KvCache::truncate`]).
//!
//! # Architectures
//!
//! One forward pass covers the Llama family as GGUF files lay it out:
//!
//! | `general.architecture` | attention | rotary embedding | MLP |
//! |---|---|---|---|
//! | `llama` | separate q/k/v | interleaved pairs (GGUF permutes q/k) | gate, up, down |
//! | `qwen2` | separate q/k/v with biases | halves (NeoX) | gate, up, down |
//! | `phi3` | fused `attn_qkv` | halves (NeoX) | fused gate+up, down |
//!
//! Grouped-query attention is computed without copying keys: the query heads that share a
//! key/value head are stacked as extra rows of one matmul.
//!
//! # Weights format
//!
//! candle 0.11 has fast x86 kernels for Q8_0 (and the k-quants) but only a generic one for
//! Q4_0/Q4_1/Q5_0/Q5_1, about 3x slower on these machines. [`LoadOptions::requantize`]
//! (on by default) converts those matrices to Q8_0 at load: a few hundred ms, twice the
//! memory of Q4, the same golden greedy answer on the default model. Q4_0 as a target is
//! refused because it changes answers.

use std::io::{Read, Seek};
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};

use crate::kernels::Q8Matrix;
use candle_core::{DType, Device, Module, Tensor, D};

use crate::error::RuntimeError;
use ruvllm_engine::vocab::{GgufValue, GgufVocab};

fn me(e: candle_core::Error) -> RuntimeError {
    RuntimeError::Model(e.to_string())
}

/// The architectures [`Model`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 1/2/3, SmolLM, Mistral and others with the `llama` GGUF layout.
    Llama,
    /// Qwen2 / Qwen2.5.
    Qwen2,
    /// Phi-3 (fused projections).
    Phi3,
    /// An architecture only the llama.cpp backend runs ([`ModelConfig::family`] names
    /// it); the candle model never loads one.
    Other,
}

impl Arch {
    fn from_name(name: &str) -> Result<Arch, RuntimeError> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "phi3" => Arch::Phi3,
            other => {
                return Err(RuntimeError::Model(format!(
                    "general.architecture = {other:?} is not supported (llama, qwen2, phi3)"
                )))
            }
        })
    }
}

/// Hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Architecture.
    pub arch: Arch,
    /// The GGUF's `general.architecture` (`llama`, `gemma3`, `qwen3`...): the model family
    /// the APIs report.
    pub family: String,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RMS norm epsilon.
    pub rms_eps: f64,
    /// Context length the model was trained for (positions beyond it are refused).
    pub context_length: usize,
    /// Vocabulary size (rows of the output projection).
    pub vocab_size: usize,
}

/// How to load the weights.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Convert matrices whose format has no fast CPU kernel (Q4_0, Q4_1, Q5_0, Q5_1) to
    /// this format at load. Default `Some(Q8_0)`; `None` keeps the file's format.
    pub requantize: Option<GgmlDType>,
    /// Longest context to prepare rotary tables for (capped by the model's own).
    pub max_context: usize,
    /// Show a progress bar on stderr while loading.
    pub progress: bool,
    /// Whether to keep an f16 copy of the weight matrices for products over many rows
    /// (prompts). Default [`BatchWeights::Off`].
    pub batch_weights: BatchWeights,
    /// Use our Q8_0 kernel ([`crate::kernels`]) instead of candle's for every product of
    /// Q8_0 weights, except those of [`WIDE_ROWS`] rows or more when the f16 copy is on
    /// (default `true`; costs a second copy of the Q8_0 weights). With it, a sequence's logits are the same bits whether it is decoded
    /// alone or batched with others; with candle's kernels they can differ on CPUs with
    /// AVX-512 VNNI, where candle computes one row and several rows differently.
    pub own_kernel: bool,
}

/// The f16 copy of the weights used for products over [`WIDE_ROWS`] rows or more.
///
/// Measured on the default model (2 cores): a 301-token prompt reads in 1.0 s with it
/// against 2.0 s with the quantized kernels alone. The cost is memory (2 bytes per
/// parameter) and reproducibility: f16 products round differently from the quantized
/// ones, so whether a token is computed inside a long input or alone (a prompt read whole
/// or from the prefix cache, a server batch that happens to be long) changes low-order
/// bits, and a seeded sample can then differ. Off by default for that reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchWeights {
    /// On when the copy takes at most 1 GiB (models up to about 500M parameters).
    Auto,
    /// Always.
    F16,
    /// Never: every product uses the quantized weights (the default).
    #[default]
    Off,
}

/// Largest f16 copy [`BatchWeights::Auto`] makes.
const AUTO_F16_MAX_BYTES: usize = 1 << 30;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            requantize: Some(GgmlDType::Q8_0),
            max_context: 8192,
            progress: false,
            batch_weights: BatchWeights::Off,
            own_kernel: true,
        }
    }
}

enum Attn {
    Separate {
        q: Box<Mat>,
        k: Box<Mat>,
        v: Box<Mat>,
        bias: Option<(Tensor, Tensor, Tensor)>,
    },
    /// q, k and v stacked by rows (Phi-3's layout, or ours after re-quantization), with
    /// the stacked biases when the model has them.
    Fused(Mat, Option<Tensor>),
}

enum Mlp {
    Separate { gate: Mat, up: Mat },
    Fused(Mat),
}

struct Layer {
    attn_norm: Tensor,
    attn: Attn,
    o: Mat,
    ffn_norm: Tensor,
    mlp: Mlp,
    down: Mat,
}

/// The immutable weights of a model. Share with `Arc`; each sequence brings its own
/// [`KvCache`].
pub struct Model {
    cfg: ModelConfig,
    embed: QTensor,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Mat,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("cfg", &self.cfg).finish()
    }
}

/// Keys and values of one sequence, per layer: `[1, n_kv_head, capacity, head_dim]`
/// tensors written in place. Cost of [`KvCache::truncate`]: O(1).
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
    cap: usize,
}

impl KvCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position from `len` on (rollback). O(1).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes held by the preallocated tensors.
    pub fn memory(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(|t| t.elem_count() * 4)
            .sum()
    }
}

/// Rows of a matrix product from which the f16 copy of the weights is used (see
/// [`LoadOptions::batch_weights`]). Measured on the default model (`ruvllm-bench
/// steps`): candle's f16 GEMM packs the whole weight matrix on every call, so it only
/// pays off for long inputs (prompts), not for a handful of decode rows.
pub const WIDE_ROWS: usize = 48;

/// A weight matrix: the quantized form for a few rows at a time (decode, batched
/// decode), and optionally an f16 copy for many rows at once (prompts), where candle's
/// f16 GEMM is about 2x faster than its quantized dot products.
struct Mat {
    q: QMatMul,
    wide: Option<QMatMul>,
    /// Q8_0 weights in our kernel's layout ([`crate::kernels`]), used for every row count
    /// the f16 copy does not take (decode, batches, forced tokens, prompts).
    k8: Option<Q8Matrix>,
}

impl Mat {
    fn new(q: QMatMul, wide: bool, own: bool, device: &Device) -> candle_core::Result<Mat> {
        let w = match (&q, wide) {
            (QMatMul::QTensor(t), true) => Some(QMatMul::TensorF16(t.dequantize_f16(device)?)),
            _ => None,
        };
        let k8 = match (&q, own) {
            (QMatMul::QTensor(t), true) if t.dtype() == GgmlDType::Q8_0 => match t.shape().dims() {
                &[n, k] => Q8Matrix::from_ggml(&t.data()?, n, k),
                _ => None,
            },
            _ => None,
        };
        Ok(Mat { q, wide: w, k8 })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let k = xs.dim(D::Minus1)?.max(1);
        let rows = xs.elem_count() / k;
        if let Some(w) = &self.wide {
            if rows >= WIDE_ROWS {
                return w.forward(xs);
            }
        }
        if let Some(m8) = &self.k8 {
            // Every row count not taken by the f16 copy above is ours, a single decode
            // row included:
            // a row's product must not depend on how many rows share the call, or
            // batching would change outputs. candle's single-row path is not a match on
            // every CPU: with AVX-512 VNNI, candle 0.11 sends matrices whose inner size is
            // a multiple of 256 through a kernel that quantizes the input per 256 values
            // instead of per 32 (`batched_forward_matches_one_sequence_at_a_time`).
            if m8.cols() == k {
                let x = xs.flatten_all()?.to_vec1::<f32>()?;
                let y = m8.matmul(&x, rows);
                let mut dims = xs.dims().to_vec();
                if let Some(last) = dims.last_mut() {
                    *last = m8.rows();
                }
                return Tensor::from_vec(y, dims, xs.device());
            }
        }
        self.q.forward(xs)
    }
}

struct Gguf<'a, R> {
    content: &'a gguf_file::Content,
    reader: &'a mut R,
    device: &'a Device,
    wide: bool,
    own: bool,
}

impl<R: Read + Seek> Gguf<'_, R> {
    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn qtensor(&mut self, name: &str) -> Result<QTensor, RuntimeError> {
        self.content
            .tensor(self.reader, name, self.device)
            .map_err(|e| RuntimeError::Model(format!("tensor {name}: {e}")))
    }

    fn tensor(&mut self, name: &str) -> Result<Tensor, RuntimeError> {
        self.qtensor(name)?
            .dequantize(self.device)
            .map_err(|e| RuntimeError::Model(format!("tensor {name}: {e}")))
    }

    fn matmul(&mut self, name: &str, to: Option<GgmlDType>) -> Result<Mat, RuntimeError> {
        let q = self.qtensor(name)?;
        let q = match (q.dtype(), to) {
            (GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1, Some(t))
                if t != q.dtype() && q.shape().dims().last().copied().unwrap_or(0) % 32 == 0 =>
            {
                let f = q.dequantize(self.device).map_err(me)?;
                QTensor::quantize(&f, t).map_err(me)?
            }
            _ => q,
        };
        Mat::new(
            QMatMul::from_qtensor(q).map_err(me)?,
            self.wide,
            self.own,
            self.device,
        )
        .map_err(me)
    }
}

impl<R: Read + Seek> Gguf<'_, R> {
    /// The matrices `names` stacked by rows into one matmul, when all of them are being
    /// re-quantized anyway (stacking costs nothing then, and one matmul dispatch replaces
    /// several). `None` when they are kept in the file's format.
    fn fused(
        &mut self,
        names: &[String],
        to: Option<GgmlDType>,
    ) -> Result<Option<Mat>, RuntimeError> {
        let Some(t) = to else { return Ok(None) };
        let mut parts = Vec::with_capacity(names.len());
        for n in names {
            let info = self
                .content
                .tensor_infos
                .get(n)
                .ok_or_else(|| RuntimeError::Model(format!("tensor {n} is missing")))?;
            if !matches!(
                info.ggml_dtype,
                GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
            ) {
                return Ok(None);
            }
            parts.push(self.tensor(n)?);
        }
        let w = Tensor::cat(&parts, 0).map_err(me)?;
        if w.dims().last().copied().unwrap_or(0) % 32 != 0 {
            return Ok(None);
        }
        let q = QMatMul::from_qtensor(QTensor::quantize(&w, t).map_err(me)?).map_err(me)?;
        Ok(Some(
            Mat::new(q, self.wide, self.own, self.device).map_err(me)?,
        ))
    }
}

fn meta_usize(c: &gguf_file::Content, key: &str) -> Result<usize, RuntimeError> {
    let v = c
        .metadata
        .get(key)
        .ok_or_else(|| RuntimeError::Model(format!("GGUF metadata {key} is missing")))?;
    let n = v
        .to_u64()
        .or_else(|_| v.to_u32().map(u64::from))
        .or_else(|_| v.to_i32().map(|x| x.max(0) as u64))
        .map_err(|_| RuntimeError::Model(format!("GGUF metadata {key} is not an integer")))?;
    Ok(n as usize)
}

fn meta_f32(c: &gguf_file::Content, key: &str) -> Option<f32> {
    let v = c.metadata.get(key)?;
    v.to_f32()
        .ok()
        .or_else(|| v.to_f64().ok().map(|x| x as f32))
}

/// The metadata of parsed GGUF content as the engine's [`GgufVocab`] (its tokenizer,
/// chat template and special ids), so that one read of the file feeds both the model and
/// the vocabulary. Cost: a copy of the metadata (the token list: a few MB at most).
pub fn gguf_metadata(content: &gguf_file::Content) -> GgufVocab {
    fn value(v: &gguf_file::Value) -> GgufValue {
        use gguf_file::Value as V;
        match v {
            V::U8(x) => GgufValue::Int(*x as i128),
            V::I8(x) => GgufValue::Int(*x as i128),
            V::U16(x) => GgufValue::Int(*x as i128),
            V::I16(x) => GgufValue::Int(*x as i128),
            V::U32(x) => GgufValue::Int(*x as i128),
            V::I32(x) => GgufValue::Int(*x as i128),
            V::U64(x) => GgufValue::Int(*x as i128),
            V::I64(x) => GgufValue::Int(*x as i128),
            V::F32(x) => GgufValue::Float(*x as f64),
            V::F64(x) => GgufValue::Float(*x),
            V::Bool(x) => GgufValue::Bool(*x),
            V::String(x) => GgufValue::Str(x.clone()),
            V::Array(a) => GgufValue::Array(a.iter().map(value).collect()),
        }
    }
    GgufVocab {
        metadata: content
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    }
}

/// Reads the header of a GGUF file (metadata and tensor index, not the weights), with
/// the reader left open for [`Model::from_content`]. candle's reader bounds every
/// length by the file's size, so a hostile header fails, it does not allocate. Cost: the
/// header's bytes.
pub fn read_gguf(path: &Path) -> Result<(gguf_file::Content, std::fs::File), RuntimeError> {
    let mut f = std::fs::File::open(path).map_err(|e| RuntimeError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let content = gguf_file::Content::read(&mut f)
        .map_err(|e| RuntimeError::Model(format!("{}: {e}", path.display())))?;
    Ok((content, f))
}

impl Model {
    /// Loads a GGUF file. Cost: reading the file, plus re-quantization (see the module
    /// docs).
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Model, RuntimeError> {
        let (content, mut f) = read_gguf(path)?;
        Self::from_content(&content, &mut f, opts)
    }

    /// Loads from parsed GGUF content and its reader: the shape from the metadata, then
    /// the tensors layer by layer, then the rotary tables.
    pub fn from_content<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        opts: &LoadOptions,
    ) -> Result<Model, RuntimeError> {
        let device = Device::Cpu;
        let mut cfg = Self::config_of(content, opts)?;
        let total = cfg.n_layer as u64 + 2;
        let bar = if opts.progress {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "loading {msg} [{bar:30}] {pos}/{len} {elapsed}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message(cfg.family.clone());
            b
        } else {
            indicatif::ProgressBar::hidden()
        };

        let wide = match opts.batch_weights {
            BatchWeights::Off => false,
            BatchWeights::F16 => true,
            BatchWeights::Auto => {
                let params: usize = content
                    .tensor_infos
                    .values()
                    .map(|t| t.shape.elem_count())
                    .sum();
                params * 2 <= AUTO_F16_MAX_BYTES
            }
        };
        let mut g = Gguf {
            content,
            reader,
            device: &device,
            wide,
            own: opts.own_kernel,
        };
        let rq = opts.requantize;
        if rq == Some(GgmlDType::Q4_0) {
            return Err(RuntimeError::Model(
                "re-quantizing to Q4_0 changes the model's answers; use Q8_0 or none".into(),
            ));
        }
        let embed = g.qtensor("token_embd.weight")?;
        cfg.vocab_size = embed.shape().dims2().map_err(me)?.0;
        let mut layers = Vec::with_capacity(cfg.n_layer);
        bar.inc(1);
        for i in 0..cfg.n_layer {
            layers.push(Self::layer(&mut g, i, cfg.arch, rq)?);
            bar.inc(1);
        }
        let norm = g.tensor("output_norm.weight")?;
        let output = if g.has("output.weight") {
            g.matmul("output.weight", rq)?
        } else {
            g.matmul("token_embd.weight", rq)?
        };
        let freq_factors = if g.has("rope_freqs.weight") {
            Some(
                g.tensor("rope_freqs.weight")?
                    .to_vec1::<f32>()
                    .map_err(me)?,
            )
        } else {
            None
        };
        bar.inc(1);
        bar.finish_and_clear();
        let (cos, sin) = rope_tables(&cfg, freq_factors.as_deref(), &device)?;
        Ok(Model {
            cfg,
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            device,
        })
    }

    /// The model's shape from the GGUF metadata, checked before anything is allocated
    /// (hostile or corrupt files must not drive allocations); `vocab_size` is 0 until the
    /// embedding is read.
    fn config_of(
        content: &gguf_file::Content,
        opts: &LoadOptions,
    ) -> Result<ModelConfig, RuntimeError> {
        let arch_name = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_else(|| "llama".into());
        let arch = Arch::from_name(&arch_name)?;
        let a = arch_name.as_str();
        let n_layer = meta_usize(content, &format!("{a}.block_count"))?;
        let n_embd = meta_usize(content, &format!("{a}.embedding_length"))?;
        let n_head = meta_usize(content, &format!("{a}.attention.head_count"))?;
        for (key, v, max) in [
            ("block_count", n_layer, 1024),
            ("embedding_length", n_embd, 65_536),
            ("attention.head_count", n_head, 1024),
        ] {
            if v == 0 || v > max {
                return Err(RuntimeError::Model(format!(
                    "{a}.{key} = {v} is out of range (1..={max})"
                )));
            }
        }
        let n_kv_head =
            meta_usize(content, &format!("{a}.attention.head_count_kv")).unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || n_embd % n_head != 0 {
            return Err(RuntimeError::Model(format!(
                "inconsistent head counts: {n_head} heads, {n_kv_head} key/value heads, \
                 hidden size {n_embd}"
            )));
        }
        let head_dim = n_embd / n_head;
        let rope_dim =
            meta_usize(content, &format!("{a}.rope.dimension_count")).unwrap_or(head_dim);
        if rope_dim != head_dim {
            return Err(RuntimeError::Model(format!(
                "partial rotary embeddings ({a}.rope.dimension_count = {rope_dim}, head size \
                 {head_dim}) are not supported"
            )));
        }
        let rope_base = meta_f32(content, &format!("{a}.rope.freq_base")).unwrap_or(10_000.0);
        let rms_eps = meta_f32(content, &format!("{a}.attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5) as f64;
        let context_length = meta_usize(content, &format!("{a}.context_length"))
            .unwrap_or(4096)
            .min(opts.max_context)
            .max(1);
        Ok(ModelConfig {
            arch,
            family: arch_name.clone(),
            n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            rope_base,
            rms_eps,
            context_length,
            vocab_size: 0,
        })
    }

    /// Layer `i`'s tensors: attention (fused Q/K/V where the file or the loader fuses
    /// them), the MLP (fused gate and up likewise), norms and projections, re-quantized
    /// to `rq` where asked.
    fn layer<R: Read + Seek>(
        g: &mut Gguf<'_, R>,
        i: usize,
        arch: Arch,
        rq: Option<GgmlDType>,
    ) -> Result<Layer, RuntimeError> {
        let p = format!("blk.{i}");
        let bias = if g.has(&format!("{p}.attn_q.bias")) {
            Some((
                g.tensor(&format!("{p}.attn_q.bias"))?,
                g.tensor(&format!("{p}.attn_k.bias"))?,
                g.tensor(&format!("{p}.attn_v.bias"))?,
            ))
        } else {
            None
        };
        let qkv_names = ["q", "k", "v"].map(|x| format!("{p}.attn_{x}.weight"));
        let attn = if arch == Arch::Phi3 {
            Attn::Fused(g.matmul(&format!("{p}.attn_qkv.weight"), rq)?, None)
        } else if let Some(f) = g.fused(&qkv_names, rq)? {
            let b = match &bias {
                Some((q, k, v)) => Some(Tensor::cat(&[q, k, v], 0).map_err(me)?),
                None => None,
            };
            Attn::Fused(f, b)
        } else {
            Attn::Separate {
                q: Box::new(g.matmul(&qkv_names[0], rq)?),
                k: Box::new(g.matmul(&qkv_names[1], rq)?),
                v: Box::new(g.matmul(&qkv_names[2], rq)?),
                bias,
            }
        };
        let gate_up = ["gate", "up"].map(|x| format!("{p}.ffn_{x}.weight"));
        let mlp = if arch == Arch::Phi3 {
            Mlp::Fused(g.matmul(&format!("{p}.ffn_up.weight"), rq)?)
        } else if let Some(f) = g.fused(&gate_up, rq)? {
            Mlp::Fused(f)
        } else {
            Mlp::Separate {
                gate: g.matmul(&gate_up[0], rq)?,
                up: g.matmul(&gate_up[1], rq)?,
            }
        };
        Ok(Layer {
            attn_norm: g.tensor(&format!("{p}.attn_norm.weight"))?,
            attn,
            o: g.matmul(&format!("{p}.attn_output.weight"), rq)?,
            ffn_norm: g.tensor(&format!("{p}.ffn_norm.weight"))?,
            mlp,
            down: g.matmul(&format!("{p}.ffn_down.weight"), rq)?,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// An empty cache for one sequence (allocates on first use).
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            k: Vec::new(),
            v: Vec::new(),
            len: 0,
            cap: 0,
        }
    }

    fn reserve(&self, cache: &mut KvCache, need: usize) -> Result<(), RuntimeError> {
        if need <= cache.cap {
            return Ok(());
        }
        let mut cap = cache.cap.max(256);
        while cap < need {
            cap *= 2;
        }
        let cap = cap.min(self.cfg.context_length);
        let shape = (1, self.cfg.n_kv_head, cap, self.cfg.head_dim);
        let mut k = Vec::with_capacity(self.cfg.n_layer);
        let mut v = Vec::with_capacity(self.cfg.n_layer);
        for l in 0..self.cfg.n_layer {
            let nk = Tensor::zeros(shape, DType::F32, &self.device).map_err(me)?;
            let nv = Tensor::zeros(shape, DType::F32, &self.device).map_err(me)?;
            if cache.len > 0 {
                let ok = cache.k[l].narrow(2, 0, cache.len).map_err(me)?.contiguous();
                let ov = cache.v[l].narrow(2, 0, cache.len).map_err(me)?.contiguous();
                nk.slice_set(&ok.map_err(me)?, 2, 0).map_err(me)?;
                nv.slice_set(&ov.map_err(me)?, 2, 0).map_err(me)?;
            }
            k.push(nk);
            v.push(nv);
        }
        cache.k = k;
        cache.v = v;
        cache.cap = cap;
        Ok(())
    }

    /// A new cache holding a copy of the first `len` positions of `src` (prefix reuse: the
    /// keys and values of a prompt prefix do not depend on what follows it). Cost: one
    /// copy of `len` positions of every layer.
    pub fn copy_prefix(&self, src: &KvCache, len: usize) -> Result<KvCache, RuntimeError> {
        let len = len.min(src.len);
        let mut dst = self.new_cache();
        if len == 0 {
            return Ok(dst);
        }
        self.reserve(&mut dst, len)?;
        for l in 0..self.cfg.n_layer {
            let k = src.k[l]
                .narrow(2, 0, len)
                .and_then(|t| t.contiguous())
                .map_err(me)?;
            let v = src.v[l]
                .narrow(2, 0, len)
                .and_then(|t| t.contiguous())
                .map_err(me)?;
            dst.k[l].slice_set(&k, 2, 0).map_err(me)?;
            dst.v[l].slice_set(&v, 2, 0).map_err(me)?;
        }
        dst.len = len;
        Ok(dst)
    }

    /// Runs `tokens` after the cache's positions and returns the logits of the last one
    /// (`vocab_size` floats). Long inputs are processed in chunks of 512 positions.
    /// Cost: one forward pass per chunk.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, RuntimeError> {
        let mut last = None;
        for chunk in tokens.chunks(512) {
            last = self.forward_batch(&mut [(chunk, &mut *cache)])?.pop();
        }
        last.ok_or_else(|| RuntimeError::Model("forward with no tokens".into()))
    }

    /// One forward pass over several sequences at once: each brings its new tokens and its
    /// own cache; the result holds the logits of each sequence's last token, in order.
    /// The matrix products see all the sequences' tokens as one batch (the weights are
    /// read once for all of them), attention runs per sequence over its own cache.
    /// Cost: about one forward pass of the total token count; callers bound each
    /// sequence's tokens (a long prompt is best fed in chunks).
    pub fn forward_batch(
        &self,
        seqs: &mut [(&[u32], &mut KvCache)],
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        if seqs.is_empty() || seqs.iter().any(|(t, _)| t.is_empty()) {
            return Err(RuntimeError::Model("forward with no tokens".into()));
        }
        for (tokens, cache) in seqs.iter_mut() {
            let end = cache.len + tokens.len();
            if end > self.cfg.context_length {
                return Err(RuntimeError::ContextFull {
                    needed: end,
                    limit: self.cfg.context_length,
                });
            }
            if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
                return Err(RuntimeError::Model(format!(
                    "token id {bad} is outside the vocabulary ({})",
                    self.cfg.vocab_size
                )));
            }
            self.reserve(cache, end)?;
        }
        let logits = self.forward_seqs(seqs).map_err(me)?;
        (0..seqs.len())
            .map(|i| logits.get(i).and_then(|r| r.to_vec1::<f32>()).map_err(me))
            .collect()
    }

    /// Causal mask rows for `s` new positions after `p` cached ones, repeated for the
    /// `n_rep` query heads that share a key head.
    fn causal_mask(&self, n_rep: usize, s: usize, p: usize) -> candle_core::Result<Tensor> {
        let kv_len = p + s;
        let mut m = vec![0f32; n_rep * s * kv_len];
        for r in 0..n_rep {
            for i in 0..s {
                let row = (r * s + i) * kv_len;
                for j in (p + i + 1)..kv_len {
                    m[row + j] = f32::NEG_INFINITY;
                }
            }
        }
        Tensor::from_vec(m, (n_rep * s, kv_len), &self.device)
    }

    fn forward_seqs(&self, seqs: &mut [(&[u32], &mut KvCache)]) -> candle_core::Result<Tensor> {
        let c = &self.cfg;
        let all: Vec<u32> = seqs.iter().flat_map(|(t, _)| t.iter().copied()).collect();
        let total = all.len();
        let ids = Tensor::new(all.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids)?.reshape((1, total, c.n_embd))?;
        let n_rep = c.n_head / c.n_kv_head;
        // Per sequence: offset of its rows in the batch, count, cached positions, rotary
        // tables and causal mask.
        let mut parts = Vec::with_capacity(seqs.len());
        let mut off = 0;
        for (t, cache) in seqs.iter() {
            let (s, p) = (t.len(), cache.len);
            let mask = if s > 1 {
                Some(self.causal_mask(n_rep, s, p)?)
            } else {
                None
            };
            parts.push((
                off,
                s,
                p,
                self.cos.narrow(0, p, s)?,
                self.sin.narrow(0, p, s)?,
                mask,
            ));
            off += s;
        }
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        for (l, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps as f32)?;
            let (q, k, v) = match &layer.attn {
                Attn::Separate { q, k, v, bias } => {
                    let (mut q, mut k, mut v) = (q.forward(&h)?, k.forward(&h)?, v.forward(&h)?);
                    if let Some((bq, bk, bv)) = bias {
                        q = q.broadcast_add(bq)?;
                        k = k.broadcast_add(bk)?;
                        v = v.broadcast_add(bv)?;
                    }
                    (q, k, v)
                }
                Attn::Fused(qkv, bias) => {
                    let mut y = qkv.forward(&h)?;
                    if let Some(b) = bias {
                        y = y.broadcast_add(b)?;
                    }
                    let nq = c.n_head * c.head_dim;
                    let nk = c.n_kv_head * c.head_dim;
                    (
                        y.narrow(D::Minus1, 0, nq)?,
                        y.narrow(D::Minus1, nq, nk)?,
                        y.narrow(D::Minus1, nq + nk, nk)?,
                    )
                }
            };
            let mut ys = Vec::with_capacity(parts.len());
            for ((off, s, p, cos, sin, mask), (_, cache)) in parts.iter().zip(seqs.iter_mut()) {
                let (off, s, p) = (*off, *s, *p);
                let kv_len = p + s;
                let rows = |t: &Tensor, heads: usize| -> candle_core::Result<Tensor> {
                    let t = if parts.len() == 1 {
                        t.clone()
                    } else {
                        t.narrow(1, off, s)?
                    };
                    t.reshape((1, s, heads, c.head_dim))?
                        .transpose(1, 2)?
                        .contiguous()
                };
                let q = rows(&q, c.n_head)?;
                let k = rows(&k, c.n_kv_head)?;
                let v = rows(&v, c.n_kv_head)?;
                let (q, k) = match c.arch {
                    Arch::Llama => (
                        candle_nn::rotary_emb::rope_i(&q, cos, sin)?,
                        candle_nn::rotary_emb::rope_i(&k, cos, sin)?,
                    ),
                    // `Other` never reaches this model: `Arch::from_name` refuses it.
                    Arch::Qwen2 | Arch::Phi3 | Arch::Other => (
                        candle_nn::rotary_emb::rope(&q, cos, sin)?,
                        candle_nn::rotary_emb::rope(&k, cos, sin)?,
                    ),
                };
                cache.k[l].slice_set(&k, 2, p)?;
                cache.v[l].slice_set(&v, 2, p)?;
                // Views of the first `kv_len` positions (no copy: candle's matmul takes
                // the batch stride of the preallocated tensor).
                let k_all = cache.k[l].narrow(2, 0, kv_len)?;
                let v_all = cache.v[l].narrow(2, 0, kv_len)?;
                // Query heads sharing a key/value head become extra rows.
                let qg = q.reshape((1, c.n_kv_head, n_rep * s, c.head_dim))?;
                let att = (qg.matmul(&k_all.t()?)? * scale)?;
                let att = match mask {
                    Some(m) => att.broadcast_add(m)?,
                    None => att,
                };
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                let y = att.matmul(&v_all)?;
                ys.push(
                    y.reshape((1, c.n_head, s, c.head_dim))?
                        .transpose(1, 2)?
                        .reshape((1, s, c.n_embd))?,
                );
            }
            let y = if ys.len() == 1 {
                ys.pop().expect("one part")
            } else {
                Tensor::cat(&ys, 1)?
            };
            let y = layer.o.forward(&y)?;
            x = (x + y)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, c.rms_eps as f32)?;
            let a = match &layer.mlp {
                Mlp::Separate { gate, up } => {
                    (candle_nn::ops::silu(&gate.forward(&h)?)? * up.forward(&h)?)?
                }
                Mlp::Fused(gu) => {
                    let y = gu.forward(&h)?;
                    let n = y.dim(D::Minus1)? / 2;
                    (candle_nn::ops::silu(&y.narrow(D::Minus1, 0, n)?)?
                        * y.narrow(D::Minus1, n, n)?)?
                }
            };
            x = (x + layer.down.forward(&a)?)?;
        }
        let mut lasts = Vec::with_capacity(parts.len());
        for ((off, s, p, ..), (_, cache)) in parts.iter().zip(seqs.iter_mut()) {
            cache.len = p + s;
            lasts.push(x.narrow(1, off + s - 1, 1)?);
        }
        let last = if lasts.len() == 1 {
            lasts.pop().expect("one part")
        } else {
            Tensor::cat(&lasts, 1)?
        };
        let last = candle_nn::ops::rms_norm(&last, &self.norm, c.rms_eps as f32)?;
        self.output.forward(&last)?.squeeze(0)
    }
}

/// The rotary embedding's cosine and sine tables, `context_length x head_dim/2`: position
/// times each frequency (divided by the file's `rope_freqs` factors where it has them).
fn rope_tables(
    cfg: &ModelConfig,
    freq_factors: Option<&[f32]>,
    device: &Device,
) -> Result<(Tensor, Tensor), RuntimeError> {
    let (head_dim, ctx) = (cfg.head_dim, cfg.context_length);
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| {
            let f = 1.0 / cfg.rope_base.powf(2.0 * i as f32 / head_dim as f32);
            match freq_factors {
                Some(ff) => f / ff.get(i).copied().unwrap_or(1.0),
                None => f,
            }
        })
        .collect();
    let mut cos = Vec::with_capacity(ctx * half);
    let mut sin = Vec::with_capacity(ctx * half);
    for pos in 0..ctx {
        for &f in &inv {
            let a = pos as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let cos = Tensor::from_vec(cos, (ctx, half), device).map_err(me)?;
    let sin = Tensor::from_vec(sin, (ctx, half), device).map_err(me)?;
    Ok((cos, sin))
}
