//! `ruvllm-bench`: benchmarks and conformance runs (not shipped).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ruvllm_engine::{Limits, Vocabulary};

/// jemalloc, as in the `ruvllm` binary, so that the engine is measured with the allocator
/// it ships with. With glibc's malloc, a mask that ran after a previous file's tables were
/// freed could spend 8-20 ms inside `_int_malloc` sorting the freed chunks (`perf` samples
/// in the window of the slow mask: 413 of 439 in `_int_malloc`); the same table took
/// 0.4 ms in a fresh process. See docs/PERFORMANCE.md for the measured effect on both
/// engines.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// End to end on a real model: validity of constrained generations (30 MaskBench
    /// schemas, 5 GBNF grammars), decode speed unconstrained vs constrained vs
    /// jump-forward, and raw decode speed beside llama.cpp's llama-bench.
    E2e {
        /// GGUF model (default: the SmolLM2 asset).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Backends to run, each in turn (comma-separated: `llama`, `candle`).
        #[arg(long, value_delimiter = ',', default_value = "llama,candle")]
        backends: Vec<String>,
        /// Compute threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seeds per validity case.
        #[arg(long, default_value_t = 3)]
        seeds: u64,
        /// Temperature of the validity run.
        #[arg(long, default_value_t = 0.7)]
        temperature: f32,
        /// max_tokens of the validity run (comma-separated: each budget is a run).
        #[arg(long, value_delimiter = ',', default_value = "512,64")]
        max_tokens: Vec<usize>,
        /// Seeds per speed case (0 skips the speed part).
        #[arg(long, default_value_t = 2)]
        speed_reps: u64,
        /// Raw decode repetitions (0 skips).
        #[arg(long, default_value_t = 3)]
        raw_reps: usize,
        /// llama.cpp's llama-bench binary (scripts/build-llamacpp.sh builds it).
        #[arg(long)]
        llama_bench: Option<PathBuf>,
        /// llama.cpp's llama-server binary: its constrained decoding (`json_schema`) on
        /// the speed schemas, beside ours.
        #[arg(long)]
        llama_server: Option<PathBuf>,
        /// Skip the validity part.
        #[arg(long)]
        no_validity: bool,
        /// MaskBench data folder.
        #[arg(long, default_value = "../shared/data/maskbench/data")]
        maskbench: PathBuf,
        /// llama.cpp grammars folder.
        #[arg(long, default_value = "../shared/data/gbnf/llama.cpp")]
        gbnf: PathBuf,
        /// Where to write every row and the summary as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Where to write the generated Markdown report (docs/E2E.md).
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
    /// Mask throughput for a batch of sequences stepped together over several threads.
    Batch {
        /// tokenizer.json to use.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Sequences decoded together per schema.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Worker threads computing the masks of one step.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Only every N-th file.
        #[arg(long, default_value_t = 50)]
        every: usize,
        /// MaskBench files or folders.
        paths: Vec<PathBuf>,
    },
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
    /// Mask time along deep right, left and middle recursion (and a hand-written JSON
    /// grammar whose strings recurse per character): the first and last masks of each
    /// depth, and their ratio (flat is 1).
    Recursion {
        /// tokenizer.json of the vocabulary to use.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Depths (levels, one token each), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
        depths: Vec<usize>,
        /// Where to write the rows as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The JSON Schema Test Suite (one draft's folder, optional/ included), token by token.
    TestSuite {
        /// tokenizer.json to use.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Comma-separated engines: ruvllm, ruvllm-budget (budget-aware masks; also counts
        /// the groups without a completion from the start), llguidance.
        #[arg(long, default_value = "ruvllm", value_delimiter = ',')]
        engines: Vec<String>,
        /// Where to write the JSON summary.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Print up to this many false positives per engine.
        #[arg(long, default_value_t = 20)]
        show: usize,
        /// e.g. ../shared/data/json-schema-test-suite/tests/draft2020-12
        dir: PathBuf,
    },
    /// Load: concurrent clients against a real `ruvllm serve` on loopback, with a mix of
    /// schemas and tool calls; every answer validated.
    Load {
        /// The ruvllm binary (default: the one beside this binary).
        #[arg(long)]
        server_bin: Option<PathBuf>,
        /// GGUF model for the server (default: the server's default).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Concurrent clients.
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Seconds of load per configuration.
        #[arg(long, default_value_t = 120)]
        secs: u64,
        /// Server --max-batch values, one run each (e.g. 8,1 to measure batching).
        #[arg(long, default_value = "8", value_delimiter = ',')]
        batches: Vec<usize>,
        /// Sampling temperature of the requests.
        #[arg(long, default_value_t = 0.7)]
        temperature: f32,
        /// Where to write the JSON summary.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Where to write the Markdown report (docs/LOAD.md is generated this way).
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Extra clients injecting faults (dropped streams, early closes, malformed,
        /// oversized and hostile requests); the soak run of docs/RELIABILITY.md.
        #[arg(long, default_value_t = 0)]
        faults: usize,
        /// Seconds of warm-up before RSS is judged.
        #[arg(long, default_value_t = 300)]
        warmup_secs: u64,
        /// ruvllm backends to serve with, each in turn (comma-separated: llama, candle).
        #[arg(long, value_delimiter = ',', default_value = "llama")]
        backends: Vec<String>,
        /// llama.cpp's llama-server binary: the same mix against it, after ruvllm's runs.
        #[arg(long)]
        llama_server: Option<PathBuf>,
        /// Threads of every server.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Decode-step cost by batch size, with candle's Q8_0 product and with ours.
    Steps {
        /// GGUF model (default: the SmolLM2 asset).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Batch sizes.
        #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
        batches: Vec<usize>,
        /// Cached positions per sequence.
        #[arg(long, default_value_t = 128)]
        ctx: usize,
        /// Timed steps per point (median reported).
        #[arg(long, default_value_t = 9)]
        reps: usize,
    },
    /// MaskBench: JSON Schema masks scored on valid and invalid instances, token by token.
    Maskbench {
        /// tokenizer.json to use (MaskBench uses Llama 3.1's).
        #[arg(long)]
        tokenizer: PathBuf,
        /// Comma-separated engines: ruvllm, llguidance; for maskbench also ruvllm-budget
        /// (budget-aware masks far from the end of the budget).
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
        /// Also write the Markdown report (docs/BENCHMARKS.md is generated this way).
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Also write one CSV row per file and engine: compile µs (empty when it did not
        /// compile), tokens, sum and max of the mask+commit µs.
        #[arg(long)]
        per_file: Option<PathBuf>,
        /// Tick the measuring thread every this many µs to find when it did not run (the
        /// host holding the virtual CPU), and report each slow mask's time less that part.
        /// Off by default: the signals slow both engines down (on MaskBench's every 20th
        /// file, mask and compile times 14-17% at 250 µs, 1-4% at 1,000 µs). 100 to
        /// 1,000,000.
        #[arg(long, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
        stall_watch_us: Option<u64>,
        /// Check every token table ruvllm computes or shares against the table by
        /// definition (a pass over the whole trie without shortcuts), and fail when one
        /// differs. Each first use then pays that pass inside its mask: the times are not
        /// comparable, and no Markdown report is written.
        #[arg(long, conflicts_with = "markdown")]
        verify_tables: bool,
        /// MaskBench files or folders.
        paths: Vec<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Steps {
            model,
            batches,
            ctx,
            reps,
        } => {
            let model = model.unwrap_or_else(ruvllm_bench::e2e::default_model);
            println!("| own Q8_0 kernel | batch | ms/step | tok/s |");
            println!("|---|---|---|---|");
            for t in ruvllm_bench::load::forward_steps(&model, &batches, ctx, reps)? {
                println!(
                    "| {} | {} | {:.1} | {:.1} |",
                    t.own_kernel, t.batch, t.ms_per_step, t.tokens_per_sec
                );
            }
            Ok(())
        }
        Cmd::Load {
            server_bin,
            model,
            clients,
            secs,
            batches,
            temperature,
            json,
            markdown,
            faults,
            warmup_secs,
            backends,
            llama_server,
            threads,
        } => {
            use ruvllm_bench::load;
            let server_bin = server_bin
                .or_else(load::sibling_binary)
                .context("no ruvllm binary beside ruvllm-bench: build it (cargo build --release -p ruvllm-cli) or pass --server-bin")?;
            let cfg = load::LoadConfig {
                server_bin,
                model,
                clients,
                duration: std::time::Duration::from_secs(secs),
                batches: batches.clone(),
                temperature,
                fault_clients: faults,
                warmup: std::time::Duration::from_secs(warmup_secs),
                servers: backends
                    .iter()
                    .map(|b| load::ServerKind::Ruvllm(b.clone()))
                    .chain(llama_server.map(load::ServerKind::LlamaServer))
                    .collect(),
                threads,
            };
            let mut reports = Vec::new();
            for (kind, b) in cfg
                .servers
                .iter()
                .flat_map(|k| batches.iter().map(move |b| (k, b)))
            {
                eprintln!(
                    "load: {} {clients} clients, {secs} s, --max-batch {b}",
                    kind.label()
                );
                let r = load::run_one(&cfg, kind, *b)?;
                eprintln!(
                    "  ok {} failed {} invalid {} | {:.2} req/s {:.1} tok/s | p50 {:.2}s p99 {:.2}s | batch {:.2} | RSS {} -> {} KiB",
                    r.ok, r.failed, r.invalid, r.req_per_sec, r.tokens_per_sec, r.p50, r.p99,
                    r.mean_batch, r.rss_before_kib, r.rss_after_kib
                );
                for p in &r.problems {
                    eprintln!("  problem: {p}");
                }
                reports.push(r);
            }
            if let Some(p) = json {
                std::fs::write(&p, serde_json::to_string_pretty(&reports)?)?;
            }
            if let Some(p) = markdown {
                let cmd = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
                let cmd = format!("cargo run --release -p ruvllm-bench -- {cmd}");
                std::fs::write(&p, load::markdown(&cfg, &reports, &cmd))?;
            }
            for r in &reports {
                if r.faults.sent.iter().sum::<u64>() > 0 {
                    eprintln!(
                        "  faults {:?} unexpected {} | alive {} | RSS warm {} KiB, after warm-up {}..{} KiB",
                        r.faults.sent, r.faults.unexpected, r.server_alive, r.rss_warm_kib,
                        r.rss_after_warm_min_kib, r.rss_after_warm_max_kib
                    );
                    for p in &r.faults.problems {
                        eprintln!("  fault problem: {p}");
                    }
                }
            }
            // ruvllm must answer everything validly; llama-server's failures are measured,
            // not errors of this run.
            let bad: u64 = reports
                .iter()
                .filter(|r| r.server != "llama-server")
                .map(|r| r.failed + r.invalid + r.faults.unexpected + u64::from(!r.server_alive))
                .sum();
            anyhow::ensure!(bad == 0, "{bad} ruvllm requests failed, were invalid or answered a fault unexpectedly (or the server died)");
            Ok(())
        }
        Cmd::E2e {
            model,
            backends,
            threads,
            seeds,
            temperature,
            max_tokens,
            speed_reps,
            raw_reps,
            llama_bench,
            llama_server,
            no_validity,
            maskbench,
            gbnf,
            json,
            markdown,
        } => {
            use ruvllm_bench::e2e;
            std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
            let model = model.unwrap_or_else(e2e::default_model);
            anyhow::ensure!(
                model.exists(),
                "{} is missing: run scripts/fetch-assets.sh",
                model.display()
            );
            let mut candle = None;
            let mut llama = None;
            for name in &backends {
                match name.as_str() {
                    "candle" => {
                        candle = Some(ruvllm_runtime::CandleBackend::load(
                            &model,
                            &Default::default(),
                        )?)
                    }
                    "llama" => {
                        llama = Some(ruvllm_runtime::LlamaBackend::load(
                            &model,
                            &Default::default(),
                            &ruvllm_runtime::LlamaOptions {
                                sequences: 1,
                                prefix_slots: 0,
                                context: 4096,
                                threads,
                                ..Default::default()
                            },
                        )?)
                    }
                    other => anyhow::bail!("unknown backend {other:?} (llama, candle)"),
                }
            }
            let e2e_run = E2eRun {
                maskbench: &maskbench,
                gbnf: &gbnf,
                seeds,
                temperature,
                max_tokens: &max_tokens,
                validity: !no_validity,
                speed_reps,
            };
            let mut runs = Vec::new();
            for name in &backends {
                runs.push(match name.as_str() {
                    "candle" => e2e_run.run(candle.as_ref().context("candle")?, name)?,
                    _ => e2e_run.run(llama.as_ref().context("llama")?, name)?,
                });
            }
            let mut raw = Vec::new();
            for _ in 0..raw_reps {
                for name in &backends {
                    let engine = e2e::raw_engine(name);
                    raw.push(match name.as_str() {
                        "candle" => {
                            e2e::raw_ours(candle.as_ref().context("candle")?, 128, &engine)?
                        }
                        _ => e2e::raw_ours(llama.as_ref().context("llama")?, 128, &engine)?,
                    });
                }
                if let Some(lb) = &llama_bench {
                    raw.push(e2e::raw_llamacpp(lb, &model, 128, threads)?);
                }
            }
            let server = match (&llama_server, speed_reps) {
                (Some(bin), 1..) => {
                    use ruvllm_runtime::ModelBackend;
                    let render = |schema: &serde_json::Value| -> anyhow::Result<String> {
                        let p = ruvllm_runtime::Prompt::User(e2e::schema_prompt(schema));
                        Ok(match (&llama, &candle) {
                            (Some(b), _) => b.render_with(&p, None)?,
                            (_, Some(b)) => b.render_with(&p, None)?,
                            _ => anyhow::bail!("no backend to render the prompt"),
                        })
                    };
                    // Ours with jump-forward just before each llama-server request, on
                    // every backend.
                    let beside = |schema: &str, seed: u64| {
                        let mut out = Vec::new();
                        for name in &backends {
                            let row = match name.as_str() {
                                "candle" => {
                                    e2e::jf_row(candle.as_ref().context("candle")?, schema, seed)?
                                }
                                _ => e2e::jf_row(llama.as_ref().context("llama")?, schema, seed)?,
                            };
                            out.push((name.clone(), row));
                        }
                        Ok(out)
                    };
                    e2e::llama_server_speed(bin, &model, threads, speed_reps, render, beside)?
                }
                _ => Default::default(),
            };
            let (server, beside_server) = server;
            let report = e2e::Report {
                server,
                beside_server,
                model: model
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                runs,
                raw,
            };
            let summary = report.summary();
            println!("{}", serde_json::to_string_pretty(&summary)?);
            if let Some(p) = json {
                let all = serde_json::json!({"summary": summary, "rows": report});
                std::fs::write(&p, serde_json::to_string_pretty(&all)?)
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            if let Some(p) = markdown {
                let args: Vec<String> = std::env::args().skip(1).collect();
                let cmd = format!("cargo run --release -p ruvllm-bench -- {}", args.join(" "));
                let commit = std::process::Command::new("git")
                    .args(["rev-parse", "--short", "HEAD"])
                    .output()
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                    .unwrap_or_default();
                std::fs::write(&p, e2e::markdown(&report, &cmd, &commit))
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            let bad = report
                .runs
                .iter()
                .flat_map(|r| &r.validity)
                .filter(|r| !r.ok)
                .count();
            anyhow::ensure!(
                bad == 0,
                "{bad} validity rows are not as budget-aware decoding promises"
            );
            Ok(())
        }
        Cmd::Batch {
            tokenizer,
            batch,
            threads,
            every,
            paths,
        } => {
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let engine = ruvllm_engine::Engine::new(vocab.clone());
            let files = ruvllm_bench::maskbench::collect(&paths)?;
            let mut st = ruvllm_bench::batch::BatchStats::default();
            for f in files.iter().step_by(every.max(1)) {
                let case = ruvllm_bench::maskbench::load(&vocab, f)?;
                ruvllm_bench::batch::run_file(&engine, &case, batch, threads, &mut st)?;
            }
            st.steps_us.sort_by(|a, b| a.total_cmp(b));
            let q = |p: f64| {
                st.steps_us
                    .get(((st.steps_us.len() as f64 - 1.0) * p).round() as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            println!(
                "{} files, batch {batch}, {threads} threads: {} masks in {:.2} s = {:.0} masks/s; batch step p50 {:.0} us, p99 {:.0} us, max {:.0} us",
                st.files,
                st.masks,
                st.seconds,
                st.masks as f64 / st.seconds.max(1e-9),
                q(0.5),
                q(0.99),
                q(1.0)
            );
            Ok(())
        }
        Cmd::Recursion {
            tokenizer,
            depths,
            json,
        } => {
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            // The product's budgets: a mask over the default 500 ms is an error here too.
            let rows = ruvllm_bench::recursion::run(vocab, &depths, &Limits::default())?;
            print!("{}", ruvllm_bench::recursion::table(&rows));
            if let Some(out) = json {
                std::fs::write(&out, serde_json::to_string_pretty(&rows)?)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
            Ok(())
        }
        Cmd::GrammarCases {
            tokenizer,
            json,
            dir,
        } => {
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            // The product's budgets: a mask over the default 500 ms is an error here too.
            let report = ruvllm_bench::grammar_cases::run(vocab, &dir, &Limits::default())?;
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
        Cmd::TestSuite {
            tokenizer,
            engines,
            json,
            show,
            dir,
        } => {
            for e in &engines {
                anyhow::ensure!(
                    ["ruvllm", "ruvllm-budget", "llguidance"].contains(&e.as_str()),
                    "unknown engine {e:?} (ruvllm, ruvllm-budget, llguidance)"
                );
            }
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let factory = if engines.iter().any(|e| e == "llguidance") {
                Some(ruvllm_bench::llg::factory(&vocab)?)
            } else {
                None
            };
            let r = ruvllm_bench::test_suite::run(&vocab, &dir, &engines, factory.as_ref())?;
            let (totals, fps) = (&r.totals, &r.false_positives);
            println!(
                "{:<11} {:>7} {:>7} {:>9} {:>9} {:>9}",
                "engine", "tests", "passed", "compile", "false_pos", "false_neg"
            );
            let mut out = serde_json::Map::new();
            for (i, e) in engines.iter().enumerate() {
                let t = totals[i];
                println!(
                    "{:<11} {:>7} {:>7} {:>9} {:>9} {:>9}",
                    e, t.tests, t.passed, t.compile_error, t.false_positive, t.false_negative
                );
                let mut j = t.to_json();
                j["format_annotations"] = r.format_annotations[i].to_json();
                out.insert(e.clone(), j);
            }
            // The core format.json tests (formats as annotations), already counted above.
            for (i, e) in engines.iter().enumerate() {
                let t = r.format_annotations[i];
                println!(
                    "{:<11} {:>7} {:>7} {:>9} {:>9} {:>9}   (of them, core format.json: formats as annotations)",
                    e, t.tests, t.passed, t.compile_error, t.false_positive, t.false_negative
                );
            }
            for (i, e) in engines.iter().enumerate() {
                for fp in fps[i].iter().take(show) {
                    println!("{e}: FALSE POSITIVE {fp}");
                }
            }
            // Budget-aware decoding needs a completion from the start (issue 66: goal 0
            // wherever the group has a valid instance).
            for (i, e) in engines
                .iter()
                .enumerate()
                .filter(|(_, e)| *e == "ruvllm-budget")
            {
                let t = totals[i];
                println!(
                    "{e}: no completion from the start in {} groups ({} with a valid instance)",
                    t.no_start_completion, t.no_start_completion_with_valid
                );
                for name in r.no_start_completion_with_valid[i].iter().take(show) {
                    println!("{e}: NO START COMPLETION {name}");
                }
            }
            if let Some(path) = json {
                std::fs::write(
                    &path,
                    serde_json::to_string_pretty(&serde_json::json!({"engines": out}))?,
                )?;
            }
            Ok(())
        }
        Cmd::Maskbench {
            tokenizer,
            engines,
            every,
            json,
            show,
            markdown,
            per_file,
            stall_watch_us,
            verify_tables,
            paths,
        } => {
            let t_run = std::time::Instant::now();
            // One engine for every schema and both ruvllm modes, as a server keeps one per
            // vocabulary (created below, with the vocabulary).
            for e in &engines {
                if e != "ruvllm" && e != "llguidance" && e != "ruvllm-budget" {
                    anyhow::bail!("unknown engine {e:?} (ruvllm, ruvllm-budget, llguidance)");
                }
            }
            let t_vocab = std::time::Instant::now();
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let vocab_ms = t_vocab.elapsed().as_secs_f64() * 1e3;
            let engine = ruvllm_engine::Engine::new(vocab.clone());
            engine.verify_tables(verify_tables);
            let files = ruvllm_bench::maskbench::collect(&paths)?;
            let files: Vec<_> = files.into_iter().step_by(every.max(1)).collect();
            let t_llg = std::time::Instant::now();
            let factory = if engines.iter().any(|e| e == "llguidance") {
                Some(ruvllm_bench::llg::factory(&vocab)?)
            } else {
                None
            };
            let llg_vocab_ms = factory
                .as_ref()
                .map(|_| t_llg.elapsed().as_secs_f64() * 1e3);
            if let Some(ms) = llg_vocab_ms {
                eprintln!("llguidance vocabulary tables: {ms:.1} ms");
            }
            let mut stats: Vec<(String, ruvllm_bench::maskbench::EngineStats)> = engines
                .iter()
                .map(|e| (e.clone(), Default::default()))
                .collect();
            // Ticks this thread to tell a slow mask's own time from the host holding the
            // virtual CPU (see `ruvllm_bench::stall`); stops at the end of the run.
            let watch = match stall_watch_us {
                Some(us) => Some(
                    ruvllm_bench::stall::StallWatch::start(us.saturating_mul(1000))
                        .context("starting the stall watch (timer or signal refused)")?,
                ),
                None => None,
            };
            for (i, f) in files.iter().enumerate() {
                if std::env::var_os("RUVLLM_BENCH_TRACE").is_some() {
                    eprintln!("file {}", f.display());
                }
                let case = ruvllm_bench::maskbench::load(&vocab, f)?;
                // Interleaved per file: every engine on the same file and tokens, one thread.
                // The two ruvllm engines share one Engine (lexeme and token-table caches),
                // so the second on a file finds them warm: they take turns going first.
                let mut order: Vec<usize> = (0..stats.len()).collect();
                if i % 2 == 1 {
                    order.reverse();
                }
                for &k in &order {
                    let (name, st) = &mut stats[k];
                    let t = std::time::Instant::now();
                    let before = (st.ttfm.len(), st.tbm.len());
                    match name.as_str() {
                        "ruvllm" => ruvllm_bench::maskbench::run_ruvllm(&engine, &case, st)?,
                        "ruvllm-budget" => {
                            ruvllm_bench::maskbench::run_ruvllm_budget(&engine, &case, st)?
                        }
                        _ => ruvllm_bench::llg::run(factory.as_ref().unwrap(), &case, st)?,
                    }
                    st.record_file(&case.name, before);
                    if t.elapsed().as_secs_f64() > 2.0 {
                        eprintln!(
                            "slow file {} ({name}): {:.1} s",
                            f.display(),
                            t.elapsed().as_secs_f64()
                        );
                    }
                }
                if (i + 1) % 500 == 0 {
                    eprintln!("{} / {} files", i + 1, files.len());
                }
            }
            println!(
                "{:<11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
                "engine",
                "schemas",
                "passing",
                "compile",
                "val_rej",
                "inv_acc",
                "tbm_mean",
                "tbm_p50",
                "tbm_p99",
                "tbm_p999",
                "tbm_max",
                "ttfm_mean",
                "ttfm_p99"
            );
            if let Some(path) = &per_file {
                let mut csv = String::from("engine,file,ttfm_us,tokens,tbm_sum_us,tbm_max_us\n");
                for (name, st) in &stats {
                    for r in &st.per_file {
                        csv.push_str(&format!(
                            "{name},{},{},{},{:.1},{:.1}\n",
                            ruvllm_bench::maskbench::csv_field(&r.file),
                            r.ttfm_us.map(|t| format!("{t:.1}")).unwrap_or_default(),
                            r.tokens,
                            r.tbm_sum_us,
                            r.tbm_max_us
                        ));
                    }
                }
                std::fs::write(path, csv)?;
            }
            // Compile time over the files every engine compiled (the engines fail on
            // different schemas, and the hard ones weigh on the mean).
            let common = ruvllm_bench::maskbench::common_ttfm(&stats);
            if let Some(c) = &common {
                println!(
                    "TTFM over the {} files every engine compiled: {}",
                    c.files,
                    c.means
                        .iter()
                        .map(|(n, m, p99)| format!("{n} mean {m:.1} µs, p99 {p99:.1} µs"))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
            let mut out = serde_json::Map::new();
            let mut details = Vec::new();
            let mut report = Vec::new();
            let mut slows = Vec::new();
            for (name, st) in stats.iter_mut() {
                let caches = ruvllm_bench::maskbench::cache_summary(st);
                let errors = std::mem::take(&mut st.errors);
                let fa = std::mem::take(&mut st.false_accepts);
                let fr = std::mem::take(&mut st.false_rejects);
                let mut slow = st.slow_masks.clone();
                slow.sort_by(|a, b| b.us.total_cmp(&a.us));
                slows.push((name.clone(), slow));
                let v = st.to_json();
                let f = |k: &str, q: &str| v[k][q].as_f64().unwrap_or(0.0);
                println!(
                    "{:<11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1}",
                    name, v["schemas"], v["passing"], v["compile_errors"], v["valid_rejected"], v["invalid_accepted"],
                    f("tbm_us", "mean"), f("tbm_us", "p50"), f("tbm_us", "p99"), f("tbm_us", "p999"), f("tbm_us", "max"),
                    f("ttfm_us", "mean"), f("ttfm_us", "p99")
                );
                if name == "ruvllm-budget" {
                    let names = v["no_start_completion_files"]
                        .as_array()
                        .map(|a| &a[..a.len().min(30)]);
                    let with_valid = v["no_start_completion_with_valid"]
                        .as_array()
                        .map_or(0, Vec::len);
                    println!(
                        "            no completion from the start: {} ({with_valid} with a valid instance; first 30: {})",
                        v["no_start_completion"],
                        serde_json::json!(names.unwrap_or_default())
                    );
                }
                report.push((name.clone(), v.clone(), caches));
                out.insert(name.clone(), v);
                details.push((name.clone(), errors, fa, fr));
            }
            for (name, slow) in &slows {
                let watched = watch.is_some();
                let by_running = ruvllm_bench::maskbench::by_running(slow);
                let running = by_running.len();
                println!(
                    "{name}: {} masks over {} ms{}",
                    slow.len(),
                    ruvllm_bench::maskbench::SLOW_MASK_US / 1000.0,
                    if watched {
                        format!(" ({running} of them over it running)")
                    } else {
                        String::new()
                    }
                );
                if watched {
                    for m in by_running.iter().take(show) {
                        println!(
                            "{name}: slow mask {:.1} ms running in {}",
                            m.running_us() / 1000.0,
                            m.file
                        );
                    }
                }
                for m in slow.iter().take(show) {
                    let not_running = if watched {
                        format!(" ({:.1} ms of it not running)", m.stalled_us / 1000.0)
                    } else {
                        String::new()
                    };
                    println!(
                        "{name}: slow mask {:.1} ms{not_running} in {}",
                        m.us / 1000.0,
                        m.file
                    );
                }
            }
            for (name, errors, fa, fr) in details {
                for (f, e) in errors.iter().take(show) {
                    println!("{name}: compile error {f}: {e}");
                }
                if errors.len() > show {
                    println!("{name}: ... {} more compile errors", errors.len() - show);
                }
                for (f, t) in fa.iter().take(show) {
                    println!("{name}: INVALID ACCEPTED {f}: {t}");
                }
                for (f, t) in fr.iter().take(show) {
                    println!("{name}: valid rejected {f}: {t}");
                }
            }
            if let Some(v) = out.get_mut("ruvllm") {
                // Where the cold part of TBM goes: first uses of lexeme states.
                let (built, spent) = engine.table_build_totals();
                let tbm_total_ms = v["tbm_us"]["mean"].as_f64().unwrap_or(0.0)
                    * v["tokens"].as_f64().unwrap_or(0.0)
                    / 1000.0;
                let ms = spent.as_secs_f64() * 1000.0;
                println!(
                    "ruvllm token tables: {built} computed, {ms:.1} ms in first uses ({:.0}% of {tbm_total_ms:.0} ms of TBM)",
                    100.0 * ms / tbm_total_ms.max(1e-9)
                );
                v["tables"] = serde_json::json!({"computed": built, "first_use_ms": ms});
            }
            if verify_tables {
                let (checked, differ, which) = engine.table_checks();
                println!(
                    "ruvllm token tables verified: {checked} checked against the table by definition, {differ} differ (the mask times above include the checks)"
                );
                for w in &which {
                    println!("ruvllm: TABLE DIFFERS {w}");
                }
                if differ > 0 {
                    anyhow::bail!(
                        "{differ} of {checked} token tables differ from the table by definition"
                    );
                }
                if checked == 0 {
                    anyhow::bail!("--verify-tables checked no token table (no ruvllm masks ran)");
                }
            }
            if let Some(path) = json {
                let mut doc = serde_json::json!({"files": files.len(), "engines": out});
                if let Some(c) = &common {
                    doc["ttfm_common"] = c.to_json();
                }
                std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
            }
            if let Some(path) = markdown {
                let info = ruvllm_bench::maskbench::RunInfo {
                    // The reproducible form of this very invocation.
                    command: std::iter::once("cargo run --release -p ruvllm-bench --".to_string())
                        .chain(std::env::args().skip(1).map(|a| {
                            if a.contains(' ') {
                                format!("'{a}'")
                            } else {
                                a
                            }
                        }))
                        .collect::<Vec<_>>()
                        .join(" "),
                    files: files.len(),
                    stall_watch_us: watch.as_ref().and(stall_watch_us),
                    tokenizer: tokenizer.display().to_string(),
                    vocab_ms,
                    vocab_bytes: vocab.memory(),
                    llg_vocab_ms,
                    wall_s: t_run.elapsed().as_secs_f64(),
                    peak_rss_kib: ruvllm_bench::maskbench::peak_rss_kib(),
                };
                std::fs::write(
                    &path,
                    ruvllm_bench::maskbench::markdown(&info, &report, common.as_ref()),
                )?;
            }
            Ok(())
        }
    }
}

/// The e2e settings every backend runs under.
struct E2eRun<'a> {
    maskbench: &'a std::path::Path,
    gbnf: &'a std::path::Path,
    seeds: u64,
    temperature: f32,
    max_tokens: &'a [usize],
    validity: bool,
    speed_reps: u64,
}

impl E2eRun<'_> {
    /// The validity and speed parts on one backend.
    fn run<B: ruvllm_runtime::LlmBackend + ruvllm_runtime::ModelBackend>(
        &self,
        b: &B,
        name: &str,
    ) -> Result<ruvllm_bench::e2e::BackendRun> {
        use ruvllm_bench::e2e;
        let validity = if self.validity {
            e2e::validity(
                b,
                self.maskbench,
                self.gbnf,
                e2e::SCHEMAS,
                e2e::GRAMMARS,
                self.seeds,
                self.temperature,
                self.max_tokens,
                |r| {
                    eprintln!(
                        "{name:6} {:5} {:30} max {:4} seed {} finish={:6} tokens={:4} shortest={:?} {}",
                        if r.ok { "ok" } else { "FAIL" },
                        r.case,
                        r.budget,
                        r.seed,
                        r.finish,
                        r.tokens,
                        r.shortest,
                        r.problem.as_deref().unwrap_or("")
                    )
                },
            )?
        } else {
            Vec::new()
        };
        let speed = e2e::speed(b, self.speed_reps, 128)?;
        Ok(e2e::BackendRun {
            backend: name.to_string(),
            validity,
            speed,
        })
    }
}
