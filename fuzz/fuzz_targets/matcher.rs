//! The matcher against the reference recognizer: random grammars x random decoding actions
//! (see `ruvllm_fuzz::matcher_check`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ruvllm_fuzz::matcher_check(data));
