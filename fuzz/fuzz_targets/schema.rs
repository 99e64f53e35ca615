//! The JSON Schema compiler on arbitrary JSON: a grammar or a typed refusal, never a
//! panic; then the grammar compiler on what it accepts (lowering, lexeme DFAs, the
//! key-complement automata built from declared keys), with a 500 ms compile budget.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
use ruvllm_engine::{CompiledGrammar, Limits};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let limits = Limits {
        max_compile_time: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    for any_order in [false, true] {
        let opts = SchemaOptions {
            any_order,
            ..Default::default()
        };
        if let Ok(g) = schema_to_grammar(&v, &opts) {
            let _ = CompiledGrammar::new(&g, &limits);
        }
    }
});
