//! The engine handle: caches bounded by the caller's settings, shared between threads and
//! constraints, cleared on demand, and grammars that depend on no vocabulary.

mod common;

use std::sync::Arc;

use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
use ruvllm_engine::{Engine, EngineConfig, Grammar, Limits, Matcher};

/// A schema with its own keys and enum strings (so its lexemes are its own) around a
/// string value (shared by every schema).
fn schema(i: usize) -> Grammar {
    let s = serde_json::json!({
        "type": "object",
        "properties": {
            format!("key{i}"): {"type": "string"},
            format!("n{i}"): {"enum": [format!("v{i}a"), format!("v{i}b"), i]},
        },
        "required": [format!("key{i}"), format!("n{i}")],
    });
    schema_to_grammar(&s, &SchemaOptions::default()).unwrap()
}

/// Masks along `text` (tokenized with the vocabulary's encoder), each as a vector.
fn masks_along(c: &Arc<ruvllm_engine::Constraint>, text: &str) -> Vec<Vec<u32>> {
    let v = c.vocab();
    let ids = v.encoder().unwrap().encode(text).unwrap();
    let mut m = Matcher::new(c).unwrap();
    let mut mask = vec![0u32; v.mask_words()];
    let mut out = Vec::new();
    for &t in &ids {
        m.compute_mask(&mut mask).unwrap();
        out.push(mask.clone());
        m.commit_token(t).unwrap();
    }
    m.compute_mask(&mut mask).unwrap();
    out.push(mask);
    out
}

fn text(i: usize) -> String {
    format!(r#"{{"key{i}": "some text here", "n{i}": "v{i}b"}}"#)
}

/// With small bounds, the caches turn generations and drop what later grammars no longer
/// use: what they keep stays near the bounds however many schemas pass through, and
/// masks stay exact (equal to those of a fresh engine) before and after eviction.
#[test]
fn small_bounds_evict_and_masks_stay_exact() {
    let vocab = common::llama3();
    // Lexeme counts drive the compile cache's turns; bytes drive the table store's.
    let config = EngineConfig {
        max_cached_lexemes: 64,
        max_table_lexemes: 4096,
        max_table_bytes: 256 << 10,
        ..EngineConfig::default()
    };
    let engine = Engine::with_config(vocab.clone(), config.clone());
    let limits = Limits::default();
    let mut most = ruvllm_engine::CacheUsage::default();
    for i in 0..60 {
        let c = engine.constraint(&schema(i), &limits).unwrap();
        let got = masks_along(&c, &text(i));
        if i % 8 == 0 {
            let fresh = Engine::new(vocab.clone())
                .constraint(&schema(i), &limits)
                .unwrap();
            assert_eq!(got, masks_along(&fresh, &text(i)), "schema {i}");
        }
        drop(c);
        let u = engine.usage();
        most.lexemes = most.lexemes.max(u.lexemes);
        most.table_lexemes = most.table_lexemes.max(u.table_lexemes);
        most.table_bytes = most.table_bytes.max(u.table_bytes);
    }
    let u = engine.usage();
    eprintln!("most held: {most:?}; now: {u:?}");
    assert!(u.lexeme_turns >= 2 && u.table_turns >= 2, "{u:?}");
    // Each generation holds half a bound; one insertion may come after the check.
    assert!(most.lexemes <= 64 + 1, "{most:?}");
    // Tables are counted when built: a generation turns at half the byte bound, past it
    // by at most one schema's tables (a few dense tables of 16 KiB here).
    assert!(most.table_bytes <= (256 << 10) + (128 << 10), "{most:?}");
    // Clearing empties both caches.
    engine.clear();
    let u = engine.usage();
    assert_eq!(
        (u.lexemes, u.table_lexemes, u.table_bytes),
        (0, 0, 0),
        "{u:?}"
    );
}

/// Constraints of one engine share token tables: a second schema on the same string
/// lexeme builds fewer tables than the first; a constraint keeps its tables after the
/// engine is cleared.
#[test]
fn constraints_share_tables_and_keep_theirs() {
    let engine = Engine::new(common::llama3());
    let limits = Limits::default();
    let a = engine.constraint(&schema(0), &limits).unwrap();
    let first = masks_along(&a, &text(0));
    let (n0, _) = engine.table_build_totals();
    let b = engine.constraint(&schema(1), &limits).unwrap();
    masks_along(&b, &text(1));
    let (n1, _) = engine.table_build_totals();
    assert!(
        n1 - n0 < n0,
        "the second schema built {} tables, the first {n0}",
        n1 - n0
    );
    engine.clear();
    assert_eq!(masks_along(&a, &text(0)), first);
    assert_eq!(
        engine.table_build_totals().0,
        n1,
        "a live constraint rebuilt its tables"
    );
}

/// A compiled grammar depends on no vocabulary: compiled in one engine, bound in engines
/// of two vocabularies, it gives each the masks of a grammar compiled there.
#[test]
fn compiled_grammars_bind_to_any_vocabulary() {
    let limits = Limits::default();
    let llama = Engine::new(common::llama3());
    let qwen = Engine::new(Arc::new(
        ruvllm_engine::Vocabulary::from_file(common::tokenizer("qwen2_5")).unwrap(),
    ));
    let g = llama.compile(&schema(3), &limits).unwrap();
    for e in [&llama, &qwen] {
        let bound = e.bind(g.clone(), &limits);
        let own = e.constraint(&schema(3), &limits).unwrap();
        assert_eq!(masks_along(&bound, &text(3)), masks_along(&own, &text(3)));
    }
}

/// One engine used from two threads at once (compiling, binding and computing first
/// masks concurrently) gives the masks one thread gives alone.
#[test]
fn threads_share_one_engine() {
    let vocab = common::llama3();
    let limits = Limits::default();
    let alone: Vec<_> = (0..6)
        .map(|i| {
            let c = Engine::new(vocab.clone())
                .constraint(&schema(i), &limits)
                .unwrap();
            masks_along(&c, &text(i))
        })
        .collect();
    let engine = Engine::new(vocab);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|k| {
                let engine = engine.clone();
                let limits = limits.clone();
                s.spawn(move || {
                    (0..6)
                        .filter(|i| i % 2 == k || *i < 2)
                        .map(|i| {
                            let c = engine.constraint(&schema(i), &limits).unwrap();
                            (i, masks_along(&c, &text(i)))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            for (i, got) in h.join().unwrap() {
                assert_eq!(got, alone[i], "schema {i}");
            }
        }
    });
}
