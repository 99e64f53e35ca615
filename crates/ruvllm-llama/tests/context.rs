//! The wrapper against the real default model: batched decode equals one-by-one decode,
//! shared prefixes and truncation give the logits a fresh read gives, bad calls are
//! errors (never a crash).

use std::path::PathBuf;
use std::sync::Arc;

use ruvllm_llama::{Context, ContextOptions, Error, Item, Model};

fn model() -> Arc<Model> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    Arc::new(Model::load(&p).expect("the default model loads"))
}

fn ctx(m: &Arc<Model>, seqs: u32) -> Context {
    Context::new(
        m.clone(),
        &ContextOptions {
            n_ctx_seq: 512,
            n_batch: 64,
            n_seq_max: seqs,
            n_threads: 2,
        },
    )
    .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROMPT: [u32; 12] = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 2, 198, 1];

#[test]
fn batches_prefixes_and_truncation_agree() {
    let m = model();
    assert_eq!(m.n_vocab(), 49152);
    assert!(m.can_truncate());
    let mut c = ctx(&m, 3);
    // Sequence 0 reads the prompt whole; sequence 1 in two calls; both give the same
    // next-token logits.
    let a = c
        .decode(&[Item {
            seq: 0,
            pos: 0,
            tokens: &PROMPT,
            logits: true,
        }])
        .unwrap();
    c.decode(&[Item {
        seq: 1,
        pos: 0,
        tokens: &PROMPT[..5],
        logits: false,
    }])
    .unwrap();
    let b = c
        .decode(&[Item {
            seq: 1,
            pos: 5,
            tokens: &PROMPT[5..],
            logits: true,
        }])
        .unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].len(), 49152);
    assert!(max_diff(&a[0], &b[0]) < 1e-2, "{}", max_diff(&a[0], &b[0]));
    // Sequence 2 shares the first 11 positions of 0 and reads the last token itself.
    c.share_prefix(0, 2, 11).unwrap();
    assert_eq!(c.seq_len(2), 11);
    let s = c
        .decode(&[Item {
            seq: 2,
            pos: 11,
            tokens: &PROMPT[11..],
            logits: true,
        }])
        .unwrap();
    assert!(max_diff(&a[0], &s[0]) < 1e-2);
    // Truncating 0 by two tokens and reading them again gives the same logits; both
    // sequences in one batch.
    c.truncate(0, 10).unwrap();
    c.truncate(1, 10).unwrap();
    let r = c
        .decode(&[
            Item {
                seq: 0,
                pos: 10,
                tokens: &PROMPT[10..],
                logits: true,
            },
            Item {
                seq: 1,
                pos: 10,
                tokens: &PROMPT[10..],
                logits: true,
            },
        ])
        .unwrap();
    assert_eq!(r.len(), 2);
    assert!(max_diff(&a[0], &r[0]) < 1e-2);
    assert!(max_diff(&a[0], &r[1]) < 1e-2);
    // Items out of sequence order come back in item order (llama.cpp sees them sorted).
    c.truncate(0, 11).unwrap();
    c.truncate(1, 10).unwrap();
    let r = c
        .decode(&[
            Item {
                seq: 1,
                pos: 10,
                tokens: &[2683, 359],
                logits: true,
            },
            Item {
                seq: 0,
                pos: 11,
                tokens: &PROMPT[11..],
                logits: true,
            },
        ])
        .unwrap();
    assert!(max_diff(&a[0], &r[1]) < 1e-2);
    assert!(max_diff(&a[0], &r[0]) > 1e-1);
    // `read` keeps the row in place: the same logits, writable, gone after the next
    // decode and after a read that asks for none.
    c.clear_seq(2).unwrap();
    c.read(&Item {
        seq: 2,
        pos: 0,
        tokens: &PROMPT,
        logits: true,
    })
    .unwrap();
    let row = c.last_logits().expect("the row read asked for");
    assert_eq!(row.len(), 49152);
    assert!(max_diff(&a[0], row) < 1e-2);
    row[0] = f32::NEG_INFINITY;
    assert_eq!(c.last_logits().unwrap()[0], f32::NEG_INFINITY);
    c.truncate(2, 11).unwrap();
    c.read(&Item {
        seq: 2,
        pos: 11,
        tokens: &PROMPT[11..],
        logits: false,
    })
    .unwrap();
    assert!(c.last_logits().is_none());
    // A read longer than the batch (64) runs in chunks; the row is the last chunk's.
    c.clear_seq(2).unwrap();
    let long: Vec<u32> = PROMPT.iter().cycle().take(150).copied().collect();
    c.read(&Item {
        seq: 2,
        pos: 0,
        tokens: &long,
        logits: true,
    })
    .unwrap();
    let kept = c.last_logits().unwrap().to_vec();
    c.clear_seq(2).unwrap();
    let whole = c
        .decode(&[Item {
            seq: 2,
            pos: 0,
            tokens: &long,
            logits: true,
        }])
        .unwrap();
    assert!(c.last_logits().is_none());
    assert!(max_diff(&whole[0], &kept) < 1e-2);
}

#[test]
fn bad_calls_are_errors() {
    let m = model();
    let mut c = ctx(&m, 2);
    let bad = |r: Result<Vec<Vec<f32>>, Error>| match r {
        Err(Error::Invalid(msg)) => msg,
        other => panic!("expected Invalid, got {other:?}"),
    };
    let msg = bad(c.decode(&[Item {
        seq: 0,
        pos: 0,
        tokens: &[49152],
        logits: true,
    }]));
    assert!(msg.contains("outside the vocabulary"), "{msg}");
    let msg = bad(c.decode(&[Item {
        seq: 2,
        pos: 0,
        tokens: &[1],
        logits: true,
    }]));
    assert!(msg.contains("outside the context"), "{msg}");
    let msg = bad(c.decode(&[Item {
        seq: 0,
        pos: 3,
        tokens: &[1],
        logits: true,
    }]));
    assert!(msg.contains("must start there"), "{msg}");
    let msg = bad(c.decode(&[
        Item {
            seq: 0,
            pos: 0,
            tokens: &[1],
            logits: true,
        },
        Item {
            seq: 0,
            pos: 0,
            tokens: &[1],
            logits: true,
        },
    ]));
    assert!(msg.contains("twice"), "{msg}");
    let long = vec![1u32; 600];
    let msg = bad(c.decode(&[Item {
        seq: 0,
        pos: 0,
        tokens: &long,
        logits: true,
    }]));
    assert!(msg.contains("the context has 512"), "{msg}");
    assert!(c.share_prefix(0, 1, 5).is_err());
    assert!(m.piece(49152, false).is_err());
    assert!(!m.piece(28, false).unwrap().is_empty());
}

#[test]
fn bad_files_are_load_errors() {
    let dir = std::env::temp_dir().join(format!("ruvllm-llama-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"GGUF\x03\x00\x00\x00garbage").unwrap();
    for p in [junk.clone(), dir.join("missing.gguf"), dir.clone()] {
        match Model::load(&p) {
            Err(Error::Load { path, reason }) => {
                assert!(path.contains("ruvllm-llama"), "{path}");
                assert!(!reason.is_empty());
            }
            other => panic!("{}: expected a load error, got {other:?}", p.display()),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
