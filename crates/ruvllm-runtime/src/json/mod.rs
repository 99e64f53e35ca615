//! JSON schemas, validation and repair (the design record's phase 1).
//!
//! # Design
//!
//! Validation uses the `jsonschema` crate (drafts 4 to 2020-12, formats asserted), the same
//! oracle the engine's tests use, so "valid" means one thing across constrained and
//! post-validated output. Every violation is reported with the instance's JSON pointer (where
//! the value is wrong) and the schema's (which keyword said so).
//!
//! Repair ([`repair_json`]) is a tolerant parser, not a chain of string substitutions: it
//! reads what language models actually emit around and inside JSON (code fences, prose,
//! trailing commas, single quotes, unquoted keys, Python literals, comments, raw newlines in
//! strings, output cut off mid-string or mid-object) and rebuilds a JSON value, logging each
//! fix. [`JsonValidator`] in repair mode only returns a repaired value when it validates:
//! repair never turns invalid output into an "OK".
//!
//! Limits: repair does not guess at content (a literal cut off as `tr` is dropped with its
//! key, not completed), does not coerce types to fit the schema, and refuses inputs nested
//! deeper than 256 levels or larger than 16 MiB.

mod repair;

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use ruvllm_engine::schema::SchemaError;
use serde_json::Value;
use thiserror::Error;

pub use repair::{repair_json, Repair, RepairError, MAX_DEPTH};

/// A checked JSON Schema: the schema document (checked against its meta-schema, other
/// documents bundled in) and its validator, built the first time a value is validated
/// (a constrained generation that is not post-validated never builds one). Cheap to clone
/// (shared, the validator included).
#[derive(Clone)]
pub struct JsonSchema {
    schema: Arc<Value>,
    validator: Arc<OnceLock<Result<jsonschema::Validator, JsonSchemaError>>>,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchema")
            .field("schema", &self.schema)
            .finish()
    }
}

/// Why a schema could not be loaded.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum JsonSchemaError {
    /// The text is not JSON.
    #[error("the schema is not JSON: {msg} at line {line}, column {column}")]
    NotJson {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        msg: String,
    },
    /// The JSON is not a valid schema (checked against its meta-schema), or references
    /// something that cannot be resolved.
    #[error("invalid schema at {pointer}: {msg}")]
    Invalid {
        /// JSON pointer into the schema.
        pointer: String,
        /// What is wrong.
        msg: String,
    },
}

/// One reason a value does not validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer of the offending part of the instance (`""` is the whole value).
    pub instance_pointer: String,
    /// JSON pointer of the schema keyword that failed (e.g. `/properties/age/minimum`).
    pub schema_pointer: String,
    /// A human-readable message.
    pub message: String,
}

/// A value failed validation: every violation found.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{}", describe(.violations))]
pub struct SchemaViolation {
    /// The violations, in the validator's order (at least one).
    pub violations: Vec<Violation>,
}

fn describe(v: &[Violation]) -> String {
    let mut s = String::from("schema validation failed: ");
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push_str("; ");
        }
        let at = if x.instance_pointer.is_empty() {
            "the value"
        } else {
            x.instance_pointer.as_str()
        };
        s.push_str(&format!(
            "at {at}: {} (schema {})",
            x.message, x.schema_pointer
        ));
    }
    s
}

