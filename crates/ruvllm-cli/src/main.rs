//! `ruvllm`: grammar tools (and, as the project grows, generation and the server).
//!
//! Only results go to stdout; errors go to stderr with a non-zero exit status.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
use ruvllm_engine::{
    Builtin, CheckResult, CompiledGrammar, Constraint, Grammar, Limits, Matcher, Vocabulary,
};

#[derive(Parser)]
#[command(
    name = "ruvllm",
    version,
    about = "Structured output for language models: grammars, schemas, generation"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Grammar tools: check text against a grammar, show token masks.
    #[command(subcommand)]
    Grammar(GrammarCmd),
    /// JSON Schema tools: compile (or explain why not), convert to GBNF.
    #[command(subcommand)]
    Schema(SchemaCmd),
}

#[derive(Subcommand)]
enum SchemaCmd {
    /// Compile a JSON Schema: print grammar statistics, or the unsupported keyword and its
    /// JSON pointer (exit status 2).
    Compile {
        /// The schema file.
        file: PathBuf,
        /// OpenAI-style strict mode (additionalProperties false where not given).
        #[arg(long)]
        strict: bool,
    },
    /// Print a GBNF grammar equivalent to the schema.
    ToGbnf {
        /// The schema file.
        file: PathBuf,
        /// OpenAI-style strict mode.
        #[arg(long)]
        strict: bool,
    },
}

#[derive(Subcommand)]
enum GrammarCmd {
    /// Check text against a grammar: accepted, incomplete, or rejected at byte N.
    /// Exit status 0 when accepted, 1 otherwise.
    Check {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// The text to check.
        #[arg(long, conflicts_with = "file")]
        text: Option<String>,
        /// A file holding the text to check.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Print the tokens a grammar allows after a text prefix (count and a sample).
    Mask {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// tokenizer.json, GGUF model, or *.tiktoken file.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Output so far (raw text, need not end on a token boundary).
        #[arg(long, default_value = "")]
        prefix: String,
        /// How many allowed tokens to list.
        #[arg(long, default_value_t = 20)]
        sample: usize,
    },
}

/// Where the grammar comes from: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct GrammarArgs {
    /// A GBNF grammar file (llama.cpp format).
    #[arg(long)]
    gbnf: Option<PathBuf>,
    /// A regular expression the whole output must match.
    #[arg(long)]
    regex: Option<String>,
    /// Comma-separated literal choices.
    #[arg(long, value_delimiter = ',')]
    choice: Option<Vec<String>>,
    /// A built-in grammar: json, json_object, jsonl, csv, xml, xml:NAME,NAME.
    #[arg(long)]
    builtin: Option<String>,
    /// A JSON Schema file.
    #[arg(long)]
    schema: Option<PathBuf>,
}

fn load_schema(p: &PathBuf, strict: bool) -> Result<Grammar> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    let opts = SchemaOptions {
        strict,
        ..SchemaOptions::default()
    };
    schema_to_grammar(&v, &opts).with_context(|| format!("in {}", p.display()))
}

