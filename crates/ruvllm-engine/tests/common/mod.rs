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

/// MaskBench's files (`../shared/data/maskbench/data`), sorted by name.
pub fn maskbench_files() -> Vec<PathBuf> {
    let dir = shared_data().join("maskbench/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// The schema of MaskBench file `name` (without `.json`).
pub fn maskbench_schema(name: &str) -> serde_json::Value {
    let f = shared_data().join(format!("maskbench/data/{name}.json"));
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    doc["schema"].take()
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

/// A vocabulary of printable ASCII, one byte per token, the strings in `extra`, and an
/// EOS token (the last id), for random walks through masks.
#[allow(dead_code)]
pub fn walk_vocab(extra: &[&str]) -> Arc<Vocabulary> {
    let mut tokens: Vec<Vec<u8>> = (0x20u8..0x7f).map(|b| vec![b]).collect();
    tokens.extend(extra.iter().map(|s| s.as_bytes().to_vec()));
    tokens.push(b"<eos>".to_vec());
    let eos = (tokens.len() - 1) as u32;
    let mut special = vec![false; tokens.len()];
    special[eos as usize] = true;
    Arc::new(Vocabulary::new("walk", tokens, special, vec![eos]).unwrap())
}

/// One random walk of at most `steps` tokens through the masks of `c` (over a
/// [`walk_vocab`]), stopping at EOS, a dead end, or (one time in three) wherever the text
/// is complete. Returns the text when the matcher accepts it.
#[allow(dead_code)]
pub fn random_walk(
    c: &Arc<ruvllm_engine::Constraint>,
    rng: &mut Rng,
    steps: usize,
) -> Option<Vec<u8>> {
    let vocab = c.vocab();
    let eos = (vocab.len() - 1) as u32;
    let mut mask = vec![0u32; vocab.mask_words()];
    let mut m = ruvllm_engine::Matcher::new(c).unwrap();
    let mut text = Vec::new();
    for _ in 0..steps {
        m.compute_mask(&mut mask).unwrap();
        let allowed: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
            .collect();
        if allowed.is_empty() {
            break;
        }
        let t = allowed[rng.below(allowed.len())];
        if t == eos {
            break;
        }
        m.commit_token(t).unwrap();
        text.extend_from_slice(vocab.token_bytes(t));
        if m.is_accepting() && rng.below(3) == 0 {
            break;
        }
    }
    m.is_accepting().then_some(text)
}
