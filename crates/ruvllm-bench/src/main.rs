//! `ruvllm-bench`: benchmarks and conformance runs (not shipped).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ruvllm_engine::Vocabulary;

#[derive(Parser)]
#[command(
    name = "ruvllm-bench",
    about = "Benchmarks and conformance runs for ruvllm"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run GBNF accept/reject case files token by token through a real tokenizer.
    GrammarCases {
        /// tokenizer.json of the vocabulary to use.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Where to write the JSON summary.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Folder of NAME.gbnf + NAME.cases.json pairs (searched recursively).
        dir: PathBuf,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::GrammarCases {
            tokenizer,
            json,
            dir,
        } => {
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let report = ruvllm_bench::grammar_cases::run(vocab, &dir)?;
            print!("{}", ruvllm_bench::grammar_cases::table(&report));
            if let Some(out) = json {
                let summary = serde_json::json!({
                    "grammars": report.grammars,
                    "compile_errors": report.compile_errors,
                    "cases": report.cases,
                    "passed": report.passed,
                    "accept_wrong": report.accept_wrong,
                    "reject_wrong": report.reject_wrong,
                    "details": report.details,
                });
                std::fs::write(&out, serde_json::to_string_pretty(&summary)?)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
            if report.accept_wrong + report.reject_wrong + report.compile_errors > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
