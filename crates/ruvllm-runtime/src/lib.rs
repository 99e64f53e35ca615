//! The ruvllm runtime: what sits between the constraint engine and a model.
//!
//! * [`json`]: JSON mode as the design record defines it: [`JsonSchema`] (from text, a
//!   `serde_json::Value` or a Rust type via `schemars`), validation with messages that name
//!   the failing JSON pointer, and [`JsonValidator`] with strict and repair modes for
//!   output that was not produced under a constraint (a backend without logit access, or a
//!   model asked politely).
//!
//! The constraint engine (`ruvllm-engine`) makes constrained output valid by construction;
//! this crate checks and repairs output after the fact, with the `jsonschema` crate as the
//! validator, so that both paths answer to the same definition of "valid".

#![warn(missing_docs)]

pub mod json;

pub use json::{
    repair_json, JsonError, JsonSchema, JsonSchemaError, JsonValidator, Repair, RepairError,
    SchemaViolation, ValidatedJson, ValidationStatus, Violation,
};
