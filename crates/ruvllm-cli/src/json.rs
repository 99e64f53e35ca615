//! `ruvllm validate` and `ruvllm repair`: JSON documents against a schema, and model
//! output repaired into JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ruvllm_engine::schema::SchemaRegistry;
use ruvllm_runtime::{JsonError, JsonSchema, JsonValidator};

/// Reads a file, or stdin for `-`.
pub fn read_input(input: &str) -> Result<String> {
    let bytes = if input == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b).context("reading stdin")?;
        b
    } else {
        std::fs::read(input).with_context(|| format!("reading {input}"))?
    };
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{input}: not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

pub fn load_json_schema(p: &PathBuf, registry: Option<&SchemaRegistry>) -> Result<JsonSchema> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    JsonSchema::from_value_with(v, registry).with_context(|| format!("in {}", p.display()))
}

/// `ruvllm validate`: exit status 0 when valid, 1 when not.
pub fn validate(schema: PathBuf, input: String, reg: Option<&SchemaRegistry>) -> Result<ExitCode> {
    let s = load_json_schema(&schema, reg)?;
    let text = read_input(&input)?;
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            println!(
                "invalid JSON: {e} (try `ruvllm repair --schema {}`)",
                schema.display()
            );
            return Ok(ExitCode::from(1));
        }
    };
    match s.validate(&v) {
        Ok(()) => {
            println!("valid");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("invalid: {} violation(s)", e.violations.len());
            for x in &e.violations {
                let at = if x.instance_pointer.is_empty() {
                    "(root)"
                } else {
                    &x.instance_pointer
                };
                println!("  {at}: {} [schema {}]", x.message, x.schema_pointer);
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// `ruvllm repair`: exit status 0 when repaired, 1 when it cannot be.
pub fn repair(
    schema: Option<PathBuf>,
    input: String,
    reg: Option<&SchemaRegistry>,
) -> Result<ExitCode> {
    let s = schema
        .as_ref()
        .map(|p| load_json_schema(p, reg))
        .transpose()?;
    let text = read_input(&input)?;
    match JsonValidator::new(s, true, true).validate(&text) {
        Ok(r) => {
            for fix in &r.repairs {
                eprintln!("fixed: {fix:?}");
            }
            match &r.value {
                Some(v) => println!("{}", serde_json::to_string_pretty(v)?),
                None => println!("{}", r.text),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(JsonError::Schema(e)) => {
            eprintln!("repaired JSON still does not validate:");
            for x in &e.violations {
                eprintln!("  {}: {}", x.instance_pointer, x.message);
            }
            Ok(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!("cannot repair: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
