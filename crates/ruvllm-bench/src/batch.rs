//! `batch`: mask throughput for a batch of sequences decoded together, over several threads.
//!
//! A server decodes many sequences at once; each step needs one mask per sequence. This
//! takes MaskBench files, builds `batch` matchers per file (each following one of the
//! file's valid instances, round-robin), and steps them all in lockstep: per step, the
//! masks of every live sequence are computed by `threads` workers (sequences split evenly),
//! then each sequence commits its next token. Reported: masks per second and the time of a
//! whole batch step (the latency a decoding loop would add).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, Whitespace};
use ruvllm_engine::{Constraint, Limits, Matcher, Vocabulary};

use crate::maskbench::FileCase;

/// Totals of a batch run.
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Files used (compiled, with at least one valid instance).
    pub files: usize,
    /// Masks computed.
    pub masks: usize,
    /// Seconds spent in batch steps.
    pub seconds: f64,
    /// Per batch step, µs.
    pub steps_us: Vec<f64>,
}

/// Runs one file's batch; returns without counting when the schema does not compile.
pub fn run_file(
    vocab: &Arc<Vocabulary>,
    case: &FileCase,
    batch: usize,
    threads: usize,
    st: &mut BatchStats,
) -> Result<()> {
    let opts = SchemaOptions {
        whitespace: Whitespace::Flexible(20),
        strict: false,
        any_order: true,
        plain_integers: false,
    };
    let Ok(g) = schema_to_grammar(&case.schema, &opts) else {
        return Ok(());
    };
    let Ok(c) = Constraint::new(&g, vocab.clone(), &Limits::default()) else {
        return Ok(());
    };
    let valid: Vec<&Vec<u32>> = case.tests.iter().filter(|t| t.0).map(|t| &t.2).collect();
    if valid.is_empty() {
        return Ok(());
    }
    st.files += 1;
    // (matcher, its token sequence, position, mask buffer)
    let mut seqs: Vec<(Matcher, &Vec<u32>, usize, Vec<u32>)> = (0..batch)
        .map(|i| {
            Ok((
                Matcher::new(&c)?,
                valid[i % valid.len()],
                0,
                vec![0u32; vocab.mask_words()],
            ))
        })
        .collect::<Result<_>>()?;
    loop {
        let live: Vec<usize> = (0..seqs.len())
            .filter(|&i| seqs[i].2 < seqs[i].1.len())
            .collect();
        if live.is_empty() {
            break;
        }
        let t0 = Instant::now();
        let per = seqs.len().div_ceil(threads.max(1));
        std::thread::scope(|s| {
            for chunk in seqs.chunks_mut(per) {
                s.spawn(move || {
                    for (m, toks, pos, mask) in chunk.iter_mut() {
                        if *pos < toks.len() {
                            let _ = m.compute_mask(mask);
                        }
                    }
                });
            }
        });
        let dt = t0.elapsed().as_secs_f64();
        st.seconds += dt;
        st.steps_us.push(dt * 1e6);
        st.masks += live.len();
        for (m, toks, pos, _) in seqs.iter_mut() {
            if *pos < toks.len() {
                if m.commit_token(toks[*pos]).is_err() {
                    *pos = toks.len();
                } else {
                    *pos += 1;
                }
            }
        }
    }
    Ok(())
}
