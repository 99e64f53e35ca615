//! The JSON Schema compiler on arbitrary JSON: a grammar or a typed refusal, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for any_order in [false, true] {
        let _ = schema_to_grammar(
            &v,
            &SchemaOptions {
                any_order,
                ..Default::default()
            },
        );
    }
});
