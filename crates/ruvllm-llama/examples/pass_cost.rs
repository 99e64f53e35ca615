//! What a forward pass costs by the tokens it reads: after a 16-token prompt, passes of
//! `k` tokens each (k = 1, 2, 3, 4, 6, 8, 16), the median milliseconds per pass, and a
//! prompt read again after a pass of another shape (llama.cpp rebuilds its graph when the
//! batch shape changes). `cargo run --release -p ruvllm-llama --example pass_cost --
//! MODEL [THREADS]`.
use std::sync::Arc;
use std::time::Instant;

use ruvllm_llama::{Context, ContextOptions, Item, Model};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: pass_cost MODEL [THREADS]")?;
    let threads: u32 = args.get(2).map_or(Ok(2), |s| s.parse())?;
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
    let text = "The history of the city begins with a small village on a river and";
    let mut prompt: Vec<u32> = model.tokenize(text, true, false)?;
    prompt.truncate(16);
    let read = |ctx: &mut Context, tokens: &[u32]| -> Result<f64, ruvllm_llama::Error> {
        let t0 = Instant::now();
        let pos = ctx.seq_len(0);
        ctx.read(&Item {
            seq: 0,
            pos,
            tokens,
            logits: true,
        })?;
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    };
    for k in [1usize, 2, 3, 4, 6, 8, 16] {
        let mut times = Vec::new();
        for _ in 0..5 {
            ctx.clear_seq(0)?;
            read(&mut ctx, &prompt)?;
            for _ in 0..8 {
                let toks: Vec<u32> = prompt.iter().cycle().take(k).copied().collect();
                times.push(read(&mut ctx, &toks)?);
            }
        }
        println!("{k:>2} tokens per pass: {:.2} ms", median(times));
    }
    let (mut same, mut after) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        ctx.clear_seq(0)?;
        read(&mut ctx, &prompt)?;
        ctx.clear_seq(0)?;
        same.push(read(&mut ctx, &prompt)?);
        read(&mut ctx, &prompt[..1])?;
        ctx.clear_seq(0)?;
        after.push(read(&mut ctx, &prompt)?);
    }
    println!(
        "16-token prompt after a prompt: {:.2} ms; after a 1-token pass: {:.2} ms",
        median(same),
        median(after)
    );
    Ok(())
}
