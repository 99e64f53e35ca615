//! Our transformer against candle-transformers' quantized Llama on the default model: the
//! same GGUF file must give the same next-token logits (prompt, then step by step).

use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use ruvllm_runtime::{LoadOptions, Model};

fn model_path() -> PathBuf {
    let p = std::env::var("RUVLLM_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    p
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn argmax(a: &[f32]) -> usize {
    a.iter()
        .enumerate()
        .max_by(|x, y| x.1.total_cmp(y.1))
        .map(|x| x.0)
        .unwrap()
}

#[test]
fn logits_match_candle_transformers_quantized_llama() {
    let path = model_path();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut reference = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
        content,
        &mut f,
        &Device::Cpu,
    )
    .unwrap();
    let ours = Model::load(
        &path,
        &LoadOptions {
            requantize: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut cache = ours.new_cache();
    // The ChatML prompt of "What is the capital of France?" with the default system message.
    let prompt: Vec<u32> = vec![
        1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411,
        407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1,
        520, 9531, 198,
    ];
    let x = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let r = reference
        .forward(&x, 0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let o = ours.forward(&prompt, &mut cache).unwrap();
    assert_eq!(argmax(&r), argmax(&o));
    assert!(
        max_abs_diff(&r, &o) < 0.1,
        "prompt logits differ by {}",
        max_abs_diff(&r, &o)
    );
    let mut t = argmax(&o) as u32;
    for pos in prompt.len()..prompt.len() + 8 {
        let x = Tensor::new(&[t], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let r = reference
            .forward(&x, pos)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let o = ours.forward(&[t], &mut cache).unwrap();
        assert!(
            max_abs_diff(&r, &o) < 0.1,
            "step logits differ by {}",
            max_abs_diff(&r, &o)
        );
        assert_eq!(argmax(&r), argmax(&o));
        t = argmax(&o) as u32;
    }
}
