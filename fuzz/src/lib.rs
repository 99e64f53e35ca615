//! Shared pieces of the fuzz targets.

use ruvllm_engine::{CompiledGrammar, Grammar, GrammarError, Limits};

/// Runs a grammar front end on arbitrary bytes (UTF-8 only) and compiles what it accepts,
/// with a 500 ms compile budget: every outcome must be a value or an error, never a panic.
pub fn front_end_then_compile(
    data: &[u8],
    front: fn(&str, &Limits) -> Result<Grammar, GrammarError>,
) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let limits = Limits {
        max_compile_time: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    if let Ok(g) = front(text, &limits) {
        let _ = CompiledGrammar::new(&g, &limits);
    }
}
