//! Raw decode speed through the wrapper: a 16-token prompt, then N single-token decode
//! calls feeding back the argmax. `cargo run --release -p ruvllm-llama --example
//! decode_speed -- MODEL [N] [THREADS]`.
use std::sync::Arc;
use std::time::Instant;

use ruvllm_llama::{Context, ContextOptions, Item, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: decode_speed MODEL [N] [THREADS]")?;
    let n: usize = args.get(2).map_or(Ok(128), |s| s.parse())?;
    let threads: u32 = args.get(3).map_or(Ok(2), |s| s.parse())?;
    let model = Arc::new(Model::load(std::path::Path::new(path))?);
    let mut ctx = Context::new(
        model.clone(),
        &ContextOptions {
            n_ctx_seq: 4096,
            n_batch: 512,
            n_seq_max: 1,
            n_threads: threads,
        },
    )?;
    let prompt: Vec<u32> = model.tokenize(
        "The history of the city begins with a small village on a river",
        true,
        false,
    )?;
    let t0 = Instant::now();
    let mut rows = ctx.decode(&[Item {
        seq: 0,
        pos: 0,
        tokens: &prompt,
        logits: true,
    }])?;
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..n {
        let row = &rows[0];
        let t = (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap_or(0) as u32;
        let pos = ctx.seq_len(0);
        rows = ctx.decode(&[Item {
            seq: 0,
            pos,
            tokens: &[t],
            logits: true,
        }])?;
    }
    let decode = t1.elapsed().as_secs_f64();
    println!(
        "{}: prompt {} tokens {:.1} tok/s, decode {n} tokens {:.1} tok/s",
        model.description(),
        prompt.len(),
        prompt.len() as f64 / prefill,
        n as f64 / decode
    );
    Ok(())
}
