//! Architectures we have no weights for, tested with tiny random-weight GGUF files written
//! here: our transformer must give the same logits as candle-transformers' quantized
//! Qwen2 and Phi-3 on the same file, and the backend must load and decode them under a
//! constraint (GGUF tokenizer rebuilt from metadata, chat template, EOS).

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value as GValue};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use ruvllm_runtime::{
    BackendOptions, CandleBackend, GenerateParams, LlmBackend, LoadOptions, Model,
    OutputConstraint, Prompt,
};

const EMBD: usize = 64;
const HEADS: usize = 4;
const KV: usize = 2;
const FF: usize = 128;
const LAYERS: usize = 2;

fn vocab() -> Vec<String> {
    // GPT-2's byte-to-character map, then three specials.
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut map = vec![String::new(); 256];
    for (b, c) in bs.iter().zip(&cs) {
        map[*b as usize] = char::from_u32(*c).unwrap().to_string();
    }
    map.extend(["<|im_start|>", "<|im_end|>", "<|endoftext|>"].map(String::from));
    map
}

fn rand(shape: (usize, usize), seed: u64) -> Tensor {
    // Deterministic pseudo-random weights, small enough to keep activations sane.
    let n = shape.0 * shape.1;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32 * 0.4
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn q(t: &Tensor, d: GgmlDType) -> QTensor {
    QTensor::quantize(t, d).unwrap()
}

/// Writes a tiny model of `arch` (`qwen2` or `phi3`) and returns its path.
fn write_model(arch: &str, dir: &Path) -> PathBuf {
    let toks = vocab();
    let nv = toks.len();
    let hd = EMBD / HEADS;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut seed = 1;
    let mut w = |name: String, shape: (usize, usize), dt: GgmlDType| {
        seed += 1;
        tensors.push((name, q(&rand(shape, seed), dt)));
    };
    let m = GgmlDType::Q4_1;
    w("token_embd.weight".into(), (nv, EMBD), GgmlDType::Q8_0);
    w("output.weight".into(), (nv, EMBD), GgmlDType::Q8_0);
    for l in 0..LAYERS {
        let p = format!("blk.{l}");
        if arch == "phi3" {
            w(
                format!("{p}.attn_qkv.weight"),
                ((HEADS + 2 * KV) * hd, EMBD),
                m,
            );
            w(format!("{p}.ffn_up.weight"), (2 * FF, EMBD), m);
        } else {
            w(format!("{p}.attn_q.weight"), (HEADS * hd, EMBD), m);
            w(format!("{p}.attn_k.weight"), (KV * hd, EMBD), m);
            w(format!("{p}.attn_v.weight"), (KV * hd, EMBD), m);
            w(format!("{p}.ffn_gate.weight"), (FF, EMBD), m);
            w(format!("{p}.ffn_up.weight"), (FF, EMBD), m);
        }
        w(format!("{p}.attn_output.weight"), (EMBD, HEADS * hd), m);
        w(format!("{p}.ffn_down.weight"), (EMBD, FF), m);
    }
    let ones = Tensor::ones(EMBD, candle_core::DType::F32, &Device::Cpu).unwrap();
    let f32q = |t: &Tensor| QTensor::quantize(t, GgmlDType::F32).unwrap();
    tensors.push(("output_norm.weight".into(), f32q(&ones)));
    for l in 0..LAYERS {
        tensors.push((format!("blk.{l}.attn_norm.weight"), f32q(&ones)));
        tensors.push((format!("blk.{l}.ffn_norm.weight"), f32q(&ones)));
        if arch == "qwen2" {
            for (x, n) in [("q", HEADS * hd), ("k", KV * hd), ("v", KV * hd)] {
                let b = rand((1, n), 100 + l as u64).flatten_all().unwrap();
                tensors.push((format!("blk.{l}.attn_{x}.bias"), f32q(&b)));
            }
        }
    }
    let k = |s: &str| format!("{arch}.{s}");
    let md: Vec<(String, GValue)> = vec![
        ("general.architecture".into(), GValue::String(arch.into())),
        (k("block_count"), GValue::U32(LAYERS as u32)),
        (k("embedding_length"), GValue::U32(EMBD as u32)),
        (k("feed_forward_length"), GValue::U32(FF as u32)),
        (k("attention.head_count"), GValue::U32(HEADS as u32)),
        (k("attention.head_count_kv"), GValue::U32(KV as u32)),
        (k("context_length"), GValue::U32(256)),
        (k("rope.dimension_count"), GValue::U32(hd as u32)),
        (k("rope.freq_base"), GValue::F32(10_000.0)),
        (k("attention.layer_norm_rms_epsilon"), GValue::F32(1e-5)),
        ("tokenizer.ggml.model".into(), GValue::String("gpt2".into())),
        (
            "tokenizer.ggml.pre".into(),
            GValue::String("default".into()),
        ),
        (
            "tokenizer.ggml.tokens".into(),
            GValue::Array(toks.iter().map(|t| GValue::String(t.clone())).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            GValue::Array(
                (0..nv)
                    .map(|i| GValue::I32(if i < 256 { 1 } else { 3 }))
                    .collect(),
            ),
        ),
        ("tokenizer.ggml.merges".into(), GValue::Array(vec![])),
        ("tokenizer.ggml.eos_token_id".into(), GValue::U32(257)),
        ("tokenizer.ggml.bos_token_id".into(), GValue::U32(256)),
    ];
    let path = dir.join(format!("tiny-{arch}.gguf"));
    let mut f = std::fs::File::create(&path).unwrap();
    let md_refs: Vec<(&str, &GValue)> = md.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(a, b)| (a.as_str(), b)).collect();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
    path
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn reference_logits(arch: &str, path: &Path, steps: &[&[u32]]) -> Vec<Vec<f32>> {
    let mut f = std::fs::File::open(path).unwrap();
    let c = gguf_file::Content::read(&mut f).unwrap();
    let dev = Device::Cpu;
    type Forward = Box<dyn FnMut(&Tensor, usize) -> candle_core::Result<Tensor>>;
    let mut forward: Forward = match arch {
        "qwen2" => {
            let mut m = candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(
                c, &mut f, &dev,
            )
            .unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        }
        _ => {
            let mut m = candle_transformers::models::quantized_phi3::ModelWeights::from_gguf(
                false, c, &mut f, &dev,
            )
            .unwrap();
            Box::new(move |x, pos| m.forward(x, pos))
        }
    };
    let mut out = Vec::new();
    let mut pos = 0;
    for s in steps {
        let x = Tensor::new(*s, &dev).unwrap().unsqueeze(0).unwrap();
        let l = forward(&x, pos).unwrap();
        out.push(l.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        pos += s.len();
    }
    out
}

fn check_arch(arch: &str) {
    let dir = std::env::temp_dir().join(format!("ruvllm-tiny-{arch}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = write_model(arch, &dir);
    let steps: [&[u32]; 3] = [&[72, 101, 108, 108, 111], &[32], &[119]];
    let want = reference_logits(arch, &path, &steps);
    // Same weights format: logits agree closely.
    for requantize in [None, Some(GgmlDType::Q8_0)] {
        let ours = Model::load(
            &path,
            &LoadOptions {
                requantize,
                ..Default::default()
            },
        )
        .unwrap();
        let mut cache = ours.new_cache();
        let tol = if requantize.is_none() { 1e-3 } else { 0.25 };
        for (s, w) in steps.iter().zip(&want) {
            let got = ours.forward(s, &mut cache).unwrap();
            let d = max_abs_diff(&got, w);
            assert!(
                d < tol,
                "{arch} requantize={requantize:?}: logits differ by {d}"
            );
        }
    }
    // The backend: tokenizer from metadata, ChatML fallback template, constrained decode.
    let b = CandleBackend::load(&path, &BackendOptions::default()).unwrap();
    let g = b
        .complete(
            &Prompt::User("pick".into()),
            &GenerateParams {
                constraint: Some(OutputConstraint::Choice(vec![
                    "alpha".into(),
                    "beta".into(),
                ])),
                seed: Some(3),
                max_tokens: 20,
                ..Default::default()
            },
            &mut |_| true,
        )
        .unwrap();
    assert!(
        g.text == "alpha" || g.text == "beta",
        "{arch}: {:?}",
        g.text
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn qwen2_matches_candle_transformers() {
    check_arch("qwen2");
}

#[test]
fn phi3_matches_candle_transformers() {
    check_arch("phi3");
}

#[test]
fn hostile_headers_are_refused_without_allocating() {
    let dir = std::env::temp_dir().join(format!("ruvllm-tiny-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (key, value) in [
        ("llama.block_count", u32::MAX),
        ("llama.embedding_length", u32::MAX),
        ("llama.attention.head_count", 0),
    ] {
        let mut md: Vec<(String, GValue)> = vec![
            (
                "general.architecture".into(),
                GValue::String("llama".into()),
            ),
            ("llama.block_count".into(), GValue::U32(2)),
            ("llama.embedding_length".into(), GValue::U32(64)),
            ("llama.attention.head_count".into(), GValue::U32(4)),
        ];
        for (k, v) in md.iter_mut() {
            if k == key {
                *v = GValue::U32(value);
            }
        }
        let path = dir.join("hostile.gguf");
        let mut f = std::fs::File::create(&path).unwrap();
        let refs: Vec<(&str, &GValue)> = md.iter().map(|(a, b)| (a.as_str(), b)).collect();
        gguf_file::write(&mut f, &refs, &[]).unwrap();
        drop(f);
        let e = Model::load(&path, &LoadOptions::default()).unwrap_err();
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
