//! Benchmark and conformance runners behind `ruvllm-bench`. Kept as a library so that the
//! test suite runs exactly the code the command runs.

pub mod batch;
pub mod e2e;
pub mod faults;
pub mod grammar_cases;
pub mod llg;
pub mod load;
pub mod maskbench;
pub mod pyjson;
pub mod recursion;
pub mod stall;
pub mod test_suite;
