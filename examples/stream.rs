//! Streaming, constrained: text chunks arrive as the model produces them, and the whole
//! output still satisfies the grammar (here a GBNF grammar for a short list).
//!
//! ```sh
//! bash scripts/fetch-assets.sh
//! cargo run --release -p ruvllm-runtime --example stream
//! ```

use std::io::Write;
use std::path::PathBuf;

use ruvllm_runtime::{
    BackendOptions, CandleBackend, GenerateParams, OutputConstraint, StreamingBackend,
};

const LIST: &str = r#"
root ::= item{3}
item ::= "- " [A-Z] [a-z ]{1,30} "\n"
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::var("RUVLLM_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    let backend = CandleBackend::load(&model, &BackendOptions::default())?;
    let params = GenerateParams {
        seed: Some(1),
        constraint: Some(OutputConstraint::Gbnf(LIST.into())),
        ..Default::default()
    };
    let mut stream = backend.generate_stream("Name three fruits.", params);
    for chunk in &mut stream {
        print!("{}", chunk?);
        std::io::stdout().flush()?;
    }
    let done = stream.outcome().expect("the stream has ended")?;
    eprintln!(
        "finish={} tokens={} ({} forced)",
        done.finish.as_str(),
        done.usage.completion_tokens,
        done.usage.forced_tokens
    );
    Ok(())
}