impl JsonSchema {
    /// Parses and checks a schema from JSON text. Cost: parsing plus the meta-schema
    /// check (linear in the schema); the validator is built at the first validation.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str) -> Result<JsonSchema, JsonSchemaError> {
        let v: Value = serde_json::from_str(text).map_err(|e| JsonSchemaError::NotJson {
            line: e.line(),
            column: e.column(),
            msg: serde_message(&e),
        })?;
        JsonSchema::from_value(v)
    }

    /// Compiles a schema given as a JSON value. References must be inside the document
    /// (nothing is fetched); [`JsonSchema::from_value_with`] also resolves them in a
    /// registry.
    pub fn from_value(schema: Value) -> Result<JsonSchema, JsonSchemaError> {
        JsonSchema::from_value_with(schema, None)
    }

    /// Compiles a schema whose references may name documents of `registry` (by URI;
    /// nothing is ever fetched). The schema is kept as one self-contained document
    /// ([`ruvllm_engine::schema::validator_document`]: other documents copied in,
    /// references rewritten as JSON pointers, patterns read as ECMA-262 does), which
    /// [`JsonSchema::as_value`] returns and the grammar is compiled from. An unresolved
    /// reference is an error naming its URI and JSON pointer. Cost: a walk of the schema
    /// and the documents it reaches, then as [`JsonSchema::from_value`].
    pub fn from_value_with(
        schema: Value,
        registry: Option<&ruvllm_engine::schema::SchemaRegistry>,
    ) -> Result<JsonSchema, JsonSchemaError> {
        let schema = ruvllm_engine::schema::validator_document(&schema, registry).map_err(|e| {
            let pointer = match &e {
                SchemaError::UnresolvedRef { pointer, .. }
                | SchemaError::Unsupported { pointer, .. }
                | SchemaError::Invalid { pointer, .. } => pointer.clone(),
                _ => "#".into(),
            };
            JsonSchemaError::Invalid {
                pointer,
                msg: e.to_string(),
            }
        })?;
        if let Err(e) = jsonschema::meta::validate(&schema) {
            return Err(JsonSchemaError::Invalid {
                pointer: pointer_or_root(e.instance_path().as_str()),
                msg: e.to_string(),
            });
        }
        Ok(JsonSchema {
            schema: Arc::new(schema),
            validator: Arc::new(OnceLock::new()),
        })
    }

    /// The validator, built at the first call (formats asserted, with the engine's
    /// `hostname` and `uri-template` checks). Cost: once, linear in the schema; then a
    /// load.
    fn validator(&self) -> Result<&jsonschema::Validator, &JsonSchemaError> {
        self.validator
            .get_or_init(|| {
                jsonschema::options()
                    .should_validate_formats(true)
                    .with_format("hostname", ruvllm_engine::schema::hostname_format())
                    .with_format("uri-template", ruvllm_engine::schema::uri_template_format())
                    .build(&self.schema)
                    .map_err(|e| JsonSchemaError::Invalid {
                        pointer: pointer_or_root(e.instance_path().as_str()),
                        msg: e.to_string(),
                    })
            })
            .as_ref()
    }

    /// The schema of a Rust type, as `schemars` derives it (the Pydantic way).
    pub fn from_type<T: schemars::JsonSchema>() -> JsonSchema {
        let schema = schemars::schema_for!(T).to_value();
        // schemars emits draft 2020-12 documents that the validator always accepts.
        JsonSchema::from_value(schema).expect("schemars produced a schema the validator refuses")
    }

    /// The schema document.
    pub fn as_value(&self) -> &Value {
        &self.schema
    }

    /// Whether `value` validates (never when the validator cannot be built: see
    /// [`JsonSchema::validate`]). Cost: one validation pass, no allocation on success.
    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator().is_ok_and(|v| v.is_valid(value))
    }

    /// Validates `value`, listing every violation with its instance and schema pointers.
    /// A schema that passed its meta-schema but that the validator cannot build (which
    /// the engine's compiler refuses too) validates nothing: one violation at the whole
    /// value names the schema's error and pointer.
    pub fn validate(&self, value: &Value) -> Result<(), SchemaViolation> {
        let validator = match self.validator() {
            Ok(v) => v,
            Err(e) => {
                let pointer = match e {
                    JsonSchemaError::Invalid { pointer, .. } => pointer.clone(),
                    JsonSchemaError::NotJson { .. } => "#".into(),
                };
                return Err(SchemaViolation {
                    violations: vec![Violation {
                        instance_pointer: String::new(),
                        schema_pointer: pointer,
                        message: format!("the schema cannot be used to validate: {e}"),
                    }],
                });
            }
        };
        let violations: Vec<Violation> = validator
            .iter_errors(value)
            .map(|e| Violation {
                instance_pointer: e.instance_path().as_str().to_string(),
                schema_pointer: e.schema_path().as_str().to_string(),
                message: e.to_string(),
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(SchemaViolation { violations })
        }
    }
}

