//! What embedding the engine costs a program, step by step: loading a vocabulary,
//! creating the engine handle, compiling a schema (with a cold and a warm lexeme cache),
//! binding it to the vocabulary, and the first mask (cold: every token table built; warm:
//! the tables of an earlier constraint on the same lexemes). Needs
//! `scripts/fetch-assets.sh` (the Llama 3.1 tokenizer).
//!
//! `cargo bench -p ruvllm-engine --bench embed`; CI only compiles it (`clippy
//! --all-targets`). docs/PERFORMANCE.md has the figures.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
use ruvllm_engine::{Engine, Grammar, Limits, Matcher, Vocabulary};

const TOKENIZER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../assets/tokenizers/llama3_1/tokenizer.json"
);

/// The person schema both engine benches use.
const SCHEMA: &str = include_str!("person.schema.json");

fn grammar() -> Grammar {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    schema_to_grammar(&schema, &SchemaOptions::default()).unwrap()
}

fn benches(c: &mut Criterion) {
    let mut c = c.benchmark_group("embed");
    c.sample_size(10);
    c.bench_function("load vocabulary (tokenizer.json, 128k tokens)", |b| {
        b.iter(|| Vocabulary::from_file(TOKENIZER).unwrap())
    });
    let vocab = Arc::new(Vocabulary::from_file(TOKENIZER).expect("run scripts/fetch-assets.sh"));
    let limits = Limits::default();
    let g = grammar();
    c.bench_function("create engine", |b| b.iter(|| Engine::new(vocab.clone())));
    c.bench_function("compile schema, cold engine", |b| {
        b.iter_batched(
            || Engine::new(vocab.clone()),
            |e| e.compile(&g, &limits).unwrap(),
            BatchSize::PerIteration,
        )
    });
    let warm = Engine::new(vocab.clone());
    let compiled = warm.compile(&g, &limits).unwrap();
    let mut mask = vec![0u32; vocab.mask_words()];
    Matcher::new(&warm.bind(compiled.clone(), &limits))
        .unwrap()
        .compute_mask(&mut mask)
        .unwrap();
    c.bench_function("compile schema, warm engine", |b| {
        b.iter(|| warm.compile(&g, &limits).unwrap())
    });
    c.bench_function("bind", |b| b.iter(|| warm.bind(compiled.clone(), &limits)));
    c.bench_function("first mask, cold engine", |b| {
        b.iter_batched(
            || {
                let e = Engine::new(vocab.clone());
                Matcher::new(&e.bind(compiled.clone(), &limits)).unwrap()
            },
            |mut m| m.compute_mask(&mut mask).unwrap(),
            BatchSize::PerIteration,
        )
    });
    // Inside a string: the first mask builds the table of a string state (most of the
    // vocabulary), the most expensive table a schema has.
    let enc = vocab.encoder().expect("an encoder").clone();
    let prefix = enc.encode(r#"{"name": "Ada Lo"#).unwrap();
    let at_string = |c: &std::sync::Arc<ruvllm_engine::Constraint>| {
        let mut m = Matcher::new(c).unwrap();
        for &t in &prefix {
            m.commit_token(t).unwrap();
        }
        m
    };
    c.bench_function("first mask inside a string, cold engine", |b| {
        b.iter_batched(
            || at_string(&Engine::new(vocab.clone()).bind(compiled.clone(), &limits)),
            |mut m| m.compute_mask(&mut mask).unwrap(),
            BatchSize::PerIteration,
        )
    });
    at_string(&warm.bind(compiled.clone(), &limits))
        .compute_mask(&mut mask)
        .unwrap();
    c.bench_function("first mask inside a string, warm engine", |b| {
        b.iter_batched(
            || at_string(&warm.bind(compiled.clone(), &limits)),
            |mut m| m.compute_mask(&mut mask).unwrap(),
            BatchSize::PerIteration,
        )
    });
    c.bench_function("first mask, warm engine", |b| {
        b.iter_batched(
            || Matcher::new(&warm.bind(compiled.clone(), &limits)).unwrap(),
            |mut m| m.compute_mask(&mut mask).unwrap(),
            BatchSize::PerIteration,
        )
    });
    c.finish();
}

criterion_group!(embed, benches);
criterion_main!(embed);
