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

/// `ruvllm validate --lines`: one verdict line per non-blank input line, each written and
/// flushed before the next line is read (so a caller can hold the process open and ask line
/// by line); exit status 1 when any document is invalid. The schema is compiled once;
/// each document costs its parse and one validation.
pub fn validate_lines(
    schema: PathBuf,
    input: String,
    reg: Option<&SchemaRegistry>,
) -> Result<ExitCode> {
    use std::io::{BufRead, Write};
    let s = load_json_schema(&schema, reg)?;
    let reader: Box<dyn BufRead> = if input == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&input).with_context(|| format!("reading {input}"))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut out = std::io::stdout().lock();
    let mut all_valid = true;
    for (i, line) in reader.split(b'\n').enumerate() {
        let line = line.with_context(|| format!("reading {input}"))?;
        let n = i + 1;
        let Ok(text) = std::str::from_utf8(&line) else {
            anyhow::bail!("{input}:{n}: not UTF-8");
        };
        if text.trim().is_empty() {
            continue;
        }
        let verdict = lines_verdict(&s, text);
        all_valid &= verdict.is_none();
        match verdict {
            None => writeln!(out, "{n}: valid"),
            Some(why) => writeln!(out, "{n}: invalid: {why}"),
        }
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Why one line's document is invalid, on one line (every violation, `; `-separated), or
/// `None` when it is valid.
fn lines_verdict(s: &JsonSchema, text: &str) -> Option<String> {
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Some(format!("invalid JSON: {e}")),
    };
    let e = s.validate(&v).err()?;
    let each: Vec<String> = e
        .violations
        .iter()
        .map(|x| {
            let at = if x.instance_pointer.is_empty() {
                "(root)"
            } else {
                &x.instance_pointer
            };
            format!("{at}: {} [schema {}]", x.message, x.schema_pointer)
        })
        .collect();
    // One line whatever the messages hold.
    Some(each.join("; ").replace(['\n', '\r'], " "))
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
