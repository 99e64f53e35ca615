//! Typed JSON from a local model: a Rust type becomes a JSON Schema (`schemars`), the
//! model decodes under it, and the value deserializes straight into the type.
//!
//! ```sh
//! bash scripts/fetch-assets.sh
//! cargo run --release -p ruvllm-runtime --example generate_json
//! ```

use std::path::PathBuf;

use ruvllm_runtime::{BackendOptions, CandleBackend, GenerateParams, JsonSchema, LlmBackend};
use serde::Deserialize;

/// What we want back. Doc comments become schema descriptions.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct City {
    /// The city's name.
    name: String,
    /// The country it is in.
    country: String,
    /// Population, a whole number.
    population: u64,
    /// Up to three landmarks.
    #[schemars(length(max = 3))]
    landmarks: Vec<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::var("RUVLLM_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    let backend = CandleBackend::load(&model, &BackendOptions::default())?;
    let schema = JsonSchema::from_type::<City>();
    let params = GenerateParams {
        seed: Some(42),
        max_tokens: 200,
        ..Default::default()
    };
    let value = backend.generate_json("Tell me about Paris.", Some(schema), params)?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    // Valid by construction, so this cannot fail on shape:
    let city: City = serde_json::from_value(value)?;
    println!("{city:?}");
    Ok(())
}
