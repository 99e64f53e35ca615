//! `ruvllm schema`: compile a JSON Schema (or say which keyword at which pointer it
//! cannot), convert it to GBNF.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use ruvllm_engine::schema::{SchemaOptions, SchemaRegistry};
use ruvllm_engine::{CompiledGrammar, Grammar, Limits, Source};

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

/// The source of a schema file under these flags: its JSON and the options they give
/// (`grammar_only` for a grammar without semantic checks on numbers, for GBNF output:
/// see `SchemaOptions::grammar_only`).
pub fn schema_source(
    p: &PathBuf,
    strict: bool,
    any_order: bool,
    registry: Option<&Arc<SchemaRegistry>>,
    grammar_only: bool,
) -> Result<Source> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    Ok(Source::JsonSchema(
        v,
        SchemaOptions {
            strict,
            any_order,
            registry: registry.cloned(),
            grammar_only,
            ..SchemaOptions::default()
        },
    ))
}

/// The grammar of a source read from file `p`, under `limits`: errors name the file,
/// warnings (unknown formats) are printed.
pub fn grammar_of(source: &Source, p: &std::path::Path, limits: &Limits) -> Result<Grammar> {
    let g = source
        .to_grammar(limits)
        .with_context(|| format!("in {}", p.display()))?;
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
            let g = grammar_of(
                &schema_source(&file, strict, any_order, reg, false)?,
                &file,
                limits,
            )?;
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
            let source = schema_source(&file, strict, any_order, reg, true)?;
            let g = grammar_of(&source, &file, limits)?;
            print!("{}", g.to_gbnf().map_err(anyhow::Error::msg)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
