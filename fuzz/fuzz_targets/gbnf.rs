//! The GBNF front end on arbitrary text: an error or a grammar, never a panic; a grammar
//! that parses also compiles (or is refused by a limit) without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ruvllm_engine::{CompiledGrammar, Grammar};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let limits = ruvllm_engine::Limits {
        max_compile_time: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    if let Ok(g) = Grammar::from_gbnf(text, &limits) {
        let _ = CompiledGrammar::new(&g, &limits);
    }
});