impl GrammarArgs {
    fn load(&self, limits: &Limits) -> Result<Grammar> {
        if let Some(p) = &self.gbnf {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            return Grammar::from_gbnf(&text, limits)
                .with_context(|| format!("in {}", p.display()));
        }
        if let Some(r) = &self.regex {
            return Ok(Grammar::from_regex(r, limits)?);
        }
        if let Some(c) = &self.choice {
            return Ok(Grammar::from_choices(c)?);
        }
        if let Some(b) = &self.builtin {
            return Ok(Grammar::builtin(Builtin::from_name(b)?, limits)?);
        }
        if let Some(p) = &self.schema {
            return load_schema(p, false);
        }
        bail!("no grammar given")
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let limits = Limits::default();
    match cli.cmd {
        Cmd::Schema(SchemaCmd::Compile { file, strict }) => {
            let t0 = std::time::Instant::now();
            let g = load_schema(&file, strict)?;
            let cg = CompiledGrammar::new(&g, &limits)?;
            let st = cg.stats();
            println!("ok: {} IR rules; compiled to {} rules, {} positions, {} lexemes with {} DFA states ({} KiB); {:.1} ms",
                g.rules.len(), st.rules, st.positions, st.lexemes, st.lexeme_states, st.dfa_bytes / 1024, t0.elapsed().as_secs_f64() * 1e3);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Schema(SchemaCmd::ToGbnf { file, strict }) => {
            let g = load_schema(&file, strict)?;
            print!("{}", g.to_gbnf().map_err(anyhow::Error::msg)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Grammar(GrammarCmd::Check {
            grammar,
            text,
            file,
        }) => {
            let text = match (text, file) {
                (Some(t), _) => t.into_bytes(),
                (None, Some(f)) => {
                    std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?
                }
                (None, None) => bail!("give --text or --file"),
            };
            let g = grammar.load(&limits)?;
            // Checking text needs no vocabulary: a one-token dummy one will do.
            let vocab = Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![])?;
            let c = Constraint::new(&g, Arc::new(vocab), &limits)?;
            let mut m = Matcher::new(&c)?;
            match m.check_bytes(&text)? {
                CheckResult::Accepted => {
                    println!("accepted ({} bytes)", text.len());
                    Ok(ExitCode::SUCCESS)
                }
                CheckResult::Incomplete { expected } => {
                    println!(
                        "incomplete: all {} bytes fit, but the text cannot end here",
                        text.len()
                    );
                    println!("next byte must be one of {}", m.next_bytes()?.describe());
                    println!("expected next: {}", expected.join(" | "));
                    Ok(ExitCode::from(1))
                }
                CheckResult::Rejected { at, expected } => {
                    let before = &text[..at];
                    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
                    let col = before.len()
                        - before
                            .iter()
                            .rposition(|&b| b == b'\n')
                            .map(|p| p + 1)
                            .unwrap_or(0)
                        + 1;
                    let found =
                        String::from_utf8_lossy(&text[at..(at + 4).min(text.len())]).into_owned();
                    println!("rejected at byte {at} (line {line}, column {col}), found {found:?}");
                    println!(
                        "the byte there must be one of {}",
                        m.next_bytes()?.describe()
                    );
                    println!("expected: {}", expected.join(" | "));
                    Ok(ExitCode::from(1))
                }
            }
        }
        Cmd::Grammar(GrammarCmd::Mask {
            grammar,
            tokenizer,
            prefix,
            sample,
        }) => {
            let g = grammar.load(&limits)?;
            let vocab = Arc::new(
                Vocabulary::from_file(&tokenizer)
                    .with_context(|| format!("loading {}", tokenizer.display()))?,
            );
            let c = Constraint::new(&g, vocab.clone(), &limits)?;
            let mut m = Matcher::new(&c)?;
            if let CheckResult::Rejected { at, expected } = m.check_bytes(prefix.as_bytes())? {
                bail!(
                    "the prefix is rejected at byte {at}; expected: {}",
                    expected.join(" | ")
                );
            }
            let mut mask = vec![0u32; vocab.mask_words()];
            let t0 = std::time::Instant::now();
            m.compute_mask(&mut mask)?;
            let elapsed = t0.elapsed();
            let allowed: Vec<u32> = (0..vocab.len() as u32)
                .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
                .collect();
            let eos = vocab.eos_tokens().iter().any(|e| allowed.contains(e));
            println!(
                "{} of {} tokens allowed; EOS {}; computed in {:.1} us",
                allowed.len(),
                vocab.len(),
                if eos { "allowed" } else { "not allowed" },
                elapsed.as_secs_f64() * 1e6
            );
            for &t in allowed.iter().take(sample) {
                println!(
                    "{t:>8}  {:?}",
                    String::from_utf8_lossy(vocab.token_bytes(t))
                );
            }
            if allowed.len() > sample {
                println!("... and {} more", allowed.len() - sample);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
