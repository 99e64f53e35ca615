//! The engine judged against `jsonschema` as the oracle (the JSON Schema Test Suite's
//! groups, the schema keywords, formats, completions), as one test binary: `jsonschema`'s
//! validator builder is generic, so every test binary that calls it compiles it again
//! (about 20 s of CPU each at the test profile's opt-level 2; four binaries were a minute
//! of the test command's build). One module per former binary:
//! `cargo test -p ruvllm-engine --test oracle schema::` runs the schema keywords alone.

#[path = "../common/mod.rs"]
mod common;

mod completion;
mod formats;
mod schema;
mod suite;
