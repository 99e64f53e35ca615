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
    /// MaskBench: JSON Schema masks scored on valid and invalid instances, token by token.
    Maskbench {
        /// tokenizer.json to use (MaskBench uses Llama 3.1's).
        #[arg(long)]
        tokenizer: PathBuf,
        /// Comma-separated engines (available: ruvllm).
        #[arg(long, default_value = "ruvllm", value_delimiter = ',')]
        engines: Vec<String>,
        /// Only every N-th file.
        #[arg(long, default_value_t = 1)]
        every: usize,
        /// Where to write the JSON summary.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Print up to this many compile errors and false accepts.
        #[arg(long, default_value_t = 20)]
        show: usize,
        /// MaskBench files or folders.
        paths: Vec<PathBuf>,
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
        Cmd::Maskbench {
            tokenizer,
            engines,
            every,
            json,
            show,
            paths,
        } => {
            for e in &engines {
                if e != "ruvllm" {
                    anyhow::bail!(
                        "engine {e:?} is not available in this build (available: ruvllm)"
                    );
                }
            }
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let files = ruvllm_bench::maskbench::collect(&paths)?;
            let files: Vec<_> = files.into_iter().step_by(every.max(1)).collect();
            let mut st = ruvllm_bench::maskbench::EngineStats::default();
            for (i, f) in files.iter().enumerate() {
                let t = std::time::Instant::now();
                if std::env::var_os("RUVLLM_BENCH_TRACE").is_some() {
                    eprintln!("file {}", f.display());
                }
                ruvllm_bench::maskbench::run_file(&vocab, f, &mut st)?;
                if t.elapsed().as_secs_f64() > 2.0 {
                    eprintln!(
                        "slow file {}: {:.1} s",
                        f.display(),
                        t.elapsed().as_secs_f64()
                    );
                }
                if (i + 1) % 500 == 0 {
                    eprintln!("{} / {} files", i + 1, files.len());
                }
            }
            let n_err = st.errors.len();
            let errors = std::mem::take(&mut st.errors);
            let fa = std::mem::take(&mut st.false_accepts);
            let fr = std::mem::take(&mut st.false_rejects);
            let summary = st.to_json();
            println!(
                "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}",
                "engine",
                "schemas",
                "passing",
                "compile",
                "val_rej",
                "inv_acc",
                "tbm_mean",
                "tbm_p99",
                "ttfm_mean",
                "ttfm_p99"
            );
            println!(
                "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                "ruvllm",
                summary["schemas"],
                summary["passing"],
                summary["compile_errors"],
                summary["valid_rejected"],
                summary["invalid_accepted"],
                summary["tbm_us"]["mean"].as_f64().unwrap_or(0.0),
                summary["tbm_us"]["p99"].as_f64().unwrap_or(0.0),
                summary["ttfm_us"]["mean"].as_f64().unwrap_or(0.0),
                summary["ttfm_us"]["p99"].as_f64().unwrap_or(0.0)
            );
            for (f, e) in errors.iter().take(show) {
                println!("compile error {f}: {e}");
            }
            if n_err > show {
                println!("... {} more compile errors", n_err - show);
            }
            for (f, t) in fa.iter().take(show) {
                println!("INVALID ACCEPTED {f}: {t}");
            }
            for (f, t) in fr.iter().take(show) {
                println!("valid rejected {f}: {t}");
            }
            if let Some(out) = json {
                let doc = serde_json::json!({"files": files.len(), "engines": {"ruvllm": summary}});
                std::fs::write(&out, serde_json::to_string_pretty(&doc)?)?;
            }
            Ok(())
        }
    }
}
