//! Hot paths: schema compile (time to first mask), a mask inside a string (a short one and
//! one with a large `maxLength`, a counted lexeme), a mask at a key boundary, and a commit.
//! Needs `scripts/fetch-assets.sh` (the Llama 3.1 tokenizer).
//!
//! `cargo bench -p ruvllm-engine --bench mask`; CI only compiles it (`clippy --all-targets`).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
use ruvllm_engine::{Constraint, Limits, Matcher, Vocabulary};

fn vocab() -> Arc<Vocabulary> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../assets/tokenizers/llama3_1/tokenizer.json"
    );
    Arc::new(Vocabulary::from_file(p).expect("run scripts/fetch-assets.sh first"))
}

/// The person schema both engine benches use.
const SCHEMA: &str = include_str!("person.schema.json");

fn benches(c: &mut Criterion) {
    let vocab = vocab();
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    let opts = SchemaOptions::default();
    let limits = Limits::default();
    // With the lexemes in the engine's cache, as a server compiles its next schema (a cold
    // compile is in `--bench embed`).
    let engine = ruvllm_engine::Engine::new(vocab.clone());
    c.bench_function("compile person schema", |b| {
        b.iter(|| {
            let g = schema_to_grammar(&schema, &opts).unwrap();
            engine.constraint(&g, &limits).unwrap()
        })
    });
    let g = schema_to_grammar(&schema, &opts).unwrap();
    let con = Constraint::new(&g, vocab.clone(), &limits).unwrap();
    let enc = vocab.encoder().unwrap().clone();
    let mut mask = vec![0u32; vocab.mask_words()];
    let at = |prefix: &str| {
        let mut m = Matcher::new(&con).unwrap();
        for t in enc.encode(prefix).unwrap() {
            m.commit_token(t).unwrap();
        }
        m
    };
    let mut in_string = at(r#"{"name": "Ada Love"#);
    c.bench_function("mask inside a string", |b| {
        b.iter(|| in_string.compute_mask(&mut mask).unwrap())
    });
    let mut at_key = at(r#"{"name": "Ada", "age": 36"#);
    c.bench_function("mask at a key boundary", |b| {
        b.iter(|| at_key.compute_mask(&mut mask).unwrap())
    });
    // A counted lexeme: a string with a large bound, 1,000 characters in.
    let long: serde_json::Value = serde_json::from_str(
        r#"{"type": "object", "properties": {"pem": {"type": "string", "maxLength": 32767}}}"#,
    )
    .unwrap();
    let long = Constraint::new(
        &schema_to_grammar(&long, &opts).unwrap(),
        vocab.clone(),
        &limits,
    )
    .unwrap();
    let mut in_long = Matcher::new(&long).unwrap();
    let text = format!(
        r#"{{"pem": "{}"#,
        "MIIEpAIBAAKCAQEAn1pMVSEDO4EPzQxK".repeat(32)
    );
    for t in enc.encode(&text).unwrap() {
        in_long.commit_token(t).unwrap();
    }
    c.bench_function("mask inside a maxLength 32767 string", |b| {
        b.iter(|| in_long.compute_mask(&mut mask).unwrap())
    });
    let tok = enc.encode(" Lovelace").unwrap()[0];
    c.bench_function("commit and roll back a token", |b| {
        b.iter(|| {
            in_string.commit_token(tok).unwrap();
            in_string.rollback(1).unwrap();
        })
    });
}

criterion_group!(name = g; config = Criterion::default().sample_size(20); targets = benches);
criterion_main!(g);
