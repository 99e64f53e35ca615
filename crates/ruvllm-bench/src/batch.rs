//! `batch`: mask throughput for a batch of sequences decoded together, over several threads.
//!
//! A server decodes many sequences at once; each step needs one mask per sequence. This
//! takes MaskBench files, builds `batch` matchers per file (each following one of the
//! file's valid instances, round-robin), and steps them all in lockstep: per step, the
//! masks of every live sequence are computed by `threads` workers (sequences split evenly;
//! the workers live as long as the file's batch and meet at spinning barriers),
//! then each sequence commits its next token. Reported: masks per second and the time of a
//! whole batch step (the latency a decoding loop would add).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Result;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, Whitespace};
use ruvllm_engine::{Engine, Limits, Matcher};

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
    engine: &Engine,
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
        unique_keys: false,
        closed_objects: false,
        number_digits: None,
        portable_values: false,
        refuse_unknown_formats: false,
        annotate_openapi_formats: false,
        registry: None,
        grammar_only: false,
    };
    let Ok(g) = schema_to_grammar(&case.schema, &opts) else {
        return Ok(());
    };
    let Ok(c) = engine.constraint(&g, &Limits::default()) else {
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
                vec![0u32; engine.vocab().mask_words()],
            ))
        })
        .collect::<Result<_>>()?;
    // The calling thread works on the first chunk; `threads - 1` helpers, started once per
    // file, take the others. Steps are separated by spinning barriers (a server keeps its
    // workers too; spawning threads or waking them through the kernel every step would
    // cost as much as the masks themselves).
    let mut n = seqs.iter().filter(|x| !x.1.is_empty()).count();
    let per = seqs.len().div_ceil(threads.max(1));
    let (first, rest) = seqs.split_at_mut(per.min(batch));
    let parties = 1 + rest.chunks(per).count();
    let (start, masked, committed) = (
        SpinBarrier::new(parties),
        SpinBarrier::new(parties),
        SpinBarrier::new(parties),
    );
    let done = AtomicBool::new(false);
    let live = AtomicUsize::new(0);
    type Seq<'a> = (Matcher, &'a Vec<u32>, usize, Vec<u32>);
    let mask_all = |chunk: &mut [Seq]| {
        for (m, toks, pos, mask) in chunk.iter_mut() {
            if *pos < toks.len() {
                let _ = m.compute_mask(mask);
            }
        }
    };
    let commit_all = |chunk: &mut [Seq]| {
        let mut n = 0;
        for (m, toks, pos, _) in chunk.iter_mut() {
            if *pos < toks.len() {
                if m.commit_token(toks[*pos]).is_err() {
                    *pos = toks.len();
                } else {
                    *pos += 1;
                }
            }
            n += (*pos < toks.len()) as usize;
        }
        live.fetch_add(n, Ordering::AcqRel);
    };
    std::thread::scope(|s| {
        for chunk in rest.chunks_mut(per) {
            let (start, masked, committed, done) = (&start, &masked, &committed, &done);
            s.spawn(move || loop {
                start.wait();
                if done.load(Ordering::Acquire) {
                    break;
                }
                mask_all(chunk);
                masked.wait();
                commit_all(chunk);
                committed.wait();
            });
        }
        while n > 0 {
            let t0 = Instant::now();
            start.wait();
            mask_all(first);
            masked.wait();
            let dt = t0.elapsed().as_secs_f64();
            st.seconds += dt;
            st.steps_us.push(dt * 1e6);
            st.masks += n;
            commit_all(first);
            committed.wait();
            n = live.swap(0, Ordering::AcqRel);
        }
        done.store(true, Ordering::Release);
        start.wait();
    });
    Ok(())
}

/// A barrier for `n` threads that spins (then yields) instead of sleeping in the kernel:
/// a batch step is a few hundred microseconds, a futex wake-up tens.
struct SpinBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(n: usize) -> Self {
        SpinBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Returns once all `n` threads have called it.
    fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            if spins < 1 << 12 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}
