//! `ruvllm`: grammar tools (and, as the project grows, generation and the server).
//!
//! Only results go to stdout; errors go to stderr with a non-zero exit status.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, SchemaRegistry};
use ruvllm_engine::{
    Builtin, CheckResult, CompiledGrammar, Engine, Grammar, Limits, Matcher, Vocabulary,
};
use ruvllm_runtime::{JsonError, JsonSchema, JsonValidator};

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
mod limits;
mod serve;

#[derive(Subcommand)]
enum Cmd {
    /// Generate text with a local GGUF model, optionally constrained by a JSON Schema,
    /// GBNF grammar, regex or choice list. Only the generated text goes to stdout.
    Generate(generate::GenerateArgs),
    /// Serve the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions,
    /// /v1/models), Ollama (/api/chat, /api/generate, /api/tags) and llama.cpp
    /// (/completion), with structured output and tool calls.
    Serve(serve::ServeArgs),
    /// Grammar tools: check text against a grammar, show token masks.
    #[command(subcommand)]
    Grammar(GrammarCmd),
    /// JSON Schema tools: compile (or explain why not), convert to GBNF.
    #[command(subcommand)]
    Schema(SchemaCmd),
    /// Validate a JSON document against a schema. Exit status 0 when valid, 1 when not
    /// (each violation is printed with its JSON pointer), 2 on errors.
    Validate {
        /// The JSON Schema file.
        #[arg(long)]
        schema: PathBuf,
        /// The document: a file, or `-` (the default) for stdin.
        #[arg(default_value = "-")]
        input: String,
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

/// Reads a file, or stdin for `-`.
pub(crate) fn read_input(input: &str) -> Result<String> {
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

fn load_json_schema(p: &PathBuf, registry: Option<&SchemaRegistry>) -> Result<JsonSchema> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    JsonSchema::from_value_with(v, registry).with_context(|| format!("in {}", p.display()))
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
    /// Print the shortest completion after a text prefix: the fewest tokens of the
    /// vocabulary that make the output complete (what budget-aware decoding needs at
    /// least), and their text. Exit status 1 when none is found.
    Complete {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// tokenizer.json, GGUF model, or *.tiktoken file.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Output so far (raw text, need not end on a token boundary).
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

/// Where the grammar comes from: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct GrammarSource {
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

/// A grammar source plus the options that apply to it.
#[derive(Args)]
struct GrammarArgs {
    #[command(flatten)]
    src: GrammarSource,
    /// With --schema: accept object properties in any order (default: schema order).
    #[arg(long, requires = "schema")]
    any_order: bool,
}

/// A matcher of `grammar` over the vocabulary in `tokenizer`, after the raw text
/// `prefix` (an error naming the byte where the grammar refuses it).
fn matcher_after(
    grammar: &GrammarArgs,
    tokenizer: &PathBuf,
    prefix: &str,
    limits: &Limits,
    registry: Option<&Arc<SchemaRegistry>>,
) -> Result<(Arc<Vocabulary>, Matcher)> {
    let g = grammar.load(limits, registry)?;
    let vocab = Arc::new(
        Vocabulary::from_file(tokenizer)
            .with_context(|| format!("loading {}", tokenizer.display()))?,
    );
    let c = Engine::new(vocab.clone()).constraint(&g, limits)?;
    let mut m = Matcher::new(&c)?;
    if let CheckResult::Rejected { at, expected } = m.check_bytes(prefix.as_bytes())? {
        bail!(
            "the prefix is rejected at byte {at}; expected: {}",
            expected.join(" | ")
        );
    }
    Ok((vocab, m))
}

fn load_schema(
    p: &PathBuf,
    strict: bool,
    any_order: bool,
    registry: Option<&Arc<SchemaRegistry>>,
) -> Result<Grammar> {
    load_schema_with(p, strict, any_order, registry, false)
}

/// [`load_schema`]; `plain_numbers` for a grammar without semantic checks on numbers
/// (GBNF output: see `SchemaOptions::plain_numbers`).
fn load_schema_with(
    p: &PathBuf,
    strict: bool,
    any_order: bool,
    registry: Option<&Arc<SchemaRegistry>>,
    plain_numbers: bool,
) -> Result<Grammar> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    let opts = SchemaOptions {
        strict,
        any_order,
        registry: registry.cloned(),
        plain_numbers,
        ..SchemaOptions::default()
    };
    schema_to_grammar(&v, &opts).with_context(|| format!("in {}", p.display()))
}

impl GrammarArgs {
    fn load(&self, limits: &Limits, registry: Option<&Arc<SchemaRegistry>>) -> Result<Grammar> {
        if let Some(p) = &self.src.gbnf {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            return Grammar::from_gbnf(&text, limits)
                .with_context(|| format!("in {}", p.display()));
        }
        if let Some(r) = &self.src.regex {
            return Ok(Grammar::from_regex(r, limits)?);
        }
        if let Some(c) = &self.src.choice {
            return Ok(Grammar::from_choices(c)?);
        }
        if let Some(b) = &self.src.builtin {
            return Ok(Grammar::builtin(Builtin::from_name(b)?, limits)?);
        }
        if let Some(p) = &self.src.schema {
            return load_schema(p, false, self.any_order, registry);
        }
        bail!("no grammar given")
    }
}

fn main() -> ExitCode {
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
        Cmd::Validate { schema, input } => {
            let s = load_json_schema(&schema, reg.as_deref())?;
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
        Cmd::Repair { schema, input } => {
            let s = schema
                .as_ref()
                .map(|p| load_json_schema(p, reg.as_deref()))
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
        Cmd::Schema(SchemaCmd::Compile {
            file,
            strict,
            any_order,
        }) => {
            let t0 = std::time::Instant::now();
            let g = load_schema(&file, strict, any_order, reg.as_ref())?;
            let cg = CompiledGrammar::new(&g, &limits)?;
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
        Cmd::Schema(SchemaCmd::ToGbnf {
            file,
            strict,
            any_order,
        }) => {
            // Numbers in plain notation only: their other spellings need a check of the
            // exact value, which GBNF cannot carry.
            let g = load_schema_with(&file, strict, any_order, reg.as_ref(), true)?;
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
            let g = grammar.load(&limits, reg.as_ref())?;
            // Checking text needs no vocabulary: a one-token dummy one will do.
            let vocab = Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![])?;
            let c = Engine::new(Arc::new(vocab)).constraint(&g, &limits)?;
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
            let (vocab, mut m) =
                matcher_after(&grammar, &tokenizer, &prefix, &limits, reg.as_ref())?;
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
        Cmd::Grammar(GrammarCmd::Complete {
            grammar,
            tokenizer,
            prefix,
        }) => {
            let (vocab, mut m) =
                matcher_after(&grammar, &tokenizer, &prefix, &limits, reg.as_ref())?;
            let t0 = std::time::Instant::now();
            let w = m.shortest_completion()?;
            let elapsed = t0.elapsed();
            let Some(w) = w else {
                println!(
                    "no completion found (a semantic check closes every way on, or the \
                     search past one gave up); {:.1} us",
                    elapsed.as_secs_f64() * 1e6
                );
                return Ok(ExitCode::from(1));
            };
            println!(
                "shortest completion: {} tokens, {} bytes; computed in {:.1} us",
                w.len(),
                w.text().len(),
                elapsed.as_secs_f64() * 1e6
            );
            println!("{}", String::from_utf8_lossy(w.text()));
            let pieces: Vec<String> = w
                .tokens()
                .iter()
                .map(|&t| format!("{:?}", String::from_utf8_lossy(vocab.token_bytes(t))))
                .collect();
            println!("tokens: {}", pieces.join(" "));
            Ok(ExitCode::SUCCESS)
        }
    }
}
