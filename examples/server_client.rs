//! Talking to `ruvllm serve` from Rust: typed JSON through `HttpBackend` (which sends the
//! schema as `response_format` and validates what comes back), and a tool call with a
//! named `tool_choice` over the plain OpenAI wire format.
//!
//! ```sh
//! cargo run --release -p ruvllm-cli -- serve &          # http://127.0.0.1:8080
//! cargo run --release -p ruvllm-runtime --example server_client
//! ```
//!
//! `RUVLLM_URL` overrides the base URL (default `http://127.0.0.1:8080/v1`).

use ruvllm_runtime::{GenerateParams, HttpBackend, JsonSchema, LlmBackend};
use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::var("RUVLLM_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/v1".into());
    // The served model's id.
    let models: Value = ureq::get(&format!("{base}/models"))
        .call()?
        .body_mut()
        .read_json()?;
    let model = models["data"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // 1. Typed JSON: the server constrains decoding; HttpBackend validates the answer.
    let backend = HttpBackend::new(&base, &model, None)?;
    let schema = JsonSchema::from_value(json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"], "additionalProperties": false
    }))?;
    let params = GenerateParams {
        temperature: 0.0,
        max_tokens: 64,
        ..Default::default()
    };
    let v = backend.generate_json("Name a big city and its country.", Some(schema), params)?;
    println!("json: {v}");

    // 2. A tool call the model must make, arguments valid under the tool's schema.
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "What's the weather in Oslo?"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0
    });
    let r: Value = ureq::post(&format!("{base}/chat/completions"))
        .send_json(&body)?
        .body_mut()
        .read_json()?;
    let call = &r["choices"][0]["message"]["tool_calls"][0]["function"];
    println!("tool call: {}({})", call["name"], call["arguments"]);
    Ok(())
}