impl FromStr for JsonSchema {
    type Err = JsonSchemaError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JsonSchema::from_str(s)
    }
}

fn pointer_or_root(p: &str) -> String {
    if p.is_empty() {
        "#".into()
    } else {
        format!("#{p}")
    }
}

/// How a [`ValidatedJson`] came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationStatus {
    /// The output was valid JSON (and valid under the schema, if any) as it was.
    Valid,
    /// The output needed repairs; the repaired value validates.
    Repaired,
    /// Lenient mode (neither strict nor repair): the output is returned unchecked because
    /// it did not parse or validate. Callers must treat it as untrusted.
    Unchecked,
}

/// The result of [`JsonValidator::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedJson {
    /// The value (`None` only for [`ValidationStatus::Unchecked`] output that is not JSON).
    pub value: Option<Value>,
    /// The JSON text: the output itself when valid, the re-serialized value when repaired.
    pub text: String,
    /// How it was obtained.
    pub status: ValidationStatus,
    /// The fixes applied (empty unless repaired).
    pub repairs: Vec<Repair>,
}

/// Why output was refused.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum JsonError {
    /// Not JSON, and repair was off or could not fix it.
    #[error("invalid JSON: {msg} at line {line}, column {column}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        msg: String,
    },
    /// JSON that does not satisfy the schema (after repair, if repair was on).
    #[error(transparent)]
    Schema(#[from] SchemaViolation),
    /// Repair was attempted and failed.
    #[error("repair failed: {0}")]
    Repair(#[from] RepairError),
}

/// Post-generation validation with the design record's strict and repair modes.
///
/// * `strict` (the default): output must parse as JSON as-is and validate.
/// * `repair`: output that does not parse, or parses but does not validate, is repaired
///   with [`repair_json`]; the repaired value is returned only if it validates.
/// * neither: output that fails is returned as [`ValidationStatus::Unchecked`].
#[derive(Debug, Clone)]
pub struct JsonValidator {
    schema: Option<JsonSchema>,
    strict: bool,
    repair: bool,
}

impl JsonValidator {
    /// A validator; `repair` takes precedence over `strict` when both are set (a repaired
    /// value is still validated strictly).
    pub fn new(schema: Option<JsonSchema>, strict: bool, repair: bool) -> JsonValidator {
        JsonValidator {
            schema,
            strict,
            repair,
        }
    }

    /// The schema, if any.
    pub fn schema(&self) -> Option<&JsonSchema> {
        self.schema.as_ref()
    }

    /// Validates (and in repair mode repairs) model output. Cost: one parse and one
    /// validation; repair adds one tolerant parse.
    pub fn validate(&self, output: &str) -> Result<ValidatedJson, JsonError> {
        let first = match serde_json::from_str::<Value>(output) {
            Ok(v) => match self.check(&v) {
                Ok(()) => {
                    return Ok(ValidatedJson {
                        value: Some(v),
                        text: output.to_string(),
                        status: ValidationStatus::Valid,
                        repairs: Vec::new(),
                    })
                }
                Err(e) => JsonError::Schema(e),
            },
            Err(e) => JsonError::Syntax {
                line: e.line(),
                column: e.column(),
                msg: serde_message(&e),
            },
        };
        if self.repair {
            let (v, repairs) = repair_json(output)?;
            self.check(&v)?;
            let text = serde_json::to_string(&v).unwrap_or_default();
            return Ok(ValidatedJson {
                value: Some(v),
                text,
                status: ValidationStatus::Repaired,
                repairs,
            });
        }
        if self.strict {
            return Err(first);
        }
        Ok(ValidatedJson {
            value: serde_json::from_str(output).ok(),
            text: output.to_string(),
            status: ValidationStatus::Unchecked,
            repairs: Vec::new(),
        })
    }

    fn check(&self, v: &Value) -> Result<(), SchemaViolation> {
        match &self.schema {
            Some(s) => s.validate(v),
            None => Ok(()),
        }
    }
}

/// serde_json's message without its trailing " at line L column C" (the error types here
/// carry the position separately).
pub(crate) fn serde_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
