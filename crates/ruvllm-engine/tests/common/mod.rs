//! Shared test helpers: asset paths and an independent reference recognizer.
#![allow(dead_code)]

pub mod reference;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use ruvllm_engine::Vocabulary;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Path of a fetched tokenizer; fails (never skips) with a hint when assets are missing.
pub fn tokenizer(name: &str) -> PathBuf {
    let p = repo()
        .join("assets/tokenizers")
        .join(name)
        .join("tokenizer.json");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    p
}

/// Path of the default model file.
pub fn model() -> PathBuf {
    let p = repo().join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    p
}

/// The shared data folder beside the repository.
pub fn shared_data() -> PathBuf {
    let p = repo().join("../shared/data");
    assert!(
        p.exists(),
        "{} is missing: the shared data must sit beside the repository",
        p.display()
    );
    p
}

/// Llama 3.1's vocabulary, loaded once per test binary.
pub fn llama3() -> Arc<Vocabulary> {
    static V: OnceLock<Arc<Vocabulary>> = OnceLock::new();
    V.get_or_init(|| Arc::new(Vocabulary::from_file(tokenizer("llama3_1")).unwrap()))
        .clone()
}

/// A fixed-seed xorshift generator for random test inputs (failures repeat).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
