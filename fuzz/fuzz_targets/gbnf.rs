//! The GBNF front end on arbitrary text, then the compiler on what it accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ruvllm_fuzz::front_end_then_compile(data, ruvllm_engine::Grammar::from_gbnf);
});
