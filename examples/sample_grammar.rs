//! Draws random outputs that a grammar allows, token by token, through real masks: the loop
//! a decoder runs, with a seeded random choice standing in for the model.
//!
//! ```text
//! cargo run --release -p ruvllm-engine --example sample_grammar -- VOCAB GRAMMAR [COUNT]
//! ```
//! VOCAB is a tokenizer.json, GGUF model or .tiktoken file; GRAMMAR is a built-in name
//! (`json`, `csv`, ...) or a path to a `.gbnf` file.

use std::sync::Arc;

use ruvllm_engine::{Builtin, Constraint, Grammar, Limits, Matcher, Vocabulary};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: sample_grammar VOCAB GRAMMAR [COUNT]");
        std::process::exit(2);
    }
    let vocab = Arc::new(Vocabulary::from_file(&args[1])?);
    let limits = Limits::default();
    let grammar = if args[2].ends_with(".gbnf") {
        Grammar::from_gbnf(&std::fs::read_to_string(&args[2])?, &limits)?
    } else {
        Grammar::builtin(Builtin::from_name(&args[2])?, &limits)?
    };
    let count: usize = args.get(3).map(|c| c.parse()).transpose()?.unwrap_or(3);
    let constraint = Constraint::new(&grammar, vocab.clone(), &limits)?;
    let mut mask = vec![0u32; vocab.mask_words()];
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..count {
        let mut m = Matcher::new(&constraint)?;
        let mut out = Vec::new();
        let mut ended = false;
        for step in 0..64 {
            m.compute_mask(&mut mask)?;
            let allowed: Vec<u32> = (0..vocab.len() as u32)
                .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
                .collect();
            let eos = allowed
                .iter()
                .copied()
                .find(|t| vocab.eos_tokens().contains(t));
            // Stop when the output may end and we feel like it (or have gone on long enough).
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if let Some(e) = eos {
                if seed.is_multiple_of(3) || step > 40 || allowed.len() == 1 {
                    m.commit_token(e)?;
                    ended = true;
                    break;
                }
            }
            let text: Vec<u32> = allowed.into_iter().filter(|t| Some(*t) != eos).collect();
            if text.is_empty() {
                break;
            }
            let t = text[(seed >> 8) as usize % text.len()];
            m.commit_token(t)?;
            out.extend_from_slice(vocab.token_bytes(t));
        }
        let note = if ended {
            ""
        } else {
            "   (cut at 64 tokens: still incomplete)"
        };
        println!("{}{note}", String::from_utf8_lossy(&out));
    }
    Ok(())
}
