//! Shared test helpers: asset paths and an independent reference recognizer.
#![allow(dead_code)]

pub mod reference;

use std::path::PathBuf;

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
