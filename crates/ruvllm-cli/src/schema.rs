//! `ruvllm schema`: compile a JSON Schema (or say which keyword at which pointer it
//! cannot), convert it to GBNF.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, SchemaRegistry};
use ruvllm_engine::{CompiledGrammar, Grammar, Limits};

#[derive(Subcommand)]
pub enum SchemaCmd {
    /// Compile a JSON Schema: print grammar statistics, or the unsupported keyword and its
    /// JSON pointer (exit status 2).
    Compile {
        /// The schema file.
        file: PathBuf,
        /// OpenAI-style strict mode (additionalProperties false where not given).
        #[arg(long)]
        strict: bool,
        /// Accept object properties in any order (default: schema order).
        #[arg(long)]
        any_order: bool,
    },
    /// Print a GBNF grammar equivalent to the schema (numbers in plain decimal notation:
    /// their exponent spellings need a check GBNF cannot carry).
    ToGbnf {
        /// The schema file.
        file: PathBuf,
        /// OpenAI-style strict mode.
        #[arg(long)]
        strict: bool,
        /// Accept object properties in any order (default: schema order).
        #[arg(long)]
        any_order: bool,
    },
}

pub fn load_schema(
    p: &PathBuf,
    strict: bool,
    any_order: bool,
    registry: Option<&Arc<SchemaRegistry>>,
) -> Result<Grammar> {
    load_schema_with(p, strict, any_order, registry, false)
}

/// [`load_schema`]; `grammar_only` for a grammar without semantic checks on numbers
/// (GBNF output: see `SchemaOptions::grammar_only`).
fn load_schema_with(
    p: &PathBuf,
    strict: bool,
    any_order: bool,
    registry: Option<&Arc<SchemaRegistry>>,
    grammar_only: bool,
) -> Result<Grammar> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    let opts = SchemaOptions {
        strict,
        any_order,
        registry: registry.cloned(),
        grammar_only,
        ..SchemaOptions::default()
    };
    let g = schema_to_grammar(&v, &opts).with_context(|| format!("in {}", p.display()))?;
    warn(&g, p);
    Ok(g)
}

/// Prints the grammar's warnings (unknown formats, read as annotations) on stderr, each
/// with its pointer and the file.
pub fn warn(g: &Grammar, p: &std::path::Path) {
    for w in &g.warnings {
        eprintln!("warning: {w} (in {})", p.display());
    }
}

/// Runs a `ruvllm schema` command.
pub fn run(cmd: SchemaCmd, limits: &Limits, reg: Option<&Arc<SchemaRegistry>>) -> Result<ExitCode> {
    match cmd {
        SchemaCmd::Compile {
            file,
            strict,
            any_order,
        } => {
            let t0 = std::time::Instant::now();
            let g = load_schema(&file, strict, any_order, reg)?;
            let cg = CompiledGrammar::new(&g, limits)?;
            let st = cg.stats();
            println!("ok: {} IR rules; compiled to {} rules, {} positions, {} lexemes with {} DFA states ({} KiB); {:.1} ms",
                g.rules.len(), st.rules, st.positions, st.lexemes, st.lexeme_states, st.dfa_bytes / 1024, t0.elapsed().as_secs_f64() * 1e3);
            if !g.checks.is_empty() {
                println!(
                    "semantic checks ({}), run when the value completes:",
                    g.checks.len()
                );
                for (_, c) in &g.checks {
                    println!("  {}", c.0.describe());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SchemaCmd::ToGbnf {
            file,
            strict,
            any_order,
        } => {
            // Numbers in plain notation only: their other spellings need a check of the
            // exact value, which GBNF cannot carry.
            let g = load_schema_with(&file, strict, any_order, reg, true)?;
            print!("{}", g.to_gbnf().map_err(anyhow::Error::msg)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
